"""The report's figures checked as a reviewer reads them (issue 40, "Figures that scale").

Every figure is drawn and measured with matplotlib's own extents
(``fairdp.testing.figures.layout_problems``): no legend or label outside the figure, on a
panel's data area or on another text, no tick labels run together, no panel with more than
``SERIES_PER_PANEL`` series. That is checked on synthetic results grouped as Tran et al.'s
reports are (``--by fairness_notion,eps``: over 90 series in the RT sweep, 18 Pareto fronts),
and on the figures of every committed report, rebuilt from its rows with its own settings.
Before this layout, pfld-adult's RT sweep put 63 series in each of two panels under a legend
taller than the figure, over its title (each of these is a problem the checker names).
"""

from __future__ import annotations

import itertools
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from matplotlib.colors import to_rgb
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure

from fairdp.analysis import (
    ReportOptions,
    bootstrap_over_seeds,
    fairness_accuracy_bins,
    figure_fairness_accuracy_bins,
    figure_privacy_accuracy,
    figure_rt_sweep,
    legend_labels,
    per_seed,
    privacy_accuracy_by_eps,
    report_figures,
    rt_sweep,
    write_report,
)
from fairdp.analysis._plots import SERIES_PER_PANEL
from fairdp.analysis._style import BUILTIN_STYLES, method_style, variant_style
from fairdp.testing.figures import assert_readable, layout_problems, series_counts
from tests.test_analysis_report import _with_random, method_of, synthetic_results

from .conftest import whole_report

pytestmark = pytest.mark.xdist_group("analysis_figures")  # one xdist worker computes the module's shared runs once

REPO = Path(__file__).resolve().parents[1]
NOTIONS = ("dp", "eo", "ap")
EPS_GRID = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)
GROUPED_METHODS = ("unconstrained", "adversarial", "noise", "federate", "fld", "pfld")


def grouped_results() -> pd.DataFrame:
    """Synthetic rows shaped like Tran et al.'s studies: every method but unconstrained run per
    fairness notion, the private ones at 8 eps each, every notion's gap measured; with
    ``--by fairness_notion,eps`` that is 158 RT-sweep series over two datasets."""
    rows = synthetic_results(methods=GROUPED_METHODS, configs=48)
    k = rows["config_id"].str[-2:].astype(int)
    private = rows["method"].isin(["noise", "federate", "pfld"])
    rows["eps"] = np.where(private, [EPS_GRID[i % len(EPS_GRID)] for i in k], np.nan)
    rows["eps_formal"] = rows["eps"].fillna(np.inf)
    notion = np.where(private, [NOTIONS[(i // len(EPS_GRID)) % 3] for i in k], [NOTIONS[i % 3] for i in k])
    rows["fairness_notion"] = np.where(rows["method"] == "unconstrained", None, notion)
    rng = np.random.default_rng(3)
    for n, shift in zip(NOTIONS, (0.0, 2.0, -1.0)):
        for split in ("valid", "test"):
            rows[f"{split}_{n}_gap"] = (rows[f"{split}_tpr_gap"] + shift + rng.normal(0, 0.5, len(rows))).clip(0)
    return rows


GROUPED = {"fairness": "notion_gap", "by": ["fairness_notion", "eps"], "rts": (0, 1, 3)}


@pytest.fixture(scope="module")
def grouped():
    return grouped_results()


@pytest.fixture(scope="module")
def grouped_figures(grouped):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return report_figures(grouped, ReportOptions(**GROUPED))


def _series_drawn(fig: Figure) -> set[str]:
    """Every series label a figure draws, over all its panels."""
    return {label for ax in fig.axes for label in ax.get_legend_handles_labels()[1]}


def test_the_grouped_case_is_as_large_as_the_reports_that_broke(grouped, grouped_figures):
    sweep = rt_sweep(grouped, (0, 1), "notion_gap", by=GROUPED["by"])
    assert len(sweep.drop_duplicates(["dataset", "method", "fairness_notion", "eps"])) >= 90
    # the Pareto fronts: one per method and notion ("pfld [dp]"), 18 per dataset
    fronts = {(ax.get_title().split(" (")[0], label) for ax in grouped_figures["pareto_fronts"].axes
              for label in ax.get_legend_handles_labels()[1]}
    assert len(fronts) == 2 * len(GROUPED_METHODS) * len(NOTIONS)


@pytest.mark.parametrize("name", ["rt_sweep", "fairness_accuracy_bins", "privacy_accuracy",
                                  "violation_accuracy_eps", "leakage_vs_eps", "pareto_fronts"])
def test_every_figure_of_a_grouped_report_is_readable(grouped_figures, name):
    fig = grouped_figures[name]
    assert fig is not None, name
    assert_readable(fig, SERIES_PER_PANEL, name=name)


def test_every_figure_of_a_report_with_a_random_baseline_is_readable(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mixed = _with_random(synthetic_results())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        figures = report_figures(mixed, ReportOptions(rts=(0, 1, 3), error_bars="t"))
    assert {k for k, f in figures.items() if f is not None} == {
        "rt_sweep", "fairness_accuracy_bins", "privacy_accuracy", "leakage_vs_eps", "pareto_fronts"}
    for name, fig in figures.items():
        if fig is not None:
            assert_readable(fig, SERIES_PER_PANEL, name=name)
    assert not list(tmp_path.iterdir())  # report_figures writes nothing


def test_the_rt_sweep_has_a_panel_per_notion_at_most_the_cap_a_panel_and_keeps_a_method_together(
        grouped_figures):
    fig = grouped_figures["rt_sweep"]
    counts = series_counts(fig)
    assert max(counts.values()) <= SERIES_PER_PANEL
    titles = {ax.get_title() for ax in fig.axes}
    for ds, notion in itertools.product(("adult", "twitter"), NOTIONS):
        assert any(t.startswith(f"{ds}, fairness_notion {notion}") for t in titles), titles
    # a method's 8 eps values are one panel's series, in its colour, a marker per eps
    for ax in fig.axes:
        labels = ax.get_legend_handles_labels()[1]
        for method in ("noise", "federate", "pfld"):
            mine = [label for label in labels if method_of(label) == method]
            assert len(mine) in (0, len(EPS_GRID)), (ax.get_title(), mine)
    # the legend lists each method once and each eps once, not every (method, eps)
    labels = legend_labels(fig)
    assert len(labels) == len(GROUPED_METHODS) + len(EPS_GRID) + 1  # + "eps none"
    assert "eps 0.1" in labels and "eps none" in labels


def test_a_series_has_its_methods_colour_and_its_eps_marker_in_every_panel(grouped_figures):
    from matplotlib.colors import to_rgba

    fig = grouped_figures["rt_sweep"]
    checked = 0
    for ax in fig.axes:
        for container in ax.containers:
            if not isinstance(container, ErrorbarContainer):
                continue
            label = container.get_label()
            line = container.lines[0]
            assert to_rgba(line.get_color()) == to_rgba(method_style(method_of(label)).color), label
            eps = label.rsplit("[eps ", 1)[1].rstrip("]")
            if eps != "none":
                style = variant_style(EPS_GRID.index(float(eps)))
                assert (line.get_marker(), line.get_linestyle()) == (style.marker, style.linestyle), label
                checked += 1
    assert checked > 90


def test_methods_of_a_study_have_clearly_different_colours():
    """FEDERATE and the noise baseline were vermillion and orange, F-LD and PF-LD teal and
    green: within every shipped study the methods' colours now differ by at least 40 in CIE
    L*a*b* (about what tells two thin lines apart at a glance)."""

    def lab(color: str) -> np.ndarray:
        rgb = np.array(to_rgb(color))
        rgb = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
        xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ rgb
        f = np.cbrt(np.maximum(xyz / np.array([0.95047, 1.0, 1.08883]), (6 / 29) ** 3))
        return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])

    def methods_of(*names: str) -> list[str]:
        return sorted({m for name in names for m in (yaml.safe_load((REPO / "studies" / name).read_text())["methods"]
                                                      or {})})

    studies = 0
    # each shipped study, and the studies reported pooled (the baselines beside PF-LD's rows)
    for names in [(path.name,) for path in sorted((REPO / "studies").glob("*.yaml"))] + [
            ("pfld_adult.yaml", "baselines_adult.yaml"), ("pfld_compas.yaml", "baselines_compas.yaml")]:
        methods = methods_of(*names)
        for a, b in itertools.combinations(methods, 2):
            distance = float(np.linalg.norm(lab(BUILTIN_STYLES[a].color) - lab(BUILTIN_STYLES[b].color)))
            assert distance >= 40, (names, a, b, round(distance, 1))
        studies += len(methods) > 1
    assert studies >= 5
    # a view's label ("pfld [dp]") has its method's style, not a hashed plugin's
    assert method_style("pfld [dp]") == method_style("pfld")
    assert len({variant_style(k) for k in range(32)}) == 32


def _tick_texts(fig: Figure, axis: str = "x") -> list[list[str]]:
    fig.canvas.draw()
    out = []
    for ax in fig.axes:
        a = ax.xaxis if axis == "x" else ax.yaxis
        lo, hi = sorted(a.get_view_interval())
        shown = [t.get_text() for loc, t in zip(a.get_majorticklocs(), a.get_majorticklabels())
                 if lo <= loc <= hi and t.get_text()]
        shown += [t.get_text() for loc, t in zip(a.get_minorticklocs(), a.get_minorticklabels())
                  if lo <= loc <= hi and t.get_text()]
        out.append(shown)
    return out


def test_every_eps_axis_is_log_scale_with_plain_labels_at_the_eps_values(grouped, grouped_figures):
    """FEDERATE's ε 8..20 on a log axis printed "3×10⁰4×10⁰"-style minor labels run together:
    every ε axis now has the same scale and labels, plain decimals at the ε values present."""
    for name in ("privacy_accuracy", "violation_accuracy_eps", "leakage_vs_eps"):
        fig = grouped_figures[name]
        assert {ax.get_xscale() for ax in fig.axes} == {"log"}, name
        for shown in _tick_texts(fig):
            assert set(shown) <= {f"{e:g}" for e in EPS_GRID} and len(shown) >= 4, (name, shown)
    federate_like = synthetic_results()
    federate_like["eps"] = federate_like["eps"].map(lambda e: e if np.isnan(e) else {1: 8, 4: 12, 8: 16, 16: 20}[e])
    fig = figure_privacy_accuracy(privacy_accuracy_by_eps(federate_like))
    for shown in _tick_texts(fig):
        assert shown == ["8", "12", "16", "20"]
    assert layout_problems(fig) == []


def test_the_random_baseline_does_not_set_the_axes_of_the_fairness_accuracy_figure(results_with_random):
    """The docs said a random classifier does not set the axes, but the bins figure drew it
    at 50% accuracy and squeezed every method into 80-85%: it is now a marker on the axis's
    edge with a note giving its values, and the axis spans the methods compared."""
    fig = figure_fairness_accuracy_bins(fairness_accuracy_bins(results_with_random), error_bars="std")
    for ax in fig.axes:
        assert ax.get_xlim()[0] > 60, ax.get_xlim()
        notes = [t.get_text() for t in ax.texts]
        assert any(n.startswith("random (off the axis, left): valid accuracy") for n in notes), notes
        edge = [line for line in ax.lines if line.get_label() == "_reference random" and len(line.get_xdata())]
        assert edge and all(x == 0.0 for line in edge for x in line.get_xdata())  # on the left edge
    assert any(label.startswith("random (not private)") for label in legend_labels(fig))
    assert layout_problems(fig) == []


@pytest.fixture(scope="module")
def results_with_random():
    return _with_random(synthetic_results())


def _bar_spans(fig: Figure, method: str) -> list[tuple[float, float]]:
    """The (low, high) of each error bar of ``method``'s series in the figure's first panel."""
    for container in fig.axes[0].containers:
        if isinstance(container, ErrorbarContainer) and method_of(container.get_label()) == method:
            if not container.lines[2]:
                return []
            return [(seg[0][1], seg[1][1]) for seg in container.lines[2][0].get_segments()]
    raise AssertionError(f"no series of {method}")


def test_error_bars_are_std_t_bootstrap_or_none_and_the_title_says_which():
    rows = synthetic_results(seeds=(0, 1, 2, 3))
    sweep = rt_sweep(rows, [0, 1, 3])
    fed = sweep[(sweep["dataset"] == "adult") & (sweep["method"] == "federate")].sort_values("rt")
    mean, std = fed["valid_accuracy_mean"].to_numpy(), fed["valid_accuracy_std"].to_numpy()

    fig = figure_rt_sweep(sweep, error_bars="std")
    assert "± 1 std over seeds, 4 seeds" in fig.get_suptitle()
    assert np.allclose(_bar_spans(fig, "federate"), np.column_stack([mean - std, mean + std]))

    seeds = per_seed(lambda part: rt_sweep(part, [0, 1, 3]), rows)
    assert sorted(seeds["seed"].unique()) == [0, 1, 2, 3] and (seeds["n_seeds"] == 1).all()
    booted = bootstrap_over_seeds(sweep, seeds, ["dataset", "method", "rt"],
                                  ["valid_accuracy", "valid_tpr_gap", "leakage"])
    fig = figure_rt_sweep(booted, error_bars="bootstrap")
    assert "95% percentile bootstrap of the mean over seeds" in fig.get_suptitle()
    want = booted[(booted["dataset"] == "adult") & (booted["method"] == "federate")].sort_values("rt")
    assert np.allclose(_bar_spans(fig, "federate"), want[["valid_accuracy_boot_lo", "valid_accuracy_boot_hi"]])
    # the bootstrap of a mean lies within the seeds' range and around the mean
    per = seeds[(seeds["dataset"] == "adult") & (seeds["method"] == "federate")]
    for (_, row), (_, g) in zip(want.iterrows(), per.groupby("rt", sort=True)):
        assert g["valid_accuracy_mean"].min() <= row["valid_accuracy_boot_lo"] <= row["valid_accuracy_mean"]
        assert row["valid_accuracy_mean"] <= row["valid_accuracy_boot_hi"] <= g["valid_accuracy_mean"].max()

    fig = figure_rt_sweep(sweep, error_bars="none")
    assert "no error bars" in fig.get_suptitle() and _bar_spans(fig, "federate") == []
    with pytest.raises(Exception, match="boot_lo"):
        figure_rt_sweep(sweep, error_bars="bootstrap")  # no bounds to draw
    with pytest.raises(Exception, match="error_bars"):
        figure_rt_sweep(sweep, error_bars="sem")


def test_an_interval_over_two_seeds_is_warned_about_and_std_is_not():
    two = rt_sweep(synthetic_results(seeds=(0, 1)), [0, 1])
    with pytest.warns(UserWarning, match="t-intervals over 2 seeds say little"):
        figure_rt_sweep(two, error_bars="t")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figure_rt_sweep(two, error_bars="std")
        figure_rt_sweep(rt_sweep(synthetic_results(seeds=(0, 1, 2)), [0, 1]), error_bars="t")


def test_the_report_says_what_its_bars_are_and_what_its_figures_do_not_mean(tmp_path):
    rows = synthetic_results(seeds=(0, 1))
    with pytest.warns(UserWarning, match="bootstrap intervals over 2 seeds say little"):
        write_report(rows, tmp_path / "boot", ReportOptions(rts=(0, 1), error_bars="bootstrap"))
    md = whole_report(tmp_path / "boot")
    assert "error bars: bootstrap intervals over 2 seeds" in md  # listed under Notes too
    for caption in ("(FEDERATE Fig. 2): the validation metrics the selection reads; the tables below it give the "
                    "test metrics (bars: 95% percentile bootstrap of the mean over seeds",
                    "(FEDERATE Fig. 3) (bars: 95% percentile bootstrap", "(FEDERATE Fig. 4) (bars: 95% percentile"):
        assert caption in md, caption
    sweep = md.split("## Relaxation-threshold sweep", 1)[1].split("\n## ", 1)[0]
    assert "one figure of the validation metrics" in sweep and "then a table per method with its test metrics" in sweep
    pareto = md.split("## Pareto fronts", 1)[1].split("\n## ", 1)[0]
    assert "(accuracy 0 %, gaps and leakage 100 %) as reference point" in pareto
    assert "Neither ranks methods: a constant or random classifier" in pareto
    # the default, ± 1 std, and its caption: test_analysis_report.py's test_report_renders


def test_fairdp_report_takes_error_bars(tmp_path, capsys):
    from fairdp.analysis import ERROR_BARS
    from fairdp.cli import build_parser, main

    rows = tmp_path / "rows.parquet"
    synthetic_results(seeds=(0, 1)).to_parquet(rows)
    assert main(["report", str(rows), "-o", str(tmp_path / "rep"), "--rts", "0,1", "--error-bars", "t"]) == 0
    assert "fairdp report: warning: error bars: t-intervals over 2 seeds say little" in capsys.readouterr().err
    md = whole_report(tmp_path / "rep")
    assert "(bars: 95% t-interval of the mean over seeds)" in md
    for choice in ERROR_BARS:  # the CLI offers what the library draws
        assert build_parser().parse_args(["report", "r", "-o", "o", "--error-bars", choice]).error_bars == choice
    assert main(["report", str(rows), "-o", str(tmp_path / "bad"), "--error-bars", "sem"]) == 2


def test_the_checker_finds_what_a_reviewer_would(tmp_path):
    """A checker that passes everything proves nothing: each defect of the old layout is named."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    def figure():
        fig = Figure(figsize=(4, 3), layout="constrained")
        FigureCanvasAgg(fig)
        return fig, fig.subplots()

    fig, ax = figure()  # a legend on the plot, taller than the figure, over the title
    for k in range(30):
        ax.plot([0, 1], [k, k + 1], label=f"series {k}")
    fig.suptitle("A title as wide as the whole figure")
    fig.legend(loc="upper right")
    problems = layout_problems(fig, max_series=8)
    assert any("legend" in p and "reaches outside the figure" in p for p in problems), problems
    assert any("legend" in p and "lies on the data area" in p for p in problems), problems
    assert any("figure title 'A title as wide as the whole figure' overlaps legend" in p for p in problems), problems
    assert any("draws 30 series, more than 8" in p for p in problems), problems
    with pytest.raises(AssertionError, match="layout problem"):
        assert_readable(fig, 8)

    fig, ax = figure()  # log-scale minor labels run together
    ax.plot([3, 9], [0, 1])
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(__import__("matplotlib.ticker", fromlist=["x"]).LogFormatterSciNotation(
        labelOnlyBase=False, minor_thresholds=(10, 10)))
    problems = layout_problems(fig)
    assert any("x tick label" in p and "overlaps x tick label" in p for p in problems), problems

    fig, ax = figure()  # a tidy figure passes
    ax.plot([0, 1], [0, 1], label="one")
    ax.set_title("panel")
    fig.legend(loc="outside lower center")
    assert layout_problems(fig, max_series=8) == []


COMMITTED = {
    # the commands of results/README.md that made each committed _report/
    "demo-reference": {},
    "federate-adult": {"compare": ["federate-table3"]},
    "pfld-adult": {"fairness": "notion_gap", "by": ["fairness_notion", "eps"], "compare": ["pfld-adult"]},
}


# pfld-compas's 10-seed report is drawn as pfld-adult's is (the same settings and study shape), so
# pfld-adult's stands for both, in make test-slow (about 30 s beside the fast set's other workers);
# results/regenerate.py checks every report's figures whenever it is made.
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "pfld-adult" else n
                                  for n in COMMITTED])
def test_every_figure_of_a_committed_report_is_readable(name):
    """Each committed report's figures, drawn from its rows with its own settings, pass."""
    from fairdp.study import read_history, read_results

    started = time.perf_counter()
    location = REPO / "results" / name
    rows = read_results(str(location))
    history = read_history(str(location), rows=rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        figures = report_figures(rows, ReportOptions(history=history, **COMMITTED[name]))
    drawn = {k: f for k, f in figures.items() if f is not None}
    assert {"rt_sweep", "fairness_accuracy_bins", "pareto_fronts", "privacy_accuracy"} <= set(drawn), sorted(drawn)
    problems = {k: layout_problems(f, SERIES_PER_PANEL) for k, f in drawn.items()}
    assert all(not p for p in problems.values()), {k: p[:5] for k, p in problems.items() if p}
    print(f"{name}: {len(drawn)} figures checked in {time.perf_counter() - started:.1f} s")


def test_the_bins_title_says_how_many_of_the_studys_seeds_each_point_averages():
    """A 2-seed study whose seeds reach different accuracy intervals: each point averages the
    seeds that reached it, and the title says "1-2 of 2 seeds per point", never "1 seed"."""
    from fairdp.analysis import fairness_accuracy_bins, figure_fairness_accuracy_bins

    rows = synthetic_results(datasets=("adult",), seeds=(0, 1), configs=6)
    rows.loc[rows["seed"] == 1, "valid_accuracy"] += 0.5  # seed 1 reaches intervals seed 0 does not
    bins = fairness_accuracy_bins(rows)
    assert set(bins["seeds_run"]) == {2} and set(bins["n_seeds"]) == {1, 2}
    fig = figure_fairness_accuracy_bins(bins, error_bars="std")
    texts = " ".join(t.get_text() for t in fig.texts)
    assert "± 1 std over seeds, 1-2 of 2 seeds per point" in texts, texts
    one = figure_fairness_accuracy_bins(fairness_accuracy_bins(rows[rows["seed"] == 0]), error_bars="std")
    assert "± 1 std over seeds, 1 seed)" in " ".join(t.get_text() for t in one.texts)  # every point: the one seed


def test_the_leakage_figure_draws_chance_from_the_data_without_a_random_method():
    """Leakage's chance level is the largest protected group's share of the test rows (a probe
    that always guesses it), read from the rows' stored counts: drawn on every panel whether
    or not the study ran the random baseline."""
    import json

    from fairdp.analysis import figure_leakage_vs_eps

    rows = synthetic_results(datasets=("adult",), seeds=(0, 1), configs=6)
    assert "random" not in set(rows["method"])
    counts = [[[30, 5], [4, 11]], [[60, 12], [9, 19]]]  # (group, y, y_pred): groups of 50 and 100 rows
    rows = rows.assign(test_confusion=json.dumps(counts))
    fig = figure_leakage_vs_eps(rows)
    for ax in fig.axes:
        levels = [line.get_ydata()[0] for line in ax.lines if line.get_label() == "_chance"]
        assert levels == [pytest.approx(100 * 100 / 150)], levels
    assert any(label.startswith("chance") for label in legend_labels(fig))
    without = figure_leakage_vs_eps(rows.drop(columns="test_confusion"))
    assert not [line for ax in without.axes for line in ax.lines if line.get_label() == "_chance"]


def test_methods_without_eps_are_levels_of_every_panel_and_never_a_panel_of_their_own():
    """Six private methods and three without privacy per notion: nine lines, one more than a
    panel's series. The levels (no ε) ride along in each panel: packed like curves, the last
    one filled a panel of its own with no ε axis to draw on, an empty panel (the baselines
    study's first report)."""
    from fairdp.analysis import figure_violation_accuracy_by_eps

    curves = ("dp_fermi", "dpsgd", "dpsgd_f", "dpsgd_global_adapt", "pfld", "private_reductions")
    rows = []
    for notion in ("dp", "eo"):
        for i, method in enumerate((*curves, "fld", "reductions", "unconstrained")):
            for eps in ((0.5, 1.0, 5.0) if method in curves else (np.nan,)):
                rows.append({"dataset": "compas", "method": method, "fairness_notion": notion, "eps": eps,
                             "n_seeds": 3, "test_notion_gap_mean": 10.0 + i, "test_notion_gap_std": 1.0,
                             "test_accuracy_mean": 65.0 + i / 10, "test_accuracy_std": 0.5})
    fig = figure_violation_accuracy_by_eps(pd.DataFrame(rows))
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert sorted({ax.get_title() for ax in panels}) == ["compas, fairness_notion dp", "compas, fairness_notion eo"]
    for ax in panels:
        drawn = set(ax.get_legend_handles_labels()[1])
        assert {"fld", "reductions", "unconstrained"} <= {label.split(" (")[0] for label in drawn}, drawn
    assert_readable(fig, name="levels")
