"""The papers' published numbers beside a study's: data read right, differences and claims checked."""

from __future__ import annotations

import pandas as pd
import pytest

from fairdp.analysis import get_paper
from fairdp.analysis._papers import (
    PAPERS,
    check_claims,
    comparison_section,
    pfld_bounds,
    published,
)
from fairdp.errors import InputError

from .conftest import whole_report


def test_federate_table3_is_the_papers_adult_table():
    pub = published(get_paper("federate-table3"))
    cell = pub.set_index(["method", "metric"])
    # spot values as printed in Table 3 (Adult, RT = 1.0)
    assert cell.loc[("federate", "test_tpr_gap"), ["mean", "std"]].tolist() == [2.73, 2.18]
    assert cell.loc[("unconstrained", "leakage"), ["mean", "std"]].tolist() == [78.19, 1.0]
    assert cell.loc[("random", "mdl"), ["mean", "std"]].tolist() == [20.15, 0.083]
    assert set(pub["method"]) == {"random", "unconstrained", "inlp", "noise", "adversarial", "multi_adversarial",
                                  "federate"}
    # the unreadable cell is left out, not guessed
    assert ("multi_adversarial", "mdl") not in cell.index


def _agg(values: dict[str, tuple[float, float]], metric="test_tpr_gap") -> pd.DataFrame:
    return pd.DataFrame([{"dataset": "adult", "method": m, "n_seeds": 5, f"{metric}_mean": mean, f"{metric}_std": std}
                         for m, (mean, std) in values.items()])


def test_mdl_is_compared_by_orderings_not_by_its_difference():
    """FEDERATE's published MDL is its code's quantity (valid + test, prefix-scored, 1024-bit
    units): no number verdict, however close the numbers, and the caption says why."""
    paper = get_paper("federate-table3")
    agg = _agg({"federate": (18.1, 2.79), "noise": (12.0, 0.3), "unconstrained": (4.5, 0.1), "adversarial": (5.0, 0.2)},
               metric="mdl")
    claims = check_claims(agg, paper).set_index("claim")
    assert claims.loc["unconstrained mdl below federate's", "paper"] and claims.loc["unconstrained mdl below federate's", "fairdp"]
    assert claims.loc["adversarial mdl below noise's", "paper"] and claims.loc["adversarial mdl below noise's", "fairdp"]
    df = pd.DataFrame([{"dataset": "adult", "method": m, "seed": seed, "config_id": "c", "status": "ok",
                        "valid_accuracy": 80.0, "test_accuracy": 80.0, "valid_tpr_gap": 5.0, "test_tpr_gap": 5.0,
                        "leakage": 70.0, "mdl": mdl + seed} for m, mdl in (("federate", 18.0), ("unconstrained", 4.0)) for seed in (0, 1)])
    caption, tables, _ = comparison_section(df, paper)
    assert "MDL: left out of this table, not judged by its numbers (the paper's MDL is its code's" in caption
    numbers, orderings = tables
    assert "MDL" not in set(numbers["Metric"])
    assert orderings.set_index("Claim").loc["Unconstrained MDL below FEDERATE's", "Verdict"] == "supported (2 seeds)"


def test_orderings_are_checked_on_both_tables():
    agg = _agg({"federate": (9.0, 1.0), "unconstrained": (8.0, 1.0), "adversarial": (12.0, 1.0)})
    claims = check_claims(agg, get_paper("federate-table3"))
    gap = claims[claims["claim"].str.startswith("federate test_tpr_gap")].set_index("claim")
    assert gap.loc["federate test_tpr_gap below unconstrained's", "paper"]  # 2.73 < 12.73
    assert not gap.loc["federate test_tpr_gap below unconstrained's", "fairdp"]  # 9 > 8
    assert gap.loc["federate test_tpr_gap below adversarial's", "fairdp"]
    # leakage claims have no fairdp verdict here: the study has no leakage column
    assert not claims["claim"].str.contains("leakage").any()


def test_trends_and_baselines_without_eps():
    rows = []
    for notion in ("dp", "eo"):
        for eps, gap, acc in ((0.1, 20.0, 80.0), (1.0, 10.0, 79.0), (10.0, 5.0 if notion == "dp" else 25.0, 78.0)):
            rows.append({"dataset": "adult", "method": "pfld", "fairness_notion": notion, "eps": eps, "n_seeds": 10,
                         "test_notion_gap_mean": gap, "test_notion_gap_std": 1.0,
                         "test_accuracy_mean": acc, "test_accuracy_std": 0.5})
            rows.append({"dataset": "adult", "method": "private_reductions", "fairness_notion": notion, "eps": eps,
                         "n_seeds": 10, "test_notion_gap_mean": gap + 1, "test_notion_gap_std": 1.0,
                         "test_accuracy_mean": acc, "test_accuracy_std": 0.5})
    agg = pd.DataFrame(rows)
    paper = get_paper("pfld-adult")
    claims = check_claims(agg, paper, paper.by)
    falls = claims[claims["claim"].str.contains("test_notion_gap falls")].set_index("where")["fairdp"]
    assert falls.to_dict() == {"fairness_notion dp": True, "fairness_notion eo": False}
    below = claims[claims["claim"] == "pfld test_notion_gap below private_reductions's"]
    assert len(below) == 6 and below["fairdp"].all()
    # DP-SGD is not in this study: no verdict rather than a guess
    assert claims[claims["claim"] == "pfld test_notion_gap below dpsgd's"]["fairdp"].isna().all()
    assert claims["paper"].isna().all()  # Tran et al. print no Adult numbers in the text


def test_an_unknown_paper_names_the_option():
    with pytest.raises(InputError, match="^--compare: unknown paper table 'federate-table9'"):
        get_paper("federate-table9")
    assert set(PAPERS) == {"federate-table3", "pfld-adult", "pfld-compas", "dp-fermi-adult", "dp-fermi-compas",
                           "global-adapt-adult", "global-adapt-compas"}


def test_fairdp_report_compare_puts_table3_beside_the_demo(tmp_path):
    from tests.conftest import REPO, assert_input_error, run_main

    out = tmp_path / "rep"
    proc = run_main("report", str(REPO / "results" / "demo-reference"), "-o", str(out), "--no-ci", "--rts", "1",
                    "--compare", "federate-table3")
    assert proc.returncode == 0, proc.stderr
    md = whole_report(out)
    section = md.split("## Compared with the paper: federate-table3")[1].split("\n## ")[0]
    # the paper's cell beside fairdp's, with what the method's eps protects (rows written before
    # the guarantee column: the method's kind)
    assert "| FEDERATE | local, replace one record's representation | TPR-gap | 2.73 ± 2.18 |" in section
    assert "| INLP | not private | TPR-gap | 3.91 ± 2.43 | - | - | not run |" in section  # the demo has no INLP
    assert "| FEDERATE TPR-gap below Unconstrained's | Table 3; D.5: " in section
    bad = run_main("report", str(REPO / "results" / "demo-reference"), "-o", str(tmp_path / "bad"),
                   "--compare", "table9")
    assert_input_error(bad, "--compare")
    assert not (tmp_path / "bad").exists()


def test_pfld_bounds_measures_each_notions_noise_from_the_group_shares():
    """PF-LD's primal sensitivity is proportional to 1/share_0 + 1/share_1 of a constraint's
    population set; eo splits each group by label. Computed here from the counts a row stores."""
    import json

    # (group, y, y_pred) counts: group 0 holds 300 rows (30 with y = 1), group 1 700 (200 with y = 1)
    conf = [[[250, 20], [10, 20]], [[450, 50], [60, 140]]]
    df = pd.DataFrame([{"method": "pfld", "test_confusion": json.dumps(conf)}])
    agg = pd.DataFrame([
        {"method": "fld", "fairness_notion": nt, "eps": float("nan"), "test_accuracy_mean": 80.0,
         "test_notion_gap_mean": gap} for nt, gap in (("dp", 2.0), ("eo", 9.0), ("ap", 3.0))]
        + [{"method": "dpsgd", "fairness_notion": "eo", "eps": e, "test_accuracy_mean": 84.0,
            "test_notion_gap_mean": gap} for e, gap in ((0.5, 12.5), (1.0, 99.0))])
    out = pfld_bounds(df, agg).set_index("Notion")
    dp = 1 / 0.3 + 1 / 0.7
    eo = max(1 / 0.27 + 1 / 0.5, 1 / 0.03 + 1 / 0.2)  # label 0: 270 and 500 rows; label 1: 30 and 200
    assert out.loc["eo", "PF-LD noise vs dp"] == f"{eo / dp:.1f}x"
    assert out.loc["eo", "Smallest group share (%)"] == "3.0"
    # DP-SGD beside PF-LD at ε 1 of PF-LD's relation: its add/remove ε 0.5, 2 x 0.5 by group privacy
    assert out.loc["eo", "F-LD violation"] == "9.0"
    assert out.loc["eo", "DP-SGD violation (ε 1 of PF-LD's relation: its 0.5)"] == "12.5"
    assert out.loc["dp", "M violation (ε 1)"] == "-"  # not run


def test_a_failing_claim_names_the_groups_where_it_fails():
    paper = get_paper("pfld-adult")
    agg = pd.DataFrame([
        {"method": m, "fairness_notion": nt, "eps": 1.0, "test_notion_gap_mean": gap, "test_accuracy_mean": 80.0}
        for m, nt, gap in (("pfld", "dp", 2.0), ("dpsgd", "dp", 10.0), ("pfld", "eo", 12.0), ("dpsgd", "eo", 8.0))])
    # DP-SGD's add/remove eps 0.5 is eps 1 of PF-LD's relation (group privacy: 2 eps)
    agg.loc[agg["method"] == "dpsgd", "eps"] = 0.5
    claims = check_claims(agg, paper, ("fairness_notion", "eps"))
    below = claims[claims["claim"] == "pfld test_notion_gap below dpsgd's"].set_index("where")["fairdp"]
    assert below["fairness_notion dp, eps 1.0"] is True and below["fairness_notion eo, eps 1.0"] is False


def test_claims_ordering_methods_of_different_guarantees_say_so():
    """PF-LD (central, one record's attribute) against DP-SGD (central, a whole record) or M
    (local, the attribute) compares different guarantees: each claim says whether its two
    methods' eps are of one kind, and in which relation it compares them: PF-LD's, DP-SGD
    converted (2 eps, so its eps 1 is never paired with PF-LD's eps 1), M's local eps as is."""
    from fairdp.analysis._rows import DIFFERENT_GUARANTEES

    paper = get_paper("pfld-adult")
    agg = pd.DataFrame([
        {"method": m, "fairness_notion": "dp", "eps": 1.0, "test_notion_gap_mean": gap, "test_accuracy_mean": 80.0}
        for m, gap in (("pfld", 2.0), ("dpsgd", 10.0), ("private_reductions", 6.0))])
    table = check_claims(agg, paper, ("fairness_notion", "eps"))

    def values(claim: str, column: str) -> set:
        return set(table.loc[table["claim"] == claim, column])

    assert values("pfld test_notion_gap below dpsgd's", "guarantees") == {DIFFERENT_GUARANTEES}
    assert values("pfld test_notion_gap below private_reductions's", "guarantees") == {DIFFERENT_GUARANTEES}
    trend = [c for c in table["claim"] if "falls as eps grows" in c]
    assert trend and all(values(c, "guarantees") == {"same"} for c in trend)
    assert values("pfld test_notion_gap below dpsgd's", "compared in") == {
        "central, replace one record's attribute (converted: dpsgd 2ε)"}
    assert values("pfld test_notion_gap below private_reductions's", "compared in") == {
        "central, replace one record's attribute (converted: private_reductions ε)"}
    assert all(v.startswith("metric only: unconstrained")
               for v in values("pfld test_accuracy within 1 point of unconstrained's", "compared in"))
    # DP-SGD's eps 1 is eps 2 of PF-LD's relation: no PF-LD there, nor DP-SGD at PF-LD's eps 1
    below = table[table["claim"] == "pfld test_notion_gap below dpsgd's"].set_index("where")["fairdp"]
    assert below.isna().all() and set(below.index) == {"fairness_notion dp, eps 1.0", "fairness_notion dp, eps 2.0"}
    m = table[table["claim"] == "pfld test_notion_gap below private_reductions's"].set_index("where")["fairdp"]
    assert m["fairness_notion dp, eps 1.0"] is True  # M's local eps 1 is the central attribute-level eps 1
