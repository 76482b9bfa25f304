"""FEDERATE's Table 3 judged with intervals over seeds: each ordering the paper states is a
paired t-interval over seeds of the RT = 1 picks, each published number a Welch interval of
two independent means; checked against scipy on synthetic rows of known per-seed values."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairdp.analysis import get_paper
from fairdp.analysis._papers import (
    CONSISTENT,
    CONTRADICTED,
    DIFFERS,
    NOT_RESOLVED,
    NOT_RUN,
    SUPPORTED,
    TOO_FEW_SEEDS,
    comparison_section,
    number_intervals,
    ordering_intervals,
    welch_difference,
)

PAPER = get_paper("federate-table3")
DEFAULTS = {"test_accuracy": 85.0, "test_tpr_gap": 5.0, "leakage": 70.0, "mdl": 10.0}


def _rows(values: dict[str, dict[str, list[float] | dict[int, float]]]) -> pd.DataFrame:
    """Result rows with the real column names: per method, {metric: per-seed values} (a list
    is seeds 0, 1, ...; unnamed metrics take ``DEFAULTS``). Each (method, seed) has the pick,
    valid accuracy 85 and valid TPR-gap 1, beside two configs RT = 1 selection must pass over:
    one 5 points less accurate with gap 0 (outside the window) and the most accurate, 85.5,
    with gap 5 (inside it, less fair); both carry absurd test values."""
    rows = []
    for method, metrics in values.items():
        per_seed = {m: dict(enumerate(v)) if isinstance(v, list) else v for m, v in metrics.items()}
        seeds = list(dict.fromkeys(s for v in per_seed.values() for s in v)) or [0, 1, 2, 3]
        for seed in seeds:
            pick = {m: per_seed.get(m, {}).get(seed, DEFAULTS[m]) for m in DEFAULTS}
            absurd = {"test_accuracy": 10.0, "test_tpr_gap": 99.0, "leakage": 0.0, "mdl": 500.0}
            for config, valid_acc, valid_gap, test in (("pick", 85.0, 1.0, pick), ("coarse", 80.0, 0.0, absurd),
                                                       ("best", 85.5, 5.0, absurd)):
                rows.append({"dataset": "adult", "method": method, "seed": seed, "config_id": f"{method}-{config}",
                             "status": "ok", "valid_accuracy": valid_acc, "valid_tpr_gap": valid_gap, **test})
    return pd.DataFrame(rows)


def _claim(table: pd.DataFrame, claim: str) -> pd.Series:
    row = table[table["claim"] == claim]
    assert len(row) == 1, (claim, table["claim"].tolist())
    return row.iloc[0]


def _on_paper(value) -> bool | None:
    """Whether a claim holds on the paper's means: None where it prints no such cell."""
    return None if pd.isna(value) else bool(value)


FED_GAPS = [2.0, 4.0, 3.0, 5.5]
GAP_CASES = {
    # adversarial's TPR-gap per seed: FEDERATE's minus it, seed by seed
    SUPPORTED: [6.0, 9.5, 7.0, 10.0],       # FEDERATE lower on every seed
    CONTRADICTED: [1.0, 2.5, 1.5, 3.5],     # FEDERATE higher on every seed
    NOT_RESOLVED: [3.0, 2.5, 4.5, 5.0],     # differences -1, +1.5, -1.5, +0.5
}


@pytest.mark.parametrize("expected", list(GAP_CASES))
def test_an_ordering_is_the_paired_t_interval_of_the_rt_picks(expected):
    theirs = GAP_CASES[expected]
    df = _rows({"federate": {"test_tpr_gap": FED_GAPS}, "adversarial": {"test_tpr_gap": theirs}})
    out = ordering_intervals(df, PAPER)
    row = _claim(out, "FEDERATE TPR-gap below Adversarial's")
    assert (row["metric"], row["method"], row["other"], row["seeds"]) == ("test_tpr_gap", "federate", "adversarial", 4)
    d = np.subtract(FED_GAPS, theirs)
    half = stats.t.ppf(0.975, 3) * d.std(ddof=1) / math.sqrt(4)
    assert row["diff"] == pytest.approx(d.mean())
    assert (row["lo"], row["hi"]) == pytest.approx((d.mean() - half, d.mean() + half))
    ci = stats.ttest_rel(FED_GAPS, theirs).confidence_interval(0.95)  # scipy's own paired test
    assert (row["lo"], row["hi"]) == pytest.approx((ci.low, ci.high))
    assert row["verdict"] == expected
    assert _on_paper(row["paper"]) is True  # Table 3: 2.73 < 7.02
    assert row["source"].startswith("Table 3; D.5: ") and "'FEDERATE outperforming all other methods'" in row["source"]
    # the study has no Unconstrained: its claims are not run, not guessed
    unc = _claim(out, "FEDERATE TPR-gap below Unconstrained's")
    assert unc["verdict"] == NOT_RUN and unc["seeds"] == 0


def test_seeds_are_paired_by_seed_not_by_position():
    # Noise ran seeds 3, 2, 1 and 9 (rows in that order), FEDERATE 0-3: three pairs, 1 to 3
    fed = {0: 62.0, 1: 64.0, 2: 61.0, 3: 65.0}
    noise = {3: 63.0, 2: 59.5, 1: 62.5, 9: 10.0}
    df = _rows({"federate": {"leakage": fed}, "noise": {"leakage": noise}})
    row = _claim(ordering_intervals(df, PAPER), "Noise leakage below FEDERATE's")
    ours, theirs = [noise[s] for s in (1, 2, 3)], [fed[s] for s in (1, 2, 3)]
    ci = stats.ttest_rel(ours, theirs).confidence_interval(0.95)
    assert row["seeds"] == 3 and row["diff"] == pytest.approx(np.mean(np.subtract(ours, theirs)))
    assert (row["lo"], row["hi"]) == pytest.approx((ci.low, ci.high))
    assert row["verdict"] == SUPPORTED  # Noise lower on every paired seed, by 1.5 to 2
    # one seed in common: too few seeds
    thin = _rows({"federate": {"leakage": {0: 62.0, 1: 64.0}}, "noise": {"leakage": {1: 60.0, 7: 60.0}}})
    row = _claim(ordering_intervals(thin, PAPER), "Noise leakage below FEDERATE's")
    assert (row["seeds"], row["verdict"]) == (1, TOO_FEW_SEEDS) and row["diff"] == pytest.approx(-4.0)


def test_an_mdl_claim_says_which_method_is_more_private():
    """MDL is higher-is-better: "FEDERATE MDL below Noise's" is Noise the more private."""
    claim = "FEDERATE MDL below Noise's"
    more_private = _rows({"federate": {"mdl": [10.0, 11.0, 10.5]}, "noise": {"mdl": [12.0, 13.5, 12.2]}})
    row = _claim(ordering_intervals(more_private, PAPER), claim)
    assert row["diff"] < 0 and row["verdict"] == SUPPORTED
    assert _on_paper(row["paper"]) is True  # Table 3: FEDERATE 18.1, Noise 19.38
    less_private = _rows({"federate": {"mdl": [12.0, 13.5, 12.2]}, "noise": {"mdl": [10.0, 11.0, 10.5]}})
    assert _claim(ordering_intervals(less_private, PAPER), claim)["verdict"] == CONTRADICTED
    # Adversarial + Multiple's MDL cell is left out of the CSV: no verdict on the paper's means
    left_out = _claim(ordering_intervals(more_private, PAPER), "Adversarial + Multiple MDL below Noise's")
    assert _on_paper(left_out["paper"]) is None


UNC_ACC = [85.0, 85.6, 84.8, 85.3]
ACCURACY_CASES = {
    SUPPORTED: [84.7, 85.4, 84.4, 85.1],      # 0.2 to 0.4 points lower on every seed
    CONTRADICTED: [82.0, 82.4, 81.9, 82.1],   # about 3 points lower
    NOT_RESOLVED: [85.0, 83.0, 84.8, 82.8],   # 0 to 2.6 points lower: the interval crosses -1
}


@pytest.mark.parametrize("expected", list(ACCURACY_CASES))
def test_comparable_accuracy_is_judged_within_one_point_of_unconstrained(expected):
    ours = ACCURACY_CASES[expected]
    df = _rows({"federate": {"test_accuracy": ours}, "unconstrained": {"test_accuracy": UNC_ACC}})
    row = _claim(ordering_intervals(df, PAPER), "FEDERATE accuracy within ±1 point of Unconstrained's")
    ci = stats.ttest_rel(ours, UNC_ACC).confidence_interval(0.95)
    assert (row["kind"], row["diff"]) == ("within", pytest.approx(np.mean(np.subtract(ours, UNC_ACC))))
    assert (row["lo"], row["hi"]) == pytest.approx((ci.low, ci.high))
    assert row["verdict"] == expected
    assert _on_paper(row["paper"]) is False  # Table 3's own means: 82.29 vs 83.41, 1.12 points apart


def test_the_claims_are_the_papers_with_their_sources():
    out = ordering_intervals(_rows({"federate": {}}), PAPER).set_index("claim")
    assert out.index.is_unique and out["source"].str.match(r"^(Table 3|D\.5: )").all()
    d5 = out[out["source"].str.contains("D.5")]
    # the text's claims: FEDERATE fairest, adversarial approaches fairer than Unconstrained and
    # Noise, comparable accuracy, purely adversarial ones leaking more than the DP-based ones,
    # Noise and INLP marginally more private than FEDERATE
    for claim in ("FEDERATE TPR-gap below Adversarial + Multiple's", "Adversarial TPR-gap below Noise's",
                  "INLP accuracy within ±1 point of Unconstrained's", "Noise leakage below Adversarial + Multiple's",
                  "INLP leakage below FEDERATE's", "FEDERATE MDL below INLP's"):
        assert claim in d5.index
    # Table 3's own means do not show INLP leaking less than FEDERATE (74.54 vs 70.25)
    assert _on_paper(out.loc["INLP leakage below FEDERATE's", "paper"]) is False
    # each row says in which relation it compares: FEDERATE and Noise share theirs (local, each
    # record's representation); a method without privacy leaves the metric alone compared
    assert out.loc["FEDERATE TPR-gap below Noise's", "compared_in"] == "local, replace one record's representation"
    assert out.loc["FEDERATE TPR-gap below Unconstrained's", "compared_in"] == (
        "metric only: Unconstrained not private (FEDERATE local, replace one record's representation)")
    assert out.loc["Adversarial TPR-gap below Unconstrained's", "compared_in"] == (
        "metric only: Adversarial and Unconstrained not private")
    assert out["compared_in"].map(bool).all()


FEDERATE_ACC = [84.0, 84.6, 83.7, 84.3]
PAPER_SAMPLES = {
    # five values standing for the paper's seeds: the cell is their mean and sample std
    DIFFERS: [82.1, 82.5, 81.6, 83.0, 82.2],
    CONSISTENT: [85.0, 80.0, 83.5, 87.0, 77.0],
}


@pytest.mark.parametrize("expected", list(PAPER_SAMPLES))
def test_a_published_number_is_judged_by_the_welch_interval_of_two_means(expected):
    sample = PAPER_SAMPLES[expected]
    cell = pd.DataFrame([{"method": "federate", "metric": "test_accuracy", "mean": np.mean(sample),
                          "std": np.std(sample, ddof=1)}])
    df = _rows({"federate": {"test_accuracy": FEDERATE_ACC}})
    row = number_intervals(df, PAPER, numbers=cell).iloc[0]
    ci = stats.ttest_ind(FEDERATE_ACC, sample, equal_var=False).confidence_interval(0.95)
    assert row["n_seeds"] == 4 and row["diff"] == pytest.approx(np.mean(FEDERATE_ACC) - np.mean(sample))
    assert (row["lo"], row["hi"]) == pytest.approx((ci.low, ci.high))
    assert row["verdict"] == expected
    own = stats.ttest_1samp(FEDERATE_ACC, 0).confidence_interval(0.95)
    assert (row["fairdp"], row["fairdp_lo"], row["fairdp_hi"]) == pytest.approx(
        (np.mean(FEDERATE_ACC), own.low, own.high))
    if expected == CONSISTENT:
        # fairdp's own interval misses the paper's mean: its spread is what makes them consistent
        assert not own.low <= np.mean(sample) <= own.high


def test_welch_difference_matches_scipy_and_handles_a_side_without_spread():
    ours, theirs = [3.0, 4.5, 2.0, 6.0, 5.5, 4.0], [1.0, 2.0, 0.5]
    _, diff, lo, hi = welch_difference(ours, np.mean(theirs), np.std(theirs, ddof=1), 3, level=90)
    ci = stats.ttest_ind(ours, theirs, equal_var=False).confidence_interval(0.90)
    assert diff == pytest.approx(np.mean(ours) - np.mean(theirs)) and (lo, hi) == pytest.approx((ci.low, ci.high))
    # the paper's Random: 0.00 ± 0.00, so the interval is fairdp's own t-interval
    n, diff, lo, hi = welch_difference([1.0, 3.0, 2.0], 0.0, 0.0, 5)
    own = stats.ttest_1samp([1.0, 3.0, 2.0], 0).confidence_interval(0.95)
    assert (n, diff) == (3, 2.0) and (lo, hi) == pytest.approx((own.low, own.high))
    assert welch_difference([50.0, 50.0], 50.0, 0.0, 5) == (2, 0.0, 0.0, 0.0)
    assert math.isnan(welch_difference([1.0], 0.0, 1.0, 5)[2])


def test_mdl_numbers_are_left_out_and_the_rest_are_every_published_cell():
    """FEDERATE's published MDL is another quantity than fairdp's: its cells get no number
    verdict, however close, while its orderings are still judged."""
    df = _rows({m: {"mdl": [18.1, 18.1, 18.1]} for m in ("federate", "noise", "random")})
    numbers = number_intervals(df, PAPER)
    assert "mdl" not in set(numbers["metric"])
    cells = pd.DataFrame({"method": ["federate", "federate"], "metric": ["mdl", "leakage"],
                          "mean": [18.1, 70.25], "std": [2.79, 4.81]})
    assert number_intervals(df, PAPER, numbers=cells)["metric"].tolist() == ["leakage"]
    # every other cell of Table 3: accuracy and TPR-gap of 7 methods, leakage of 6 (Random's is "-")
    assert len(numbers) == 7 + 7 + 6
    assert numbers.set_index(["method", "metric"]).loc[("inlp", "test_accuracy"), "verdict"] == NOT_RUN
    assert (ordering_intervals(df, PAPER)["metric"] == "mdl").sum() == 8


def test_the_report_section_shows_both_tables_and_names_what_fails():
    from fairdp.analysis._report import _paper_sections
    from fairdp.analysis._tables import render_table

    df = _rows({
        "federate": {"test_tpr_gap": FED_GAPS, "test_accuracy": [82.8] * 4, "leakage": [62.0] * 4, "mdl": [11.0] * 4},
        "adversarial": {"test_tpr_gap": GAP_CASES[CONTRADICTED], "test_accuracy": [83.1] * 4,
                        "leakage": [83.0] * 4, "mdl": [4.7] * 4},
        "unconstrained": {"test_tpr_gap": [12.0, 14.0, 11.0, 13.0], "test_accuracy": [83.4] * 4,
                          "leakage": [84.0] * 4, "mdl": [4.6] * 4}})
    caption, tables, _ = comparison_section(df, PAPER)
    numbers, claims = tables
    assert "Welch" in caption and "95%" in caption
    row = numbers.set_index(["Method", "Metric"]).loc[("FEDERATE", "TPR-gap")]
    assert row["Paper (5 seeds)"] == "2.73 ± 2.18" and row["fairdp [95% CI]"].startswith(f"{np.mean(FED_GAPS):.2f} [")
    assert row["Verdict"] == "consistent (4 seeds)"
    assert not ((numbers["Metric"] == "MDL").any())
    shown = claims.set_index("Claim")
    assert shown["Compared in"].str.startswith(("metric only: ", "local, replace one record's representation")).all()
    assert shown.loc["FEDERATE TPR-gap below Adversarial's", "Verdict"] == "contradicted (4 seeds)"
    assert shown.loc["FEDERATE TPR-gap below Unconstrained's", "Verdict"] == "supported (4 seeds)"
    assert shown.loc["FEDERATE TPR-gap below Noise's", "Verdict"] == "not run"
    assert shown.loc["FEDERATE accuracy within ±1 point of Unconstrained's", "Paper's means"] == "fails"
    # the caption is made from the table: what is contradicted, and with how many seeds
    assert "Contradicted with 4 seeds: FEDERATE TPR-gap below Adversarial's." in caption
    assert "Not resolved" not in caption and "Every claim is supported" not in caption
    assert "On the paper's own means, fails: FEDERATE accuracy within ±1 point of Unconstrained's; " in caption
    # the means-only tables are replaced, not repeated
    assert not any("Within spread" in t.columns or "Fails where" in t.columns for t in tables)
    [((title, text, shown_tables), summary)] = _paper_sections(df, ["federate-table3"])
    assert title == "Compared with the paper: federate-table3" and text == caption
    # the first page's summary: one line per claim, its verdict as the full table has it
    verdicts = dict(zip(summary["Claim"], summary["Verdict"]))
    assert verdicts["FEDERATE TPR-gap below Adversarial's"] == "contradicted (4 seeds)"
    assert set(shown["Verdict"]) <= set(verdicts.values()) and len(verdicts) >= len(shown)
    for _, t in shown_tables:
        assert "| Verdict |" in render_table(t, "md") and "<table" in render_table(t, "html")


@pytest.mark.parametrize("leakage, named", [
    ([60.0, 61.0, 59.5, 60.5], True),    # the whole interval under chance (70%)
    ([66.0, 69.5, 67.0, 70.5], False),   # mean under chance, interval across it
    ([71.0, 72.0, 70.5, 73.0], False),   # above chance
])
def test_a_leakage_wholly_below_chance_is_named_as_chance_not_privacy(leakage, named):
    """Chance is the largest group's share of the test rows, from the rows' stored counts (70%
    here): a leakage whose whole interval lies under it is what a probe fitting noise does, and
    the caption says it reads as chance; without stored counts nothing is said."""
    import json

    df = _rows({"federate": {"leakage": leakage}, "adversarial": {"leakage": [83.0] * 4}})
    groups = json.dumps([[[10, 5], [10, 5]], [[30, 5], [30, 5]]])  # 30 and 70 test rows
    caption, _, _ = comparison_section(df.assign(test_confusion=groups), PAPER)
    sentence = caption.split("Below chance")[1].split(". ")[0] if "Below chance" in caption else ""
    assert ("FEDERATE leakage (" in sentence) == named, caption
    assert "Adversarial" not in sentence
    if named:
        assert f"FEDERATE leakage ({np.mean(leakage):.2f})" in sentence and "70.0%" in sentence
    assert "Below chance" not in comparison_section(df, PAPER)[0]
