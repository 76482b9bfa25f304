"""Following a run's store from the driver and logging what it stores."""

from __future__ import annotations

import logging
import os
import threading

import pandas as pd
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from fairdp.errors import last_line
from fairdp.schema import FIXED_COLUMNS, METRIC_COLUMNS
from fairdp.tracking._base import ConfigRecord, Tracker

logger = logging.getLogger(__name__)

POLL_ENV = "FAIRDP_TRACKING_POLL_S"
POLL_S = 5.0
# how each config trained, logged as params beside its hyperparameters
SETTINGS = ("epochs", "optimizer", "lr", "batch_size", "precision", "accountant", "sampler", "packing", "architecture",
            "pack_size", "fairdp_version")
EXTRA_METRICS = ("best_epoch", "pruned_at", "duration_s")


def records_of_pack(rows: pd.DataFrame, curves: pd.DataFrame | None) -> list[ConfigRecord]:
    """One record per row of a stored pack: hyperparameters (every column that is not a fixed
    result column) and settings as params, the row's metrics, the config's curves."""
    out = []
    for _, row in rows.iterrows():
        params = {c: row[c] for c in rows.columns
                  if c not in FIXED_COLUMNS and pd.notna(row[c])}
        params.update({c: row[c] for c in SETTINGS if c in rows.columns and pd.notna(row[c])})
        metrics = {c: row[c] for c in (*METRIC_COLUMNS, *EXTRA_METRICS) if c in rows.columns and pd.notna(row[c])}
        # a merged file's curves hold many seeds (and methods) of one config id: match all three
        mine = curves[(curves["config_id"] == row["config_id"]) & (curves["seed"] == row["seed"])
                      & (curves["method"] == row["method"])] if curves is not None and len(curves) else None
        out.append(ConfigRecord(
            study=str(row["study"]), dataset=str(row["dataset"]), method=str(row["method"]), seed=int(row["seed"]),
            config_id=str(row["config_id"]), params=params, metrics=metrics,
            curves=mine.sort_values("epoch") if mine is not None else pd.DataFrame({"epoch": []}),
            status=str(row["status"]), error=row["error"] if "error" in rows.columns and pd.notna(row["error"]) else None))
    return out


class TrackingSync:
    """Within a ``with`` block, every ``FAIRDP_TRACKING_POLL_S`` seconds (default 5) and once at
    its end: log to ``tracker`` (opened) every config stored in ``store`` that it does not hold.

    It runs beside the driver, never in a trial: a pack never waits for it. A tracker that
    fails stops it with one line (a warning of the ``fairdp`` logger); the rows are stored
    already, and the next run logs what is missing (``Tracker.logged``). How many configs it
    logged is said at its end (info)."""

    def __init__(self, tracker: Tracker, store):
        self.tracker, self.store = tracker, store
        self.poll_s = float(os.environ.get(POLL_ENV, POLL_S))
        self.done: set[str] = set()  # pack files already gone through
        self.logged_now = 0
        self.failed: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> TrackingSync:
        self.logged = self._guarded(self.tracker.logged) or set()
        if self.failed is None:
            self._thread = threading.Thread(target=self._follow, name="fairdp-tracking", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._guarded(self.sweep)  # what the last packs stored
        self._guarded(self.tracker.close)
        if self.failed is None:
            logger.info("fairdp: tracking: %d configs logged to %s", self.logged_now, self.tracker.where())

    def _follow(self) -> None:
        while not self._stop.wait(self.poll_s) and self.failed is None:
            self._guarded(self.sweep)

    def _guarded(self, op):
        if self.failed is not None:
            return None
        try:
            return op()
        except Exception as e:  # noqa: BLE001 - a tracker's failure must not touch the run
            self.failed = last_line(str(e), type(e).__name__, 300)
            logger.warning("fairdp: tracking: %s failed (%s: %s); the rows are stored as usual, tracking stops for "
                           "this run, and the next run logs what is missing", self.tracker.where(), type(e).__name__,
                           self.failed)
            return None

    def sweep(self) -> None:
        """Log the configs of every pack file not gone through yet that the tracker lacks."""
        with self._lock:
            for path in self.store.pack_files():
                if path in self.done:
                    continue
                rows = pq.read_table(path, filesystem=self.store.fs).to_pandas()
                keys = list(zip(rows["method"], rows["seed"].astype(int), rows["config_id"]))
                if all(k in self.logged for k in keys):
                    self.done.add(path)
                    continue
                curves = self._curves(path)
                for record in records_of_pack(rows, curves):
                    if record.key in self.logged:
                        continue
                    self.tracker.log(record)
                    self.logged.add(record.key)
                    self.logged_now += 1
                self.done.add(path)

    def _curves(self, pack_path: str) -> pd.DataFrame | None:
        """The pack's curve file (``ResultStore.history_of``), or None where it has none."""
        path = self.store.history_of(pack_path)
        if self.store.fs.get_file_info(path).type != pafs.FileType.File:
            return None
        return pq.read_table(path, filesystem=self.store.fs).to_pandas()
