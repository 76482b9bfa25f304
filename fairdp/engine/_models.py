"""The user's modules by name: a factory per role (encoder, classifier, adversary) named by
import path, ``"package.module:function"`` or ``"path/to/file.py:function"``, or by a name a
plugin registered (``register_model``, or the ``fairdp.models`` entry-point group).

A factory is called as ``factory(in_features, out_features, **kwargs)`` and returns an
``nn.Module`` that maps a batch of rows (B, in_features) to (B, out_features); the engine
packs K of them (``FunctionalPack``). ``ModelRef`` is the hashable, picklable description a
study stores and a worker resolves again: the factory's resolved name and its kwargs.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from torch import nn

from fairdp._imports import LOADED, import_target, resolve_target
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


def file_digest(path: str | Path) -> str:
    """The first 16 hex digits of the SHA-256 of a model file's bytes: what identifies its code."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


@dataclass(frozen=True)
class ModelRef:
    """A role's module: ``factory`` and its keyword arguments, sorted.

    ``factory`` is a registered name, an import path ``module:function``, or for a file
    ``path:function`` with the path relative to the study's folder (posix separators) and
    ``digest`` its content's (``file_digest``). That pair, not where the folder lies, is what
    rows store and what a resumed run is compared with: a study moved with its model file
    resumes, and a changed file is another module. ``location`` is the file's absolute path
    on this machine, where the driver and the workers import it from; it is not part of the
    identity (not compared, hashed, shown or stored)."""

    factory: str
    kwargs: tuple[tuple[str, object], ...] = field(default=())
    digest: str | None = None
    location: str | None = field(default=None, compare=False, repr=False)

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
        kwargs = {k: _keyword_value(v, f"{where}.{k}") for k, v in kwargs.items()}
        target = resolve_target(module, base_dir) if sep else None
        if target is not None and target.endswith(".py"):
            if not Path(target).is_file():
                raise InputError(f"{where}: {target}: no such file")
            base = Path(base_dir or ".").resolve()
            relative = Path(os.path.relpath(target, base)).as_posix()
            ref = cls(f"{relative}:{function}", tuple(sorted(kwargs.items())), file_digest(target), target)
        else:
            ref = cls(f"{target}:{function}" if sep else value, tuple(sorted(kwargs.items())))
        ref.resolve(where)  # refused now, by name, not in a worker
        return ref

    def with_kwargs(self, kwargs: dict) -> ModelRef:
        """This module with ``kwargs`` over its own keywords (a grid's swept ones)."""
        return replace(self, kwargs=tuple(sorted({**dict(self.kwargs), **kwargs}.items())))

    def resolve(self, where: str = "model") -> Callable[..., nn.Module]:
        module, sep, function = self.factory.rpartition(":")
        if not sep:
            _load_entry_points()
            if self.factory not in _MODELS:
                known = ", ".join(sorted(_MODELS)) or "none registered"
                raise InputError(f"{where}: no model named {self.factory!r} ({known}); or give "
                                 f"'module:function' or 'file.py:function'")
            return _MODELS[self.factory]
        target = self.location or resolve_target(module)
        # checked when the file is first imported in this process: what it imports is the module named
        if self.digest is not None and target not in LOADED and Path(target).is_file() \
                and file_digest(target) != self.digest:
            raise InputError(f"{where}: {target} changed since the study was read (its content is not the "
                             f"module the rows name); rerun the command")
        found = getattr(import_target(target, where, "a model file must only define modules and factories"),
                        function, None)
        if not callable(found):
            raise InputError(f"{where}: {module} has no function {function!r}")
        return found

    def build(self, in_features: int, out_features: int) -> nn.Module:
        return self.resolve()(in_features, out_features, **dict(self.kwargs))

    def to_dict(self) -> dict:
        """What rows store: factory, kwargs, and a file's digest (never its location)."""
        out = {"factory": self.factory, "kwargs": [list(kv) for kv in self.kwargs]}
        if self.digest is not None:
            out["digest"] = self.digest
        return out

    def describe(self) -> str:
        """``"file.py:function(k=v, ...)"`` with the file's name only."""
        module, sep, function = self.factory.rpartition(":")
        shown = f"{Path(module).name}:{function}" if sep and module.endswith(".py") else self.factory
        return shown + "(" + ", ".join(f"{k}={v!r}" for k, v in self.kwargs) + ")"


def _keyword_value(value, where: str):
    """A keyword's value as the identity holds it: scalars as they are, lists as tuples (so the
    module is hashable and its rows compare); anything else is refused by name."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_keyword_value(v, where) for v in value)
    raise InputError(f"{where}: a factory's keyword takes a number, a string, true/false, null or a list of "
                     f"those, got {type(value).__name__}")
