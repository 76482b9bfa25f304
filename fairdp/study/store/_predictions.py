"""The selected configs' test predictions stored beside the results (``evaluate.predictions:
selected``; docs/predictions.md): where they are and how they are read. A run gathers and writes
them (``fairdp.study.run._predictions``).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow.fs as pafs

from fairdp.errors import InputError
from fairdp.study.store._store import ResultStore

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

PREDICTIONS_TABLE = "predictions.parquet"
PICK_KEYS = ["dataset", "method", "seed", "config_id"]


def predictions_path(results: str | os.PathLike) -> str:
    """Where the predictions of the selected configs of the results at ``results`` are
    stored: ``<results>.predictions.parquet``, beside them."""
    return ResultStore(results).side_table_path(PREDICTIONS_TABLE)


def stored_predictions(results: str | os.PathLike) -> str | None:
    """The path of the predictions table stored beside the results at ``results``, or None
    when there is none (a study without ``evaluate.predictions: selected``, or a Parquet file
    of rows, which has no side tables)."""
    if os.path.isfile(str(results)):
        return None
    store = ResultStore(results)
    path = store.side_table_path(PREDICTIONS_TABLE)
    return path if store.fs.get_file_info(path).type == pafs.FileType.File else None


def read_predictions(results: str | os.PathLike) -> pd.DataFrame:
    """The test-set predictions of the configs the study's stored selection picks, as a run
    with ``evaluate.predictions: selected`` stored them beside the results at ``results``: one
    row per (pick, test example), with columns ``dataset``, ``method``, ``seed``,
    ``config_id``, the selection's ``by`` keys, ``row`` (the example's index in the test
    split), ``y_true``, ``sensitive`` (its group's code, ``Dataset.group_names`` in order),
    ``y_pred`` and ``pack_id``. ``InputError`` naming the table when none is stored or it
    cannot be read."""
    path = predictions_path(results)
    if stored_predictions(results) is None:
        raise InputError(f"{path}: no predictions stored; set evaluate.predictions: selected in the study file and "
                         f"run it into {results} (fairdp run)")
    df = ResultStore(results).read_side_table(PREDICTIONS_TABLE)
    if df is None:  # deleted in between
        raise InputError(f"{path}: no predictions stored")
    return df
