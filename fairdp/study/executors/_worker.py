"""The worker's side of a study: train one pack, evaluate it, store its rows.

Runs where the pack runs: inside a Ray Tune trial (``_tune``, ``_ray_search``) or in the
driver's own process (``_local``, a test). Nothing here needs Ray.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from fairdp import schema
from fairdp.data import Dataset
from fairdp.engine import Checkpointing
from fairdp.engine.contract import EpochReport, PackResult
from fairdp.methods import get_method, load_plugins
from fairdp.metrics import evaluate_pack
from fairdp.study._context import StudyContext, load_study_data
from fairdp.study.run._plan import Pack
from fairdp.study.store._lock import exit_if_driver_gone, exits_with_driver, registered_worker
from fairdp.study.store._rows import base_row, history_frame, tuning_record
from fairdp.study.store._store import ResultStore

# under the root, hidden (the rows' readers skip it): each pack's test predictions, kept while
# a study with ``evaluate.predictions: selected`` runs; the driver gathers the selected
# configs' into ``<results>.predictions.parquet`` and deletes these (``_predictions``)
PREDICTION_PARTS = ".predictions"


def train_pack(ctx: StudyContext, pack: Pack, data: Dataset, callback: Callable[[EpochReport], None] | None = None,
               checkpoint: Checkpointing | None = None) -> PackResult:
    """The pack trained on ``data`` as its study trains it (the method's settings and
    architecture in ``ctx``), its plugins imported first."""
    load_plugins(ctx.plugins)
    train, arch = ctx.training(pack.method)
    return get_method(pack.method).train_pack(data, list(pack.configs), pack.seed, train, arch=arch,
                                              callback=callback, config_ids=list(pack.config_ids),
                                              checkpoint=checkpoint)


def trained_pack(ctx: StudyContext, pack: Pack, callback: Callable[[EpochReport], None] | None = None,
                 checkpoint: Checkpointing | None = None) -> tuple[list[dict], pd.DataFrame, np.ndarray]:
    """Train a pack: its rows (status 'ok'), its configs' per-epoch valid curves
    (``history_frame``) and their test predictions (K, n_test), from which the rows' test
    metrics are computed. With a ``checkpoint`` it saves its state as it trains and resumes
    from a saved one."""
    load_plugins(ctx.plugins)
    torch.set_num_threads(max(1, int(ctx.cpus_per_trial)))
    data = load_study_data(ctx.dataset, ctx.dataset_options)
    t0 = time.perf_counter()
    result = train_pack(ctx, pack, data, callback, checkpoint)
    train, _ = ctx.training(pack.method)
    metrics = evaluate_pack(data, result, with_leakage=ctx.leakage, with_mdl=ctx.mdl,
                            probe=dataclasses.replace(ctx.probe, seed=pack.seed), min_group_count=train.min_group_count)
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
    return rows, history_frame(ctx, pack, result), result.predictions["test"]


def keeps_predictions(ctx: StudyContext) -> bool:
    """Whether the study keeps its packs' test predictions (``evaluate.predictions: selected``)."""
    return ctx.predictions == "selected"


def predictions_part(store: ResultStore, pid: str) -> str:
    """Where pack ``pid`` keeps its configs' test predictions while the run lasts."""
    return f"{store.root}/{PREDICTION_PARTS}/{pid}.pq"


def write_predictions_part(store: ResultStore, pack: Pack, test_predictions: np.ndarray) -> str:
    """A pack's test predictions, one row per config (``config_id``, ``y_pred``: its labels for
    the test split's rows in order), written atomically under the pack's id: a pack trained
    again replaces its file."""
    k, n = test_predictions.shape
    values = pa.array(np.ascontiguousarray(test_predictions, dtype=np.int64).reshape(-1))
    lists = pa.LargeListArray.from_arrays(pa.array(np.arange(k + 1, dtype=np.int64) * n), values)
    table = pa.table({"config_id": pa.array(list(pack.config_ids), pa.string()), "y_pred": lists})
    return store._write_in_dir(table, predictions_part(store, pack.id))


def run_pack(ctx: StudyContext, pack: Pack, callback: Callable[[EpochReport], None] | None = None) -> list[dict]:
    """Train, evaluate and store one pack; returns its rows. While it trains, the pack saves a
    checkpoint every ``ctx.checkpoint_every_s`` under the results, resumes from one left by
    a run that was killed, and deletes it once its rows are stored."""
    store = ctx.store()
    file = store.checkpoint(pack.id)
    with registered_worker(store.root) if ctx.driver is not None and store.is_local else contextlib.nullcontext():
        with exits_with_driver(ctx.driver):  # a killed run's workers store nothing after the kill
            rows, history, test_predictions = trained_pack(ctx, pack, callback, Checkpointing(
                file, ctx.checkpoint_every_s) if ctx.checkpoint_every_s > 0 else None)
        if len(history):  # before the rows, which say the pack is done
            store.write_history(history, ctx.dataset, pack.method, pack.seed, pack.id)
        if keeps_predictions(ctx):  # before the rows too: a pack whose rows are stored has its predictions
            write_predictions_part(store, pack, test_predictions)
        # the driver checked once more between the rows' sync and their rename: a check before
        # the writes left their time (0.2 s on a loaded machine) for a kill to fall in
        store.write_pack(rows, ctx.dataset, pack.method, pack.seed, pack.id, before_commit=None if ctx.driver is None
                         else lambda: exit_if_driver_gone(*ctx.driver))
        file.drop()
    return rows
