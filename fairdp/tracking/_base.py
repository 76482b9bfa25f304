"""The tracker interface, its registry and the study file's ``tracking:`` block."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import pandas as pd

from fairdp.errors import InputError

Key = tuple[str, int, str]  # (method, seed, config_id)


@dataclass(frozen=True)
class ConfigRecord:
    """What a tracker logs of one stored config: its identity, hyperparameters, final metrics
    (the row's numbers, eps_formal included), per-epoch valid curves and how its pack ended."""

    study: str
    dataset: str
    method: str
    seed: int
    config_id: str
    params: dict
    metrics: dict
    curves: pd.DataFrame = field(repr=False)  # epoch, valid_<curve>...; empty when none
    status: str = "ok"
    error: str | None = None

    @property
    def key(self) -> Key:
        return (self.method, self.seed, self.config_id)


class Tracker(ABC):
    """One tracking backend. ``open`` before anything trains (a wrong address is the user's
    error, refused there); ``logged`` says which configs of ``results`` it holds, so nothing
    is logged twice across runs; ``log`` one stored config; ``close`` at the end."""

    name: str = ""
    options: tuple[str, ...] = ()
    choices: dict[str, tuple[str, ...]] = {}  # option -> the values it takes, where it is a choice

    def __init__(self, study: str, results: str, **options):
        self.study, self.results, self.options_given = study, results, options

    @abstractmethod
    def open(self) -> None: ...

    @abstractmethod
    def logged(self) -> set[Key]: ...

    @abstractmethod
    def log(self, record: ConfigRecord) -> None: ...

    def close(self) -> None:  # noqa: B027 - optional
        pass

    def where(self) -> str:
        """The tracker's address as messages name it."""
        return self.name


_REGISTRY: dict[str, type[Tracker]] = {}


def register_tracker(cls: type[Tracker]) -> type[Tracker]:
    if not cls.name:
        raise ValueError(f"{cls.__qualname__}: a tracker needs a name")
    _REGISTRY[cls.name] = cls
    return cls


def get_tracker(name: str) -> type[Tracker]:
    if name not in _REGISTRY:
        raise InputError(f"tracking: unknown tracker {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def tracker_names() -> list[str]:
    return sorted(_REGISTRY)


@dataclass(frozen=True)
class TrackingSpec:
    """A study's ``tracking:`` block: the tracker's name and its options."""

    tracker: str
    options: dict

    def make(self, study: str, results: str) -> Tracker:
        return get_tracker(self.tracker)(study, results, **self.options)


def parse_tracking(value) -> TrackingSpec:
    """``tracking: {mlflow: {uri: ..., experiment: ...}}``: one tracker, its options checked."""
    if not isinstance(value, dict) or len(value) != 1:
        raise InputError(f"tracking: must name one tracker ({', '.join(tracker_names())}) with its options, "
                         f"e.g. tracking: {{mlflow: {{uri: sqlite:///mlflow.db}}}}; got {value!r}")
    (name, options), = value.items()
    if not isinstance(name, str) or not name.isprintable():
        raise InputError(f"tracking: a tracker's name must be one of {', '.join(tracker_names())}, got {name!r}")
    cls = get_tracker(name)
    options = options or {}
    if not isinstance(options, dict):
        raise InputError(f"tracking.{name}: must be a mapping of options ({', '.join(cls.options)}), got {options!r}")
    for key, v in options.items():
        if not isinstance(key, str) or key not in cls.options:
            raise InputError(f"tracking.{name}.{key}: unknown key; allowed here: {', '.join(cls.options)}"
                             if isinstance(key, str) and key.isprintable() else
                             f"tracking.{name}: unknown key {key!r}; allowed here: {', '.join(cls.options)}")
        if not isinstance(v, str) or not v:
            raise InputError(f"tracking.{name}.{key}: must be a non-empty string, got {v!r}")
        if key in cls.choices and v not in cls.choices[key]:
            raise InputError(f"tracking.{name}.{key}: must be one of {', '.join(cls.choices[key])}, got {v!r}")
    return TrackingSpec(str(name), dict(options))


def finite(value) -> float | None:
    """A metric value a tracker can store: a finite float, else None (left out)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None
