"""The Ray Tune trainables: what a Ray worker process runs for one trial (a pack, or one config
of a per-config search), and how it reports to the driver (config-epochs done, its log records,
a store fault). Imported by the driver to hand to Tune; everything here runs in the worker."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import pickle
import sys
import time
from collections.abc import Sequence

import numpy as np
import pyarrow.parquet as pq

from fairdp.errors import StoreFault
from fairdp.methods import get_method
from fairdp.study._context import StudyContext
from fairdp.study.run._plan import Pack
from fairdp.study.search._optuna import search_config
from fairdp.study.spec._spec import SearchSpec
from fairdp.study.store._store import pack_id

UNITS_EVERY_S = 2.0  # a trial reports its config-epochs at most this often (each report is a round trip)
UNITS_EVERY_ENV = "FAIRDP_UNITS_EVERY_S"  # overrides it (tests set 0 so that every epoch reports)


def units_reporter(records: TrialRecords | None = None):
    """A training callback reporting config-epochs done to Tune, for the driver's progress,
    and at once the log records the trial emitted (``records``) since its last result.
    Its results carry no metric: searches run with Tune's strict metric check off
    (``lenient_metric_check``)."""
    from ray import tune

    every = float(os.environ.get(UNITS_EVERY_ENV, UNITS_EVERY_S))
    state = {"units": 0, "last": time.monotonic()}

    def report(epoch) -> None:
        state["units"] += epoch.configs
        now = time.monotonic()
        said = records.drain() if records is not None else {}
        if said or (now - state["last"] >= every and epoch.epoch < epoch.epochs):
            tune.report({"units": state["units"], **said})
            state["units"], state["last"] = 0, now

    return report


LOG_RECORDS = "fairdp_log"  # a trial result's key: the fairdp log records of its worker since its last result


class TrialRecords(logging.Handler):
    """The ``fairdp`` records a trial emits, as (level, logger name, message), kept until its
    next result carries them to the driver (``drain``), whose Tune callback logs them again
    there (``relog``): a Ray worker's own stderr goes to Ray's log files, not to the user."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[int, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelno, record.name, record.getMessage()))

    def drain(self) -> dict:
        """The records kept since the last drain, as the entries of a result (none: {})."""
        self.acquire()
        try:
            kept, self.records = self.records, []
        finally:
            self.release()
        return {LOG_RECORDS: {"pid": os.getpid(), "records": kept}} if kept else {}


def _handled(log: logging.Logger) -> bool:
    """Whether a handler of ``log`` or of a logger it propagates to would write its records
    (``hasHandlers`` counts fairdp's own ``NullHandler``, which writes nothing)."""
    while log is not None:
        if any(not isinstance(h, logging.NullHandler) for h in log.handlers):
            return True
        log = log.parent if log.propagate else None
    return False


@contextlib.contextmanager
def worker_logging(level: int):
    """The logging of one trial, in its worker process, for the block: the ``fairdp`` logger at
    ``level`` (the driver's, ``driver_log_level``, passed with the trial's arguments), its
    records kept by the ``TrialRecords`` yielded for the trial's results to carry to the driver,
    and written to this process's stderr (``%(message)s``, as the CLI writes them; Ray keeps it
    in the worker's log file) when no handler of the process would take them: a Ray worker
    configures none, and would drop the info records. As it was after the block (Tune reuses
    the worker's actor for the next trial)."""
    log = logging.getLogger("fairdp")
    level_before = log.level
    added: list[logging.Handler] = [TrialRecords()]
    if not _handled(log):
        stderr = logging.StreamHandler(sys.stderr)
        stderr.setFormatter(logging.Formatter("%(message)s"))
        added.append(stderr)
    for handler in added:
        log.addHandler(handler)
    log.setLevel(level)
    try:
        yield added[0]
    finally:
        for handler in added:
            log.removeHandler(handler)
        log.setLevel(level_before)


STORE_FAULT = "store_fault"  # a trial's result that stops the whole run (a full disk, a store gone)


PackTable = tuple[np.ndarray, np.ndarray]
"""A run's packs as one byte array and the offsets of each pack's pickled dict in it (n + 1)."""


def pack_table(packs: Sequence[dict]) -> PackTable:
    """``packs`` (as ``Pack.to_dict``) as a ``PackTable``: handed to every trial once, an array
    Ray maps from shared memory without copying, of which a trial unpickles its own packs only
    (a tuple of 10,000 dicts took 0.1 s to unpickle, in every trial)."""
    blobs = [pickle.dumps(p, protocol=pickle.HIGHEST_PROTOCOL) for p in packs]
    offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in blobs], out=offsets[1:])
    return np.frombuffer(b"".join(blobs), dtype=np.uint8), offsets


def table_pack(packs: PackTable, i: int) -> dict:
    """Pack number ``i`` of ``packs`` (as ``Pack.to_dict``)."""
    data, offsets = packs
    return pickle.loads(data[offsets[i]:offsets[i + 1]].tobytes())  # the driver's own bytes


RUNS_FROM_PACKS_PER_SLOT = 16
"""Packs run one to a trial until there are this many a slot; past that, in runs (``pack_runs``)."""
RUN_SHARE = 2
"""Each run takes 1 / (RUN_SHARE x slots) of the packs not yet in a run (guided self-scheduling)."""


def pack_runs(packs: int, slots: int, from_per_slot: int = RUNS_FROM_PACKS_PER_SLOT) -> np.ndarray:
    """The runs of consecutive packs that one trial each trains, one after another, as (start,
    stop) rows in pack order. Tune costs about 0.1 s a trial on two cores whatever the trial does
    (1,000 trials that did nothing took 119 s on 8 slots), a tenth of a one-second pack; so a
    study of many packs a slot hands Tune runs. Their sizes shrink as the packs left do (each
    takes ``1 / (RUN_SHARE * slots)`` of them, at least one: guided self-scheduling), so the
    last runs, of one pack, end together whatever the packs cost: Tune starts trials in
    order. Up to ``from_per_slot`` packs a slot every run is one pack, as before."""
    slots = max(1, int(slots))
    if packs < from_per_slot * slots:
        return one_pack_runs(packs)
    runs, start = [], 0
    while start < packs:
        size = max(1, math.ceil((packs - start) / (RUN_SHARE * slots)))
        runs.append((start, start + size))
        start += size
    return np.asarray(runs, dtype=np.int64)


def one_pack_runs(packs: int) -> np.ndarray:
    """``packs`` runs of one pack each, as ``pack_runs`` writes runs."""
    starts = np.arange(packs, dtype=np.int64)
    return np.stack([starts, starts + 1], axis=1)


def trial_packs(config: dict, packs: PackTable | None = None,
                runs: np.ndarray | None = None) -> list[tuple[int | None, dict]]:
    """A trial's packs (each as ``Pack.to_dict``) with their numbers among the run's ``packs``:
    the run numbered ``config["pack_run"]`` of ``runs`` (``pack_runs``), or, where a searcher
    hands a trial its pack itself (``config["pack"]``), that one, numbered None."""
    if PACK_RUN not in config:
        return [(None, config["pack"])]
    start, stop = (int(v) for v in runs[int(config[PACK_RUN])])
    return [(i, table_pack(packs, i)) for i in range(start, stop)]


PACK_RUN = "pack_run"
"""A run's trial config: the number of its run of packs (``pack_runs``) among the packs and runs
handed to every trial once (Tune's per-trial cost grows with what its configs hold: dicts as
grid values took 149 s for 1,000 empty trials where numbers took 119 s)."""
PACK_DONE = "pack_index"
"""A result's key: the number of the pack of a run whose rows it says are stored."""


def pack_trainable(config: dict, ctx: StudyContext, log_level: int = logging.WARNING,
                   packs: PackTable | None = None, runs: np.ndarray | None = None) -> None:
    """The Ray Tune trainable: a run of packs (``trial_packs``) trained one after another, each
    pack's Parquet file written and a summary reported (``PACK_DONE``: its number; a searcher's
    pack also with each row's metrics, which the searcher tells back to Optuna). While a pack
    trains it reports config-epochs done (``units``) for the progress bar. A run that Tune
    starts again after a failure skips the packs it already stored. Its messages are logged at
    the driver's ``log_level`` and carried to the driver (``worker_logging``)."""
    from ray import tune

    with worker_logging(log_level) as records:
        mine = trial_packs(config, packs, runs)
        store = ctx.store() if len(mine) > 1 else None
        for i, pack in mine:
            p = Pack.from_dict(pack)
            done = {"configs": len(p.configs), **({PACK_DONE: i} if i is not None else {})}
            try:
                if store is not None and store.has_pack(ctx.dataset, p.method, p.seed, p.id):
                    tune.report({**done, **records.drain()})  # stored by an attempt that failed after it
                    continue
                rows = _run_pack()(ctx, p, units_reporter(records))
            except StoreFault as e:  # reported, not raised: the driver stops the run with this one line
                tune.report({STORE_FAULT: str(e), **records.drain()})
                return
            done.update(configs=len(rows), pack_duration_s=rows[0]["pack_duration_s"])
            if i is None:  # a searcher's pack: the rows' metrics go back to it
                done["rows"] = [{k: v for k, v in r.items() if isinstance(v, float)} for r in rows]
            tune.report({**done, **records.drain()})


def config_trainable(config: dict, ctx: StudyContext, search: SearchSpec, log_level: int = logging.WARNING) -> None:
    """Ray Tune's trainable of a per-config search: one config trained, or answered from its
    stored row when it is a repeat; its messages logged as ``pack_trainable``'s."""
    from ray import tune

    method = get_method(search.method)
    cfg = method.validate_config(search_config(search, config))
    cid = method.config_id(cfg)
    with worker_logging(log_level) as records:
        rows = _stored_single(ctx, search, cid)
        if rows is None:
            try:
                rows = _run_pack()(ctx, Pack(search.method, search.seed, (cfg,), (cid,)), units_reporter(records))
            except StoreFault as e:  # reported, not raised: the driver stops the search with this one line
                tune.report({STORE_FAULT: str(e), **records.drain()})
                return
        said = records.drain()
    values = {k: rows[0].get(k) for k in search.objectives}
    # the constrained metrics travel in the result to the searcher, which hands them to Optuna
    constrained = {f"constraint_{c.metric}": _finite_or_none(rows[0].get(c.metric)) for c in search.constraints}
    tune.report({"configs": 1, **{k: (v if v is not None and math.isfinite(v) else math.nan)
                                  for k, v in values.items()}, **constrained, **said})


def _stored_single(ctx: StudyContext, search: SearchSpec, cid: str) -> list[dict] | None:
    """The stored ok rows of a one-config pack of ``cid`` (a per-config search's repeat), or None."""
    store = ctx.store()
    path = store.pack_path(ctx.dataset, search.method, search.seed, pack_id(search.method, search.seed, [cid]))
    try:
        rows = pq.read_table(path, filesystem=store.fs).to_pylist()
    except (OSError, Exception):  # noqa: BLE001 - not stored (or unreadable): train it
        return None
    return rows if rows and all(r.get("status") == "ok" for r in rows) else None


def _finite_or_none(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) else None


def _run_pack():
    """The worker's ``run_pack``, imported when a trial runs: the executors package imports
    the Tune driver, which imports this module, so importing it here at the top is a cycle."""
    from fairdp.study.executors._worker import run_pack  # a cycle at import time (above)

    return run_pack
