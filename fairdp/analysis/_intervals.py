"""Confidence intervals: a bootstrap over each row's test examples, a t-interval over seeds,
and which differences between methods the intervals support.

The bootstrap needs no predictions: every accuracy and fairness metric is a function of the
test split's counts per (group, y, y_pred), which each row stores (``test_confusion``).
Resampling the test examples with replacement within each group (the group sizes fixed, as
a stratified bootstrap) is drawing each group's counts from a multinomial with that group's
observed cell frequencies, so B draws of a row are B multinomial vectors per group.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Sequence

import numpy as np
import pandas as pd

from fairdp.analysis._predictions import CONSTANT_PICKS, has_constant_picks
from fairdp.analysis._rows import (
    APART,
    COMPARED_IN,
    EPS_COMPARED,
    as_frame,
    check_fairness,
    different_guarantees,
    guarantee_text,
    kind_of,
    kinds_of,
    min_group_counts,
    require_columns,
    with_compared_eps,
)
from fairdp.errors import InputError
from fairdp.fairness import SCORES, scores_from_confusion
from fairdp.schema import GUARANTEE, TEST_CONFUSION

BOOTSTRAP_METRICS = tuple(f"test_{name}" for name in SCORES)
"""What a row's bootstrap covers: test accuracy and every test fairness gap."""


def check_level(level: float, name: str = "level") -> float:
    """A confidence level in percent, in (0, 100)."""
    try:
        value = float(level)
    except (TypeError, ValueError):
        raise InputError(f"{name}: expected a confidence level in percent like 95, got {level!r}") from None
    if not 0 < value < 100:
        raise InputError(f"{name}: a confidence level in percent must be in (0, 100), got {level!r}")
    return value


def _row_seed(seed: int, row: pd.Series) -> np.random.Generator:
    """Each row's own stream, from the seed and its identity: its interval does not depend on
    which other rows are in the table."""
    key = "|".join(str(row.get(k, "")) for k in ("dataset", "method", "seed", "config_id"))
    return np.random.default_rng([int(seed), zlib.crc32(key.encode())])


def bootstrap_intervals(rows: pd.DataFrame, level: float = 95.0, draws: int = 1000, seed: int = 0,
                        metrics: Sequence[str] = BOOTSTRAP_METRICS) -> pd.DataFrame:
    """Per row, the percentile bootstrap interval (``level`` percent, ``draws`` resamples of
    its test examples, stratified by group, seeded per row) of each of ``metrics``:
    columns ``<metric>_lo`` and ``<metric>_hi`` beside the rows' own columns. Rows without
    stored counts (written before fairdp stored them, or failed) get NaN."""
    rows = as_frame(rows, "rows")
    level = check_level(level)
    if isinstance(draws, bool) or not isinstance(draws, (int, np.integer)) or draws < 2:
        raise InputError(f"draws: expected an integer >= 2, got {draws!r}")
    unknown = [m for m in metrics if m not in BOOTSTRAP_METRICS]
    if unknown:
        raise InputError(f"metrics: {unknown[0]!r} has no bootstrap; known: {', '.join(BOOTSTRAP_METRICS)}")
    names = [m[len("test_"):] for m in metrics]
    lo_q, hi_q = (100 - level) / 2, 100 - (100 - level) / 2
    out = {f"{m}_{side}": np.full(len(rows), np.nan) for m in metrics for side in ("lo", "hi")}
    counts = rows[TEST_CONFUSION] if TEST_CONFUSION in rows.columns else pd.Series([None] * len(rows))
    least = min_group_counts(rows)  # each draw's gaps at the row's own rule, as its stored gaps
    for i, ((_, row), text) in enumerate(zip(rows.iterrows(), counts)):
        if not isinstance(text, str) or not text:
            continue
        conf = np.asarray(json.loads(text), dtype=np.int64)  # (G, C, C)
        rng = _row_seed(seed, row)
        g, c = conf.shape[0], conf.shape[1]
        sample = np.zeros((draws, g, c * c), dtype=np.int64)
        for k in range(g):
            n = int(conf[k].sum())
            if n:
                sample[:, k] = rng.multinomial(n, conf[k].ravel() / n, size=draws)
        scores = scores_from_confusion(sample.reshape(draws, g, c, c), int(least[i]))
        for m, name in zip(metrics, names):
            values = scores[name]
            if np.isnan(values).all():
                continue
            out[f"{m}_lo"][i], out[f"{m}_hi"][i] = np.nanpercentile(values, [lo_q, hi_q])
    return rows.assign(**out)


def t_halfwidth(std: float, n: float, level: float = 95.0) -> float:
    """Half-width of the t-interval of a mean of ``n`` values with sample std ``std``; NaN
    below two values."""
    # the t quantile, what scipy.stats.t.ppf calls: scipy.special imports in a third of the time
    from scipy.special import stdtrit

    if not n or n < 2 or std is None or math.isnan(std):
        return math.nan
    return float(stdtrit(n - 1, 0.5 + check_level(level) / 200) * std / math.sqrt(n))


MAX_SEEDS_ADVISED = 10_000
"""seeds_needed stops here: a spread that needs more is reported as more than this."""


def seeds_needed(std: float, half_width: float = 1.0, level: float = 95.0) -> float:
    """The fewest seeds n whose ``level``% t-interval of the mean, t_{n-1} std / sqrt(n), is at
    most ``half_width`` for a spread ``std`` over seeds (the observed one standing in for the
    true): 2 at least (an interval needs two); inf past ``MAX_SEEDS_ADVISED``; NaN for an
    unknown spread. The advice is as good as the std it is fed: from 2 seeds it is rough."""
    if std is None or not math.isfinite(std):
        return math.nan
    if not (math.isfinite(half_width) and half_width > 0):
        raise InputError(f"half_width: must be a finite number > 0, got {half_width!r}")
    if std == 0:
        return 2.0
    lo, hi = 2, 2
    while t_halfwidth(std, hi, level) > half_width:  # the half-width falls with n: double, then bisect
        if hi >= MAX_SEEDS_ADVISED:
            return math.inf
        lo, hi = hi, min(2 * hi, MAX_SEEDS_ADVISED)
    while lo < hi:
        mid = (lo + hi) // 2
        if t_halfwidth(std, mid, level) <= half_width:
            hi = mid
        else:
            lo = mid + 1
    return float(hi)


def seed_advice(agg: pd.DataFrame, half_width: float = 1.0, level: float = 95.0) -> pd.DataFrame:
    """Per row of ``aggregate_seeds`` output and metric (its ``<metric>_std`` columns): the
    seeds the row has and the seeds ``seeds_needed`` advises for a ``level``% interval of
    ± ``half_width`` points. Columns: dataset, method, the by columns, metric, seeds, std,
    seeds_needed."""
    metrics = [c[:-len("_std")] for c in agg.columns if c.endswith("_std") and f"{c[:-4]}_mean" in agg.columns]
    keys = [c for c in agg.columns if c not in {f"{m}_{s}" for m in metrics for s in ("mean", "std", "lo", "hi")}
            and c not in ("n_seeds", "guarantee", "n_constant")]
    out = []
    for _, row in agg.iterrows():
        for m in metrics:
            std = float(row[f"{m}_std"]) if pd.notna(row[f"{m}_std"]) else math.nan
            out.append({**{k: row[k] for k in keys}, "metric": m, "seeds": int(row["n_seeds"]), "std": std,
                        "seeds_needed": seeds_needed(std, half_width, level)})
    return pd.DataFrame(out, columns=[*keys, "metric", "seeds", "std", "seeds_needed"])


def seed_advice_text(agg: pd.DataFrame, half_width: float = 1.0, level: float = 95.0) -> str:
    """One sentence from ``seed_advice``: per metric, the seeds needed for a ``level``%
    interval of ± ``half_width`` points, over the methods (their range and the method that
    needs the most); empty when no row has a spread (one seed each)."""
    advice = seed_advice(agg, half_width, level).dropna(subset=["seeds_needed"])
    if advice.empty:
        return ""
    parts = []
    for metric, g in advice.groupby("metric", sort=False):
        lo, hi = g["seeds_needed"].min(), g["seeds_needed"].max()
        most = g.loc[g["seeds_needed"].idxmax(), "method"]

        def n(v: float) -> str:
            return f"over {MAX_SEEDS_ADVISED:,}" if math.isinf(v) else f"{int(v)}"

        parts.append(f"{metric} {n(lo)}" + ("" if lo == hi else f"-{n(hi)} (most: {most})"))
    seeds = sorted(set(advice["seeds"]))
    ran = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}"
    return (f"seed advice: for a {level:g}% t-interval of ± {half_width:g} point{'' if half_width == 1 else 's'}, "
            f"from the spread over the {ran} seeds run (rough with few seeds): " + ", ".join(parts) + " seeds")


def seed_intervals(agg: pd.DataFrame, level: float = 95.0) -> pd.DataFrame:
    """``aggregate_seeds`` output with ``<metric>_lo`` / ``<metric>_hi``: the t-interval of
    each mean over seeds (NaN for a single seed), cut to the metric's range (0 to 100 for
    percentages, from 0 for MDL): with two seeds t(0.975, 1) = 12.7, so a gap's interval
    would otherwise reach below zero."""
    agg = as_frame(agg, "agg")
    require_columns(agg, ["n_seeds"], "agg")
    level = check_level(level)
    extra = {}
    for col in [c for c in agg.columns if c.endswith("_mean")]:
        m = col[: -len("_mean")]
        half = np.array([t_halfwidth(s, n, level) for s, n in zip(agg[f"{m}_std"], agg["n_seeds"])])
        top = np.inf if m.endswith("mdl") else 100.0
        extra[f"{m}_lo"] = np.clip(agg[col].to_numpy(float) - half, 0.0, top)
        extra[f"{m}_hi"] = np.clip(agg[col].to_numpy(float) + half, 0.0, top)
    return agg.assign(**extra)


def apart(lo_a: float, hi_a: float, lo_b: float, hi_b: float) -> bool:
    """Whether intervals [lo_a, hi_a] and [lo_b, hi_b] do not overlap: a difference they support."""
    return hi_a < lo_b or lo_a > hi_b


CROSS_KIND = " †"
"""After a pair's mark in ``supported_differences`` when the two methods' guarantees are of
different kinds, compared after converting both to one relation (``compared_in``; kinds with
none are never paired)."""


def in_one_relation(table: pd.DataFrame, group, kinds: dict | None = None) -> tuple[pd.DataFrame, list[str]]:
    """``table`` with ``with_compared_eps``' columns, and ``group`` as the keys of the rows that
    may be compared: ``eps`` replaced by the ε in the rows' relation (``EPS_COMPARED``), and the
    relation (``APART``) added, so that no two methods are ranked whose guarantees are of kinds
    with no sound common relation, nor at one ε value of different relations."""
    out = with_compared_eps(table, kinds)
    return out, [EPS_COMPARED if k == "eps" else k for k in group] + [APART]


def constant_rows(table: pd.DataFrame) -> np.ndarray:
    """Per row of a table of seeds' aggregates: whether some seed's pick is a constant model
    (its ``n_constant``, ``analysis._predictions.with_constant_picks``, above 0); all False
    for a table without the column. A constant model's gaps are 0 for that reason alone, so
    it is no fair method to rank others against."""
    if CONSTANT_PICKS not in table.columns:
        return np.zeros(len(table), dtype=bool)
    return np.array([has_constant_picks(v) for v in table[CONSTANT_PICKS]], dtype=bool)


def supported_differences(intervals: pd.DataFrame, metric: str, group: Sequence[str] = ("dataset",),
                          kinds: dict | None = None, keep_constant: bool = False) -> pd.DataFrame:
    """For each pair of methods within each ``group``: "<" or ">" where their intervals on
    ``metric`` (``<metric>_lo`` / ``_hi``, e.g. from ``seed_intervals``) do not overlap, "≈"
    where they do (the difference is not supported), "?" where an interval is missing. Only
    methods compared in one neighbouring relation are paired (``in_one_relation``): with ``eps``
    among the ``group`` keys, at one ε of that relation, a converted method at its converted ε
    (DP-SGD's add/remove ε at 2ε); a mark is followed by " †" (``CROSS_KIND``) where the two
    kinds differ and were converted. Kinds: the table's ``guarantee`` column
    (``aggregate_seeds``), else ``kinds`` or the registry. Columns: *group (``eps``: the ε
    compared), ``compared_in`` (the relation), method, guarantee, the stated ``eps`` where it
    is a group key, then one column per method. Methods whose pick is a constant model in some
    seed (``constant_rows``) are left out unless ``keep_constant``: their low gaps are no
    difference the intervals support."""
    intervals = as_frame(intervals, "intervals")
    group = list(group)
    require_columns(intervals, [*group, "method", f"{metric}_mean", f"{metric}_lo", f"{metric}_hi"], "intervals")
    if not keep_constant:
        intervals = intervals[~constant_rows(intervals)]
    if GUARANTEE in intervals.columns:
        kinds = {str(m): kind_of(k) for m, k in zip(intervals["method"], intervals[GUARANTEE])}
    kinds = kinds_of(intervals["method"].astype(str).unique(), kinds)
    intervals, keys = in_one_relation(intervals.drop(columns=[GUARANTEE], errors="ignore"), group, kinds)
    frames = []
    for key, g in intervals.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        g = g.sort_values("method")
        methods = [str(m) for m in g["method"]]
        lo, hi, mean = (g[f"{metric}_{s}"].to_numpy(float) for s in ("lo", "hi", "mean"))
        table = {k: [v] * len(methods) for k, v in zip(group, key)}  # eps: the ε compared
        table[COMPARED_IN] = [key[-1]] * len(methods)  # the group's relation (APART)
        table["method"] = methods
        table[GUARANTEE] = [guarantee_text(kinds[m]) for m in methods]
        if "eps" in group:
            table["stated eps"] = list(g["eps"])
        for j, other in enumerate(methods):
            col = []
            for i in range(len(methods)):
                if i == j:
                    col.append("")
                    continue
                if np.isnan([lo[i], hi[i], lo[j], hi[j]]).any():
                    mark = "?"
                elif apart(lo[i], hi[i], lo[j], hi[j]):
                    mark = "<" if mean[i] < mean[j] else ">"
                else:
                    mark = "≈"
                col.append(mark + (CROSS_KIND if different_guarantees(kinds[methods[i]], kinds[other]) else ""))
            table[other] = col
        frames.append(pd.DataFrame(table))
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    # groups of one relation and ε hold some of the methods: a pair never compared is blank
    methods = sorted(intervals["method"].astype(str).unique())
    fixed = [c for c in out.columns if c not in methods]
    return out[fixed + [m for m in methods if m in out.columns]].fillna({m: "" for m in methods})


def ci_metrics(fairness: str) -> list[str]:
    """The test metrics a selection reports with intervals: accuracy and ``fairness``."""
    fairness = check_fairness(fairness)
    return ["test_accuracy", f"test_{fairness}"]


def not_distinguishable(intervals: pd.DataFrame, metric: str, direction: str,
                        group: Sequence[str] = ("dataset",), keep_constant: bool = False) -> np.ndarray:
    """Per row of ``intervals``: True where its interval on ``metric`` overlaps that of the
    best row of its ``group`` (highest mean for ``direction`` "max", lowest for "min"), so
    the difference from the best is not supported; False for the best itself, for rows
    whose interval lies apart, and where an interval is missing. Rows are ranked only among
    those compared in one neighbouring relation (``in_one_relation``: ``eps`` in ``group`` is
    the ε of that relation, DP-SGD's add/remove ε converted to 2ε beside PF-LD's). Rows whose pick is a
    constant model in some seed (``constant_rows``) are neither the best nor marked, unless
    ``keep_constant``."""
    intervals = as_frame(intervals, "intervals")
    require_columns(intervals, [f"{metric}_mean", f"{metric}_lo", f"{metric}_hi"], "intervals")
    intervals, group = in_one_relation(intervals, group)
    out = np.zeros(len(intervals), dtype=bool)
    mean, lo, hi = (intervals[f"{metric}_{s}"].to_numpy(float) for s in ("mean", "lo", "hi"))
    keys = np.array(["|".join(map(str, t)) for t in intervals[list(group)].itertuples(index=False)]
                    if group else [""] * len(intervals))
    compared = ~np.isnan(mean) & (True if keep_constant else ~constant_rows(intervals))
    for key in np.unique(keys):
        idx = np.flatnonzero((keys == key) & compared)
        if len(idx) < 2:
            continue
        best = idx[np.argmax(mean[idx]) if direction == "max" else np.argmin(mean[idx])]
        if np.isnan(lo[best]) or np.isnan(hi[best]):
            continue
        for i in idx:
            if i != best and not np.isnan(lo[i]) and not apart(lo[i], hi[i], lo[best], hi[best]):
                out[i] = True
    return out
