"""Figures for a paper: `fairdp figure KIND` draws one report figure with the study's selection
as png, pdf or svg; `fairdp report --figure-format` saves every figure in those formats too;
`--figure-style` draws them under a matplotlib style or rcParams."""

from __future__ import annotations

import pytest

from fairdp.analysis import ReportOptions

from .conftest import REPO, assert_input_error, run_main

DEMO = str(REPO / "results" / "demo-reference")
MAGIC = {".png": b"\x89PNG", ".pdf": b"%PDF", ".svg": b"<?xml"}


@pytest.mark.parametrize("kind, suffix", [("pareto_fronts", ".pdf"), ("rt_sweep", ".svg"),
                                          ("fairness_accuracy_bins", ".png")])
def test_one_figure_is_written_in_the_format_its_suffix_names(tmp_path, kind, suffix):
    out = tmp_path / f"fig{suffix}"
    run = run_main("figure", kind, DEMO, "-o", str(out), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(out) and out.read_bytes().startswith(MAGIC[suffix])
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temp file left


def test_the_figure_is_the_reports_own(tmp_path):
    """Drawn by the report's code from the same selection: the same panels and legend."""
    from fairdp.analysis import legend_labels, report_figures
    from fairdp.study import read_results

    figure = report_figures(read_results(DEMO), only=["pareto_fronts"])
    assert list(figure) == ["pareto_fronts"]  # only the figure asked for is drawn
    full = report_figures(read_results(DEMO))["pareto_fronts"]
    assert len(figure["pareto_fronts"].axes) == len(full.axes)
    assert legend_labels(figure["pareto_fronts"]) == legend_labels(full)


def test_a_style_is_applied_to_what_is_drawn():
    from fairdp.analysis import report_figures
    from fairdp.study import read_results

    fig = report_figures(read_results(DEMO), ReportOptions(figure_style={"axes.facecolor": "#123456"}), only=["pareto_fronts"])["pareto_fronts"]
    assert all(ax.get_facecolor()[:3] == pytest.approx((0x12 / 255, 0x34 / 255, 0x56 / 255)) for ax in fig.axes)


def test_the_report_saves_each_figure_in_each_format(tmp_path):
    out = tmp_path / "rep"
    run = run_main("report", DEMO, "-o", str(out), "--figure-format", "pdf,svg", "--figure-style",
                   "font.size=7", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    pngs = sorted(p.stem for p in (out / "figures").glob("*.png"))
    assert pngs and sorted(p.stem for p in (out / "figures").glob("*.pdf")) == pngs
    assert sorted(p.stem for p in (out / "figures").glob("*.svg")) == pngs


@pytest.mark.parametrize("args, names", [
    (["figure", "nosuch", DEMO, "-o", "f.pdf"], ["KIND", "nosuch"]),
    (["figure", "pareto_fronts", DEMO, "-o", "f.jpg"], ["-o", ".png, .pdf or .svg"]),
    (["figure", "pareto_fronts", DEMO, "-o", "f.pdf", "--figure-style", "no.such=1"], ["--figure-style", "no.such"]),
    (["figure", "pareto_fronts", DEMO, "-o", "f.pdf", "--figure-style", "missing.mplstyle"],
     ["--figure-style", "missing.mplstyle"]),
    (["report", DEMO, "-o", "rep", "--figure-format", "png,jpg"], ["--figure-format", "jpg"]),
])
def test_bad_figure_options_are_one_line_and_write_nothing(tmp_path, args, names):
    assert_input_error(run_main(*args, cwd=tmp_path), *names)
    assert list(tmp_path.iterdir()) == []


def test_the_clis_figure_kinds_are_the_reports():
    from fairdp import cli
    from fairdp.analysis._shared import FIGURES

    assert cli.FIGURE_KINDS == tuple(FIGURES)
