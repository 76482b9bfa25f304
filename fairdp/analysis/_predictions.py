"""What the selected models predict: their test positive rate against the labels'.

A model can score a low fairness gap by predicting one class for everyone (a constant
classifier's gaps are all 0). Each row stores its test split's counts per (group, y, y_pred)
(``test_confusion``), so the rate of positive predictions, and the labels' own rate, are
functions of the row alone. Binary tasks only: "positive" is class 1.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pandas as pd

from fairdp.analysis._rows import check_by, ok_rows
from fairdp.schema import TEST_CONFUSION

CONSTANT_RATE = 1.0
"""A model whose test positive rate is below this many percent, or above 100 minus it,
predicts one class for (nearly) everyone: counted as constant."""


def positive_rate(confusion: str | None) -> tuple[float, float]:
    """(percent of test rows predicted 1, percent labelled 1) from a row's ``test_confusion``
    JSON, (G, 2, 2) counts of (group, y, y_pred); NaN for a row without counts or a task with
    more than two classes."""
    if not isinstance(confusion, str) or not confusion:
        return float("nan"), float("nan")
    conf = np.asarray(json.loads(confusion), dtype=np.float64)
    if conf.ndim != 3 or conf.shape[1:] != (2, 2) or conf.sum() == 0:
        return float("nan"), float("nan")
    total = conf.sum()
    return 100 * conf[:, :, 1].sum() / total, 100 * conf[:, 1, :].sum() / total


def positive_rates(selected: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """Per (dataset, method, *by) over the selected rows (one per seed): ``n_seeds``, mean and
    sample std of the test positive rate (percent), the labels' positive rate, and how many
    seeds' models are ``constant`` (rate within ``CONSTANT_RATE`` points of 0 or 100). Rows
    without stored counts are left out; empty when no row has them."""
    rows = ok_rows(selected, "selected")
    by = check_by(by, rows)
    columns = ["dataset", "method", *by, "n_seeds", "positive_rate_mean", "positive_rate_std", "label_rate",
               "constant"]
    if TEST_CONFUSION not in rows.columns:
        return pd.DataFrame(columns=columns)
    rates = [positive_rate(c) for c in rows[TEST_CONFUSION]]
    rows = rows.assign(_rate=[r for r, _ in rates], _label=[lab for _, lab in rates]).dropna(subset=["_rate"])
    out = []
    for key, grp in rows.groupby(["dataset", "method", *by], dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        rate = grp["_rate"]
        out.append({**dict(zip(["dataset", "method", *by], key)), "n_seeds": len(grp),
                    "positive_rate_mean": float(rate.mean()),
                    "positive_rate_std": float(rate.std(ddof=1)) if len(grp) > 1 else float("nan"),
                    "label_rate": float(grp["_label"].mean()),
                    "constant": int(((rate < CONSTANT_RATE) | (rate > 100 - CONSTANT_RATE)).sum())})
    return pd.DataFrame(out, columns=columns)
