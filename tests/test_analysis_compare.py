"""`fairdp compare`: two runs of one study, bit for bit, pick for pick, and a paired test over
seeds checked against scipy's own paired t-test (the general computation)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairdp.analysis import compare_picks, identical_configs, paired_tests
from tests.conftest import REPO, assert_input_error, run_cli, run_main
from tests.test_analysis_report import synthetic_results

SEEDS = (0, 1, 2, 3, 4)


@pytest.fixture(scope="module")
def run_a():
    return synthetic_results(datasets=("adult",), seeds=SEEDS, configs=8)


def _shift(df, by_seed):
    out = df.copy()
    for seed, delta in by_seed.items():
        out.loc[out["seed"] == seed, "test_accuracy"] += delta
    return out


def test_the_same_rows_are_identical_in_every_respect(run_a):
    same, common, gap = identical_configs(run_a, run_a.copy())
    assert same == common == (run_a["status"] == "ok").sum() and gap == 0
    tests = paired_tests(compare_picks(run_a, run_a.copy()))
    assert (tests["verdict"] == "identical").all()


@pytest.mark.parametrize("deltas, verdict", [
    ({0: 0.3, 1: -0.2, 2: 0.1, 3: -0.4, 4: 0.2}, "within seed noise"),
    ({0: 2.1, 1: 1.8, 2: 2.4, 3: 1.9, 4: 2.2}, "differ"),
])
def test_the_paired_test_is_scipys_and_its_verdict_follows_the_interval(run_a, deltas, verdict):
    b = _shift(run_a, {s: -d for s, d in deltas.items()})  # a - b = deltas on the picks' test accuracy
    picks = compare_picks(run_a, b)
    assert picks["same_pick"].all()  # only test metrics moved: selection reads valid ones
    tests = paired_tests(picks)
    row = tests[(tests["method"] == "federate") & (tests["metric"] == "test_accuracy")].iloc[0]
    g = picks[picks["method"] == "federate"].sort_values("seed")
    ref = stats.ttest_rel(g["test_accuracy_a"], g["test_accuracy_b"])
    ci = ref.confidence_interval(0.95)
    assert row["p_value"] == pytest.approx(ref.pvalue, rel=1e-9)
    assert (row["ci_lo"], row["ci_hi"]) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert row["mean_diff"] == pytest.approx(np.mean(list(deltas.values())))
    assert row["verdict"] == verdict and row["seeds"] == len(SEEDS)
    fairness = tests[(tests["method"] == "federate") & (tests["metric"] == "test_tpr_gap")].iloc[0]
    assert fairness["verdict"] == "identical"


def test_one_seed_is_no_test_and_disjoint_runs_are_refused(run_a):
    one = run_a[run_a["seed"] == 0]
    tests = paired_tests(compare_picks(one, _shift(one, {0: 1.0})))
    assert (tests.loc[tests["metric"] == "test_accuracy", "verdict"] == "one seed: no test").all()
    other = run_a.assign(dataset="compas")
    with pytest.raises(ValueError, match="no \\(dataset, method, seed\\) in common"):
        compare_picks(run_a, other)


def test_the_cli_compares_two_result_directories(tmp_path):
    reference = REPO / "results" / "demo-reference"
    ok = run_cli("compare", str(reference), str(reference))
    assert ok.returncode == 0, ok.stderr
    assert "bit-identical" in ok.stdout and "identical" in ok.stdout and "## Paired differences" in ok.stdout
    csv = run_main("compare", str(reference), str(reference), "--format", "csv")  # fairdp's main, in this process
    table = pd.read_csv(__import__("io").StringIO(csv.stdout))
    assert set(table["verdict"]) == {"identical"}
    assert_input_error(run_main("compare", str(reference), str(tmp_path / "missing")), "missing")


def test_runs_in_two_precisions_are_named_so_and_not_expected_bit_identical(tmp_path):
    from fairdp.analysis import precisions

    rows = pd.read_parquet(REPO / "results" / "demo-reference")
    assert precisions(rows.assign(precision="bf16")) == ("bf16",)
    assert precisions(rows.drop(columns="precision")) == ()
    assert precisions(rows.assign(status="error")) == ()  # only ok rows say what was computed
    other = tmp_path / "other"
    for path in (REPO / "results" / "demo-reference").rglob("part-*.parquet"):
        table = pd.read_parquet(path)
        flipped = "float32" if (table["precision"] == "bf16").any() else "bf16"
        target = other / path.relative_to(REPO / "results" / "demo-reference")
        target.parent.mkdir(parents=True, exist_ok=True)
        table.assign(precision=table["precision"].where(table["precision"].isna(), flipped)).to_parquet(target)
    out = run_main("compare", str(REPO / "results" / "demo-reference"), str(other))
    assert out.returncode == 0, out.stderr
    assert "precision: A computed in" in out.stdout and "bit-identical rows are not expected" in out.stdout
    same = run_main("compare", str(REPO / "results" / "demo-reference"), str(REPO / "results" / "demo-reference"))
    assert "precision:" not in same.stdout
