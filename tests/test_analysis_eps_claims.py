"""Claims of papers that compare private methods at matched eps (``per_eps``: DP-FERMI's,
Esipova et al.'s), judged per (dataset, notion, eps) with paired intervals over seeds: the
pairing across neighbouring relations, the notions a claim is made for, and the intervals
against scipy on rows of known per-seed values."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fairdp.analysis._groups import privacy_cost_gaps
from fairdp.analysis._papers import (
    ACCURACY_MARGIN,
    CONTRADICTED,
    NOT_AT_EPS,
    NOT_RESOLVED,
    NOT_RUN,
    PAPERS,
    PRIVACY_COST_GAP,
    SUPPORTED,
    Claim,
    PaperReference,
    claim_verdict,
    comparison_section,
    eps_claim_intervals,
)

DELTA = 1e-5
PRIVATE = ("dp_fermi", "pfld", "dpsgd", "dpsgd_global_adapt", "dpsgd_f")


def _paper(*claims: Claim) -> PaperReference:
    return PaperReference("synthetic", "a synthetic paper", None, "notion_gap", 1.0, ("fairness_notion", "eps"),
                          claims, "", per_eps=True,
                          labels=(("dp_fermi", "DP-FERMI"), ("pfld", "PF-LD"), ("dpsgd", "DP-SGD"),
                                  ("dpsgd_global_adapt", "Global-Adapt"), ("unconstrained", "N"),
                                  ("test_notion_gap", "violation"), ("test_accuracy", "accuracy")))


def _rows(values: dict[tuple[str, str | None, float | None], list[tuple[float, float]]]) -> pd.DataFrame:
    """Result rows from {(method, notion, eps): [(gap, accuracy) per seed]}: every notion's gap
    is ``gap`` (a method without a notion is repeated under each by the selection)."""
    rows = []
    for (method, notion, eps), per_seed in values.items():
        for seed, (gap, acc) in enumerate(per_seed):
            row = {"dataset": "adult", "method": method, "seed": seed, "config_id": f"{method}-{notion}-{eps}",
                   "status": "ok", "fairness_notion": notion, "eps": math.nan if eps is None else eps,
                   "valid_accuracy": acc, "test_accuracy": acc, "leakage": math.nan, "mdl": math.nan,
                   "delta": DELTA if method in PRIVATE else 0.0}
            for name in ("dp_gap", "eo_gap", "ap_gap"):
                row[f"valid_{name}"] = row[f"test_{name}"] = gap
            rows.append(row)
    return pd.DataFrame(rows)


def _scipy(a, b, level=95.0):
    ci = stats.ttest_rel(a, b).confidence_interval(level / 100)
    return float(np.mean(np.subtract(a, b))), ci.low, ci.high


MINE = [4.0, 6.0, 5.0, 7.5]
THEIRS = {
    SUPPORTED: [9.0, 10.5, 10.0, 12.0],      # the claim's method lower on every seed
    CONTRADICTED: [1.0, 2.5, 1.5, 3.5],      # higher on every seed
    NOT_RESOLVED: [5.0, 4.5, 6.5, 7.0],      # differences -1, +1.5, -1.5, +0.5
}
BELOW_PFLD = Claim("below", "test_notion_gap", "dp_fermi", "pfld", "Figure 1")


@pytest.mark.parametrize("expected", [SUPPORTED, CONTRADICTED, NOT_RESOLVED])
def test_an_add_remove_method_meets_an_attribute_level_one_at_twice_its_eps(expected):
    """DP-FERMI's add/remove eps 0.5 is eps 1 with one record's attribute replaced (group
    privacy): it is paired with PF-LD's eps 1, never with PF-LD's 0.5."""
    df = _rows({("dp_fermi", "dp", 0.5): [(g, 80.0) for g in MINE],
                ("pfld", "dp", 1.0): [(g, 80.0) for g in THEIRS[expected]],
                ("pfld", "dp", 0.5): [(g, 80.0) for g in THEIRS[CONTRADICTED if expected == SUPPORTED else SUPPORTED]]})
    out = eps_claim_intervals(df, _paper(BELOW_PFLD))
    assert len(out) == 1
    row = out.iloc[0]
    assert (row["eps"], row["eps_stated"], row["other_eps"]) == (1.0, 0.5, 1.0)
    assert row["compared_in"].startswith("central, replace one record's attribute (converted: DP-FERMI 2ε)")
    mean, lo, hi = _scipy(MINE, THEIRS[expected])
    assert (row["seeds"], row["diff"], row["lo"], row["hi"]) == (4, pytest.approx(mean), pytest.approx(lo),
                                                                 pytest.approx(hi))
    assert row["verdict"] == expected
    # PF-LD's own delta at its own relation: unchanged
    assert row["other_delta"] == pytest.approx(DELTA)


def test_two_add_remove_methods_pair_at_the_same_eps_and_a_missing_eps_is_said():
    claim = Claim("below", "test_notion_gap", "dpsgd_global_adapt", "dpsgd", "Table 1", notions=("ap",))
    df = _rows({("dpsgd_global_adapt", None, 1.0): [(g, 80.0) for g in MINE],
                ("dpsgd_global_adapt", None, 3.41): [(g, 80.0) for g in MINE],
                ("dpsgd", None, 1.0): [(g, 80.0) for g in THEIRS[SUPPORTED]],
                ("dpsgd", None, 2.0): [(g, 80.0) for g in THEIRS[CONTRADICTED]],
                ("pfld", "ap", 1.0): [(5.0, 80.0)] * 4, ("pfld", "dp", 1.0): [(5.0, 80.0)] * 4})
    out = eps_claim_intervals(df, _paper(claim)).set_index("eps")
    # judged at the claim's notion only, though the rows are repeated under dp and ap
    assert set(out["fairness_notion"]) == {"ap"} and list(out.index) == [1.0, 3.41]
    assert out.loc[1.0, "verdict"] == SUPPORTED and out.loc[1.0, "other_eps"] == 1.0
    assert out.loc[1.0, "other_delta"] == pytest.approx(DELTA)  # same relation: no conversion
    assert out.loc[1.0, "compared_in"] == "central, add/remove one record"
    assert out.loc[3.41, "verdict"] == NOT_AT_EPS and out.loc[3.41, "seeds"] == 0
    # without DP-SGD rows: not run
    alone = df[df["method"] != "dpsgd"]
    assert set(eps_claim_intervals(alone, _paper(claim))["verdict"]) == {NOT_RUN}


def test_a_method_without_privacy_counts_at_every_eps():
    claim = Claim("within", "test_accuracy", "dp_fermi", "unconstrained", "Section 5")
    n_acc = [84.0, 84.5, 83.8, 84.2]
    close = [a - 0.3 for a in n_acc]
    far = [a - 3.0 for a in n_acc]
    df = _rows({("dp_fermi", "dp", 0.5): [(5.0, a) for a in far], ("dp_fermi", "dp", 9.0): [(5.0, a) for a in close],
                ("unconstrained", None, None): [(10.0, a) for a in n_acc]})
    out = eps_claim_intervals(df, _paper(claim)).set_index("eps")
    assert out.loc[9.0, "verdict"] == SUPPORTED and out.loc[9.0, "diff"] == pytest.approx(-0.3)
    assert out.loc[0.5, "verdict"] == CONTRADICTED and out.loc[0.5, "hi"] < -ACCURACY_MARGIN
    assert out["other_eps"].isna().all() and out["other_delta"].isna().all()
    assert out["compared_in"].iloc[0].startswith("metric only: N not private")


def test_only_seeds_both_methods_have_are_paired():
    df = _rows({("dp_fermi", "dp", 0.5): [(g, 80.0) for g in MINE],
                ("pfld", "dp", 1.0): [(g, 80.0) for g in THEIRS[SUPPORTED]]})
    df = df[~((df["method"] == "pfld") & (df["seed"] == 3))]
    row = eps_claim_intervals(df, _paper(BELOW_PFLD)).iloc[0]
    mean, lo, hi = _scipy(MINE[:3], THEIRS[SUPPORTED][:3])
    assert row["seeds"] == 3 and (row["lo"], row["hi"]) == (pytest.approx(lo), pytest.approx(hi))


def test_the_report_section_shows_every_comparison_and_sums_each_claim_up():
    within = Claim("within", "test_accuracy", "dp_fermi", "pfld", "Figure 1")
    paper = _paper(BELOW_PFLD, within)
    df = _rows({("dp_fermi", "dp", 0.5): [(g, 80.0) for g in MINE],
                ("dp_fermi", "dp", 3.0): [(g, 80.0) for g in MINE],
                ("pfld", "dp", 1.0): [(g, 80.2) for g in THEIRS[SUPPORTED]]})
    caption, tables, summary = comparison_section(df, paper)
    assert len(tables) == 1 and len(tables[0]) == 4  # two claims at two eps
    shown = tables[0].set_index(["Claim", "ε compared"])
    assert shown.loc[("DP-FERMI violation below PF-LD's", "1"), "Verdict"] == f"{SUPPORTED} (4 seeds)"
    assert shown.loc[("DP-FERMI violation below PF-LD's", "6"), "Verdict"] == NOT_AT_EPS
    assert shown.loc[("DP-FERMI violation below PF-LD's", "1"), "Stated ε"] == "DP-FERMI 0.5; PF-LD 1 (δ 1e-05)"
    assert "2 of the 4 comparisons are supported" in caption
    lines = dict(zip(summary["Claim"], summary["Verdict"]))
    assert lines["DP-FERMI violation below PF-LD's"] == (
        f"{SUPPORTED} at dp (ε 1); not compared (no config of theirs at that ε) at dp (ε 6)")


def test_a_paper_without_per_eps_keeps_its_own_tables():
    """The flag selects the judging: the same claims without it are judged pooled over ε."""
    paper = dataclasses.replace(_paper(BELOW_PFLD), per_eps=False)
    df = _rows({("dp_fermi", "dp", 0.5): [(g, 80.0) for g in MINE],
                ("pfld", "dp", 1.0): [(g, 80.0) for g in THEIRS[SUPPORTED]]})
    _, tables, _ = comparison_section(df, paper)
    assert "ε compared" not in tables[0].columns


@pytest.mark.parametrize("shift, expected", [(+2.5, SUPPORTED), (-0.5, SUPPORTED), (-3.0, CONTRADICTED),
                                             (-1.0, NOT_RESOLVED)])
def test_no_worse_asks_only_that_accuracy_is_not_lost_beyond_the_margin(shift, expected):
    """More accurate by more than the margin supports "no worse" (it would leave "within"
    unresolved); an interval reaching below -margin does not."""
    claim = Claim("no_worse", "test_accuracy", "dp_fermi", "pfld", "Figure 1")
    theirs = [80.0, 81.0, 80.5, 79.5]
    jitter = [0.1, -0.2, 0.3, -0.1]
    df = _rows({("dp_fermi", "dp", 0.5): [(5.0, a + shift + j) for a, j in zip(theirs, jitter)],
                ("pfld", "dp", 1.0): [(5.0, a) for a in theirs]})
    row = eps_claim_intervals(df, _paper(claim)).iloc[0]
    mean, lo, hi = _scipy([a + shift + j for a, j in zip(theirs, jitter)], theirs)
    assert (row["lo"], row["hi"]) == (pytest.approx(lo), pytest.approx(hi))
    assert row["verdict"] == expected
    assert row["claim"] == "DP-FERMI accuracy at most 1 point below PF-LD's"


def _confusion(y, y_pred, s, groups=2) -> str:
    """A row's stored counts (G, C, C) indexed (group, y, y_pred), as fairdp writes them."""
    conf = np.zeros((groups, 2, 2), dtype=int)
    np.add.at(conf, (s, y, y_pred), 1)
    return json.dumps(conf.tolist())


@pytest.mark.parametrize("seed", range(5))
def test_the_privacy_cost_gap_is_esipova_et_al_s_against_fairlearn_by_group(seed):
    """pi_g = acc_g(non-private) - acc_g(private) per group, the gap |pi_0 - pi_1|: here from
    the stored counts, there from the predictions through fairlearn's MetricFrame."""
    from fairlearn.metrics import MetricFrame
    from sklearn.metrics import accuracy_score

    rng = np.random.default_rng(seed)
    n = 400
    s = (rng.random(n) < 0.3).astype(int)
    y = (rng.random(n) < 0.4).astype(int)
    flip_n = rng.random(n) < 0.15
    flip_p = rng.random(n) < np.where(s == 1, 0.35, 0.2)  # the private model loses more on group 1
    pred_n, pred_p = np.where(flip_n, 1 - y, y), np.where(flip_p, 1 - y, y)
    rows = pd.DataFrame([
        {"dataset": "adult", "method": "unconstrained", "seed": 0, "config_id": "n", "status": "ok",
         "test_confusion": _confusion(y, pred_n, s)},
        {"dataset": "adult", "method": "dpsgd_global_adapt", "seed": 0, "config_id": "ga", "status": "ok",
         "test_confusion": _confusion(y, pred_p, s)}])
    got = privacy_cost_gaps(rows)
    acc_n = MetricFrame(metrics=accuracy_score, y_true=y, y_pred=pred_n, sensitive_features=s).by_group * 100
    acc_p = MetricFrame(metrics=accuracy_score, y_true=y, y_pred=pred_p, sensitive_features=s).by_group * 100
    cost = acc_n - acc_p
    assert got.iloc[1] == pytest.approx(abs(cost[0] - cost[1]))
    assert got.iloc[0] == pytest.approx(0.0)  # the baseline against itself
    # no baseline pick on that seed: no gap
    assert privacy_cost_gaps(rows.iloc[[1]]).isna().all()


def test_a_claim_on_the_privacy_cost_gap_pairs_each_method_with_its_seed_s_baseline():
    """Global-Adapt's privacy cost gap below DP-SGD's: each computed against the non-private
    pick of its own seed, then paired seed by seed."""
    claim = Claim("below", PRIVACY_COST_GAP, "dpsgd_global_adapt", "dpsgd", "Section 5", notions=("ap",))
    rng = np.random.default_rng(0)
    rows, expected = [], {"dpsgd_global_adapt": [], "dpsgd": []}
    n = 300
    for seed in range(4):
        s = (rng.random(n) < 0.3).astype(int)
        y = (rng.random(n) < 0.4).astype(int)
        base = np.where(rng.random(n) < 0.1, 1 - y, y)
        acc_n = [np.mean(base[s == g] == y[s == g]) * 100 for g in (0, 1)]
        rows.append({"method": "unconstrained", "eps": math.nan, "config_id": "n", "seed": seed,
                     "test_confusion": _confusion(y, base, s)})
        for method, loss1 in (("dpsgd_global_adapt", 0.15), ("dpsgd", 0.35)):
            pred = np.where(rng.random(n) < np.where(s == 1, loss1, 0.15), 1 - y, y)
            acc = [np.mean(pred[s == g] == y[s == g]) * 100 for g in (0, 1)]
            expected[method].append(abs((acc_n[0] - acc[0]) - (acc_n[1] - acc[1])))
            rows.append({"method": method, "eps": 1.0, "config_id": method, "seed": seed,
                         "test_confusion": _confusion(y, pred, s)})
    df = pd.DataFrame(rows).assign(dataset="adult", status="ok", fairness_notion=None, valid_accuracy=80.0,
                                   test_accuracy=80.0, delta=lambda d: np.where(d["method"] == "unconstrained",
                                                                               0.0, DELTA))
    for name in ("dp_gap", "eo_gap", "ap_gap"):
        df[f"valid_{name}"] = df[f"test_{name}"] = 1.0
    pfld = _rows({("pfld", "ap", 1.0): [(5.0, 80.0)] * 4})  # a method with notions: the per-notion copies
    row = eps_claim_intervals(pd.concat([df, pfld], ignore_index=True), _paper(claim)).iloc[0]
    mean, lo, hi = _scipy(expected["dpsgd_global_adapt"], expected["dpsgd"])
    assert row["fairness_notion"] == "ap" and row["seeds"] == 4
    assert (row["diff"], row["lo"], row["hi"]) == (pytest.approx(mean), pytest.approx(lo), pytest.approx(hi))


@pytest.mark.parametrize("name", sorted(n for n, p in PAPERS.items() if p.per_eps))
def test_every_matched_eps_claim_names_methods_and_metrics_that_exist(name):
    """A claim about a method that is not registered, or a metric no row or derivation gives,
    would be judged "not run" forever: each one names real ones, and each judged table's
    notions are ones the study's selection has."""
    from fairdp.methods import method_names
    from fairdp.schema import METRIC_COLUMNS

    paper = PAPERS[name]
    for c in paper.claims:
        assert {c.method, c.other} <= set(method_names()), c
        assert c.metric in (*METRIC_COLUMNS, "test_notion_gap", PRIVACY_COST_GAP), c
        assert set(c.notions) <= {"dp", "eo", "ap"}, c
        assert paper.label(c.method) != c.method  # printed as the paper names it
    assert paper.by == ("fairness_notion", "eps") and paper.fairness == "notion_gap"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 40), st.floats(0, 40), st.floats(50, 90), st.floats(50, 90)),
                min_size=2, max_size=10),
       st.sampled_from([0.5, 1.0, 5.0]))
def test_any_per_seed_values_give_scipys_paired_interval_and_the_verdict_it_implies(values, eps):
    """Whatever the seeds' values, each claim's interval is scipy's paired t-interval of the
    seeds both methods have, and its verdict is ``claim_verdict``'s on it."""
    below = Claim("below", "test_notion_gap", "dp_fermi", "pfld", "Figure 1")
    no_worse = Claim("no_worse", "test_accuracy", "dp_fermi", "pfld", "Figure 1")
    df = _rows({("dp_fermi", "dp", eps): [(g, a) for g, _, a, _ in values],
                ("pfld", "dp", 2 * eps): [(g, a) for _, g, _, a in values]})
    out = eps_claim_intervals(df, _paper(below, no_worse)).set_index("kind")
    for kind, mine, theirs in (("below", [v[0] for v in values], [v[1] for v in values]),
                               ("no_worse", [v[2] for v in values], [v[3] for v in values])):
        row = out.loc[kind]
        d = np.subtract(mine, theirs)
        assert row["seeds"] == len(values) and row["diff"] == pytest.approx(d.mean(), abs=1e-9)
        if d.std(ddof=1) > 1e-9:
            _, lo, hi = _scipy(mine, theirs)
            assert (row["lo"], row["hi"]) == (pytest.approx(lo, abs=1e-6), pytest.approx(hi, abs=1e-6))
        assert row["verdict"] == claim_verdict(kind, len(values), row["lo"], row["hi"])
