"""Trade-off figures of FEDERATE sec. 5 as PNG files (matplotlib, Agg backend).

Each ``figure_*`` function builds a ``matplotlib.figure.Figure`` or returns None when there
is nothing to plot; each ``plot_*`` function builds the same figure and writes it as a PNG
(atomically: hidden temp file in the same folder, then rename), returning the path, or None
without writing anything.

Layout, for any number of series (a report grouped by ``--by fairness_notion,eps`` draws
about 90 in its RT sweep):

- Small multiples: a panel per dataset, per neighbouring relation of an ε figure (methods
  whose guarantees convert to no common relation are drawn apart, ``_rows.with_compared_eps``)
  and, where the table has a second key, per value of its first key (a fairness notion: the ``by`` columns, or a method label's bracket, "pfld
  [dp]"); a method without that key (NaN) is drawn in every such panel. A panel draws at
  most ``SERIES_PER_PANEL`` series: the rest go to further panels, a method's series kept
  together where they fit. Panels of one dataset and metric share their axes. Several
  metrics make a row of panels per panel group; one metric wraps its panels into rows of
  ``PANEL_COLUMNS``.
- One colour per method (``method_style``: distinct hues within a study); the values of a
  further key (the ``by`` columns after the first, e.g. eps) a marker and line style each
  (``variant_style``), the same in every panel.
- One legend for the figure, below the panels, in as many columns as fit the figure's
  width, the figure grown to hold it: it never covers a title or a panel.
- Error bars (``error_bars``): the t-interval of the mean over seeds, ± 1 std, a bootstrap
  over seeds, or none (``fairdp.analysis._error_bars``); every title says which.
- Every ε axis is logarithmic, with plain decimal labels at the ε values the figure holds,
  as many as fit the panel's width (``_EpsTicks``): "0.1 0.5 1 2 5 10", never "3×10⁰". It is
  the ε of one relation, the panel's: a method of another kind is drawn at its ε converted to
  it (DP-SGD's add/remove ε at 2ε), and the axis label says which were converted.
- Baselines (``BASELINES``: the random classifier) never set the axes: a level, a marker at
  the axis's edge or a note, drawn after the compared methods fixed the limits.

Figures are drawn on ``Figure`` objects with an explicit Agg canvas, never through pyplot:
nothing global (the pyplot figure list, the user's interactive backend) is touched, no
display is needed, and there are no figures to close.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import rcParams
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, Locator, MaxNLocator, NullLocator

from fairdp._atomic import atomic_path
from fairdp.analysis._error_bars import (
    bar_extents,
    check_error_bars,
    error_bars_text,
    note_few_seeds,
)
from fairdp.analysis._pareto import pareto_front
from fairdp.analysis._predictions import majority_group_share
from fairdp.analysis._rows import (
    COMPARED_IN,
    EPS_COMPARED,
    as_frame,
    check_fairness,
    config_keys,
    default_direction,
    eps_labels,
    guarantees_by_method,
    kind_labels,
    kind_of,
    ok_rows,
    require_columns,
    with_compared_eps,
)
from fairdp.analysis._style import method_style, variant_style
from fairdp.analysis._tables import FAIRNESS_LABELS, by_cell
from fairdp.errors import InputError
from fairdp.schema import GUARANTEE

PathLike = str | os.PathLike

SERIES_PER_PANEL = 8  # the most series one panel draws; more go to further panels
PANEL_COLUMNS = 3     # a one-metric figure wraps its panels into rows of this many
PANEL_WIDTH, PANEL_HEIGHT = 3.6, 2.8  # inches per panel, before the legend and title
LEGEND_COLUMNS = 4    # the most columns a legend takes, fewer where they would not fit
FIGURE_ERROR_BARS = "t"  # the figure functions' default (the report's is _error_bars.DEFAULT_ERROR_BARS)

# Methods that are floors, not contenders: a random classifier's 50% accuracy would stretch
# every accuracy axis and squeeze the methods compared into a sliver. They are drawn as
# reference levels, markers at the axis edge or notes, after the compared methods set the axes.
BASELINES = frozenset({"random"})
_NOTE_STYLE = {"fontsize": 7, "color": "#444444",
               "bbox": {"boxstyle": "square,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.8}}


def base_method(label: str) -> str:
    """The method a series label names: "pfld [dp]" (a view's label of pfld) -> "pfld"."""
    return str(label).split(" [", 1)[0]


def _bracket(label: str) -> str:
    label = str(label)
    base = base_method(label)
    return label[len(base) + 2:-1] if label != base and label.endswith("]") else ""


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA


def _base_kinds(table: pd.DataFrame, rows: bool = False) -> dict[str, str | None] | None:
    """Each base method's guarantee kind as ``table`` records it: every row's (``rows``:
    result rows) or an aggregate's ``guarantee`` column; None where the table has none
    (the registry's kinds are used). A view's labels ("pfld [dp]") count as their method."""
    if rows:
        found = guarantees_by_method(table) if len(table) else {}
    elif GUARANTEE in table.columns:
        found = {str(m): kind_of(k) for m, k in zip(table["method"], table[GUARANTEE])}
    else:
        return None
    out: dict[str, str | None] = {}
    for label, kind in found.items():
        if out.get(base_method(label)) is None:
            out[base_method(label)] = kind
    return out


def _names(table: pd.DataFrame, rows: bool = False) -> dict[str, str]:
    """Each base method's legend label: its name and its guarantee's kind (``kind_labels``)."""
    methods = sorted({base_method(m) for m in table["method"].astype(str)})
    return kind_labels(methods, _base_kinds(table, rows))


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


# --- which series go in which panel ---------------------------------------------------


@dataclass
class _Series:
    method: str    # the base method: the series' colour
    variant: str   # the further key's value ("eps 0.5"), "" where the figure has none
    rows: pd.DataFrame


@dataclass
class _Panel:
    dataset: str
    facet: str  # the first key's value ("fairness_notion dp"), "" where the figure has none
    title: str
    series: list[_Series]
    baselines: pd.DataFrame  # BASELINES' rows of this panel's dataset and facet: references, not series
    relation: str = ""  # the neighbouring relation of the panel's ε ("" where the figure draws none apart)


@dataclass
class _Plan:
    panels: list[_Panel]
    methods: list[str]                 # base methods drawn as series, sorted
    variants: list[str]                # the further key's values, in order (their styles' order)
    variant_key: str                   # what the variants are values of ("eps"), "" for none
    baseline_methods: list[str] = field(default_factory=list)

    def style_of(self, s: _Series) -> tuple[str, str, str]:
        """(colour, marker, line style) of a series: the method's colour; the method's marker
        where the figure has no variants, else the variant's marker and line style."""
        st = method_style(s.method)
        if not self.variants:
            return st.color, st.marker, "-"
        vs = variant_style(self.variants.index(s.variant))
        return st.color, vs.marker, vs.linestyle


def _chunks(groups: list[list[_Series]], cap: int) -> list[list[_Series]]:
    """Series packed into panels of at most ``cap``: each method's series (a group) go into
    the first panel with room for all of them (first fit, so small groups fill the gaps big
    ones leave), else a new one; a method with more than ``cap`` is split evenly over panels
    of its own."""
    out: list[list[_Series]] = []
    for group in groups:
        if len(group) > cap:
            parts = math.ceil(len(group) / cap)
            size = math.ceil(len(group) / parts)
            out.extend(group[i:i + size] for i in range(0, len(group), size))
            continue
        room = next((chunk for chunk in out if len(chunk) + len(group) <= cap), None)
        if room is None:
            out.append(list(group))
        else:
            room.extend(group)
    return out


def _plan(table: pd.DataFrame, by: Sequence[str] = (), cap: int = SERIES_PER_PANEL,
          apart: str | None = None) -> _Plan:
    """The panels of ``table``: per dataset, value of the ``apart`` column (a neighbouring
    relation: ε of different relations never share an axis) and value of the first key (the
    first ``by`` column, else a method label's bracket), series per (method, further keys'
    values), at most ``cap`` a panel. Rows whose ``apart`` value or first key is missing (a
    method without ε, drawn as a level) are drawn in every panel of their dataset, beyond the
    cap;
    ``BASELINES`` are references of each panel unless they are all there is."""
    t = table.reset_index(drop=True).copy()
    t["_apart"] = ["" if apart is None or _missing(v) else str(v)
                   for v in (t[apart] if apart is not None and apart in t.columns else [None] * len(t))]
    labels = t["method"].astype(str)
    t["_method"] = labels.map(base_method)
    by = [k for k in by if k in t.columns]
    if by:
        t["_facet"] = ["" if _missing(v) else f"{by[0]} {by_cell(v)}" for v in t[by[0]]]
        rest = by[1:]
        t["_variant"] = ([", ".join(f"{k} {'none' if _missing(v) else by_cell(v)}" for k, v in zip(rest, vals))
                          for vals in t[rest].itertuples(index=False)] if rest else "")
        order = t.sort_values(rest, na_position="last", kind="mergesort")["_variant"] if rest else t["_variant"]
    else:
        t["_facet"] = labels.map(_bracket)
        t["_variant"] = ""
        rest, order = [], t["_variant"]
    variants = [v for v in dict.fromkeys(order) if v]
    is_baseline = t["_method"].isin(BASELINES)
    panels: list[_Panel] = []
    drawn: set[str] = set()
    for ds in sorted(t["dataset"].astype(str).unique()):
        in_ds = t[t["dataset"].astype(str) == ds]
        relations = sorted(r for r in in_ds["_apart"].unique() if r) or [""]
        for r_i, relation in enumerate(relations):
            part = in_ds[(in_ds["_apart"] == relation) | (in_ds["_apart"] == "")]
            facets = sorted(f for f in part["_facet"].unique() if f) or [""]
            for facet in facets:
                rows = part[(part["_facet"] == facet) | (part["_facet"] == "")]
                base = is_baseline.loc[rows.index]
                compared, references = (rows[~base], rows[base]) if (~base).any() else (rows, rows.iloc[0:0])
                groups, levels = [], []
                for method, m_rows in compared.groupby("_method", sort=True):
                    drawn.add(str(method))
                    by_variant = {v: g for v, g in m_rows.groupby("_variant", sort=False)}
                    series = [_Series(str(method), v, by_variant[v]) for v in ([""] if "" in by_variant else [])
                              + [v for v in variants if v in by_variant]]
                    # a method outside every relation (no ε) is a level of each panel, not a series
                    # to pack: packed, it could fill a panel of its own with no ε axis to draw on
                    (levels if relation and (m_rows["_apart"] == "").all() else groups).append(series)
                chunks = [chunk + [s for level in levels for s in level] for chunk in _chunks(groups, cap) or [[]]]
                for k, chunk in enumerate(chunks):
                    # several relations: each panel says which of them its ε axis is (the axis names it)
                    title = (ds + (f", ε relation {r_i + 1} of {len(relations)}" if len(relations) > 1 else "")
                             + (f", {facet}" if facet else "") + (f" ({k + 1} of {len(chunks)})" if len(chunks) > 1 else ""))
                    panels.append(_Panel(ds, facet, title, chunk, references, relation))
    return _Plan(panels, sorted(drawn), variants, ", ".join(rest),
                 sorted(set(t.loc[is_baseline, "_method"]) - drawn))


# --- figure, grid and legend ---------------------------------------------------------------


def _grid(plan: _Plan, n_metrics: int) -> tuple[Figure, list[list]]:
    """A figure and its axes, ``axes[panel][metric]``: a row per panel with a column per
    metric, or, for one metric, the panels wrapped into rows of ``PANEL_COLUMNS``. Panels of
    one dataset share each metric's axes."""
    n = len(plan.panels)
    if n_metrics > 1:
        nrows, ncols = n, n_metrics
        cells = [[(p, m) for m in range(n_metrics)] for p in range(n)]
    else:
        ncols = min(n, PANEL_COLUMNS)
        nrows = math.ceil(n / ncols)
        cells = [[divmod(p, ncols)] for p in range(n)]
    fig = Figure(figsize=(PANEL_WIDTH * ncols + 0.3, PANEL_HEIGHT * nrows + 0.3), layout="constrained", dpi=100)
    FigureCanvasAgg(fig)
    grid = fig.subplots(nrows, ncols, squeeze=False)
    used = {cell for row in cells for cell in row}
    for r in range(nrows):
        for c in range(ncols):
            if (r, c) not in used:
                fig.delaxes(grid[r][c])
    axes = [[grid[r][c] for r, c in row] for row in cells]
    # x (RT, ε, accuracy) means the same in every panel of a dataset and relation (ε of two
    # relations are different quantities); y can be each notion's own violation, so it is
    # shared among the panels of one facet only
    first_x: dict[tuple, object] = {}
    first_y: dict[tuple, object] = {}
    for p, panel in enumerate(plan.panels):
        for m, ax in enumerate(axes[p]):
            for first, key, share in ((first_x, (panel.dataset, panel.relation, m), ax.sharex),
                                      (first_y, (panel.dataset, panel.facet, m), ax.sharey)):
                lead = first.setdefault(key, ax)
                if lead is not ax:
                    share(lead)
    return fig, axes


def _legend_groups(plan: _Plan, names: Mapping[str, str], extra: Mapping[str, object]) -> list[list[tuple]]:
    """The legend's entries in groups, (handle, label) each: the methods in their colours
    (and markers, where the figure has no variants); the variants' markers and line styles in
    grey; the references and other extra entries."""
    methods = []
    for method in plan.methods:
        st = method_style(method)
        methods.append((Line2D([], [], color=st.color, marker=None if plan.variants else st.marker, ms=5, lw=1.5),
                        names.get(method, method)))
    variants = []
    for k, variant in enumerate(plan.variants):
        vs = variant_style(k)
        variants.append((Line2D([], [], color="#555555", marker=vs.marker, ls=vs.linestyle, ms=5, lw=1.2), variant))
    return [g for g in (methods, variants, [(h, label) for label, h in extra.items()]) if g]


def _finish(fig: Figure, plan: _Plan, names: Mapping[str, str], title: str, bars: str | None = None,
            extra: Mapping[str, object] | None = None) -> Figure:
    """The title, saying what the bars are, and one legend below the panels. Legend labels
    name each method's guarantee kind (what its ε protects), so that methods of different
    kinds are never read as alike; ``extra`` adds entries (references, grid levels)."""
    suptitle = fig.suptitle(f"{title}\n({bars})" if bars else title)
    legend_title = "colour: method (guarantee)" + (f"; marker and line: {plan.variant_key}" if plan.variants else "")
    _place_legend(fig, _legend_groups(plan, names, dict(extra or {})), legend_title)
    # a one-panel figure is narrower than a long title: widen it to hold the title
    width = suptitle.get_window_extent(fig.canvas.get_renderer()).width
    if width > 0.96 * fig.bbox.width:
        fig.set_figwidth(width / 0.96 / fig.dpi)
    return fig


def _place_legend(fig: Figure, groups: list[list[tuple]], title: str) -> None:
    """One legend below the panels ("outside lower center": constrained layout keeps it off
    every panel and title). Each group of entries fills whole columns of its own (blank
    entries pad a group's last column), so methods and variants never share a column; the
    legend takes the fewest rows whose columns (at most ``LEGEND_COLUMNS``) fit the figure's
    width. The figure grows by the legend's height, so the panels keep theirs, and widens
    where even one column per group would not fit."""
    if not groups:
        return
    renderer = fig.canvas.get_renderer()
    usable = 0.96 * fig.bbox.width
    blank = (Line2D([], [], alpha=0.0), "")
    tallest = max(len(g) for g in groups)
    tried: set[int] = set()
    for rows in range(1, tallest + 1):
        columns = [math.ceil(len(g) / rows) for g in groups]
        if (sum(columns) > LEGEND_COLUMNS or sum(columns) in tried) and rows < tallest:
            continue  # too many columns, or as many as a shorter legend that did not fit
        tried.add(sum(columns))
        # a legend fills its columns top to bottom: pad each group to whole columns
        entries = [e for g, c in zip(groups, columns) for e in g + [blank] * (c * rows - len(g))]
        legend = fig.legend([h for h, _ in entries], [label for _, label in entries], loc="outside lower center",
                            ncols=sum(columns), title=title, fontsize=9, title_fontsize=9)
        box = legend.get_window_extent(renderer)
        if box.width <= usable or rows == tallest:
            break
        legend.remove()
    if box.width > usable:
        fig.set_figwidth(box.width / 0.96 / fig.dpi)
    fig.set_figheight(fig.get_figheight() + box.height / fig.dpi + 0.1)


def legend_labels(fig: Figure) -> list[str]:
    """The labels in a figure's legend, in legend order: each method's name and its
    guarantee's kind, "federate (local, replace one record's representation)", then the
    values of a further key ("eps 0.5") and any references."""
    return [t.get_text() for legend in fig.legends for t in legend.get_texts() if t.get_text()]


# --- axes ---------------------------------------------------------------------------------


class _EpsTicks(Locator):
    """Ticks at the ε values a figure holds, as many as fit: from the smallest up, a value
    is kept where its label clears the last kept one's at the axis's width in pixels
    (log-scale defaults label 3, 4, ... as "3×10⁰4×10⁰", run together)."""

    def __init__(self, values):
        self.values = sorted({float(v) for v in values if np.isfinite(v)})

    def __call__(self):
        return self.tick_values(*self.axis.get_view_interval())

    def tick_values(self, vmin, vmax):
        lo, hi = sorted((vmin, vmax))
        inside = [v for v in self.values if lo <= v <= hi]
        axes = getattr(self.axis, "axes", None)
        if axes is None or len(inside) < 2:
            return inside
        size = FontProperties(size=rcParams["xtick.labelsize"]).get_size_in_points() * axes.figure.dpi / 72
        where = axes.transData.transform(np.column_stack([inside, np.ones(len(inside))]))[:, 0]
        kept, last = [], None
        for v, x in zip(inside, where):
            half = 0.33 * size * len(f"{v:g}")  # half a label's width: about 0.66 em a digit
            if last is None or x - half >= last + 0.5 * size:
                kept.append(v)
                last = x + half
        return kept


def _eps_axis(ax, values) -> None:
    """The one ε axis of every figure: logarithmic (linear where some ε is not positive),
    ticks at the ε values present (``_EpsTicks``), labelled as plain decimals, no minor ticks."""
    values = [float(v) for v in values if np.isfinite(v)]
    ax.set_xscale("log" if values and min(values) > 0 else "linear")
    ax.xaxis.set_major_locator(_EpsTicks(values))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())


def _dodge(keys, width: float) -> dict:
    """A small x offset per series, centred on zero and within a third of ``width`` (the
    spacing of the x values): series with equal values at one x are drawn side by side
    instead of one hiding the other."""
    keys = list(keys)
    if len(keys) < 2:
        return {k: 0.0 for k in keys}
    step = width / 3 / (len(keys) - 1)
    return {k: (i - (len(keys) - 1) / 2) * step for i, k in enumerate(keys)}


def _reference_levels(ax, baselines: pd.DataFrame, column: str, names: Mapping[str, str]) -> dict[str, object]:
    """Each baseline's mean of ``column`` as a dashed level, drawn once the compared methods
    set the axis: a level inside their range is a line; one outside is a note at the edge of
    the axis giving its value, and the axis keeps the compared methods' range. Returns the
    legend entries of the levels drawn."""
    entries: dict[str, object] = {}
    if baselines.empty or column not in baselines.columns:
        return entries
    ax.autoscale_view()
    lo, hi = ax.get_ylim()
    notes = 0
    for method, g in baselines.groupby(baselines["method"].astype(str).map(base_method), sort=True):
        value = pd.to_numeric(g[column], errors="coerce").mean()
        if pd.isna(value):
            continue
        color = method_style(method).color
        if lo <= value <= hi:
            ax.axhline(value, ls="--", lw=1, color=color, label=f"_reference {method}")
            entries[f"{names.get(method, method)}, reference"] = Line2D([], [], ls="--", lw=1, color=color)
        else:
            where, y = ("below", 0.02) if value < lo else ("above", 0.98)
            ax.text(0.01, y + (0.08 * notes if where == "below" else -0.08 * notes),
                    f"{method}: {value:.1f} ({where} the axis)", transform=ax.transAxes,
                    va="bottom" if where == "below" else "top", **{**_NOTE_STYLE, "color": color})
            notes += 1
    ax.set_ylim(lo, hi)
    return entries


def _edge_references(ax, baselines: pd.DataFrame, x: str, column: str, ylabel: str,
                     names: Mapping[str, str]) -> dict[str, object]:
    """Baselines of a figure whose x is itself a result (an accuracy interval): their points
    are drawn where they fall inside the compared methods' axes, else as markers on the
    axis's edge at their height with a note giving their values; the limits stay the
    compared methods'."""
    entries: dict[str, object] = {}
    if baselines.empty:
        return entries
    ax.autoscale_view()
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    notes = 0
    for method, g in baselines.groupby(baselines["method"].astype(str).map(base_method), sort=True):
        xs = pd.to_numeric(g[x], errors="coerce").to_numpy(float)
        ys = pd.to_numeric(g[column], errors="coerce").to_numpy(float)
        keep = np.isfinite(xs) & np.isfinite(ys)
        xs, ys = xs[keep], ys[keep]
        if not len(xs):
            continue
        st = method_style(method)
        inside = (xs >= x0) & (xs <= x1)
        ax.plot(xs[inside], ys[inside], ls="none", marker=st.marker, color=st.color, ms=5, label=f"_reference {method}")
        if (~inside).any():
            left = xs[~inside] < x0
            edge = np.where(left, 0.0, 1.0)
            ax.plot(edge, np.clip(ys[~inside], y0, y1), ls="none", marker=st.marker, color=st.color, ms=6,
                    transform=ax.get_yaxis_transform(), clip_on=False, label=f"_reference {method}")
            side = "left" if left.all() else "right" if (~left).all() else "either side"
            ax.text(0.02 if side != "right" else 0.98, 0.98 - 0.14 * notes,
                    f"{method} (off the axis, {side}): valid accuracy\n{_span(xs[~inside], 'g')}, "
                    f"{ylabel} {_span(ys[~inside], '.1f')}",
                    transform=ax.transAxes, va="top", ha="left" if side != "right" else "right",
                    **{**_NOTE_STYLE, "color": st.color})
            notes += 1
        entries[f"{names.get(method, method)}, at the axis edge where off it"] = Line2D(
            [], [], ls="none", marker=st.marker, color=st.color)
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    return entries


def _span(values: np.ndarray, fmt: str) -> str:
    lo, hi = float(np.min(values)), float(np.max(values))
    return f"{lo:{fmt}}" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}}-{hi:{fmt}}"


def _bar_mode(table: pd.DataFrame, error_bars: str) -> str:
    """The bars a table can have: a t-interval needs seed counts (± 1 std without them)."""
    error_bars = check_error_bars(error_bars)
    return "std" if error_bars == "t" and "n_seeds" not in table.columns else error_bars


def _bars_title(table: pd.DataFrame, mode: str, level: float, notes: list[str] | None = None) -> str:
    counts = table["n_seeds"].dropna().astype(int).tolist() if "n_seeds" in table.columns else []
    ran = table["seeds_run"].dropna().astype(int).tolist() if "seeds_run" in table.columns else []
    note_few_seeds(mode, counts, notes)
    return error_bars_text(mode, level, counts, ran)


# --- curves: a mean per x, with error bars -------------------------------------------------


def _curves(table: pd.DataFrame, x: str, metrics: Sequence[tuple[str, str]], xlabel: str | Mapping, title: str,
            names: Mapping[str, str] | None = None, by: Sequence[str] = (), error_bars: str = FIGURE_ERROR_BARS,
            level: float = 95.0, dodge: bool = False, eps: bool = False, gaps: bool = False,
            edge_baselines: bool = False, notes: list[str] | None = None) -> Figure:
    """Panels (``_plan``) x ``metrics`` ((column stem, y label)): each series'
    ``<metric>_mean`` against ``x`` with its error bars. ``dodge``: series with equal values
    at one x drawn side by side; ``eps``: x is ε (``_eps_axis``), a series without one a
    dashed level across the figure's ε range, panels apart per relation (the table's
    ``COMPARED_IN``; ``xlabel`` then maps each relation to its axis label); ``gaps``: x is an
    integer interval, missing ones break the line; ``edge_baselines``: baselines as markers at
    the axis edge (an x that is itself a result), else as levels. A note on the bars goes to
    ``notes`` (``note``)."""
    mode = _bar_mode(table, error_bars)
    bars = _bars_title(table, mode, level, notes)
    plan = _plan(table, by, apart=COMPARED_IN if eps else None)
    names = dict(names or _names(table))
    fig, axes = _grid(plan, len(metrics))
    xs_all = pd.to_numeric(table[x], errors="coerce").to_numpy(float)
    xs_all = np.unique(xs_all[np.isfinite(xs_all)])
    spacing = float(np.diff(xs_all).min()) if len(xs_all) > 1 else 1.0
    extra: dict[str, object] = {}
    for p, panel in enumerate(plan.panels):
        shift = _dodge([(s.method, s.variant) for s in panel.series], spacing) if dodge else {}
        # an ε panel's range and ticks are its relation's values: another relation's ε is not on its axis
        own = xs_all
        if eps and panel.relation:
            own = pd.to_numeric(pd.concat([s.rows[x] for s in panel.series]), errors="coerce").to_numpy(float)
            own = np.unique(own[np.isfinite(own)])
        for m, (metric, ylabel) in enumerate(metrics):
            ax = axes[p][m]
            for s in panel.series:
                color, marker, ls = plan.style_of(s)
                label = names.get(s.method, s.method) + (f" [{s.variant}]" if s.variant else "")
                g = s.rows.assign(**{x: pd.to_numeric(s.rows[x], errors="coerce")}).sort_values(x)
                if eps and g[x].isna().all():  # not private: a level across the ε range
                    if len(own):
                        ax.hlines(g[f"{metric}_mean"].iloc[0], own.min(), own.max(), colors=[color],
                                  linestyles="dashed", label=label)
                    continue
                g = g[g[x].notna()]
                if gaps and len(g):  # an interval no config reached breaks the line: no point, not a zero
                    g = g.set_index(x)
                    g = g.reindex(range(int(g.index.min()), int(g.index.max()) + 1)).rename_axis(x).reset_index()
                ax.errorbar(g[x] + shift.get((s.method, s.variant), 0.0), g[f"{metric}_mean"],
                            yerr=bar_extents(g, metric, mode, level), marker=marker, ls=ls, ms=4, capsize=2,
                            color=color, label=label)
            ax.set_xlabel(_axis_label(xlabel, panel))
            ax.set_ylabel(ylabel)
            ax.set_title(panel.title, fontsize=9)
            if eps:
                _eps_axis(ax, own)
    # references once every panel's series are drawn: the shared axes' limits are final
    for p, panel in enumerate(plan.panels):
        for m, (metric, _ylabel) in enumerate(metrics):
            if edge_baselines:
                extra.update(_edge_references(axes[p][m], panel.baselines.assign(
                    **{x: pd.to_numeric(panel.baselines[x], errors="coerce")}), x, f"{metric}_mean",
                    _label(metric).split(" (")[0], names))
            else:
                extra.update(_reference_levels(axes[p][m], panel.baselines, f"{metric}_mean", names))
    return _finish(fig, plan, names, title, bars, extra)


def _axis_label(xlabel: str | Mapping, panel: _Panel) -> str:
    """A panel's x label: ``xlabel``, or its entry for the panel's relation."""
    if isinstance(xlabel, str):
        return xlabel
    return xlabel.get(panel.relation or None, xlabel.get(None, "ε"))


def _in_one_relation(table: pd.DataFrame, kinds: dict | None) -> pd.DataFrame:
    """``table`` with ``eps`` the ε each row is compared at (``with_compared_eps``): in its
    relation, converted where its kind is another; ``COMPARED_IN`` sets its panels apart."""
    out = with_compared_eps(table, kinds)
    return out.assign(eps=out[EPS_COMPARED])


def figure_rt_sweep(sweep: pd.DataFrame, fairness: str = "tpr_gap", by: Sequence[str] = (),
                    error_bars: str = FIGURE_ERROR_BARS, level: float = 95.0, *,
                    notes: list[str] | None = None) -> Figure | None:
    """FEDERATE Figure 2: valid accuracy, valid fairness and leakage against RT, the
    validation metrics the selection reads (the report's tables under it give the test
    metrics). ``by``: the sweep's report-by columns (a panel per value of the first, a
    marker per value of the rest). Intervals over fewer than 3 seeds are warned about
    (appended to ``notes`` instead, when a list is given), as in every figure with error bars."""
    sweep = as_frame(sweep, "sweep")
    fairness = check_fairness(fairness)
    require_columns(sweep, ["dataset", "method", "rt"], "sweep")
    metrics = [m for m in ("valid_accuracy", f"valid_{fairness}", "leakage") if _has(sweep, f"{m}_mean")]
    if sweep.empty or not metrics:
        return None
    return _curves(sweep, "rt", [(m, _label(m)) for m in metrics], "relaxation threshold (points)",
                   "Selection by relaxation threshold: validation metrics", by=by, error_bars=error_bars,
                   level=level, dodge=True, notes=notes)


def figure_fairness_accuracy_bins(bins: pd.DataFrame, fairness: str = "tpr_gap",
                                  error_bars: str = FIGURE_ERROR_BARS, level: float = 95.0, *,
                                  notes: list[str] | None = None) -> Figure | None:
    """FEDERATE Figure 3: best valid fairness per 1-point valid-accuracy interval.

    Intervals that no config reached are gaps in the line (no point), not zeros. A baseline
    (the random classifier, near 50% accuracy) does not set the axes: it is a marker on the
    axis's edge with a note giving its values."""
    bins = as_frame(bins, "bins")
    fairness = check_fairness(fairness)
    col = f"valid_{fairness}"
    require_columns(bins, ["dataset", "method", "accuracy_bin", f"{col}_mean", f"{col}_std"], "bins")
    if bins.empty:
        return None
    return _curves(bins, "accuracy_bin", [(col, f"best {_label(col)}")], "valid accuracy interval (%)",
                   "Fairness-accuracy trade-off", error_bars=error_bars, level=level, dodge=True, gaps=True,
                   edge_baselines=True, notes=notes)


def figure_privacy_accuracy(by_eps: pd.DataFrame, error_bars: str = FIGURE_ERROR_BARS,
                            level: float = 95.0, *, notes: list[str] | None = None) -> Figure | None:
    """FEDERATE Figure 4: test accuracy and leakage of the best-accuracy config per eps."""
    by_eps = as_frame(by_eps, "by_eps")
    require_columns(by_eps, ["dataset", "method", "eps"], "by_eps")
    metrics = [m for m in ("test_accuracy", "leakage") if _has(by_eps, f"{m}_mean")]
    if by_eps.empty or not metrics:
        return None
    kinds = _base_kinds(by_eps)
    xlabel, names = eps_labels(sorted({base_method(m) for m in by_eps["method"].astype(str)}), kinds)
    return _curves(_in_one_relation(by_eps, kinds), "eps", [(m, _label(m)) for m in metrics], xlabel,
                   "Privacy-accuracy trade-off (best valid accuracy per ε)", names, error_bars=error_bars,
                   level=level, eps=True, notes=notes)


def figure_violation_accuracy_by_eps(table: pd.DataFrame, error_bars: str = FIGURE_ERROR_BARS,
                                     level: float = 95.0, *, notes: list[str] | None = None) -> Figure | None:
    """Tran et al. Figures 1-2: for each dataset and fairness notion (a row of panels), the
    test violation of that notion and the test accuracy against eps, from
    ``violation_accuracy_by_eps``. Methods without eps are dashed levels."""
    table = as_frame(table, "table")
    require_columns(table, ["dataset", "method", "fairness_notion", "eps", "test_notion_gap_mean",
                            "test_notion_gap_std", "test_accuracy_mean", "test_accuracy_std"], "table")
    eps = pd.to_numeric(table["eps"], errors="coerce")
    if table.empty or not eps.notna().any():
        return None
    kinds = _base_kinds(table)
    xlabel, names = eps_labels(sorted({base_method(m) for m in table["method"].astype(str)}), kinds)
    return _curves(_in_one_relation(table, kinds), "eps", [("test_notion_gap", "test violation of the notion (%) ↓"),
                                  ("test_accuracy", "test accuracy (%) ↑")], xlabel,
                   "Violation and accuracy against ε per fairness notion", names, by=["fairness_notion"],
                   error_bars=error_bars, level=level, eps=True, notes=notes)


# --- points: every config ------------------------------------------------------------------


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
    kinds = _base_kinds(rows, rows=True)
    rows = _in_one_relation(rows.drop(columns=[GUARANTEE], errors="ignore"), kinds)
    plan = _plan(rows, apart=COMPARED_IN)
    xlabel, names = eps_labels(plan.methods + plan.baseline_methods, kinds)
    fig, axes = _grid(plan, 1)
    extra: dict[str, object] = {}
    for p, panel in enumerate(plan.panels):
        ax = axes[p][0]
        for s in panel.series:
            color, marker, _ = plan.style_of(s)
            ax.scatter(s.rows["eps"], s.rows["leakage"], s=8, alpha=0.3, color=color, marker=marker)
            mean = s.rows.groupby("eps")["leakage"].mean()
            ax.plot(mean.index, mean.to_numpy(), marker=marker, ms=4, color=color, label=names[s.method])
        ax.set_xlabel(_axis_label(xlabel, panel))
        ax.set_ylabel(_label("leakage"))
        ax.set_title(panel.title, fontsize=9)
        _eps_axis(ax, rows["eps"].unique())
        chance = majority_group_share(ok_rows(df)[ok_rows(df)["dataset"].astype(str) == str(panel.dataset)])
        if np.isfinite(chance):  # a probe that always guesses the largest group: what no leakage looks like
            ax.axhline(chance, ls=":", lw=1.2, color="#555555", label="_chance")
            extra["chance: the largest group's share of the test rows"] = Line2D([], [], ls=":", color="#555555")
    return _finish(fig, plan, names, "Leakage against ε (all configs; line: mean per ε)", extra=extra)


def figure_pareto_fronts(
    df: pd.DataFrame,
    pairs: Sequence[tuple[str, str]],
    directions: Mapping[str, str] | None = None,
    focus: pd.DataFrame | None = None,
) -> Figure | None:
    """2-D Pareto fronts per method for each objective pair (x, y), all seeds pooled.

    Every config is a faint point; the method's front under the two objectives is the
    line. ``directions`` maps a column to "min" | "max" (default: ``default_direction``).
    Pairs whose columns are missing or all NaN are skipped. A view's labels ("pfld [dp]")
    make a panel per notion. Baselines are not drawn: a note gives their mean values.

    ``focus`` (rows of ``df``'s kind, e.g. the configs a selection picked) sets each panel's
    limits: they span the focus configs and the front points near them (within half the
    focus span beyond it), so configs that collapsed (accuracy 25% beside picks at 80-86%)
    do not squeeze what matters into a sliver. Points outside are drawn at the edge they
    pass, and a note counts them per edge. Without ``focus`` the fronts set the limits.
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
    plan = _plan(rows)
    names = _names(rows, rows=True)
    focus_keys = _focus_keys(focus)
    fig, axes = _grid(plan, len(pairs))
    drawn = False
    for p, panel in enumerate(plan.panels):
        for j, (x, y) in enumerate(pairs):
            ax = axes[p][j]
            objectives = {c: directions.get(c, default_direction(c)) for c in (x, y)}
            series = []
            for s in panel.series:
                pts = s.rows[[x, y]].apply(pd.to_numeric, errors="coerce").dropna()
                if not pts.empty:
                    series.append((s, pts, pareto_front(pts, objectives)))
            focused = [_focused(s.rows, pts, focus_keys) for s, pts, _ in series]
            limits = _focus_limits([f for f in focused if len(f)], [front for _, _, front in series], x, y)
            for s, pts, front in series:
                color, marker, _ = plan.style_of(s)
                shown = _at_edges(pts, limits, x, y)
                ax.scatter(shown[x], shown[y], s=8, alpha=0.25, color=color, marker=marker)
                ax.plot(*attainment_steps(front[x], front[y], objectives[x], objectives[y]), color=color,
                        label=names[s.method])
                at_edge = _at_edges(front, limits, x, y)
                ax.plot(at_edge[x], at_edge[y], ls="none", marker=marker, ms=4, color=color, label=names[s.method])
                drawn = True
            outside = _outside_counts([pts for _, pts, _ in series], limits, x, y) if limits is not None else []
            if outside:  # limits only where they leave points out: else the axes fit every point
                _set_limits(ax, limits)
                ax.text(0.99, 0.98, "beyond the axes, drawn at the edge: " + " ".join(outside),
                        transform=ax.transAxes, ha="right", va="top", **_NOTE_STYLE)
            notes = []
            for method, g in panel.baselines.groupby(panel.baselines["method"].astype(str).map(base_method)):
                pts = g[[x, y]].apply(pd.to_numeric, errors="coerce").dropna()
                if len(pts):  # a floor: named, not plotted
                    notes.append(f"{method}: {_label(x).split(' (')[0]} {pts[x].mean():.1f}, "
                                 f"{_label(y).split(' (')[0]} {pts[y].mean():.1f} (not drawn)")
            for k, note in enumerate(notes):
                ax.text(0.01, 0.02 + 0.08 * k, note, transform=ax.transAxes, va="bottom", **_NOTE_STYLE)
            ax.set_xlabel(_label(x))
            ax.set_ylabel(_label(y))
            ax.set_title(panel.title, fontsize=9)
    if not drawn:
        return None
    return _finish(fig, plan, names, "Pareto fronts of the configs (all seeds pooled; steps: what the method's "
                   "front attains)")


def _focus_keys(focus: pd.DataFrame | None) -> set[tuple] | None:
    """The (dataset, method label, seed, config_id) of each focus row; None without focus."""
    if focus is None or not len(focus):
        return None
    require_columns(focus, ["dataset", "method", "seed", "config_id"], "focus")
    return set(config_keys(focus))


def _focused(rows: pd.DataFrame, pts: pd.DataFrame, keys: set[tuple] | None) -> pd.DataFrame:
    """The points of ``pts`` (indexed as ``rows``) whose config is a focus config."""
    if keys is None or not {"seed", "config_id"} <= set(rows.columns):
        return pts.iloc[0:0]
    hit = [k in keys for k in config_keys(rows.loc[pts.index])]
    return pts[np.asarray(hit, dtype=bool)]


FOCUS_REACH = 0.5
"""How far beyond the focus configs' span (as a share of it) a front point still sets the limits."""


def _focus_limits(focused: list[pd.DataFrame], fronts: list[pd.DataFrame], x: str,
                  y: str) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """The panel's (x, y) limits: the focus points and the front points within ``FOCUS_REACH``
    of their span, padded by 5%; the front points alone where there is no focus point."""
    fronts = [f for f in fronts if len(f)]
    if not fronts:
        return None
    front = pd.concat(fronts)
    if focused:
        core = pd.concat(focused)
        near = np.ones(len(front), dtype=bool)
        for c in (x, y):
            lo, hi = float(core[c].min()), float(core[c].max())
            reach = max(FOCUS_REACH * (hi - lo), 0.02 * max(abs(lo), abs(hi)), 1e-9)
            near &= front[c].between(lo - reach, hi + reach).to_numpy()
        points = pd.concat([core, front[near]])
    else:
        points = front
    limits = []
    for c in (x, y):
        lo, hi = float(points[c].min()), float(points[c].max())
        pad = max(0.05 * (hi - lo), 0.01 * max(abs(lo), abs(hi)), 1e-9)
        limits.append((lo - pad, hi + pad))
    return limits[0], limits[1]


def _at_edges(pts: pd.DataFrame, limits, x: str, y: str) -> pd.DataFrame:
    """``pts`` with every coordinate outside ``limits`` moved onto the edge it passes."""
    if limits is None:
        return pts
    return pts.assign(**{c: pts[c].clip(*lim) for c, lim in zip((x, y), limits)})


EDGE_ARROWS = {"left": "←", "right": "→", "bottom": "↓", "top": "↑"}


def _outside_counts(points: list[pd.DataFrame], limits, x: str, y: str) -> list[str]:
    """"12←", "3↑": how many points lie beyond each edge (a corner point counts on both)."""
    if not points:
        return []
    pts = pd.concat(points)
    (x0, x1), (y0, y1) = limits
    counts = {"left": (pts[x] < x0).sum(), "right": (pts[x] > x1).sum(),
              "bottom": (pts[y] < y0).sum(), "top": (pts[y] > y1).sum()}
    return [f"{int(n)}{EDGE_ARROWS[edge]}" for edge, n in counts.items() if n]


def _set_limits(ax, limits) -> None:
    """``limits`` on both axes, with ticks kept off the edges (a label centred on the edge
    would reach past the panel)."""
    for axis, (lo, hi), set_lim, set_ticks in ((ax.xaxis, limits[0], ax.set_xlim, ax.set_xticks),
                                               (ax.yaxis, limits[1], ax.set_ylim, ax.set_yticks)):
        set_lim(lo, hi)
        margin = 0.04 * (hi - lo)
        ticks = [t for t in axis.get_major_locator().tick_values(lo, hi) if lo + margin <= t <= hi - margin]
        if len(ticks) >= 2:
            set_ticks(ticks)


def attainment_steps(x, y, x_direction: str, y_direction: str) -> tuple[np.ndarray, np.ndarray]:
    """The staircase through a Pareto front's points (``x``, ``y``, each objective "min" or
    "max") that bounds what the front attains: every point on the better side of it in both
    objectives is dominated by no front point, every point on the worse side is weakly
    dominated by one. Between two front points, the line holds the value the next point in
    x attains, not a straight segment (which would claim trade-offs no config reached)."""
    sx = 1.0 if x_direction == "max" else -1.0
    sy = 1.0 if y_direction == "max" else -1.0
    pts = sorted(zip(sx * np.asarray(x, float), sy * np.asarray(y, float)), key=lambda p: (p[0], -p[1]))
    xs, ys = [], []
    for i, (px, py) in enumerate(pts):  # in "max, max" terms: x rises, y falls along the front
        if i:
            xs.append(pts[i - 1][0])
            ys.append(py)
        xs.append(px)
        ys.append(py)
    return sx * np.array(xs), sy * np.array(ys)


# --- histories ---------------------------------------------------------------------------


def figure_hypervolume_history(progress: pd.DataFrame) -> Figure | None:
    """Normalised hypervolume of each search's feasible front against its trials (what
    Optuna's ``plot_hypervolume_history`` draws), a panel per dataset, one colour per
    method; a dashed level of the same colour is the grid's front when ``progress`` has
    ``grid_hypervolume`` (``search_progress`` with grid rows)."""
    progress = as_frame(progress, "progress")
    require_columns(progress, ["dataset", "method", "seed", "trials", "hypervolume"], "progress")
    if progress.empty:
        return None
    plan = _plan(progress)
    names = _names(progress)
    fig, axes = _grid(plan, 1)
    extra: dict[str, object] = {}
    for p, panel in enumerate(plan.panels):
        ax = axes[p][0]
        for s in panel.series:
            color, marker, _ = plan.style_of(s)
            for _seed, g in s.rows.groupby("seed", sort=True):
                g = g.sort_values("trials")
                ax.plot(g["trials"], g["hypervolume"], marker=marker, ms=4, color=color, label=names[s.method])
                grid_hv = g["grid_hypervolume"].iloc[0] if "grid_hypervolume" in g.columns else np.nan
                if pd.notna(grid_hv):
                    ax.plot([g["trials"].min(), g["trials"].max()], [grid_hv, grid_hv], ls="--", color=color,
                            label=f"_grid {s.method}")
                    extra.setdefault(f"{s.method} grid ({int(g['grid_configs'].iloc[0])} configs)",
                                     Line2D([], [], ls="--", color=color))
        ax.set_xlabel("complete trials")
        ax.set_ylabel("hypervolume (normalised)")
        ax.set_title(panel.title, fontsize=9)
    return _finish(fig, plan, names, "Feasible-front hypervolume", extra=extra)


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
    plan = _plan(curves)
    names = _names(curves)
    fig, axes = _grid(plan, len(metrics))
    for p, panel in enumerate(plan.panels):
        for c, (metric, label) in enumerate(metrics):
            ax = axes[p][c]
            for s in panel.series:
                color, marker, _ = plan.style_of(s)
                keys = [k for k in s.rows.columns if k in ("seed", "config_id")]
                for _key, g in s.rows.groupby(keys, sort=True):
                    g = g.sort_values("epoch")
                    ax.plot(g["epoch"], g[metric], color=color, lw=1, alpha=0.7, label=names[s.method])
                    kept = g[g["kept"].astype(bool)]
                    ax.plot(kept["epoch"], kept[metric], ls="none", marker=marker, color=color, ms=5,
                            label=names[s.method])
            ax.set_xlabel("epoch")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole
            ax.set_ylabel(label)
            ax.set_title(panel.title, fontsize=9)
    return _finish(fig, plan, names, title or "Validation curves of the selected configs",
                   "one line per seed; marker: the epoch whose model the row reports")


# --- files --------------------------------------------------------------------------------


def save_figure(fig: Figure, path: PathLike) -> Path:
    """Write ``fig`` at ``path`` atomically in the format its suffix names (png, pdf, svg)."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in ("png", "pdf", "svg"):
        raise InputError(f"{path}: a figure is written as .png, .pdf or .svg, got {path.suffix or 'no suffix'}")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt)
    return path
