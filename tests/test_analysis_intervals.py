"""Confidence intervals: bootstrap over a row's test examples from its stored counts, t-intervals
over seeds, and the differences between methods that the intervals support."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from fairdp.analysis import bootstrap_intervals, seed_intervals, supported_differences
from fairdp.analysis._intervals import t_halfwidth
from fairdp.errors import InputError
from fairdp.fairness import confusion


def _row(y, y_pred, s, **extra):
    conf = confusion(y, y_pred, s, n_classes=2, n_groups=int(np.max(s)) + 1)
    return {"dataset": "d", "method": "m", "seed": 0, "config_id": "c", "test_confusion": json.dumps(conf.tolist()),
            **extra}


def _labels(n, acc, rng, positives=0.5):
    y = (rng.random(n) < positives).astype(int)
    right = rng.random(n) < acc
    return y, np.where(right, y, 1 - y)


def test_the_accuracy_interval_matches_the_normal_approximation():
    rng = np.random.default_rng(0)
    n = 20000
    y, pred = _labels(n, 0.8, rng)
    s = rng.integers(0, 2, n)
    out = bootstrap_intervals(pd.DataFrame([_row(y, pred, s)]), level=95, draws=2000)
    p = (y == pred).mean()
    half = 1.959964 * math.sqrt(p * (1 - p) / n) * 100
    lo, hi = out["test_accuracy_lo"].iloc[0], out["test_accuracy_hi"].iloc[0]
    assert lo < 100 * p < hi
    assert (hi - lo) / 2 == pytest.approx(half, rel=0.1)


def test_the_tpr_gap_interval_matches_the_normal_approximation_of_a_difference():
    """Two groups' TPRs are independent under the stratified bootstrap: the gap's std is the
    root of the sum of their binomial variances (the gap stays far from 0, so no folding)."""
    rng = np.random.default_rng(1)
    ya, pa = _labels(8000, 0.9, rng)
    yb, pb = _labels(3000, 0.7, rng)
    y, pred, s = np.r_[ya, yb], np.r_[pa, pb], np.r_[np.zeros(8000, int), np.ones(3000, int)]
    out = bootstrap_intervals(pd.DataFrame([_row(y, pred, s)]), draws=3000)
    tpr = [((pred == 1) & (y == 1) & (s == g)).sum() / ((y == 1) & (s == g)).sum() for g in (0, 1)]
    npos = [((y == 1) & (s == g)).sum() for g in (0, 1)]
    std = math.sqrt(sum(t * (1 - t) / n for t, n in zip(tpr, npos))) * 100
    lo, hi = out["test_tpr_gap_lo"].iloc[0], out["test_tpr_gap_hi"].iloc[0]
    assert (hi - lo) / 2 == pytest.approx(1.959964 * std, rel=0.12)


def test_close_to_fairlearn_bootstrap_for_overall_accuracy():
    from fairlearn.metrics import MetricFrame
    from sklearn.metrics import accuracy_score

    rng = np.random.default_rng(2)
    y, pred = _labels(5000, 0.85, rng)
    s = rng.integers(0, 2, 5000)
    ours = bootstrap_intervals(pd.DataFrame([_row(y, pred, s)]), level=90, draws=2000)
    # 100 of fairlearn's draws (each costs it ~45 ms): its 5% and 95% quantiles' Monte-Carlo
    # error, about 2.1 sd / sqrt(100) = 0.11 points here (sd 0.5), is under half the tolerance
    frame = MetricFrame(metrics=accuracy_score, y_true=y, y_pred=pred, sensitive_features=s, n_boot=100,
                        ci_quantiles=[0.05, 0.95], random_state=0)
    lo, hi = (100 * q for q in frame.overall_ci)
    assert ours["test_accuracy_lo"].iloc[0] == pytest.approx(lo, abs=0.25)
    assert ours["test_accuracy_hi"].iloc[0] == pytest.approx(hi, abs=0.25)


def test_a_rows_interval_is_its_own_whatever_else_is_in_the_table():
    rng = np.random.default_rng(3)
    rows = []
    for k in range(3):
        y, pred = _labels(500, 0.7 + 0.05 * k, rng)
        rows.append(_row(y, pred, rng.integers(0, 2, 500), config_id=f"c{k}"))
    together = bootstrap_intervals(pd.DataFrame(rows), draws=300)
    alone = bootstrap_intervals(pd.DataFrame(rows[1:2]), draws=300)
    pd.testing.assert_frame_equal(together.iloc[1:2].reset_index(drop=True), alone)
    again = bootstrap_intervals(pd.DataFrame(rows), draws=300, seed=1)
    assert not np.allclose(again["test_accuracy_lo"], together["test_accuracy_lo"])


def test_rows_without_counts_have_no_interval_and_bad_arguments_are_named():
    out = bootstrap_intervals(pd.DataFrame([{"method": "m", "test_confusion": None}]))
    assert out["test_accuracy_lo"].isna().all()
    with pytest.raises(InputError, match="level"):
        bootstrap_intervals(pd.DataFrame([{"method": "m"}]), level=120)
    with pytest.raises(InputError, match="draws"):
        bootstrap_intervals(pd.DataFrame([{"method": "m"}]), draws=1)


def test_t_interval_pins_the_t_quantile():
    assert t_halfwidth(2.0, 5, 95) == pytest.approx(2.776445 * 2 / math.sqrt(5), rel=1e-6)
    assert t_halfwidth(2.0, 30, 90) == pytest.approx(1.699127 * 2 / math.sqrt(30), rel=1e-6)
    assert math.isnan(t_halfwidth(1.0, 1))
    agg = pd.DataFrame({"dataset": ["d"], "method": ["m"], "n_seeds": [5], "test_accuracy_mean": [80.0],
                        "test_accuracy_std": [2.0]})
    out = seed_intervals(agg)
    assert out["test_accuracy_hi"].iloc[0] - 80.0 == pytest.approx(2.776445 * 2 / math.sqrt(5), rel=1e-6)
    # two seeds of a small gap: t(0.975, 1) = 12.7 would reach below 0, which a gap cannot
    gap = pd.DataFrame({"dataset": ["d"], "method": ["m"], "n_seeds": [2], "test_tpr_gap_mean": [2.5],
                        "test_tpr_gap_std": [1.5]})
    out = seed_intervals(gap)
    assert out["test_tpr_gap_lo"].iloc[0] == 0.0
    assert out["test_tpr_gap_hi"].iloc[0] == pytest.approx(2.5 + 12.7062 * 1.5 / math.sqrt(2), rel=1e-4)


def test_supported_differences_mark_only_non_overlapping_intervals():
    iv = pd.DataFrame({"dataset": ["d"] * 3, "method": ["a", "b", "c"],
                       "m_mean": [10.0, 11.0, 20.0], "m_lo": [9.0, 10.5, 19.0], "m_hi": [11.0, 11.5, 21.0]})
    table = supported_differences(iv, "m").set_index("method")
    assert table.loc["a", "b"] == "≈" and table.loc["a", "c"] == "<" and table.loc["c", "b"] == ">"
    assert table.loc["b", "b"] == ""


@pytest.mark.parametrize("std, width", [(0.3, 1.0), (1.0, 1.0), (2.5, 1.0), (12.6, 1.0), (4.0, 0.5), (0.05, 0.01)])
def test_seeds_needed_is_the_fewest_whose_t_interval_fits(std, width):
    """Checked against scipy's t quantile directly: n seeds fit, n - 1 do not (n >= 2)."""
    from scipy.stats import t

    from fairdp.analysis._intervals import seeds_needed

    n = int(seeds_needed(std, width))

    def half(k):
        return t.ppf(0.975, k - 1) * std / math.sqrt(k)

    assert half(n) <= width and (n == 2 or half(n - 1) > width)


def test_seed_advice_reads_each_metrics_spread_and_says_it_in_one_sentence():
    from fairdp.analysis._intervals import seed_advice, seed_advice_text, seeds_needed

    agg = pd.DataFrame({"dataset": "adult", "method": ["a", "b"], "n_seeds": 2, "test_accuracy_mean": [80.0, 81.0],
                        "test_accuracy_std": [0.3, 2.5], "leakage_mean": [60.0, 61.0], "leakage_std": [np.nan, 1.0],
                        "guarantee": None})
    advice = seed_advice(agg)
    assert list(advice["metric"]) == ["test_accuracy", "leakage", "test_accuracy", "leakage"]
    got = advice["seeds_needed"].tolist()
    assert got[0] == seeds_needed(0.3) and np.isnan(got[1]) and got[2] == seeds_needed(2.5)
    text = seed_advice_text(agg)
    assert text.startswith("seed advice: for a 95% t-interval of ± 1 point, from the spread over the 2 seeds run")
    assert f"test_accuracy {int(seeds_needed(0.3))}-{int(seeds_needed(2.5))} (most: b)" in text
    assert f"leakage {int(seeds_needed(1.0))}" in text
    assert seed_advice_text(agg.assign(test_accuracy_std=np.nan, leakage_std=np.nan)) == ""
    assert np.isinf(seeds_needed(1e6)) and seeds_needed(0.0) == 2.0 and np.isnan(seeds_needed(float("nan")))
