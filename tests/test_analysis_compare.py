"""`fairdp compare`: two runs of one study, bit for bit, pick for pick, and a paired test over
seeds checked against scipy's own paired t-test (the general computation)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairdp.analysis import (
    compare_picks,
    detectable_difference,
    device_differences,
    paired_tests,
    protocol_differences,
)
from fairdp.analysis._shared import identical_configs
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
    from fairdp.analysis._shared import precisions

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
    assert "precision: A computed in" in out.stdout and "| precision | bf16 | float32 |" in out.stdout
    assert "(across protocols)" in out.stdout
    same = run_main("compare", str(REPO / "results" / "demo-reference"), str(REPO / "results" / "demo-reference"))
    assert "precision:" not in same.stdout


# -- the protocol, the device and the test's power ----------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5, 10])
def test_the_detectable_difference_is_detected_80_percent_of_the_time(n):
    """At the returned difference, a two-sided paired t-test at 0.05 rejects in 80% of
    simulated runs of n seeds (60,000 runs: +-0.5% at 3 standard errors)."""
    sd = 1.7
    delta = detectable_difference(sd, n)
    d = np.random.default_rng(n).normal(delta, sd, size=(60_000, n))
    p = stats.ttest_1samp(d, 0.0, axis=1).pvalue
    assert (p < 0.05).mean() == pytest.approx(0.8, abs=0.005)


def test_the_detectable_difference_meets_the_normal_approximation_and_its_edges():
    # many seeds: (z_0.975 + z_0.8) sd / sqrt(n)
    assert detectable_difference(2.0, 4000) == pytest.approx((1.959964 + 0.841621) * 2.0 / 4000 ** 0.5, rel=1e-3)
    assert detectable_difference(0.0, 5) == 0.0
    assert np.isnan(detectable_difference(1.0, 1)) and np.isnan(detectable_difference(float("nan"), 4))
    assert detectable_difference(1.0, 2) > 10 * detectable_difference(1.0, 10)  # two seeds resolve little


@pytest.mark.parametrize("deltas, resolution, verdict", [
    ({0: 0.3, 1: -0.2}, 1.0, "not resolved with 2 seeds"),
    ({0: 0.3, 1: -0.2, 2: 0.1, 3: -0.4, 4: 0.2}, 0.1, "not resolved with 5 seeds"),
    ({0: 0.3, 1: -0.2, 2: 0.1, 3: -0.4, 4: 0.2}, 1.0, "within seed noise"),
])
def test_no_difference_is_within_seed_noise_only_where_the_seeds_could_resolve_one(run_a, deltas, resolution,
                                                                                  verdict):
    seeds = list(deltas)
    a = run_a[run_a["seed"].isin(seeds)]
    b = _shift(a, {s: -d for s, d in deltas.items()})
    tests = paired_tests(compare_picks(a, b), resolution=resolution)
    row = tests[(tests["method"] == "federate") & (tests["metric"] == "test_accuracy")].iloc[0]
    sd = np.std(list(deltas.values()), ddof=1)
    assert row["detectable"] == pytest.approx(detectable_difference(sd, len(seeds)))
    assert row["detectable"] > abs(row["ci_hi"] - row["mean_diff"])  # never below the interval's half-width
    assert row["verdict"] == verdict


def _with_protocol(rows, **changes):
    import json

    def edit(text):
        value = json.loads(text)
        for key, v in changes.items():
            value[key] = v
        return json.dumps(value, sort_keys=True)

    return rows.assign(protocol=rows["protocol"].map(edit))


def test_every_protocol_setting_that_differs_is_named_per_method_and_the_code_apart(run_a):
    import json

    a = run_a.assign(protocol=json.dumps({"data": "f00d", "train": {"dtype": "float32"}}), fairdp_version="0.3.0")
    assert protocol_differences(a, a.copy()).empty
    b = _with_protocol(a, data="beef").assign(epochs=a["epochs"] + 1, fairdp_version="0.1.0")
    b.loc[b["method"] == "federate", "lr"] = 0.5
    diff = protocol_differences(a, b)
    named = diff.groupby("setting")["method"].apply(set).to_dict()
    every = set(a["method"])
    assert named["data fingerprint (labels, splits, feature shape)"] == every and named["epochs"] == every
    assert named["learning rate"] == {"federate"} and named["fairdp version"] == every
    row = diff[(diff["setting"] == "epochs")].iloc[0]
    assert row["b"] == str(int(row["a"]) + 1)
    nested = _with_protocol(a, train={"dtype": "bfloat16"})
    assert set(protocol_differences(a, nested)["setting"]) == {"train.dtype"}
    assert set(protocol_differences(a, a.drop(columns="protocol"))["b"]) == {"not recorded"}


def test_verdicts_across_protocols_say_so(run_a):
    b = _shift(run_a, {s: -0.3 for s in SEEDS})
    tests = paired_tests(compare_picks(run_a, b), across={("adult", "federate")})
    assert tests.loc[tests["method"] == "federate", "verdict"].str.endswith(" (across protocols)").all()
    assert not tests.loc[tests["method"] != "federate", "verdict"].str.contains("across").any()


def test_device_differences_name_each_field_or_an_unrecorded_device(run_a):
    import json

    from fairdp.engine._shared import device_record

    here = device_record("cpu")
    assert {"cpu", "cpu_capability", "cpu_flags", "threads", "gpu", "torch", "blas", "onednn"} <= set(here)
    a = run_a.assign(device=json.dumps(here, sort_keys=True))
    assert device_differences(a, a.copy()) == []
    # a capability other than this machine's (which may be either)
    other = dict(here, threads=here["threads"] + 3,
                 cpu_capability="AVX2" if here["cpu_capability"] != "AVX2" else "AVX512")
    diff = device_differences(a, run_a.assign(device=json.dumps(other, sort_keys=True)))
    assert [f for f, _, _ in diff] == ["cpu_capability", "threads"]
    assert device_differences(a, run_a)[0][0] == "device" and device_differences(a, run_a)[0][2] == "not recorded"


def test_a_run_stores_the_device_its_packs_computed_on(tmp_path):
    import json

    import yaml

    from fairdp.engine._shared import device_record

    (tmp_path / "s.yaml").write_text(yaml.safe_dump({
        "name": "dev", "dataset": {"name": "synthetic", "rows": 300, "features": 5}, "seeds": [0],
        "train": {"epochs": 1, "batch_size": 100}, "methods": {"unconstrained": {}}}))
    run = run_main("run", "s.yaml", "--executor", "local", "--results", "r", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    rows = pd.read_parquet(tmp_path / "r")
    assert {json.dumps(json.loads(t), sort_keys=True) for t in rows["device"]} == \
        {json.dumps(device_record("cpu"), sort_keys=True)}
