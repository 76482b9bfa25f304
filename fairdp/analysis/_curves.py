"""Per-epoch validation curves of selected configs (the ``<results>.history`` side table)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairdp.analysis._rows import as_frame, check_fairness, ok_rows, require_columns
from fairdp.schema import NOTION_GAP, NOTION_METRICS

CURVE_KEYS = ("dataset", "method", "seed", "config_id")


def selected_curves(history: pd.DataFrame, selected: pd.DataFrame, fairness: str = "tpr_gap") -> pd.DataFrame:
    """The curves (``fairdp.read_history``) of the configs in ``selected`` (e.g. ``select_by_rt``'s
    rows): one row per (dataset, method, seed, epoch) with ``valid_accuracy``, ``valid_loss``,
    ``valid_gap`` (the selection's ``fairness`` gap; for ``notion_gap`` each config's own
    notion's, demographic parity for a config without one) and ``kept``. A selected config
    without curves (a baseline not trained by epochs, rows from before curves were stored)
    has no rows here."""
    history, rows = as_frame(history, "history"), ok_rows(selected, "selected")
    fairness = check_fairness(fairness)
    columns = ["epoch", "valid_accuracy", "valid_loss", "kept"]
    require_columns(history, [*CURVE_KEYS, *columns], "history")
    require_columns(rows, CURVE_KEYS, "selected")
    keys = [*CURVE_KEYS, *(["study"] if "study" in history.columns and "study" in rows.columns else [])]
    picks = rows[keys + (["fairness_notion"] if "fairness_notion" in rows.columns else [])].drop_duplicates(keys)
    curves = history.merge(picks, on=keys, how="inner")
    if fairness == NOTION_GAP:
        notion = curves["fairness_notion"] if "fairness_notion" in curves.columns else pd.Series("dp", curves.index)
        column = notion.fillna("dp").map(lambda n: f"valid_{NOTION_METRICS[n]}")
        gap = np.full(len(curves), np.nan)
        for name in column.unique():
            at = (column == name).to_numpy()
            gap[at] = curves.loc[at, name].to_numpy(float)
        curves["valid_gap"] = gap
    else:
        require_columns(history, [f"valid_{fairness}"], "history")
        curves["valid_gap"] = curves[f"valid_{fairness}"].astype(float)
    out = curves[[*CURVE_KEYS, "epoch", "valid_accuracy", "valid_gap", "valid_loss", "kept"]]
    return out.sort_values([*CURVE_KEYS, "epoch"], kind="mergesort").reset_index(drop=True)
