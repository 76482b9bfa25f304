"""Result tables in the layout of FEDERATE Table 1: one row per (dataset, method).

Columns Accuracy ↑, <fairness> ↓, Leakage ↓, MDL ↑ as "mean ± std" over seeds. The arrows
are the paper's: fairness gaps and leakage are better lower; MDL is better higher (a higher
MDL means the sensitive attribute is harder to extract from the representation). A metric
that a method does not have (NaN mean, e.g. Random's leakage) prints as "-", and a single
seed (NaN std) prints the mean alone. A method whose pick is a constant model in some seed
(the table's ``n_constant``, ``analysis._predictions.with_constant_picks``) has ``CONSTANT_MARK``
after its name and a footnote saying in how many seeds.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import pandas as pd

from fairdp.analysis._intervals import BOOTSTRAP_METRICS, bootstrap_intervals, ci_metrics
from fairdp.analysis._predictions import CONSTANT_PICKS, CONSTANT_SENTENCE, has_constant_picks
from fairdp.analysis._rows import (
    DELTA_COMPARED,
    EPS_COMPARED,
    as_frame,
    check_by,
    check_fairness,
    converted_methods,
    guarantee_text,
    kinds_of,
    require_columns,
    with_compared_eps,
)
from fairdp.errors import InputError
from fairdp.schema import GUARANTEE, METRIC_COLUMNS, NOTION_GAP

FORMATS = ("md", "csv", "latex", "html")

FAIRNESS_LABELS = {
    "tpr_gap": "TPR-gap",
    "grms": "GRMS",
    "dp_gap": "DP-gap",
    "eo_gap": "EO-gap",
    "ap_gap": "AP-gap",
    "notion_gap": "Violation",  # each row's own notion's (Tran et al.)
}
BY_LABELS = {"fairness_notion": "Notion", "eps": "ε", "clip_primal": "C_p", "clip_dual": "C_d"}
GUARANTEE_LABEL = "Guarantee"
"""The column of every table that shows what each method's ε protects (``guarantee``)."""
COMPARED_LABEL = "ε compared"
"""The column beside a table's ε where some method's ε is compared after a conversion: the ε
(and a converted δ) in the relation its rows are ranked in (``compared_cells``)."""


def compared_cells(table: pd.DataFrame, kinds: dict | None = None) -> list[str] | None:
    """Per row of a table with ``eps``, the ε it is compared at (``with_compared_eps``; the
    table's own ``eps_compared`` and ``delta_compared`` where it has them): "2 (δ 3.7e-05)"
    for a converted method whose δ changed and is known, the ε alone otherwise, "-" without
    one; None where no method of the table was converted (the column would repeat ε)."""
    compared = table if EPS_COMPARED in table.columns else with_compared_eps(table, kinds)
    moved = converted_methods(compared)
    if not moved:
        return None
    cells = []
    for m, e, d in zip(compared["method"].astype(str), compared[EPS_COMPARED], compared[DELTA_COMPARED]):
        if pd.isna(e):
            cells.append("-")
        else:
            cells.append(f"{e:g}" + (f" (δ {d:.2g})" if moved.get(m) == "2ε" and pd.notna(d) else ""))
    return cells


def guarantee_cells(table: pd.DataFrame, kinds: dict | None = None) -> list[str]:
    """Each row's guarantee kind as a table cell: the table's ``guarantee`` column where it has
    one, else its method's (``kinds``, e.g. ``guarantees_by_method`` of the rows, else the
    registry); "not private" for a method without privacy."""
    if GUARANTEE in table.columns:
        return [guarantee_text(k) for k in table[GUARANTEE]]
    known = kinds_of(table["method"].astype(str).unique(), kinds)
    return [guarantee_text(known[str(m)]) for m in table["method"]]


def by_cell(v) -> str:
    """A report-by value as a table or label shows it: '-' for none, 1 for 1.0, 0.5 for 0.5."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _columns(fairness: str) -> list[tuple[str, str, str]]:
    """(metric column stem, label, arrow) of the Table 1 layout."""
    return [
        ("test_accuracy", "Accuracy", "↑"),
        (f"test_{fairness}", FAIRNESS_LABELS[fairness], "↓"),
        ("leakage", "Leakage", "↓"),
        ("mdl", "MDL", "↑"),
    ]


MAX_DECIMALS = 4


def enough_decimals(values, decimals: int = 1) -> int:
    """At least ``decimals``, and more (up to ``MAX_DECIMALS``) until no nonzero value of
    ``values`` prints as zero: a std of 0.03 is "0.03", not "0.0"."""
    for v in values:
        if v is None or not math.isfinite(float(v)) or float(v) == 0:
            continue
        while decimals < MAX_DECIMALS and round(abs(float(v)), decimals) == 0:
            decimals += 1
    return decimals


def column_decimals(means, stds, decimals: int = 1) -> int:
    """The decimals of a whole column of "mean ± std" cells: ``enough_decimals`` over every
    finite mean and std of the column, so no nonzero one prints as zero and every cell of the
    column has the same number of decimals."""
    return enough_decimals([*pd.to_numeric(pd.Series(list(means)), errors="coerce").dropna(),
                            *pd.to_numeric(pd.Series(list(stds)), errors="coerce").dropna()], decimals)


def mean_std_column(means, stds, decimals: int = 1, sep: str = " ± ") -> list[str]:
    """A column of "mean ± std" cells in one format (``column_decimals``)."""
    means, stds = list(means), list(stds)
    d = column_decimals(means, stds, decimals)
    return [mean_std(a, b, d, sep) for a, b in zip(means, stds)]


def mean_std(mean: float, std: float, decimals: int = 1, sep: str = " ± ") -> str:
    """"mean ± std" with ``decimals``, or as many more as a nonzero mean or std needs not to
    print as zero; "-" for a NaN mean, the mean alone for a NaN std."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "-"
    if std is None or math.isnan(float(std)):
        return f"{float(mean):.{enough_decimals([mean], decimals)}f}"
    d = enough_decimals([mean, std], decimals)
    return f"{float(mean):.{d}f}{sep}{float(std):.{d}f}"


def interval_text(lo: float, hi: float, decimals: int = 1) -> str:
    """" [lo, hi]", or "" when the interval is undefined (a single seed, no stored counts)."""
    if lo is None or hi is None or not (math.isfinite(float(lo)) and math.isfinite(float(hi))):
        return ""
    return f" [{float(lo):.{decimals}f}, {float(hi):.{decimals}f}]"


CONSTANT_ROW = "Constant picks (seeds)"
"""The row of a sweep table that counts, per RT, the seeds whose pick is a constant model."""


def sweep_tables(sweep: pd.DataFrame, fairness: str = "tpr_gap", decimals: int = 1,
                 by=(), kinds: dict | None = None) -> list[tuple[str, pd.DataFrame]]:
    """``rt_sweep`` output as one small table per (dataset, method[, by values]): a row per
    metric, a column per RT, cells "mean ± std" over seeds; the title names the method's
    guarantee kind (``kinds``, e.g. ``guarantees_by_method`` of the rows, else the registry).
    Where ``sweep`` has ``n_constant`` (``with_constant_picks`` over every RT's picks), a last
    row ``CONSTANT_ROW`` says per RT in how many seeds the pick is a constant model."""
    sweep = as_frame(sweep, "sweep")
    require_columns(sweep, ["dataset", "method", "rt", *by], "sweep")
    cols = [c for c in _columns(fairness) if f"{c[0]}_mean" in sweep.columns]
    tables = []
    known = kinds_of(sweep["method"].astype(str).unique(), kinds)
    for key, g in sweep.groupby(["dataset", "method", *by], sort=True):
        key = key if isinstance(key, tuple) else (key,)
        g = g.sort_values("rt")
        rts = [f"RT {float(v):g}" for v in g["rt"]]
        rows = {"Metric": [f"{label} {arrow}" for _, label, arrow in cols]}
        # one format per metric: the row's cells across RTs share their decimals
        row_decimals = [column_decimals(g[f"{m}_mean"], g[f"{m}_std"], decimals) for m, _, _ in cols]
        for rt, (_, r) in zip(rts, g.iterrows()):
            rows[rt] = [mean_std(r[f"{m}_mean"], r[f"{m}_std"], d) for (m, _, _), d in zip(cols, row_decimals)]
        if CONSTANT_PICKS in g.columns:  # with_constant_picks: seeds whose pick at that RT is constant
            rows["Metric"].append(CONSTANT_ROW)
            for rt, (_, r) in zip(rts, g.iterrows()):
                n = r[CONSTANT_PICKS]
                rows[rt].append("-" if pd.isna(n) else f"{int(n)} of {int(r['n_seeds'])}" + (CONSTANT_MARK if n else ""))
        seeds = sorted({int(v) for v in g["n_seeds"]}) if "n_seeds" in g.columns else []
        extra = "".join(f", {BY_LABELS.get(k, k)} {by_cell(v)}" for k, v in zip(by, key[2:]))
        counted = [f"{'/'.join(map(str, seeds))} seed{'' if seeds == [1] else 's'}"] if seeds else []
        title = f"{key[1]} on {key[0]}{extra} ({'; '.join([*counted, guarantee_text(known[str(key[1])])])})"
        tables.append((title, pd.DataFrame(rows)))
    return tables


CONSTANT_MARK = " ‡"
"""After the method of a table row whose pick is a constant model in some seed (its
``n_constant``, ``analysis._predictions.CONSTANT_PICKS``, above 0); the table's footnote
(``constant_footnote``) says in how many seeds."""


def constant_footnote(table: pd.DataFrame, by=()) -> str:
    """The footnote of a table whose rows carry ``n_constant`` and ``n_seeds``: which rows'
    picks are constant models, in how many seeds; "" when none is (or the table cannot say)."""
    if CONSTANT_PICKS not in table.columns:
        return ""
    flagged = [(r, n) for (_, r), n in zip(table.iterrows(), table[CONSTANT_PICKS]) if has_constant_picks(n)]
    if not flagged:
        return ""
    items = []
    for r, n in flagged:
        extra = "".join(f", {BY_LABELS.get(k, k)} {by_cell(r[k])}" for k in by if k in r.index)
        seeds = f" of {int(r['n_seeds'])}" if "n_seeds" in r.index and pd.notna(r["n_seeds"]) else ""
        items.append(f"{r['method']} on {r['dataset']}{extra}: {int(n)}{seeds} seeds")
    return (f"{CONSTANT_MARK.strip()} The pick is a constant model in some seeds ({'; '.join(items)}). A constant "
            f"model {CONSTANT_SENTENCE}.")


def _display(agg: pd.DataFrame, fairness: str, decimals: int, latex: bool = False, by=(),
             marks: dict | None = None, kinds: dict | None = None) -> pd.DataFrame:
    """The aggregate as display strings: Dataset, Method, Guarantee, [by keys,] [RT,] Seeds,
    the metrics."""
    # a probe that was off (every mean NaN, or its columns dropped) is no column of the table
    cols = [c for c in _columns(fairness) if not c[0].startswith(("leakage", "mdl")) or (
        f"{c[0]}_mean" in agg.columns and pd.to_numeric(agg[f"{c[0]}_mean"], errors="coerce").notna().any())]
    require_columns(agg, ["dataset", "method", *by, "n_seeds"]
                    + [f"{m}_{s}" for m, _, _ in cols for s in ("mean", "std")], "agg")
    methods = agg["method"].astype(str)
    if CONSTANT_PICKS in agg.columns:
        methods = [m + (CONSTANT_MARK if has_constant_picks(n) else "") for m, n in zip(methods, agg[CONSTANT_PICKS])]
    out = pd.DataFrame({"Dataset": agg["dataset"].astype(str), "Method": methods})
    out[GUARANTEE_LABEL] = guarantee_cells(agg, kinds)
    for key in by:
        out[BY_LABELS.get(key, key)] = [by_cell(v) for v in agg[key]]
        if key == "eps" and (cells := compared_cells(agg, kinds)) is not None:
            out[COMPARED_LABEL] = cells  # ε of kinds converted to one relation, beside the stated one
    if "rt" in agg.columns:
        out["RT"] = [f"{float(v):g}" for v in agg["rt"]]
    out["Seeds"] = [str(int(v)) for v in agg["n_seeds"]]
    for m, label, arrow in cols:
        sep = r" \pm " if latex else " ± "
        # one format per column: 85.30 ± 0.00 beside 85.34 ± 0.05, never 85.3 ± 0.0 beside it
        d = column_decimals(agg[f"{m}_mean"], agg[f"{m}_std"], decimals)
        cells = [mean_std(a, b, d, sep) for a, b in zip(agg[f"{m}_mean"], agg[f"{m}_std"])]
        if f"{m}_lo" in agg.columns:  # an interval (seed_intervals) after the mean ± std
            cells = [c + interval_text(lo, hi, d) for c, lo, hi in zip(cells, agg[f"{m}_lo"], agg[f"{m}_hi"])]
        if marks and m in marks:
            cells = [c + (MARK if flag and c != "-" else "") for c, flag in zip(cells, marks[m])]
        if latex:
            cells = ["-" if c == "-" else f"${c}$" for c in cells]
            head = label + (r" $\uparrow$" if arrow == "↑" else r" $\downarrow$")
        else:
            head = f"{label} {arrow}"
        out[head] = cells
    return out.reset_index(drop=True)


def markdown_table(table: pd.DataFrame) -> str:
    def cell(v: str) -> str:
        return str(v).replace("|", "\\|")

    align = [":--" if i < 2 or c == GUARANTEE_LABEL else "--:" for i, c in enumerate(table.columns)]
    lines = ["| " + " | ".join(cell(c) for c in table.columns) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines) + "\n"


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                  "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}"}


def _latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def _latex(table: pd.DataFrame) -> str:
    n_left = 3 if GUARANTEE_LABEL in table.columns else 2
    # the metric columns are last, their heads already LaTeX (an arrow); a probe that was off has none
    n_metric = sum(1 for c in table.columns if str(c).endswith(("$\\uparrow$", "$\\downarrow$")))
    n_num = table.shape[1] - n_left - n_metric
    spec = "l" * n_left + "r" * n_num + "c" * n_metric
    head = [_latex_escape(c) if i < table.shape[1] - n_metric else c for i, c in enumerate(table.columns)]
    lines = [f"\\begin{{tabular}}{{{spec}}}", r"\toprule", " & ".join(head) + r" \\", r"\midrule"]
    for row in table.itertuples(index=False):
        cells = [_latex_escape(v).replace(CONSTANT_MARK, r"$^\ddagger$") if i < len(row) - n_metric else v
                 for i, v in enumerate(row)]
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def html_table(table: pd.DataFrame) -> str:
    # a column name breaks after its underscores (valid_notion_gap), so a wide table wraps to the page
    head = "".join(f"<th>{html.escape(str(c)).replace('_', '_<wbr>')}</th>" for c in table.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>\n"
        for row in table.itertuples(index=False)
    )
    wide = " wide" if len(table.columns) > WIDE_TABLE else ""  # many columns: a smaller font, to fit the page
    return f'<table class="results{wide}">\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>\n'

WIDE_TABLE = 12
"""An HTML table of more columns than this is set in a smaller font (the report's ``table.wide``)."""


MARK = " ≈"
"""After a cell whose interval overlaps the best method's in its column: the difference from
the best is not supported (``analysis._intervals.not_distinguishable``)."""


def format_table(agg: pd.DataFrame, fmt: str = "md", fairness: str = "tpr_gap", decimals: int = 1,
                 by=(), marks: dict | None = None, kinds: dict | None = None) -> str:
    """Render ``aggregate_seeds`` output as a FEDERATE Table 1 style table.

    ``fmt`` is "md" (Markdown), "latex" (booktabs tabular), "html" (a plain <table>) or
    "csv" (the raw aggregate columns: dataset, method, n_seeds, M_mean, M_std, ...,
    guarantee as the ``fairdp analyze --format csv`` contract says). A Guarantee column
    follows Method: what each method's ε protects (the aggregate's ``guarantee``, else
    ``kinds`` or the registry), since ε of different kinds are not comparable. An ``rt``
    column, as in ``rt_sweep`` output, becomes an RT column; ``by`` columns (report-by keys)
    follow. Cells are "mean ± std" with ``decimals`` decimals. Where ``agg`` has
    ``n_constant`` (``with_constant_picks``), a method whose pick is a constant model in some
    seed is marked ``CONSTANT_MARK`` and a footnote below the table names it and in how many
    seeds (csv: the column itself).
    """
    agg = as_frame(agg, "agg")
    fairness = check_fairness(fairness)
    if fmt not in FORMATS:
        raise InputError(f"fmt: unknown table format {fmt!r} (expected one of {', '.join(FORMATS)})")
    if isinstance(decimals, bool) or not isinstance(decimals, int) or decimals < 0:
        raise InputError(f"decimals: expected an integer >= 0, got {decimals!r}")
    if fmt == "csv":
        require_columns(agg, ["dataset", "method", "n_seeds"], "agg")
        return agg.to_csv(index=False, lineterminator="\n")
    by = check_by(by, agg)
    table = _display(agg, fairness, decimals, latex=fmt == "latex", by=by, marks=marks, kinds=kinds)
    text = {"md": markdown_table, "latex": _latex, "html": html_table}[fmt](table)
    note = constant_footnote(agg, by)
    if not note:
        return text
    if fmt == "md":
        return f"{text}\n{note}\n"
    if fmt == "html":
        return f'{text}<p class="footnote">{html.escape(note)}</p>\n'
    return f"{text}{{\\footnotesize $^\\ddagger$ {_latex_escape(note[len(CONSTANT_MARK.strip()):].strip())}\\par}}\n"


def display_strings(df: pd.DataFrame, decimals: int = 1) -> pd.DataFrame:
    """Every cell as text: metric columns (percent) with ``decimals`` decimals, other numbers
    in their shortest form, NaN as "-"."""
    # each notion's own violation (valid_notion_gap) is a percent like the gaps it stands for
    metric = {c for c in df.columns if c in METRIC_COLUMNS or str(c).endswith(f"_{NOTION_GAP}")}

    def cell(col, v) -> str:
        if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):  # NA: a nullable column's
            return "-"
        if isinstance(v, float):
            return f"{v:.{decimals}f}" if col in metric else f"{v:g}"
        return str(v)

    return pd.DataFrame({c: [cell(c, v) for v in df[c]] for c in df.columns})


def render_table(df: pd.DataFrame, fmt: str = "md", decimals: int = 1) -> str:
    """A plain table (e.g. ``selected_configs``) as md, csv, latex or html: metric columns
    (percent) with ``decimals`` decimals, other numbers in their shortest form, NaN as "-";
    csv keeps the raw values."""
    df = as_frame(df)
    if fmt not in FORMATS:
        raise InputError(f"fmt: unknown table format {fmt!r} (expected one of {', '.join(FORMATS)})")
    if fmt == "csv":
        return df.to_csv(index=False, lineterminator="\n")
    text = display_strings(df, decimals)
    if fmt == "latex":
        cols = "l" * len(text.columns)
        lines = [f"\\begin{{tabular}}{{{cols}}}", r"\toprule", " & ".join(_latex_escape(c) for c in text.columns) + r" \\",
                 r"\midrule"]
        lines += [" & ".join(_latex_escape(v) for v in row) + r" \\" for row in text.itertuples(index=False)]
        return "\n".join([*lines, r"\bottomrule", r"\end{tabular}"]) + "\n"
    return markdown_table(text) if fmt == "md" else html_table(text)


# --- the tables of the numbers computed elsewhere ----------------------------------------

def selected_with_intervals(selected: pd.DataFrame, table: pd.DataFrame, fairness: str, level: float = 95.0,
                            draws: int = 1000, seed: int = 0) -> pd.DataFrame:
    """``selected_configs`` output ``table`` with a "<metric> <level>% CI" column after test
    accuracy and the test fairness gap: each selected row's bootstrap interval ("-" where
    the row stores no counts; for ``notion_gap`` only accuracy has one)."""
    metrics = [m for m in ci_metrics(fairness) if m in BOOTSTRAP_METRICS]
    boot = bootstrap_intervals(selected, level, draws, seed, metrics)
    # a row's interval depends only on the row (its own stream), so rows repeated under
    # several by-values carry one interval
    keys = ["dataset", "method", "seed", "config_id"]
    boot = boot[boot["status"].astype("object") == "ok"] if "status" in boot.columns else boot
    boot = boot[keys + [f"{m}_{s}" for m in metrics for s in ("lo", "hi")]].drop_duplicates(keys)
    merged = table.merge(boot, on=keys, how="left")
    out = table.copy()
    for m in metrics:
        d = enough_decimals(list(merged[f"{m}_hi"] - merged[f"{m}_lo"]), 1)  # one format per column
        cells = [interval_text(lo, hi, d).strip() or "-" for lo, hi in zip(merged[f"{m}_lo"], merged[f"{m}_hi"])]
        out.insert(out.columns.get_loc(m) + 1, f"{m} {level:g}% CI", cells)
    return out


RATE_LABELS = {"selection_rate": "Selection rate", "tpr": "TPR", "fpr": "FPR", "accuracy": "Accuracy"}


def group_rates_table(rates: pd.DataFrame, by: Sequence[str] = (), kinds: dict | None = None,
                      decimals: int = 1) -> pd.DataFrame:
    """``aggregate_group_rates`` output as display strings: Dataset, Method, Guarantee, [by
    keys,] Group, [Class: tasks of more than two classes,] Seeds, Rows (mean group size),
    then each rate as "mean ± std" over seeds ("-" where undefined)."""
    out = pd.DataFrame({"Dataset": rates["dataset"].astype(str), "Method": rates["method"].astype(str),
                        GUARANTEE_LABEL: guarantee_cells(rates, kinds)})
    for key in by:
        out[BY_LABELS.get(key, key)] = [by_cell(v) for v in rates[key]]
    out["Group"] = [str(int(v)) for v in rates["group"]]
    if (rates["class"] != 1).any():  # a binary task's rates are the positive class's
        out["Class"] = [str(int(v)) for v in rates["class"]]
    out["Seeds"] = [str(int(v)) for v in rates["n_seeds"]]
    out["Rows"] = [f"{v:.0f}" for v in rates["count_mean"]]
    for rate, label in RATE_LABELS.items():
        out[label] = mean_std_column(rates[f"{rate}_mean"], rates[f"{rate}_std"], decimals)
    return out.reset_index(drop=True)


SET_LABELS = {"rows": "all its rows", "positives": "its rows of the class", "negatives": "its rows of other classes"}
"""What each conditioning set of ``groups_too_small`` is, in words."""


def small_groups_table(small: pd.DataFrame) -> pd.DataFrame:
    """``groups_too_small`` output as display strings: Dataset, Split, Group, [Class: tasks of
    more than two classes,] Rows of (the conditioning set), Rows (its size, a range where seeds
    differ), Seeds (where it is small), Fewest (the rows a rate needs: min_group_count)."""
    out = pd.DataFrame({"Dataset": small["dataset"].astype(str), "Split": small["split"].astype(str),
                        "Group": [str(int(v)) for v in small["group"]]})
    if (small["class"] != 1).any():
        out["Class"] = [str(int(v)) for v in small["class"]]
    out["Rows of"] = [SET_LABELS[v] for v in small["set"]]
    out["Rows"] = [f"{int(lo)}" if lo == hi else f"{int(lo)}-{int(hi)}"
                   for lo, hi in zip(small["count_min"], small["count_max"])]
    out["Seeds"] = [str(int(v)) for v in small["n_seeds"]]
    out["Fewest"] = [str(int(v)) for v in small["min_group_count"]]
    return out.reset_index(drop=True)
