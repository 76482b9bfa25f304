"""Tables, figures and the report on a realistic synthetic result table."""

import math
import re

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest

from fairdp.analysis import (
    ReportOptions,
    aggregate_seeds,
    fairness_accuracy_bins,
    figure_fairness_accuracy_bins,
    figure_leakage_vs_eps,
    figure_pareto_fronts,
    figure_privacy_accuracy,
    figure_rt_sweep,
    format_table,
    legend_labels,
    privacy_accuracy_by_eps,
    rt_sweep,
    save_figure,
    select_by_rt,
    write_report,
)
from fairdp.analysis._rows import DIFFERENT_GUARANTEES, eps_labels, row_guarantees
from fairdp.analysis._style import BUILTIN_STYLES, method_style
from fairdp.analysis._tables import mean_std
from fairdp.errors import InputError

from .conftest import whole_report

pytestmark = pytest.mark.xdist_group("analysis_report")  # one xdist worker computes the module's shared runs once

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
METHODS = ("unconstrained", "adversarial", "noise", "federate")
EPS_METHODS = ("federate", "noise")
LOCAL = "local, replace one record's representation"
CENTRAL_RECORD = "central, add/remove one record"
ATTRIBUTE = "central, replace one record's attribute"


def method_of(label: str) -> str:
    """The method a legend label names: "federate (local, ...)" -> "federate"."""
    return label.split(" (", 1)[0]


def legend_methods(fig) -> list[str]:
    return [method_of(t) for t in legend_labels(fig)]


def synthetic_results(seed=0, datasets=("adult", "twitter"), methods=METHODS, seeds=(0, 1, 2), configs=20):
    """Result rows shaped like a real study: every (dataset, method, seed, config), two failures."""
    rng = np.random.default_rng(seed)
    rows = []
    for ds in datasets:
        base = {"adult": 83.0, "twitter": 73.0}.get(ds, 70.0)
        for method in methods:
            n_cfg = 1 if method == "unconstrained" else configs
            for s in seeds:
                for k in range(n_cfg):
                    eps = float(rng.choice([1.0, 4.0, 8.0, 16.0])) if method in EPS_METHODS else np.nan
                    lam = float(rng.uniform(0.1, 3.0)) if method in ("adversarial", "federate") else np.nan
                    strength = (0 if np.isnan(lam) else lam / 3.0) + (0 if np.isnan(eps) else 1.0 / eps)
                    acc = base - 3.0 * strength + rng.normal(0, 0.8)
                    gap = max(0.0, 20.0 - 12.0 * (0 if np.isnan(lam) else lam / 3.0) + rng.normal(0, 2.0))
                    leak = 88.0 - (0 if np.isnan(eps) else 25.0 / math.sqrt(eps)) + rng.normal(0, 1.5)
                    rows.append({
                        "study": "synthetic", "dataset": ds, "method": method, "seed": s,
                        "config_id": f"{method[:3]}{k:02d}",
                        "eps": eps, "lam": lam, "lam_ort": np.nan, "iterations": np.nan,
                        "clip_primal": np.nan, "clip_dual": np.nan, "fairness_notion": None,
                        "valid_accuracy": acc, "test_accuracy": acc + rng.normal(0, 0.5),
                        "valid_tpr_gap": gap, "test_tpr_gap": gap + rng.normal(0, 1.0),
                        "valid_grms": gap, "test_grms": gap,
                        "valid_dp_gap": np.nan, "test_dp_gap": np.nan, "valid_eo_gap": np.nan,
                        "test_eo_gap": np.nan, "valid_ap_gap": np.nan, "test_ap_gap": np.nan,
                        "leakage": leak, "mdl": 20.0 + (0 if np.isnan(eps) else 8.0 / eps) + rng.normal(0, 0.5),
                        "eps_formal": eps if not np.isnan(eps) else math.inf, "delta": 0.0,
                        "epochs": 5, "duration_s": 1.0, "status": "ok", "error": None,
                        "fairdp_version": "0.1.0", "node": "local",
                    })
    df = pd.DataFrame(rows)
    failed = df.sample(2, random_state=seed).index
    df.loc[failed, ["status", "error"]] = ["error", "RuntimeError: boom"]
    df.loc[failed, ["valid_accuracy", "valid_tpr_gap", "leakage"]] = np.nan
    return df


@pytest.fixture(scope="module")
def results():
    return synthetic_results()


@pytest.fixture(scope="module")
def agg(results):
    return aggregate_seeds(select_by_rt(results, 1.0))


def assert_png(path):
    data = path.read_bytes()
    assert len(data) > 1000 and data[:8] == PNG_SIGNATURE, path
    image = mpimg.imread(path)
    assert image.ndim == 3 and image.shape[0] > 50 and image.shape[1] > 50


def test_synthetic_results_have_the_result_columns(results):
    assert len(results) == 2 * 3 * (1 + 3 * 20)
    assert (results["status"] == "error").sum() == 2


def test_format_table_markdown(agg):
    md = format_table(agg, "md")
    lines = md.splitlines()
    assert lines[0] == "| Dataset | Method | Guarantee | Seeds | Accuracy ↑ | TPR-gap ↓ | Leakage ↓ | MDL ↑ |"
    assert len(lines) == 2 + len(agg) == 2 + 2 * len(METHODS)
    row = agg[(agg["dataset"] == "adult") & (agg["method"] == "federate")].iloc[0]
    cell = f"{row['test_accuracy_mean']:.1f} ± {row['test_accuracy_std']:.1f}"
    assert any(line.startswith(f"| adult | federate | {LOCAL} | 3 | " + cell + " |") for line in lines)
    assert any(line.startswith("| adult | unconstrained | not private | ") for line in lines)
    assert "GRMS ↓" in format_table(agg.rename(columns=lambda c: c.replace("tpr_gap", "grms")), "md", "grms")


def test_format_table_cells_for_missing_values():
    agg = pd.DataFrame({
        "dataset": ["d", "d"], "method": ["random", "one_seed"], "n_seeds": [5, 1],
        "test_accuracy_mean": [50.0, 72.06], "test_accuracy_std": [0.0, np.nan],
        "test_tpr_gap_mean": [0.0, 3.0], "test_tpr_gap_std": [0.0, np.nan],
        "leakage_mean": [np.nan, 61.0], "leakage_std": [np.nan, np.nan],
        "mdl_mean": [31.3, 22.94], "mdl_std": [0.1, np.nan],
    })
    md = format_table(agg, "md", decimals=2)
    assert "| d | random | not private | 5 | 50.00 ± 0.00 | 0.00 ± 0.00 | - | 31.30 ± 0.10 |" in md
    # a plugin this process has not loaded, in a table without the rows' guarantee column
    assert "| d | one_seed | unknown (method not loaded) | 1 | 72.06 | 3.00 | 61.00 | 22.94 |" in md


def test_format_table_latex(agg):
    tex = format_table(agg, "latex")
    assert tex.startswith("\\begin{tabular}{lllr")
    assert "Accuracy $\\uparrow$ & TPR-gap $\\downarrow$ & Leakage $\\downarrow$ & MDL $\\uparrow$ \\\\" in tex
    row = agg.iloc[0]
    assert f"${row['test_accuracy_mean']:.1f} \\pm {row['test_accuracy_std']:.1f}$" in tex
    assert "\\toprule" in tex and "\\bottomrule" in tex and tex.rstrip().endswith("\\end{tabular}")
    under = agg.assign(method=agg["method"].str.replace("adversarial", "multi_adversarial"))
    assert "multi\\_adversarial" in format_table(under, "latex")


def test_format_table_csv_is_the_aggregate(agg):
    csv = format_table(agg, "csv")
    header = csv.splitlines()[0].split(",")
    assert header == ["dataset", "method", "n_seeds", "test_accuracy_mean", "test_accuracy_std",
                      "test_tpr_gap_mean", "test_tpr_gap_std", "leakage_mean", "leakage_std",
                      "mdl_mean", "mdl_std", "guarantee"]
    assert len(csv.splitlines()) == 1 + len(agg)
    back = pd.read_csv(__import__("io").StringIO(csv))
    assert np.allclose(back["test_accuracy_std"], agg["test_accuracy_std"])


def _legend_styles(fig) -> dict[str, tuple]:
    """Each legend entry's (colour as RGBA, marker) as drawn."""
    from matplotlib.colors import to_rgba

    out = {}
    for legend in fig.legends:
        for handle, text in zip(legend.legend_handles, legend.get_texts()):
            color = handle.get_color() if hasattr(handle, "get_color") else handle.get_edgecolor()
            color = color[0] if isinstance(color, (list, np.ndarray)) and np.ndim(color) == 2 else color
            out[method_of(text.get_text())] = (to_rgba(color), getattr(handle, "get_marker", lambda: None)())
    return out


FIGURES = {
    "rt_sweep": lambda r: figure_rt_sweep(rt_sweep(r, [0, 1, 3])),
    "bins": lambda r: figure_fairness_accuracy_bins(fairness_accuracy_bins(r)),
    "privacy_accuracy": lambda r: figure_privacy_accuracy(privacy_accuracy_by_eps(r)),
    "leakage_vs_eps": lambda r: figure_leakage_vs_eps(r),
    "pareto": lambda r: figure_pareto_fronts(r, [("valid_accuracy", "valid_tpr_gap")]),
}


@pytest.mark.parametrize("name", list(FIGURES))
def test_a_method_has_one_colour_and_marker_in_every_figure_whatever_else_is_drawn(name, results):
    """FEDERATE was orange in some figures and blue in others: colours went by the sorted
    methods each figure happened to hold. Now every figure, with any subset of methods,
    draws a method in its own fixed style."""
    from matplotlib.colors import to_rgba

    full = _legend_styles(FIGURES[name](results))
    alone = _legend_styles(FIGURES[name](results[results["method"].isin(["federate", "noise"])]))
    federate = method_style("federate")
    assert full["federate"][0] == alone["federate"][0] == to_rgba(federate.color)
    assert full["federate"][1] in (federate.marker, None)  # a marker where the figure draws lines with them
    # no two methods of the figure look the same
    assert len(set(full.values())) == len(full)


def test_error_bars_are_the_tables_seed_intervals_and_the_title_says_so(results):
    """The bars were ± std while the tables printed t-intervals, and no figure said which:
    now each bar spans the interval ``seed_intervals`` gives for that mean (the general
    computation), and the title names it."""
    from matplotlib.container import ErrorbarContainer

    from fairdp.analysis import seed_intervals

    sweep = rt_sweep(results, [0, 1, 3])
    fig = figure_rt_sweep(sweep)
    assert "95% t-interval of the mean over seeds" in fig._suptitle.get_text()
    want = seed_intervals(sweep)
    ax = fig.axes[0]  # first dataset, valid accuracy
    first = sorted(sweep["dataset"].unique())[0]
    checked = 0
    for container in ax.containers:
        if not isinstance(container, ErrorbarContainer) or method_of(container.get_label()) != "federate":
            continue
        rows = want[(want["dataset"] == first) & (want["method"] == "federate")].sort_values("rt")
        segments = container.lines[2][0].get_segments()
        for seg, (_, row) in zip(segments, rows.iterrows()):
            assert seg[0][1] == pytest.approx(row["valid_accuracy_lo"]) and \
                seg[1][1] == pytest.approx(row["valid_accuracy_hi"])
            checked += 1
    assert checked == 3
    # a table without seed counts draws ± 1 std, and says so
    no_counts = figure_rt_sweep(sweep.drop(columns="n_seeds"))
    assert "± 1 std over seeds" in no_counts._suptitle.get_text()


def _with_random(results):
    """The results plus a random classifier's rows (50% accuracy), as a study with the
    `random` baseline has."""
    rng = np.random.default_rng(5)
    rand = results[results["method"] == "unconstrained"].copy()
    rand["method"] = "random"
    rand["config_id"] = "ran00"
    for col in ("valid_accuracy", "test_accuracy"):
        rand[col] = 50.0 + rng.normal(0, 0.3, len(rand))
    return pd.concat([results, rand], ignore_index=True)


def test_a_random_baseline_does_not_stretch_the_axes_of_the_methods_compared(results):
    """Random's 50% accuracy squeezed every method into 80-85% of an axis reaching down to
    50: the axes now span the methods compared, and the baseline is a reference level where
    it falls inside, or a note giving its value where it does not."""
    mixed = _with_random(results)
    fig = figure_rt_sweep(rt_sweep(mixed, [0, 1, 3]))
    accuracy_axes = [ax for ax in fig.axes if ax.get_ylabel().startswith("valid accuracy")]
    assert accuracy_axes
    for ax in accuracy_axes:
        assert ax.get_ylim()[0] > 60  # the compared methods are at 68-85, random at 50
        notes = [t.get_text() for t in ax.texts]
        assert any(re.fullmatch(r"random: (49|50)\.\d \(below the axis\)", n) for n in notes), notes
    pareto = figure_pareto_fronts(mixed, [("valid_accuracy", "valid_tpr_gap")])
    for ax in pareto.axes:
        assert ax.get_xlim()[0] > 60
        assert any(re.match(r"random: valid accuracy (49|50)\.\d, valid TPR", t.get_text()) for t in ax.texts), \
            [t.get_text() for t in ax.texts]
    assert "random" not in legend_methods(pareto)
    # alone, a baseline is what there is to draw
    assert figure_rt_sweep(rt_sweep(mixed[mixed["method"] == "random"], [0])) is not None


def test_methods_with_equal_values_in_an_interval_do_not_hide_each_other(results):
    """In the demo's bins figure adversarial hid under unconstrained: equal points of
    different methods in one accuracy interval are now drawn side by side, inside it."""
    bins = fairness_accuracy_bins(results)
    one = bins[(bins["dataset"] == "adult")].copy()
    twin = one[one["method"] == "adversarial"].copy()
    twin["method"] = "unconstrained"
    same = pd.concat([one[one["method"] == "adversarial"], twin], ignore_index=True)
    fig = figure_fairness_accuracy_bins(same)
    xs = {}
    for container in fig.axes[0].containers:
        if method_of(container.get_label()) in ("adversarial", "unconstrained"):
            xs[method_of(container.get_label())] = np.asarray(container.lines[0].get_xdata(), float)
    a, u = xs["adversarial"], xs["unconstrained"]
    assert len(a) == len(u) and (np.abs(a - u) > 0.1).all()  # apart ...
    centres = np.asarray(sorted(same["accuracy_bin"].unique()), float)
    assert (np.abs(a - np.round(a)) < 0.5).all() and set(np.round(a)) <= set(range(int(centres.min()),
                                                                                    int(centres.max()) + 1))


def test_fairdps_methods_have_distinct_styles_and_plugins_get_stable_ones():
    from fairdp.methods import builtin_method_names

    assert set(BUILTIN_STYLES) == set(builtin_method_names())
    assert len({s.color for s in BUILTIN_STYLES.values()}) == len(BUILTIN_STYLES)
    assert len({s.marker for s in BUILTIN_STYLES.values()}) == len(BUILTIN_STYLES)
    assert method_style("my_plugin") == method_style("my_plugin") != method_style("other_plugin")


def test_format_table_bad_input(agg):
    with pytest.raises(InputError, match="fmt"):
        format_table(agg, "xlsx")
    with pytest.raises(InputError, match="leakage_std"):
        format_table(agg.drop(columns="leakage_std"), "md")


def test_figures_have_a_legend_with_the_method_names_and_their_guarantees(results):
    sweep = rt_sweep(results, [0, 1, 3])
    kinds = {"unconstrained": "not private", "adversarial": "not private", "noise": LOCAL, "federate": LOCAL}
    labelled = sorted(f"{m} ({kinds[m]})" for m in METHODS)
    assert sorted(legend_labels(figure_rt_sweep(sweep))) == labelled
    bins = fairness_accuracy_bins(results)
    assert sorted(legend_labels(figure_fairness_accuracy_bins(bins))) == labelled
    # only the methods with eps take part in the privacy plots
    by_eps = privacy_accuracy_by_eps(results)
    assert sorted(legend_methods(figure_privacy_accuracy(by_eps))) == sorted(EPS_METHODS)
    assert sorted(legend_methods(figure_leakage_vs_eps(results))) == sorted(EPS_METHODS)
    fig = figure_pareto_fronts(results, [("valid_accuracy", "valid_tpr_gap"), ("valid_accuracy", "leakage")])
    assert sorted(legend_labels(fig)) == labelled
    assert len(fig.axes) == 2 * 2  # datasets x pairs


def test_save_figure_writes_the_format_its_suffix_names_and_returns_its_path(results, tmp_path):
    fig = figure_privacy_accuracy(privacy_accuracy_by_eps(results))
    for name, head in (("privacy.png", PNG_SIGNATURE), ("privacy.pdf", b"%PDF"), ("privacy.svg", b"<?xml")):
        path = save_figure(fig, tmp_path / "sub" / name)
        assert path == tmp_path / "sub" / name and path.read_bytes().startswith(head)
    assert_png(tmp_path / "sub" / "privacy.png")
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["privacy.pdf", "privacy.png", "privacy.svg"]
    with pytest.raises(InputError, match="privacy.jpg"):
        save_figure(fig, tmp_path / "privacy.jpg")


def test_nothing_to_draw_is_no_figure(results):
    no_eps = results[results["method"].isin(["unconstrained", "adversarial"])]
    assert figure_privacy_accuracy(privacy_accuracy_by_eps(no_eps)) is None
    assert figure_leakage_vs_eps(no_eps) is None
    assert figure_rt_sweep(rt_sweep(no_eps.iloc[0:0].astype(results.dtypes), [1])) is None


def test_report_renders(results, tmp_path):
    out = tmp_path / "report"
    with pytest.warns(UserWarning, match="config_id=bad"):
        broken = results.copy()
        broken.loc[broken.index[5], ["valid_tpr_gap", "config_id"]] = [np.nan, "bad"]
        paths = write_report(broken, out, ReportOptions(rt=1.0, rts=(0, 1, 3)))
    names = sorted(p.name for p in paths)
    figures = [p for p in paths if p.suffix == ".png"]
    assert {p.stem for p in figures} == {
        "rt_sweep", "fairness_accuracy_bins", "privacy_accuracy", "leakage_vs_eps", "pareto_fronts"}
    assert {"report.md", "report.html", "table.csv"} <= set(names)
    for p in paths:
        assert p.exists() and p.stat().st_size > 0
    for p in figures:
        assert p.parent == out / "figures"
        assert_png(p)
    html = whole_report(out, "html")
    # the pages link the figures beside them (first page: figures/, pages: ../figures/), each one drawn
    shown = set(re.findall(r'<img [^>]*src="(?:\.\./)?figures/([^"]+)"', html))
    assert shown == {p.name for p in figures} and "base64" not in html
    assert "<table" in html
    md = whole_report(out)
    assert "| Dataset | Method | Guarantee | Seeds | Accuracy ↑ | TPR-gap ↓ | Leakage ↓ | MDL ↑ |" in md
    assert "![" in md and "(../figures/rt_sweep.png)" in md
    for method in METHODS:
        assert method in md and method in html
    assert "config_id=bad" in md  # excluded rows are listed under Notes
    assert "(bars: ± 1 std over seeds)" in md and "say little" not in md  # the default error bars
    assert not [p for p in out.rglob(".*")]  # no hidden temp files left behind
    assert (out / "table.csv").read_text().startswith("dataset,method,n_seeds,")


def test_the_first_page_links_every_page_and_wide_tables_scroll(results, tmp_path):
    """A 1,854-line report in one file: now the first page links every other section, each a
    page with its tables also as CSV, every h2 has an id to link to, and every results table
    sits in a scrolling box."""
    write_report(results, tmp_path, ReportOptions(rt=1.0, rts=(0, 1, 3)))
    first = (tmp_path / "report.html").read_text(encoding="utf-8")
    linked = re.findall(r'<a href="pages/([^"]+)\.html">', first)
    pages = sorted(p.stem for p in (tmp_path / "pages").glob("*.html"))
    assert linked and sorted(set(linked)) == pages
    assert sorted(p.stem for p in (tmp_path / "pages").glob("*.md")) == pages
    for name in pages:
        page = (tmp_path / "pages" / f"{name}.html").read_text(encoding="utf-8")
        assert '<a href="../report.html">' in page
    assert {p.stem.rsplit("-", 1)[0] if p.stem not in pages else p.stem for p in (tmp_path / "tables").glob("*.csv")} \
        <= set(pages)
    assert (tmp_path / "tables" / "selected-configurations.csv").read_text().count("\n") > len(results) // 20
    page = whole_report(tmp_path, "html")
    ids = re.findall(r'<h[23] id="([^"]+)">', page)
    assert ids and all(page.count(f'id="{i}"') >= 1 for i in ids)
    tables = page.count('<table class="results')
    assert tables >= 5 and page.count('<div class="scroll"><table class="results') == tables

def test_report_without_eps_methods_drops_stale_figures(results, tmp_path):
    write_report(results[results["dataset"] == "adult"], tmp_path, ReportOptions(rts=(0, 1)))
    assert (tmp_path / "figures" / "privacy_accuracy.png").exists()
    no_eps = results[(results["dataset"] == "adult") & results["method"].isin(["unconstrained", "adversarial"])]
    paths = write_report(no_eps, tmp_path, ReportOptions(rts=(0, 1)))
    assert not (tmp_path / "figures" / "privacy_accuracy.png").exists()
    assert not (tmp_path / "figures" / "leakage_vs_eps.png").exists()
    assert {p.stem for p in paths if p.suffix == ".png"} == {"rt_sweep", "fairness_accuracy_bins", "pareto_fronts"}
    assert "Privacy-accuracy" not in whole_report(tmp_path)


def test_report_bad_input(results, tmp_path):
    with pytest.raises(InputError, match="status"):
        write_report(results.assign(status="error"), tmp_path)
    with pytest.raises(InputError, match="fairness"):
        write_report(results, tmp_path, ReportOptions(fairness="accuracy"))
    with pytest.raises(InputError, match="rt"):
        write_report(results, tmp_path, ReportOptions(rt=-1))


def test_the_rt_sweep_is_a_table_per_method_with_a_column_per_rt(results, tmp_path):
    write_report(results, tmp_path, ReportOptions(rts=(0, 0.5, 1, 2, 3, 5)))
    md = whole_report(tmp_path)
    sweep = md.split("## Relaxation-threshold sweep", 1)[1].split("\n## ", 1)[0]
    titles = [line for line in sweep.splitlines() if line.startswith("**")]
    assert len(titles) == 2 * len(METHODS)  # one per (dataset, method), not one row per RT
    assert "| Metric | RT 0 | RT 0.5 | RT 1 | RT 2 | RT 3 | RT 5 |" in sweep
    assert sweep.count("| Accuracy ↑ |") == len(titles)


def test_sweep_tables_hold_the_sweep_values():
    from fairdp.analysis import sweep_tables

    sweep = rt_sweep(synthetic_results(datasets=("adult",)), [0, 2])
    tables = dict(sweep_tables(sweep))
    fed = tables[f"federate on adult (3 seeds; {LOCAL})"]
    row = sweep[(sweep["method"] == "federate") & (sweep["rt"] == 2)].iloc[0]
    acc = fed.loc[fed["Metric"] == "Accuracy ↑", "RT 2"].iloc[0]
    assert acc == f"{row['test_accuracy_mean']:.1f} ± {row['test_accuracy_std']:.1f}"


@pytest.mark.parametrize("mean,std,decimals,text", [
    (85.14, 0.31, 1, "85.1 ± 0.3"),
    (85.14, 0.04, 1, "85.14 ± 0.04"),      # a std that would print as 0.0 gets its digit
    (0.031, 0.0021, 1, "0.031 ± 0.002"),   # small values (MDL, hypervolume) too
    (12.0, 0.0, 1, "12.0 ± 0.0"),          # an exact zero stays zero
    (0.00001, math.nan, 1, "0.0000"),      # never past MAX_DECIMALS
    (math.nan, 0.1, 1, "-"),
])
def test_mean_std_prints_enough_digits(mean, std, decimals, text):
    assert mean_std(mean, std, decimals) == text


def test_collapsed_configs_do_not_stretch_the_pareto_axes_and_are_counted_at_the_edge(results):
    """Configs that collapsed (accuracy 25-40% beside picks at 75-85%) squeezed what matters
    into a sliver: with the selection as focus the limits span the picks and the fronts near
    them, and the collapsed points sit at the left edge, counted in a note."""
    adult = results[(results["dataset"] == "adult") & (results["status"] == "ok")].copy()
    collapsed = adult[adult["method"] == "federate"].head(6).copy()
    collapsed["config_id"] = [f"collapsed{k}" for k in range(6)]
    collapsed["valid_accuracy"] = np.linspace(25.0, 40.0, 6)
    collapsed["valid_tpr_gap"] = 0.05  # on the front: the lowest gap of all
    rows = pd.concat([adult, collapsed], ignore_index=True)
    pair = [("valid_accuracy", "valid_tpr_gap")]
    picks = select_by_rt(rows, 1.0)
    assert not picks["config_id"].astype(str).str.startswith("collapsed").any()
    unfocused = figure_pareto_fronts(rows, pair)
    assert unfocused.axes[0].get_xlim()[0] < 40  # the fronts alone reach the collapsed configs
    fig = figure_pareto_fronts(rows, pair, focus=picks)
    ax = fig.axes[0]
    x0, x1 = ax.get_xlim()
    assert 40 < x0 <= picks["valid_accuracy"].min() and x1 >= picks["valid_accuracy"].max()
    (y0, y1), pts = ax.get_ylim(), rows[["valid_accuracy", "valid_tpr_gap"]]
    counts = {"left": (pts["valid_accuracy"] < x0).sum(), "right": (pts["valid_accuracy"] > x1).sum(),
              "bottom": (pts["valid_tpr_gap"] < y0).sum(), "top": (pts["valid_tpr_gap"] > y1).sum()}
    assert counts["left"] >= 6  # the collapsed six, and whatever else the picks' region leaves out
    note = [t.get_text() for t in ax.texts if t.get_text().startswith("beyond the axes")]
    arrows = {"left": "←", "right": "→", "bottom": "↓", "top": "↑"}
    assert note == ["beyond the axes, drawn at the edge: " + " ".join(f"{n}{arrows[e]}" for e, n in counts.items() if n)]
    # every point is drawn inside the axes, those outside on the edge they pass
    for collection in ax.collections:
        xy = collection.get_offsets()
        assert ((xy[:, 0] >= x0) & (xy[:, 0] <= x1) & (xy[:, 1] >= y0) & (xy[:, 1] <= y1)).all()
    assert sum(int((c.get_offsets()[:, 0] == x0).sum()) for c in ax.collections) == counts["left"]


def test_every_cell_of_a_column_has_the_columns_one_format():
    """85.3 ± 0.0 never stands beside 85.34 ± 0.04: the column takes the decimals its most
    precise cell needs, in the mean ± std and in the interval."""
    from fairdp.analysis import sweep_tables

    agg = pd.DataFrame({
        "dataset": ["d"] * 3, "method": ["reductions", "dpsgd", "pfld"], "n_seeds": [10, 10, 10],
        "test_accuracy_mean": [85.3, 85.34, 84.0], "test_accuracy_std": [0.0, 0.04, 0.4],
        "test_accuracy_lo": [85.3, 85.30, 83.7], "test_accuracy_hi": [85.3, 85.37, 84.3],
        "test_tpr_gap_mean": [10.2, 7.4, 9.0], "test_tpr_gap_std": [0.0, 0.1, 0.5],
        "leakage_mean": [np.nan] * 3, "leakage_std": [np.nan] * 3, "mdl_mean": [np.nan] * 3, "mdl_std": [np.nan] * 3,
    })
    lines = format_table(agg, "md").splitlines()[2:]
    accuracy = [line.split(" | ")[4] for line in lines]
    assert accuracy == ["85.30 ± 0.00 [85.30, 85.30]", "85.34 ± 0.04 [85.30, 85.37]", "84.00 ± 0.40 [83.70, 84.30]"]
    assert [line.split(" | ")[5].rstrip(" |") for line in lines] == ["10.2 ± 0.0", "7.4 ± 0.1", "9.0 ± 0.5"]
    sweep = agg.drop(columns=["test_accuracy_lo", "test_accuracy_hi"]).assign(method="m", rt=[0.0, 1.0, 2.0])
    (_, table), = sweep_tables(sweep)
    assert table.iloc[0, 1:].tolist() == ["85.30 ± 0.00", "85.34 ± 0.04", "84.00 ± 0.40"]


def test_local_and_central_eps_never_share_an_axis(results):
    """ε of kinds with no common relation (local per representation, central per record) are
    drawn in panels apart, each axis naming its relation; kinds that convert share one axis, the
    converted ε drawn where it is in that relation (DP-SGD's add/remove ε at 2ε)."""
    axes, names = eps_labels(["federate", "noise", "unconstrained"])
    assert axes[LOCAL] == f"ε ({LOCAL})" and names["federate"] == f"federate ({LOCAL})"
    assert names["unconstrained"] == "unconstrained (not private)"
    axes, names = eps_labels(["pfld [dp]", "pfld [eo]"])
    assert axes[ATTRIBUTE] == f"ε ({ATTRIBUTE})"
    axes, names = eps_labels(["fld", "pfld [dp]", "dpsgd"])
    assert axes[ATTRIBUTE] == f"ε ({ATTRIBUTE})\nconverted: dpsgd 2ε" and CENTRAL_RECORD not in axes
    assert names == {"fld": "fld (not private)", "pfld [dp]": f"pfld [dp] ({ATTRIBUTE})",
                     "dpsgd": f"dpsgd ({CENTRAL_RECORD})"}
    mixed = results.copy()
    mixed.loc[mixed["method"] == "noise", "method"] = "dpsgd"  # dpsgd's eps is central
    fig = figure_privacy_accuracy(privacy_accuracy_by_eps(mixed))
    assert sorted(legend_labels(fig)) == [f"dpsgd ({CENTRAL_RECORD})", f"federate ({LOCAL})"]
    assert {ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()} == {f"ε ({CENTRAL_RECORD})", f"ε ({LOCAL})"}
    for ax in fig.axes:  # no panel holds both
        drawn = {label.split(" (")[0] for label in ax.get_legend_handles_labels()[1]}
        assert drawn <= {"dpsgd"} or drawn <= {"federate"}, drawn
    assert {ax.get_xlabel() for ax in figure_leakage_vs_eps(results).axes if ax.get_xlabel()} == {f"ε ({LOCAL})"}
    # PF-LD and DP-SGD convert to PF-LD's relation: one panel, DP-SGD's points at twice its ε
    central = results.copy()
    central["method"] = central["method"].replace({"noise": "dpsgd", "federate": "pfld"})
    by_eps = privacy_accuracy_by_eps(central)
    fig = figure_privacy_accuracy(by_eps)
    assert {ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()} == {f"ε ({ATTRIBUTE})\nconverted: dpsgd 2ε"}
    ax = fig.axes[0]
    lines = dict(zip(ax.get_legend_handles_labels()[1], ax.get_legend_handles_labels()[0]))
    drawn = lines[f"dpsgd ({CENTRAL_RECORD})"].lines[0].get_xdata()
    stated = by_eps.loc[(by_eps["method"] == "dpsgd") & (by_eps["dataset"] == "adult"), "eps"]
    assert sorted(np.asarray(drawn, float)) == pytest.approx(sorted(2 * stated))


def _local_and_central(results):
    """The synthetic rows with noise's replaced by DP-SGD's (central, add/remove one record)
    and eps a report-by key: FEDERATE (local) and DP-SGD side by side at one eps."""
    mixed = results[results["dataset"] == "adult"].copy()
    mixed.loc[mixed["method"] == "noise", "method"] = "dpsgd"
    return mixed


def test_a_report_with_local_and_central_methods_labels_each_and_never_compares_them_on_eps_unmarked(
        results, tmp_path):
    """All methods sat side by side 'at the same eps': every table and legend now names each
    method's kind, and the differences section marks each pair of different kinds."""
    from fairdp.analysis import aggregate_seeds, seed_intervals, supported_differences

    mixed = _local_and_central(results)
    agg = aggregate_seeds(select_by_rt(mixed, 1.0))
    assert dict(zip(agg["method"], agg["guarantee"])) == {
        "adversarial": "not private", "dpsgd": CENTRAL_RECORD, "federate": LOCAL, "unconstrained": "not private"}
    table = supported_differences(seed_intervals(agg), "test_accuracy").set_index("method")
    assert table.loc["federate", "guarantee"] == LOCAL and table.loc["dpsgd", "guarantee"] == CENTRAL_RECORD
    # no relation follows from both: never paired, each compared in its own relation; methods
    # without privacy, with two relations here, only with each other
    assert table.loc["federate", "dpsgd"] == "" and table.loc["dpsgd", "federate"] == ""
    assert table.loc["federate", "compared_in"] == LOCAL and table.loc["dpsgd", "compared_in"] == CENTRAL_RECORD
    assert table.loc["unconstrained", "compared_in"] == "not private"
    assert table.loc["unconstrained", "adversarial"] in ("<", ">", "≈", "?")
    assert not table.drop(columns=["compared_in", "guarantee"]).astype(str).apply(
        lambda c: c.str.endswith("†")).any().any()

    write_report(mixed, tmp_path, ReportOptions(rt=1.0, rts=(0, 1)))
    md = whole_report(tmp_path)
    html = whole_report(tmp_path, "html")
    main = md.split("## Test results", 1)[1].split("\n## ", 1)[0]
    assert f"| adult | federate | {LOCAL} |" in main and f"| adult | dpsgd | {CENTRAL_RECORD} |" in main
    assert DIFFERENT_GUARANTEES in main
    support = md.split("## Differences the intervals support", 1)[1].split("\n## ", 1)[0]
    assert "never paired" in support  # the caption says which methods are compared
    for block in support.split("**")[2::2]:  # each metric's table
        lines = [line for line in block.splitlines() if line.startswith("| adult |")]
        header = [c.strip() for c in block.splitlines()[2].strip("|").split("|")]
        cells = {line.split("|")[header.index("method") + 1].strip(): [c.strip() for c in line.strip("|").split("|")]
                 for line in lines}
        assert cells["federate"][header.index("dpsgd")] == "" and cells["dpsgd"][header.index("federate")] == ""
    privacy = md.split("## Privacy-accuracy trade-off", 1)[1].split("\n## ", 1)[0]
    assert f"| adult | dpsgd | {CENTRAL_RECORD} |" in privacy and f"| adult | federate | {LOCAL} |" in privacy
    assert "not comparable" in privacy
    assert f"federate: {LOCAL}" in md and f"dpsgd: {CENTRAL_RECORD}" in md  # the overview
    assert CENTRAL_RECORD in html and "Guarantee" in html
    # every figure legend names each method's kind
    fig = figure_privacy_accuracy(privacy_accuracy_by_eps(mixed))
    assert sorted(legend_labels(fig)) == [f"dpsgd ({CENTRAL_RECORD})", f"federate ({LOCAL})"]


def test_rows_written_before_the_guarantee_column_take_their_methods_kind(results):
    """Result sets from before the column still load and analyse: the kind comes from the
    method, as eps_scope's did; a stored kind wins over the registry's."""
    assert "guarantee" not in results.columns
    kinds = row_guarantees(results)
    assert set(kinds[results["method"] == "federate"]) == {LOCAL}
    assert set(kinds[results["method"] == "unconstrained"]) == {None}
    stored = results.assign(guarantee=np.where(results["method"] == "federate", "stored kind", None))
    assert set(row_guarantees(stored)[results["method"] == "federate"]) == {"stored kind"}
    agg = aggregate_seeds(select_by_rt(stored, 1.0))
    assert set(agg.loc[agg["method"] == "federate", "guarantee"]) == {"stored kind"}
    assert "| stored kind |" in format_table(agg, "md")


@pytest.mark.parametrize("dx, dy", [("max", "min"), ("min", "min"), ("max", "max"), ("min", "max")])
def test_a_front_is_drawn_as_the_staircase_of_what_it_attains(dx, dy):
    """Between two front points the line holds what the next point attains (a step), never a
    straight segment: every vertex is weakly dominated by a front point, and every point of
    the line is one that some front point attains or betters."""
    from fairdp.analysis import pareto_front
    from fairdp.analysis._plots import attainment_steps

    rng = np.random.default_rng(7)
    pts = pd.DataFrame({"x": rng.uniform(70, 90, 40), "y": rng.uniform(0, 20, 40)})
    front = pareto_front(pts, {"x": dx, "y": dy})
    xs, ys = attainment_steps(front["x"], front["y"], dx, dy)
    better = {"max": np.greater_equal, "min": np.less_equal}
    fx, fy = front["x"].to_numpy(), front["y"].to_numpy()
    assert len(xs) == 2 * len(front) - 1 and set(zip(fx, fy)) <= set(zip(xs, ys))
    for vx, vy in zip(xs, ys):  # weakly dominated by a front point
        assert (better[dx](fx, vx) & better[dy](fy, vy)).any()
    for (ax, ay), (bx, by) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):  # axis-parallel pieces only
        assert ax == bx or ay == by
    # the example the front of three configs gives: accuracy up, gap down
    steps = attainment_steps([80, 82, 85], [5, 7, 10], "max", "min")
    assert [list(v) for v in steps] == [[80, 80, 82, 82, 85], [5, 7, 7, 10, 10]]


def test_learning_curves_tick_whole_epochs():
    from fairdp.analysis._plots import figure_learning_curves

    curves = pd.DataFrame({"dataset": "adult", "method": "federate", "seed": 0, "config_id": "c",
                           "epoch": [1, 2, 3], "valid_accuracy": [80.0, 81.0, 81.5], "valid_gap": [5.0, 4.0, 4.5],
                           "valid_loss": [0.5, 0.4, 0.38], "kept": [False, True, False]})
    fig = figure_learning_curves(curves)
    fig.canvas.draw()
    for ax in fig.axes:
        if ax.get_xlabel() == "epoch":
            ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
            assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_a_setting_held_fixed_is_named_once_not_listed_in_every_pick(tmp_path):
    """Pooled methods each bring fixed settings (DP-FERMI's C_d, the adaptive methods' count
    noise) that widened the selected-configurations table past the page: a hyperparameter
    with one value in every pick that has it is named once, with its methods; one that
    varies stays a column."""
    rows = synthetic_results(datasets=("adult",), seeds=(0, 1), configs=6)
    rows["clip_dual"] = np.where(rows["method"] == "federate", 5.0, np.nan)
    write_report(rows, tmp_path, ReportOptions(rt=1.0))
    table = pd.read_csv(tmp_path / "tables" / "selected-configurations.csv")
    assert "clip_dual" not in table.columns and "lam" in table.columns and "eps" in table.columns
    page = (tmp_path / "pages" / "selected-configurations.md").read_text(encoding="utf-8")
    assert "so not listed: clip_dual 5 (federate)." in page
    rows.loc[(rows["method"] == "federate") & (rows["seed"] == 1), "clip_dual"] = 1.0  # each seed picks one
    write_report(rows, tmp_path, ReportOptions(rt=1.0))
    assert "clip_dual" in pd.read_csv(tmp_path / "tables" / "selected-configurations.csv").columns
    assert "not listed: clip_dual" not in (tmp_path / "pages" / "selected-configurations.md").read_text()


def test_a_main_table_too_long_and_too_wide_for_the_first_page_is_on_its_own_page(tmp_path):
    """Nine methods at up to nine ε each, three notions side by side (the baselines pooled with
    PF-LD's rows): 43 rows, 9 columns, too wide for two halves; the first page read in four
    screens. It now names the table's page instead of holding it; a shorter table stays."""
    rows = synthetic_results(datasets=("adult", "twitter"), seeds=(0, 1), configs=30)
    k = rows["config_id"].str[-2:].astype(float)
    private = rows["method"].isin(EPS_METHODS)
    # noise and federate at 30 (ε, C_p, C_d) cells each: 2 datasets x (2 x 30 + 2) rows, 9 columns
    rows["eps"] = np.where(private, k % 5 + 1, np.nan)
    rows["clip_primal"] = np.where(private, k // 10 + 1, np.nan)
    rows["clip_dual"] = np.where(private, k % 2 + 1, np.nan)
    by = ("eps", "clip_primal", "clip_dual")
    write_report(rows, tmp_path, ReportOptions(rt=1.0, by=by))
    first = (tmp_path / "report.md").read_text(encoding="utf-8")
    main = first.split("## Main results", 1)[1].split("\n## ", 1)[0]
    assert "do not fit this page: it is on a page of its own" in main and "| Method" not in main
    assert "](pages/test-results-at-rt-1.md)" in main
    assert "| Method" in (tmp_path / "pages" / "test-results-at-rt-1.md").read_text(encoding="utf-8")
    write_report(rows[rows["dataset"] == "adult"], tmp_path, ReportOptions(rt=1.0, by=by))
    main = (tmp_path / "report.md").read_text(encoding="utf-8").split("## Main results", 1)[1].split("\n## ", 1)[0]
    assert "| Method" in main and "do not fit" not in main
