"""Method registry: one module per method registers one instance.

Methods from outside the package register the same way: a study's ``plugins:`` imports
their modules (``fairdp.methods.load_plugins``), and installed packages declare them in the
``fairdp.methods`` entry-point group, loaded the first time the registry is read.
"""

from __future__ import annotations

import re

from fairdp import schema
from fairdp.errors import InputError
from fairdp.methods._base import Method

ENTRY_POINT_GROUP = "fairdp.methods"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_METHODS: dict[str, Method] = {}
_entry_points_loaded = False


def register_method(cls: type[Method]) -> type[Method]:
    """Register ``cls`` under ``cls.name`` (a class decorator). Refused: a name taken or not
    lowercase letters, digits and '_' (it names results directories); a hyperparameter
    named like a result column, or with another column type than a registered method's
    hyperparameter of the same name (they share one column); a guarantee whose kind cannot
    be stated (``Method.guarantee_kind``: an unknown scope, relation or unit)."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"method class {cls.__qualname__}: name must be lowercase letters, digits and '_', "
                         f"got {name!r}")
    if name in _METHODS:
        raise ValueError(f"method {name!r} registered twice ({type(_METHODS[name]).__module__} and {cls.__module__})")
    names = [h.name for h in cls.hyperparams]
    if len(set(names)) != len(names):
        raise ValueError(f"method {name!r}: a hyperparameter declared twice in {names}")
    schema.hyperparameter_columns([h for m in _METHODS.values() for h in m.hyperparams] + list(cls.hyperparams))
    instance = cls()
    try:  # the kind every row of the method stores (``guarantee``): refused now, not at the first row
        instance.guarantee_kind  # noqa: B018
    except ValueError as e:
        raise ValueError(f"method {name!r}: privacy_scope, neighbour_relation, privacy_unit: {e}") from None
    _METHODS[name] = instance
    return cls


def _load_entry_points() -> None:
    """Import every installed ``fairdp.methods`` entry point once (a module that registers its
    methods, or a ``Method`` subclass to register)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if isinstance(obj, type) and issubclass(obj, Method) and obj.name not in _METHODS:
                register_method(obj)
        except Exception as e:  # noqa: BLE001 - a broken plugin is the user's one-line error
            raise InputError(f"entry point {ep.name} = {ep.value} ({ENTRY_POINT_GROUP}): "
                             f"{type(e).__name__}: {e}") from None


def get_method(name: str) -> Method:
    _load_entry_points()
    try:
        return _METHODS[name]
    except KeyError:
        raise InputError(f"methods.{name}: unknown method; known: {', '.join(sorted(_METHODS))}") from None


def method_names() -> list[str]:
    _load_entry_points()
    return sorted(_METHODS)


def builtin_method_names() -> list[str]:
    """The methods fairdp itself ships (defined in ``fairdp.methods``)."""
    return sorted(n for n, m in _METHODS.items() if type(m).__module__.startswith("fairdp.methods."))
