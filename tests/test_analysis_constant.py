"""Constant models (one class predicted for (nearly) every test row) are flagged in every table
that shows them, and left out of the supported differences and the Pareto fronts unless asked."""

import io
import warnings

import numpy as np
import pandas as pd
import pytest

from fairdp.analysis import (
    ReportOptions,
    aggregate_seeds,
    constant_models,
    format_table,
    mark_constant_picks,
    rt_sweep,
    seed_intervals,
    select_by_rt,
    selected_configs,
    supported_differences,
    sweep_tables,
    with_constant_picks,
    write_report,
)
from fairdp.analysis._intervals import not_distinguishable
from fairdp.analysis._predictions import CONSTANT_RATE, selections_at
from fairdp.analysis._shared import render_table
from fairdp.analysis._tables import CONSTANT_MARK, CONSTANT_ROW
from tests.test_analysis_report import synthetic_results

from .conftest import counts_text, whole_report

pytestmark = pytest.mark.xdist_group("analysis_constant")  # one xdist worker computes the module's shared runs once

CONSTANT = "noise"  # the method whose every model predicts class 0, as DP-SGD did at 5 epochs (issue 40)
N_TEST = 1000


def rows_with_counts(seed: int = 0, configs: int = 4) -> pd.DataFrame:
    """Synthetic rows whose ``CONSTANT`` method predicts 0 for every test row (its gaps 0, the
    lowest of all: RT selection picks it and it looks the fairest), the others 80% right."""
    rng = np.random.default_rng(seed)
    df = synthetic_results(seed=seed, methods=("unconstrained", CONSTANT, "federate"), configs=configs)
    y, s = rng.integers(0, 2, N_TEST), rng.integers(0, 2, N_TEST)
    constant = (df["method"] == CONSTANT).to_numpy()
    df["test_confusion"] = [counts_text(np.zeros(N_TEST, int) if c else np.where(rng.random(N_TEST) < 0.8, y, 1 - y), y, s)
                            for c in constant]
    gaps = ["valid_tpr_gap", "test_tpr_gap", "valid_grms", "test_grms"]
    df.loc[constant, gaps] = 0.0
    df.loc[constant, "test_accuracy"] = 75.2
    return df


@pytest.fixture(scope="module")
def rows():
    return rows_with_counts()


@pytest.fixture(scope="module")
def selected(rows):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the two failed rows
        return select_by_rt(rows, 1.0)


@pytest.fixture(scope="module")
def agg(selected):
    return with_constant_picks(aggregate_seeds(selected), selected)


@pytest.mark.parametrize("positives, constant", [
    (0, True), (N_TEST, True),  # exactly constant, either class
    (int(N_TEST * CONSTANT_RATE / 100) - 1, True),  # all but fewer than CONSTANT_RATE %: nearly constant
    (int(N_TEST * CONSTANT_RATE / 100), False), (N_TEST // 2, False), (N_TEST - 20, False),
])
def test_a_model_is_constant_when_it_predicts_one_class_for_all_but_fewer_than_constant_rate_percent(
        positives, constant):
    rng = np.random.default_rng(2)
    y, s = rng.integers(0, 2, N_TEST), rng.integers(0, 2, N_TEST)
    y_pred = np.zeros(N_TEST, int)
    y_pred[rng.choice(N_TEST, positives, replace=False)] = 1
    flags = constant_models(pd.DataFrame({"test_confusion": [counts_text(y_pred, y, s)]}))
    assert flags.dtype == "boolean" and bool(flags.iloc[0]) is constant


def test_constancy_holds_for_more_than_two_classes_and_is_unknown_without_counts():
    rng = np.random.default_rng(3)
    y, s = rng.integers(0, 3, N_TEST), rng.integers(0, 2, N_TEST)
    rows = pd.DataFrame({"test_confusion": [counts_text(np.full(N_TEST, 2), y, s, 3), counts_text(y, y, s, 3), None, ""]},
                        index=[10, 11, 12, 13])
    flags = constant_models(rows)
    assert list(flags.index) == [10, 11, 12, 13]
    assert flags.iloc[0] and not flags.iloc[1] and flags.iloc[2:].isna().all()
    old = constant_models(pd.DataFrame({"method": ["m"]}))  # written before rows stored counts
    assert old.isna().all()


def test_aggregates_count_the_seeds_whose_pick_is_constant(agg):
    by_method = agg.set_index(["dataset", "method"])["n_constant"]
    assert (by_method.xs(CONSTANT, level="method") == 3).all()
    assert (by_method.drop(CONSTANT, level="method") == 0).all()
    assert str(agg["n_constant"].dtype) == "Int64"


def test_old_rows_without_counts_leave_the_table_as_it_was():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        selected = select_by_rt(synthetic_results(configs=3), 1.0)  # no test_confusion column
    agg = aggregate_seeds(selected)
    assert with_constant_picks(agg, selected).equals(agg)
    assert mark_constant_picks(selected_configs(selected), selected).equals(selected_configs(selected))
    assert CONSTANT_MARK not in format_table(agg, "md")


@pytest.mark.parametrize("fmt, mark", [("md", CONSTANT_MARK), ("html", CONSTANT_MARK), ("latex", r"$^\ddagger$")])
def test_the_table_marks_the_method_and_its_footnote_says_in_how_many_seeds(agg, fmt, mark):
    text = format_table(agg, fmt)
    assert text.count(f"{CONSTANT}{mark}") == 2  # one per dataset
    assert "unconstrained" + mark not in text and "federate" + mark not in text
    assert f"{CONSTANT} on adult: 3 of 3 seeds" in text and f"{CONSTANT} on twitter: 3 of 3 seeds" in text
    assert f"all but fewer than {CONSTANT_RATE:g}" in text


def test_the_csv_carries_the_count_itself(agg):
    table = pd.read_csv(io.StringIO(format_table(agg, "csv")))
    assert dict(zip(table["method"], table["n_constant"])) == {"unconstrained": 0, CONSTANT: 3, "federate": 0}


def test_a_table_without_constant_picks_has_no_footnote(agg):
    plain = agg[agg["method"] != CONSTANT]
    assert format_table(plain, "md").count("\n") == 2 + len(plain)


def test_selected_configs_say_which_picks_are_constant(selected):
    table = mark_constant_picks(selected_configs(selected), selected)
    assert list(table.columns).index("constant") == list(table.columns).index("test_tpr_gap") + 1
    assert (table["constant"] == (table["method"] == CONSTANT)).all()
    assert "| True |" in render_table(table)
    old = selected.copy()
    old.loc[old.index[0], "test_confusion"] = None  # a row written before rows stored counts
    shown = render_table(mark_constant_picks(selected_configs(old), old)).splitlines()[2]
    assert "<NA>" not in shown and shown.split(" | ")[list(table.columns).index("constant")] == "-"


def test_sweep_tables_count_each_rts_constant_picks(rows):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sweep = with_constant_picks(rt_sweep(rows, [0, 1, 3]), selections_at(rows, [0, 1, 3]), ["rt"])
    tables = dict(sweep_tables(sweep))
    title = next(t for t in tables if t.startswith(f"{CONSTANT} on adult"))
    last = tables[title].iloc[-1]
    assert last["Metric"] == CONSTANT_ROW
    assert [last[f"RT {rt}"] for rt in (0, 1, 3)] == [f"3 of 3{CONSTANT_MARK}"] * 3
    other = tables[next(t for t in tables if t.startswith("federate on adult"))].iloc[-1]
    assert [other[f"RT {rt}"] for rt in (0, 1, 3)] == ["0 of 3"] * 3


def test_supported_differences_leave_constant_picks_out_unless_asked(agg):
    intervals = seed_intervals(agg)
    table = supported_differences(intervals, "test_tpr_gap")
    assert CONSTANT not in set(table["method"]) and CONSTANT not in table.columns
    assert set(table["method"]) == {"unconstrained", "federate"}
    kept = supported_differences(intervals, "test_tpr_gap", keep_constant=True)
    assert CONSTANT in set(kept["method"]) and CONSTANT in kept.columns
    # the old table: the constant method, gap 0.0 ± 0.0, ranks below every other
    assert (kept.loc[kept["method"] == CONSTANT, "federate"] == "<").all()


def test_the_best_a_mark_compares_with_is_never_a_constant_pick(agg):
    intervals = seed_intervals(agg)
    marks = not_distinguishable(intervals, "test_tpr_gap", "min")
    constant = (intervals["method"] == CONSTANT).to_numpy()
    assert not marks[constant].any()
    old = not_distinguishable(intervals, "test_tpr_gap", "min", keep_constant=True)
    assert not np.array_equal(marks, old)  # the constant method (0.0 ± 0.0) was the best: federate's mark changes


@pytest.fixture(scope="module")
def report(rows, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_report(rows, out, ReportOptions(rts=(0, 1)))
    return out


def _section(md: str, title: str) -> str:
    return md.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_the_reports_main_table_marks_and_footnotes_the_constant_method(report):
    main = _section(whole_report(report), "Test results at RT = 1")
    assert f"| adult | {CONSTANT}{CONSTANT_MARK} |" in main
    assert f"{CONSTANT} on adult: 3 of 3 seeds" in main
    html = whole_report(report, "html")
    assert f"<td>{CONSTANT}{CONSTANT_MARK}</td>" in html and 'class="footnote"' in html


def test_the_reports_other_tables_flag_constant_picks(report):
    md = whole_report(report)
    picks = _section(md, "Selected configurations")
    assert "constant: the pick is a constant model" in picks  # the caption names the column
    assert all(("| True |" in line) == (f"| {CONSTANT} |" in line) for line in picks.splitlines() if "| adult |" in line)
    sweep = _section(md, "Relaxation-threshold sweep")
    assert f"| {CONSTANT_ROW} | 3 of 3{CONSTANT_MARK} | 3 of 3{CONSTANT_MARK} |" in sweep


def test_the_report_leaves_constant_picks_out_of_the_supported_differences_and_says_so(report):
    support = _section(whole_report(report), "Differences the intervals support")
    header = next(line for line in support.splitlines() if line.startswith("| dataset"))
    assert CONSTANT not in header
    assert f"Left out, their pick being a constant model in some seed (‡ in the tables): {CONSTANT} on adult" in support


def test_the_reports_pareto_fronts_leave_constant_models_out_unless_asked(rows, report, tmp_path):
    fronts = _section(whole_report(report), "Pareto fronts")
    constant_rows = int(((rows["method"] == CONSTANT) & (rows["status"] == "ok")).sum())
    assert f"{constant_rows} configs whose model is constant" in fronts
    assert f"| {CONSTANT} |" not in fronts
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_report(rows, tmp_path, ReportOptions(rts=(), ci=None, keep_constant=True))
    kept = _section(whole_report(tmp_path), "Pareto fronts")
    assert f"| {CONSTANT} |" in kept and "configs whose model is constant" not in kept


def test_fairdp_analyze_and_run_print_the_mark(rows, tmp_path, capsys):
    from fairdp.cli import _print_results, main
    from fairdp.study import ResultStore

    store = ResultStore(tmp_path / "r")
    for (ds, method, seed), part in rows.groupby(["dataset", "method", "seed"]):
        store.write_pack(part.to_dict("records"), ds, method, int(seed), f"p{ds}{method}{seed}")
    assert main(["analyze", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert f"| {CONSTANT}{CONSTANT_MARK} |" in out and "3 of 3 seeds" in out
    assert main(["analyze", str(tmp_path / "r"), "--selected", "--format", "csv"]) == 0
    picks = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert (picks["constant"] == (picks["method"] == CONSTANT)).all()
    _print_results(str(tmp_path / "r"), "tpr_gap", 1.0)  # what `fairdp run` prints at its end
    assert f"| {CONSTANT}{CONSTANT_MARK} |" in capsys.readouterr().out


def test_fairdp_report_keeps_constant_models_only_when_asked(rows, tmp_path):
    from fairdp.cli import main
    from fairdp.study import ResultStore

    store = ResultStore(tmp_path / "r")
    for (ds, method, seed), part in rows.groupby(["dataset", "method", "seed"]):
        store.write_pack(part.to_dict("records"), ds, method, int(seed), f"p{ds}{method}{seed}")
    # the flag reaches write_report's keep_constant (the default leaves them out: the test above)
    from fairdp.cli import build_parser

    assert build_parser().parse_args(["report", "r", "-o", "o"]).keep_constant is False
    out = tmp_path / "report"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["report", str(tmp_path / "r"), "-o", str(out), "--rts", "1", "--keep-constant"]) == 0
    fronts = _section(whole_report(out), "Pareto fronts")
    assert f"| {CONSTANT} |" in fronts and "configs whose model is constant" not in fronts
