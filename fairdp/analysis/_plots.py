"""Trade-off figures of FEDERATE sec. 5 as PNG files (matplotlib, Agg backend).

Each ``figure_*`` function builds a ``matplotlib.figure.Figure`` (one row of panels per
dataset, one colour per method, one figure legend naming the methods) or returns None
when there is nothing to plot; each ``plot_*`` function builds the same figure and writes
it as a PNG (atomically: hidden temp file in the same folder, then rename), returning the
path, or None without writing anything.

Figures are drawn on ``Figure`` objects with an explicit Agg canvas, never through pyplot:
nothing global (the pyplot figure list, the user's interactive backend) is touched, no
display is needed, and there are no figures to close.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fairdp._atomic import atomic_path
from fairdp.analysis._intervals import t_halfwidth
from fairdp.analysis._pareto import pareto_front
from fairdp.analysis._rows import (
    as_frame,
    check_fairness,
    eps_labels,
    guarantees_by_method,
    kind_labels,
    ok_rows,
    require_columns,
)
from fairdp.analysis._style import MethodStyle, method_style
from fairdp.analysis._tables import FAIRNESS_LABELS
from fairdp.errors import InputError
from fairdp.schema import GUARANTEE

PathLike = str | os.PathLike


def _styles(methods) -> dict[str, MethodStyle]:
    """Each method's fixed colour and marker (``method_style``): the same in every figure."""
    return {str(m): method_style(str(m)) for m in sorted({str(m) for m in methods})}


LEGEND_WIDTH = 1.8  # inches a figure leaves for its legend; more where labels are longer (``_finish``)


def _new_figure(nrows: int, ncols: int) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=(max(7.0, 3.6 * ncols + LEGEND_WIDTH), 3.0 * nrows + 0.4), layout="constrained", dpi=100)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, squeeze=False)


BARS_CI = "bars: 95% t-interval of the mean over seeds"
BARS_STD = "bars: ± 1 std over seeds"


def _kinds(table: pd.DataFrame, rows: bool = False) -> dict[str, str | None] | None:
    """Each method's guarantee kind as ``table`` records it: every row's (``rows``: result
    rows, ``guarantees_by_method``) or an aggregate's ``guarantee`` column; None where the
    table has none (the registry's kinds are used)."""
    if rows:
        return guarantees_by_method(table) if len(table) else {}
    if GUARANTEE not in table.columns:
        return None
    return {str(m): (k if isinstance(k, str) else None) for m, k in zip(table["method"], table[GUARANTEE])}


def _names(table: pd.DataFrame, rows: bool = False) -> dict[str, str]:
    """Each method's legend label: its name and its guarantee's kind (``kind_labels``)."""
    return kind_labels(sorted(table["method"].astype(str).unique()), _kinds(table, rows))


def _finish(fig: Figure, handles: dict[str, object], title: str, bars: str | None = None) -> Figure:
    """The legend and the title; ``bars`` says what the error bars are (every figure with
    error bars says it, in its title). Legend labels name each method's guarantee kind (what
    its ε protects), so that methods of different kinds are never read as alike."""
    # centred on the right: a wide legend at the top would run under the centred title
    fig.legend(list(handles.values()), list(handles.keys()), loc="outside right center",
               title="method (guarantee)")
    # the panels keep their width beside a legend of long labels (about 0.08 in a character)
    longest = max((len(label) for label in handles), default=0)
    fig.set_figwidth(fig.get_figwidth() + max(0.0, 0.08 * longest + 0.4 - LEGEND_WIDTH))
    fig.suptitle(f"{title}\n({bars})" if bars else title)
    return fig


def legend_labels(fig: Figure) -> list[str]:
    """The labels in a figure's legend, in legend order: each method's name and its
    guarantee's kind, "federate (local, replace one record's representation)"."""
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def _has(df: pd.DataFrame, col: str) -> bool:
    return col in df.columns and pd.to_numeric(df[col], errors="coerce").notna().any()


def _label(col: str, fairness: str | None = None) -> str:
    names = {"valid_accuracy": "valid accuracy (%) ↑", "test_accuracy": "test accuracy (%) ↑",
             "leakage": "leakage (%) ↓", "mdl": "MDL (kbits) ↑", "eps": "ε"}
    if col in names:
        return names[col]
    for f, lab in FAIRNESS_LABELS.items():
        for split in ("valid", "test"):
            if col == f"{split}_{f}":
                return f"{split} {lab} (%) ↓"
    return col


# Methods that are floors, not contenders: a random classifier's 50% accuracy would stretch
# every accuracy axis and squeeze the methods compared into a sliver. They are drawn as
# reference levels, on the axis only where their value falls inside the compared range.
BASELINES = frozenset({"random"})


def _compared(part: pd.DataFrame) -> bool:
    """Whether ``part`` holds methods besides the baselines (then the axes are theirs)."""
    return bool((~part["method"].astype(str).isin(BASELINES)).any())


def _reference_levels(ax, baselines: pd.DataFrame, column: str, styles: dict[str, MethodStyle],
                      handles: dict[str, object], names: Mapping[str, str] | None = None) -> None:
    """Each baseline's mean of ``column`` as a dashed level, drawn after the compared methods
    set the axis: a level inside their range is a line; one outside is a note at the edge
    of the axis giving its value, and the axis keeps the compared methods' range."""
    ax.autoscale_view()
    lo, hi = ax.get_ylim()
    for method, g in baselines.groupby("method", sort=True):
        value = pd.to_numeric(g[column], errors="coerce").mean()
        if pd.isna(value):
            continue
        label = f"{(names or {}).get(str(method), str(method))}, reference"
        if lo <= value <= hi:
            line = ax.axhline(value, ls="--", lw=1, color=styles[str(method)].color, label=label)
            handles.setdefault(label, line)
        else:
            where, y = ("below", 0.02) if value < lo else ("above", 0.98)
            ax.text(0.01, y, f"{method}: {value:.1f} ({where} the axis)", transform=ax.transAxes, fontsize=7,
                    va="bottom" if where == "below" else "top", color=styles[str(method)].color)
        ax.set_ylim(lo, hi)


def _dodge(methods, width: float) -> dict[str, float]:
    """A small x offset per method, centred on zero and within a third of ``width`` (the
    spacing of the x values): methods with equal values at one x are drawn side by side
    instead of one hiding the other."""
    methods = sorted(str(m) for m in methods)
    if len(methods) < 2:
        return {m: 0.0 for m in methods}
    step = width / 3 / (len(methods) - 1)
    return {m: (k - (len(methods) - 1) / 2) * step for k, m in enumerate(methods)}


def _bars(table: pd.DataFrame) -> str:
    return BARS_CI if "n_seeds" in table.columns else BARS_STD


def _yerr(g: pd.DataFrame, metric: str) -> np.ndarray:
    """Error bars (2 x n, below and above) of ``<metric>_mean``: the 95% t-interval over
    seeds that the tables print (``seed_intervals``: cut to the metric's range, none for one
    seed) where the table counts its seeds (``n_seeds``), else ± 1 std."""
    mean = g[f"{metric}_mean"].to_numpy(float)
    std = g[f"{metric}_std"].to_numpy(float)
    if "n_seeds" not in g.columns:
        half = np.nan_to_num(std, nan=0.0)
        return np.vstack([half, half])
    half = np.array([t_halfwidth(s, n) for s, n in zip(std, g["n_seeds"].to_numpy(float))])
    top = np.inf if metric.endswith("mdl") else 100.0
    lo, hi = np.clip(mean - half, 0.0, top), np.clip(mean + half, 0.0, top)
    return np.nan_to_num(np.vstack([mean - lo, hi - mean]), nan=0.0)


def figure_rt_sweep(sweep: pd.DataFrame, fairness: str = "tpr_gap") -> Figure | None:
    """FEDERATE Figure 2: valid accuracy, valid fairness and leakage (mean ± std) against RT."""
    sweep = as_frame(sweep, "sweep")
    fairness = check_fairness(fairness)
    require_columns(sweep, ["dataset", "method", "rt"], "sweep")
    metrics = [m for m in ("valid_accuracy", f"valid_{fairness}", "leakage") if _has(sweep, f"{m}_mean")]
    if sweep.empty or not metrics:
        return None
    return _curves(sweep, "rt", metrics, "relaxation threshold (points)", "Selection by relaxation threshold")


def figure_fairness_accuracy_bins(bins: pd.DataFrame, fairness: str = "tpr_gap") -> Figure | None:
    """FEDERATE Figure 3: best valid fairness per 1-point valid-accuracy interval.

    Intervals that no config reached are gaps in the line (no point), not zeros.
    """
    bins = as_frame(bins, "bins")
    fairness = check_fairness(fairness)
    col = f"valid_{fairness}"
    require_columns(bins, ["dataset", "method", "accuracy_bin", f"{col}_mean", f"{col}_std"], "bins")
    if bins.empty:
        return None
    datasets = sorted(bins["dataset"].astype(str).unique())
    styles = _styles(bins["method"].unique())
    names = _names(bins)
    fig, axes = _new_figure(len(datasets), 1)
    handles: dict[str, object] = {}
    for i, ds in enumerate(datasets):
        ax = axes[i, 0]
        part = bins[bins["dataset"].astype(str) == ds]
        shift = _dodge(part["method"].astype(str).unique(), width=1.0)
        for method, g in part.groupby("method", sort=True):
            g = g.set_index("accuracy_bin").sort_index()
            full = g.reindex(range(int(g.index.min()), int(g.index.max()) + 1))  # gaps break the line
            line = ax.errorbar(full.index + shift[str(method)], full[f"{col}_mean"], yerr=_yerr(full, col),
                               marker=styles[str(method)].marker, ms=4, capsize=2, color=styles[str(method)].color,
                               label=names[str(method)])
            handles.setdefault(names[str(method)], line)
        ax.set_xlabel("valid accuracy interval (%)")
        ax.set_ylabel(f"best {_label(col)}")
        ax.set_title(ds, fontsize=9)
    return _finish(fig, handles, "Fairness-accuracy trade-off", _bars(bins))


def figure_privacy_accuracy(by_eps: pd.DataFrame) -> Figure | None:
    """FEDERATE Figure 4: test accuracy and leakage of the best-accuracy config per eps."""
    by_eps = as_frame(by_eps, "by_eps")
    require_columns(by_eps, ["dataset", "method", "eps"], "by_eps")
    metrics = [m for m in ("test_accuracy", "leakage") if _has(by_eps, f"{m}_mean")]
    if by_eps.empty or not metrics:
        return None
    xlabel, names = eps_labels(sorted(by_eps["method"].astype(str).unique()), _kinds(by_eps))
    return _curves(by_eps, "eps", metrics, xlabel, "Privacy-accuracy trade-off (best valid accuracy per ε)", names)


def _curves(table: pd.DataFrame, x: str, metrics: list[str], xlabel: str, title: str,
            names: Mapping[str, str] | None = None) -> Figure:
    """One panel per (dataset, metric): each method's ``<metric>_mean`` ± ``_std`` against ``x``
    (legend labels from ``names`` where given, else the method and its guarantee's kind)."""
    datasets = sorted(table["dataset"].astype(str).unique())
    styles = _styles(table["method"].unique())
    names = names or _names(table)
    fig, axes = _new_figure(len(datasets), len(metrics))
    handles: dict[str, object] = {}
    for i, ds in enumerate(datasets):
        part = table[table["dataset"].astype(str) == ds]
        for j, m in enumerate(metrics):
            ax = axes[i, j]
            compared = part[~part["method"].astype(str).isin(BASELINES)] if _compared(part) else part
            # on a linear axis (RT), equal points of different methods side by side
            xs = np.unique(pd.to_numeric(compared[x], errors="coerce").dropna().to_numpy(float))
            shift = _dodge(compared["method"].unique(), float(np.diff(xs).min()) if len(xs) > 1 else 1.0) \
                if x == "rt" else {}
            for method, g in compared.groupby("method", sort=True):
                g = g.sort_values(x)
                name = names.get(str(method), str(method))
                st = styles[str(method)]
                line = ax.errorbar(g[x] + shift.get(str(method), 0.0), g[f"{m}_mean"], yerr=_yerr(g, m), marker=st.marker,
                                   ms=4, capsize=2, color=st.color, label=name)
                handles.setdefault(name, line)
            if len(compared) < len(part):
                _reference_levels(ax, part[part["method"].astype(str).isin(BASELINES)], f"{m}_mean", styles,
                                  handles, names)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(_label(m))
            ax.set_title(ds, fontsize=9)
    return _finish(fig, handles, title, _bars(table))


def figure_violation_accuracy_by_eps(table: pd.DataFrame) -> Figure | None:
    """Tran et al. Figures 1-2: for each dataset and fairness notion (columns), the test
    violation of that notion and the test accuracy (rows) against eps, mean ± std over
    seeds, from ``violation_accuracy_by_eps``. Methods without eps are dashed levels."""
    table = as_frame(table, "table")
    require_columns(table, ["dataset", "method", "fairness_notion", "eps", "test_notion_gap_mean",
                            "test_notion_gap_std", "test_accuracy_mean", "test_accuracy_std"], "table")
    eps = pd.to_numeric(table["eps"], errors="coerce")
    if table.empty or not eps.notna().any():
        return None
    panels = [(ds, nt) for ds in sorted(table["dataset"].astype(str).unique())
              for nt in sorted(table.loc[table["dataset"].astype(str) == ds, "fairness_notion"].dropna().unique())]
    styles = _styles(table["method"].unique())
    xlabel, names = eps_labels(list(styles), _kinds(table))
    fig, axes = _new_figure(2, len(panels))
    handles: dict[str, object] = {}
    lo, hi = float(eps.min()), float(eps.max())
    for j, (ds, nt) in enumerate(panels):
        part = table[(table["dataset"].astype(str) == ds) & (table["fairness_notion"] == nt)]
        for i, (metric, label) in enumerate((("test_notion_gap", f"test {nt} violation (%) ↓"),
                                              ("test_accuracy", "test accuracy (%) ↑"))):
            ax = axes[i, j]
            for method, g in part.groupby("method", sort=True):
                g = g.assign(eps=pd.to_numeric(g["eps"], errors="coerce")).sort_values("eps")
                color, marker = styles[str(method)]
                if g["eps"].isna().all():  # not private: a level across the eps range
                    line = ax.hlines(g[f"{metric}_mean"].iloc[0], lo, hi, colors=[color], linestyles="dashed",
                                     label=names[str(method)])
                else:
                    g = g[g["eps"].notna()]
                    line = ax.errorbar(g["eps"], g[f"{metric}_mean"], yerr=_yerr(g, metric),
                                       marker=marker, ms=4, capsize=2, color=color, label=names[str(method)])
                handles.setdefault(names[str(method)], line)
            ax.set_xscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(label)
            ax.set_title(f"{ds}, {nt}", fontsize=9)
    return _finish(fig, handles, "Violation and accuracy against ε per fairness notion", _bars(table))


def figure_leakage_vs_eps(df: pd.DataFrame) -> Figure | None:
    """Leakage of every config against eps per method (points), with the mean per eps (line)."""
    rows = ok_rows(df)
    require_columns(rows, ["dataset", "method", "eps", "leakage"])
    rows = rows.assign(eps=pd.to_numeric(rows["eps"], errors="coerce"),
                       leakage=pd.to_numeric(rows["leakage"], errors="coerce"))
    rows = rows.dropna(subset=["eps", "leakage"])
    rows = rows[np.isfinite(rows["eps"].to_numpy(float))]
    if rows.empty:
        return None
    datasets = sorted(rows["dataset"].astype(str).unique())
    styles = _styles(rows["method"].unique())
    xlabel, names = eps_labels(list(styles), _kinds(rows, rows=True))
    fig, axes = _new_figure(len(datasets), 1)
    handles: dict[str, object] = {}
    for i, ds in enumerate(datasets):
        ax = axes[i, 0]
        part = rows[rows["dataset"].astype(str) == ds]
        for method, g in part.groupby("method", sort=True):
            c, marker = styles[str(method)]
            ax.scatter(g["eps"], g["leakage"], s=8, alpha=0.3, color=c, marker=marker)
            mean = g.groupby("eps")["leakage"].mean()
            (line,) = ax.plot(mean.index, mean.to_numpy(), marker=marker, ms=4, color=c, label=names[str(method)])
            handles.setdefault(names[str(method)], line)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(_label("leakage"))
        ax.set_title(ds, fontsize=9)
    return _finish(fig, handles, "Leakage against ε (all configs)")


def default_direction(column: str) -> str:
    """"max" for accuracies and MDL (higher is better), "min" for gaps, leakage and the rest."""
    return "max" if column.endswith("accuracy") or column.endswith("mdl") else "min"


def figure_pareto_fronts(
    df: pd.DataFrame,
    pairs: Sequence[tuple[str, str]],
    directions: Mapping[str, str] | None = None,
) -> Figure | None:
    """2-D Pareto fronts per method for each objective pair (x, y), all seeds pooled.

    Every config is a faint point; the method's front under the two objectives is the
    line. ``directions`` maps a column to "min" | "max" (default: ``default_direction``).
    Pairs whose columns are missing or all NaN are skipped.
    """
    rows = ok_rows(df)
    require_columns(rows, ["dataset", "method"])
    if isinstance(pairs, tuple) and len(pairs) == 2 and all(isinstance(p, str) for p in pairs):
        pairs = [pairs]
    pairs = [tuple(p) for p in pairs]
    if any(len(p) != 2 for p in pairs):
        raise InputError("pairs: expected a list of (x column, y column) pairs")
    directions = dict(directions or {})
    pairs = [p for p in pairs if _has(rows, p[0]) and _has(rows, p[1])]
    if rows.empty or not pairs:
        return None
    datasets = sorted(rows["dataset"].astype(str).unique())
    styles = _styles(rows["method"].unique())
    names = _names(rows, rows=True)
    fig, axes = _new_figure(len(datasets), len(pairs))
    handles: dict[str, object] = {}
    for i, ds in enumerate(datasets):
        part = rows[rows["dataset"].astype(str) == ds]
        for j, (x, y) in enumerate(pairs):
            ax = axes[i, j]
            objectives = {c: directions.get(c, default_direction(c)) for c in (x, y)}
            notes = []
            for method, g in part.groupby("method", sort=True):
                c, marker = styles[str(method)]
                pts = g[[x, y]].apply(pd.to_numeric, errors="coerce").dropna()
                if pts.empty:
                    continue
                if str(method) in BASELINES and _compared(part):  # a floor: named, not plotted
                    notes.append(f"{method}: {_label(x).split(' (')[0]} {pts[x].mean():.1f}, "
                                 f"{_label(y).split(' (')[0]} {pts[y].mean():.1f} (not drawn)")
                    continue
                ax.scatter(pts[x], pts[y], s=8, alpha=0.25, color=c, marker=marker)
                front = pareto_front(pts, objectives).sort_values([x, y])
                (line,) = ax.plot(front[x], front[y], marker=marker, ms=4, color=c, label=names[str(method)])
                handles.setdefault(names[str(method)], line)
            for k, note in enumerate(notes):
                ax.text(0.01, 0.02 + 0.06 * k, note, transform=ax.transAxes, fontsize=7, va="bottom",
                        color="#555555")
            ax.set_xlabel(_label(x))
            ax.set_ylabel(_label(y))
            ax.set_title(ds, fontsize=9)
    if not handles:
        return None
    return _finish(fig, handles, "Pareto fronts (all seeds pooled)")


def figure_hypervolume_history(progress: pd.DataFrame) -> Figure | None:
    """Normalised hypervolume of each search's feasible front against its trials (what
    Optuna's ``plot_hypervolume_history`` draws), one panel per dataset, one colour per
    method; a dashed level of the same colour is the grid's front when ``progress`` has
    ``grid_hypervolume`` (``search_progress`` with grid rows)."""
    progress = as_frame(progress, "progress")
    require_columns(progress, ["dataset", "method", "seed", "trials", "hypervolume"], "progress")
    if progress.empty:
        return None
    datasets = sorted(progress["dataset"].astype(str).unique())
    styles = _styles(progress["method"].unique())
    names = _names(progress)
    fig, axes = _new_figure(len(datasets), 1)
    handles: dict[str, object] = {}
    for i, ds in enumerate(datasets):
        ax = axes[i, 0]
        part = progress[progress["dataset"].astype(str) == ds]
        for (method, _seed), g in part.groupby(["method", "seed"], sort=True):
            c, marker = styles[str(method)]
            g = g.sort_values("trials")
            (line,) = ax.plot(g["trials"], g["hypervolume"], marker=marker, ms=4, color=c, label=names[str(method)])
            handles.setdefault(names[str(method)], line)
            grid_hv = g["grid_hypervolume"].iloc[0] if "grid_hypervolume" in g.columns else np.nan
            if pd.notna(grid_hv):
                (level,) = ax.plot([g["trials"].min(), g["trials"].max()], [grid_hv, grid_hv], ls="--", color=c)
                handles.setdefault(f"{method} grid ({int(g['grid_configs'].iloc[0])} configs)", level)
        ax.set_xlabel("complete trials")
        ax.set_ylabel("hypervolume (normalised)")
        ax.set_title(ds, fontsize=9)
    return _finish(fig, handles, "Feasible-front hypervolume")


def figure_learning_curves(curves: pd.DataFrame, fairness: str = "tpr_gap", title: str | None = None
                           ) -> Figure | None:
    """Validation accuracy, the selection's gap and loss of each selected config against the
    epoch (``selected_curves``): one line per (method, seed) in the method's colour, its
    marker on the epoch whose model the config reports."""
    curves = as_frame(curves, "curves")
    fairness = check_fairness(fairness)
    require_columns(curves, ["dataset", "method", "seed", "epoch", "valid_accuracy", "valid_gap", "valid_loss",
                             "kept"], "curves")
    if curves.empty:
        return None
    metrics = [("valid_accuracy", _label("valid_accuracy")),
               ("valid_gap", f"valid {FAIRNESS_LABELS[fairness]} (%) ↓"), ("valid_loss", "valid loss (cross-entropy) ↓")]
    datasets = sorted(curves["dataset"].astype(str).unique())
    fig, axes = _new_figure(len(datasets), len(metrics))
    styles = _styles(curves["method"].unique())
    names = _names(curves)
    handles: dict[str, object] = {}
    for r, dataset in enumerate(datasets):
        part = curves[curves["dataset"].astype(str) == dataset]
        for c, (metric, label) in enumerate(metrics):
            ax = axes[r, c]
            for (method, _seed), g in part.groupby(["method", "seed"], sort=True):
                style = styles[str(method)]
                g = g.sort_values("epoch")
                (line,) = ax.plot(g["epoch"], g[metric], color=style.color, lw=1, alpha=0.7)
                handles.setdefault(names[str(method)], line)
                kept = g[g["kept"].astype(bool)]
                ax.plot(kept["epoch"], kept[metric], ls="none", marker=style.marker, color=style.color, ms=5)
            ax.set_xlabel("epoch")
            ax.set_ylabel(label)
            if len(datasets) > 1:
                ax.set_title(dataset)
    return _finish(fig, handles, title or "Validation curves of the selected configs",
                   "one line per seed; marker: the epoch whose model the row reports")


def save_png(fig: Figure, path: PathLike) -> Path:
    """Write ``fig`` as a PNG at ``path`` atomically (hidden temp file, then os.replace)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    return path


def _write(fig: Figure | None, path: PathLike) -> Path | None:
    return None if fig is None else save_png(fig, path)


def plot_rt_sweep(sweep: pd.DataFrame, path: PathLike, fairness: str = "tpr_gap") -> Path | None:
    """Write ``figure_rt_sweep`` as a PNG at ``path``; None (nothing written) if empty."""
    return _write(figure_rt_sweep(sweep, fairness), path)


def plot_fairness_accuracy_bins(bins: pd.DataFrame, path: PathLike, fairness: str = "tpr_gap") -> Path | None:
    """Write ``figure_fairness_accuracy_bins`` as a PNG at ``path``; None if empty."""
    return _write(figure_fairness_accuracy_bins(bins, fairness), path)


def plot_privacy_accuracy(by_eps: pd.DataFrame, path: PathLike) -> Path | None:
    """Write ``figure_privacy_accuracy`` as a PNG at ``path``; None if no method has eps."""
    return _write(figure_privacy_accuracy(by_eps), path)


def plot_violation_accuracy_by_eps(table: pd.DataFrame, path: PathLike) -> Path | None:
    """Write ``figure_violation_accuracy_by_eps`` as a PNG at ``path``; None if nothing has eps."""
    return _write(figure_violation_accuracy_by_eps(table), path)


def plot_leakage_vs_eps(df: pd.DataFrame, path: PathLike) -> Path | None:
    """Write ``figure_leakage_vs_eps`` as a PNG at ``path``; None if no method has eps."""
    return _write(figure_leakage_vs_eps(df), path)


def plot_pareto_fronts(
    df: pd.DataFrame,
    path: PathLike,
    pairs: Sequence[tuple[str, str]],
    directions: Mapping[str, str] | None = None,
) -> Path | None:
    """Write ``figure_pareto_fronts`` as a PNG at ``path``; None if no pair can be drawn."""
    return _write(figure_pareto_fronts(df, pairs, directions), path)


def plot_learning_curves(curves: pd.DataFrame, path: PathLike, fairness: str = "tpr_gap",
                         title: str | None = None) -> Path | None:
    """Write ``figure_learning_curves`` as a PNG at ``path``; None if there are no curves."""
    return _write(figure_learning_curves(curves, fairness, title), path)


def plot_hypervolume_history(progress: pd.DataFrame, path: PathLike) -> Path | None:
    """Write ``figure_hypervolume_history`` as a PNG at ``path``; None if there is no history."""
    return _write(figure_hypervolume_history(progress), path)
