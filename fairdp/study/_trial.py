"""A pack trial, the worker side of a study: train a pack, evaluate it, store its rows.

Nothing here needs Ray: the Ray Tune driver (``_tune``) calls ``run_pack`` inside a trial,
and anything else (a test, an in-process executor) may call it directly.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from fairdp import __version__
from fairdp.engine import EpochReport, TrainSettings
from fairdp.methods import get_method, load_plugins
from fairdp.metrics import ProbeSettings
from fairdp.study._plan import Pack
from fairdp.study._spec import StudySpec
from fairdp.study._store import ResultStore, study_columns


@dataclass(frozen=True)
class StudyContext:
    """What a worker needs to train and store a pack (sent once through Ray's object store)."""

    study: str
    dataset: str
    dataset_options: dict
    train: TrainSettings
    leakage: bool
    mdl: bool
    probe: ProbeSettings
    results: str
    cpus_per_trial: float
    plugins: tuple[str, ...] = ()                    # resolved plugin files / modules to import first
    columns: tuple[tuple[str, str], ...] = ()        # the study's result columns (name, type)

    @classmethod
    def from_spec(cls, spec: StudySpec, results: str) -> StudyContext:
        gpus = spec.resources.gpus_per_trial
        train = dataclasses.replace(spec.train, gpu_share=min(1.0, gpus)) if gpus > 0 else spec.train
        methods = [m.name for m in spec.methods] + ([spec.search.method] if spec.search else [])
        return cls(spec.name, spec.dataset, dict(spec.dataset_options), train, spec.leakage, spec.mdl,
                   spec.probe, results, spec.resources.cpus_per_trial, spec.plugins,
                   tuple(study_columns(methods)))

    def store(self) -> ResultStore:
        return ResultStore(self.results, columns=self.columns or None)


@functools.lru_cache(maxsize=4)
def _load(name: str, options_json: str):
    from fairdp.data import load_dataset

    return load_dataset(name, **json.loads(options_json))


def load_study_data(ctx: StudyContext):
    """The study's dataset, loaded once per worker process."""
    return _load(ctx.dataset, json.dumps(ctx.dataset_options, sort_keys=True))


def _node() -> str:
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - provenance only; never fail a pack over it
        pass
    import socket

    return socket.gethostname()


def base_row(ctx: StudyContext, pack: Pack, i: int) -> dict:
    """Identity, hyperparameters (one column per hyperparameter the method declares) and provenance."""
    config = pack.configs[i]
    row = {"study": ctx.study, "dataset": ctx.dataset, "method": pack.method, "seed": pack.seed,
           "config_id": pack.config_ids[i], "epochs": ctx.train.epochs, "pack_id": pack.id,
           "pack_size": len(pack.configs), "fairdp_version": __version__, "node": _node(),
           "finished_at": datetime.now(timezone.utc)}
    for h in get_method(pack.method).hyperparams:
        row[h.name] = h.to_column(config[h.name])
    return row


def pack_rows(ctx: StudyContext, pack: Pack, callback: Callable[[EpochReport], None] | None = None) -> list[dict]:
    """Train a pack, compute its metric columns and return its rows (status 'ok')."""
    import torch

    from fairdp.metrics import evaluate_pack

    load_plugins(ctx.plugins)
    torch.set_num_threads(max(1, int(ctx.cpus_per_trial)))
    data = load_study_data(ctx)
    method = get_method(pack.method)
    t0 = time.perf_counter()
    result = method.train_pack(data, list(pack.configs), pack.seed, ctx.train, callback=callback)
    metrics = evaluate_pack(data, result, with_leakage=ctx.leakage, with_mdl=ctx.mdl,
                            probe=dataclasses.replace(ctx.probe, seed=pack.seed))
    elapsed = time.perf_counter() - t0
    rows = []
    for i, m in enumerate(metrics):
        row = base_row(ctx, pack, i)
        row.update(m, duration_s=elapsed / len(pack.configs), pack_duration_s=elapsed, status="ok")
        rows.append(row)
    return rows


def error_rows(ctx: StudyContext, pack: Pack, error: str) -> list[dict]:
    """The rows of a pack that failed: identity and hyperparameters, status 'error', the message."""
    load_plugins(ctx.plugins)
    rows = []
    for i in range(len(pack.configs)):
        row = base_row(ctx, pack, i)
        row.update(status="error", error=error)
        rows.append(row)
    return rows


def store_pack(ctx: StudyContext, pack: Pack, rows: list[dict]) -> str:
    return ctx.store().write_pack(rows, ctx.dataset, pack.method, pack.seed, pack.id)


def run_pack(ctx: StudyContext, pack: Pack, callback: Callable[[EpochReport], None] | None = None) -> list[dict]:
    """Train, evaluate and store one pack; returns its rows."""
    rows = pack_rows(ctx, pack, callback)
    store_pack(ctx, pack, rows)
    return rows
