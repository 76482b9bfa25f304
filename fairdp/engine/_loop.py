"""The one packed training loop. Every neural method is a ``PackStep`` that ``fit_pack`` drives.

``fit_pack`` owns everything a method should never rewrite: the device, splitting a pack
into chunks of configs (``config_chunk``), the epochs, the minibatch order (shared by every
config of a seed), evaluation on the valid split after each epoch, keeping each config's
best-validation epoch (or the last, for methods whose algorithm returns it), progress
callbacks, and the pack's outputs (predictions and attacker-visible representations).

A step supplies the method: its model (every parameter with a leading config axis K), its
optimiser, the update for one minibatch (by default: the loss it returns, backpropagated),
hooks at the start and end of each epoch (a GRL schedule, a dual ascent), and how the model
is evaluated. Configs are independent inside a step: config k's loss depends only on
config k's parameters and random streams (``PackContext.generators``), so one optimiser
over the stack is K independent optimisers and a config trained in a pack follows the run
it would have alone.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from fairdp import _rng
from fairdp.data import Dataset
from fairdp.engine._arch import Architecture
from fairdp.engine._losses import per_config_accuracy
from fairdp.engine._memory import config_chunk
from fairdp.engine._seeds import stream_seed
from fairdp.engine._settings import (
    TrainSettings,
    autocast,
    matmul_precision,
    resolve_device,
    resolve_precision,
)

EVAL_CHUNK = 4096  # rows per evaluation pass: bounds memory at K x 4096 x D
SELECTIONS = ("best", "last")


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
        self._generators: dict[str, list[torch.Generator]] = {}
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

    def generators(self, stream: str) -> list[torch.Generator]:
        """Config k's generator of ``stream`` (init, dropout, noise, eval_noise, predict), keyed by
        (seed, config id, stream) only, so it does not depend on the pack."""
        if stream not in self._generators:
            self._generators[stream] = _rng.make_generators(
                [stream_seed(self.seed, c, stream) for c in self.config_ids], self.device)
        return self._generators[stream]

    def per_config(self, key: str) -> torch.Tensor:
        """Hyperparameter ``key`` of every config as a (K,) tensor of the training dtype."""
        return torch.tensor([float(c[key]) for c in self.configs], device=self.device, dtype=self.dtype)

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


@dataclass
class PackResult:
    """Per-config outcomes of one pack, arrays with a leading config axis K."""

    configs: list[dict]
    best_epoch: np.ndarray                       # (K,) 1-based epoch of the kept model
    valid_accuracy_history: np.ndarray           # (K, epochs), percent
    predictions: dict[str, np.ndarray]           # split -> (K, n_split) predicted labels
    representations: dict[str, np.ndarray]       # split -> (K, n_split, D), what an attacker sees
    duration_s: float
    precision: str | None = None                 # what the pack computed in (resolve_precision)
    model: nn.Module | None = field(default=None, repr=False)  # the trained pack when it was one chunk
    # (eps, delta) of each config, from the method's privacy hook (``Method.train_pack`` sets it)
    privacy: tuple | None = None
    diagnostics: dict = field(default_factory=dict)  # method-specific per-config arrays


@dataclass(frozen=True)
class EpochReport:
    """What a progress callback receives after each epoch of a chunk of configs."""

    epoch: int                   # 1-based
    epochs: int
    configs: int                 # configs in this chunk
    valid_accuracy: np.ndarray   # (configs,), percent


class BestEpochs:
    """Per config: the validation accuracy of every epoch, the best one, and its parameters.

    Every parameter has the config axis first, so keeping config k's best weights is a
    masked copy along that axis; ``restore`` puts each config's best weights back.
    """

    def __init__(self, params: list[nn.Parameter], epochs: int):
        self.params = params
        k = params[0].shape[0]
        self.best_acc = torch.full((k,), -1.0, dtype=torch.float64)
        self.best_epoch = np.zeros(k, dtype=np.int64)
        self.history = np.zeros((k, epochs))
        self.state = [p.detach().clone() for p in params]

    @torch.no_grad()
    def update(self, epoch: int, accuracy: torch.Tensor) -> None:
        """Record ``accuracy`` (K,) of 0-based ``epoch``; keep the weights of configs that improved."""
        self.history[:, epoch] = accuracy.numpy()
        improved = accuracy > self.best_acc
        if not improved.any():
            return
        self.best_acc = torch.where(improved, accuracy, self.best_acc)
        self.best_epoch[improved.numpy()] = epoch + 1
        mask = improved.to(self.params[0].device)
        for i, p in enumerate(self.params):
            self.state[i] = torch.where(mask.reshape(-1, *([1] * (p.dim() - 1))), p.detach(), self.state[i])

    @torch.no_grad()
    def restore(self) -> None:
        for p, best in zip(self.params, self.state):
            p.copy_(best)


def fit_pack(make_step: Callable[[PackContext], PackStep], data: Dataset, configs: list[dict],
             config_ids: list[str], seed: int, settings: TrainSettings, arch: Architecture, *,
             shapes: list[tuple[int, int]], splits_out: tuple[str, ...] = ("valid", "test"),
             callback: Callable[[EpochReport], None] | None = None) -> PackResult:
    """Train a pack with the steps ``make_step`` builds, one chunk of configs at a time.

    ``shapes`` are the (fan_in, fan_out) of one config's linear layers, from which the chunk
    size follows (``config_chunk``); ``splits_out`` are the splits whose predictions and
    representations the result keeps.
    """
    if settings.epochs < 1:
        raise ValueError("fit_pack needs at least one epoch")
    device = resolve_device(settings.device)
    k = len(configs)
    # evaluation runs EVAL_CHUNK rows at a time; the representations of splits_out are kept on
    # the device until the end (their width is bounded by the widest layer)
    chunk = config_chunk(settings, shapes, k, device,
                         eval_rows=min(EVAL_CHUNK, max(len(v) for v in data.splits.values())),
                         kept_rows=sum(len(data.splits[n]) for n in splits_out),
                         representation_dim=max(b for _, b in shapes))
    t0 = time.perf_counter()
    parts = []
    with matmul_precision(resolve_precision(settings, device), device):
        for i in range(0, k, chunk):
            ctx = PackContext(data, configs[i:i + chunk], config_ids[i:i + chunk], seed, settings, arch, device)
            parts.append(_fit_chunk(make_step(ctx), splits_out, callback))
    if len(parts) == 1:
        return parts[0]
    return PackResult(
        configs=list(configs),
        best_epoch=np.concatenate([p.best_epoch for p in parts]),
        valid_accuracy_history=np.concatenate([p.valid_accuracy_history for p in parts]),
        predictions={n: np.concatenate([p.predictions[n] for p in parts]) for n in splits_out},
        representations={n: np.concatenate([p.representations[n] for p in parts]) for n in splits_out},
        duration_s=time.perf_counter() - t0,
        precision=parts[0].precision,
        diagnostics={key: np.concatenate([p.diagnostics[key] for p in parts]) for key in parts[0].diagnostics},
    )


def _fit_chunk(step: PackStep, splits_out: tuple[str, ...], callback) -> PackResult:
    t0 = time.perf_counter()
    ctx, settings = step.ctx, step.ctx.settings
    if step.selection not in SELECTIONS:
        raise ValueError(f"{type(step).__name__}.selection must be one of {SELECTIONS}")
    train, y_valid = ctx.split("train"), ctx.split("valid").y
    x_train, x_valid = step.inputs("train"), step.inputs("valid")
    n_train = x_train.shape[0]
    optimizer = step.optimizer()
    order = torch.Generator(device="cpu").manual_seed(ctx.seed)  # shared minibatch order within a seed
    best = BestEpochs(list(step.model.parameters()), settings.epochs) if step.selection == "best" else None
    history = np.zeros((ctx.k, settings.epochs))
    for epoch in range(settings.epochs):
        step.model.train()
        step.begin_epoch(epoch)
        perm = torch.randperm(n_train, generator=order).to(ctx.device)
        for start in range(0, n_train, settings.batch_size):
            idx = perm[start:start + settings.batch_size]
            with autocast(ctx.precision, ctx.device):
                step.update(Batch(idx, x_train[idx], train.y[idx], train.s[idx]), optimizer)
        step.end_epoch(epoch)
        accuracy = per_config_accuracy(_evaluate(step, x_valid)[1], y_valid)
        if best is not None:
            best.update(epoch, accuracy)
        else:
            history[:, epoch] = accuracy.numpy()
        if callback is not None:
            callback(EpochReport(epoch + 1, settings.epochs, ctx.k, accuracy.numpy()))
    if best is not None:
        best.restore()
        history, best_epoch = best.history, best.best_epoch
    else:
        best_epoch = np.full(ctx.k, settings.epochs, dtype=np.int64)
    predictions, representations = {}, {}
    for name in splits_out:
        reps, preds = _evaluate(step, step.inputs(name), keep_representations=True)
        predictions[name] = preds.cpu().numpy()
        # bf16 representations are widened: probes and numpy read fp32
        representations[name] = (reps.float() if reps.dtype == torch.bfloat16 else reps).cpu().numpy()
    return PackResult(configs=list(ctx.configs), best_epoch=best_epoch, valid_accuracy_history=history,
                      predictions=predictions, representations=representations,
                      duration_s=time.perf_counter() - t0, precision=ctx.precision, model=step.model,
                      diagnostics=step.diagnostics())


@torch.no_grad()
def _evaluate(step: PackStep, x: torch.Tensor, keep_representations: bool = False):
    """(representations or None, predicted labels (K, n)) in chunks of ``EVAL_CHUNK`` rows."""
    step.model.eval()
    reps, preds = [], []
    for start in range(0, x.shape[0], EVAL_CHUNK):
        with autocast(step.ctx.precision, step.ctx.device):
            z, logits = step.evaluate(x[start:start + EVAL_CHUNK])
        if keep_representations:
            reps.append(z)
        preds.append(logits.argmax(-1))
    return (torch.cat(reps, dim=1) if keep_representations else None), torch.cat(preds, dim=1)
