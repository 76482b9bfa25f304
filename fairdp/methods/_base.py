"""What every method declares (hyperparameters, paper grid, formal privacy) and how it trains a pack."""

from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from fairdp.data import Dataset
from fairdp.engine import (
    Architecture,
    ModelSpec,
    PackResult,
    TrainSettings,
    config_id,
    preset_for,
    train_pack,
)
from fairdp.errors import InputError


@dataclass(frozen=True)
class HyperParam:
    """A hyperparameter's valid range: (low, high] when ``low_open``, else [low, high]."""

    name: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    integer: bool = False
    choices: tuple | None = None
    doc: str = ""

    def validate(self, value, path: str):
        if self.choices is not None:
            if value not in self.choices:
                raise InputError(f"{path}: {value!r} is not one of {', '.join(map(str, self.choices))}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(f"{path}: must be a finite number, got {value!r}")
        if self.integer and value != int(value):
            raise InputError(f"{path}: must be an integer, got {value!r}")
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            raise InputError(f"{path}: must be {'>' if self.low_open else '>='} {self.low}, got {value!r}")
        if self.high is not None and value > self.high:
            raise InputError(f"{path}: must be <= {self.high}, got {value!r}")
        return int(value) if self.integer else float(value)


EPS = HyperParam("eps", low=0.0, low_open=True, doc="privacy budget of the Laplace layer")
LAM = HyperParam("lam", low=0.0, doc="adversarial weight lambda")


def arange_grid(start: float, stop: float, step: float) -> list[float]:
    """start, start+step, ... up to stop (inclusive within rounding), rounded to avoid 0.30000000000000004."""
    n = int(math.floor((stop - start) / step + 1e-9)) + 1
    return [round(start + i * step, 10) for i in range(n)]


class Method(ABC):
    """A registered method: ``name``, its hyperparameters and its paper grid."""

    name: ClassVar[str]
    hyperparams: ClassVar[tuple[HyperParam, ...]] = ()
    binary_only: ClassVar[bool] = False  # constraints written for y in {0, 1}

    def check_dataset(self, data: Dataset, path: str | None = None) -> None:
        """Refuse, before any training, a dataset this method cannot train on."""
        if self.binary_only and data.n_classes != 2:
            raise InputError(f"{path or 'methods.' + self.name}: '{self.name}' needs binary labels; "
                             f"'{data.name}' has {data.n_classes} classes")

    @abstractmethod
    def paper_grid(self, dataset: str) -> dict[str, list]:
        """Hyperparameter lists whose product is the paper's grid for this dataset."""

    @abstractmethod
    def train_pack(self, data: Dataset, configs: list[dict], seed: int, settings: TrainSettings,
                   arch: Architecture | None = None) -> PackResult:
        """Train the configs together; results carry predictions and attacker-visible representations."""

    def default_architecture(self, dataset: str) -> Architecture:
        return preset_for(dataset)

    def representation_dim(self, data: Dataset, arch: Architecture | None = None) -> int:
        """Width of the representation an attacker sees (the encoder's output by default)."""
        return (arch or self.default_architecture(data.name)).representation_dim

    def formal_privacy(self, config: dict, representation_dim: int) -> tuple[float, float]:
        """(eps, delta) the representation actually guarantees; non-private methods: (inf, 0)."""
        return math.inf, 0.0

    def validate_config(self, config: dict, path: str = "config") -> dict:
        known = {h.name: h for h in self.hyperparams}
        for key in config:
            if key not in known:
                raise InputError(f"{path}.{key}: '{self.name}' has no hyperparameter '{key}'; "
                                 f"it has: {', '.join(known) or 'none'}")
        missing = [k for k in known if k not in config]
        if missing:
            raise InputError(f"{path}.{missing[0]}: '{self.name}' needs a value for '{missing[0]}'")
        return {k: known[k].validate(v, f"{path}.{k}") for k, v in config.items()}

    def expand(self, grid: dict[str, list]) -> list[dict]:
        keys = [h.name for h in self.hyperparams]
        return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]

    def config_id(self, config: dict) -> str:
        return config_id(self.name, config)


class NeuralMethod(Method):
    """A method that is one setting of the packed encoder/classifier/adversary model."""

    spec: ClassVar[ModelSpec]

    def train_pack(self, data, configs, seed, settings, arch=None):
        configs = [self.validate_config(c) for c in configs]
        return train_pack(self.spec, arch or self.default_architecture(data.name), settings, data,
                          configs, [self.config_id(c) for c in configs], seed)

