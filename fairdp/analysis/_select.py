"""Model selection and cross-seed aggregation over result rows (FEDERATE sec. 5.1 and 5.2).

Every function takes a DataFrame of result rows (one row per dataset, method, seed and
config; see docs/results-schema.md) and returns a new DataFrame; nothing here reads
or writes files. Only rows with ``status == "ok"`` count (all rows when there is no status
column). A *run* is one (dataset, method, seed): the unit in which the papers select a
configuration before averaging over seeds.

- ``select_by_rt``: the relaxation threshold (RT) rule. alpha* is the best validation
  accuracy of the run; every config with valid accuracy in [alpha* - RT, alpha*] is a
  candidate and the one with the lowest validation fairness gap wins. RT = 0 is the usual
  best-accuracy selection (ties then go to the fairer config).
- ``aggregate_seeds``: mean and sample standard deviation over the selected seeds, the
  "mean ± std over 5 seeds" of FEDERATE Tables 1-7.
- ``rt_sweep``: selection + aggregation for several RTs (Figure 2, Tables 4-6).
- ``fairness_accuracy_bins``: best validation fairness per 1-point accuracy interval
  (Figure 3).
- ``privacy_accuracy_by_eps``: best-accuracy config per eps (Figure 4, Table 7).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from fairdp.analysis._rows import (
    RUN_KEYS,
    as_frame,
    check_by,
    check_fairness,
    check_rt,
    describe_rows,
    drop_nan,
    guarantees_by_method,
    hyperparameter_columns,
    numeric_columns,
    ok_rows,
    require_columns,
    row_guarantees,
    shown_kinds,
)
from fairdp.errors import InputError
from fairdp.schema import (
    GUARANTEE,
    NOTION_GAP,
    NOTION_METRICS,
    TEST_CONFUSION,
    TUNING,
    VALID_CONFUSION,
)

# Accuracy is stored in percent with float noise (75.3 - 1.0 is not exactly 74.3), so the
# RT window is widened by this many points; far below any reported precision.
_RT_TOL = 1e-9


def per_notion(df: pd.DataFrame) -> pd.DataFrame:
    """Each row's violation of its own fairness notion, as ``valid_notion_gap`` and
    ``test_notion_gap`` (dp_gap for dp, eo_gap for eo, ap_gap for ap: Tran et al. report each
    notion with its own violation).

    Rows of methods without a notion (baselines such as unconstrained or DP-SGD) are repeated
    once per notion present, each copy taking that notion, so every notion's table and
    figure has its baselines. No row with a notion is an ``InputError``.
    """
    rows = ok_rows(df)
    require_columns(rows, ["fairness_notion"])
    notions = [n for n in NOTION_METRICS if (rows["fairness_notion"] == n).any()]
    if not notions:
        raise InputError("fairness notion_gap: no row has a fairness_notion (dp, eo or ap)")
    bare = rows["fairness_notion"].isna().to_numpy()
    # the rows with a notion, then the bare rows once per notion: taken in one go (a concat of
    # copies costs seconds at a million rows)
    kept, repeated = np.flatnonzero(~bare), np.flatnonzero(bare)
    out = rows.iloc[np.concatenate([kept, np.tile(repeated, len(notions))])].reset_index(drop=True)
    notion = np.concatenate([rows["fairness_notion"].to_numpy(object)[kept], np.repeat(np.array(notions, object),
                                                                                        len(repeated))])
    if len(repeated):
        out["fairness_notion"] = pd.Series(notion, dtype=rows["fairness_notion"].dtype if not bare.all() else object)
    for split in ("valid", "test"):
        cols = {n: f"{split}_{m}" for n, m in NOTION_METRICS.items()}
        require_columns(out, [c for n, c in cols.items() if n in notions])
        gap = np.full(len(out), np.nan)
        for n in notions:
            mine = notion == n
            gap[mine] = pd.to_numeric(out[cols[n]], errors="coerce").to_numpy(float)[mine]
        out[f"{split}_{NOTION_GAP}"] = gap
    return out


# what the narrow per-notion copy keeps beside the run keys, ``by`` and every valid and test
# metric: what the per-notion tables and views read
_PER_NOTION_KEPT = ("config_id", "status", "fairness_notion", "eps", "eps_formal", "delta", GUARANTEE,
                    "accountant", TUNING, "leakage", "mdl", "mdl_uniform", TEST_CONFUSION)
_ROW = "_row"  # a per-notion row's position among the rows: its pick's whole row


def _per_notion_rows(df: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """``per_notion`` of ``df`` (ok rows) with the columns the per-notion tables and views read
    (the run keys, ``by``, every valid and test metric, ``_PER_NOTION_KEPT``), each row with its
    position in ``df`` (``_ROW``) for ``_whole_picks``, which gives the picks every column. The
    copy repeats each row without a notion once per notion: each column it carries costs 30 ms
    and 11 MB a million rows."""
    metrics = [c for c in df.columns if c.startswith(("valid_", "test_")) and c != VALID_CONFUSION]
    kept = [c for c in dict.fromkeys([*RUN_KEYS, *by, *_PER_NOTION_KEPT, *metrics]) if c in df.columns]
    return per_notion(df[kept].assign(**{_ROW: np.arange(len(df))}))


def _whole_picks(picks: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """Picks made from ``_per_notion_rows(df)`` as ``per_notion(df)`` gives them: every column of
    ``df`` at each pick's row, then those the copy carries (as the selection read, converted
    or set them: the notion, its gaps, rt), in ``per_notion``'s order."""
    whole = df.iloc[picks[_ROW].to_numpy()].reset_index(drop=True)
    for column in picks.columns:
        if column != _ROW:
            whole[column] = picks[column].reset_index(drop=True)
    return whole


def _run_rows(df: object, fairness: str, caller: str | Sequence[str], by: Sequence[str] = (),
              notes: list[str] | None = None, whole: list | None = None) -> pd.DataFrame:
    """Validated ok rows with numeric, non-NaN valid accuracy and valid fairness. With
    ``whole`` (a list, for a caller that returns whole picks) each notion's copy is the narrow
    one (``_per_notion_rows``), and the ok rows its positions index are appended to ``whole``."""
    fairness = check_fairness(fairness)
    fcol = f"valid_{fairness}"
    df = ok_rows(df)
    by = check_by(by, df)
    if fairness == NOTION_GAP and f"valid_{NOTION_GAP}" not in df.columns:  # not expanded yet
        if "fairness_notion" not in by:
            raise InputError("fairness notion_gap: each notion is its own table; add fairness_notion to by")
        if whole is None:
            df = per_notion(df)
        else:
            whole.append(df)
            df = _per_notion_rows(df, by)
    require_columns(df, [*RUN_KEYS, "config_id", "valid_accuracy", fcol])
    df = numeric_columns(df, ["valid_accuracy", fcol])
    return drop_nan(df, ["valid_accuracy", fcol], caller, notes)


def _picks_at(df: pd.DataFrame, keys: Sequence[str], rts: Sequence[float], fcol: str) -> list[np.ndarray]:
    """Per threshold of ``rts``, the positions in ``df`` of each group of ``keys``'s pick: among
    valid_accuracy >= max - rt, the lowest ``fcol``; ties to the higher valid accuracy, then the
    smaller config_id (string order); NaN in ``fcol`` sorts last, so it only wins when nothing
    else is in the window. Groups in their keys' sorted order (NaN last).

    The rows are ordered once, by group and then by the rule's preference, which no threshold
    changes: a threshold's pick of a group is the first of its rows inside the window, so an RT
    sweep costs one sort, not one per threshold."""
    keys = list(keys)
    if df.empty:
        return [np.zeros(0, dtype=np.int64) for _ in rts]
    group = df.groupby(keys, sort=True, dropna=False, observed=True).ngroup().to_numpy()
    accuracy = df["valid_accuracy"].to_numpy(float)
    gap = pd.to_numeric(df[fcol], errors="coerce").to_numpy(float)
    config_rank = pd.factorize(df["config_id"].astype(str).to_numpy(object), sort=True)[0]
    order = np.lexsort((config_rank, -accuracy, gap, group))
    alpha = np.full(int(group.max()) + 1, -np.inf)
    np.maximum.at(alpha, group, accuracy)
    ordered_alpha, ordered_accuracy, ordered_group = alpha[group][order], accuracy[order], group[order]
    picks = []
    for rt in rts:
        inside = np.flatnonzero(ordered_accuracy >= ordered_alpha - rt - _RT_TOL)
        starts = np.flatnonzero(np.r_[True, ordered_group[inside][1:] != ordered_group[inside][:-1]])
        picks.append(order[inside[starts]])
    return picks


def _pick(df: pd.DataFrame, keys: Sequence[str], rt: float, fcol: str) -> pd.DataFrame:
    """Per group of ``keys``, the row the RT rule picks (``_picks_at``), with all its columns."""
    (chosen,) = _picks_at(df, keys, [rt], fcol)
    return df.iloc[chosen].reset_index(drop=True)


def select_by_rt(df: pd.DataFrame, rt: float = 1.0, fairness: str = "tpr_gap",
                 by: Sequence[str] = (), *, notes: list[str] | None = None) -> pd.DataFrame:
    """One config per (dataset, method, seed, *by) by the relaxation-threshold rule (FEDERATE 5.1).

    alpha* = the run's best ``valid_accuracy``; candidates have valid_accuracy >= alpha* - rt
    (in accuracy points); the lowest ``valid_<fairness>`` wins, ties to the higher valid
    accuracy and then the smaller ``config_id``. ``rt=0`` is best-accuracy selection.
    Rows with NaN valid accuracy or fairness are excluded with a warning naming them
    (appended to ``notes`` instead, when a list is given). Returns the chosen rows with all
    their columns (test metrics, leakage, mdl, ...) and an added ``rt`` column, sorted by
    dataset, method, seed.

    ``by`` (e.g. ["fairness_notion", "eps"]) selects separately for every value of those
    columns: Tran et al. report each notion at each eps. A method without such a column
    (NaN) is one group. ``fairness="notion_gap"`` (with fairness_notion in ``by``) selects
    each notion on its own violation, with the baselines repeated per notion (``per_notion``).
    """
    rt = check_rt(rt)
    fairness = check_fairness(fairness)
    whole: list = []  # the rows a notion's narrow copy was made from
    rows = _run_rows(df, fairness, "select_by_rt", by, notes, whole)
    picks = _select_clean(rows, rt, fairness, by)
    return _whole_picks(picks, whole[0]) if whole else picks


def select_at_each_rt(df: pd.DataFrame, rts: Sequence[float], fairness: str = "tpr_gap",
                      by: Sequence[str] = (), *, notes: list[str] | None = None) -> list[pd.DataFrame]:
    """``select_by_rt`` at each threshold of ``rts``, from one ordering of the rows
    (``_picks_at``): what an RT sweep's picks are, at the cost of one selection."""
    rts = [check_rt(r, "rts") for r in rts]
    fairness = check_fairness(fairness)
    whole: list = []
    rows = _run_rows(df, fairness, "select_by_rt", by, notes, whole)
    by = check_by(by)
    picks = [rows.iloc[chosen].reset_index(drop=True).assign(rt=rt)
             for rt, chosen in zip(rts, _picks_at(rows, [*RUN_KEYS, *by], rts, f"valid_{fairness}"))]
    return [_whole_picks(p, whole[0]) for p in picks] if whole else picks


def _select_clean(rows: pd.DataFrame, rt: float, fairness: str, by: Sequence[str] = ()) -> pd.DataFrame:
    out = _pick(rows, [*RUN_KEYS, *by], rt, f"valid_{fairness}")
    out["rt"] = rt
    return out


def _default_metrics(fairness: str) -> list[str]:
    return ["test_accuracy", f"test_{fairness}", "leakage", "mdl"]


def _aggregate(selected: pd.DataFrame, keys: Sequence[str], metrics: Sequence[str]) -> pd.DataFrame:
    keys = list(keys)
    columns = [*keys, "n_seeds"] + [f"{m}_{s}" for m in metrics for s in ("mean", "std")]
    if selected.empty:
        return pd.DataFrame({c: pd.Series(dtype=float) for c in columns}).astype(
            {k: selected[k].dtype for k in keys if k in selected.columns}
        )
    grouped = selected.groupby(keys, sort=True, dropna=False)
    out = grouped["seed"].nunique().rename("n_seeds").to_frame()
    for m in metrics:
        out[f"{m}_mean"] = grouped[m].mean()
        out[f"{m}_std"] = grouped[m].std(ddof=1)
    out = out.reset_index()
    out["n_seeds"] = out["n_seeds"].astype(int)
    return out[columns]


def aggregate_seeds(
    selected: pd.DataFrame, metrics: Sequence[str] | None = None, fairness: str = "tpr_gap",
    by: Sequence[str] = (),
) -> pd.DataFrame:
    """Mean and std over seeds of the selected rows, per (dataset, method, *by).

    ``selected`` has one row per (dataset, method, seed), e.g. from ``select_by_rt``.
    ``metrics`` defaults to test_accuracy, test_<fairness>, leakage, mdl. ``M_std`` is the
    sample standard deviation (ddof=1, as the papers' "± std over seeds"); it is NaN when a
    method has a single seed. NaN values of a metric are skipped in its mean and std;
    ``n_seeds`` counts the selected seeds. Columns: dataset, method, n_seeds, then M_mean,
    M_std per metric in order, then ``guarantee``, the kind of the method's guarantee ("not
    private" for a method without one, as every table prints it; ``analysis._rows.row_guarantees``)
    (the ``fairdp analyze --format csv`` contract).
    """
    fairness = check_fairness(fairness)
    if metrics is None:
        metrics = _default_metrics(fairness)
    if isinstance(metrics, str) or not (metrics := list(metrics)):  # a str before list() splits it
        raise InputError("metrics: expected a non-empty list of column names")
    rows = ok_rows(selected, "selected")
    by = check_by(by, rows)
    require_columns(rows, ["dataset", "method", "seed", *metrics], "selected")
    rows = numeric_columns(rows, metrics, "selected")
    dup = rows.duplicated([*RUN_KEYS, *by], keep=False)
    if dup.any():
        raise InputError(
            f"selected: several rows for one ({', '.join([*RUN_KEYS, *by])}), e.g. "
            f"{describe_rows(rows[dup], limit=1)}; select one config per seed first (select_by_rt, with the same by)"
        )
    out = _aggregate(rows, ["dataset", "method", *by], metrics)
    kinds = guarantees_by_method(rows) if len(rows) else {}
    out[GUARANTEE] = pd.Series(shown_kinds(kinds.get(str(m)) for m in out["method"]), index=out.index, dtype=object)
    return out


def rt_sweep(
    df: pd.DataFrame,
    rts: Iterable[float] = (0.0, 0.5, 1.0, 2.0, 3.0, 5.0),
    fairness: str = "tpr_gap",
    metrics: Sequence[str] | None = None,
    by: Sequence[str] = (),
    *,
    notes: list[str] | None = None,
) -> pd.DataFrame:
    """``select_by_rt`` + ``aggregate_seeds`` for each RT, stacked (FEDERATE Fig. 2, Tables 4-6).

    ``metrics`` defaults to valid_accuracy and valid_<fairness> (what Figure 2 plots) plus
    the ``aggregate_seeds`` defaults. Columns: dataset, method, *by, rt, n_seeds, M_mean,
    M_std...
    """
    fairness = check_fairness(fairness)
    if isinstance(rts, (str, numbers.Real)):
        rts = [rts]
    rts = [check_rt(r, "rts") for r in rts]
    if not rts:
        raise InputError("rts: expected at least one relaxation threshold")
    if metrics is None:
        metrics = ["valid_accuracy", f"valid_{fairness}", *_default_metrics(fairness)]
    if isinstance(metrics, str) or not (metrics := list(metrics)):
        raise InputError("metrics: expected a non-empty list of column names")
    rows = _run_rows(df, fairness, "rt_sweep", by, notes)
    by = check_by(by)
    require_columns(rows, metrics)
    fcol = f"valid_{fairness}"
    return _sweep_table(rows, rts, _picks_at(rows, [*RUN_KEYS, *by], rts, fcol), by, metrics, fcol)


def _sweep_table(rows: pd.DataFrame, rts: Sequence[float], picks: Sequence[np.ndarray], by: Sequence[str],
                 metrics: Sequence[str], fcol: str) -> pd.DataFrame:
    """``rt_sweep``'s table from each threshold's picks (positions in ``rows``)."""
    # only the columns the aggregates read: each threshold's picks are taken from them
    rows = numeric_columns(rows[list(dict.fromkeys([*RUN_KEYS, *by, "config_id", "valid_accuracy", fcol, *metrics]))],
                           metrics)
    parts = []
    for rt, chosen in zip(rts, picks):
        agg = _aggregate(rows.iloc[chosen], ["dataset", "method", *by], metrics)
        agg.insert(2 + len(by), "rt", rt)
        parts.append(agg)
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values(["dataset", "method", *by, "rt"], kind="mergesort").reset_index(drop=True)


def selection_and_sweep(df: pd.DataFrame, rt: float, rts: Sequence[float], fairness: str = "tpr_gap",
                        by: Sequence[str] = (), *, keep: Sequence[str] = (),
                        notes: list[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame | None,
                                                                  pd.DataFrame | None]:
    """``select_by_rt(df, rt)``, ``rt_sweep(df, rts)`` and every threshold's picks of ``rts``
    stacked, each with its ``rt`` (``selections_at``), from one ordering of the rows
    (``_picks_at``), as a report shows them; the last two None without ``rts``. The stacked
    picks keep only the run keys, ``by``, ``config_id``, ``status`` and the columns of ``keep``
    that the rows have. Notes as the separate calls give them."""
    rt, fairness = check_rt(rt), check_fairness(fairness)
    rts = [check_rt(r, "rts") for r in rts]
    rows = _run_rows(df, fairness, ["select_by_rt", "rt_sweep"] if rts else "select_by_rt", by, notes)
    by = check_by(by)
    fcol = f"valid_{fairness}"
    picks = _picks_at(rows, [*RUN_KEYS, *by], [rt, *rts], fcol)
    selected = rows.iloc[picks[0]].reset_index(drop=True)
    selected["rt"] = rt
    if not rts:
        return selected, None, None
    metrics = ["valid_accuracy", fcol, *_default_metrics(fairness)]
    require_columns(rows, metrics)
    sweep = _sweep_table(rows, rts, picks[1:], by, metrics, fcol)
    kept = [c for c in dict.fromkeys([*RUN_KEYS, *by, "config_id", "status", *keep]) if c in rows.columns]
    each = pd.concat([rows[kept].iloc[chosen].reset_index(drop=True).assign(rt=r) for r, chosen in zip(rts, picks[1:])],
                     ignore_index=True)
    return selected, sweep, each


def fairness_accuracy_bins(df: pd.DataFrame, fairness: str = "tpr_gap", *,
                           notes: list[str] | None = None) -> pd.DataFrame:
    """Best validation fairness per 1-point validation-accuracy interval (FEDERATE Fig. 3).

    The interval of accuracy a is floor(a + 0.5): [71.5, 72.5) is bin 72, so 71.5 -> 72 and
    72.5 -> 73. Per (dataset, method, seed, bin) the lowest ``valid_<fairness>`` is kept, then
    averaged over the seeds that reached the bin. Columns: dataset, method, accuracy_bin,
    n_seeds (the seeds that reached the bin), valid_<fairness>_mean, valid_<fairness>_std
    (ddof=1), seeds_run (the seeds the method ran). An interval no config reached has no row
    (the paper's "missing point"), never a zero.
    """
    fairness = check_fairness(fairness)
    fcol = f"valid_{fairness}"
    rows = _run_rows(df, fairness, "fairness_accuracy_bins", notes=notes)
    rows["accuracy_bin"] = np.floor(rows["valid_accuracy"].to_numpy(float) + 0.5).astype(np.int64)
    best = rows.groupby([*RUN_KEYS, "accuracy_bin"], sort=False)[fcol].min().reset_index()
    out = _aggregate(best, ["dataset", "method", "accuracy_bin"], [fcol])
    # the seeds each (dataset, method) ran: a bin's n_seeds counts only those that reached it
    ran = rows.groupby(["dataset", "method"])["seed"].nunique().rename("seeds_run").reset_index()
    return out.merge(ran, on=["dataset", "method"], how="left")


def privacy_accuracy_by_eps(df: pd.DataFrame, fairness: str = "tpr_gap", *,
                            notes: list[str] | None = None) -> pd.DataFrame:
    """Accuracy and leakage against eps for the methods that have one (FEDERATE Fig. 4, Table 7).

    Per (dataset, method, eps, seed) the config with the best valid accuracy at that eps is
    chosen (RT = 0; ties to the lower valid_<fairness> when present, then smaller config_id),
    then test_accuracy and leakage are averaged over seeds (std ddof=1). Rows with NaN eps
    are methods without one and are left out. Columns: dataset, method, eps, n_seeds,
    test_accuracy_mean/std, leakage_mean/std, and eps_formal_max when eps_formal exists.
    """
    fairness = check_fairness(fairness)
    fcol = f"valid_{fairness}"
    rows = as_frame(df)
    require_columns(rows, [*RUN_KEYS, "config_id", "eps", "valid_accuracy", "test_accuracy", "leakage"])
    # the columns read here, taken before the filters copy the rows (a million rows, sixty columns)
    read = [*RUN_KEYS, "config_id", "status", "eps", "valid_accuracy", "test_accuracy", "leakage", fcol, "eps_formal"]
    rows = ok_rows(rows[[c for c in dict.fromkeys(read) if c in rows.columns]])
    numeric = ["eps", "valid_accuracy", "test_accuracy", "leakage"]
    numeric += [c for c in (fcol, "eps_formal") if c in rows.columns]
    rows = numeric_columns(rows, numeric)
    rows = rows[rows["eps"].notna()]
    rows = drop_nan(rows, ["valid_accuracy"], "privacy_accuracy_by_eps", notes)
    if fcol not in rows.columns:
        rows[fcol] = np.nan
    keys = ["dataset", "method", "eps", "seed"]
    chosen = _pick(rows, keys, 0.0, fcol)
    out = _aggregate(chosen, ["dataset", "method", "eps"], ["test_accuracy", "leakage"])
    if "eps_formal" in rows.columns:
        if chosen.empty:
            out["eps_formal_max"] = pd.Series(dtype=float)
        else:
            emax = chosen.groupby(["dataset", "method", "eps"], sort=True)["eps_formal"].max()
            out["eps_formal_max"] = emax.to_numpy()
    return out


def selected_configs(selected: pd.DataFrame, fairness: str = "tpr_gap") -> pd.DataFrame:
    """Which config a selection picked in each run, and its hyperparameters.

    ``selected`` has one row per (dataset, method, seed), e.g. from ``select_by_rt``. Columns:
    dataset, method, seed, config_id, every hyperparameter column some selected row sets
    (NaN where a method has no such hyperparameter), then valid and test accuracy and
    <fairness>, sorted by dataset, method, seed; then ``guarantee``, the kind of the row's
    guarantee (``row_guarantees``; "not private" for none), and after it eps_formal, eps_released, delta_released
    and released_under when ``selected`` has them (``released_guarantees``).
    """
    fairness = check_fairness(fairness)
    rows = ok_rows(selected, "selected")
    metrics = ["valid_accuracy", f"valid_{fairness}", "test_accuracy", f"test_{fairness}"]
    require_columns(rows, [*RUN_KEYS, "config_id", *metrics], "selected")
    columns = [*RUN_KEYS, "config_id", *hyperparameter_columns(rows), *metrics, GUARANTEE]
    rows[GUARANTEE] = (pd.Series(shown_kinds(row_guarantees(rows)), index=rows.index, dtype=object) if len(rows)
                       else pd.Series(dtype=object))
    if "eps_released" in rows.columns:  # released_guarantees' columns, beside eps_formal
        columns += ["eps_formal", "eps_released", "delta_released", "released_under"]
    return rows[columns].sort_values(list(RUN_KEYS), kind="mergesort").reset_index(drop=True)


def violation_accuracy_by_eps(df: pd.DataFrame, rt: float = 1.0, *, notes: list[str] | None = None) -> pd.DataFrame:
    """Tran et al.'s Figures 1-2 as a table: per (dataset, method, fairness notion, eps), RT
    selection on the notion's own violation, then test violation and accuracy, mean and std
    over seeds. Methods without eps (non-private ones) have one row per notion with eps NaN
    (a level, not a curve); baselines without a notion appear under every notion.
    Columns: dataset, method, fairness_notion, eps, n_seeds, test_notion_gap_mean/std,
    test_accuracy_mean/std."""
    rows = ok_rows(df)
    require_columns(rows, ["fairness_notion", "eps"])
    by = ["fairness_notion", "eps"]
    rows = numeric_columns(rows, ["eps"])
    selected = select_by_rt(rows, rt, NOTION_GAP, by, notes=notes)
    return aggregate_seeds(selected, [f"test_{NOTION_GAP}", "test_accuracy"], NOTION_GAP, by)
