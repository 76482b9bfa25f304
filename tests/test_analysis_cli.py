"""`fairdp analyze` and `fairdp report` over stored results, several directories combined."""

import io
import os

import numpy as np
import pandas as pd
import pytest

from fairdp.analysis import aggregate_seeds, select_by_rt
from fairdp.cli import main
from fairdp.study import ResultStore
from tests.test_analysis_report import PNG_SIGNATURE, synthetic_results

from .conftest import whole_report

pytestmark = pytest.mark.xdist_group("analysis_cli")  # one xdist worker computes the module's shared runs once


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """Synthetic rows written through the store, one directory per dataset (two 'hosts')."""
    root = tmp_path_factory.mktemp("results")
    df = synthetic_results()
    dirs = []
    for ds, part in df.groupby("dataset"):
        store = ResultStore(root / ds)
        for (method, seed), rows in part.groupby(["method", "seed"]):
            store.write_pack(rows.to_dict("records"), ds, method, int(seed), f"p{method}{seed}")
        dirs.append(str(root / ds))
    return dirs, df


def test_analyze_csv_is_the_rt_selection_aggregated_over_seeds(stored, capsys):
    dirs, df = stored
    expected = aggregate_seeds(select_by_rt(df, rt=1.0, fairness="tpr_gap"), fairness="tpr_gap")
    assert main(["analyze", *dirs, "--rt", "1", "--format", "csv"]) == 0
    got = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(got.columns) == list(expected.columns)
    assert set(got["dataset"]) == {"adult", "twitter"}
    got = got.sort_values(["dataset", "method"]).reset_index(drop=True)
    expected = expected.sort_values(["dataset", "method"]).reset_index(drop=True)
    np.testing.assert_allclose(got["test_accuracy_mean"], expected["test_accuracy_mean"])
    np.testing.assert_allclose(got["test_tpr_gap_std"], expected["test_tpr_gap_std"])
    assert (got["n_seeds"] == 3).all()


def test_analyze_markdown_and_latex(stored, capsys):
    dirs, _ = stored
    assert main(["analyze", *dirs, "--rt", "0"]) == 0
    out = capsys.readouterr().out
    assert "Accuracy ↑" in out and "TPR-gap ↓" in out and "± " in out
    assert main(["analyze", dirs[0], "--format", "latex", "--fairness", "grms"]) == 0
    out = capsys.readouterr().out
    assert "\\begin{tabular}" in out and "GRMS" in out


def test_report_writes_markdown_html_and_figures(stored, tmp_path, capsys):
    dirs, _ = stored
    assert main(["report", *dirs, "-o", str(tmp_path / "rep")]) == 0
    assert whole_report(tmp_path / "rep").count("|") > 10
    assert 'src="figures/' in (tmp_path / "rep" / "report.html").read_text()  # the figures beside it
    pngs = sorted((tmp_path / "rep/figures").glob("*.png"))
    assert len(pngs) >= 4 and all(p.read_bytes()[:8] == PNG_SIGNATURE for p in pngs)


def test_a_report_without_figures_has_the_same_tables_and_no_figures(stored, tmp_path, capsys):
    """``--no-figures``: the same pages' tables, no figure drawn, saved or linked, and a previous
    report's figures in the folder removed (the folder is the report)."""
    dirs, _ = stored
    assert main(["report", *dirs, "-o", str(tmp_path / "rep")]) == 0
    drawn = sorted(p.name for p in (tmp_path / "rep" / "figures").glob("*.png"))
    tables = {p.name: p.read_text() for p in (tmp_path / "rep" / "tables").glob("*.csv")}
    assert main(["report", *dirs, "-o", str(tmp_path / "rep"), "--no-figures"]) == 0
    assert drawn and not list((tmp_path / "rep" / "figures").glob("*"))
    assert {p.name: p.read_text() for p in (tmp_path / "rep" / "tables").glob("*.csv")} == tables
    assert "figures/" not in whole_report(tmp_path / "rep")


@pytest.mark.parametrize("as_uri", [False, True], ids=["path", "file-uri"])
def test_a_report_inside_its_results_directory_must_sit_under_an_underscore_name(stored, as_uri, capsys):
    """Parquet readers of the directory would read a report's files as rows; '_report' is skipped by them."""
    dirs, _ = stored
    given = f"file://{dirs[0]}" if as_uri else dirs[0]
    assert main(["report", given, "-o", f"{dirs[0]}/rep"]) == 2
    assert "-o:" in capsys.readouterr().err
    assert not os.path.exists(f"{dirs[0]}/rep")
    assert main(["report", given, "-o", f"{dirs[0]}/_rep", "--no-ci", "--rts", "1"]) == 0
    assert len(ResultStore(dirs[0]).read()[0]) == len(pd.read_parquet(dirs[0]))  # still only rows


def test_analyze_reads_parquet_files_of_rows_as_it_reads_directories(stored, tmp_path, capsys):
    """Rows exported elsewhere (one Parquet file, filtered with pandas) analyse like the
    directory they came from; a file that is not rows is refused naming it."""
    dirs, _ = stored
    assert main(["analyze", dirs[0], "--format", "csv"]) == 0
    from_dir = capsys.readouterr().out
    exported = tmp_path / "rows.parquet"
    ResultStore(dirs[0]).read()[0].to_parquet(exported)
    assert main(["analyze", str(exported), "--format", "csv"]) == 0
    assert capsys.readouterr().out == from_dir
    other = tmp_path / "other.parquet"
    pd.DataFrame({"x": [1]}).to_parquet(other)
    assert main(["analyze", str(other)]) == 2
    assert "other.parquet" in capsys.readouterr().err
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert main(["analyze", str(text)]) == 2
    assert "notes.txt" in capsys.readouterr().err


def test_analyze_bad_input_exits_2(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "none")]) == 2
    assert "none" in capsys.readouterr().err
    assert main(["analyze", str(tmp_path), "--rt", "-1"]) == 2


def test_the_committed_reference_results_still_read_and_select(capsys):
    from tests.conftest import REPO

    assert main(["analyze", str(REPO / "results/demo-reference"), "--format", "csv"]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert sorted(table["method"]) == ["adversarial", "federate", "noise", "unconstrained"]
    assert (table["n_seeds"] == 2).all()
    unconstrained = table.set_index("method").loc["unconstrained"]
    assert 80 < unconstrained["test_accuracy_mean"] < 90 and unconstrained["leakage_mean"] > 75


@pytest.fixture(scope="module")
def pfld_rows(tmp_path_factory):
    """A real PF-LD study's rows on synthetic data (no Ray: the pack trial itself): N, F-LD
    for two notions, PF-LD for two notions at eps 1 and 10 with two clip bounds, 2 seeds."""
    from fairdp.engine import TrainSettings
    from fairdp.methods import get_method
    from fairdp.metrics import ProbeSettings
    from fairdp.study import study_columns
    from fairdp.study.executors import Pack, StudyContext, run_pack

    root = tmp_path_factory.mktemp("pfld")
    methods = {"unconstrained": [{}], "fld": [{"fairness_notion": n} for n in ("dp", "eo")],
               "pfld": [{"fairness_notion": n, "eps": e, "clip_primal": c, "clip_dual": 5.0}
                        for n in ("dp", "eo") for e in (1.0, 10.0) for c in (1.0, 10.0)]}
    ctx = StudyContext(study="pfld-mini", dataset="synthetic",
                       dataset_options={"rows": 1500, "features": 8, "label_correlation": 0.6, "seed": 0},
                       train=TrainSettings(epochs=3, batch_size=200), leakage=False, mdl=False,
                       probe=ProbeSettings(), results=str(root), cpus_per_trial=1,
                       columns=tuple(study_columns(list(methods))))
    for seed in (0, 1):
        for name, configs in methods.items():
            m = get_method(name)
            run_pack(ctx, Pack(name, seed, tuple(configs), tuple(m.config_id(c) for c in configs)))
    return str(root)


def test_analyze_by_notion_and_eps_on_a_real_pfld_study(pfld_rows, capsys):
    assert main(["analyze", pfld_rows, "--fairness", "notion_gap", "--by", "fairness_notion,eps",
                 "--format", "csv"]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(table.columns[:5]) == ["dataset", "method", "fairness_notion", "eps", "n_seeds"]
    keys = set(zip(table["method"], table["fairness_notion"], table["eps"].fillna(-1)))
    assert keys == {("unconstrained", "dp", -1), ("unconstrained", "eo", -1), ("fld", "dp", -1), ("fld", "eo", -1),
                    ("pfld", "dp", 1.0), ("pfld", "dp", 10.0), ("pfld", "eo", 1.0), ("pfld", "eo", 10.0)}
    assert (table["n_seeds"] == 2).all()
    # before per-notion reporting, one row mixed every notion and eps of pfld
    assert main(["analyze", pfld_rows, "--fairness", "dp_gap", "--format", "csv"]) == 0
    mixed = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert (mixed["method"] == "pfld").sum() == 1
    assert main(["analyze", pfld_rows, "--by", "nosuch"]) == 2
    assert "by: no column 'nosuch'" in capsys.readouterr().err


def test_report_draws_violation_and_accuracy_against_eps_per_notion(pfld_rows, tmp_path):
    out = tmp_path / "report"
    assert main(["report", pfld_rows, "-o", str(out), "--fairness", "notion_gap", "--by", "fairness_notion,eps"]) == 0
    assert (out / "figures" / "violation_accuracy_eps.png").read_bytes().startswith(PNG_SIGNATURE)
    md = whole_report(out)
    assert "## Fairness notions against ε" in md and "| Notion | ε |" in md
    assert "No leakage or MDL probe was run." in md


def test_analyze_ci_adds_the_t_interval_of_each_mean_over_seeds(stored, capsys):
    from scipy.stats import t

    dirs, _ = stored
    assert main(["analyze", *dirs, "--ci", "90", "--format", "csv"]) == 0
    captured = capsys.readouterr()
    table = pd.read_csv(io.StringIO(captured.out))
    assert "90% t-interval" in captured.err
    half = t.ppf(0.95, 2) * table["test_accuracy_std"] / np.sqrt(3)  # 3 seeds
    np.testing.assert_allclose(table["test_accuracy_hi"] - table["test_accuracy_mean"], half)
    np.testing.assert_allclose(table["test_accuracy_mean"] - table["test_accuracy_lo"], half)
    assert main(["analyze", *dirs, "--ci", "95"]) == 0
    assert " [" in capsys.readouterr().out
    assert main(["analyze", *dirs, "--ci", "120"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--ci" in err[0]


def test_analyze_ci_selected_bootstraps_each_selected_row(pfld_rows, capsys):
    assert main(["analyze", pfld_rows, "--selected", "--ci", "95", "--draws", "400", "--format", "csv"]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    cis = table["test_accuracy 95% CI"].str.strip("[]").str.split(", ", expand=True).astype(float)
    assert (cis[0] <= table["test_accuracy"] + 1e-9).all() and (table["test_accuracy"] <= cis[1] + 1e-9).all()
    assert ((cis[1] - cis[0]) > 0).all()  # 300 test rows: an interval of a few points, never a point


def test_the_report_says_which_differences_the_intervals_support(stored, tmp_path):
    dirs, _ = stored
    assert main(["report", *dirs, "-o", str(tmp_path / "rep")]) == 0
    md = whole_report(tmp_path / "rep")
    support = md.split("## Differences the intervals support", 1)[1]
    assert "**Test accuracy**" in support and ("| <" in support or "| >" in support)
    assert "95% t-interval of the mean" in md
    # without intervals (--no-ci) the section is left out: the pooled report below


def test_rows_of_two_studies_are_pooled_only_when_asked_and_the_report_names_them(tmp_path, capsys):
    """A grid and a search of one method are two studies: selecting over both at once mixes
    their configs into one run, so it takes --pool, which says so and names them."""
    df = synthetic_results()
    dirs = []
    for name in ("grid", "search"):
        part = df[df["dataset"] == "adult"].assign(study=name)
        store = ResultStore(tmp_path / name)
        for (method, seed), rows in part.groupby(["method", "seed"]):
            store.write_pack(rows.to_dict("records"), "adult", method, int(seed), f"p{method}{seed}")
        dirs.append(str(tmp_path / name))
    assert main(["analyze", *dirs]) == 2
    err = capsys.readouterr().err
    assert "2 studies (grid, search)" in err and "--pool" in err and err.count("\n") == 1
    assert main(["analyze", *dirs, "--pool"]) == 0
    assert "pooling the rows of studies grid, search" in capsys.readouterr().err
    assert main(["report", *dirs, "-o", str(tmp_path / "rep"), "--pool", "--no-ci"]) == 0
    md = whole_report(tmp_path / "rep")
    assert "Rows of the studies grid, search, pooled" in md
    assert "Differences the intervals support" not in md and "t-interval" not in md  # --no-ci
    assert main(["analyze", dirs[0]]) == 0  # one study alone needs nothing


@pytest.mark.parametrize("command", ["analyze", "report", "compare"])
def test_a_failing_analysis_command_prints_only_its_error(stored, tmp_path, command, capsys):
    """The selection line (and a report's Pareto line) come after the command has succeeded: a
    refused --by printed "selection: ..." before its error."""
    dirs = stored[0]
    args = {"analyze": dirs, "report": [*dirs, "-o", str(tmp_path / "rep")], "compare": [dirs[0], dirs[0]]}[command]
    assert main([command, *args, "--by", "nosuchcol"]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == ["fairdp: error: by: no column 'nosuchcol' in the result rows"]
    assert captured.out == ""
    assert main([command, *args]) == 0
    assert f"fairdp {command}: no selection stored with " in capsys.readouterr().err  # said once it succeeded
