"""The user's modules by name: a factory per role (encoder, classifier, adversary) named by
import path, ``"package.module:function"`` or ``"path/to/file.py:function"``, or by a name a
plugin registered (``register_model``, or the ``fairdp.models`` entry-point group).

A factory is called as ``factory(in_features, out_features, **kwargs)`` and returns an
``nn.Module`` that maps a batch of rows (B, in_features) to (B, out_features); the engine
packs K of them (``FunctionalPack``). ``ModelRef`` is the hashable, picklable description a
study stores and a worker resolves again: the factory's resolved name and its kwargs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from torch import nn

from fairdp._imports import import_target, resolve_target
from fairdp.errors import InputError

ENTRY_POINT_GROUP = "fairdp.models"
_MODELS: dict[str, Callable[..., nn.Module]] = {}


def register_model(name: str):
    """Register a factory under ``name`` (a decorator): a study may then write ``name``
    instead of its import path."""
    def add(factory):
        if not callable(factory):
            raise TypeError(f"model {name!r}: {factory!r} is not callable")
        if name in _MODELS and _MODELS[name] is not factory:
            raise ValueError(f"model {name!r} registered twice")
        _MODELS[name] = factory
        return factory
    return add


def model_names() -> list[str]:
    """The registered model names, installed entry points included."""
    _load_entry_points()
    return sorted(_MODELS)


def _load_entry_points() -> None:
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _MODELS:
            continue
        try:
            register_model(ep.name)(ep.load())
        except Exception as e:  # noqa: BLE001 - a broken plugin is the user's one-line error
            raise InputError(f"entry point {ep.name} = {ep.value} ({ENTRY_POINT_GROUP}): "
                             f"{type(e).__name__}: {e}") from None


@dataclass(frozen=True)
class ModelRef:
    """A role's module: ``factory`` (a resolved import path, ``module:function`` with a file's
    absolute path as its module, or a registered name) and its keyword arguments, sorted."""

    factory: str
    kwargs: tuple[tuple[str, object], ...] = field(default=())

    @classmethod
    def parse(cls, value: object, where: str, base_dir: str | Path | None = None) -> ModelRef:
        """From a study: ``"module:function"``, ``"file.py:function"`` (relative to
        ``base_dir``), a registered name, or a mapping ``{factory: ..., <kwarg>: ...}``."""
        kwargs: dict = {}
        if isinstance(value, Mapping):
            kwargs = dict(value)
            value = kwargs.pop("factory", None)
            bad = [k for k in kwargs if not isinstance(k, str) or not k.isidentifier()]
            if bad:
                raise InputError(f"{where}.{bad[0]}: a factory's keyword must be a Python name")
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"{where}: needs a factory: 'module:function', 'file.py:function' or a registered "
                             f"model name, got {value!r}")
        module, sep, function = value.rpartition(":")
        if sep and not (module and function.isidentifier()):
            raise InputError(f"{where}: {value!r}: expected 'module:function' or 'file.py:function'")
        factory = f"{resolve_target(module, base_dir)}:{function}" if sep else value
        ref = cls(factory, tuple(sorted(kwargs.items())))
        ref.resolve(where)  # refused now, by name, not in a worker
        return ref

    def resolve(self, where: str = "model") -> Callable[..., nn.Module]:
        module, sep, function = self.factory.rpartition(":")
        if not sep:
            _load_entry_points()
            if self.factory not in _MODELS:
                known = ", ".join(sorted(_MODELS)) or "none registered"
                raise InputError(f"{where}: no model named {self.factory!r} ({known}); or give "
                                 f"'module:function' or 'file.py:function'")
            return _MODELS[self.factory]
        found = getattr(import_target(module, where, "a model file must only define modules and factories"),
                        function, None)
        if not callable(found):
            raise InputError(f"{where}: {module} has no function {function!r}")
        return found

    def build(self, in_features: int, out_features: int) -> nn.Module:
        return self.resolve()(in_features, out_features, **dict(self.kwargs))

    def describe(self) -> str:
        """``"file.py:function(k=v, ...)"`` with the file's name only."""
        module, sep, function = self.factory.rpartition(":")
        shown = f"{Path(module).name}:{function}" if sep and module.endswith(".py") else self.factory
        return shown + "(" + ", ".join(f"{k}={v!r}" for k, v in self.kwargs) + ")"
