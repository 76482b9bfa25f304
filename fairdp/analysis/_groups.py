"""Per-group rates of selected models, from the counts each row stores (fairlearn's MetricFrame
``by_group``, without the predictions).

Every row stores each split's counts per (group, y, y_pred) (``valid_confusion``,
``test_confusion``), so a group's size, selection rate, true- and false-positive rates and
accuracy are functions of the row alone. The rates are those the fairness gaps are spreads
of (``fairdp.fairness``): for a class c, TPR = P(y_pred=c | y=c, s=g), FPR = P(y_pred=c |
y!=c, s=g), selection rate = P(y_pred=c | s=g), accuracy = P(y_pred=y | s=g); binary tasks
report the positive class c = 1, tasks of more classes every class one-vs-rest. Percent; a
rate whose conditioning set in a group has fewer rows than the row's study estimated rates
from (``evaluate.min_group_count``, read from its protocol; 1 for rows stored before it
existed) is NaN, as the row's gaps left it out; ``groups_too_small`` lists those sets and their
sizes. Groups are the dataset's codes 0..G-1 (``Dataset.group_names`` in that order).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pandas as pd

from fairdp.analysis._rows import RUN_KEYS, check_by, factorize_objects, min_group_counts, ok_rows
from fairdp.errors import InputError
from fairdp.fairness import SMALL_GROUP_SETS
from fairdp.schema import CONFUSION_COLUMNS, SPLITS

GROUP_RATES = ("selection_rate", "tpr", "fpr", "accuracy")
"""The rates per group, percent: what ``aggregate_group_rates`` averages over seeds."""
GROUP_COUNTS = ("count", "label_positives", "predicted_positives", "true_positives")
"""The counts per group (and class) they are ratios of: rows in the group, rows with y = c,
rows predicted c, rows with both."""


def _rate(num: np.ndarray, den: np.ndarray, least: np.ndarray | int = 1) -> np.ndarray:
    """100 * num / den, NaN where den is below ``least`` or 0 (never a division warning)."""
    ok = (den > 0) & (den >= least)
    return np.where(ok, 100.0 * num / np.where(ok, den, 1), np.nan)


def rates_from_confusion(confusion: str | None, min_group_count: int = 1) -> pd.DataFrame:
    """One row per (group, class) of a row's counts JSON, (G, C, C) indexed (group, y, y_pred):
    ``group``, ``class``, the ``GROUP_COUNTS`` and the ``GROUP_RATES`` (NaN where the rate's
    conditioning set has fewer than ``min_group_count`` rows); empty for a row without counts."""
    columns = ["group", "class", *GROUP_COUNTS, *GROUP_RATES]
    if not isinstance(confusion, str) or not confusion:
        return pd.DataFrame(columns=columns)
    conf = np.asarray(json.loads(confusion), dtype=np.int64)
    if conf.ndim != 3 or conf.shape[1] != conf.shape[2] or conf.shape[1] < 2:
        raise InputError(f"confusion: expected counts (G, C, C) with C >= 2, got shape {conf.shape}")
    n_groups, n_classes = conf.shape[0], conf.shape[1]
    classes = [1] if n_classes == 2 else list(range(n_classes))  # as the gaps: the positive class of a binary task
    size = conf.sum(axis=(1, 2))
    correct = np.trace(conf, axis1=1, axis2=2)
    parts = []
    for c in classes:
        positives, predicted, true_pos = conf[:, c, :].sum(1), conf[:, :, c].sum(1), conf[:, c, c]
        parts.append(pd.DataFrame({
            "group": np.arange(n_groups), "class": c, "count": size, "label_positives": positives,
            "predicted_positives": predicted, "true_positives": true_pos,
            "selection_rate": _rate(predicted, size, min_group_count),
            "tpr": _rate(true_pos, positives, min_group_count),
            "fpr": _rate(predicted - true_pos, size - positives, min_group_count),
            "accuracy": _rate(correct, size, min_group_count),
        }))
    return pd.concat(parts, ignore_index=True)[columns]


def _split_column(split: str) -> str:
    if split not in CONFUSION_COLUMNS:
        raise InputError(f"split: expected one of {', '.join(CONFUSION_COLUMNS)}, got {split!r}")
    return CONFUSION_COLUMNS[split]


def _counts_arrays(texts) -> dict:
    """The counts JSON texts parsed and grouped by shape: {(G, C, C): (positions, (N, G, C, C) array)};
    each distinct text parsed once (a selection repeats a row per notion, and a config's counts
    per threshold), the first one refused raising as a loop over the texts would."""
    codes, distinct = factorize_objects(texts)  # numbered in the order of their first position
    parsed: list = [None] * len(distinct)
    for code, text in enumerate(distinct):
        if not isinstance(text, str) or not text:
            continue
        conf = np.asarray(json.loads(text), dtype=np.int64)
        if conf.ndim != 3 or conf.shape[1] != conf.shape[2] or conf.shape[1] < 2:
            raise InputError(f"confusion: expected counts (G, C, C) with C >= 2, got shape {conf.shape}")
        parsed[code] = conf
    by_shape: dict = {}
    for code, conf in enumerate(parsed):
        if conf is not None:
            by_shape.setdefault(conf.shape, []).append(code)
    out = {}
    for shape, which in by_shape.items():
        row_of_code = np.full(len(distinct), -1)
        row_of_code[which] = np.arange(len(which))
        positions = np.flatnonzero(np.isin(codes, which))
        out[shape] = (positions, np.stack([parsed[c] for c in which])[row_of_code[codes[positions]]])
    return out


def per_group_rates(rows: pd.DataFrame, split: str = "test", by: Sequence[str] = ()) -> pd.DataFrame:
    """One row per (row of ``rows``, group, class): dataset, method, *by, seed, config_id,
    group, class, the ``GROUP_COUNTS`` and ``GROUP_RATES`` (percent) of the row's model on
    ``split`` ("test" or "valid"), from its stored counts: ``rates_from_confusion`` of each row,
    computed for all rows of one counts shape at once. Rows without them (written before
    fairdp stored them, or failed) are left out; empty when none has them. For the selected
    configs, ``rows`` is ``select_by_rt``'s output: one row per seed."""
    column = _split_column(split)
    rows = ok_rows(rows, "rows")
    by = check_by(by, rows)
    keys = ["dataset", "method", *by, "seed", "config_id"]
    columns = [*keys, "group", "class", *GROUP_COUNTS, *GROUP_RATES]
    if column not in rows.columns:
        return pd.DataFrame(columns=columns)
    parts = []
    least_of_row = min_group_counts(rows)
    for (n_groups, n_classes, _), (pos, conf) in _counts_arrays(rows[column].to_numpy(object)).items():
        classes = [1] if n_classes == 2 else list(range(n_classes))
        size = conf.sum(axis=(2, 3))  # (N, G)
        correct = np.trace(conf, axis1=2, axis2=3)
        least = least_of_row[pos][:, None]
        for order, c in enumerate(classes):
            positives, predicted, true_pos = conf[:, :, c, :].sum(2), conf[:, :, :, c].sum(2), conf[:, :, c, c]
            parts.append(pd.DataFrame({
                "_row": np.repeat(pos, n_groups), "_order": order * n_groups + np.tile(np.arange(n_groups), len(pos)),
                "group": np.tile(np.arange(n_groups), len(pos)), "class": c, "count": size.ravel(),
                "label_positives": positives.ravel(), "predicted_positives": predicted.ravel(),
                "true_positives": true_pos.ravel(), "selection_rate": _rate(predicted, size, least).ravel(),
                "tpr": _rate(true_pos, positives, least).ravel(),
                "fpr": _rate(predicted - true_pos, size - positives, least).ravel(),
                "accuracy": _rate(correct, size, least).ravel()}))
    if not parts:
        return pd.DataFrame(columns=columns)
    # in the rows' order, each row's (class, group) as ``rates_from_confusion`` lists them
    out = pd.concat(parts, ignore_index=True).sort_values(["_row", "_order"], kind="stable")
    key_values = rows[keys].iloc[out["_row"].to_numpy()].reset_index(drop=True)
    out = out.drop(columns=["_row", "_order"]).reset_index(drop=True)
    return pd.concat([key_values, out], axis=1)[columns]


def aggregate_group_rates(selected: pd.DataFrame, split: str = "test", by: Sequence[str] = ()) -> pd.DataFrame:
    """Per (dataset, method, *by, group, class) over the selected rows (one per seed, e.g.
    ``select_by_rt``'s): ``n_seeds``, ``count_mean`` (rows in the group) and, for each of the
    ``GROUP_RATES``, ``<rate>_mean`` and ``<rate>_std`` (percent, sample std ddof=1; NaN for a
    single seed) on ``split``: a MetricFrame's ``by_group`` per method, averaged over seeds.
    NaN rates (an empty conditioning set) are skipped in the mean. Empty when no selected row
    stores counts of ``split``."""
    by = check_by(by)
    per_seed = per_group_rates(selected, split, by)
    keys = ["dataset", "method", *by, "group", "class"]
    columns = [*keys, "n_seeds", "count_mean", *(f"{r}_{s}" for r in GROUP_RATES for s in ("mean", "std"))]
    if per_seed.empty:
        return pd.DataFrame(columns=columns)
    dup = per_seed.duplicated([*RUN_KEYS, *by, "group", "class"])
    if dup.any():
        raise InputError("selected: several rows for one (dataset, method, seed); select one config per seed "
                         "first (select_by_rt, with the same by)")
    numeric = per_seed.astype({c: float for c in (*GROUP_COUNTS, *GROUP_RATES)})
    grouped = numeric.groupby(keys, sort=True, dropna=False)
    out = grouped["seed"].nunique().rename("n_seeds").to_frame()
    out["count_mean"] = grouped["count"].mean()
    for rate in GROUP_RATES:
        out[f"{rate}_mean"] = grouped[rate].mean()
        out[f"{rate}_std"] = grouped[rate].std(ddof=1)
    return out.reset_index()[columns]


def privacy_cost_gaps(selected: pd.DataFrame, baseline: str = "unconstrained", split: str = "test") -> pd.Series:
    """Esipova et al.'s privacy cost gap (ICLR 2023, their Section 3) of each selected row, in
    points: each group's privacy cost pi_g = acc_g(baseline) - acc_g(row), the baseline the
    non-private model ``baseline`` selected on the same dataset and seed, and the gap
    max_g pi_g - min_g pi_g (|pi_a - pi_b| for two groups): how unequally the row's groups
    lose accuracy against the model trained without privacy. Aligned with ``selected``'s
    index; NaN where the row or its seed's baseline lacks counts on ``split``, the baseline has
    no single pick on that seed, or fewer than two groups have an accuracy (a group too small
    to estimate has none, ``evaluate.min_group_count``)."""
    out = pd.Series(np.nan, index=selected.index, name=f"{split}_privacy_cost_gap", dtype=float)
    keys = ["dataset", "method", "seed", "config_id"]
    rates = per_group_rates(selected, split)
    if rates.empty:
        return out
    # a group's accuracy is the same under every class row and every copy of one config
    acc = rates.groupby([*keys, "group"], sort=True)["accuracy"].first().astype(float).unstack("group")
    base = acc.xs(baseline, level="method") if baseline in acc.index.get_level_values("method") else None
    if base is None:
        return out
    base = base.droplevel("config_id")
    base = base[~base.index.duplicated(keep=False)]  # several baseline picks on one seed: none is its baseline
    gaps = {}
    for (dataset, method, seed, config), mine in acc.iterrows():
        if (dataset, seed) not in base.index:
            continue
        cost = (base.loc[(dataset, seed)] - mine).dropna()
        if len(cost) >= 2:
            gaps[(dataset, method, seed, config)] = float(cost.max() - cost.min())
    if gaps:
        found = pd.Series(gaps, dtype=float)
        out[:] = found.reindex(pd.MultiIndex.from_frame(selected[keys])).to_numpy()
    return out


SMALL_GROUP_COLUMNS = ("dataset", "split", "group", "class", "set", "n_seeds", "count_min", "count_max",
                       "min_group_count")


def groups_too_small(rows: pd.DataFrame, splits: Sequence[str] = SPLITS) -> pd.DataFrame:
    """The groups whose rates the rows' gaps left out as too small to estimate: one row per
    (dataset, split, group, class, conditioning set) where some seed's rows hold at least one
    but fewer than their ``evaluate.min_group_count`` rows of the set (``SMALL_GROUP_SETS``:
    a group's rows, its rows of class c, its rows of another class), with ``n_seeds`` (the
    seeds where it is small), ``count_min`` and ``count_max`` (its size over those seeds) and
    ``min_group_count``. The sizes are the data's (labels and groups of a split), not a model's,
    so any row of a seed tells them: pass the selected rows (``select_by_rt``'s) rather than a
    whole study. Binary tasks: the positive class's sets. Empty when no row stores counts."""
    rows = ok_rows(rows, "rows")
    found = []
    least_of_row = min_group_counts(rows)
    for split in splits:
        column = _split_column(split)
        if column not in rows.columns:
            continue
        for (_, n_classes, _), (pos, conf) in _counts_arrays(rows[column].to_numpy(object)).items():
            classes = np.array([1] if n_classes == 2 else list(range(n_classes)))
            size = conf.sum(axis=(2, 3))[:, :, None]  # (N, G, 1)
            positives = conf.sum(axis=3)[:, :, classes]  # (N, G, |O|): rows with y = c
            sets = np.stack(np.broadcast_arrays(size, positives, size - positives), axis=-1)  # (N, G, |O|, 3)
            least = least_of_row[pos][:, None, None, None]
            row, group, cls, which = np.nonzero((sets > 0) & (sets < least))
            found.append(pd.DataFrame({
                "dataset": rows["dataset"].to_numpy(object)[pos[row]], "seed": rows["seed"].to_numpy()[pos[row]],
                "split": split, "group": group, "class": classes[cls],
                "set": np.asarray(SMALL_GROUP_SETS, dtype=object)[which], "count": sets[row, group, cls, which],
                "min_group_count": least_of_row[pos[row]]}))
    found = [f for f in found if len(f)]
    if not found:
        return pd.DataFrame(columns=list(SMALL_GROUP_COLUMNS))
    each = pd.concat(found, ignore_index=True).drop_duplicates()
    grouped = each.groupby(["dataset", "split", "group", "class", "set", "min_group_count"], sort=True)
    out = grouped.agg(n_seeds=("seed", "nunique"), count_min=("count", "min"), count_max=("count", "max"))
    out = out.reset_index()
    out["_split"] = out["split"].map({s: i for i, s in enumerate(SPLITS)})
    out["_set"] = out["set"].map({s: i for i, s in enumerate(SMALL_GROUP_SETS)})
    out = out.sort_values(["dataset", "_split", "group", "class", "_set", "min_group_count"], kind="stable")
    return out[list(SMALL_GROUP_COLUMNS)].reset_index(drop=True)
