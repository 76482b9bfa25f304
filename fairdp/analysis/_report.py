"""``fairdp report``: the tables and figures of FEDERATE sec. 5 as Markdown and HTML.

``write_report`` writes into ``out_dir``: ``figures/*.png``, ``table.csv`` (the
``fairdp analyze --format csv`` table), ``report.md`` (figures linked) and a self-contained
``report.html`` (figures embedded as base64 PNG data URIs, tables as HTML). Every file is
written atomically (hidden temp file in the same folder, then os.replace), so a reader never
sees a half-written file. Figures that a previous report wrote but this one cannot draw
(e.g. no method with eps any more) are removed, so the folder matches the report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import math
import os
import re
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.api.types import is_numeric_dtype

from fairdp._atomic import output_dir, write_files
from fairdp.analysis._completeness import Completeness
from fairdp.analysis._curves import selected_curves
from fairdp.analysis._error_bars import (
    DEFAULT_ERROR_BARS,
    bootstrap_over_seeds,
    check_error_bars,
    error_bars_text,
    per_seed,
)
from fairdp.analysis._groups import aggregate_group_rates, groups_too_small
from fairdp.analysis._intervals import (
    CROSS_KIND,
    check_level,
    constant_rows,
    not_distinguishable,
    seed_advice_text,
    seed_intervals,
    supported_differences,
)
from fairdp.analysis._papers import comparison_section, get_paper
from fairdp.analysis._pareto import fronts_per_run
from fairdp.analysis._predictions import (
    CONSTANT_PICKS,
    CONSTANT_RATE,
    CONSTANT_SENTENCE,
    constant_models,
    mark_constant_picks,
    positive_rates,
    with_constant_picks,
)
from fairdp.analysis._release import (
    MEAN_OVER_SEEDS,
    NOT_COVERED,
    PER_SEED,
    has_release_events,
    selection_release,
    whole_table_release,
)
from fairdp.analysis._render import (
    HALVES_MAX_COLUMNS,
    Document,
    HtmlRenderer,
    Item,
    MarkdownRenderer,
)
from fairdp.analysis._rows import (
    COMPARED_IN,
    DIFFERENT_GUARANTEES,
    as_frame,
    caveats_text,
    check_by,
    check_fairness,
    check_rt,
    config_keys,
    converted_methods,
    default_direction,
    guarantee_text,
    guarantees_by_method,
    hyperparameter_columns,
    kinds_of,
    method_deltas,
    ok_rows,
    relations_text,
    with_compared_eps,
)
from fairdp.analysis._search_progress import hypervolume_bounds, search_progress
from fairdp.analysis._select import (
    _ROW,
    _per_notion_rows,
    _whole_picks,
    aggregate_seeds,
    fairness_accuracy_bins,
    per_notion,
    privacy_accuracy_by_eps,
    rt_sweep,
    selected_configs,
    selection_and_sweep,
    violation_accuracy_by_eps,
)
from fairdp.analysis._tables import (
    BY_LABELS,
    COMPARED_LABEL,
    CONSTANT_MARK,
    FAIRNESS_LABELS,
    GUARANTEE_LABEL,
    _display,
    by_cell,
    compared_cells,
    display_strings,
    format_table,
    group_rates_table,
    guarantee_cells,
    mean_std_column,
    selected_with_intervals,
    small_groups_table,
    sweep_tables,
)
from fairdp.constraints import feasible
from fairdp.errors import InputError
from fairdp.schema import (
    NOTION_GAP,
    RUN_KEYS,
    TEST_CONFUSION,
)

FIGURES = {
    "rt_sweep": "Validation accuracy, fairness and leakage against the relaxation threshold (FEDERATE Fig. 2): the "
                "validation metrics the selection reads; the tables below it give the test metrics",
    "fairness_accuracy_bins": "Best validation fairness per 1-point validation-accuracy interval (FEDERATE Fig. 3)",
    "privacy_accuracy": "Test accuracy and leakage of the best-accuracy config per ε (FEDERATE Fig. 4)",
    "leakage_vs_eps": "Leakage of every config against ε",
    "violation_accuracy_eps": "Test violation and accuracy against ε per fairness notion (Tran et al. Figs. 1-2)",
    "pareto_fronts": "Pareto fronts of validation accuracy, fairness and leakage (all seeds pooled)",
    "learning_curves": "Validation accuracy, fairness gap and loss of the selected configs against the epoch",
    "hypervolume_history": "Normalised hypervolume of each search's feasible front against its trials",
}

PARETO_CAVEAT = (
    " The figure pools every config of every seed and draws each method's front under each pair of objectives; "
    "the hypervolume measures how much of the objective space a method's front dominates, from that reference "
    "point. Neither ranks methods: a constant or random classifier has fairness gaps near 0, so it dominates on the "
    "gap axis at any accuracy and its hypervolume can exceed that of a method that learns something, and a method "
    "with more configs tends to have a larger front. Read a front as the trade-offs a method's configs reached.")
# Percent metrics have natural worst values, which make a reference point independent of
# the results: accuracy 0, gaps and leakage 100.
_HV_REFERENCE = {"max": 0.0, "min": 100.0}


def _eps_table(by_eps: pd.DataFrame, decimals: int, kinds: dict | None = None) -> pd.DataFrame:
    out = pd.DataFrame({
        "Dataset": by_eps["dataset"].astype(str),
        "Method": by_eps["method"].astype(str),
        GUARANTEE_LABEL: guarantee_cells(by_eps, kinds),
        "ε": [f"{v:g}" for v in by_eps["eps"]],
        **({COMPARED_LABEL: cells} if (cells := compared_cells(by_eps, kinds)) is not None else {}),
        "Seeds": [str(int(v)) for v in by_eps["n_seeds"]],
        "Accuracy ↑": mean_std_column(by_eps["test_accuracy_mean"], by_eps["test_accuracy_std"], decimals),
        "Leakage ↓": mean_std_column(by_eps["leakage_mean"], by_eps["leakage_std"], decimals),
    })
    if "eps_formal_max" in by_eps.columns:
        out["formal ε (max)"] = mean_std_column(by_eps["eps_formal_max"], [np.nan] * len(by_eps), 2)
    return out


def _rates_table(rates: pd.DataFrame, by: Sequence[str], kinds: dict | None = None) -> pd.DataFrame:
    def pm(m: float, sd: float) -> str:
        return f"{m:.1f}" + (f" ± {sd:.1f}" if math.isfinite(sd) else "")

    return pd.DataFrame({
        "Dataset": rates["dataset"], "Method": rates["method"], GUARANTEE_LABEL: guarantee_cells(rates, kinds),
        **{k: [("-" if pd.isna(v) else f"{v:g}" if isinstance(v, float) else str(v)) for v in rates[k]] for k in by},
        "Seeds": rates["n_seeds"],
        "Positive rate": [pm(m, sd) for m, sd in zip(rates["positive_rate_mean"], rates["positive_rate_std"])],
        "Labels' rate": [f"{v:.1f}" for v in rates["label_rate"]],
        "Constant": [f"{c} of {n}" for c, n in zip(rates["constant"], rates["n_seeds"])],
    })


def _metric_title(metric: str, fairness: str) -> str:
    names = {"test_accuracy": "Test accuracy", "leakage": "Leakage", "mdl": "MDL"}
    if metric in names:
        return names[metric]
    return "Test " + FAIRNESS_LABELS.get(metric[len("test_"):], metric[len("test_"):])


def _per_notion_view(df: pd.DataFrame) -> pd.DataFrame:
    """``per_notion`` with each method's notions as separate "methods" ("pfld [dp]"); ``df``
    may be ``per_notion``'s output already."""
    view = (df if f"valid_{NOTION_GAP}" in df.columns else per_notion(df)).copy(deep=False)
    view["method"] = view["method"].astype(str) + " [" + view["fairness_notion"].astype(str) + "]"
    return view


def _notion_table(notions: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "Dataset": notions["dataset"].astype(str), "Method": notions["method"].astype(str),
        GUARANTEE_LABEL: guarantee_cells(notions),
        "Notion": notions["fairness_notion"].astype(str), "ε": [by_cell(v) for v in notions["eps"]],
        **({COMPARED_LABEL: cells} if (cells := compared_cells(notions)) is not None else {}),
        "Seeds": [str(int(v)) for v in notions["n_seeds"]],
        "Violation ↓": mean_std_column(notions["test_notion_gap_mean"], notions["test_notion_gap_std"]),
        "Accuracy ↑": mean_std_column(notions["test_accuracy_mean"], notions["test_accuracy_std"]),
    })


def _probe_sentence(ok: pd.DataFrame) -> str:
    """How the rows' leakage and MDL were measured, from their ``probe`` column, and the
    uniform code MDL is compared with."""
    has_leak = "leakage" in ok.columns and pd.to_numeric(ok["leakage"], errors="coerce").notna().any()
    has_mdl = "mdl" in ok.columns and pd.to_numeric(ok["mdl"], errors="coerce").notna().any()
    if not (has_leak or has_mdl):
        return "No leakage or MDL probe was run."
    stored = ok["probe"].dropna().unique() if "probe" in ok.columns else []
    from fairdp.metrics import ProbeSettings  # torch and scikit-learn: only when rows carry a probe

    protocols = sorted({ProbeSettings.from_protocol(p).describe() for p in stored})
    if not protocols:
        probe = "a probe whose settings these rows do not record (written before fairdp stored them)"
    else:
        probe = "; ".join(protocols)
        if len(protocols) > 1:
            probe = f"several protocols, not comparable across methods: {probe}"
    text = (f"Leakage: accuracy of a probe trained on the valid split's representations and scored on the test "
            f"split's; probe: {probe}.")
    if has_mdl:
        text += (" MDL: Voita & Titov's online code (kbits) of the test split's attribute given its "
                 "representations")
        if "mdl_uniform" in ok.columns and ok["mdl_uniform"].notna().any():
            text += (f", beside {float(ok['mdl_uniform'].dropna().iloc[0]):.3f} kbits for the uniform code of the "
                     "same labels (an online code can exceed it: probes fitted on the first small blocks are "
                     "overconfident)")
        text += "."
    return text


def _pareto_summary(rows: pd.DataFrame, fairness: str, kinds: dict | None = None,
                    objectives: dict[str, str] | None = None) -> pd.DataFrame | None:
    """Per (dataset, method): Pareto-front size and normalised hypervolume, mean ± std over
    seeds; under ``objectives`` (a search's, ``rows`` its feasible ones) when given, else
    validation accuracy, the fairness gap and leakage."""
    searched = objectives is not None
    if not searched:
        objectives = {"valid_accuracy": "max", f"valid_{fairness}": "min"}
        if "leakage" in rows.columns and pd.to_numeric(rows["leakage"], errors="coerce").notna().any():
            objectives["leakage"] = "min"
    if searched:  # a search's objectives may leave percent (eps_formal, MDL): the reference point of its history
        reference, ideal = hypervolume_bounds(objectives)
        scale = float(np.prod([abs(i - w) for w, i in zip(reference, ideal)]))
    else:
        reference, scale = [_HV_REFERENCE[d] for d in objectives.values()], 100.0 ** len(objectives)
    ps = fronts_per_run(rows, objectives, reference).rename(columns={"hypervolume": "hv"})
    if ps.empty:
        return None
    ps["hv"] = ps["hv"] / scale
    agg = ps.groupby(["dataset", "method"], sort=True).agg(
        n_seeds=("seed", "nunique"), front_mean=("front", "mean"), front_std=("front", "std"),
        hv_mean=("hv", "mean"), hv_std=("hv", "std"),
    ).reset_index()
    names = {"valid_accuracy": "accuracy ↑", f"valid_{fairness}": f"{FAIRNESS_LABELS[fairness]} ↓", "leakage": "leakage ↓"}
    if searched:
        names = {c: f"{c} {'↑' if d == 'max' else '↓'}" for c, d in objectives.items()}
    objs = ", ".join(names[c] for c in objectives)
    return pd.DataFrame({
        "Dataset": agg["dataset"].astype(str),
        "Method": agg["method"].astype(str),
        GUARANTEE_LABEL: guarantee_cells(agg, kinds),
        "Seeds": [str(int(v)) for v in agg["n_seeds"]],
        "Front size": mean_std_column(agg["front_mean"], agg["front_std"]),
        f"Hypervolume ({objs})": mean_std_column(agg["hv_mean"], agg["hv_std"], 3),
    })


def _search_front_caption(objectives: dict[str, str], constraints: Sequence[str], feasible_rows: int,
                          rows: int) -> str:
    """The Pareto section's text when it draws a search's front: on its objectives, over the rows
    that meet its constraints (as its front file holds them)."""
    objs = ", ".join(f"{c} ({d})" for c, d in objectives.items())
    among = (f"only the {feasible_rows} of {rows} rows that meet its constraints ({'; '.join(map(str, constraints))})"
             if constraints else f"all {rows} rows (it has no constraints)")
    return (f"The search's Pareto fronts: per seed, the non-dominated configs under its objectives, {objs}, among "
            f"{among}, as its front file holds them; hypervolume is normalised to [0, 1] with each objective's "
            "worst possible value as reference point (accuracy 0 %, gaps and leakage 100 %, eps_formal 20), as the "
            "search's history is." + ("" if feasible_rows else " No row meets the constraints: there is no front."))


def _progress_table(progress: pd.DataFrame, kinds: dict | None = None) -> pd.DataFrame:
    """``search_progress`` as display strings, one row per (search, generation)."""
    out = pd.DataFrame({
        "Dataset": progress["dataset"].astype(str),
        "Method": progress["method"].astype(str),
        GUARANTEE_LABEL: guarantee_cells(progress, kinds),
        "Seed": progress["seed"].astype(str),
        "Constraints": [", ".join(json.loads(c)) or "-" for c in progress["constraints"]],
        "Trials": progress["trials"].astype(str),
        "Feasible": progress["feasible_trials"].astype(str),
        "Front": progress["front_size"].astype(str),
        "Hypervolume": [f"{v:.4f}" for v in progress["hypervolume"]],
    })
    if "grid_hypervolume" in progress.columns:
        out["Grid configs"] = progress["grid_configs"].astype(str)
        out["Grid hypervolume"] = [f"{v:.4f}" if pd.notna(v) else "-" for v in progress["grid_hypervolume"]]
        out["Ratio"] = [f"{v:.3f}" if pd.notna(v) else "-" for v in progress["ratio"]]
    return out


def _pruning_sentence(ok: pd.DataFrame) -> str:
    """How many configs a study's ``prune:`` stopped at each rung, per method; "" when none
    was (result sets from before pruning have no ``pruned_at`` column)."""
    if "pruned_at" not in ok.columns or not ok["pruned_at"].notna().any():
        return ""
    parts = []
    for (dataset, method), rows in ok.groupby(["dataset", "method"], sort=True):
        stopped = rows["pruned_at"].dropna().astype(int).value_counts().sort_index()
        if len(stopped):
            at = ", ".join(f"{n} after epoch {epoch}" for epoch, n in stopped.items())
            parts.append(f"{dataset}/{method}: {at}, of {len(rows)} rows")
    return ("Pruned inside packs (prune:): configs dominated on valid accuracy and the selection gap at a rung "
            "stopped there and report their best epoch up to it; " + "; ".join(parts) + ".")


def _guarantees_shown(table: pd.DataFrame) -> pd.DataFrame:
    """``table``'s ``guarantee`` column as cells: "not private" where null."""
    return table.assign(guarantee=[guarantee_text(k) for k in table["guarantee"]])


def _private_kinds(table: pd.DataFrame, kinds: dict | None) -> list[str]:
    """The distinct guarantee kinds of ``table``'s private methods, sorted."""
    found = kinds_of(table["method"].astype(str).unique(), kinds).values()
    return sorted({k for k in found if k is not None})


def _relations_sentence(table: pd.DataFrame, kinds: dict | None, what: str) -> str:
    """In which neighbouring relation ``table``'s private methods are compared (``what``: "ranked",
    "drawn"): converted to one where that is sound, apart where not; with what each kind assumes."""
    private = _private_kinds(table, kinds)
    if not private:
        return "no method here is private."
    known = {m: k for m, k in kinds_of(table["method"].astype(str).unique(), kinds).items() if k is not None}
    parts = relations_text(known)
    caveats = caveats_text(known)
    if len(private) == 1:
        text = f"every private method's is {private[0]}."
    elif len(parts) == 1:
        text = (f"the private methods' guarantees are of {len(private)} kinds, {what} in one relation after "
                f"sound conversions ({COMPARED_LABEL} where ε is a column; docs/methods.md, 'Comparing guarantees "
                f"of different kinds'): {parts[0]}.")
    else:
        text = (f"the private methods' guarantees are of {len(private)} kinds, {what} only within one relation, "
                f"converted where that is sound, apart where no relation follows from both ({DIFFERENT_GUARANTEES}): "
                + "; ".join(parts) + ".")
    return text + (f" {caveats}" if caveats else "")


def _kinds_sentence(table: pd.DataFrame, kinds: dict | None) -> str:
    """Whether ``table``'s private methods share one kind of guarantee, and in which relation
    their ε are drawn and compared where they do not."""
    return _relations_sentence(table, kinds, "drawn")


def _guarantee_sentence(agg: pd.DataFrame, by: Sequence[str], kinds: dict | None) -> str:
    """The main table's Guarantee column, and in which relation its methods are ranked (the ≈
    marks compare a method only with methods of its relation, at one ε of it where ε is a key)."""
    text = f"{GUARANTEE_LABEL}: what each method's ε protects (scope, neighbouring relation, unit); "
    return text + _relations_sentence(agg, kinds, "ranked (≈)")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _overview(df: pd.DataFrame, ok: pd.DataFrame, completeness: Completeness | None) -> list[tuple[str, str]]:
    def values(col: str) -> str:
        if col not in df.columns:
            return "-"
        return ", ".join(sorted({str(v) for v in df[col].dropna().unique()})) or "-"

    per_method = ok.groupby(["dataset", "method"], sort=True).agg(
        seeds=("seed", "nunique"), configs=("config_id", "nunique"), rows=("seed", "size")
    )
    runs = "; ".join(f"{d}/{m}: {_count(r.seeds, 'seed')} × {_count(r.configs, 'config')}"
                     for (d, m), r in per_method.iterrows())
    return [
        ("studies", values("study")),
        ("datasets", values("dataset")),
        ("methods", values("method")),
        ("rows", f"{len(ok)} ok, {len(df) - len(ok)} not ok (left out)"),
        ("runs", runs),
        *([("completeness", completeness.text)] if completeness is not None else []),
        ("fairdp versions", values("fairdp_version")),
    ]


def _unmeasured(agg: pd.DataFrame) -> list[str]:
    """The probe metrics (leakage, MDL) no selected row measured: their probe was off."""
    return [m for m in ("leakage", "mdl") if f"{m}_mean" in agg.columns and pd.to_numeric(
        agg[f"{m}_mean"], errors="coerce").isna().all()]


# the figures whose points are means over seeds, with error bars
_BARRED_FIGURES = ("rt_sweep", "fairness_accuracy_bins", "privacy_accuracy", "violation_accuracy_eps")


def _seed_bounds(table: pd.DataFrame | None, rows: pd.DataFrame, compute, keys: Sequence[str], error_bars: str,
                 level: float) -> pd.DataFrame | None:
    """``table`` (``compute(rows)``, means over seeds) with the bounds of a bootstrap over
    seeds where ``error_bars`` is ``bootstrap``: ``compute`` on each seed's rows gives the
    values the means average; ``compute(rows, notes)`` is handed a list to note into, since its
    notes repeat the full table's and are dropped."""
    if table is None or error_bars != "bootstrap" or table.empty:
        return table
    seeds = per_seed(lambda part: compute(part, []), rows)
    metrics = [c[: -len("_mean")] for c in table.columns if c.endswith("_mean")]
    return bootstrap_over_seeds(table, seeds, keys, metrics, level) if len(seeds) else table


def _error_bar_captions(drawn: dict, error_bars: str, level: float) -> dict[str, str]:
    """The captions of the figures with error bars, saying what the bars are."""
    return {name: f"{FIGURES[name]} ({error_bars_text(error_bars, level)})"
            for name in _BARRED_FIGURES if drawn.get(name) is not None}


@dataclass(frozen=True, eq=False)
class ReportOptions:
    """How ``write_report`` selects, compares, draws and writes: one value for every setting
    (``dataclasses.replace`` makes a variant). The defaults are ``fairdp report``'s."""

    rt: float = 1.0
    fairness: str = "tpr_gap"
    rts: tuple[float, ...] = (0, 0.5, 1, 2, 3, 5)
    by: tuple[str, ...] = ()
    ci: float | None = 95.0
    search_history: pd.DataFrame | None = None
    grid: pd.DataFrame | None = None
    compare: tuple[str, ...] = ()
    completeness: Completeness | None = None
    history: pd.DataFrame | None = None
    keep_constant: bool = False
    search_objectives: Mapping[str, str] | None = None
    search_constraints: tuple[str, ...] = ()
    selection: str | None = None
    error_bars: str = DEFAULT_ERROR_BARS
    figure_formats: tuple[str, ...] = ("png",)
    figure_style: str | os.PathLike | Mapping | None = None
    predictions: tuple[str | os.PathLike, ...] = ()
    figures: bool = True


def report_figures(df: pd.DataFrame, options: ReportOptions | None = None,
                   only: Collection[str] | None = None) -> dict:
    """The figures ``write_report(df, out_dir, options)`` saves, as matplotlib Figures by name
    ("rt_sweep", "pareto_fronts", ...; None where the report draws none), built by the same
    code from the same tables; nothing is written. For checking a report's figures
    (``fairdp.testing.figures.assert_readable``) without files. ``only``: just these figures
    (the others are not drawn)."""
    o, df = _checked(df, options)
    notes: list[str] = []
    with figure_style_context(o.figure_style):
        drawn = _draw_figures(df, _tables_of(df, o, notes), o, notes, only)
    _warn(notes)
    return {name: fig for name, fig in drawn.items() if only is None or name in only}


def _checked(df: pd.DataFrame, options: ReportOptions | None) -> tuple[ReportOptions, pd.DataFrame]:
    """``options`` with every setting checked (InputError naming it) and normalised, and the rows."""
    o = options if options is not None else ReportOptions()
    if not isinstance(o, ReportOptions):
        raise InputError(f"options: a ReportOptions, got {type(o).__name__}")
    df = as_frame(df)
    o = dataclasses.replace(
        o, error_bars=check_error_bars(o.error_bars), by=tuple(check_by(o.by, df)), fairness=check_fairness(o.fairness),
        rt=check_rt(o.rt), rts=tuple(check_rt(r, "rts") for r in o.rts),
        ci=check_level(o.ci, "ci") if o.ci is not None else None, figure_formats=check_figure_formats(o.figure_formats),
        compare=tuple(o.compare), search_constraints=tuple(o.search_constraints), predictions=tuple(o.predictions))
    if ok_rows(df).empty:
        raise InputError("df: no result rows with status 'ok' to report")
    return o, df


def _warn(notes: Sequence[str]) -> None:
    """The report's notes, each once, as warnings of the caller's call (the CLI prints them)."""
    for msg in notes:
        warnings.warn(msg, UserWarning, stacklevel=3)


@dataclass(frozen=True, eq=False)
class _Tables:
    """What a report shows, computed from its rows before anything is drawn or written."""

    ok: pd.DataFrame                 # the rows with status ok
    selected: pd.DataFrame           # the RT = rt picks
    agg: pd.DataFrame                # their means over seeds: the main table
    sweep: pd.DataFrame | None       # the same selection at each of rts
    view: pd.DataFrame               # the rows the per-run views read (each notion apart under notion_gap)
    bins: pd.DataFrame               # fairness-accuracy bins
    by_eps: pd.DataFrame | None      # privacy-accuracy per eps
    notions: pd.DataFrame | None     # violation and accuracy per (notion, eps)
    front_rows: Callable[[], pd.DataFrame]  # the rows the Pareto figure draws (filtered when it is)
    constant_off: int                # constant configs left off the fronts
    pareto: pd.DataFrame | None      # front sizes and hypervolumes
    progress: pd.DataFrame | None    # a search's hypervolume per generation
    curves: pd.DataFrame | None      # the selected configs' learning curves


def _pareto_rows(ok: pd.DataFrame, view: pd.DataFrame, fairness: str, keep_constant: bool,
                 search_objectives: dict[str, str] | None, search_constraints: Sequence[str],
                 ok_constant: np.ndarray, view_constant: np.ndarray,
                 columns: Sequence[str]) -> tuple[Callable[[], pd.DataFrame], pd.DataFrame]:
    """The rows the Pareto figure draws (a function: filtered only if the figure is drawn) and
    those its table summarises, narrowed to ``columns`` (what ``_pareto_summary`` reads) before
    they are filtered: a search's feasible rows under its objectives, else every row; constant
    configs (``ok_constant``, ``view_constant``: which rows of ``ok`` and ``view`` are,
    ``constant_models``) left out unless ``keep_constant``. Each filter of the whole rows copies
    every column: a gigabyte at a million rows."""
    if search_objectives:  # the search's front: its objectives, over the rows that meet its constraints
        searched = ok if keep_constant else ok[~ok_constant]
        rows = searched[feasible(searched, search_constraints)]
        return lambda: rows, rows
    source, constant = (ok, ok_constant) if fairness != NOTION_GAP else (view, view_constant)
    narrow = source[[c for c in dict.fromkeys(columns) if c in source.columns]]
    if keep_constant:
        return lambda: view, narrow
    # a constant model is on no front unless asked: its gaps are 0 for that reason alone
    return lambda: view[~view_constant], narrow[~constant]


def _pareto_columns(fairness: str) -> list[str]:
    """The columns ``_pareto_summary`` reads without a search's objectives."""
    return ["status", *RUN_KEYS, "valid_accuracy", f"valid_{fairness}", "leakage"]


def _pareto_figure(rows: pd.DataFrame, selected: pd.DataFrame, fairness: str,
                   search_objectives: dict[str, str] | None):
    """The Pareto figure of ``rows``, its limits set around the selected configs."""
    import fairdp.analysis._plots as plots  # matplotlib: only when a figure is drawn

    return plots.figure_pareto_fronts(rows, _figure_pairs(fairness, search_objectives),
                                      search_objectives,  # a search's directions
                                      focus=_picked_rows(rows, selected))


def _tables_of(df: pd.DataFrame, o: ReportOptions, notes: list[str],
               kinds: dict[str, str | None] | None = None) -> _Tables:
    """The selection, its aggregates and every other table the report shows; their notes (rows
    left out) appended to ``notes``; ``kinds``: ``guarantees_by_method`` of ``df`` where the
    caller has it."""
    ok = ok_rows(df)  # not a copy where every row is ok (a gigabyte at a million rows)
    rt, fairness, rts, by, keep_constant = o.rt, o.fairness, list(o.rts), list(o.by), o.keep_constant
    search_objectives, history = o.search_objectives, o.history
    kinds = guarantees_by_method(df) if kinds is None else kinds
    # each notion's own violation, expanded once for every selection below (a copy of every
    # row per notion: seconds at a million rows each time a selection made it)
    chosen_from = _per_notion_rows(ok, by) if fairness == NOTION_GAP else df
    # whether each row's model is constant, its counts parsed once (not again per notion)
    ok_constant = constant_models(ok).fillna(False).to_numpy(bool)
    # the main selection and the RT sweep from one ordering of the rows
    selected, swept, each_rt = selection_and_sweep(chosen_from, rt, rts, fairness, by, keep=[TEST_CONFUSION],
                                                   notes=notes)
    if fairness == NOTION_GAP:
        view_constant = ok_constant[chosen_from[_ROW].to_numpy()]
        selected, chosen_from = _whole_picks(selected, ok), chosen_from.drop(columns=_ROW)
    else:
        view_constant = ok_constant if len(ok) == len(df) else constant_models(df).fillna(False).to_numpy(bool)
    # each table counts the seeds whose pick is a constant model (marked, footnoted)
    agg = with_constant_picks(aggregate_seeds(selected, fairness=fairness, by=by), selected, by)
    sweep = with_constant_picks(swept, each_rt, [*by, "rt"]) if rts else None
    # the per-run views (bins, fronts) read each notion's own violation; a method's
    # notions are drawn apart ("pfld [dp]")
    view = _per_notion_view(chosen_from) if fairness == NOTION_GAP else df
    bins = fairness_accuracy_bins(view, fairness, notes=notes)
    by_eps = privacy_accuracy_by_eps(df, fairness if fairness != NOTION_GAP else "dp_gap", notes=notes) \
        if "eps" in df.columns else None
    notions = None
    if ({"fairness_notion", "eps"} <= set(df.columns) and ok["fairness_notion"].notna().any()
            and pd.to_numeric(ok["eps"], errors="coerce").notna().any()):
        if fairness == NOTION_GAP and by == ["fairness_notion", "eps"] and is_numeric_dtype(df["eps"]):
            # the main selection is that table's: each notion on its own violation at each eps
            notions = aggregate_seeds(selected, [f"test_{NOTION_GAP}", "test_accuracy"], NOTION_GAP, by)
        else:  # each notion's violation expanded once (above) where it was
            notions = violation_accuracy_by_eps(chosen_from if fairness == NOTION_GAP else df, rt, notes=notes)
    front_rows, pareto_rows = _pareto_rows(ok, view, fairness, keep_constant, search_objectives, o.search_constraints,
                                           ok_constant, view_constant, _pareto_columns(fairness))
    constant_off = 0 if keep_constant else int(ok_constant.sum())
    pareto = _pareto_summary(pareto_rows, fairness, kinds, search_objectives)
    progress = search_progress(o.search_history, o.grid) if o.search_history is not None else None
    curves = selected_curves(history, selected, fairness) if history is not None and len(history) else None
    return _Tables(ok, selected, agg, sweep, view, bins, by_eps, notions, front_rows, constant_off, pareto, progress,
                   curves)


def _picked_rows(rows: pd.DataFrame, selected: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``rows`` (the rows, or a per-notion view labelled "pfld [dp]") whose config a
    selection picked, under the notion it was picked for where there is one: the Pareto
    figure's limits are set around them."""
    notions = "fairness_notion" in rows.columns and "fairness_notion" in selected.columns
    wanted = selected["fairness_notion"] if notions else pd.Series(None, index=selected.index, dtype=object)
    picked = {key: (n if pd.notna(n) else None) for key, n in zip(config_keys(selected), wanted)}
    base = rows["method"].astype(str).str.replace(r" \[[^\]]*\]$", "", regex=True)
    row_notion = rows["fairness_notion"] if notions else pd.Series(None, index=rows.index, dtype=object)
    hit = [key in picked and (picked[key] is None or picked[key] == n)
           for key, n in zip(config_keys(rows, base), row_notion)]
    return rows[np.asarray(hit, dtype=bool)]


def _figure_pairs(fairness: str, search_objectives: dict[str, str] | None) -> list[tuple[str, str]]:
    """The pairs of objectives the Pareto figure draws: a search's, else accuracy, the gap, leakage."""
    if search_objectives:
        names = list(search_objectives)
        return [(x, y) for i, x in enumerate(names) for y in names[i + 1:]]
    return [("valid_accuracy", f"valid_{fairness}"), ("valid_accuracy", "leakage"), (f"valid_{fairness}", "leakage")]


def _draw_figures(df: pd.DataFrame, t: _Tables, o: ReportOptions, notes: list[str],
                  only: Collection[str] | None = None) -> dict:
    """Every figure of the report by name (None where it draws none), not yet saved, their notes
    (intervals over few seeds) appended to ``notes``; ``only``: just these (the others are not
    drawn: None)."""
    if only is not None and not len(only):  # nothing drawn: matplotlib is not even imported
        return dict.fromkeys(FIGURES)
    import fairdp.analysis._plots as plots  # matplotlib: only when a figure is drawn

    rt, fairness, rts, by, search_objectives = o.rt, o.fairness, list(o.rts), list(o.by), o.search_objectives
    bars = {"error_bars": o.error_bars, "level": o.ci if o.ci is not None else 95.0}
    drawn = {**bars, "notes": notes}
    eps_fairness = fairness if fairness != NOTION_GAP else "dp_gap"
    drawers = {
        "rt_sweep": lambda: (plots.figure_rt_sweep(_seed_bounds(
            t.sweep, df, lambda rows, seen: rt_sweep(rows, rts, fairness, by=by, notes=seen),
            ["dataset", "method", *by, "rt"], **bars), fairness, by, **drawn) if t.sweep is not None else None),
        "violation_accuracy_eps": lambda: (plots.figure_violation_accuracy_by_eps(_seed_bounds(
            t.notions, df, lambda rows, seen: violation_accuracy_by_eps(rows, rt, notes=seen),
            ["dataset", "method", "fairness_notion", "eps"], **bars), **drawn) if t.notions is not None else None),
        "fairness_accuracy_bins": lambda: plots.figure_fairness_accuracy_bins(_seed_bounds(
            t.bins, t.view, lambda rows, seen: fairness_accuracy_bins(rows, fairness, notes=seen),
            ["dataset", "method", "accuracy_bin"], **bars), fairness, **drawn),
        "privacy_accuracy": lambda: (plots.figure_privacy_accuracy(_seed_bounds(
            t.by_eps, df, lambda rows, seen: privacy_accuracy_by_eps(rows, eps_fairness, notes=seen),
            ["dataset", "method", "eps"], **bars), **drawn) if t.by_eps is not None else None),
        "leakage_vs_eps": lambda: plots.figure_leakage_vs_eps(df) if {"eps", "leakage"} <= set(df.columns) else None,
        "pareto_fronts": lambda: _pareto_figure(t.front_rows(), t.selected, fairness, search_objectives),
        "hypervolume_history": lambda: plots.figure_hypervolume_history(t.progress) if t.progress is not None else None,
        "learning_curves": lambda: (plots.figure_learning_curves(t.curves, fairness,
                                                           f"Validation curves of the configs selected at RT = {rt:g}")
                                    if t.curves is not None else None),
    }
    return {name: draw() if only is None or name in only else None for name, draw in drawers.items()}


FIGURE_FORMATS = ("png", "pdf", "svg")
"""The formats a figure is saved in (``--figure-format``)."""


def check_figure_formats(formats) -> tuple[str, ...]:
    """The formats asked for, PNG first (the report shows it); InputError naming an unknown one."""
    if isinstance(formats, str):
        formats = [f.strip() for f in formats.split(",") if f.strip()]
    formats = [str(f).lower().lstrip(".") for f in formats]
    bad = [f for f in formats if f not in FIGURE_FORMATS]
    if bad or not formats:
        raise InputError(f"figure_formats: expected some of {', '.join(FIGURE_FORMATS)}, got "
                         f"{', '.join(bad) if bad else 'none'}")
    return tuple(dict.fromkeys(["png", *formats]))


def figure_style_context(style):
    """A context drawing figures under ``style``: a matplotlib style name or ``.mplstyle``
    file, or rcParams (a mapping); None: fairdp's own. InputError naming what is wrong."""
    if style is None:
        return contextlib.nullcontext()
    import matplotlib as mpl
    import matplotlib.style  # noqa: F401  (mpl.style is a submodule: imported on its own)

    if isinstance(style, Mapping):
        unknown = [k for k in style if k not in mpl.rcParams]
        if unknown:
            raise InputError(f"figure_style: {unknown[0]!r} is not a matplotlib rcParam")
        try:
            return mpl.rc_context(dict(style))
        except (ValueError, TypeError) as e:
            raise InputError(f"figure_style: {e}") from None
    name = os.fspath(style)
    if not (name in mpl.style.available or Path(name).is_file()):
        raise InputError(f"figure_style: {name}: no such style file or matplotlib style")
    try:
        return mpl.style.context(name)
    except (OSError, ValueError) as e:
        raise InputError(f"figure_style: {name}: {e}") from None


def _save_figures(drawn: dict, fig_dir: Path, formats: Sequence[str] = ("png",)) -> dict[str, Path | None]:
    """Save the figures drawn as ``fig_dir/<name>.png`` (and each other format); remove the
    files of each figure not drawn (a previous report's), so the folder matches the report."""
    fig_dir.mkdir(parents=True, exist_ok=True)
    if any(fig is not None for fig in drawn.values()):
        import fairdp.analysis._plots as plots  # matplotlib only where a figure was drawn
    figures = {}
    for name, fig in drawn.items():
        figures[name] = None if fig is None else plots.save_figure(fig, fig_dir / f"{name}.png")
        for f in FIGURE_FORMATS:
            path = fig_dir / f"{name}.{f}"
            if fig is None or f not in formats:
                path.unlink(missing_ok=True)
            elif f != "png":
                plots.save_figure(fig, path)
    return figures


def _interval_metrics(agg: pd.DataFrame) -> list[str]:
    """The metrics of the main table (its ``<metric>_mean`` columns)."""
    return [c[: -len("_mean")] for c in agg.columns if c.endswith("_mean")]


def _main_table(agg: pd.DataFrame, by: Sequence[str], ci: float | None,
                keep_constant: bool, deltas: dict | None = None) -> tuple[pd.DataFrame, dict | None]:
    """The main table as shown, and its ≈ marks: the probes that were off dropped; with ``eps``
    a key and some method's ε converted to the relation it is ranked in, that ε and δ
    (``with_compared_eps``, δ from ``deltas`` by method); and with ``ci`` each mean's
    t-interval over seeds and the cells whose interval overlaps the best's of its relation."""
    # a probe that was off (leakage, MDL) is no column and no comparison, rather than "-" and "?"
    agg = agg.drop(columns=[c for m in _unmeasured(agg) for c in agg.columns if c.startswith(f"{m}_")])
    if "eps" in by:
        compared = with_compared_eps(agg, deltas=deltas)
        if converted_methods(compared):
            agg = compared
    if ci is None:
        return agg, None
    agg = seed_intervals(agg, ci)
    group = ["dataset", *by]
    return agg, {m: not_distinguishable(agg, m, default_direction(m), group, keep_constant)
                 for m in _interval_metrics(agg)}


def _own_violation(fairness: str) -> str:
    """What the fairness gap is under ``notion_gap`` (each notion's own violation), else ""."""
    return " (each notion's own violation: DP-gap for dp, EO-gap for eo, AP-gap for ap; methods without a " \
           "notion repeated under each)" if fairness == NOTION_GAP else ""


def _per_by(by: Sequence[str]) -> str:
    """The ``by`` columns as they follow a group's other keys in a caption (", eps")."""
    return "".join(f", {k}" for k in by)


_Section = tuple[str, str, list[Item]]  # title, caption, items


def _whole_table_sentence(whole: pd.DataFrame | None) -> str:
    """What releasing the whole table costs, per dataset and kind over every seed, as a sentence."""
    if whole is None or not len(whole):
        return ""
    def eps(v: float) -> str:  # 1,467 beside 0.476: whole numbers where they are large
        return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"

    costs = [f"ε {eps(r['ε, all seeds'])} at δ {r['δ']:g} ({r['guarantee']}: {r['methods']} on {r['dataset']}, "
             f"{r['seeds']} seeds)" for _, r in whole.iterrows() if pd.notna(r["ε, all seeds"])]
    return (" Releasing this whole table at once, every config of every seed trained on the same data, costs "
            + "; ".join(costs) + " (What a selection releases).") if costs else ""


def _results_section(df: pd.DataFrame, ok: pd.DataFrame, agg: pd.DataFrame, rt: float, fairness: str,
                     by: Sequence[str], ci: float | None, kinds: dict, whole: pd.DataFrame | None = None) -> _Section:
    """The main table: the RT selection's test metrics, mean ± std over seeds."""
    studies = sorted(ok["study"].dropna().astype(str).unique()) if "study" in ok.columns else []
    pooled = (f"Rows of the studies {', '.join(studies)}, pooled: each selection below chooses among the configs of "
              f"all of them. ") if len(studies) > 1 else ""
    return (
        f"Test results at RT = {rt:g}",
        pooled + f"Per (dataset, method, seed{_per_by(by)}) the config with the lowest validation "
        f"{FAIRNESS_LABELS[fairness]}{_own_violation(fairness)} among those "
        f"within RT = {rt:g} accuracy points of the best validation accuracy (FEDERATE sec. 5.1), "
        "then mean ± sample std (ddof=1) over seeds of its test metrics (FEDERATE Table 1 layout)"
        + (f", [the {ci:g}% t-interval of the mean over seeds]; ≈ marks a method whose interval overlaps the "
           "best method's in that column, a difference from the best that the intervals do not support. "
           if ci is not None else ". ")
        + _guarantee_sentence(agg, by, kinds)
        + (" What releasing these means over seeds costs: 'What a selection releases' below."
           if has_release_events(df) else "") + _whole_table_sentence(whole)
        + " " + _probe_sentence(ok) + (" " + _pruning_sentence(ok) if _pruning_sentence(ok) else "")
        + (" " + _advice(agg, ci) if _advice(agg, ci) else ""),
        [("table", agg)],
    )


def _advice(agg: pd.DataFrame, ci: float | None) -> str:
    """The seeds a ± 1 point interval of each main-table metric would need (``seed_advice_text``);
    none in a report without intervals (``ci`` None)."""
    text = seed_advice_text(agg, 1.0, ci) if ci is not None else ""
    return text[0].upper() + text[1:] + "." if text else ""


def _paper_sections(df: pd.DataFrame, compare: Sequence[str]) -> list[tuple[_Section, pd.DataFrame]]:
    """One section per published table named in ``compare``, beside the study's values, each with
    its claims summed up (``comparison_section``'s third value)."""
    sections = []
    for name in compare:
        caption, tables, summary = comparison_section(df, get_paper(name))
        sections.append(((f"Compared with the paper: {name}", caption, [("display", t) for t in tables]), summary))
    return sections


SELECTED_LISTED = 500
"""The most picks the selected-configurations table lists: past it, the picks of the lowest
seeds, as many seeds as fit (one at least); ``fairdp analyze --selected`` lists every pick."""


def _first_seeds(selected: pd.DataFrame, limit: int = SELECTED_LISTED) -> tuple[pd.DataFrame, str]:
    """``selected`` cut to the picks of its lowest seeds, as many seeds as fit in ``limit``
    rows (one seed at least), and a sentence saying so ("" when every pick fits)."""
    if len(selected) <= limit:
        return selected, ""
    per_seed = selected.groupby("seed", sort=True).size()
    fits = max(1, int((per_seed.cumsum() <= limit).sum()))
    seeds = per_seed.index[:fits]
    shown = selected[selected["seed"].isin(seeds)]
    which = f"seed {seeds[0]}" if fits == 1 else f"seeds {seeds[0]}-{seeds[-1]}" if \
        list(seeds) == list(range(int(seeds[0]), int(seeds[0]) + fits)) else f"the lowest {fits} seeds"
    return shown, (f" Listed: the picks of {which}, {len(shown):,} of the {len(selected):,} picks (at most "
                   f"{limit:,} are listed); fairdp analyze --selected lists every one.")


def _selected_section(selected: pd.DataFrame, agg: pd.DataFrame, rt: float, fairness: str,
                      ci: float | None) -> _Section:
    """The config each run's selection picked, its hyperparameters and metrics: every pick, or
    past ``SELECTED_LISTED`` those of the lowest seeds (a table of a hundred thousand picks is
    read by no one, and each listed pick's bootstrap interval costs a thousand resamples)."""
    listed, cut = _first_seeds(selected)
    shown = display_strings(_guarantees_shown(mark_constant_picks(
        selected_with_intervals(listed, selected_configs(listed, fairness), fairness, ci)
        if ci is not None else selected_configs(listed, fairness), listed)))
    shown, fixed = _without_fixed_settings(shown, hyperparameter_columns(listed))
    return (
        "Selected configurations",
        f"The config RT = {rt:g} selection picked in each run, with its hyperparameters and its validation "
        "and test metrics (percent)" + (f"; constant: the pick is a constant model, which {CONSTANT_SENTENCE}"
                                        if CONSTANT_PICKS in agg.columns else "") + "." + fixed + cut,
        [("display", shown)],
    )


def _without_fixed_settings(shown: pd.DataFrame, hyperparameters: Sequence[str]) -> tuple[pd.DataFrame, str]:
    """``shown`` (``selected_configs`` as display strings) without the ``hyperparameters``
    columns that hold one value in every pick that has them (a method's fixed setting, not a
    choice: pooled methods' fixed settings would otherwise widen the table past the page), and
    a sentence that names each such setting, its value and the methods that have it."""
    fixed = [c for c in hyperparameters if c in shown.columns and shown[c][shown[c] != "-"].nunique() == 1]
    if not fixed:
        return shown, ""
    said = []
    for c in fixed:
        has = shown[c] != "-"
        methods = sorted(shown.loc[has, "method"].unique()) if "method" in shown.columns else []
        everyone = bool(has.all())
        said.append(f"{c} {shown.loc[has, c].iloc[0]}" + ("" if everyone or not methods else f" ({', '.join(methods)})"))
    return shown.drop(columns=fixed), f" The same in every pick that has it, so not listed: {'; '.join(said)}."


def _learning_curves_section(figure: Path | None, fairness: str) -> _Section | None:
    """The selected configs' validation curves, where the rows' history drew them."""
    if figure is None:
        return None
    return (
        "Learning curves",
        f"Each selected config's validation accuracy, {FAIRNESS_LABELS[fairness]}{_own_violation(fairness)} and "
        "cross-entropy after every epoch, one "
        "line per seed; the marker is the epoch whose model its row reports (the best validation accuracy, "
        "or the last epoch for methods that return it). A private representation is drawn afresh at every "
        "evaluation, so a DP method's row can differ from its curve at that epoch by one draw's noise. The "
        "curves of every config are in the results' side table <results>.history (fairdp.read_history).",
        [("figure", "learning_curves")])


def _release_section(df: pd.DataFrame, selected: pd.DataFrame, rt: float, by: Sequence[str],
                     whole: pd.DataFrame | None = None) -> _Section | None:
    """What releasing a selection costs in ε, where the rows record their accountant's events,
    and what releasing the whole table does (``whole``: ``whole_table_release`` of the rows)."""
    if not has_release_events(df):
        return None
    whole = whole_table_release(df) if whole is None else whole
    _, summary = selection_release(df, selected, rt, by)
    return (
        "What a selection releases",
        "ε of one config is the largest guarantee (eps_formal) of the configs selected: the ε the method's "
        "analysis gives the config as trained, e.g. the accountant's ε at the noise calibrated for the grid's "
        "eps, which calibration leaves at or just below that target (the smallest noise that meets it): a "
        "figure a little under the grid's eps is the config's exact ε, not a rounding. The selection looked at every config its run "
        "trained, so releasing one seed's pick is (ε, δ)-DP for the training data by the bound named (bound, "
        "one seed: composition of every config trained, or Papernot & Steinke's repeat-and-select when the "
        f"study drew a random number of trials and selects a best-of, rt = 0); '{PER_SEED}' is the largest of "
        "these over the seeds, a release of one seed's model alone. The tables above report means over seeds, "
        "which release every seed's pick at once, each selected on the same data: "
        f"'{MEAN_OVER_SEEDS}' composes them (RDP composition of every config trained in every seed the mean "
        "uses, the sum of their ε for pure-DP rows where that is smaller, or the seeds' repeat-and-select "
        f"RDP summed), the cost of the mean. Each ε is of its row's guarantee kind. "
        f"{NOT_COVERED[0].upper()}{NOT_COVERED[1:]}. Not covered either: local guarantees per representation "
        "(no accountant event). The second table is what releasing the whole report costs, every pick of every "
        "by-value and every point of every figure at once: per dataset and guarantee kind (kinds composed apart, "
        "each in its own relation), the composition of every config trained, RDP's as above, over one seed's "
        "configs (the largest over seeds) and over every seed's, the same data.",
        [("display", display_strings(summary)),
         ("display", display_strings(whole))],
    )


def _positive_rates_section(selected: pd.DataFrame, by: Sequence[str], kinds: dict) -> _Section | None:
    """The percent of test rows the selected models predict positive, beside the labels' rate."""
    rates = positive_rates(selected, by)
    if not len(rates):
        return None
    return (
        "Positive rate of the selected models",
        "Per (dataset, method" + _per_by(by) + ") the percent of test rows the selected models predict positive "
        "(class 1), mean ± std over seeds, beside the labels' own rate; 'constant' counts the seeds whose model "
        f"predicts one class for all but {CONSTANT_RATE:g}% of the rows, whose fairness gaps are then 0 for "
        "that reason alone.",
        [("display", _rates_table(rates, by, kinds))],
    )


def _group_rates_section(selected: pd.DataFrame, by: Sequence[str], kinds: dict) -> _Section | None:
    """The selected models' test rates per group, where the rows store their counts."""
    group_rates = aggregate_group_rates(selected, "test", by)
    if not len(group_rates):
        return None
    return (
        "Per-group rates of the selected models",
        "Per (dataset, method" + _per_by(by) + ", group) the selected models' test selection rate, TPR, FPR and "
        "accuracy (percent; binary tasks: of the positive class), computed from each row's stored counts "
        "(test_confusion) as fairlearn's MetricFrame by_group would from its predictions, then mean ± std over "
        "seeds; Rows is the group's size. The gaps above are the spreads of these rates over the groups. "
        "Groups are the dataset's codes, 0 to G-1 in the order of its group_names.",
        [("display", group_rates_table(group_rates, by, kinds))],
    )


def _small_groups_section(selected: pd.DataFrame) -> _Section | None:
    """The groups too small to estimate a rate of, on the valid or test split, where any is."""
    small = groups_too_small(selected)
    if not len(small):
        return None
    return (
        "Groups too small to estimate",
        "Groups whose rows of a rate's conditioning set (all its rows: selection rate and accuracy; its rows "
        "of the class: TPR; its rows of other classes: FPR) number fewer than the study's evaluate.min_group_count "
        "(Fewest) on a split, in the seeds counted: their rate is left out of every gap the rows report and of "
        "the per-group rates above (shown as -), so that a rate of a handful of rows, mostly sampling noise, "
        "decides no max-gap. Rows is the set's size, a range where the seeds' splits differ. A gap with fewer "
        "than two groups left is NaN. Lower evaluate.min_group_count to estimate them anyway, or merge groups.",
        [("display", small_groups_table(small))],
    )


def _differences_section(agg: pd.DataFrame, fairness: str, by: Sequence[str], ci: float | None,
                         keep_constant: bool) -> _Section | None:
    """Which pairwise differences between methods the t-intervals support, per test metric;
    None without intervals or without a method of two seeds."""
    if ci is None or not (agg["n_seeds"] >= 2).any():
        return None
    group = ["dataset", *by]
    differences = [(f"{_metric_title(m, fairness)}", supported_differences(agg, m, group, keep_constant=keep_constant))
                   for m in _interval_metrics(agg)]
    constant_left = sorted({f"{r['method']} on {r['dataset']}" for (_, r), flag in
                            zip(agg.iterrows(), constant_rows(agg)) if flag}) if not keep_constant else []
    crossed = any(t[c].astype(str).str.endswith(CROSS_KIND).any() for _, t in differences
                  for c in t.columns if c not in (*group, "method", "guarantee", COMPARED_IN, "stated eps"))
    return (
        "Differences the intervals support",
        f"For each test metric, each pair of methods: < or > where their {ci:g}% t-intervals over seeds do not "
        "overlap (the row method's mean is lower or higher), ≈ where they do (the difference is not "
        "supported), ? where a method has a single seed or no value of the metric (a baseline without a representation has no leakage)."
        + f" Methods are paired only within one neighbouring relation ({COMPARED_IN}): guarantees of kinds "
        "with no sound common relation are never paired"
        + (", and ε is the ε of that relation, a converted method's stated eps beside it" if "eps" in by else "")
        + "."
        + (f" {CROSS_KIND.strip()} marks a pair whose guarantees differ in kind (the guarantee column), compared "
           f"after converting both to {COMPARED_IN}." if crossed else "")
        + (f" Left out, their pick being a constant model in some seed ({CONSTANT_MARK.strip()} in the tables): "
           f"{', '.join(constant_left)}." if constant_left else ""),
        [("subtable", d) for d in differences],
    )


def _rt_sweep_section(sweep: pd.DataFrame | None, fairness: str, by: Sequence[str], kinds: dict) -> _Section | None:
    """The selection at each RT of the sweep: its figure and a table per method."""
    if sweep is None:
        return None
    return ("Relaxation-threshold sweep",
            "The same selection for each RT (FEDERATE Fig. 2, Tables 4-6): one figure of the validation "
            "metrics the selection reads (valid accuracy, valid fairness gap, leakage), then a table per "
            "method with its test metrics (mean ± std over seeds) at each RT: the figure and the tables "
            "show different splits.",
            [("figure", "rt_sweep"),
             *(("subtable", t) for t in sweep_tables(sweep, fairness, by=by, kinds=kinds))])


def _fairness_accuracy_section(fairness: str) -> _Section:
    """The best validation fairness per 1-point validation-accuracy interval (always drawn)."""
    return ("Fairness-accuracy trade-off",
            "Validation accuracy in 1-point intervals centred on integers ([71.5, 72.5) → 72); the best "
            f"validation {FAIRNESS_LABELS[fairness]} per interval and seed, averaged over the seeds that reached it. "
            "Missing points are intervals no config reached.",
            [("figure", "fairness_accuracy_bins")])


def _notions_section(notions: pd.DataFrame | None, figure: Path | None, rt: float) -> _Section | None:
    """Test violation and accuracy against ε per fairness notion, where the rows have both."""
    if notions is None or figure is None:
        return None
    return ("Fairness notions against ε",
            f"Per (method, fairness notion, ε) the RT = {rt:g} selection on the notion's own validation "
            "violation, then test violation and accuracy, mean ± std over seeds (Tran et al. Figures 1-2). "
            "Methods without ε are dashed levels.",
            [("figure", "violation_accuracy_eps"), ("display", _notion_table(notions))])


def _privacy_accuracy_section(by_eps: pd.DataFrame | None, kinds: dict) -> _Section | None:
    """The best-accuracy config per ε, where methods have ε."""
    if by_eps is None or by_eps.empty:
        return None
    return ("Privacy-accuracy trade-off",
            "Per ε and seed the config with the best validation accuracy (RT = 0), mean ± std over seeds. "
            "Each ε is of its method's guarantee kind (Guarantee): " + _kinds_sentence(by_eps, kinds)
            + f" formal ε is one config's guarantee; {NOT_COVERED}.",
            [("figure", "privacy_accuracy"), ("display", _eps_table(by_eps, 1, kinds)),
             ("figure", "leakage_vs_eps")])


def _pareto_section(pareto: pd.DataFrame | None, ok: pd.DataFrame, search_objectives: dict[str, str] | None,
                    search_constraints: Sequence[str], constant_off: int) -> _Section | None:
    """The Pareto fronts and their sizes and hypervolumes: a search's, over its feasible rows,
    or on the validation objectives."""
    if pareto is None and not search_objectives:
        return None
    return ("Pareto fronts",
            (_search_front_caption(search_objectives, search_constraints,
                                   int(feasible(ok, search_constraints).sum()), len(ok))
             if search_objectives else
             "Per seed, the non-dominated configs under validation objectives; hypervolume is "
             "normalised to [0, 1] with the worst possible values (accuracy 0 %, gaps and leakage 100 %) "
             "as reference point.")
            + PARETO_CAVEAT
            + (f" {constant_off} configs whose model is constant (it {CONSTANT_SENTENCE}) are left out "
               "(fairdp report --keep-constant, or write_report(keep_constant=True), keeps them)." if constant_off else ""),
            [("figure", "pareto_fronts"), *([("display", pareto)] if pareto is not None else [])])


def _search_progress_section(progress: pd.DataFrame | None, kinds: dict) -> _Section | None:
    """Each search's feasible front and its hypervolume per generation (against a grid's)."""
    if progress is None or progress.empty:
        return None
    return ("Search progress",
            "Per search, after every generation (population trials), the feasible trials (those meeting "
            "the search's constraints), its feasible front and that front's hypervolume, normalised with "
            "the same worst-value reference point (eps_formal: 20); with a grid, the hypervolume of the "
            "grid's feasible front under the same objectives and constraints, and the ratio.",
            [("figure", "hypervolume_history"), ("display", _progress_table(progress, kinds))])


def _report_overview(df: pd.DataFrame, ok: pd.DataFrame, completeness: Completeness | None, selection: str | None,
                     kinds: dict) -> list[tuple[str, str]]:
    """The overview's (key, value) lines, with the selection used and each method's guarantee."""
    overview = _overview(df, ok, completeness)
    if selection:
        overview.insert(len(overview) - 1, ("selection", selection.removeprefix("selection: ")))
    at = next(i for i, (k, _) in enumerate(overview) if k == "methods") + 1
    overview.insert(at, ("guarantees", "; ".join(f"{m}: {guarantee_text(kinds.get(m))}"
                                                 for m in sorted(ok["method"].astype(str).unique()))))
    return overview


def _report_captions(drawn: dict, error_bars: str, level: float, progress: pd.DataFrame | None,
                     search_objectives: dict[str, str] | None) -> dict[str, str]:
    """Each figure's caption: what its bars are, a grid's front where drawn, a search's objectives."""
    captions = dict(FIGURES)
    captions.update(_error_bar_captions(drawn, error_bars, level))
    if progress is not None and "grid_hypervolume" in progress.columns and progress["grid_hypervolume"].notna().any():
        captions["hypervolume_history"] += " (dashed: the grid's front)"  # drawn only with a grid to compare
    if search_objectives:
        captions["pareto_fronts"] = ("Pareto fronts of the search's objectives over the rows that meet its "
                                     "constraints (all seeds pooled)")
    return captions


def _partial_warning(completeness: Completeness | None) -> str | None:
    """The warning above every table when the rows are not the whole study."""
    return (f"{completeness.text[0].upper()}{completeness.text[1:]}."
            if completeness is not None and completeness.is_partial else None)


# --- the first page and the pages it links ------------------------------------------------------

HEADLINE_FIGURES = ("violation_accuracy_eps", "pareto_fronts", "fairness_accuracy_bins", "privacy_accuracy", "rt_sweep")
"""The first page's figure: the first of these the report drew (Tran et al.'s figure for a
study over notions and several ε, else the fronts, else FEDERATE's)."""


def _page_slugs(titles: Sequence[str]) -> list[str]:
    """Each page's file name: its title in lower case, words joined by "-", unique."""
    seen: dict[str, int] = {}
    out = []
    for title in titles:
        slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"
        seen[slug] = seen.get(slug, 0) + 1
        out.append(slug if seen[slug] == 1 else f"{slug}-{seen[slug]}")
    return out


def _section_tables(items: Sequence[Item], fairness: str, by: Sequence[str]) -> list[str]:
    """Every table of a section as CSV: the main table's raw aggregate, the others as shown."""
    out = []
    for kind, item in items:
        if kind == "table":
            out.append(format_table(item, "csv", fairness, by=by))
        elif kind in ("display", "subtable"):
            frame = item if kind == "display" else item[1].assign(**{"Table": item[0]})
            out.append(frame.to_csv(index=False, lineterminator="\n"))
    return out


def _compact_table(agg: pd.DataFrame, by: Sequence[str], fairness: str, marks: dict | None,
                   kinds: dict) -> pd.DataFrame:
    """The main table as the first page shows it: mean ± std with its ≈ marks (the intervals and
    each method's guarantee are on the full table's page), one dataset column only where there
    are several, and with ``fairness_notion`` a key, each notion's metrics side by side."""
    shown = _display(agg.drop(columns=[c for c in agg.columns if c.endswith(("_lo", "_hi"))]), fairness, 1,
                     by=by, marks=marks, kinds=kinds).drop(columns=[GUARANTEE_LABEL])
    if shown["Dataset"].nunique() == 1:
        shown = shown.drop(columns=["Dataset"])
    notion = BY_LABELS["fairness_notion"]
    if notion not in shown.columns or shown[notion].nunique() < 2:
        return _without_constant_keys(shown)
    metrics = [c for c in shown.columns if c.endswith((" ↑", " ↓"))]
    keys = [c for c in shown.columns if c not in metrics and c != notion]
    notions = sorted(n for n in shown[notion].unique() if n != "-")
    rows: dict[tuple, dict] = {}
    for r in shown.to_dict("records"):
        # a pick constant under one notion only: its mark goes on that notion's cells, not on the row
        constant = r["Method"].endswith(CONSTANT_MARK)
        r["Method"] = r["Method"].removesuffix(CONSTANT_MARK)
        row = rows.setdefault(tuple(r[k] for k in keys), {k: r[k] for k in keys})
        for n in (notions if r[notion] == "-" else [r[notion]]):  # a method without notions: under each
            for m in metrics:
                row[f"{n}: {m}"] = r[m] + (CONSTANT_MARK if constant and m == metrics[0] else "")
    out = pd.DataFrame(list(rows.values()))
    columns = keys + [f"{n}: {m}" for n in notions for m in metrics]
    return _without_constant_keys(out.reindex(columns=columns).fillna("-"))


def _without_constant_keys(shown: pd.DataFrame) -> pd.DataFrame:
    """``shown`` without the key columns that hold one value in every row of a long table (a
    sensitivity study's one ε, its seeds), said once in the table's ``attrs["same"]`` instead."""
    if len(shown) <= FIRST_PAGE_ROWS:
        return shown
    keys = [c for c in shown.columns if not c.endswith((" ↑", " ↓"))]
    same = [c for c in keys if shown[c].nunique() == 1]
    out = shown.drop(columns=same)
    out.attrs["same"] = ", ".join(f"{c} {shown[c].iloc[0]}" for c in same)
    return out


FIRST_PAGE_ROWS = 40
"""A first-page table longer than this drops its constant key columns and is laid out in two
halves side by side in HTML, or, wider than ``HALVES_MAX_COLUMNS``, left to its own page, so
that the page still reads in three screens."""


def _study_paragraph(df: pd.DataFrame, ok: pd.DataFrame, completeness: Completeness | None,
                     selection: str | None, rt: float, fairness: str, by: Sequence[str]) -> str:
    """The study in one paragraph: what ran on what, how completely, and how configs are picked."""
    studies = sorted(ok["study"].dropna().astype(str).unique()) if "study" in ok.columns else []
    datasets = sorted(ok["dataset"].astype(str).unique())
    runs = ok.groupby("method", sort=True).agg(seeds=("seed", "nunique"), configs=("config_id", "nunique"))
    methods = ", ".join(f"{m} ({_count(int(r.configs), 'config')})" for m, r in runs.iterrows())
    seeds = sorted({int(v) for v in runs["seeds"]})
    text = (f"{'Studies ' + ', '.join(studies) if len(studies) > 1 else 'Study ' + studies[0] if studies else 'Rows'} "
            f"on {', '.join(datasets)}: {methods}, {'/'.join(map(str, seeds))} seed{'' if seeds == [1] else 's'} "
            f"each; {len(ok):,} rows ok"
            + (f", {len(df) - len(ok):,} not ok (left out)" if len(df) > len(ok) else "") + ". ")
    if completeness is not None:
        text += completeness.text[0].upper() + completeness.text[1:] + ". "
    text += (f"Each run's pick: the config with the lowest validation {FAIRNESS_LABELS[fairness]} within RT = "
             f"{rt:g} accuracy points of the best validation accuracy (FEDERATE sec. 5.1), per (dataset, method, "
             f"seed{_per_by(by)}); the table shows its test metrics, mean ± std over seeds")
    versions = sorted(df["fairdp_version"].dropna().astype(str).unique()) if "fairdp_version" in df.columns else []
    return text + "." + (f" Run with fairdp {', '.join(versions)}." if versions else "")


def _privacy_note(df: pd.DataFrame, agg: pd.DataFrame, by: Sequence[str], kinds: dict,
                  whole: pd.DataFrame | None, predictions: Sequence = ()) -> str:
    """What the methods' ε protect, and what publishing this report does that no ε covers."""
    methods = sorted(agg["method"].astype(str).unique())
    guarantees = "; ".join(f"{m}: {guarantee_text(kinds.get(m))}" for m in methods)
    known = {m: k for m, k in kinds_of(methods, kinds).items() if k is not None}
    text = f"Each method's guarantee: {guarantees}. " + (caveats_text(known) or "No method here is private.")
    if has_release_events(df):
        text += (" Each number here is computed from models trained on the same data: publishing picks over "
                 "several seeds or configs composes their releases ('What a selection releases').")
    if predictions:
        text += (f" The test-set predictions of the selected configs are stored in {', '.join(map(str, predictions))} "
                 "(fairdp.study.read_predictions): they hold the test rows' protected attribute in the clear, and "
                 "no method's guarantee covers publishing them.")
    return text + _whole_table_sentence(whole)


def _first_page(df, ok, agg, marks, rt, fairness, by, ci, kinds, whole, completeness, selection, papers, figures,
                pages, slugs, predictions=()) -> list[_Section]:
    """What a reader needs on one page: the study in a paragraph, the main table, the claims
    judged, the headline figure, what privacy does not cover, and links to every other page."""
    link = dict(zip([title for title, _, _ in pages], (f"pages/{slug}" for slug in slugs)))
    main_title = next(title for title, _, _ in pages if title.startswith("Test results"))
    compact = _compact_table(agg, by, fairness, marks, kinds)
    several_eps = "eps" in ok.columns and pd.to_numeric(ok["eps"], errors="coerce").nunique() > 1
    headline = next((name for name in HEADLINE_FIGURES if figures.get(name) is not None
                     and (several_eps or name not in ("violation_accuracy_eps", "privacy_accuracy"))), None)
    # a table too long for three screens and too wide to lay out in halves (a pooled study's
    # methods at each of their ε, each notion side by side) stays on its own page
    if len(compact) > FIRST_PAGE_ROWS and len(compact.columns) > HALVES_MAX_COLUMNS:
        main_text = (f"The table's {len(compact)} rows do not fit this page: it is on a page of its own"
                     + (", and the headline figure below draws it. " if headline is not None else ". ")
                     + _advice(agg, ci))
        main_items: list[Item] = []
    else:
        main_text = (("≈: the method's t-interval over seeds overlaps the best method's in that column (a "
                      "difference the intervals do not support). " if ci is not None else "") + _advice(agg, ci)
                     + (f" Every row: {compact.attrs['same']}." if compact.attrs.get("same") else ""))
        main_items = [("display", compact)]
    first: list[_Section] = [
        ("Study", _study_paragraph(df, ok, completeness, selection, rt, fairness, by), []),
        (f"Main results at RT = {rt:g} (mean ± std over seeds)", main_text,
         [*main_items, ("links", [("The full table: intervals, guarantees, ε compared, probes", link[main_title])])]),
    ]
    for (section, summary) in papers:
        title = section[0]
        first.append((title.replace("Compared with the paper", "Claims of the paper"),
                      "Each claim the paper makes, judged on this study's seeds (the full comparison gives the "
                      "intervals and where each claim is made).",
                      [("display", summary), ("links", [(f"The full comparison: {title.split(': ', 1)[1]}",
                                                         link[title])])]))
    if headline is not None:
        first.append(("Headline figure", "", [("figure", headline)]))
    first.append(("What the privacy guarantees do not cover", _privacy_note(df, agg, by, kinds, whole, predictions),
                  []))
    first.append(("Everything else", "Each section on a page of its own; every table also as CSV under tables/.",
                  [("links", [(title, link[title]) for title, _, _ in pages])]))
    return first


def write_report(df: pd.DataFrame, out_dir: str | os.PathLike, options: ReportOptions | None = None) -> list[Path]:
    """Write report.md, report.html, table.csv and figures/*.png into ``out_dir``. Every setting
    named below is a field of ``options`` (``ReportOptions``, whose defaults are ``fairdp report``'s).

    Main table: ``select_by_rt(rt)`` + ``aggregate_seeds`` (FEDERATE Table 1 layout), per
    value of the ``by`` columns too; the configs selected; then the RT sweep over ``rts``,
    the fairness-accuracy bins, privacy-accuracy by eps, violation and accuracy against eps
    per fairness notion (when rows have both), and Pareto fronts. Captions name the probe
    protocol the rows' leakage and MDL were measured with. Rows excluded for NaN metrics
    are listed under Notes (and warned about once). With ``ci`` (a level in percent; None
    for none) the main table adds each mean's t-interval over seeds and marks with "≈" the
    cells whose interval overlaps the column's best method's, the selected configs add a
    bootstrap interval over their test examples, and a section tabulates which pairwise
    differences between methods the intervals support. ``search_history`` (stacked
    ``<results>.hypervolume-<method>-seed<s>.parquet`` tables) adds a search-progress section: the
    hypervolume of each search's feasible front per generation, and, with ``grid`` (a grid
    study's rows), the grid front's hypervolume and the ratio (``search_progress``). Returns
    the written paths: figures first, then table.csv, report.md, report.html. ``compare``
    names published tables (``fairdp.analysis._papers.PAPERS``) to put beside the study's.
    ``completeness`` (``summarise(completeness(df, plan))``) says in the overview whether the
    rows are the whole study, and, when they are not, in a warning above every table.
    ``history`` (``fairdp.read_history`` of the same results) adds the selected configs'
    per-epoch validation curves. A method whose pick is a constant model in some seed
    (``analysis._predictions.constant_models``) is marked in every table that shows it and
    footnoted; it is left out of the supported differences (and the ≈ marks' best), and
    constant configs are left out of the Pareto fronts, unless ``keep_constant``. Rows that
    store their counts add the selected models' per-group rates (``aggregate_group_rates``).
    ``search_objectives`` and ``search_constraints`` (a search's, ``fairdp.constraints``
    strings) draw the Pareto fronts on the search's objectives over the rows that meet its
    constraints, as its front file holds them. ``selection`` (which selection the caller
    chose, and from where) is shown in the overview. ``error_bars`` (``t``, ``std``, ``bootstrap``
    or ``none``; default ± 1 std, the spread the tables print) is what the figures' error bars
    show over seeds, at the ``ci`` level (95 without one) for an interval; each figure's title
    and caption say which, and an interval over fewer than 3 seeds is warned about.
    ``report_figures`` returns the figures as Figure objects instead, writing nothing.
    ``figure_formats``: each figure is also saved as ``figures/<name>.<format>`` in these
    formats (``FIGURE_FORMATS``; the report shows the PNG, always written); ``figure_style``: a
    matplotlib style (a style name or ``.mplstyle`` file) or rcParams (a mapping) the figures
    are drawn and saved under. ``predictions``: the test-set prediction tables stored beside the
    results (``fairdp.study.stored_predictions``); the first page names them where it says what
    privacy does not cover, since they hold the test rows' protected attribute in the clear.

    The report is a folder: ``report.md`` and ``report.html`` are its first page (the study in a
    paragraph, the main table as mean ± std, each compared paper's claims and their verdicts, one
    headline figure, what privacy does not cover, and links); every section is a page of its
    own under ``pages/`` (the main table with its intervals among them), every table of a page
    also a CSV under ``tables/``, and the pages link the figures under ``figures/``.
    """
    out = output_dir(out_dir, "out_dir")  # before anything is drawn: a folder refused at the end would waste it all
    o, df = _checked(df, options)
    kinds = guarantees_by_method(df)  # what each method's ε protects: the rows' own, else the registry's
    rt, fairness, by, ci, keep_constant = o.rt, o.fairness, list(o.by), o.ci, o.keep_constant
    notes: list[str] = []  # what computing and drawing noted (rows left out, few seeds): a page, and warnings
    with figure_style_context(o.figure_style):
        t = _tables_of(df, o, notes, kinds)
        # without figures (``figures=False``) every page is as it is with them, less its figures
        drawn = _draw_figures(df, t, o, notes, only=None if o.figures else ())
        figures = _save_figures(drawn, out / "figures", o.figure_formats)
    _warn(notes)
    ok = t.ok

    agg, marks = _main_table(t.agg, by, ci, keep_constant, method_deltas(df))
    whole = whole_table_release(df, kinds) if has_release_events(df) else None  # every config, released at once
    papers = _paper_sections(df, o.compare)
    sections = [
        _results_section(df, ok, agg, rt, fairness, by, ci, kinds, whole),
        *(section for section, _ in papers),
        _selected_section(t.selected, agg, rt, fairness, ci),
        _learning_curves_section(figures["learning_curves"], fairness),
        _release_section(df, t.selected, rt, by, whole),
        _positive_rates_section(t.selected, by, kinds),
        _group_rates_section(t.selected, by, kinds),
        _small_groups_section(t.selected),
        _differences_section(agg, fairness, by, ci, keep_constant),
        _rt_sweep_section(t.sweep, fairness, by, kinds),
        _fairness_accuracy_section(fairness),
        _notions_section(t.notions, figures["violation_accuracy_eps"], rt),
        _privacy_accuracy_section(t.by_eps, kinds),
        _pareto_section(t.pareto, ok, o.search_objectives, o.search_constraints, t.constant_off),
        _search_progress_section(t.progress, kinds),
    ]
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    overview = _report_overview(df, ok, o.completeness, o.selection, kinds)
    captions = _report_captions(drawn, o.error_bars, ci if ci is not None else 95.0, t.progress, o.search_objectives)
    partial = _partial_warning(o.completeness)
    # every section on a page of its own; the first page says what a reader needs and links them
    pages = [("Study", "The rows this report reads and how it selects among them.",
              [("display", pd.DataFrame(overview, columns=["Item", "Value"]))]),
             *(s for s in sections if s is not None)]
    if notes:
        pages.append(("Notes", "Warnings raised while the report was computed.",
                      [("display", pd.DataFrame({"Note": notes}))]))
    slugs = _page_slugs([title for title, _, _ in pages])
    first = _first_page(df, ok, agg, marks, rt, fairness, by, ci, kinds, whole, o.completeness, o.selection, papers,
                        figures, pages, slugs, o.predictions)

    def document(sections_, title, base, main=None):
        return Document(stamp, partial, sections_, figures, captions, fairness, tuple(by), main,
                        marks if main is not None else None, title, base)

    written = [q for name, p in figures.items() if p is not None
               for q in [p, *(p.with_suffix(f".{f}") for f in o.figure_formats if f != "png")]]
    files = [(out / "table.csv", format_table(agg, "csv", fairness, by=by).encode())]
    back: Item = ("links", [("Back to the report's first page", "../report")])
    for (title, text, items), slug in zip(pages, slugs):
        page = document([(title, text, [back, *items])], f"fairdp report: {title}", "../",
                        agg if any(item is agg for _, item in items) else None)
        for fmt, renderer in (("md", MarkdownRenderer()), ("html", HtmlRenderer())):
            files.append((out / "pages" / f"{slug}.{fmt}", renderer.render(page).encode()))
        for k, table in enumerate(_section_tables(items, fairness, by)):
            files.append((out / "tables" / f"{slug}{'' if k == 0 else f'-{k + 1}'}.csv", table.encode()))
    written.append(write_files(files)[0])
    kept = {path for path, _ in files[1:]}
    for folder in ("pages", "tables"):  # a previous report's pages that this one does not have
        for stale in (out / folder).glob("*"):
            if stale.suffix in (".md", ".html", ".csv") and stale not in kept:
                stale.unlink()
    written += sorted(kept)
    doc = document(first, "fairdp report", "")
    # the first page last: every page it links is in place before it
    written += write_files([(out / "report.md", MarkdownRenderer().render(doc).encode()),
                            (out / "report.html", HtmlRenderer().render(doc).encode())])
    return written
