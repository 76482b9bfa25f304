"""The method author's contract: what a neural method implements to train in fairdp's packed loop.

A method is a ``PackStep``: ``fit_pack`` (fairdp.engine) builds one per chunk of configs from a
``PackContext`` (the data on the device, the configs, their random streams, the settings) and
calls ``begin_epoch``, ``update`` (by default: ``loss`` backpropagated) for each ``Batch``,
``end_epoch`` and ``evaluate``; it returns a ``PackResult`` and reports an ``EpochReport`` after
each epoch. Configs are independent inside a step: config k's loss depends only on config k's
parameters and random streams, so one optimiser over the stack is K independent optimisers and
a config trained in a pack follows the run it would have alone. ``Method`` and
``register_method`` (fairdp.methods) register a step under a name.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from fairdp import _rng
from fairdp._rng import PackStream, bernoulli_mask, coins, dropout, normal, uniform
from fairdp.data import Dataset
from fairdp.engine._arch import Architecture
from fairdp.engine._seeds import stream_key
from fairdp.engine._settings import TrainSettings, resolve_precision
from fairdp.schema import FAIRNESS_METRICS

# the streams of ``PackContext.generators`` and the draws a step makes from them, (K, ...) each
__all__ = ["Batch", "EpochReport", "PackContext", "PackResult", "PackStep", "PackStream", "SplitTensors",
           "VALID_CURVES", "bernoulli_mask", "coins", "dropout", "normal", "uniform"]


@dataclass(frozen=True)
class SplitTensors:
    X: torch.Tensor  # (n, d) features
    y: torch.Tensor  # (n,) labels
    s: torch.Tensor  # (n,) sensitive group codes


@dataclass(frozen=True)
class Batch:
    """One minibatch of the train split: row indices and the step's inputs, labels and groups."""

    index: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    s: torch.Tensor


class PackContext:
    """What a step for one chunk of configs is built from: the data on the device, the configs,
    their random streams, the settings and architecture."""

    def __init__(self, data: Dataset, configs: list[dict], config_ids: list[str], seed: int,
                 settings: TrainSettings, arch: Architecture, device: torch.device):
        self.data, self.configs, self.config_ids, self.seed = data, list(configs), list(config_ids), seed
        self.settings, self.arch, self.device = settings, arch, device
        self.dtype = getattr(torch, settings.dtype)
        self.precision = resolve_precision(settings, device)
        self._generators: dict[str, _rng.PackStream] = {}
        self._splits: dict[str, SplitTensors] = {}

    @property
    def k(self) -> int:
        return len(self.configs)

    @property
    def lr(self) -> float:
        if self.settings.lr is None:
            raise ValueError("TrainSettings.lr is None: resolve it with the method's default first "
                             "(Method.effective_settings; Method.train_pack does)")
        return self.settings.lr

    def generators(self, stream: str) -> _rng.PackStream:
        """The configs' counter-based streams of ``stream`` (init, dropout, noise, eval_noise,
        predict, sample): config k's keyed by (seed, config id, stream) only, so its numbers do
        not depend on the pack. Draw from it with this module's ``uniform``, ``normal``,
        ``coins`` (exact rates, for privacy sampling), ``bernoulli_mask`` and ``dropout``, which
        give (K, ...) draws; privatise with ``fairdp.privacy``'s mechanisms."""
        if stream not in self._generators:
            self._generators[stream] = _rng.PackStream.from_names(
                [stream_key(self.seed, c, stream) for c in self.config_ids], self.device)
        return self._generators[stream]

    def per_config(self, key: str) -> torch.Tensor:
        """Hyperparameter ``key`` of every config as a (K,) tensor of the training dtype."""
        return torch.tensor([float(c[key]) for c in self.configs], device=self.device, dtype=self.dtype)

    def subset(self, index: list[int]) -> PackContext:
        """The context of configs ``index`` of this one, in that order, continuing their random
        streams: the generators are the same objects, so the subset draws what the whole pack
        would have drawn for those configs."""
        sub = PackContext(self.data, [self.configs[i] for i in index], [self.config_ids[i] for i in index],
                          self.seed, self.settings, self.arch, self.device)
        sub._generators = {stream: gens[index] for stream, gens in self._generators.items()}
        sub._splits = self._splits
        return sub

    def split(self, name: str) -> SplitTensors:
        if name not in self._splits:
            part = self.data.split(name)
            self._splits[name] = SplitTensors(torch.as_tensor(part.X, device=self.device, dtype=self.dtype),
                                              torch.as_tensor(part.y, device=self.device),
                                              torch.as_tensor(part.s, device=self.device))
        return self._splits[name]


class PackStep(ABC):
    """A neural method's part of the loop for one chunk of configs.

    Subclasses set ``self.model`` (an ``nn.Module`` whose parameters all have the config axis
    first) and implement ``evaluate`` and either ``loss`` (the default ``update``
    backpropagates its sum over configs and steps the optimiser) or ``update`` itself.
    """

    # "best": each config keeps the epoch with its best valid accuracy (FEDERATE D.4);
    # "last": the model after the last epoch (Tran et al.'s Algorithm 1 returns it).
    selection: ClassVar[str] = "best"
    # Attributes of this class (each class declares its own; ``subset`` gathers them over the
    # class's bases) that hold one entry per config along their first axis: tensors, arrays or
    # lists. Per-config state of another shape is sliced in ``slice_state``. A class that sets
    # up state in ``__init__`` must declare one or the other, even empty, before a pack of it
    # can be pruned (``subset``): state nobody slices would silently broadcast over survivors.
    per_config_attributes: ClassVar[tuple[str, ...]] = ()
    model: nn.Module

    def __init__(self, ctx: PackContext):
        self.ctx = ctx

    def inputs(self, split: str) -> torch.Tensor:
        """The rows the model reads for ``split``: the dataset's features unless overridden."""
        return self.ctx.split(split).X

    def optimizer(self) -> torch.optim.Optimizer:
        """Adam at ``train.lr`` (FEDERATE D.4); one Adam over the stack is K independent Adams."""
        return torch.optim.Adam(self.model.parameters(), lr=self.ctx.lr)

    def begin_epoch(self, epoch: int) -> None:  # noqa: B027 - an optional hook
        """Called before epoch ``epoch`` (0-based) in training mode."""

    def loss(self, batch: Batch) -> torch.Tensor:
        """Per-config training loss (K,) of one minibatch."""
        raise NotImplementedError(f"{type(self).__name__} must implement loss() or update()")

    def update(self, batch: Batch, optimizer: torch.optim.Optimizer) -> None:
        """One training step on ``batch``."""
        loss = self.loss(batch)
        optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()
        optimizer.step()

    def end_epoch(self, epoch: int) -> None:  # noqa: B027 - an optional hook
        """Called after the last minibatch of epoch ``epoch``, before validation."""

    @abstractmethod
    def evaluate(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(representation an attacker sees (K, n, D), logits (K, n, C)) for rows ``x``;
        called in eval mode without gradients, on at most ``EVAL_CHUNK`` rows at a time."""

    def diagnostics(self) -> dict[str, np.ndarray]:
        """Method-specific per-config arrays (K,) to report, e.g. PF-LD's clipped fractions."""
        return {}

    def slice_state(self, index: list[int]) -> None:  # noqa: B027 - an optional hook
        """Keep configs ``index`` of per-config state that ``per_config_attributes`` cannot
        describe (another axis, a mapping by notion). Called on the new step, whose ``ctx``,
        ``model`` and declared attributes are already the subset's."""

    def subset(self, index: list[int]) -> PackStep:
        """A step training configs ``index`` of this one (ascending positions) from where they
        are: their parameters, per-config state and random streams, so each continues exactly
        as it would have in the whole pack. This step is left as it was."""
        declared = _per_config_attributes(type(self))
        step = copy.copy(self)
        step.ctx = self.ctx.subset(index)
        step.model = _sliced_module(self.model, index)
        for name in declared:
            value = getattr(self, name)
            if value is not None:
                setattr(step, name, _take(value, index))
        step.slice_state(index)
        return step


VALID_CURVES = ("accuracy", "loss", *FAIRNESS_METRICS)
"""What ``PackResult.valid_history`` records per epoch on the valid split: accuracy and every
fairness gap (percent), and the task's mean cross-entropy."""


@dataclass
class PackResult:
    """Per-config outcomes of one pack, arrays with a leading config axis K."""

    configs: list[dict]
    best_epoch: np.ndarray                       # (K,) 1-based epoch of the kept model
    # curve name (VALID_CURVES) -> (K, epochs): each epoch's model on valid, NaN after a config
    # stopped; empty for methods not trained by epochs
    valid_history: dict[str, np.ndarray]
    predictions: dict[str, np.ndarray]           # split -> (K, n_split) predicted labels
    representations: dict[str, np.ndarray]       # split -> (K, n_split, D), what an attacker sees
    duration_s: float
    precision: str | None = None                 # what the pack computed in (resolve_precision)
    # how its model packed the configs: "hand-packed", "functional" or "mixed" (engine
    # ``packing_of``), None for a method without a network or with layers of its own
    packing: str | None = None
    model: nn.Module | None = field(default=None, repr=False)  # the trained pack when it was one chunk
    # (eps, delta) of each config, from the method's privacy hook (``Method.train_pack`` sets it)
    privacy: tuple | None = None
    # each config's dp_accounting event as JSON, None where the method has none (``Method.train_pack``)
    privacy_events: tuple | None = None
    diagnostics: dict = field(default_factory=dict)  # method-specific per-config arrays
    # (K,) the rung epoch at which each config stopped, 0 for one trained every epoch; None
    # when the pack was not pruned (``TrainSettings.prune`` unset)
    pruned_at: np.ndarray | None = None
    # seconds of ``duration_s`` spent before the pack was resumed from a checkpoint (0: not resumed)
    resumed_s: float = 0.0

    @property
    def valid_accuracy_history(self) -> np.ndarray:
        """(K, epochs) valid accuracy, percent; (K, 0) for a method not trained by epochs."""
        return self.valid_history.get("accuracy", np.zeros((len(self.configs), 0)))


@dataclass(frozen=True)
class EpochReport:
    """What a progress callback receives after each epoch of a chunk of configs."""

    epoch: int                   # 1-based
    epochs: int
    configs: int                 # configs in this chunk
    valid_accuracy: np.ndarray   # (configs,), percent


def _per_config_attributes(cls: type) -> tuple[str, ...]:
    """The per-config attributes a step class and its bases declare; ValueError if a class
    sets up state in ``__init__`` and declares neither them nor ``slice_state``."""
    names: list[str] = []
    for c in cls.__mro__:
        if c is PackStep:
            break
        own = c.__dict__
        if "__init__" in own and "per_config_attributes" not in own and "slice_state" not in own:
            raise ValueError(f"{c.__qualname__} sets up state in __init__ but declares no per_config_attributes "
                             f"or slice_state, so a pruned pack cannot keep its state per config; declare them "
                             f"(an empty tuple if it holds none)")
        names += [n for n in own.get("per_config_attributes", ()) if n not in names]
    return tuple(names)


def _take(value, index: list[int]):
    """Entries ``index`` along the first axis of a tensor, array or list."""
    if isinstance(value, torch.Tensor):
        return value[torch.as_tensor(index, dtype=torch.long, device=value.device)]
    if isinstance(value, np.ndarray):
        return value[index]
    if isinstance(value, (list, tuple)):
        return type(value)(value[i] for i in index)
    raise TypeError(f"a per-config attribute must be a tensor, array or list, got {type(value).__name__}")


def _sliced_module(module: nn.Module, index: list[int]) -> nn.Module:
    """A copy of ``module`` whose parameters keep configs ``index`` of their first axis; the
    deepcopy memo hands it the sliced parameters instead of copying the whole ones."""
    memo = {}
    for p in module.parameters():
        memo[id(p)] = nn.Parameter(p.detach()[torch.as_tensor(index, dtype=torch.long, device=p.device)].clone(),
                                   requires_grad=p.requires_grad)
    return copy.deepcopy(module, memo)
