"""A pack trial, the worker side of a study: train a pack, evaluate it, store its rows.

Nothing here needs Ray: the Ray Tune driver (``_tune``) calls ``run_pack`` inside a trial,
and anything else (a test, an in-process executor) may call it directly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np
import pandas as pd
import torch

from fairdp import __version__, schema
from fairdp.data import load_dataset
from fairdp.engine import (
    VALID_CURVES,
    Architecture,
    EpochReport,
    PackResult,
    TrainSettings,
    checkpointing,
    published_data_fingerprint,
)
from fairdp.errors import InputError
from fairdp.methods import get_method, load_plugins
from fairdp.metrics import ProbeSettings, evaluate_pack
from fairdp.privacy import trial_count_from_dict
from fairdp.study._lock import exit_if_driver_gone, registered_worker, watch_driver
from fairdp.study._plan import Pack, tuning_draws
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
    method_settings: dict = dataclasses.field(default_factory=dict)  # name -> MethodSettings
    # the study's random trial count (TrialCount.to_dict()) and each method's grid it draws
    # from; None when every grid config is trained
    tuning: dict | None = None
    grids: dict = dataclasses.field(default_factory=dict)  # name -> tuple of configs
    # a pack in training saves a checkpoint this often (seconds; 0: never) to resume from
    # if it is killed; it does not change what the pack computes
    checkpoint_every_s: float = 600.0
    protocol: str = ""  # study_protocol(spec, data) as JSON, stored in every row
    driver: tuple[str, int] | None = None  # (host, pid) of the run's driver: its workers die with it

    @classmethod
    def from_spec(cls, spec: StudySpec, results: str, data=None) -> StudyContext:
        """The context of ``spec``'s packs; with the loaded ``data`` its protocol (stored in every
        row) includes the data's fingerprint."""
        gpus = spec.resources.gpus_per_trial
        train = dataclasses.replace(spec.train, gpu_share=min(1.0, gpus)) if gpus > 0 else spec.train
        methods = [m.name for m in spec.methods] + ([spec.search.method] if spec.search else [])
        return cls(spec.name, spec.dataset, dict(spec.dataset_options), train, spec.leakage, spec.mdl,
                   spec.probe, results, spec.resources.cpus_per_trial, spec.plugins,
                   tuple(study_columns(methods)), dict(spec.method_settings),
                   spec.tuning.to_dict() if spec.tuning is not None else None,
                   {m.name: m.configs for m in spec.methods} if spec.tuning is not None else {},
                   protocol=protocol_json(spec, data))

    def training(self, method: str) -> tuple[TrainSettings, Architecture | None]:
        """The settings and architecture ``method`` trains with in this study (its defaults
        when the study does not say)."""
        ms = self.method_settings.get(method)
        if ms is None:
            return self.train, None
        return dataclasses.replace(self.train, lr=ms.lr), ms.architecture

    def store(self) -> ResultStore:
        return ResultStore(self.results, columns=self.columns or None)


@functools.lru_cache(maxsize=4)
def _load(name: str, options_json: str):

    return load_dataset(name, **json.loads(options_json))


def _plain(value):
    """A setting as JSON data: dataclasses as mappings, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _protocol_fields(obj) -> dict:
    """The fields of a settings dataclass whose ``protocol`` metadata is True (the default)."""
    return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)
            if f.metadata.get("protocol", True) is True}


def study_protocol(spec: StudySpec, data=None) -> dict:
    """Every setting of ``spec`` that changes what a result row means and is not a row column
    of its own, derived from the fields of ``StudySpec`` and ``TrainSettings`` (their
    ``protocol`` metadata), so a new setting is compared unless it is marked otherwise; with
    the loaded ``data``, a fingerprint of its labels, splits and feature shape (never of its
    protected attributes: rows publish it)."""
    out = _protocol_fields(spec)
    out["train"] = _protocol_fields(spec.train)
    if data is not None:
        out["data"] = published_data_fingerprint(data)
    return out


# protocol keys as a study file spells them
_SETTING_NAMES = {"dataset_options": "dataset", "leakage": "evaluate.leakage", "mdl": "evaluate.mdl",
                  "train.prune": "prune"}


def _setting_name(key: str) -> str:
    for prefix, name in _SETTING_NAMES.items():
        if key == prefix or key.startswith(prefix + "."):
            return name + key[len(prefix):]
    return key


def protocol_json(spec: StudySpec, data=None) -> str:
    return json.dumps(study_protocol(spec, data), sort_keys=True, separators=(",", ":"))


def protocol_difference(have: dict, want: dict, path: str = "") -> tuple[str, object, object] | None:
    """The first setting (dotted path) where two protocols differ, with both values."""
    for key in sorted(set(have) | set(want)):
        a, b, where = have.get(key), want.get(key), f"{path}.{key}" if path else key
        if isinstance(a, dict) and isinstance(b, dict):
            found = protocol_difference(a, b, where)
            if found:
                return found
        elif a != b:
            return where, a, b
    return None


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
    """Identity, the method's guarantee kind, hyperparameters (one column per hyperparameter
    the method declares) and provenance."""
    config = pack.configs[i]
    row = {"study": ctx.study, "dataset": ctx.dataset, "method": pack.method, "seed": pack.seed,
           "config_id": pack.config_ids[i], "epochs": ctx.train.epochs, "pack_id": pack.id,
           "pack_size": len(pack.configs), "fairdp_version": __version__, "node": _node(),
           "finished_at": datetime.now(timezone.utc), "protocol": ctx.protocol or None}
    method = get_method(pack.method)
    row[schema.GUARANTEE] = method.guarantee_kind  # what its eps protects, from the method itself
    for h in method.hyperparams:
        row[h.name] = h.to_column(config[h.name])
    row.update(training_provenance(ctx, pack.method))
    for h in method.setting_params:  # a setting the grid sweeps: the config's own value
        if h.name in config:
            row[h.name] = config[h.name]
    return row


def training_provenance(ctx: StudyContext, method_name: str) -> dict:
    """How the rows of ``method_name`` are trained and probed: optimizer, lr, architecture
    (JSON) and probe protocol (JSON); None where it does not apply."""
    method = get_method(method_name)
    train, arch = ctx.training(method_name)
    arch = arch or (method.default_architecture(ctx.dataset) if method.uses_architecture else None)
    return {"optimizer": method.optimizer, "lr": method.effective_settings(train).lr,
            "batch_size": train.batch_size if method.optimizer is not None else None,
            "architecture": json.dumps(arch.to_dict()) if arch is not None else None,
            "probe": json.dumps(ctx.probe.protocol()) if (ctx.leakage or ctx.mdl) else None}


def check_same_training(ctx: StudyContext, stored, location: str, methods) -> None:
    """Refuse to resume a method whose stored rows were trained or probed otherwise: a table
    would mix two protocols. Rows from before these columns existed are not checked."""
    if not len(stored):
        return
    ok = stored[stored["status"] == "ok"]
    for name in methods:
        rows = ok[ok["method"] == name]
        ms = ctx.method_settings.get(name)
        swept = ms.swept if ms is not None else ()
        for key, want in training_provenance(ctx, name).items():
            if key not in rows.columns or key in swept:  # a swept setting is part of each config
                continue
            have = rows[key].dropna()
            if key == "probe" and want is not None:
                # as settings, so that keys recorded since (alpha, max_epochs, ...) read as their
                # defaults in older rows, which were probed with those defaults
                have = have.map(lambda p: json.dumps(ProbeSettings.from_protocol(p).protocol()))
            if key in ("lr", "batch_size") and want is not None:
                differs = have[(have.astype(float) - want).abs() > 1e-12 * want]
            else:
                differs = have[have != want]
            if len(differs):
                raise InputError(f"{location}: holds {name} runs with {key} {differs.iloc[0]}, this run asks for "
                                 f"{want} (methods.{name}); pass another --results")
    # bf16 rows and full-precision rows in one table would be two protocols; TF32 and
    # float32 are one request whose effective value depends on the worker's device. No
    # precision given follows the stored rows (``choose_precision``): nothing to refuse.
    if "precision" in ok.columns and ctx.train.precision is not None:
        have = ok.loc[ok["method"].isin(list(methods)), "precision"].dropna()
        clash = have[(have == "bf16") != (ctx.train.precision == "bf16")]
        if len(clash):
            raise InputError(f"{location}: holds runs computed in {clash.iloc[0]}, this run's train.precision is "
                             f"{ctx.train.precision}; pass another --results")
    # every other setting that changes what a row means
    if ctx.protocol and "protocol" in ok.columns:
        want = json.loads(ctx.protocol)
        for text in ok.loc[ok["method"].isin(list(methods)), "protocol"].dropna().unique():
            have = json.loads(text)
            # a named setting first: other options also give other data
            found = protocol_difference({k: v for k, v in have.items() if k != "data"},
                                        {k: v for k, v in want.items() if k != "data"})
            found = found or protocol_difference({"data": have.get("data", want.get("data"))},
                                                 {"data": want.get("data")})
            if found:
                key, have, asked = found
                if key == "data":
                    raise InputError(f"{location}: holds rows trained on other data than this run's {ctx.dataset} "
                                     f"(same options, other labels, groups, splits or features: its files or "
                                     f"loader changed); a table would mix two datasets: pass another --results")
                raise InputError(f"{location}: holds rows made with {_setting_name(key)} {json.dumps(have)}, this run "
                                 f"asks for {json.dumps(asked)}; a table would mix two protocols: pass another "
                                 f"--results")


def pack_rows(ctx: StudyContext, pack: Pack, callback: Callable[[EpochReport], None] | None = None) -> list[dict]:
    """Train a pack, compute its metric columns and return its rows (status 'ok')."""
    return trained_pack(ctx, pack, callback)[0]


def trained_pack(ctx: StudyContext, pack: Pack, callback: Callable[[EpochReport], None] | None = None
                 ) -> tuple[list[dict], pd.DataFrame]:
    """Train a pack: its rows (status 'ok') and its configs' per-epoch valid curves
    (``history_frame``)."""
    load_plugins(ctx.plugins)
    torch.set_num_threads(max(1, int(ctx.cpus_per_trial)))
    data = load_study_data(ctx)
    method = get_method(pack.method)
    t0 = time.perf_counter()
    train, arch = ctx.training(pack.method)
    result = method.train_pack(data, list(pack.configs), pack.seed, train, arch=arch, callback=callback,
                               config_ids=list(pack.config_ids))
    metrics = evaluate_pack(data, result, with_leakage=ctx.leakage, with_mdl=ctx.mdl,
                            probe=dataclasses.replace(ctx.probe, seed=pack.seed))
    elapsed = time.perf_counter() - t0 + result.resumed_s  # a resumed pack's earlier training counts
    tuning = tuning_record(ctx, pack, data) if ctx.tuning is not None else None  # the run's, shared by its rows
    rows = []
    for i, m in enumerate(metrics):
        row = base_row(ctx, pack, i)
        row.update(m, duration_s=elapsed / len(pack.configs), pack_duration_s=elapsed, status="ok",
                   precision=result.precision)
        if result.pruned_at is not None and result.pruned_at[i]:  # null: trained every epoch
            row["pruned_at"] = int(result.pruned_at[i])
        if tuning is not None:
            row[schema.TUNING] = tuning
        rows.append(row)
    return rows, history_frame(ctx, pack, result)


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


def store_pack(ctx: StudyContext, pack: Pack, rows: list[dict]) -> str:
    return ctx.store().write_pack(rows, ctx.dataset, pack.method, pack.seed, pack.id)


def run_pack(ctx: StudyContext, pack: Pack, callback: Callable[[EpochReport], None] | None = None) -> list[dict]:
    """Train, evaluate and store one pack; returns its rows. While it trains, the pack saves a
    checkpoint every ``ctx.checkpoint_every_s`` under the results, resumes from one left by
    a run that was killed, and deletes it once its rows are stored."""
    store = ctx.store()
    checkpoint = store.checkpoint(pack.id)
    if ctx.driver is not None:
        watch_driver(*ctx.driver)
    with registered_worker(store.root) if ctx.driver is not None and store.is_local else contextlib.nullcontext():
        with checkpointing(checkpoint, ctx.checkpoint_every_s) if ctx.checkpoint_every_s > 0 else \
                contextlib.nullcontext():
            rows, history = trained_pack(ctx, pack, callback)
        if ctx.driver is not None:
            exit_if_driver_gone(*ctx.driver)  # the watch polls; this closes the gap before a store
        if len(history):  # before the rows, which say the pack is done
            store.write_history(history, ctx.dataset, pack.method, pack.seed, pack.id)
        store_pack(ctx, pack, rows)
        checkpoint.drop()
    return rows
