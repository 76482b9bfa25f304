"""Whether a drawn figure is readable, checked as a reviewer would look at it.

``layout_problems(fig)`` lays the figure out and measures, with matplotlib's own extents
(``get_window_extent`` after ``fig.draw_without_rendering()``: the layout and every
text's size as a draw computes them, without rasterising), every piece of text it shows: the
suptitle and figure texts, each legend as a whole, each panel's title, axis labels, visible
tick labels and annotations. It lists, in words, each of these that

- reaches outside the figure (a legend cut off at the figure's edge),
- lies on a panel's data area (a legend over the plots), except an annotation inside its
  own panel, which is placed there on purpose,
- overlaps another text (a legend over the title, tick labels run together: "3×10⁰4×10⁰"),

and each panel that draws more series than ``max_series`` (a series: a distinct label among
the panel's labelled artists, what ``Axes.get_legend_handles_labels`` finds). An empty list
is a figure that passes. ``assert_readable`` raises with the list.

The report's figures are checked this way in the tests (``tests/test_analysis_figures.py``)
on synthetic results and on every committed report; run it on regenerated figures too::

    from fairdp.analysis import ReportOptions, report_figures
    from fairdp.testing.figures import assert_readable
    for name, fig in report_figures(rows, ReportOptions(**settings)).items():
        if fig is not None:
            assert_readable(fig, name=name)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

# Boxes that share less than this many pixels in both directions are taken as touching,
# not overlapping: text extents are rounded to whole pixels and glyphs leave side bearings.
TOLERANCE_PX = 1.0


@dataclass(frozen=True)
class _Box:
    what: str            # the text as a reader would name it: "y tick label '80' of panel 'adult'"
    bbox: Bbox
    axes: object | None  # the panel an annotation belongs to (None for any other text)


def _panel_name(ax) -> str:
    title = ax.get_title() or ax.get_title("left") or ax.get_title("right")
    return f"panel '{title}' ({ax.get_ylabel() or 'no y label'})" if title else \
        f"panel {ax.get_ylabel() or 'without labels'!r}"


def _visible_text(t: Text) -> bool:
    return t.get_visible() and bool(t.get_text().strip())


def _tick_labels(ax, which: str) -> list[tuple[str, Text]]:
    """The tick labels the panel shows: visible, non-empty, at a tick inside the view (a
    locator may return ticks beyond the limits, which are not drawn)."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    lo, hi = sorted(axis.get_view_interval())
    span = (hi - lo) * 1e-9
    out = []
    for minor in (False, True):
        locs = axis.get_minorticklocs() if minor else axis.get_majorticklocs()
        ticks = axis.get_minor_ticks(len(locs)) if minor else axis.get_major_ticks(len(locs))
        for loc, tick in zip(locs, ticks):
            if not (lo - span <= loc <= hi + span) or not tick.get_visible():
                continue
            for label in (tick.label1, tick.label2):
                if label.get_visible() and label.get_text().strip():
                    out.append((f"{which} tick label {label.get_text()!r} of {_panel_name(ax)}", label))
    return out


def _boxes(fig: Figure, renderer) -> list[_Box]:
    boxes: list[_Box] = []

    def add(what: str, artist, axes=None) -> None:
        bbox = artist.get_window_extent(renderer)
        if bbox.width > 0 and bbox.height > 0:
            boxes.append(_Box(what, bbox, axes))

    titles = {id(getattr(fig, name, None)) for name in ("_suptitle", "_supxlabel", "_supylabel")}
    for t in fig.texts:  # the suptitle is one of the figure's texts
        if _visible_text(t):
            add(f"figure {'title' if id(t) in titles else 'text'} {t.get_text()!r}", t)
    for legend in fig.legends:
        if legend.get_visible():
            add(f"legend {legend.get_title().get_text() or '(untitled)'!r}", legend)
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        panel = _panel_name(ax)
        for loc in ("center", "left", "right"):
            t = ax.title if loc == "center" else getattr(ax, f"_{loc}_title")
            if _visible_text(t):
                add(f"title of {panel}", t)
        for t in (ax.xaxis.label, ax.yaxis.label):
            if _visible_text(t):
                add(f"axis label {t.get_text()!r} of {panel}", t)
        for what, t in _tick_labels(ax, "x") + _tick_labels(ax, "y"):
            add(what, t)
        for t in ax.texts:
            if _visible_text(t):
                add(f"note {t.get_text()!r} in {panel}", t, axes=ax)
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            add(f"legend of {panel}", legend)
    return boxes


def _overlap(a: Bbox, b: Bbox) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > TOLERANCE_PX
            and min(a.y1, b.y1) - max(a.y0, b.y0) > TOLERANCE_PX)


def series_counts(fig: Figure) -> dict[str, int]:
    """Each panel's number of series: the distinct labels of its labelled artists (lines,
    error bars, scatters), what a legend of the panel would list."""
    return {f"{_panel_name(ax)} #{k}": len(set(ax.get_legend_handles_labels()[1]))
            for k, ax in enumerate(fig.axes)}


def layout_problems(fig: Figure, max_series: int | None = None) -> list[str]:
    """What a reader would find wrong with ``fig``'s layout, in words; [] when nothing is.

    Lays the figure out (``fig.draw_without_rendering()``), then checks every text's extent against the
    figure's, every panel's data area and every other text's, and, with ``max_series``,
    each panel's number of series.
    """
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    frame = fig.bbox
    problems: list[str] = []
    boxes = _boxes(fig, renderer)
    panels = [(ax, ax.get_window_extent(renderer)) for ax in fig.axes if ax.get_visible()]
    for ax, area in panels:
        if area.x0 < frame.x0 - TOLERANCE_PX or area.y0 < frame.y0 - TOLERANCE_PX or \
                area.x1 > frame.x1 + TOLERANCE_PX or area.y1 > frame.y1 + TOLERANCE_PX:
            problems.append(f"{_panel_name(ax)} reaches outside the figure")
    for box in boxes:
        b = box.bbox
        if b.x0 < frame.x0 - TOLERANCE_PX or b.y0 < frame.y0 - TOLERANCE_PX or \
                b.x1 > frame.x1 + TOLERANCE_PX or b.y1 > frame.y1 + TOLERANCE_PX:
            problems.append(f"{box.what} reaches outside the figure ({_px(b)} in a {frame.width:.0f} x "
                            f"{frame.height:.0f} figure)")
        for ax, area in panels:
            if box.axes is ax:
                if not _inside(b, area):
                    problems.append(f"{box.what} reaches outside its panel")
                continue
            if _overlap(b, area):
                problems.append(f"{box.what} lies on the data area of {_panel_name(ax)}")
    # every pair of texts, vectorised: a figure of many panels has hundreds of tick labels
    if len(boxes) > 1:
        e = np.array([[x.bbox.x0, x.bbox.y0, x.bbox.x1, x.bbox.y1] for x in boxes])
        w = np.minimum(e[:, None, 2], e[None, :, 2]) - np.maximum(e[:, None, 0], e[None, :, 0])
        h = np.minimum(e[:, None, 3], e[None, :, 3]) - np.maximum(e[:, None, 1], e[None, :, 1])
        hits = np.argwhere(np.triu((w > TOLERANCE_PX) & (h > TOLERANCE_PX), k=1))
        for i, j in hits:
            problems.append(f"{boxes[i].what} overlaps {boxes[j].what}")
    if max_series is not None:
        for panel, n in series_counts(fig).items():
            if n > max_series:
                problems.append(f"{panel} draws {n} series, more than {max_series}")
    return problems


def _inside(inner: Bbox, outer: Bbox) -> bool:
    return (inner.x0 >= outer.x0 - TOLERANCE_PX and inner.y0 >= outer.y0 - TOLERANCE_PX
            and inner.x1 <= outer.x1 + TOLERANCE_PX and inner.y1 <= outer.y1 + TOLERANCE_PX)


def _px(b: Bbox) -> str:
    return f"x {b.x0:.0f}..{b.x1:.0f}, y {b.y0:.0f}..{b.y1:.0f} px"


def assert_readable(fig: Figure, max_series: int | None = None, name: str = "figure", limit: int = 25) -> None:
    """Raise AssertionError listing ``layout_problems(fig, max_series)`` (the first
    ``limit`` of them) when there are any."""
    problems = layout_problems(fig, max_series)
    if problems:
        shown = "\n  ".join(problems[:limit])
        more = f"\n  ... and {len(problems) - limit} more" if len(problems) > limit else ""
        raise AssertionError(f"{name}: {len(problems)} layout problem(s):\n  {shown}{more}")
