"""What the selected models predict: their test positive rate against the labels', and which
of them are constant.

A model can score a low fairness gap by predicting one class for everyone (a constant
classifier's gaps are all 0). Each row stores its test split's counts per (group, y, y_pred)
(``test_confusion``), so the rate of positive predictions, the labels' own rate, and whether
the model is constant are functions of the row alone. ``CONSTANT_RATE`` and
``constant_models`` are the one definition of a constant model every table, the supported
differences and the Pareto fronts use. Positive rates are for binary tasks only ("positive"
is class 1); constancy holds for any number of classes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from fairdp.analysis._rows import as_frame, check_by, factorize_objects, ok_rows
from fairdp.analysis._select import select_at_each_rt
from fairdp.schema import TEST_CONFUSION

CONSTANT_RATE = 1.0
"""A model that predicts one class for all but fewer than this many percent of the test rows
is counted as constant (exactly or nearly: its fairness gaps are near 0 for that reason
alone). For a binary task: a positive rate below it, or above 100 minus it."""

CONSTANT_PICKS = "n_constant"
"""The column ``with_constant_picks`` adds to a table of seeds' aggregates: how many seeds'
picks are constant models (``constant_models``)."""

CONSTANT_SENTENCE = (f"predicts one class for all but fewer than {CONSTANT_RATE:g}% of the test rows, so its "
                     "fairness gaps are (near) 0 for that reason alone")
"""What a constant model is, as tables' footnotes and captions say it."""


def _counts(confusion: str | None) -> np.ndarray | None:
    """A row's ``test_confusion`` JSON as (G, C, C) counts, None without usable counts."""
    if not isinstance(confusion, str) or not confusion:
        return None
    conf = np.asarray(json.loads(confusion), dtype=np.float64)
    if conf.ndim != 3 or conf.shape[1] != conf.shape[2] or conf.sum() == 0:
        return None
    return conf


def positive_rate(confusion: str | None) -> tuple[float, float]:
    """(percent of test rows predicted 1, percent labelled 1) from a row's ``test_confusion``
    JSON, (G, 2, 2) counts of (group, y, y_pred); NaN for a row without counts or a task with
    more than two classes."""
    conf = _counts(confusion)
    if conf is None or conf.shape[1:] != (2, 2):
        return float("nan"), float("nan")
    total = conf.sum()
    return 100 * conf[:, :, 1].sum() / total, 100 * conf[:, 1, :].sum() / total


def majority_share(confusion: str | None) -> float:
    """Percent of the test rows predicted as the class the model predicts most, from a row's
    ``test_confusion`` JSON; NaN for a row without counts."""
    conf = _counts(confusion)
    if conf is None:
        return float("nan")
    return float(100 * conf.sum(axis=(0, 1)).max() / conf.sum())


def majority_group_share(rows: pd.DataFrame) -> float:
    """Percent of the test rows in the largest protected group, from the rows' stored
    ``test_confusion`` counts (the mean over the distinct counts, for splits that differ by
    seed): the accuracy of a leakage probe that always guesses that group, the chance level of
    leakage. NaN without counts."""
    if TEST_CONFUSION not in rows.columns:
        return float("nan")
    shares = []
    for text in pd.unique(rows[TEST_CONFUSION].dropna()):
        conf = _counts(text)
        if conf is not None:
            sizes = conf.sum(axis=(1, 2))
            shares.append(100 * sizes.max() / sizes.sum())
    return float(np.mean(shares)) if shares else float("nan")


def _is_constant(share):
    return share > 100 - CONSTANT_RATE


def constant_models(rows: pd.DataFrame) -> pd.Series:
    """Per row of ``rows``, whether its model is constant: it predicts one class for all but
    fewer than ``CONSTANT_RATE`` percent of the test rows (nullable boolean, NA for a row
    without stored counts: written before fairdp stored them, or failed). Same index as
    ``rows``."""
    rows = as_frame(rows, "rows")
    if TEST_CONFUSION not in rows.columns:
        return pd.Series(pd.NA, index=rows.index, dtype="boolean")
    shares = majority_shares(rows[TEST_CONFUSION])
    flags = pd.array(_is_constant(shares), dtype="boolean")
    flags[np.isnan(shares)] = pd.NA
    return pd.Series(flags, index=rows.index)


def majority_shares(confusions: pd.Series) -> np.ndarray:
    """``majority_share`` of each of ``confusions`` (``test_confusion`` JSON texts), parsed all
    at once (``_of_each_confusion``): a selection of a million rows picks a hundred thousand."""
    def of_counts(counts: np.ndarray) -> np.ndarray:
        per_class = counts.sum(axis=(1, 2))  # per predicted class
        total = per_class.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, 100 * per_class.max(axis=1) / total, np.nan)[:, None]

    return _of_each_confusion(confusions, of_counts, lambda text: (majority_share(text),))[:, 0]


def positive_rates_of(confusions: pd.Series) -> np.ndarray:
    """``positive_rate`` of each of ``confusions``, parsed all at once (``_of_each_confusion``):
    an (n, 2) array of (predicted 1, labelled 1) in percent."""
    def of_counts(counts: np.ndarray) -> np.ndarray:
        if counts.shape[2:] != (2, 2):
            return np.full((len(counts), 2), np.nan)
        total = counts.sum(axis=(1, 2, 3))
        with np.errstate(invalid="ignore", divide="ignore"):
            rates = np.stack([100 * counts[:, :, :, 1].sum(axis=(1, 2)) / total,
                              100 * counts[:, :, 1, :].sum(axis=(1, 2)) / total], axis=1)
        return np.where((total > 0)[:, None], rates, np.nan)

    return _of_each_confusion(confusions, of_counts, positive_rate)


def _of_each_confusion(confusions: pd.Series, of_counts, of_text) -> np.ndarray:
    """Per text of ``confusions`` (``test_confusion`` JSON), a row of values: ``of_counts`` of
    (m, G, C, C) counts gives m rows at once for the texts shaped as fairdp writes them, which
    are parsed in pyarrow; any other text (or shape) gets ``of_text(text)``, the one-text
    definition, so every text gets the answer that definition gives. Each distinct text once."""
    import pyarrow as pa
    import pyarrow.compute as pc

    codes, texts = factorize_objects(confusions.to_numpy(object))
    width = len(of_text(None))  # how many values a text gives
    if not len(texts):
        return np.full((len(codes), width), np.nan)
    out = np.full((len(texts), width), np.nan)
    text = pa.array([t if isinstance(t, str) else None for t in texts], type=pa.string())
    numbers = pc.split_pattern(pc.replace_substring_regex(text, r"[\[\]\s]+", ""), ",")
    n = pc.list_value_length(numbers).to_numpy(zero_copy_only=False).astype(float)
    brackets = pc.count_substring(text, "[").to_numpy(zero_copy_only=False).astype(float)
    skeleton = pc.replace_substring_regex(text, r"[^\[\],]+", "")
    # (G, C, C) nested lists hold n = G C^2 numbers in 1 + G + G C brackets: solve for C, then G,
    # and keep the texts whose brackets and commas are exactly those of that shape
    ratio = n / np.maximum(brackets - 1, 1)
    classes = np.maximum(np.rint((ratio + np.sqrt(ratio ** 2 + 4 * ratio)) / 2), 1)
    groups = np.maximum(np.rint(n / classes ** 2), 1)
    shapes, which = np.unique(np.stack([groups, classes], axis=1), axis=0, return_inverse=True)
    expected = pa.array([_skeleton(int(g), int(c)) for g, c in shapes], type=pa.string()).take(pa.array(which.ravel()))
    fast = pc.fill_null(pc.equal(skeleton, expected), False).to_numpy(zero_copy_only=False)
    for g, c in {(int(g), int(c)) for g, c in zip(groups[fast], classes[fast])}:
        mine = np.flatnonzero(fast & (groups == g) & (classes == c))
        try:
            values = pc.list_flatten(pc.cast(pc.take(numbers, pa.array(mine)), pa.list_(pa.float64())))
        except pa.ArrowInvalid:  # a text that is not numbers: the one-text definition says what it is
            fast[mine] = False
            continue
        out[mine] = of_counts(values.to_numpy().reshape(len(mine), g, c, c))
    for i in np.flatnonzero(~fast):
        out[i] = of_text(texts[i])
    return np.where((codes >= 0)[:, None], out[np.maximum(codes, 0)], np.nan)


def _skeleton(groups: int, classes: int) -> str:
    """The brackets and commas of a (groups, classes, classes) nested JSON list."""
    row = "[" + "," * (classes - 1) + "]"
    matrix = "[" + ",".join([row] * classes) + "]"
    return "[" + ",".join([matrix] * groups) + "]"


def constant_picks(selected: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """Per (dataset, method, *by) of the selected rows (one per seed, e.g. ``select_by_rt``'s):
    ``n_constant``, how many seeds' picks are constant models. Groups none of whose rows store
    counts are left out."""
    rows = ok_rows(selected, "selected")
    by = check_by(by, rows)
    keys = ["dataset", "method", *by]
    flags = constant_models(rows)
    known = rows.assign(_constant=flags)[flags.notna().to_numpy(bool)]
    if known.empty:
        return pd.DataFrame({k: pd.Series(dtype=object) for k in keys}).assign(
            **{CONSTANT_PICKS: pd.Series(dtype="Int64")})
    counted = known.groupby(keys, sort=True, dropna=False)["_constant"].sum().astype("Int64")
    return counted.rename(CONSTANT_PICKS).reset_index()


def with_constant_picks(table: pd.DataFrame, selected: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """``table`` (one row per (dataset, method, *by), e.g. ``aggregate_seeds`` output, or
    ``rt_sweep``'s with "rt" among ``by`` and ``selected`` holding every RT's picks) with
    ``n_constant`` (``CONSTANT_PICKS``): how many of the seeds' picks in ``selected`` are
    constant models; NA for a group whose rows store no counts. ``table`` is returned
    unchanged when no selected row stores counts (rows written before fairdp stored them):
    there is then nothing to say."""
    table = as_frame(table, "table")
    picks = constant_picks(selected, by)
    if picks.empty:
        return table
    keys = ["dataset", "method", *by]
    merged = table[keys].merge(picks, on=keys, how="left")  # left merge keeps table's row order
    return table.assign(**{CONSTANT_PICKS: pd.array(merged[CONSTANT_PICKS].to_numpy(), dtype="Int64")})


def selections_at(df: pd.DataFrame, rts: Iterable[float], fairness: str = "tpr_gap",
                  by: Sequence[str] = ()) -> pd.DataFrame:
    """``select_by_rt`` at every RT of ``rts``, stacked (each pick has its ``rt``): what
    ``with_constant_picks`` needs beside an ``rt_sweep``, with "rt" among its keys. Warnings
    about excluded rows are ``rt_sweep``'s to give, and are not repeated."""
    parts = select_at_each_rt(df, list(rts), fairness, by, notes=[])  # notes dropped: rt_sweep's
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def mark_constant_picks(table: pd.DataFrame, selected: pd.DataFrame) -> pd.DataFrame:
    """``table`` (one row per selected row, e.g. ``selected_configs`` output, with dataset,
    method, seed, config_id) with a ``constant`` column (nullable boolean: the pick is a
    constant model, ``constant_models``) after its last test metric; unchanged when no
    selected row stores counts."""
    table = as_frame(table, "table")
    rows = ok_rows(selected, "selected")
    flags = constant_models(rows)
    if flags.isna().all():
        return table
    keys = ["dataset", "method", "seed", "config_id"]
    known = rows[keys].assign(constant=flags).drop_duplicates(keys)
    merged = table[keys].merge(known, on=keys, how="left")
    tests = [i for i, c in enumerate(table.columns) if str(c).startswith("test_")]
    at = tests[-1] + 1 if tests else len(table.columns)
    out = table.copy()
    out.insert(at, "constant", pd.array(merged["constant"].to_numpy(), dtype="boolean"))
    return out


def positive_rates(selected: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """Per (dataset, method, *by) over the selected rows (one per seed): ``n_seeds``, mean and
    sample std of the test positive rate (percent), the labels' positive rate, and how many
    seeds' models are ``constant`` (``constant_models``). Rows without stored counts, or of
    tasks of more than two classes, are left out; empty when no row has them."""
    rows = ok_rows(selected, "selected")
    by = check_by(by, rows)
    columns = ["dataset", "method", *by, "n_seeds", "positive_rate_mean", "positive_rate_std", "label_rate",
               "constant"]
    if TEST_CONFUSION not in rows.columns:
        return pd.DataFrame(columns=columns)
    rates = positive_rates_of(rows[TEST_CONFUSION])
    rows = rows.assign(_rate=rates[:, 0], _label=rates[:, 1], _constant=constant_models(rows)).dropna(subset=["_rate"])
    out = []
    for key, grp in rows.groupby(["dataset", "method", *by], dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        rate = grp["_rate"]
        out.append({**dict(zip(["dataset", "method", *by], key)), "n_seeds": len(grp),
                    "positive_rate_mean": float(rate.mean()),
                    "positive_rate_std": float(rate.std(ddof=1)) if len(grp) > 1 else float("nan"),
                    "label_rate": float(grp["_label"].mean()),
                    "constant": int(grp["_constant"].sum())})
    return pd.DataFrame(out, columns=columns)


def has_constant_picks(value) -> bool:
    """Whether an ``n_constant`` cell says some seed's pick is constant (NA: unknown, no)."""
    return value is not None and not pd.isna(value) and int(value) > 0
