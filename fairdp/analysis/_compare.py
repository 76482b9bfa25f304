"""Two runs of one study side by side: are they the same bits, the same picks, the same
numbers within seed noise?

The same study run on two machines gives bit-identical rows only on the same kind of
device with the same builds (the float reductions of another CPU's kernels differ in their
last bits, and training amplifies them). Elsewhere the honest question is whether the
differences exceed what another seed would give: for each (dataset, method), the RT picks'
test metrics are paired by seed and their differences tested with a paired t-test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from fairdp import schema
from fairdp.analysis._intervals import check_level, t_halfwidth
from fairdp.analysis._rows import ok_rows
from fairdp.analysis._select import select_by_rt
from fairdp.errors import InputError

RUN = ["dataset", "method", "seed"]


def precisions(rows: pd.DataFrame) -> tuple[str, ...]:
    """The precisions the ok rows' packs computed in (sorted; none for rows without networks
    or from before the column)."""
    if "precision" not in rows.columns:
        return ()
    return tuple(sorted(ok_rows(rows)["precision"].dropna().unique()))


def identical_configs(a: pd.DataFrame, b: pd.DataFrame) -> tuple[int, int, float]:
    """(configs in both whose every metric is bit-equal, configs in both, the largest valid
    accuracy difference between them in points)."""
    key = [*RUN, "config_id"]
    metrics = [c for c in schema.METRIC_COLUMNS if c in a.columns and c in b.columns]
    both = ok_rows(a)[key + metrics].merge(ok_rows(b)[key + metrics], on=key, suffixes=("_a", "_b"))
    if both.empty:
        return 0, 0, math.nan
    same = np.ones(len(both), bool)
    for m in metrics:
        x = pd.to_numeric(both[f"{m}_a"], errors="coerce").to_numpy(float)
        y = pd.to_numeric(both[f"{m}_b"], errors="coerce").to_numpy(float)
        same &= (x == y) | (np.isnan(x) & np.isnan(y))
    gap = np.abs(pd.to_numeric(both["valid_accuracy_a"]) - pd.to_numeric(both["valid_accuracy_b"]))
    return int(same.sum()), len(both), float(gap.max())


def compare_picks(a: pd.DataFrame, b: pd.DataFrame, rt: float = 1.0, fairness: str = "tpr_gap",
                  by: Sequence[str] = ()) -> pd.DataFrame:
    """The RT pick of each (dataset, method, seed, *by) in both runs: columns dataset, method,
    seed, the ``by`` columns, config_id_a, config_id_b, same_pick, then test_accuracy and
    test_<fairness> of each."""
    metrics = ["test_accuracy", f"test_{fairness}"]
    keys = [*RUN, *by]
    pa = select_by_rt(a, rt=rt, fairness=fairness, by=by)[[*keys, "config_id", *metrics]]
    pb = select_by_rt(b, rt=rt, fairness=fairness, by=by)[[*keys, "config_id", *metrics]]
    picks = pa.merge(pb, on=keys, suffixes=("_a", "_b"))  # a by-value NaN in both (a method without eps) pairs
    if picks.empty:
        raise InputError("the two runs have no (dataset, method, seed) in common: they are not runs of one study")
    picks["same_pick"] = picks["config_id_a"] == picks["config_id_b"]
    order = [*keys, "config_id_a", "config_id_b", "same_pick"] + [f"{m}_{s}" for m in metrics for s in "ab"]
    return picks[order].sort_values(keys).reset_index(drop=True)


def paired_tests(picks: pd.DataFrame, fairness: str = "tpr_gap", level: float = 95.0,
                 by: Sequence[str] = ()) -> pd.DataFrame:
    """Per (dataset, method, *by) and metric: the picks' differences (a - b) paired by seed,
    their mean, the ``level``% t-interval of that mean, the paired t-test's two-sided p-value
    and a verdict: "identical" (every difference 0), "differ" (the interval excludes 0),
    "within seed noise" (it does not), or "one seed: no test"."""
    from scipy.stats import t as student_t

    level = check_level(level)
    out = []
    for key, g in picks.groupby(["dataset", "method", *by], sort=True, dropna=False):
        ds, method, values = key[0], key[1], dict(zip(by, key[2:]))
        for m in ("test_accuracy", f"test_{fairness}"):
            d = (pd.to_numeric(g[f"{m}_a"]) - pd.to_numeric(g[f"{m}_b"])).dropna().to_numpy(float)
            n = len(d)
            mean = float(d.mean()) if n else math.nan
            sd = float(d.std(ddof=1)) if n > 1 else math.nan
            half = t_halfwidth(sd, n, level) if n > 1 else math.nan
            if n and (d == 0).all():
                p, verdict = 1.0, "identical"
            elif n < 2:
                p, verdict = math.nan, "one seed: no test"
            elif sd == 0:  # every seed moved by the same amount
                p, verdict = 0.0, "differ"
            else:
                p = float(2 * student_t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))
                verdict = "differ" if abs(mean) > half else "within seed noise"
            out.append({"dataset": ds, "method": method, **values, "metric": m, "seeds": n, "mean_diff": mean,
                        "ci_lo": mean - half, "ci_hi": mean + half, "p_value": p, "verdict": verdict})
    return pd.DataFrame(out)
