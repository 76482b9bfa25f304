"""Dataset registry: a name, where the data comes from, and the function that loads it."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from fairdp.data._dataset import Dataset
from fairdp.errors import InputError

# How a dataset reaches the user: fetched and checksummed by fairdp, read from files the
# user supplies (licences forbid redistribution), or generated.
KINDS = ("fetched", "user files", "generated", "packaged")


@dataclass(frozen=True)
class DatasetEntry:
    name: str
    kind: str
    description: str
    load: Callable[..., Dataset]
    files: tuple = ()  # RemoteFile entries for kind == "fetched"

    def options(self) -> dict[str, object]:
        """Loader options and their defaults (``inspect.Parameter.empty`` when required)."""
        return {p.name: p.default for p in inspect.signature(self.load).parameters.values()}


_REGISTRY: dict[str, DatasetEntry] = {}


def register(name: str, *, kind: str, description: str, files: tuple = ()):
    """Decorator: register ``load(**options) -> Dataset`` under ``name``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")

    def wrap(load: Callable[..., Dataset]) -> Callable[..., Dataset]:
        if name in _REGISTRY:
            raise ValueError(f"dataset {name!r} registered twice")
        _REGISTRY[name] = DatasetEntry(name, kind, description, load, tuple(files))
        return load

    return wrap


def dataset_names() -> list[str]:
    return sorted(_REGISTRY)


def get_entry(name: str) -> DatasetEntry:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise InputError(f"dataset: unknown dataset '{name}'; known: {', '.join(dataset_names())}") from None


def load_dataset(name: str, **options) -> Dataset:
    """Load a registered dataset; unknown or missing options are input errors naming the option."""
    entry = get_entry(name)
    known = entry.options()
    for key in options:
        if key not in known:
            raise InputError(
                f"dataset.{key}: '{name}' has no option '{key}'; options: {', '.join(known) or 'none'}"
            )
    for key, default in known.items():
        if default is inspect.Parameter.empty and key not in options:
            raise InputError(f"dataset.{key}: '{name}' needs option '{key}'")
    return entry.load(**options)
