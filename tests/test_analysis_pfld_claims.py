"""PF-LD's claims judged with intervals over seeds: paired differences, their t-intervals and
verdicts, checked against scipy on synthetic rows of known per-seed values, and on the
committed results."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fairdp.analysis import get_paper
from fairdp.analysis._papers import (
    ACCURACY_MARGIN,
    CONTRADICTED,
    NOT_AT_EPS,
    NOT_RESOLVED,
    NOT_RUN,
    SUPPORTED,
    TOO_FEW_SEEDS,
    claim_verdict,
    comparison_section,
    paired_difference,
    pfld_bounds,
    pfld_claim_intervals,
    pfld_trend_intervals,
)

PAPER = get_paper("pfld-adult")
VERDICTS = (SUPPORTED, CONTRADICTED, NOT_RESOLVED, TOO_FEW_SEEDS, NOT_RUN, NOT_AT_EPS)
DELTA = 1e-5  # DP-SGD's and PF-LD's delta


def dpsgd_eps(pfld_eps: float) -> float:
    """DP-SGD's add/remove eps whose replace-one conversion (group privacy: 2 eps) is PF-LD's eps."""
    return pfld_eps / 2


def _row(method: str, seed: int, notion: str | None, eps: float, gap: float, acc: float) -> dict:
    """One result row with the real column names: every notion's gap is ``gap`` (a baseline
    without a notion is repeated under each by the selection, with that notion's gap)."""
    row = {"dataset": "adult", "method": method, "seed": seed, "config_id": f"{method}-{notion}-{eps}",
           "status": "ok", "fairness_notion": notion, "eps": eps, "valid_accuracy": acc, "test_accuracy": acc,
           "leakage": math.nan, "mdl": math.nan, "delta": DELTA if method in ("pfld", "dpsgd") else 0.0}
    for name in ("dp_gap", "eo_gap", "ap_gap"):
        row[f"valid_{name}"] = row[f"test_{name}"] = gap
    return row


def _study(pfld: dict, others: dict[str, dict] = (), notion: str = "dp") -> pd.DataFrame:
    """Rows from {eps: [(gap, acc) per seed]} for PF-LD and each other method; unconstrained
    (no eps, no notion) from {None: [...]}, DP-SGD without a notion."""
    rows = []
    for method, values in {"pfld": pfld, **dict(others)}.items():
        for eps, per_seed in values.items():
            for seed, value in per_seed.items() if isinstance(per_seed, dict) else enumerate(per_seed):
                gap, acc = value
                rows.append(_row(method, seed, notion if method in ("pfld", "private_reductions") else None,
                                 math.nan if eps is None else eps, gap, acc))
    return pd.DataFrame(rows)


def _scipy_interval(a, b, level=95.0):
    """The paired t-interval, computed here by hand from scipy's t quantile."""
    d = np.asarray(a, float) - np.asarray(b, float)
    half = stats.t.ppf(0.5 + level / 200, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return d.mean(), d.mean() - half, d.mean() + half


PFLD_GAPS = [4.0, 6.0, 5.0, 7.5]
GAP_CASES = {
    # other method's gap per seed: PF-LD's minus it, seed by seed
    SUPPORTED: [9.0, 10.5, 10.0, 12.0],        # PF-LD lower on every seed, by about 4.5
    CONTRADICTED: [1.0, 2.5, 1.5, 3.5],        # PF-LD higher on every seed
    NOT_RESOLVED: [5.0, 4.5, 6.5, 7.0],        # differences -1, +1.5, -1.5, +0.5
}


@pytest.mark.parametrize("other", ["dpsgd", "private_reductions"])
@pytest.mark.parametrize("expected", [SUPPORTED, CONTRADICTED, NOT_RESOLVED])
def test_below_claims_pair_seeds_and_judge_the_interval(other, expected):
    theirs = GAP_CASES[expected]
    # M's local eps is PF-LD's relation's eps; DP-SGD's add/remove eps 0.5 is its eps 1
    stated = dpsgd_eps(1.0) if other == "dpsgd" else 1.0
    df = _study({1.0: [(g, 80.0) for g in PFLD_GAPS]}, {other: {stated: [(g, 80.0) for g in theirs]}})
    out = pfld_claim_intervals(df, PAPER)
    assert len(out) == 1
    row = out.iloc[0]
    key = f"test_notion_gap_vs_{other}"
    mean, lo, hi = _scipy_interval(PFLD_GAPS, theirs)
    assert row[f"{key}_seeds"] == 4
    assert row[f"{key}_diff"] == pytest.approx(mean)
    assert (row[f"{key}_lo"], row[f"{key}_hi"]) == pytest.approx((lo, hi))
    # scipy's own paired test gives the same interval
    ci = stats.ttest_rel(PFLD_GAPS, theirs).confidence_interval(0.95)
    assert (row[f"{key}_lo"], row[f"{key}_hi"]) == pytest.approx((ci.low, ci.high))
    assert row[f"{key}_verdict"] == expected
    # what the row says it compared: the other's stated eps, and its delta in PF-LD's relation
    assert row["compared_in"] == "central, replace one record's attribute"
    assert row[f"{key}_eps"] == stated
    assert row[f"{key}_delta"] == pytest.approx((1 + math.exp(0.5)) * DELTA if other == "dpsgd" else 0.0)
    # the other claim's method is not in this study
    missing = "dpsgd" if other == "private_reductions" else "private_reductions"
    assert row[f"test_notion_gap_vs_{missing}_verdict"] == NOT_RUN
    assert row[f"test_notion_gap_vs_{missing}_seeds"] == 0


def test_dpsgd_pairs_with_pfld_at_the_converted_eps_only():
    """PF-LD's eps 1 is one record's attribute; DP-SGD's add/remove eps 1 is replace-one eps 2
    (group privacy), so DP-SGD at its eps 1 is no comparison at PF-LD's eps 1: its eps 0.5 is."""
    df = _study({1.0: [(g, 80.0) for g in PFLD_GAPS], 2.0: [(g, 80.0) for g in PFLD_GAPS]},
                {"dpsgd": {0.5: [(g, 80.0) for g in GAP_CASES[SUPPORTED]],
                           1.0: [(g, 80.0) for g in GAP_CASES[CONTRADICTED]]}})
    out = pfld_claim_intervals(df, PAPER).set_index("eps")
    assert out.loc[1.0, "test_notion_gap_vs_dpsgd_verdict"] == SUPPORTED  # against DP-SGD's eps 0.5
    assert out.loc[1.0, "test_notion_gap_vs_dpsgd_eps"] == 0.5
    assert out.loc[2.0, "test_notion_gap_vs_dpsgd_verdict"] == CONTRADICTED  # against DP-SGD's eps 1
    assert out.loc[2.0, "test_notion_gap_vs_dpsgd_delta"] == pytest.approx((1 + math.e) * DELTA)
    # DP-SGD at PF-LD's own eps only: nothing converts to it
    same = _study({1.0: [(g, 80.0) for g in PFLD_GAPS]}, {"dpsgd": {1.0: [(g, 80.0) for g in GAP_CASES[SUPPORTED]]}})
    row = pfld_claim_intervals(same, PAPER).iloc[0]
    assert row["test_notion_gap_vs_dpsgd_verdict"] == NOT_AT_EPS and row["test_notion_gap_vs_dpsgd_seeds"] == 0


def test_a_claim_with_one_paired_seed_has_too_few_seeds():
    # DP-SGD ran seeds 0 and 7 only: one seed in common with PF-LD's 0-3
    df = _study({1.0: [(g, 80.0) for g in PFLD_GAPS]},
                {"dpsgd": {dpsgd_eps(1.0): {0: (20.0, 80.0), 7: (20.0, 80.0)}}})
    row = pfld_claim_intervals(df, PAPER).iloc[0]
    assert row["test_notion_gap_vs_dpsgd_seeds"] == 1
    assert row["test_notion_gap_vs_dpsgd_diff"] == pytest.approx(PFLD_GAPS[0] - 20.0)
    assert math.isnan(row["test_notion_gap_vs_dpsgd_lo"]) and math.isnan(row["test_notion_gap_vs_dpsgd_hi"])
    assert row["test_notion_gap_vs_dpsgd_verdict"] == TOO_FEW_SEEDS


PFLD_ACC = [80.0, 81.0, 79.5, 80.5]
ACCURACY_CASES = {
    SUPPORTED: [80.3, 81.2, 79.9, 80.7],       # PF-LD 0.2 to 0.4 points lower on every seed
    CONTRADICTED: [83.0, 84.2, 82.4, 83.6],    # about 3 points lower on every seed
    NOT_RESOLVED: [80.0, 83.5, 79.0, 82.0],    # 0 to 2.5 points lower: the interval crosses -1
}


@pytest.mark.parametrize("expected", [SUPPORTED, CONTRADICTED, NOT_RESOLVED])
def test_accuracy_close_to_the_unconstrained_models_is_judged_within_the_margin(expected):
    theirs = ACCURACY_CASES[expected]
    # N has no eps and no notion: its seeds pair with PF-LD's at every eps
    df = _study({0.5: [(5.0, a) for a in PFLD_ACC], 2.0: [(5.0, a) for a in PFLD_ACC]},
                {"unconstrained": {None: [(15.0, a) for a in theirs]}})
    out = pfld_claim_intervals(df, PAPER)
    assert out["eps"].tolist() == [0.5, 2.0]
    mean, lo, hi = _scipy_interval(PFLD_ACC, theirs)
    for _, row in out.iterrows():
        assert row["test_accuracy_vs_unconstrained_diff"] == pytest.approx(mean)
        assert (row["test_accuracy_vs_unconstrained_lo"], row["test_accuracy_vs_unconstrained_hi"]) == pytest.approx(
            (lo, hi))
        assert row["test_accuracy_vs_unconstrained_verdict"] == expected
    # the margin is one accuracy point, in the rows' percent scale
    assert ACCURACY_MARGIN == 1.0 and df["test_accuracy"].max() > 1.0


def test_pfld_levels_are_means_with_their_t_interval_cut_to_percent():
    gaps = [0.5, 9.0]  # two seeds: t(0.975, 1) = 12.7 reaches below 0
    df = _study({1.0: [(g, 80.0 + g) for g in gaps]})
    row = pfld_claim_intervals(df, PAPER).iloc[0]
    mean, lo, hi = _scipy_interval(gaps, [0.0, 0.0])
    assert row["n_seeds"] == 2 and row["test_notion_gap_mean"] == pytest.approx(mean)
    assert row["test_notion_gap_lo"] == 0.0 and row["test_notion_gap_hi"] == pytest.approx(hi)
    assert lo < 0
    acc_mean, acc_lo, acc_hi = _scipy_interval([80.5, 89.0], [0.0, 0.0])
    assert (row["test_accuracy_mean"], row["test_accuracy_lo"]) == pytest.approx((acc_mean, acc_lo))
    assert row["test_accuracy_hi"] == 100.0 and acc_hi > 100


EPS = [0.1, 1.0, 10.0]
TREND_CASES = {
    # PF-LD's gap per seed at each eps
    SUPPORTED: [[12.0, 8.0, 5.0], [10.0, 7.5, 3.0], [14.0, 9.0, 6.5]],
    CONTRADICTED: [[3.0, 6.0, 9.0], [2.0, 6.5, 8.0], [4.0, 5.0, 10.0]],
    NOT_RESOLVED: [[5.0, 7.0, 9.0], [9.0, 6.0, 4.0], [6.0, 6.5, 5.0]],
    TOO_FEW_SEEDS: [[12.0, 8.0, 5.0]],
}


@pytest.mark.parametrize("expected", list(TREND_CASES))
def test_the_violation_falls_with_eps_by_each_seeds_slope_on_log_eps(expected):
    seeds = TREND_CASES[expected]
    df = _study({eps: [(gaps[i], 80.0) for gaps in seeds] for i, eps in enumerate(EPS)})
    out = pfld_trend_intervals(df, PAPER).set_index("metric")
    row = out.loc["test_notion_gap"]
    slopes = [stats.linregress(np.log(EPS), gaps).slope for gaps in seeds]
    assert row["n_seeds"] == len(seeds) and row["slope"] == pytest.approx(np.mean(slopes))
    ends = [gaps[-1] - gaps[0] for gaps in seeds]
    assert (row["eps_low"], row["eps_high"], row["end_seeds"]) == (0.1, 10.0, len(seeds))
    assert row["end_diff"] == pytest.approx(np.mean(ends))
    if len(seeds) >= 2:
        _, lo, hi = _scipy_interval(slopes, np.zeros(len(slopes)))
        assert (row["slope_lo"], row["slope_hi"]) == pytest.approx((lo, hi))
        _, end_lo, end_hi = _scipy_interval(ends, np.zeros(len(ends)))
        assert (row["end_lo"], row["end_hi"]) == pytest.approx((end_lo, end_hi))
    assert row["verdict"] == expected
    # accuracy is the same on every seed and eps: a zero slope, no spread
    assert out.loc["test_accuracy", "slope"] == pytest.approx(0.0, abs=1e-9)


def test_the_section_shows_the_interval_tables_and_names_what_fails():
    df = pd.concat([
        _study({1.0: [(g, 80.0) for g in PFLD_GAPS]}, {"dpsgd": {dpsgd_eps(1.0): [(g, 80.0) for g in
                                                                                 GAP_CASES[CONTRADICTED]]},
                                                       "unconstrained": {None: [(15.0, 80.2)] * 4}}, notion="dp"),
        _study({1.0: [(g, 80.0) for g in PFLD_GAPS]}, {"private_reductions": {1.0: [(g, 80.0) for g in
                                                                                    GAP_CASES[SUPPORTED]]}},
               notion="eo"),
    ], ignore_index=True)
    caption, tables, summary = comparison_section(df, PAPER)
    claims = next(t for t in tables if "Violation below DP-SGD's?" in t.columns).set_index("Notion")
    # the first page's summary: each claim once, every verdict it gets and where, as the caption's
    verdicts = dict(zip(summary["Claim"], summary["Verdict"]))
    assert verdicts["PF-LD violation below DP-SGD's"] == "contradicted at dp (every ε), eo (every ε)"
    assert verdicts["PF-LD violation below M's"] == "supported at eo (every ε); not run at dp (every ε)"
    assert verdicts["PF-LD accuracy within ±1 point of N's"].startswith("supported at ")
    assert claims.loc["dp", "Violation below DP-SGD's?"] == "contradicted (4 seeds)"
    assert claims.loc["eo", "Violation below M's?"] == "supported (4 seeds)"
    assert claims.loc["dp", "Violation below M's?"] == "not run"
    assert claims.loc["eo", "Accuracy within ±1 point of N's?"] == "supported (4 seeds)"
    assert claims.loc["dp", "PF-LD violation"].startswith(f"{np.mean(PFLD_GAPS):.1f} [")
    # every row says in which relation it compares, and what DP-SGD's eps and delta are there
    assert claims.loc["dp", "Compared in"] == (f"central, replace one record's attribute, ε 1; no M at this ε, "
                                               f"DP-SGD ε 0.5 (δ {(1 + math.exp(0.5)) * DELTA:.2g})")
    assert "DP-SGD at ε 0.5 pairs with PF-LD at ε 1" in caption
    assert claims.loc["eo", "Compared in"].startswith("central, replace one record's attribute, ε 1; M's local ε")
    failing = caption.split("Fails or unresolved: ")[1]
    # DP-SGD has no notion: the selection repeats it under eo, with eo's gap
    assert "PF-LD violation below DP-SGD's: contradicted at dp (every ε), eo (every ε)." in failing
    assert "PF-LD violation below M's: not run at dp (every ε)." in failing
    assert "PF-LD accuracy within ±1 point of N's" not in failing
    # one eps per notion: no slope
    assert "PF-LD violation falls as ε grows: too few seeds at dp, eo" in failing
    # the means-only summary is replaced, not repeated
    assert not any("Claim" in t.columns for t in tables)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(-50, 50), st.floats(-50, 50)), min_size=0, max_size=8))
def test_swapping_the_methods_negates_the_interval_and_the_verdict(pairs):
    a = pd.Series([p[0] for p in pairs], dtype=float)
    b = pd.Series([p[1] for p in pairs], dtype=float)
    n, d, lo, hi = paired_difference(a, b)
    n2, d2, lo2, hi2 = paired_difference(b, a)
    assert n == n2 == len(pairs)
    if n:
        assert d2 == pytest.approx(-d, abs=1e-9)
    if n >= 2:
        assert (lo2, hi2) == pytest.approx((-hi, -lo), abs=1e-9)
        assert lo <= d <= hi
    flip = {SUPPORTED: CONTRADICTED, CONTRADICTED: SUPPORTED, NOT_RESOLVED: NOT_RESOLVED, TOO_FEW_SEEDS: TOO_FEW_SEEDS}
    verdict, swapped = claim_verdict("below", n, lo, hi), claim_verdict("below", n2, lo2, hi2)
    if n < 2 or not math.isclose(hi, 0.0, abs_tol=1e-9) and not math.isclose(lo, 0.0, abs_tol=1e-9):
        assert swapped == flip[verdict]


def test_pfld_bounds_gives_the_primal_noise_against_the_signal():
    """sigma_p / (batch size x group 1's share of the population set), read from each selected
    row's accounted event (written by the real encoder) and batch size."""
    import json

    from fairdp.privacy import pfld_event
    from fairdp.privacy._release import event_to_json

    conf = [[[250, 20], [10, 20]], [[450, 50], [60, 140]]]  # group 1: 700 rows, 200 with y = 1
    df = pd.DataFrame([{"method": "pfld", "test_confusion": json.dumps(conf)}])
    agg = pd.DataFrame([{"method": "fld", "fairness_notion": "dp", "eps": math.nan, "test_accuracy_mean": 80.0,
                         "test_notion_gap_mean": 2.0}])
    selected = pd.DataFrame([
        {"method": "pfld", "fairness_notion": nt, "eps": eps, "batch_size": b,
         "privacy_event": event_to_json(pfld_event(sigma, 3.0, b, 20000, 5), "replace_attribute")}
        for nt in ("dp", "eo") for eps, b, sigma in ((1.0, 256, 2.5), (1.0, 1024, 4.0), (5.0, 256, 0.8))])
    out = pfld_bounds(df, agg, selected).set_index("Notion")["PF-LD noise / signal (ε 1)"]
    assert out["dp"] == f"≥ {4.0 / (1024 * 0.7):.2g}–{2.5 / (256 * 0.7):.2g}"
    assert out["eo"] == f"≥ {4.0 / (1024 * 0.2):.2g}–{2.5 / (256 * 0.2):.2g}"  # group 1's label-1 rows: 20%
    assert out["ap"] == "-"  # no PF-LD rows for ap
    assert (pfld_bounds(df, agg)["PF-LD noise / signal (ε 1)"] == "-").all()  # no selection given


@pytest.fixture(scope="module")
def adult():
    from fairdp import read_results
    from tests.conftest import REPO

    return read_results(str(REPO / "results" / "pfld-adult"))


def test_the_committed_adult_results_give_a_claims_table_for_every_notion_and_eps(adult):
    out = pfld_claim_intervals(adult, PAPER)
    seeds = adult["seed"].nunique()
    assert len(out) == 3 * 6 and set(out["fairness_notion"]) == {"dp", "eo", "ap"}
    assert (out["n_seeds"] == seeds).all()
    verdicts = out[[c for c in out.columns if c.endswith("_verdict")]]
    assert verdicts.isin(VERDICTS).all().all()
    # DP-SGD's grid (0.1 ... 10, add/remove) is 0.2, 1, 2, 4, 10, 20 in PF-LD's relation: it pairs
    # with PF-LD's eps 1, 2 and 10 only, at its own eps 0.5, 1 and 5
    paired = out["test_notion_gap_vs_dpsgd_verdict"] != NOT_AT_EPS
    assert set(out.loc[paired, "eps"]) == {1.0, 2.0, 10.0}
    assert (out.loc[paired, "test_notion_gap_vs_dpsgd_eps"] * 2 == out.loc[paired, "eps"]).all()
    assert (out.loc[paired, "test_notion_gap_vs_dpsgd_seeds"] == seeds).all()
    assert (out.loc[~paired, "test_notion_gap_vs_dpsgd_seeds"] == 0).all()
    others = [c for c in out.columns if c.endswith("_seeds") and "dpsgd" not in c]
    assert (out[others] == seeds).all().all()
    for key in ("test_notion_gap_vs_dpsgd", "test_notion_gap_vs_private_reductions"):
        judged = out[out[f"{key}_verdict"] != NOT_AT_EPS]
        lo, hi, diff, verdict = (judged[f"{key}_{s}"] for s in ("lo", "hi", "diff", "verdict"))
        assert ((lo <= diff) & (diff <= hi)).all()  # each interval holds its mean difference
        assert ((verdict == "supported") == (hi < 0)).all() and ((verdict == "contradicted") == (lo > 0)).all()
    trends = pfld_trend_intervals(adult, PAPER)
    assert len(trends) == 3 * 2 and trends["verdict"].isin(VERDICTS).all()
    # DP-SGD with one seed left: every claim against it has too few seeds
    one = adult[~((adult["method"] == "dpsgd") & (adult["seed"] != adult["seed"].min()))]
    thin = pfld_claim_intervals(one, PAPER)
    assert thin["test_notion_gap_vs_dpsgd_verdict"].isin([TOO_FEW_SEEDS, NOT_AT_EPS]).all()
    assert (thin["test_notion_gap_vs_dpsgd_verdict"] == TOO_FEW_SEEDS).sum() == 3 * 3
    assert (thin["test_notion_gap_vs_private_reductions_verdict"] != TOO_FEW_SEEDS).any()


def test_the_committed_adult_report_section_renders(adult):
    from fairdp.analysis._tables import render_table

    caption, tables, _ = comparison_section(adult, PAPER)
    assert "Fails or unresolved: " in caption or "Every claim is supported" in caption
    claims = next(t for t in tables if "Violation below M's?" in t.columns)
    assert len(claims) == 18 and claims["Seeds"].eq(str(adult["seed"].nunique())).all()
    for col in ("Violation below M's?", "Violation below DP-SGD's?", "Accuracy within ±1 point of N's?"):
        judged = claims[col] != NOT_AT_EPS
        assert claims.loc[judged, col].str.match(
            r"^(supported|contradicted|not resolved|too few seeds) \(\d+ seeds?\)$").all()
    # DP-SGD pairs at 3 of PF-LD's 6 eps (its grid converted: 2 eps); M and N at all of them
    assert (claims["Violation below DP-SGD's?"] == NOT_AT_EPS).sum() == 3 * 3
    assert claims["Compared in"].str.startswith("central, replace one record's attribute, ε ").all()
    trends = next(t for t in tables if "Falls with ε?" in t.columns)
    assert len(trends) == 6
    bounds = tables[-1]
    assert bounds["PF-LD noise / signal (ε 1)"].str.startswith("≥ ").all()
    for t in tables:
        assert "| Notion |" in render_table(t, "md") and "<table" in render_table(t, "html")
