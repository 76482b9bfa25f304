"""The selected configs' test predictions, stored beside the results on request
(``evaluate.predictions: selected``; docs/predictions.md).

While a run lasts, each pack keeps its configs' test predictions under the results, in
``<results>/.predictions/<pack id>.pq`` (``_worker``: written atomically before the pack's rows,
so a pack whose rows are stored has its file; a pack trained again replaces it). When the run
ends (not on a Ctrl-C: the next run does it), ``store_predictions`` picks the configs the
study's stored selection picks (``select_by_rt`` with its fairness, rt and by, as ``fairdp
report`` does) among every row of the results, and writes their predictions, one row per
(pick, test example), to ``<results>.predictions.parquet``, a side table beside the results
like the plan and the selection. Once the run leaves nothing to train, the per-pack files are
deleted. A pick's predictions come from its pack's file, else from the table stored before;
a pick whose predictions neither holds (the selection changed, or configs were added, after an
earlier run deleted the per-pack files) has its pack trained again in this process, exactly as
it was composed (runs are deterministic). Every pick's predictions are checked against its
row's ``test_confusion`` (the counts its test metrics were computed from) before they are
stored: a pick whose predictions do not give its row's counts is left out, with a warning.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from fairdp.analysis import select_by_rt
from fairdp.errors import InputError
from fairdp.fairness import confusion
from fairdp.study._context import load_study_data
from fairdp.study.executors._worker import PREDICTION_PARTS, predictions_part, train_pack
from fairdp.study.run._plan import Pack
from fairdp.study.store._predictions import PICK_KEYS, PREDICTIONS_TABLE
from fairdp.study.store._selection import StoredSelection, read_selection
from fairdp.study.store._store import ResultStore, pack_id, with_module_keywords

if TYPE_CHECKING:
    from fairdp.study.run._prepare import Prepared

logger = logging.getLogger(__name__)


def store_predictions(prep: Prepared, configs: Mapping[tuple[str, int], Mapping[str, dict]], *,
                      complete: bool) -> str | None:
    """Write the predictions of the configs the stored selection picks among the results' rows
    to ``<results>.predictions.parquet`` (atomically; only when they changed) and return its
    path, None when nothing is picked. ``configs``: the study's configs per (method, seed),
    config id -> config (``Backlog.configs``), from which a pick's pack is trained again when
    its predictions are no longer kept. ``complete``: the run left nothing to train, so the
    per-pack files are deleted. Called under the results' lock."""
    store, spec = prep.store, prep.spec
    selection = read_selection(store) or StoredSelection.of_spec(spec)
    rows, _ = store.read(on_corrupt="collect")
    picks = _picks(with_module_keywords(rows), selection, prep.results)
    path = None
    if picks is not None and len(picks):
        data = load_study_data(prep.ctx.dataset, prep.ctx.dataset_options)
        test = data.split("test")
        y, s = np.asarray(test.y, dtype=np.int64), np.asarray(test.s, dtype=np.int64)
        other = picks["dataset"] != prep.ctx.dataset
        if other.any():
            logger.warning("fairdp run %s: no predictions for %d selected configs of another dataset than %s",
                           spec.name, int(other.sum()), prep.ctx.dataset)
            picks = picks[~other]
        old = _previous(store)
        found = _gathered(store, picks, old, len(y))
        missing = sorted(set(zip(picks["pack_id"], picks["config_id"])) - set(found))
        if missing:
            found.update(_trained_again(prep, rows, missing, configs, data))
        found = _checked(found, picks, y, s, data.n_classes, data.n_groups, spec.name)
        kept = picks[[(p, c) in found for p, c in zip(picks["pack_id"], picks["config_id"])]]
        if len(kept):
            table = _table(kept, list(selection.by), found, y, s)
            path = store.side_table_path(PREDICTIONS_TABLE)
            if old is None or not old.equals(table):
                store.fs.create_dir(store.root.rsplit("/", 1)[0], recursive=True)
                store._write(table, path)
                prep.say(f"stored the test predictions of {len(kept)} selected configs in {path} "
                         f"(fairdp.study.read_predictions)")
    if complete:
        _drop_parts(store)
    return path


def _picks(rows: pd.DataFrame, selection: StoredSelection, location: str) -> pd.DataFrame | None:
    """The stored selection's picks among ``rows``: their keys, pack, ``by`` values and test
    counts; None (with a warning) when the rows cannot be selected on."""
    if not len(rows) or not (rows["status"] == "ok").any():
        return None
    by = list(selection.by)
    try:
        # rows left out for NaN metrics: the report says so, so the notes are dropped here
        picks = select_by_rt(rows, rt=selection.rt, fairness=selection.fairness, by=by, notes=[])
    except InputError as e:
        logger.warning("fairdp: %s: no predictions of the selected configs stored: %s", location, e)
        return None
    return picks[[*PICK_KEYS, *by, "pack_id", "test_confusion"]].reset_index(drop=True)


def _previous(store: ResultStore) -> pa.Table | None:
    """The predictions table stored before, or None (none, or unreadable: it is rebuilt)."""
    path = store.side_table_path(PREDICTIONS_TABLE)
    if store.fs.get_file_info(path).type != pafs.FileType.File:
        return None
    try:
        return pq.read_table(path, filesystem=store.fs)
    except (pa.ArrowException, OSError) as e:
        logger.warning("fairdp: %s: unreadable (%s); written again", path,
                       str(e).splitlines()[0] if str(e) else type(e).__name__)
        return None


def _gathered(store: ResultStore, picks: pd.DataFrame, old: pa.Table | None, n: int) -> dict:
    """(pack id, config id) -> test predictions of the picks, from the table stored before and
    the packs' files under the results."""
    wanted = set(zip(picks["pack_id"], picks["config_id"]))
    found = {}
    if old is not None and {"pack_id", "config_id", "row", "y_pred"} <= set(old.column_names):
        prev = old.select(["pack_id", "config_id", "row", "y_pred"]).to_pandas()
        for (pid, cid), part in prev.groupby(["pack_id", "config_id"], sort=False):
            if (pid, cid) in wanted:
                part = part.drop_duplicates("row").sort_values("row")
                if len(part) == n and (part["row"].to_numpy() == np.arange(n)).all():
                    found[(pid, cid)] = part["y_pred"].to_numpy(dtype=np.int64)
    for pid in sorted({p for p, c in wanted if (p, c) not in found}):
        path = predictions_part(store, pid)
        if store.fs.get_file_info(path).type != pafs.FileType.File:
            continue
        try:
            part = pq.read_table(path, filesystem=store.fs)
            preds = part.column("y_pred").combine_chunks().flatten().to_numpy().reshape(part.num_rows, n)
        except (pa.ArrowException, OSError, ValueError, KeyError) as e:
            logger.warning("fairdp: %s: unreadable (%s); its pack is trained again if a selected config needs it",
                           path, str(e).splitlines()[0] if str(e) else type(e).__name__)
            continue
        for cid, pred in zip(part.column("config_id").to_pylist(), preds):
            if (pid, cid) in wanted:
                found[(pid, cid)] = pred.astype(np.int64)
    return found


def _trained_again(prep: Prepared, rows: pd.DataFrame, missing: list[tuple[str, str]],
                   configs: Mapping[tuple[str, int], Mapping[str, dict]], data) -> dict:
    """The test predictions of the ``missing`` picks (pack id, config id), each of their packs
    trained again in this process as it was composed (its stored rows' configs, in the order of
    the study's grid); a pack whose configs are not all in ``configs`` is left out, warned."""
    ok = rows[rows["status"] == "ok"]
    out = {}
    pids = sorted({pid for pid, _ in missing})
    prep.say(f"training {len(pids)} packs again for the test predictions of {len(missing)} selected configs that "
             f"no longer have them (the selection or the configs changed since they were stored)")
    for pid in pids:
        mine = ok[ok["pack_id"] == pid]
        method, seed = str(mine["method"].iloc[0]), int(mine["seed"].iloc[0])
        grid = configs.get((method, seed), {})
        stored = set(mine["config_id"])
        ids = [cid for cid in grid if cid in stored]
        if len(ids) != len(stored) or pack_id(method, seed, ids) != pid:
            logger.warning("fairdp: no predictions for %d selected %s configs of seed %d: their pack %s holds configs "
                           "that this study's grids no longer have, so it cannot be trained again as it was",
                           sum(p == pid for p, _ in missing), method, seed, pid)
            continue
        pack = Pack(method, seed, tuple(grid[cid] for cid in ids), tuple(ids))
        try:
            result = train_pack(prep.ctx, pack, data)
        except Exception as e:  # noqa: BLE001 - the rows are stored: a failure here loses only these predictions
            logger.warning("fairdp: no predictions for the selected configs of pack %s: training it again failed "
                           "(%s: %s)", pid, type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            continue
        for cid, pred in zip(ids, result.predictions["test"]):
            out[(pid, cid)] = np.asarray(pred, dtype=np.int64)
    return out


def _checked(found: dict, picks: pd.DataFrame, y: np.ndarray, s: np.ndarray, n_classes: int, n_groups: int,
             study: str) -> dict:
    """``found`` without the predictions that do not give their row's test counts (warned)."""
    out = {}
    counts = dict(zip(zip(picks["pack_id"], picks["config_id"]), picks["test_confusion"]))
    for key, pred in found.items():
        stored = counts.get(key)
        if not isinstance(stored, str):  # rows written before fairdp stored counts: nothing to check
            out[key] = pred
            continue
        got = confusion(y, pred, s, n_classes=n_classes, n_groups=n_groups).reshape(n_groups, n_classes, n_classes)
        if np.array_equal(got, np.asarray(json.loads(stored), dtype=np.int64)):
            out[key] = pred
        else:
            logger.warning("fairdp run %s: the test predictions of config %s (pack %s) do not give its row's test "
                           "counts; left out of the predictions table", study, key[1], key[0])
    return out


def _arrow(series: pd.Series) -> pa.Array:
    """A key column as Arrow: as pandas holds it, or as text where its values are of mixed types
    (a module keyword's values)."""
    try:
        return pa.Array.from_pandas(series)
    except (pa.ArrowException, TypeError, ValueError):
        return pa.array([None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v) for v in series],
                        pa.string())


def _table(picks: pd.DataFrame, by: list[str], found: dict, y: np.ndarray, s: np.ndarray) -> pa.Table:
    """One row per (pick, test example): the pick's keys and ``by`` values, the example's
    ``row``, ``y_true``, ``sensitive`` and ``y_pred``, and the pick's ``pack_id``."""
    picks = picks.reset_index(drop=True)
    n, k = len(y), len(picks)
    each = pa.array(np.repeat(np.arange(k), n))
    columns = {c: _arrow(picks[c]).take(each) for c in [*PICK_KEYS, *by]}
    columns.update(row=pa.array(np.tile(np.arange(n, dtype=np.int64), k)), y_true=pa.array(np.tile(y, k)),
                   sensitive=pa.array(np.tile(s, k)),
                   y_pred=pa.array(np.concatenate([found[key] for key in zip(picks["pack_id"], picks["config_id"])])),
                   pack_id=_arrow(picks["pack_id"]).take(each))
    return pa.table(columns)


def _drop_parts(store: ResultStore) -> None:
    """Delete the packs' prediction files (a run that left nothing to train has gathered them)."""
    folder = f"{store.root}/{PREDICTION_PARTS}"

    def drop() -> None:
        if store.fs.get_file_info(folder).type == pafs.FileType.Directory:
            store.fs.delete_dir(folder)

    store.retrying(folder, drop)
