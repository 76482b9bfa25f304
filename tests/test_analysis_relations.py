"""One neighbouring relation before any comparison (issue 60, part 3), and what releasing the
whole table costs (part 5): the conversions between guarantee kinds, checked against exact
privacy profiles from dp-accounting; the rule that groups kinds; that the ≈ marks, the
differences and the tables rank methods only within one relation; and the whole table's cost
against dp-accounting's RDP accountant called directly."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections import Counter

import dp_accounting
import numpy as np
import pandas as pd
import pytest
from dp_accounting.rdp import RdpAccountant

from fairdp.analysis import whole_table_release
from fairdp.analysis._intervals import not_distinguishable, supported_differences
from fairdp.analysis._rows import COMPARED_IN, EPS_COMPARED, with_compared_eps
from fairdp.analysis._tables import COMPARED_LABEL, format_table
from fairdp.privacy import comparison_groups, convert_guarantee, dpsgd_event, event_from_json
from fairdp.privacy._release import event_to_json
from fairdp.privacy._shared import (
    ADD_REMOVE_RECORD,
    LOCAL_ATTRIBUTE,
    LOCAL_REPRESENTATION,
    REPLACE_ATTRIBUTE,
    REPLACE_RECORD,
)

KINDS = (ADD_REMOVE_RECORD, REPLACE_RECORD, REPLACE_ATTRIBUTE, LOCAL_ATTRIBUTE, LOCAL_REPRESENTATION)
DELTA = 1e-5


# -- the conversions ---------------------------------------------------------------------------

def test_add_remove_converts_to_replace_one_by_group_privacy_of_two():
    # a replacement is a removal then an addition: (2 eps, (1 + e^eps) delta)
    assert convert_guarantee(ADD_REMOVE_RECORD, 1.0, 1e-5, REPLACE_RECORD) == (2.0, (1 + math.e) * 1e-5)
    # replacing a record covers replacing its attribute: unchanged from there
    assert convert_guarantee(ADD_REMOVE_RECORD, 1.0, 1e-5, REPLACE_ATTRIBUTE) == (2.0, (1 + math.e) * 1e-5)
    assert convert_guarantee(REPLACE_RECORD, 0.7, 3e-6, REPLACE_ATTRIBUTE) == (0.7, 3e-6)
    assert convert_guarantee(ADD_REMOVE_RECORD, 0.5, 0.0, REPLACE_ATTRIBUTE) == (1.0, 0.0)  # pure DP stays pure
    # far past any study's eps, e^eps overflows a float: the delta is no guarantee any more
    assert convert_guarantee(ADD_REMOVE_RECORD, 800.0, 1e-5, REPLACE_RECORD) == (1600.0, math.inf)
    # a local release of each record's attribute is the central attribute-level eps (post-processing)
    assert convert_guarantee(LOCAL_ATTRIBUTE, 2.0, 0.0, REPLACE_ATTRIBUTE) == (2.0, 0.0)
    for kind in KINDS:
        assert convert_guarantee(kind, 1.5, 2e-6, kind) == (1.5, 2e-6)


@pytest.mark.parametrize("source,target", [
    (LOCAL_REPRESENTATION, REPLACE_ATTRIBUTE),  # says nothing of the training that fitted the encoder
    (LOCAL_REPRESENTATION, LOCAL_ATTRIBUTE),
    (REPLACE_ATTRIBUTE, REPLACE_RECORD),        # the attribute alone is no whole record
    (REPLACE_RECORD, ADD_REMOVE_RECORD),        # replace-one does not give add/remove
    (REPLACE_ATTRIBUTE, LOCAL_ATTRIBUTE),       # central is never local
    (ADD_REMOVE_RECORD, LOCAL_ATTRIBUTE),
    (LOCAL_ATTRIBUTE, REPLACE_RECORD),
    ("a plugin's kind", REPLACE_ATTRIBUTE),
    (None, REPLACE_ATTRIBUTE),                  # not private
])
def test_no_conversion_where_none_is_sound(source, target):
    assert convert_guarantee(source, 1.0, 1e-5, target) is None


@pytest.mark.parametrize("sigma,eps", [(2.0, 0.5), (5.0, 0.5), (1.0, 3.0)])
def test_the_converted_guarantee_holds_for_the_gaussian_sum(sigma, eps):
    """An instance checked exactly: a sum of records clipped to norm C plus N(0, sigma^2 C^2).
    Adding or removing a record moves the sum by at most C, replacing one by 2C, so its exact
    replace-one profile is the Gaussian's at multiplier sigma / 2 (dp-accounting's PLD, not the
    conversion): at the converted delta it never needs more than the converted eps."""
    add_remove = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    add_remove.compose(dp_accounting.GaussianDpEvent(sigma))
    delta = add_remove.get_delta(eps)
    converted = convert_guarantee(ADD_REMOVE_RECORD, eps, delta, REPLACE_RECORD)
    replace = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    replace.compose(dp_accounting.GaussianDpEvent(sigma / 2))
    exact = replace.get_epsilon(converted.delta)
    assert exact <= converted.eps + 1e-9
    assert exact >= 0.3 * converted.eps  # an instance where the bound is near, not vacuous


def test_comparison_groups_convert_what_converts_and_keep_apart_what_does_not():
    # PF-LD's study: DP-SGD and M convert to PF-LD's relation
    assert comparison_groups([ADD_REMOVE_RECORD, REPLACE_ATTRIBUTE, LOCAL_ATTRIBUTE, None]) == [
        (REPLACE_ATTRIBUTE, (ADD_REMOVE_RECORD, REPLACE_ATTRIBUTE, LOCAL_ATTRIBUTE))]
    # one kind alone is not converted, nor two that share nothing
    assert comparison_groups([ADD_REMOVE_RECORD]) == [(ADD_REMOVE_RECORD, (ADD_REMOVE_RECORD,))]
    assert comparison_groups([ADD_REMOVE_RECORD, LOCAL_REPRESENTATION]) == [
        (ADD_REMOVE_RECORD, (ADD_REMOVE_RECORD,)), (LOCAL_REPRESENTATION, (LOCAL_REPRESENTATION,))]
    # a local representation guarantee is always apart; an unknown kind too
    groups = comparison_groups([LOCAL_REPRESENTATION, ADD_REMOVE_RECORD, "plugin kind", LOCAL_ATTRIBUTE])
    assert groups == [(REPLACE_ATTRIBUTE, (ADD_REMOVE_RECORD, LOCAL_ATTRIBUTE)),
                      (LOCAL_REPRESENTATION, (LOCAL_REPRESENTATION,)), ("plugin kind", ("plugin kind",))]
    assert comparison_groups([None]) == []
    # every kind in exactly one group, converted soundly, whatever the order given
    for kinds in itertools.permutations(KINDS):
        groups = comparison_groups(kinds)
        assert sorted(k for _, members in groups for k in members) == sorted(KINDS)
        assert all(convert_guarantee(k, 1.0, DELTA, target) is not None for target, members in groups for k in members)
        assert groups == comparison_groups(KINDS)


# -- every comparison site ranks within one relation -------------------------------------------

def _agg(methods: dict[str, tuple]) -> pd.DataFrame:
    """Aggregate rows (as aggregate_seeds + seed_intervals give them): method -> (kind, eps,
    mean, lo, hi) of test accuracy."""
    return pd.DataFrame([{"dataset": "adult", "method": m, "guarantee": kind, "eps": eps, "n_seeds": 5,
                          "test_accuracy_mean": mean, "test_accuracy_std": 1.0, "test_accuracy_lo": lo,
                          "test_accuracy_hi": hi} for m, (kind, eps, mean, lo, hi) in methods.items()])


def test_the_best_method_marks_rank_only_within_one_relation():
    """DP-SGD's interval overlaps FEDERATE's, the best: no mark, since a local guarantee per
    representation and a central one per record share no relation. Each is the best of its own."""
    agg = _agg({"federate": (LOCAL_REPRESENTATION, 8.0, 90.0, 89.0, 91.0),
                "noise": (LOCAL_REPRESENTATION, 8.0, 85.0, 84.0, 86.0),
                "dpsgd": (ADD_REMOVE_RECORD, 8.0, 89.5, 88.9, 90.1)})
    marks = dict(zip(agg["method"], not_distinguishable(agg, "test_accuracy", "max", ["dataset", "eps"])))
    assert marks == {"federate": False, "noise": False, "dpsgd": False}
    # the same numbers, both of one kind: DP-SGD's overlap with the best is marked
    same = agg.assign(guarantee=LOCAL_REPRESENTATION)
    assert dict(zip(same["method"], not_distinguishable(same, "test_accuracy", "max", ["dataset", "eps"])))["dpsgd"]


def test_marks_and_differences_compare_at_the_converted_eps():
    """With eps a key, DP-SGD's add/remove eps 1 sits beside PF-LD's attribute-level eps 2, not 1."""
    agg = _agg({"pfld": (REPLACE_ATTRIBUTE, 2.0, 90.0, 89.0, 91.0),
                "dpsgd": (ADD_REMOVE_RECORD, 1.0, 89.5, 88.9, 90.1)})
    agg = pd.concat([agg, _agg({"pfld": (REPLACE_ATTRIBUTE, 1.0, 80.0, 79.0, 81.0)})], ignore_index=True)
    marks = not_distinguishable(agg, "test_accuracy", "max", ["dataset", "eps"])
    assert marks.tolist() == [False, True, False]  # DP-SGD ≈ PF-LD at eps 2; PF-LD's eps 1 alone
    table = supported_differences(agg, "test_accuracy", ["dataset", "eps"])
    pair = table[table["method"] == "dpsgd"].iloc[0]
    assert pair["eps"] == 2.0 and pair["stated eps"] == 1.0 and pair["pfld"] == "≈ †"
    assert set(table[COMPARED_IN]) == {REPLACE_ATTRIBUTE}
    alone = table[(table["method"] == "pfld") & (table["eps"] == 1.0)].iloc[0]
    assert alone["dpsgd"] == ""  # no DP-SGD converts to PF-LD's eps 1


def test_tables_show_the_converted_eps_beside_the_stated_one():
    agg = _agg({"pfld": (REPLACE_ATTRIBUTE, 2.0, 90.0, 89.0, 91.0),
                "dpsgd": (ADD_REMOVE_RECORD, 1.0, 89.5, 88.9, 90.1),
                "unconstrained": (None, math.nan, 91.0, 90.0, 92.0)})
    agg = agg.assign(test_tpr_gap_mean=5.0, test_tpr_gap_std=1.0)
    shown = with_compared_eps(agg, deltas={"dpsgd": DELTA, "pfld": DELTA})
    assert shown[EPS_COMPARED].tolist()[:2] == [2.0, 2.0]
    assert shown["delta_compared"].iloc[1] == pytest.approx((1 + math.e) * DELTA)
    md = format_table(shown, "md", by=["eps"])
    header = [c.strip() for c in md.splitlines()[0].strip("|").split("|")]
    assert header.index(COMPARED_LABEL) == header.index("ε") + 1
    rows = {line.split("|")[2].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in md.splitlines()[2:] if line.startswith("|")}
    assert rows["dpsgd"][header.index("ε")] == "1"
    assert rows["dpsgd"][header.index(COMPARED_LABEL)] == f"2 (δ {(1 + math.e) * DELTA:.2g})"
    assert rows["pfld"][header.index(COMPARED_LABEL)] == "2"
    assert rows["unconstrained"][header.index(COMPARED_LABEL)] == "-"
    # one kind: the column would repeat eps, and is left out
    assert COMPARED_LABEL not in format_table(agg[agg["method"] != "dpsgd"], "md", by=["eps"])


def test_private_reductions_reads_the_attribute_only_through_its_release(monkeypatch):
    """What makes M's local eps its central attribute-level eps: with the randomized response's
    output held fixed, training on any other true attributes gives the very same model."""
    import fairdp.methods
    import fairdp.methods.private_reductions as pr
    from fairdp.data import load_dataset
    from fairdp.engine import TrainSettings

    data = load_dataset("synthetic", rows=900, label_correlation=0.7, leakage=2.0, seed=3)
    released = np.random.default_rng(0).integers(0, 2, size=len(data.split("train").s))
    monkeypatch.setattr(pr, "randomized_response", lambda s, k, eps, rng: released)
    method = fairdp.methods.get_method("private_reductions")
    config = [{"fairness_notion": "dp", "bound": 0.02, "eps": 1.0}]
    one = method.train_pack(data, config, seed=0, settings=TrainSettings())
    other = method.train_pack(dataclasses.replace(data, s=1 - data.s), config, seed=0, settings=TrainSettings())
    for split in ("valid", "test"):
        np.testing.assert_array_equal(one.representations[split], other.representations[split])
        np.testing.assert_array_equal(one.predictions[split], other.predictions[split])


# -- what releasing the whole table costs ------------------------------------------------------

def _direct(events: list[str], delta: float) -> float:
    """eps at ``delta`` of composing ``events`` (JSON, as rows store them) in dp-accounting's
    own RDP accountant, each distinct event composed with its count."""
    relation = {event_from_json(e)[1] for e in events}
    assert len(relation) == 1
    relations = {"add_or_remove_one": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                 "replace_attribute": dp_accounting.NeighboringRelation.REPLACE_SPECIAL,
                 "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE}
    accountant = RdpAccountant(neighboring_relation=relations[relation.pop()])
    for event, count in Counter(events).items():
        accountant.compose(event_from_json(event)[0], count)
    return accountant.get_epsilon(delta)


def test_the_whole_table_composes_every_config_of_every_seed_per_kind():
    events = {s: [event_to_json(dpsgd_event(sigma, 256, 30000, 5), "add_or_remove_one") for sigma in (1.5, 3.0)]
              for s in (0, 1, 2)}
    rows = pd.DataFrame([
        {"dataset": "adult", "method": "dpsgd", "seed": s, "config_id": f"c{i}", "status": "ok",
         "guarantee": ADD_REMOVE_RECORD, "eps_formal": 1.0, "delta": DELTA, "privacy_event": e}
        for s, evs in events.items() for i, e in enumerate(evs)]
        + [{"dataset": "adult", "method": "federate", "seed": s, "config_id": "f", "status": "ok",
            "guarantee": LOCAL_REPRESENTATION, "eps_formal": 8.0, "delta": 0.0, "privacy_event": None}
           for s in (0, 1, 2)])
    table = whole_table_release(rows).set_index("guarantee")
    dpsgd = table.loc[ADD_REMOVE_RECORD]
    assert dpsgd["seeds"] == 3 and dpsgd["configs per seed"] == "2"
    assert dpsgd["ε, one seed (largest)"] == pytest.approx(_direct(events[0], DELTA), rel=1e-9)
    assert dpsgd["ε, all seeds"] == pytest.approx(_direct(sum(events.values(), []), DELTA), rel=1e-9)
    assert dpsgd["ε, all seeds"] > dpsgd["ε, one seed (largest)"]
    assert math.isnan(table.loc[LOCAL_REPRESENTATION, "ε, all seeds"])
    assert table.loc[LOCAL_REPRESENTATION, "bound"].startswith("not covered")


@pytest.fixture(scope="module")
def pfld_adult():
    from fairdp import read_results
    from tests.conftest import REPO

    return read_results(str(REPO / "results" / "pfld-adult"))


def test_the_committed_pfld_adult_table_costs_what_dp_accounting_says(pfld_adult):
    """All PF-LD configs of one Adult seed compose to RDP eps ~191 at delta 1e-5, the 10 seeds to
    ~1,467: the report's figures, checked against dp-accounting's accountant called directly."""
    table = whole_table_release(pfld_adult).set_index("methods")
    ok = pfld_adult[pfld_adult["status"] == "ok"]
    for method in ("pfld", "dpsgd", "private_reductions"):
        mine = ok[ok["method"] == method]
        # every seed trained the same grid on the same n: one seed's events stand for each
        seeds = [Counter(grp["privacy_event"]) for _, grp in mine.groupby("seed")]
        assert all(c == seeds[0] for c in seeds)
        per_seed = _direct(list(seeds[0].elements()), DELTA)
        assert table.loc[method, "ε, one seed (largest)"] == pytest.approx(per_seed, rel=1e-9)
        assert table.loc[method, "ε, all seeds"] == pytest.approx(_direct(mine["privacy_event"].tolist(), DELTA),
                                                                   rel=1e-9)
    assert round(table.loc["pfld", "ε, one seed (largest)"]) == 191
    assert round(table.loc["pfld", "ε, all seeds"]) == 1467
    assert json.loads(ok["privacy_event"].iloc[0])["relation"] in ("add_or_remove_one", "replace_attribute",
                                                                   "replace_one")


@pytest.mark.parametrize("kind", [ADD_REMOVE_RECORD, REPLACE_RECORD, REPLACE_ATTRIBUTE, LOCAL_ATTRIBUTE,
                                  LOCAL_REPRESENTATION])
def test_a_kind_alone_is_compared_in_its_own_relation(kind):
    """Nothing to compare with: no conversion, the guarantee as stated (a local attribute
    guarantee is not turned into the central one for its own sake)."""
    assert comparison_groups([kind]) == [(kind, (kind,))]
    assert comparison_groups([kind, "plugin kind"])[0] == (kind, (kind,))


def test_group_privacy_at_the_edges_of_delta_and_eps():
    """(2 eps, (1 + e^eps) delta) computed by hand: delta 0 stays 0 at any eps (0 * e^eps would
    overflow to NaN past eps 709); delta 1 grows to 1 + e (no guarantee, said as such); from eps
    700 on, e^eps is past what delta can carry: inf."""
    assert convert_guarantee(ADD_REMOVE_RECORD, 800.0, 0.0, REPLACE_RECORD) == (1600.0, 0.0)
    assert convert_guarantee(ADD_REMOVE_RECORD, 1.0, 1.0, REPLACE_RECORD) == (2.0, pytest.approx(1 + math.e))
    assert convert_guarantee(ADD_REMOVE_RECORD, 699.0, 1e-300, REPLACE_RECORD)[1] == \
        pytest.approx(1e-300 * (1 + math.exp(699.0)))
    for eps in (700.0, 700.5):
        assert convert_guarantee(ADD_REMOVE_RECORD, eps, 1e-300, REPLACE_RECORD) == (2 * eps, math.inf)


def test_each_conversion_step_says_why_it_is_sound():
    from fairdp.privacy._shared import conversion_reasons

    why = conversion_reasons(ADD_REMOVE_RECORD, REPLACE_ATTRIBUTE)
    assert len(why) == 2 and why[0].startswith("group privacy") and "one replacement of that record" in why[1]
    assert conversion_reasons(LOCAL_ATTRIBUTE, REPLACE_ATTRIBUTE)[0].startswith("post-processing")
    assert conversion_reasons(REPLACE_RECORD, REPLACE_RECORD) == ()
    with pytest.raises(ValueError, match="no sound conversion"):
        conversion_reasons(LOCAL_REPRESENTATION, REPLACE_ATTRIBUTE)
