"""The one packed training loop. Every neural method is a ``PackStep`` that ``fit_pack`` drives.

``fit_pack`` owns everything a method should never rewrite: the device, splitting a pack
into chunks of configs (``config_chunk``), the epochs, the minibatch order (shared by every
config of a seed), evaluation on the valid split after each epoch, keeping each config's
best-validation epoch (or the last, for methods whose algorithm returns it), progress
callbacks, the pack's outputs (predictions and attacker-visible representations), and, when
``TrainSettings.prune`` asks, stopping dominated configs at rung epochs (``_prune``; a stopped
config is cut out of the step with ``PackStep.subset``, so it costs nothing afterwards), and,
given a ``checkpoint``, saving its state as it goes and resuming from a saved one.

A step supplies the method: its model (every parameter with a leading config axis K), its
optimiser, the update for one minibatch (by default: the loss it returns, backpropagated),
hooks at the start and end of each epoch (a GRL schedule, a dual ascent), and how the model
is evaluated. Configs are independent inside a step: config k's loss depends only on
config k's parameters and random streams (``PackContext.generators``), so one optimiser
over the stack is K independent optimisers and a config trained in a pack follows the run
it would have alone.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from fairdp.data import Dataset
from fairdp.engine._arch import Architecture
from fairdp.engine._checkpoint import Checkpointing, Saver, data_fingerprint, identity
from fairdp.engine._functional import packing_of
from fairdp.engine._losses import (
    per_config_accuracy,
    per_config_confusion,
    per_config_cross_entropy,
)
from fairdp.engine._memory import config_chunk
from fairdp.engine._prune import Pruning, configs_to_stop, selection_gaps
from fairdp.engine._settings import (
    TrainSettings,
    autocast,
    matmul_precision,
    resolve_device,
    resolve_precision,
)
from fairdp.engine.contract import (
    VALID_CURVES,
    Batch,
    EpochReport,
    PackContext,
    PackResult,
    PackStep,
    _per_config_attributes,
)
from fairdp.fairness import scores_from_confusion

EVAL_CHUNK = 4096  # rows per evaluation pass: bounds memory at K x 4096 x D
SELECTIONS = ("best", "last")

logger = logging.getLogger(__name__)


class BestEpochs:
    """Per config: the best validation accuracy so far, its epoch, and its parameters.

    Every parameter has the config axis first, so keeping config k's best weights is a
    masked copy along that axis; ``restore`` puts each config's best weights back.
    """

    def __init__(self, params: list[nn.Parameter]):
        self.params = params
        k = params[0].shape[0]
        self.best_acc = torch.full((k,), -1.0, dtype=torch.float64)
        self.best_epoch = np.zeros(k, dtype=np.int64)
        self.state = [p.detach().clone() for p in params]

    @torch.no_grad()
    def update(self, epoch: int, accuracy: torch.Tensor) -> torch.Tensor:
        """Record ``accuracy`` (K,) of 0-based ``epoch``; keep the weights of configs that
        improved, and return which did."""
        improved = accuracy > self.best_acc
        if not improved.any():
            return improved
        self.best_acc = torch.where(improved, accuracy, self.best_acc)
        self.best_epoch[improved.numpy()] = epoch + 1
        mask = improved.to(self.params[0].device)
        for i, p in enumerate(self.params):
            self.state[i] = torch.where(mask.reshape(-1, *([1] * (p.dim() - 1))), p.detach(), self.state[i])
        return improved

    @torch.no_grad()
    def restore(self) -> None:
        for p, best in zip(self.params, self.state):
            p.copy_(best)

    def subset(self, index: list[int], params: list[nn.Parameter]) -> BestEpochs:
        """The record of configs ``index``, now tracking ``params`` (the subset step's)."""
        kept = copy.copy(self)
        rows = torch.as_tensor(index, dtype=torch.long)
        kept.params = params
        kept.best_acc, kept.best_epoch = self.best_acc[rows], self.best_epoch[index]
        kept.state = [s[rows.to(s.device)].clone() for s in self.state]
        return kept


def fit_pack(make_step: Callable[[PackContext], PackStep], data: Dataset, configs: list[dict],
             config_ids: list[str], seed: int, settings: TrainSettings, arch: Architecture, *,
             shapes: list[tuple[int, int]], splits_out: tuple[str, ...] = ("valid", "test"),
             callback: Callable[[EpochReport], None] | None = None,
             checkpoint: Checkpointing | None = None) -> PackResult:
    """Train a pack with the steps ``make_step`` builds, one chunk of configs at a time.

    ``shapes`` are the (fan_in, fan_out) of one config's linear layers, from which the chunk
    size follows (``config_chunk``); ``splits_out`` are the splits whose predictions and
    representations the result keeps. With ``settings.prune`` the chunks train side by side,
    epoch by epoch, so that at each rung the whole pack's configs are compared (``_prune``);
    the configs that stop are taken out of their chunk's model and optimiser, so they cost
    nothing afterwards. With a ``checkpoint`` the pack saves its state as it trains and resumes
    from a saved one of the same pack.
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
    rungs = [r for r in settings.prune.rungs if r < settings.epochs] if settings.prune is not None else []
    pruning = settings.prune if rungs else None
    t0 = time.perf_counter()
    # a checkpoint resumes on the device kind it was saved from: its tensors and random
    # streams are that device's (a CPU node's pack is not resumed on a GPU node)
    key = identity(configs=configs, config_ids=config_ids, seed=seed, settings=settings, arch=arch, chunk=chunk,
                   data=data_fingerprint(data), splits_out=splits_out,
                   device=device.type) if checkpoint is not None else ""
    saver = Saver(checkpoint, key, {"data": data, "callback": callback})
    # the state a checkpoint holds: finished outcomes (pack positions, PackResult), the chunks
    # in training, which chunk (one after another) and which epoch comes next
    state = saver.load()
    if state is not None:
        where = f" of chunk {state['chunk'] + 1} of {-(-k // chunk)}" if pruning is None and chunk < k else ""
        logger.info("fairdp: %s: resuming after epoch %d%s", checkpoint.file.name, state["epoch"], where)
    state = state or {"pieces": [], "runs": [], "chunk": 0, "epoch": 0}
    resumed_s = state.get("elapsed_s", 0.0)  # spent on this pack before the checkpoint
    pieces: list[tuple[np.ndarray, PackResult]] = state["pieces"]

    def save_if_due(runs: list[_ChunkTraining], chunk_index: int, epochs_done: int, done: bool) -> None:
        if saver.due(done):
            saver.save({"pieces": pieces, "runs": runs, "chunk": chunk_index, "epoch": epochs_done,
                        "elapsed_s": time.perf_counter() - t0 + resumed_s})

    with matmul_precision(resolve_precision(settings, device), device):
        starts = range(0, k, chunk)

        def start(i: int) -> _ChunkTraining:
            ctx = PackContext(data, configs[i:i + chunk], config_ids[i:i + chunk], seed, settings, arch, device)
            return _ChunkTraining(make_step(ctx), np.arange(i, min(i + chunk, k)), splits_out, callback, pruning)

        # on a CPU each chunk writes its representations straight into the pack's arrays
        # (no concatenation of evaluation batches, then of chunks: two copies of K x rows x D)
        kept = _PackArrays(k, {n: len(data.splits[n]) for n in splits_out}) \
            if device.type == "cpu" and pruning is None else None
        if pruning is None:  # one chunk after another: only one chunk's state is alive at a time
            for c, i in enumerate(starts):
                if c < state["chunk"]:
                    continue  # its outcome is among the pieces
                if c == state["chunk"] and state["runs"]:  # the chunk the checkpoint was saved in
                    run, first = state["runs"][0], state["epoch"]
                else:
                    run, first = start(i), 0
                for epoch in range(first, settings.epochs):
                    run.train_epoch(epoch)
                    save_if_due([run], c, epoch + 1, done=epoch + 1 == settings.epochs and c == len(starts) - 1)
                pieces.append(run.finish((kept, i) if kept is not None else None))
        else:
            runs = state["runs"] or [start(i) for i in starts]
            for epoch in range(state["epoch"], settings.epochs):
                for run in runs:
                    if run.active:
                        run.train_epoch(epoch)
                if epoch + 1 in rungs:
                    pieces += _prune_rung([r for r in runs if r.active], pruning, epoch + 1)
                save_if_due(runs, 0, epoch + 1, done=epoch + 1 == settings.epochs)
            pieces += [run.finish() for run in runs if run.active]
    if len(pieces) == 1:  # one chunk, nothing stopped early: its result, model included
        return dataclasses.replace(pieces[0][1], resumed_s=resumed_s)
    return _assemble(pieces, list(configs), splits_out, time.perf_counter() - t0 + resumed_s, pruning is not None,
                     resumed_s, kept.arrays if kept is not None else None)


def _prune_rung(runs: list[_ChunkTraining], pruning: Pruning, rung: int) -> list[tuple[np.ndarray, PackResult]]:
    """Compare every config still training in the pack and stop the dominated ones."""
    accuracy, gap = (np.concatenate(parts) for parts in zip(*(run.objectives() for run in runs)))
    stop = set(configs_to_stop(accuracy, gap, pruning))
    out, offset = [], 0
    for run in runs:
        local = [i for i in range(run.k) if offset + i in stop]
        offset += run.k
        if local:
            out.append(run.stop(local, rung))
    return out


def merge_results(pieces: list[tuple[list[int], PackResult]], configs: list[dict]) -> PackResult:
    """One result, in the order of ``configs``, from packs trained separately: each piece is
    (positions in ``configs``, its result). Durations add up (the packs ran one after another)."""
    parts = [part for _, part in pieces]
    splits_out = tuple(parts[0].predictions)
    pruned = any(p.pruned_at is not None for p in parts)
    if pruned:  # a piece trained without pruning stopped no config
        pieces = [(i, p if p.pruned_at is not None else dataclasses.replace(p, pruned_at=np.zeros(len(i), np.int64)))
                  for i, p in pieces]
    return _assemble([(np.asarray(i), p) for i, p in pieces], list(configs), splits_out,
                     sum(p.duration_s for p in parts), pruned, sum(p.resumed_s for p in parts))


class _PackArrays:
    """A pack's representation arrays, per split K x rows x D, made when the first evaluation
    batch tells D and the dtype (fp32 for bf16 runs: the copy widens); the chunks, in pack
    order, write their rows into them."""

    def __init__(self, k: int, rows: dict[str, int]):
        self.k, self.rows, self.arrays = k, rows, {}

    def rows_of(self, name: str, first: int, k: int, z: torch.Tensor) -> torch.Tensor:
        """Configs ``first``..``first + k`` of split ``name``'s array, for representations like ``z``."""
        if name not in self.arrays:
            dtype = np.float64 if z.dtype == torch.float64 else np.float32
            self.arrays[name] = np.empty((self.k, self.rows[name], z.shape[-1]), dtype)
        return torch.from_numpy(self.arrays[name][first:first + k])


def _assemble(pieces: list[tuple[np.ndarray, PackResult]], configs: list[dict], splits_out: tuple[str, ...],
              duration_s: float, pruned: bool, resumed_s: float,
              kept: dict[str, np.ndarray] | None = None) -> PackResult:
    """One result in pack order from outcomes of pieces of the pack (chunks, pruned configs);
    ``kept`` are the pack's representation arrays that in-order chunks wrote into (a piece
    restored from a checkpoint has its own, and is copied)."""
    position = np.concatenate([index for index, _ in pieces])
    order = np.argsort(position, kind="stable")
    parts = [part for _, part in pieces]

    in_order = bool((position == np.arange(len(position))).all())

    def stacked(arrays):
        if in_order:  # pieces in pack order (chunks): one copy of the representations, or none for one piece
            return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
        return np.concatenate(arrays)[order]

    keys = parts[0].diagnostics

    def representations(name: str) -> np.ndarray:
        arrays = [p.representations[name] for p in parts]
        if in_order and kept is not None and name in kept and all(np.may_share_memory(a, kept[name])
                                                                  for a in arrays):
            return kept[name]  # the chunks wrote their rows into the pack's array
        return stacked(arrays)
    return PackResult(
        configs=configs,
        best_epoch=stacked([p.best_epoch for p in parts]),
        valid_history={name: stacked([p.valid_history[name] for p in parts]) for name in parts[0].valid_history},
        predictions={n: stacked([p.predictions[n] for p in parts]) for n in splits_out},
        representations={n: representations(n) for n in splits_out},
        duration_s=duration_s,
        precision=parts[0].precision,
        packing=parts[0].packing,
        diagnostics={key: stacked([p.diagnostics[key] for p in parts]) for key in keys},
        pruned_at=stacked([p.pruned_at for p in parts]) if pruned else None,
        resumed_s=resumed_s,
    )


class _ChunkTraining:
    """One chunk of configs in training: its step, optimiser, minibatch order and record of
    each config's best epoch; ``index`` are the pack positions of the configs it still trains.

    ``pruning`` (None: off) also keeps, per config, the valid fairness gap of the model it
    would report if it stopped now, which rungs compare.
    """

    def __init__(self, step: PackStep, index: np.ndarray, splits_out: tuple[str, ...], callback,
                 pruning: Pruning | None):
        if step.selection not in SELECTIONS:
            raise ValueError(f"{type(step).__name__}.selection must be one of {SELECTIONS}")
        self.t0 = time.perf_counter()
        self.step, self.index, self.splits_out, self.callback, self.pruning = step, index, splits_out, callback, pruning
        ctx, epochs = step.ctx, step.ctx.settings.epochs
        if pruning is not None:
            _per_config_attributes(type(step))  # refuse, before training, a step pruning cannot slice
        self.optimizer = step.optimizer()
        self.order = torch.Generator(device="cpu").manual_seed(ctx.seed)  # shared minibatch order within a seed
        self.best = BestEpochs(list(step.model.parameters())) if step.selection == "best" else None
        self.curves = {name: np.full((ctx.k, epochs), np.nan) for name in VALID_CURVES}
        self.gap = np.full(ctx.k, np.nan)
        self.epochs_done = 0

    def __getstate__(self):  # a checkpoint: time spent, not this process's clock reading
        state = dict(self.__dict__)
        state["t0"] = time.perf_counter() - self.t0
        return state

    def __setstate__(self, state):
        self.__dict__.update(state, t0=time.perf_counter() - state["t0"])

    @property
    def k(self) -> int:
        return len(self.index)

    @property
    def active(self) -> bool:
        return self.k > 0

    def train_epoch(self, epoch: int) -> None:
        step, ctx = self.step, self.step.ctx
        settings, train = ctx.settings, ctx.split("train")
        x_train = step.inputs("train")
        step.model.train()
        step.begin_epoch(epoch)
        perm = torch.randperm(x_train.shape[0], generator=self.order).to(ctx.device)
        for start in range(0, x_train.shape[0], settings.batch_size):
            idx = perm[start:start + settings.batch_size]
            with autocast(ctx.precision, ctx.device):
                step.update(Batch(idx, x_train[idx], train.y[idx], train.s[idx]), self.optimizer)
        step.end_epoch(epoch)
        valid = ctx.split("valid")
        _, predictions, loss = _evaluate(step, step.inputs("valid"), target=valid.y)
        accuracy = per_config_accuracy(predictions, valid.y)
        # every gap is a function of one count per config, made where the predictions are
        scores = scores_from_confusion(per_config_confusion(predictions, valid.y, valid.s, ctx.data.n_classes,
                                                            ctx.data.n_groups), settings.min_group_count)
        self.curves["accuracy"][:, epoch] = accuracy.numpy()
        self.curves["loss"][:, epoch] = loss
        for name in VALID_CURVES[2:]:
            self.curves[name][:, epoch] = scores[name]
        if self.best is not None:
            kept = self.best.update(epoch, accuracy)  # the configs whose reported model is now this epoch's
        else:
            kept = torch.ones(ctx.k, dtype=torch.bool)
        if self.pruning is not None:
            gap = selection_gaps(scores, ctx.configs, self.pruning.fairness)
            self.gap = np.where(kept.numpy(), gap, self.gap)
        self.epochs_done = epoch + 1
        if self.callback is not None:
            self.callback(EpochReport(epoch + 1, settings.epochs, ctx.k, accuracy.numpy()))

    def objectives(self) -> tuple[np.ndarray, np.ndarray]:
        """(valid accuracy, valid gap) of the model each config would report if it stopped now."""
        accuracy = self.best.best_acc.numpy() if self.best is not None else self.curves["accuracy"][:, self.epochs_done - 1]
        return np.asarray(accuracy, dtype=float), self.gap

    def stop(self, local: list[int], rung: int) -> tuple[np.ndarray, PackResult]:
        """Stop configs ``local`` (positions in this chunk) after ``rung``: their outcomes from
        the model they would report now; the others go on in a step without them."""
        rest = [i for i in range(self.k) if i not in set(local)]
        stopped = self.step.subset(local)
        best = self.best.subset(local, list(stopped.model.parameters())) if self.best is not None else None
        history = {name: curve[local] for name, curve in self.curves.items()}  # NaN after the rung
        piece = self._outcome(stopped, best, history, np.full(len(local), rung, dtype=np.int64))
        stopped_index, self.index = self.index[local], self.index[rest]
        if not rest:  # the whole chunk stopped: free its model and optimiser
            self.step = self.optimizer = self.best = None
            return stopped_index, piece
        step = self.step.subset(rest)
        self.optimizer = _sliced_optimizer(self.optimizer, list(self.step.model.parameters()), step, rest)
        if self.best is not None:
            self.best = self.best.subset(rest, list(step.model.parameters()))
        self.curves = {name: curve[rest] for name, curve in self.curves.items()}
        self.step, self.gap = step, self.gap[rest]
        return stopped_index, piece

    def finish(self, out: tuple[_PackArrays, int] | None = None) -> tuple[np.ndarray, PackResult]:
        """The chunk's outcome; with ``out`` (the pack's arrays, the chunk's first config) its
        representations are written there."""
        return self.index, self._outcome(self.step, self.best, self.curves, np.zeros(self.k, dtype=np.int64), out)

    def _outcome(self, step: PackStep, best: BestEpochs | None, history: dict[str, np.ndarray],
                 pruned_at: np.ndarray, out: tuple[_PackArrays, int] | None = None) -> PackResult:
        if best is not None:
            best.restore()
            best_epoch = best.best_epoch
        else:  # the last epoch it trained
            best_epoch = np.full(step.ctx.k, self.epochs_done, dtype=np.int64)
        predictions, representations = {}, {}
        for name in self.splits_out:
            into = functools.partial(out[0].rows_of, name, out[1], step.ctx.k) if out is not None else None
            reps, preds, _ = _evaluate(step, step.inputs(name), keep_representations=True, into=into)
            predictions[name] = preds.cpu().numpy()
            # bf16 representations are widened: probes and numpy read fp32 (written ``into`` the
            # pack's fp32 arrays, they already are, and .numpy() is a view of them)
            representations[name] = (reps.float() if reps.dtype == torch.bfloat16 else reps).cpu().numpy()
        return PackResult(configs=list(step.ctx.configs), best_epoch=best_epoch, valid_history=history,
                          predictions=predictions, representations=representations,
                          duration_s=time.perf_counter() - self.t0, precision=step.ctx.precision, model=step.model,
                          packing=packing_of(step.model),
                          diagnostics=step.diagnostics(), pruned_at=pruned_at if self.pruning is not None else None)


def _sliced_optimizer(optimizer: torch.optim.Optimizer, params: list[nn.Parameter], step: PackStep,
                      index: list[int]) -> torch.optim.Optimizer:
    """``step``'s optimiser holding configs ``index`` of ``optimizer``'s state (moments, step
    counts). The optimisers fairdp steps use (Adam, SGD) update each element from its own
    state, so the survivors' updates are the ones the whole pack would have made."""
    new = step.optimizer()
    for old_p, new_p in zip(params, step.model.parameters()):
        state = optimizer.state.get(old_p)
        if not state:
            continue
        rows = torch.as_tensor(index, dtype=torch.long, device=old_p.device)
        new.state[new_p] = {key: (v[rows].clone() if v.shape == old_p.shape else v.clone())
                            if isinstance(v, torch.Tensor) else copy.deepcopy(v) for key, v in state.items()}
    return new


@torch.no_grad()
def _evaluate(step: PackStep, x: torch.Tensor, keep_representations: bool = False,
              target: torch.Tensor | None = None, into: Callable[[torch.Tensor], torch.Tensor] | None = None):
    """(representations or None, predicted labels (K, n), mean cross-entropy against
    ``target`` per config (K,) or None) in chunks of ``EVAL_CHUNK`` rows. With ``into``
    (the first batch's representations -> a (K, n, D) tensor) they are copied into, and
    returned as, that tensor."""
    step.model.eval()
    reps, preds, loss = [], [], None
    out = None
    for start in range(0, x.shape[0], EVAL_CHUNK):
        with autocast(step.ctx.precision, step.ctx.device):
            z, logits = step.evaluate(x[start:start + EVAL_CHUNK])
        if into is not None:
            out = into(z) if out is None else out
            out[:, start:start + z.shape[1]].copy_(z)
        elif keep_representations:
            reps.append(z)
        preds.append(logits.argmax(-1))
        if target is not None:
            part = per_config_cross_entropy(logits, target[start:start + EVAL_CHUNK]) * logits.shape[1]
            loss = part if loss is None else loss + part
    mean_loss = (loss / x.shape[0]).double().cpu().numpy() if loss is not None else None
    if out is None and reps:
        out = torch.cat(reps, dim=1)
    return out, torch.cat(preds, dim=1), mean_loss
