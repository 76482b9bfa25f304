"""The worker's side of a study: train one pack, evaluate it, store its rows.

Runs where the pack runs: inside a Ray Tune trial (``_tune``, ``_ray_search``) or in the
driver's own process (``_local``, a test). Nothing here needs Ray.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable

import pandas as pd
import torch

from fairdp import schema
from fairdp.engine import Checkpointing, EpochReport
from fairdp.methods import get_method, load_plugins
from fairdp.metrics import evaluate_pack
from fairdp.study._context import StudyContext, load_study_data
from fairdp.study._lock import exits_with_driver, registered_worker
from fairdp.study._plan import Pack
from fairdp.study._rows import base_row, history_frame, tuning_record


def pack_rows(ctx: StudyContext, pack: Pack, callback: Callable[[EpochReport], None] | None = None) -> list[dict]:
    """Train a pack, compute its metric columns and return its rows (status 'ok')."""
    return trained_pack(ctx, pack, callback)[0]


def trained_pack(ctx: StudyContext, pack: Pack, callback: Callable[[EpochReport], None] | None = None,
                 checkpoint: Checkpointing | None = None) -> tuple[list[dict], pd.DataFrame]:
    """Train a pack: its rows (status 'ok') and its configs' per-epoch valid curves
    (``history_frame``). With a ``checkpoint`` it saves its state as it trains and resumes
    from a saved one."""
    load_plugins(ctx.plugins)
    torch.set_num_threads(max(1, int(ctx.cpus_per_trial)))
    data = load_study_data(ctx.dataset, ctx.dataset_options)
    method = get_method(pack.method)
    t0 = time.perf_counter()
    train, arch = ctx.training(pack.method)
    result = method.train_pack(data, list(pack.configs), pack.seed, train, arch=arch, callback=callback,
                               config_ids=list(pack.config_ids), checkpoint=checkpoint)
    metrics = evaluate_pack(data, result, with_leakage=ctx.leakage, with_mdl=ctx.mdl,
                            probe=dataclasses.replace(ctx.probe, seed=pack.seed))
    elapsed = time.perf_counter() - t0 + result.resumed_s  # a resumed pack's earlier training counts
    tuning = tuning_record(ctx, pack, data) if ctx.tuning is not None else None  # the run's, shared by its rows
    rows = []
    for i, m in enumerate(metrics):
        row = base_row(ctx, pack, i)
        row.update(m, duration_s=elapsed / len(pack.configs), pack_duration_s=elapsed, status="ok",
                   precision=result.precision, packing=result.packing)
        if row.get(schema.PRIVACY_EVENT) is None:  # no accountant composes this config's guarantee
            row["accountant"] = None
        if result.pruned_at is not None and result.pruned_at[i]:  # null: trained every epoch
            row["pruned_at"] = int(result.pruned_at[i])
        if tuning is not None:
            row[schema.TUNING] = tuning
        rows.append(row)
    return rows, history_frame(ctx, pack, result)


def run_pack(ctx: StudyContext, pack: Pack, callback: Callable[[EpochReport], None] | None = None) -> list[dict]:
    """Train, evaluate and store one pack; returns its rows. While it trains, the pack saves a
    checkpoint every ``ctx.checkpoint_every_s`` under the results, resumes from one left by
    a run that was killed, and deletes it once its rows are stored."""
    store = ctx.store()
    file = store.checkpoint(pack.id)
    with registered_worker(store.root) if ctx.driver is not None and store.is_local else contextlib.nullcontext():
        with exits_with_driver(ctx.driver):  # a killed run's workers store nothing after the kill
            rows, history = trained_pack(ctx, pack, callback, Checkpointing(file, ctx.checkpoint_every_s)
                                         if ctx.checkpoint_every_s > 0 else None)
        if len(history):  # before the rows, which say the pack is done
            store.write_history(history, ctx.dataset, pack.method, pack.seed, pack.id)
        store.write_pack(rows, ctx.dataset, pack.method, pack.seed, pack.id)
        file.drop()
    return rows
