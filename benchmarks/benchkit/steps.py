"""A pack's training step driven on the engine's minibatches, and best-of timing."""

from __future__ import annotations

import math
import time

import torch

from fairdp.engine.contract import Batch, PackContext


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so that a timer stops after it."""
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, repeats: int, calls: int) -> float:
    """Seconds per call of ``fn``: one call first (its one-off costs), then the least of
    ``repeats`` runs of ``calls`` calls."""
    fn()
    best = math.inf
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - started) / calls)
    return best


def pack_epoch_seconds(ctx: PackContext, step, steps: int, warmup: int = 3, end_epoch: bool = False) -> float:
    """Seconds of one epoch of the whole pack: ``step`` (a method's ``make_step(ctx)``) run on
    ``steps`` minibatches of a fixed shuffle of the training split after ``warmup`` untimed ones,
    scaled to ceil(n / B) steps; with ``end_epoch``, plus one ``end_epoch`` (PF-LD's dual step)."""
    optimizer = step.optimizer()
    train = ctx.split("train")
    n, batch = len(train.y), ctx.settings.batch_size
    order = torch.randperm(n, generator=torch.Generator().manual_seed(0)).to(ctx.device)

    def run(i: int) -> None:
        lo = (i * batch) % n
        idx = order[lo:lo + batch]
        step.update(Batch(idx, train.X[idx], train.y[idx], train.s[idx]), optimizer)

    for i in range(warmup):
        run(i)
    started = time.perf_counter()
    for i in range(steps):
        run(warmup + i)
    synchronize(ctx.device)
    seconds = (time.perf_counter() - started) / steps * math.ceil(n / batch)
    if end_epoch:
        started = time.perf_counter()
        step.end_epoch(0)
        synchronize(ctx.device)
        seconds += time.perf_counter() - started
    return seconds
