"""Small groups: a gap leaves out a group's rate over fewer than ``min_group_count`` rows of its
conditioning set, held to fairlearn's MetricFrame over the groups kept; the study setting, its
resume rule and what the analysis and report show of such groups."""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np
import pandas as pd
import pytest
import yaml
from fairlearn.metrics import MetricFrame, false_positive_rate, selection_rate, true_positive_rate
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import accuracy_score

from fairdp.analysis import groups_too_small, per_group_rates
from fairdp.analysis._intervals import bootstrap_intervals
from fairdp.analysis._rows import min_group_counts
from fairdp.errors import InputError
from fairdp.fairness import (
    MIN_GROUP_COUNT,
    ap_gap,
    confusion,
    dp_gap,
    eo_gap,
    group_rates,
    scores_from_confusion,
    small_groups,
    tpr_gap,
)
from fairdp.study import load_spec, run_study
from tests.conftest import run_main


def _kept_spread(values: pd.Series, sizes: pd.Series, least: int) -> float:
    """max - min of the groups' rates whose conditioning set holds at least ``least`` rows (and
    one), NaN with fewer than two such groups: the definition, written out."""
    kept = values[(sizes >= max(least, 1)).to_numpy()].dropna()
    return float(kept.max() - kept.min()) if len(kept) >= 2 else math.nan


def _binary_case(seed: int, n: int, n_groups: int):
    rng = np.random.default_rng(seed)
    # uneven groups, so that some fall under the threshold and some do not
    weights = rng.dirichlet(np.full(n_groups, 0.7))
    s = rng.choice(n_groups, size=n, p=weights)
    y = (rng.random(n) < rng.uniform(0.05, 0.6)).astype(int)
    y_pred = (rng.random(n) < 0.5).astype(int)
    return y, y_pred, s


@pytest.mark.filterwarnings("error")  # an undefined rate never reaches a division
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(20, 400), n_groups=st.integers(2, 7),
       least=st.integers(1, 60))
def test_gaps_at_a_minimum_are_fairlearns_spreads_over_the_groups_kept(seed, n, n_groups, least):
    y, y_pred, s = _binary_case(seed, n, n_groups)
    frame = MetricFrame(metrics={"tpr": true_positive_rate, "fpr": false_positive_rate, "sr": selection_rate,
                                 "acc": accuracy_score}, y_true=y, y_pred=y_pred, sensitive_features=s)
    by = frame.by_group * 100
    groups = by.index.to_numpy()
    rows = pd.Series(np.bincount(s, minlength=n_groups)[groups])
    positives = pd.Series(np.bincount(s[y == 1], minlength=n_groups)[groups])
    want = {
        "tpr": _kept_spread(by["tpr"].reset_index(drop=True), positives, least),
        "fpr": _kept_spread(by["fpr"].reset_index(drop=True), rows - positives, least),
        "sr": _kept_spread(by["sr"].reset_index(drop=True), rows, least),
        "acc": _kept_spread(by["acc"].reset_index(drop=True), rows, least),
    }
    k = {"n_groups": n_groups, "min_group_count": least}
    got_tpr = tpr_gap(y, y_pred, s, **k)
    assert got_tpr == pytest.approx(want["tpr"], nan_ok=True, abs=1e-9)
    assert dp_gap(y_pred, s, **k) == pytest.approx(want["sr"], nan_ok=True, abs=1e-9)
    assert ap_gap(y, y_pred, s, **k) == pytest.approx(want["acc"], nan_ok=True, abs=1e-9)
    both = [v for v in (want["tpr"], want["fpr"]) if not math.isnan(v)]
    assert eo_gap(y, y_pred, s, **k) == pytest.approx(max(both) if both else math.nan, nan_ok=True, abs=1e-9)
    # the counts path the rows take gives the same numbers
    scores = scores_from_confusion(confusion(y, y_pred, s, n_groups=n_groups), least)
    assert scores["tpr_gap"] == pytest.approx(got_tpr, nan_ok=True, abs=1e-12)


@pytest.mark.filterwarnings("error")  # an undefined rate never reaches a division
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(20, 300), n_groups=st.integers(2, 6),
       least=st.integers(1, 60))
def test_small_groups_lists_exactly_the_sets_under_the_minimum(seed, n, n_groups, least):
    y, y_pred, s = _binary_case(seed, n, n_groups)
    got = small_groups(confusion(y, y_pred, s, n_groups=n_groups), least)
    want = []
    for g in range(n_groups):
        sizes = {"rows": int((s == g).sum()), "positives": int(((s == g) & (y == 1)).sum()),
                 "negatives": int(((s == g) & (y == 0)).sum())}
        want += [(g, 1, name, size) for name, size in sizes.items() if 0 < size < least]
    assert list(got.itertuples(index=False, name=None)) == want
    # and their rates are exactly the ones group_rates leaves undefined
    rates = group_rates(y, y_pred, s, n_groups=n_groups, min_group_count=least).set_index("group")
    small_tpr = set(got.loc[got["set"] == "positives", "group"])
    for g in range(n_groups):
        assert math.isnan(rates.loc[g, "tpr"]) == (g in small_tpr or not ((s == g) & (y == 1)).any())


def test_a_group_of_one_positive_no_longer_decides_the_tpr_gap():
    # group 2: 20 rows, 1 positive, predicted wrong; groups 0 and 1: 200 rows, TPRs 80 and 70
    y = np.r_[np.ones(100), np.zeros(100), np.ones(100), np.zeros(100), [1], np.zeros(19)].astype(int)
    y_pred = np.r_[np.ones(80), np.zeros(120), np.ones(70), np.zeros(130), [0], np.zeros(19)].astype(int)
    s = np.r_[np.zeros(200), np.ones(200), np.full(20, 2)].astype(int)
    assert tpr_gap(y, y_pred, s) == pytest.approx(80.0)  # 80 - 0: the one positive decides it
    assert tpr_gap(y, y_pred, s, min_group_count=MIN_GROUP_COUNT) == pytest.approx(10.0)
    got = small_groups(confusion(y, y_pred, s), MIN_GROUP_COUNT)
    assert list(got.itertuples(index=False, name=None)) == [(2, 1, "rows", 20), (2, 1, "positives", 1),
                                                             (2, 1, "negatives", 19)]


@pytest.mark.parametrize("bad", [0, -3, 1.5, True, "30", None])
def test_a_bad_minimum_is_refused_naming_it(bad):
    y = np.array([0, 1, 0, 1])
    for call in (lambda: tpr_gap(y, y, y, min_group_count=bad), lambda: small_groups(confusion(y, y, y), bad),
                 lambda: scores_from_confusion(confusion(y, y, y), bad)):
        with pytest.raises(InputError, match="min_group_count"):
            call()


# -- the analysis reads each row's minimum from its protocol ------------------------------------

def _row(seed: int, conf: np.ndarray, protocol: dict | None, **extra) -> dict:
    return {"dataset": "d", "method": "m", "seed": seed, "config_id": f"c{seed}", "status": "ok",
            "test_confusion": json.dumps(conf.tolist()), "valid_confusion": json.dumps(conf.tolist()),
            "protocol": json.dumps(protocol) if protocol is not None else None, **extra}


def _conf(small_positives: int) -> np.ndarray:
    # (G=3, C=2, C=2): groups 0 and 1 of 100 rows, 50 positives; group 2 of 40 rows
    big = np.array([[40, 10], [10, 40]])
    small = np.array([[40 - small_positives, 0], [small_positives, 0]])
    return np.stack([big, big, small])


def test_rows_name_their_minimum_in_their_protocol_and_old_rows_read_as_one():
    rows = pd.DataFrame([_row(0, _conf(2), {"train": {"min_group_count": 30}}),
                         _row(1, _conf(2), {"train": {"epochs": 3}}), _row(2, _conf(2), None)])
    np.testing.assert_array_equal(min_group_counts(rows), [30, 1, 1])
    np.testing.assert_array_equal(min_group_counts(rows.drop(columns="protocol")), [1, 1, 1])


def test_per_group_rates_and_the_small_groups_follow_each_rows_minimum():
    rows = pd.DataFrame([_row(0, _conf(2), {"train": {"min_group_count": 30}}),
                         _row(1, _conf(3), {"train": {"min_group_count": 30}}),
                         _row(2, _conf(2), {"train": {"min_group_count": 1}})])
    rates = per_group_rates(rows).set_index(["seed", "group"])
    assert math.isnan(rates.loc[(0, 2), "tpr"]) and rates.loc[(0, 2), "selection_rate"] == 0.0  # 40 rows >= 30
    assert rates.loc[(2, 2), "tpr"] == 0.0  # the same counts at 1: estimated
    small = groups_too_small(rows)
    assert list(small.columns) == ["dataset", "split", "group", "class", "set", "n_seeds", "count_min",
                                   "count_max", "min_group_count"]
    test = small[small["split"] == "test"]
    assert test[["group", "set", "n_seeds", "count_min", "count_max", "min_group_count"]].values.tolist() == [
        [2, "positives", 2, 2, 3, 30]]
    assert set(small["split"]) == {"valid", "test"}
    assert groups_too_small(rows.iloc[[2]]).empty


def test_bootstrap_gaps_use_the_rows_minimum():
    rows = pd.DataFrame([_row(0, _conf(2), {"train": {"min_group_count": 30}}, test_tpr_gap=0.0)])
    out = bootstrap_intervals(rows, draws=200, metrics=("test_tpr_gap",))
    # groups 0 and 1 have the same TPR in every draw's expectation; with group 2's positives
    # (TPR 0) left in, a draw that resamples one of them has a gap of about 80
    assert out["test_tpr_gap_hi"].iloc[0] < 40
    loose = pd.DataFrame([_row(0, _conf(2), {"train": {"min_group_count": 1}}, test_tpr_gap=0.0)])
    assert bootstrap_intervals(loose, draws=200, metrics=("test_tpr_gap",))["test_tpr_gap_hi"].iloc[0] > 70


# -- the study setting ------------------------------------------------------------------------------

def _study(path, **evaluate):
    spec = {"name": "small", "dataset": {"name": "synthetic", "rows": 600, "features": 6}, "seeds": [0],
            "train": {"epochs": 1, "batch_size": 200}, "evaluate": {"leakage": False, "mdl": False, **evaluate},
            "methods": {"unconstrained": {}}}
    path.write_text(yaml.safe_dump(spec))
    return path


def test_the_study_default_and_bad_values(tmp_path):
    assert load_spec(_study(tmp_path / "a.yaml")).train.min_group_count == MIN_GROUP_COUNT == 30
    assert load_spec(_study(tmp_path / "b.yaml", min_group_count=5)).train.min_group_count == 5
    for bad in (0, 2.5, "x", True):
        with pytest.raises(InputError, match=r"^evaluate\.min_group_count: "):
            load_spec(_study(tmp_path / "c.yaml", min_group_count=bad))


def test_rows_are_scored_at_the_studys_minimum_and_resume_only_at_it(tmp_path):
    results = tmp_path / "r"
    with open(os.devnull, "w") as quiet:
        run_study(load_spec(_study(tmp_path / "s.yaml", min_group_count=1000)), str(results), executor="local",
                  progress_stream=quiet)
    (part,) = results.rglob("part-*.parquet")
    rows = pd.read_parquet(part)
    assert json.loads(rows["protocol"].iloc[0])["train"]["min_group_count"] == 1000
    # no group of 600 rows' splits reaches 1000 rows: every gap is undefined, every group listed
    assert rows[[c for c in rows.columns if c.endswith("_gap") or c == "test_grms"]].isna().all().all()
    assert set(groups_too_small(rows)["set"]) == {"rows", "positives", "negatives"}
    # another minimum is another protocol
    proc = run_main("run", str(_study(tmp_path / "t.yaml")), "--results", str(results), "--executor", "local")
    assert proc.returncode == 2 and "evaluate.min_group_count 1000" in proc.stderr and " 30" in proc.stderr
    # rows stored before the setting existed were scored at 1: a study at 1 resumes into them
    protocol = json.loads(rows["protocol"].iloc[0])
    del protocol["train"]["min_group_count"]
    rows["protocol"] = json.dumps(protocol)
    rows.to_parquet(part)
    proc = run_main("run", str(_study(tmp_path / "u.yaml")), "--results", str(results), "--executor", "local")
    assert proc.returncode == 2 and "evaluate.min_group_count 1," in proc.stderr, proc.stderr
    proc = run_main("run", str(_study(tmp_path / "v.yaml", min_group_count=1)), "--results", str(results),
                    "--executor", "local")
    assert proc.returncode == 0 and "already stored" in proc.stderr, proc.stderr[-2000:]


NAN_SEARCH = {"name": "nan-search", "dataset": {"name": "synthetic", "rows": 600, "features": 6}, "seeds": [0],
            "train": {"epochs": 1, "batch_size": 200},
            "evaluate": {"leakage": False, "mdl": False, "min_group_count": 1000},
            "methods": {"unconstrained": {}},
            "search": {"method": "noise", "sampler": "tpe", "trials": 3, "seed": 0,
                       "objectives": {"valid_accuracy": "max", "valid_tpr_gap": "min"},
                       "space": {"eps": {"low": 1, "high": 20, "log": True}}}}


def test_a_search_whose_every_objective_is_nan_stops_with_a_one_line_error(tmp_path):
    """A search runs until its trials complete, and a trial without a finite objective does not:
    it stops after a run of such trials, names the objective, and keeps what it trained."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(NAN_SEARCH))
    proc = run_main("search", str(path), "--results", str(tmp_path / "r"), "--executor", "local")
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert re.search(r"search\.objectives: the last \d+ trials reported no finite valid_accuracy, valid_tpr_gap", last)
    assert "stopped at 0 of 3 complete trials" in last
    # every failed trial is asked again: the progress total grows with it, and never runs past 100%
    lines = re.findall(r"fairdp search nan-search: +(\d+)% \| ([\d,]+)/([\d,]+) config-epochs", proc.stderr)
    assert lines, proc.stderr[-2000:]
    for pct, done, total in lines:
        assert int(pct) <= 100 and int(done.replace(",", "")) <= int(total.replace(",", "")), (pct, done, total)
    assert int(lines[-1][2].replace(",", "")) > 3  # more than the 3 trials it was asked for


@pytest.mark.slow
def test_a_per_config_search_on_ray_says_which_trials_did_not_complete(tmp_path):
    """On Ray, a per-config search runs the trials it asks for through Ray's OptunaSearch;
    those without a finite objective did not complete, and the run says so instead of
    reporting a finished search."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(NAN_SEARCH))
    proc = run_main("search", str(path), "--results", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("3 of the 3 trials did not complete (no finite valid_accuracy, valid_tpr_gap); the same command asks "
            "for them again") in proc.stderr, proc.stderr[-2000:]
    assert "0 trials completed by this run (per-config), of the 3 the search asks for" in proc.stdout + proc.stderr
