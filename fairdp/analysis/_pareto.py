"""Multi-objective views of result rows: Pareto fronts, hypervolume, DTO and constrained picks.

``objectives`` is always a dict column -> "min" | "max" (e.g. {"valid_accuracy": "max",
"valid_tpr_gap": "min", "leakage": "min"}). Internally every objective is turned into a
minimisation (max columns negated).

- ``pareto_front``: the non-dominated rows. A row is dominated when another row is no worse
  in every objective and strictly better in one; exact duplicates of a non-dominated point
  are all kept. Rows with NaN in an objective are dropped.
- ``hypervolume``: the Lebesgue measure of the region dominated by the points and bounded
  by the reference point, computed exactly (2-D sweep, slicing over the last objective
  for d > 2). Optuna 5.0 has no public hypervolume function (only the private
  ``optuna._hypervolume``), so this is our own, tested against closed forms.
- ``dto_select``: fairlib's distance to optimum: every (percentage) objective as "higher is
  better", divided by its best value over the candidates, the row closest to (1, ..., 1);
  ``dto_minmax_select``: the same after min-max normalisation, for objectives on any scale.
- ``constrained_select``: the most accurate row whose fairness gap is within a threshold.
- ``select_per_run``: apply either rule per (dataset, method, seed).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from fairdp.analysis._rows import RUN_KEYS, numeric_columns, ok_rows, require_columns
from fairdp.errors import InputError

_DIRECTIONS = ("min", "max")


def _check_objectives(objectives: object) -> dict[str, str]:
    if not isinstance(objectives, Mapping) or not objectives:
        raise InputError("objectives: expected a non-empty dict column -> 'min' | 'max'")
    for col, d in objectives.items():
        if d not in _DIRECTIONS:
            raise InputError(f"objectives: direction of {col!r} must be 'min' or 'max', got {d!r}")
    return {str(c): str(d) for c, d in objectives.items()}


def _as_min(values: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    sign = np.array([-1.0 if d == "max" else 1.0 for d in directions])
    return values * sign


def _dominated_by(points: np.ndarray, others: np.ndarray) -> np.ndarray:
    """True for each of ``points`` (b, d) that some row of ``others`` (f, d) dominates."""
    if not len(others):
        return np.zeros(len(points), dtype=bool)
    no_worse = (others[None, :, :] <= points[:, None, :]).all(axis=2)
    better = (others[None, :, :] < points[:, None, :]).any(axis=2)
    return (no_worse & better).any(axis=1)


def _nondominated_2d(y: np.ndarray) -> np.ndarray:
    """``_nondominated_mask`` of one or two objectives by a sweep in lexicographic order: a row
    is dominated by a row of smaller x and y no larger (the least y of all smaller x), or by a
    row of its own x and a smaller y (the least y of its x)."""
    n = len(y)
    if not n:
        return np.ones(0, dtype=bool)
    if y.shape[1] == 1:
        return y[:, 0] == y[:, 0].min()
    order = np.lexsort((y[:, 1], y[:, 0]))
    x, v = y[order, 0], y[order, 1]
    new_x = np.r_[True, x[1:] != x[:-1]]
    start = np.flatnonzero(new_x)[np.cumsum(new_x) - 1]  # where each row's x begins
    least_before = np.r_[np.inf, np.minimum.accumulate(v)][start]  # least y of every smaller x
    dominated = (least_before <= v) | (v[start] < v)
    mask = np.empty(n, dtype=bool)
    mask[order] = ~dominated
    return mask


def _nondominated_mask(y: np.ndarray, block: int = 512) -> np.ndarray:
    """True for rows of ``y`` (n, d; minimisation) that no other row dominates.

    A row's dominators come before it in lexicographic order, and whatever dominates a
    dominated row is dominated in turn by a front row, so each block of rows in that order
    is checked against the front found before it and against itself: n times the front's
    size, where checking every pair cost n^2 (a pooled front of 170,000 rows). Equal rows,
    which the front keeps all of, are decided once."""
    n, d = y.shape
    if d <= 2:
        return _nondominated_2d(y)
    if n <= block:  # every pair at once: the blocked sweep's set-up costs more
        return ~_dominated_by(y, y)
    # equal rows share their answer: decide each distinct row once (seeds repeat points)
    distinct, inverse = np.unique(y, axis=0, return_inverse=True)
    if len(distinct) < n:
        return _nondominated_mask(distinct, block)[inverse.reshape(-1)]
    order = np.lexsort(y.T[::-1])
    ordered = y[order]
    keep = np.zeros(n, dtype=bool)
    front = ordered[:0]
    for start in range(0, n, block):
        rows = ordered[start:start + block]
        mine = ~(_dominated_by(rows, front) | _dominated_by(rows, rows))
        keep[start:start + block] = mine
        front = np.concatenate([front, rows[mine]])
    mask = np.empty(n, dtype=bool)
    mask[order] = keep
    return mask


def _objective_rows(df: pd.DataFrame, objectives: dict[str, str]) -> pd.DataFrame:
    rows = ok_rows(df)
    require_columns(rows, objectives)
    rows = numeric_columns(rows, list(objectives))
    return rows.dropna(subset=list(objectives))


def pareto_front(df: pd.DataFrame, objectives: Mapping[str, str]) -> pd.DataFrame:
    """The non-dominated rows of ``df`` under ``objectives`` (column -> "min" | "max").

    Rows with NaN in an objective are dropped first; duplicates of a front point are all
    kept. The rows keep their columns and index, in their original order.
    """
    objectives = _check_objectives(objectives)
    rows = _objective_rows(df, objectives)
    y = _as_min(rows[list(objectives)].to_numpy(float), list(objectives.values()))
    return rows[_nondominated_mask(y)]


def fronts_per_run(df: pd.DataFrame, objectives: Mapping[str, str], reference: Sequence[float]) -> pd.DataFrame:
    """Per run (``RUN_KEYS``) of ``df``'s ok rows: the size of its Pareto front under
    ``objectives`` and the hypervolume that front dominates up to ``reference`` (in the
    objectives' own units and directions), what ``pareto_front`` and ``hypervolume`` give run
    by run, in one pass over arrays. Columns: *RUN_KEYS, front, hypervolume, sorted by run;
    runs without a row that has every objective are left out."""
    objectives = _check_objectives(objectives)
    rows = ok_rows(df)
    require_columns(rows, [*RUN_KEYS, *objectives])
    columns = list(objectives)
    y = _as_min(numeric_columns(pd.DataFrame({c: rows[c] for c in columns}), columns).to_numpy(float),
                list(objectives.values()))
    r = _as_min(np.asarray(reference, dtype=float), list(objectives.values()))
    run = rows.groupby(list(RUN_KEYS), sort=True, observed=True, dropna=True).ngroup().to_numpy()
    keep = np.flatnonzero((run >= 0) & ~np.isnan(y).any(axis=1))
    keep = keep[np.argsort(run[keep], kind="stable")]
    runs, starts = np.unique(run[keep], return_index=True)
    firsts = keep[starts]
    if y.shape[1] == 2:  # every run in one sweep: a loop over runs costs 0.7 ms each (2,000 runs a million rows)
        sizes, volumes = _fronts_2d(y[keep], run[keep], r)
    else:
        sizes, volumes = [], []
        for start, end in zip(starts, np.append(starts[1:], len(keep))):
            points = y[keep[start:end]]
            front = points[_nondominated_mask(points)]
            inside = front[(front < r).all(axis=1)]
            sizes.append(len(front))
            volumes.append(_hv(inside, r) if len(inside) else 0.0)
    out = rows.iloc[firsts][list(RUN_KEYS)].reset_index(drop=True) if len(runs) else \
        pd.DataFrame(columns=list(RUN_KEYS))
    return out.assign(front=np.asarray(sizes, dtype=np.int64), hypervolume=np.asarray(volumes, dtype=float))


def _fronts_2d(y: np.ndarray, run: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per run (``run``: each row's, runs numbered in order) of minimisation points ``y`` (n, 2):
    its front's size and the hypervolume of its front's points inside ``r``, as
    ``_nondominated_2d`` and ``_hv2`` give run by run, in one sweep over every row. Each run's
    running minimum of y is taken over y's ranks less an offset per run that puts every earlier
    run's ranks above it, so no run reads another's rows, and ties stay exact."""
    if not len(y):
        return np.zeros(0, np.int64), np.zeros(0)
    order = np.lexsort((y[:, 1], y[:, 0], run))
    s, x, v = run[order], y[order, 0], y[order, 1]
    values, rank = np.unique(v, return_inverse=True)
    rank = rank.reshape(-1).astype(np.int64)
    new_run = np.r_[True, s[1:] != s[:-1]]
    nth = np.cumsum(new_run) - 1  # each row's run, counted 0, 1, ... in order
    width = len(values) + 1  # above every rank: "no row before"
    least = _running_least(rank, nth, width)
    new_x = new_run | np.r_[True, x[1:] != x[:-1]]
    start = np.flatnonzero(new_x)[np.cumsum(new_x) - 1]  # where each row's x begins within its run
    before = np.maximum(start - 1, 0)
    least_before = np.where(new_run[start], width, least[before])  # least y of every smaller x of its run
    front = ~((least_before <= rank) | (rank[start] < rank))
    runs = int(nth[-1]) + 1
    sizes = np.bincount(nth[front], minlength=runs).astype(np.int64)
    # the 2-D sweep over the front's points inside the reference box, in x order within each run
    inside = np.flatnonzero(front & (x < r[0]) & (v < r[1]))
    i_run, i_rank = nth[inside], rank[inside]
    first = np.r_[True, i_run[1:] != i_run[:-1]]
    least_inside = _running_least(i_rank, i_run, width)
    prev_y = np.where(first, r[1], values[np.r_[0, least_inside[:-1]]])
    area = (r[0] - x[inside]) * np.clip(prev_y - v[inside], 0.0, None)
    return sizes, np.bincount(i_run, weights=area, minlength=runs)


def _running_least(rank: np.ndarray, run: np.ndarray, width: int) -> np.ndarray:
    """The least of ``rank`` (ints in [0, width)) up to each row within its run (``run``
    non-decreasing): a running minimum of all rows, each run's ranks shifted below every
    earlier run's."""
    offset = run.astype(np.int64) * width
    return np.minimum.accumulate(rank - offset) + offset


def _hv2(p: np.ndarray, r: np.ndarray) -> float:
    """2-D hypervolume by a sweep over x (points strictly inside the reference box)."""
    p = p[np.lexsort((p[:, 1], p[:, 0]))]
    best_y = np.minimum.accumulate(p[:, 1])
    prev_y = np.concatenate([[r[1]], best_y[:-1]])
    return float(np.sum((r[0] - p[:, 0]) * np.clip(prev_y - p[:, 1], 0.0, None)))


def _hv2_of_prefixes(p: np.ndarray, r: np.ndarray, block: int = 256) -> np.ndarray:
    """``_hv2`` of every prefix ``p[:i + 1]`` at once (i = 0..n-1): the 2-D sweep over the
    points in x order, a point outside the prefix standing at the reference's y, where it
    adds nothing. One array pass per block of prefixes in place of a sweep per prefix."""
    n = len(p)
    order = np.lexsort((p[:, 1], p[:, 0]))
    x, y = p[order, 0], p[order, 1]
    out = np.empty(n)
    for start in range(0, n, block):
        prefix = np.arange(start, min(start + block, n))[:, None]
        ys = np.where(order[None, :] <= prefix, y[None, :], r[1])
        best = np.minimum.accumulate(ys, axis=1)
        prev = np.concatenate([np.full((len(prefix), 1), r[1]), best[:, :-1]], axis=1)
        out[start:start + len(prefix)] = ((r[0] - x)[None, :] * np.clip(prev - ys, 0.0, None)).sum(axis=1)
    return out


def _hv(p: np.ndarray, r: np.ndarray) -> float:
    """Exact hypervolume of minimisation points ``p`` (n, d) that all lie below ``r``."""
    n, d = p.shape
    if n == 0:
        return 0.0
    if d == 1:
        return float(r[0] - p[:, 0].min())
    if d == 2:
        return _hv2(p, r)
    # Slice along the last objective: between consecutive z levels the dominated region is
    # the (d-1)-dimensional region of the points already passed.
    p = p[np.argsort(p[:, -1], kind="mergesort")]
    z_next = np.append(p[1:, -1], r[-1])
    if d == 3:
        return float(np.dot(z_next - p[:, -1], _hv2_of_prefixes(p[:, :2], r[:2])))
    volume = 0.0
    for i in range(n):
        height = z_next[i] - p[i, -1]
        if height > 0:
            proj = p[: i + 1, :-1]
            if d > 3:  # the 2-D sweep skips dominated points by itself
                proj = proj[_nondominated_mask(proj)]
            volume += height * _hv(proj, r[:-1])
    return volume


def hypervolume(
    points: object, reference: Sequence[float], directions: Sequence[str] | None = None
) -> float:
    """Exact hypervolume of ``points`` (n, d) with respect to ``reference`` (d,).

    ``directions`` gives "min" or "max" per objective (default all "min"). The region counted
    is the union of the boxes between each point and the reference; points that are not
    strictly better than the reference in every objective contribute nothing.
    """
    p = np.asarray(points.to_numpy(float) if isinstance(points, pd.DataFrame) else points, dtype=float)
    r = np.asarray(reference, dtype=float)
    if r.ndim != 1 or r.size == 0:
        raise InputError("reference: expected a 1-D sequence of numbers")
    d = r.size
    if p.size == 0:
        return 0.0
    if p.ndim == 1:
        p = p[None, :]
    if p.ndim != 2 or p.shape[1] != d:
        raise InputError(f"points: expected shape (n, {d}) to match reference, got {p.shape}")
    if np.isnan(p).any() or np.isnan(r).any():
        raise InputError("points: NaN in points or reference")
    directions = ["min"] * d if directions is None else list(directions)
    if len(directions) != d or any(x not in _DIRECTIONS for x in directions):
        raise InputError(f"directions: expected {d} of 'min' | 'max', got {directions!r}")
    p, r = _as_min(p, directions), _as_min(r, directions)
    p = p[(p < r).all(axis=1)]
    if len(p) == 0:
        return 0.0
    if d > 2:
        p = np.unique(p[_nondominated_mask(p)], axis=0)
    return _hv(p, r)


def _order_ties(rows: pd.DataFrame, score: np.ndarray) -> pd.DataFrame:
    """Rows sorted by ``score``, ties to the smaller config_id (string order)."""
    rows = rows.assign(_score=score)
    by, asc = ["_score"], [True]
    if "config_id" in rows.columns:
        rows = rows.assign(_cid=rows["config_id"].astype(str))
        by, asc = by + ["_cid"], asc + [True]
    return rows.sort_values(by, ascending=asc, kind="mergesort").drop(
        columns=[c for c in ("_score", "_cid") if c in rows.columns]
    )


def dto_select(df: pd.DataFrame, objectives: Mapping[str, str]) -> pd.Series | None:
    """fairlib's distance to optimum (DTO; fairlib ``analysis.utils.DTO``, Han et al. 2022).

    Every objective is a percentage, turned into "higher is better" as fairlib does (a "max"
    objective as it is; a "min" one, a gap or a leakage, as 100 - value: fairlib's 1 - GAP),
    then divided by its best value over the candidates (the utopia point becomes 1 on every
    axis); the row with the smallest Euclidean distance to (1, ..., 1) wins, ties to the
    smaller config_id. Rows with NaN in an objective are dropped; None when none is left. An
    objective outside [0, 100] is an error: the ratio to the best value needs percentages.
    """
    objectives = _check_objectives(objectives)
    rows = _objective_rows(df, objectives)
    if rows.empty:
        return None
    values = rows[list(objectives)].to_numpy(float)
    outside = (values < 0) | (values > 100)
    if outside.any():
        col = list(objectives)[int(np.argwhere(outside)[0][1])]
        raise InputError(f"objectives: {col!r} has values outside [0, 100]; fairlib's DTO divides percentages "
                         f"by their best value (dto_minmax_select works on any scale)")
    up = np.where([d == "max" for d in objectives.values()], values, 100.0 - values)
    best = up.max(axis=0)
    ratio = up / np.where(best > 0, best, 1.0)
    dist = np.sqrt(((1.0 - ratio) ** 2).sum(axis=1))
    return _order_ties(rows, dist).iloc[0]


def dto_minmax_select(df: pd.DataFrame, objectives: Mapping[str, str]) -> pd.Series | None:
    """Distance to the utopia point after min-max normalisation, for objectives on any scale.

    Each objective is scaled over the candidates to [0, 1] with its best value at 0 (an
    objective constant over the candidates is 0 for all); the row with the smallest
    Euclidean norm wins, ties to the smaller config_id. Rows with NaN in an objective are
    dropped; None when no row is left. Unlike fairlib's ``dto_select``, a small spread in one
    objective weighs as much as a large one in another.
    """
    objectives = _check_objectives(objectives)
    rows = _objective_rows(df, objectives)
    if rows.empty:
        return None
    y = _as_min(rows[list(objectives)].to_numpy(float), list(objectives.values()))
    lo, hi = y.min(axis=0), y.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    dist = np.sqrt((((y - lo) / span) ** 2).sum(axis=1))
    return _order_ties(rows, dist).iloc[0]


def constrained_select(
    df: pd.DataFrame, fairness_col: str, threshold: float, accuracy_col: str = "valid_accuracy"
) -> pd.Series | None:
    """The most accurate row with ``fairness_col <= threshold``; None if no row qualifies.

    Ties go to the lower fairness gap, then the smaller config_id. Rows with NaN in either
    column never qualify.
    """
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or np.isnan(threshold):
        raise InputError(f"threshold: expected a number, got {threshold!r}")
    rows = ok_rows(df)
    require_columns(rows, [fairness_col, accuracy_col])
    rows = numeric_columns(rows, [fairness_col, accuracy_col]).dropna(subset=[fairness_col, accuracy_col])
    rows = rows[rows[fairness_col] <= threshold]
    if rows.empty:
        return None
    by, asc = [accuracy_col, fairness_col], [False, True]
    if "config_id" in rows.columns:
        rows = rows.assign(_cid=rows["config_id"].astype(str))
        by, asc = by + ["_cid"], asc + [True]
    best = rows.sort_values(by, ascending=asc, kind="mergesort").iloc[0]
    return best.drop(labels=[c for c in ("_cid",) if c in best.index])


_RULES: dict[str, Callable[..., pd.Series | None]] = {
    "dto": dto_select,
    "dto_minmax": dto_minmax_select,
    "constrained": constrained_select,
}


def select_per_run(
    df: pd.DataFrame,
    rule: str | Callable[..., pd.Series | None],
    keys: Sequence[str] = RUN_KEYS,
    **kw: object,
) -> pd.DataFrame:
    """Apply a selection ``rule`` to each (dataset, method, seed) and stack the chosen rows.

    ``rule`` is "dto" (``dto_select``), "dto_minmax" (``dto_minmax_select``), "constrained"
    (``constrained_select``) or any
    callable ``rule(rows, **kw) -> Series | None``. Runs where the rule finds nothing (None)
    have no row. The result has the original columns, sorted by ``keys``.
    """
    if isinstance(rule, str):
        if rule not in _RULES:
            raise InputError(f"rule: unknown selection rule {rule!r} (expected {', '.join(_RULES)} or a callable)")
        rule = _RULES[rule]
    if not callable(rule):
        raise InputError("rule: expected 'dto', 'constrained' or a callable")
    rows = ok_rows(df).reset_index(drop=True)
    keys = list(keys)
    require_columns(rows, keys)
    chosen = [
        pick
        for _, group in rows.groupby(keys, sort=True)
        if (pick := rule(group, **kw)) is not None
    ]
    if not chosen:
        return rows.iloc[0:0]
    labels = [pick.name for pick in chosen]
    if all(label in rows.index for label in labels):
        # The rules return rows of ``rows`` (labelled by its index): keep the column dtypes.
        return rows.loc[labels].reset_index(drop=True)
    return pd.DataFrame(chosen).infer_objects().reset_index(drop=True)
