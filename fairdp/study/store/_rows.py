"""A pack's rows: identity, hyperparameters and provenance (``base_row``), the per-epoch
curves and a tuned run's record. Built on the worker for a trained pack, on the driver for one
that failed (``write_error_rows``)."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone

import numpy as np
import pandas as pd

from fairdp import __version__, schema
from fairdp.engine._shared import device_record, is_model_keyword, resolve_device
from fairdp.engine.contract import VALID_CURVES, PackResult
from fairdp.methods import get_method, load_plugins
from fairdp.privacy._shared import trial_count_from_dict
from fairdp.study._context import StudyContext, training_provenance
from fairdp.study.run._plan import Pack, tuning_draws
from fairdp.study.store._store import ResultStore


def _node() -> str:
    # a process that never imported Ray runs no Ray node (a local run: importing it costs 0.5 s)
    ray = sys.modules.get("ray")
    try:
        if ray is not None and ray.is_initialized():
            return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - provenance only; never fail a pack over it
        pass
    import socket

    return socket.gethostname()


def base_row(ctx: StudyContext, pack: Pack, i: int) -> dict:
    """Identity, the method's guarantee kind, hyperparameters (one column per hyperparameter
    the method declares) and provenance."""
    config = pack.configs[i]
    row = {"study": ctx.study, "dataset": ctx.dataset, "method": pack.method, "seed": pack.seed,
           "config_id": pack.config_ids[i], "epochs": ctx.train.epochs, "pack_id": pack.id,
           "pack_size": len(pack.configs), "fairdp_version": __version__, "node": _node(),
           "finished_at": datetime.now(timezone.utc), "protocol": ctx.protocol or None,
           "device": json.dumps(device_record(resolve_device(ctx.train.device)), sort_keys=True)}
    method = get_method(pack.method)
    row[schema.GUARANTEE] = method.guarantee_kind  # what its eps protects, from the method itself
    for h in method.hyperparams:
        # an optional hyperparameter a config leaves out (``HyperParam.default``) trained at its default
        row[h.name] = h.to_column(config[h.name] if h.name in config or h.default is None else h.default)
    row.update(training_provenance(ctx, pack.method))
    if any(is_model_keyword(k) for k in config):  # module keywords the grid sweeps: this config's own network
        row["architecture"] = json.dumps(method.config_architecture(config, ctx.training(pack.method)[1]).to_dict())
    for h in method.setting_params:  # a setting the grid sweeps: the config's own value
        if h.name in config:
            row[h.name] = config[h.name]
    return row


def history_frame(ctx: StudyContext, pack: Pack, result: PackResult) -> pd.DataFrame:
    """One row per (config, epoch it trained): identity, the 1-based epoch, ``valid_<curve>``
    for every curve of ``VALID_CURVES``, and ``kept`` (the epoch whose model the config's row
    reports). Empty for methods not trained by epochs."""
    history = result.valid_history
    k, epochs = len(pack.configs), result.valid_accuracy_history.shape[1]
    config, epoch = np.repeat(np.arange(k), epochs), np.tile(np.arange(1, epochs + 1), k)
    frame = pd.DataFrame({
        "study": ctx.study, "dataset": ctx.dataset, "method": pack.method, "seed": pack.seed,
        "config_id": np.asarray(pack.config_ids, dtype=object)[config], "epoch": epoch.astype(np.int64),
        **{f"valid_{name}": np.asarray(history[name], dtype=float).reshape(-1) if epochs else np.zeros(0)
           for name in VALID_CURVES},
        "kept": epoch == np.asarray(result.best_epoch)[config]})
    return frame[frame["valid_accuracy"].notna()].reset_index(drop=True)  # a pruned config's later epochs


def tuning_record(ctx: StudyContext, pack: Pack, data) -> str:
    """JSON of what a tuned run's release bound needs: the count's distribution, how many
    trials the run drew, and the distinct events of the grid a trial draws from (a trial's
    RDP is bounded by their pointwise maximum, not by the drawn configs' alone)."""

    method = get_method(pack.method)
    grid = list(ctx.grids[pack.method])
    train, arch = ctx.training(pack.method)
    events = sorted({e for e in method.grid_events(data, grid, train, arch) if e is not None})
    drawn = len(tuning_draws(trial_count_from_dict(ctx.tuning), len(grid), pack.method, pack.seed))
    return json.dumps({**ctx.tuning, "drawn": drawn, "grid_size": len(grid), "grid_events": events},
                      sort_keys=True, separators=(",", ":"))


def error_rows(ctx: StudyContext, pack: Pack, error: str) -> list[dict]:
    """The rows of a pack that failed: identity and hyperparameters, status 'error', the message."""
    load_plugins(ctx.plugins)
    rows = []
    for i in range(len(pack.configs)):
        row = base_row(ctx, pack, i)
        row.update(status="error", error=error)
        rows.append(row)
    return rows


def write_error_rows(store: ResultStore, ctx: StudyContext, pack: Pack, error: str) -> str:
    """Store the error rows of a pack that failed (the next run trains it again); the file's path."""
    return store.write_pack(error_rows(ctx, pack, error), ctx.dataset, pack.method, pack.seed, pack.id)
