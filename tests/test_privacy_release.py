"""eps_released: the guarantee of releasing a selection, tuning included (issue 16, part 1).

Fixed-count composition is checked against RDP written out by hand; the random-count bound
against values pinned from dp-accounting and against Papernot & Steinke's Theorem 2 written
out here; the trial-count draws against their distributions; and a tuned study end to end.
"""

from __future__ import annotations

import json
import math

import dp_accounting
import numpy as np
import pandas as pd
import pytest
import yaml
from dp_accounting.rdp import rdp_privacy_accountant as rdp_module

from fairdp.analysis import ReportOptions, released_guarantees
from fairdp.analysis._release import MEAN_OVER_SEEDS, PER_SEED, release_summary
from fairdp.errors import InputError
from fairdp.privacy import (
    composed_epsilon,
    dpsgd_event,
    event_from_json,
    pfld_event,
    repeat_and_select_epsilon,
)
from fairdp.privacy._release import rdp_curve, truncated_negative_binomial_gamma
from fairdp.privacy._shared import TrialCount, event_to_json
from fairdp.study import parse_spec
from fairdp.study.run._plan import run_configs, tuning_draws
from tests.conftest import assert_input_error, run_main

from .conftest import whole_report

DELTA = 1e-5
ORDERS = np.asarray(rdp_module.DEFAULT_RDP_ORDERS, dtype=np.float64)  # the orders fairdp's curves use


def _cks_epsilon(rdp: np.ndarray, delta: float) -> float:
    """RDP -> (eps, delta), Canonne, Kamath & Steinke 2020 Prop. 12, minimised over ORDERS (by hand)."""
    eps = [r + math.log1p(-1 / a) - math.log(delta * a) / (a - 1) for a, r in zip(ORDERS, rdp) if a > 1.01]
    return max(0.0, min(eps))


def _gaussian_rdp(sigma: float) -> np.ndarray:
    """The Gaussian mechanism's RDP, alpha / (2 sigma^2) (Mironov 2017, Prop. 7)."""
    return ORDERS / (2 * sigma ** 2)


# -- events ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("event", [
    pfld_event(1.3, 4.0, 256, 30000, 30),
    dpsgd_event(0.9, 100, 1000, 3),
    dp_accounting.RandomizedResponseDpEvent(0.4, 2),
    dp_accounting.GaussianDpEvent(math.inf),
])
def test_events_survive_their_json(event):
    back, relation = event_from_json(event_to_json(event, "add_or_remove_one"))
    assert back == event and relation == "add_or_remove_one"


def test_an_unknown_relation_is_refused():
    with pytest.raises(ValueError, match="relation"):
        event_to_json(dp_accounting.GaussianDpEvent(1.0), "swap")


# -- fixed count: composition ---------------------------------------------------------------------

def test_composition_of_gaussians_is_rdp_summed_by_hand():
    sigmas = [2.0, 3.0, 5.0]
    by_hand = _cks_epsilon(sum(_gaussian_rdp(s) for s in sigmas), DELTA)
    events = [dp_accounting.GaussianDpEvent(s) for s in sigmas]
    assert composed_epsilon(events, "add_or_remove_one", DELTA) == pytest.approx(by_hand, rel=1e-9)
    # and more than any one of them, less than the sum of their eps
    alone = [_cks_epsilon(_gaussian_rdp(s), DELTA) for s in sigmas]
    assert max(alone) < by_hand < sum(alone)


_RELATIONS = {"add_or_remove_one": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
              "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE,
              "replace_attribute": dp_accounting.NeighboringRelation.REPLACE_SPECIAL}


@pytest.mark.parametrize(("events", "relation"), [
    ([dpsgd_event(0.9, 100, 1000, 3)], "add_or_remove_one"),
    ([pfld_event(1.3, 4.0, 256, 30000, 2), pfld_event(2.1, 9.0, 64, 30000, 3)], "replace_attribute"),
    ([dpsgd_event(0.9, 100, 1000, 3), dp_accounting.GaussianDpEvent(3.0), dpsgd_event(0.9, 100, 1000, 3)],
     "add_or_remove_one"),
    ([dp_accounting.RandomizedResponseDpEvent(0.4, 2), dp_accounting.GaussianDpEvent(2.0)], "replace_one"),
    # private reductions' events, repeated as a study's rows repeat them, beside other leaves
    ([dp_accounting.SelfComposedDpEvent(dp_accounting.RandomizedResponseDpEvent(0.25, 2), 7),
      dp_accounting.RandomizedResponseDpEvent(0.1, 3), dp_accounting.NoOpDpEvent(),
      dp_accounting.RandomizedResponseDpEvent(0.25, 2)], "replace_one"),
    ([dp_accounting.LaplaceDpEvent(0.5), dpsgd_event(1.1, 64, 1000, 2),
      dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(2.0), 3)], "add_or_remove_one"),
])
def test_curves_and_compositions_are_the_accountants_to_the_bit(events, relation):
    """fairdp sums every leaf's curve, computed once per process (Gaussian steps per (q, sigma),
    randomized response and Laplace per event), as the accountant adds them; the result must be
    dp-accounting's own, bit for bit."""
    accountant = dp_accounting.rdp.RdpAccountant(ORDERS, _RELATIONS[relation])
    accountant.compose(dp_accounting.ComposedDpEvent(events))
    for _ in range(2):  # computed, then from the cache
        assert np.array_equal(rdp_curve(dp_accounting.ComposedDpEvent(events), relation), accountant._rdp)
        assert composed_epsilon(events, relation, DELTA) == accountant.get_epsilon(DELTA)
    single = dp_accounting.rdp.RdpAccountant(ORDERS, _RELATIONS[relation])
    single.compose(dp_accounting.dp_event.RepeatAndSelectDpEvent(events[0], 10.0, 1.0))
    assert repeat_and_select_epsilon(events[:1], relation, DELTA, 10, 1.0) == single.get_epsilon(DELTA)


def _rows(events: list, eps: list[float], delta: float, method="dpsgd", tuning=None, relation="add_or_remove_one"):
    """Result rows of one run (dataset d, seed 0) with the given events."""
    n = len(events)
    return pd.DataFrame({
        "study": "s", "dataset": "d", "method": method, "seed": 0, "config_id": [f"c{i}" for i in range(n)],
        "status": "ok", "valid_accuracy": np.linspace(80, 81, n), "valid_tpr_gap": np.linspace(5, 1, n),
        "eps_formal": eps, "delta": delta,
        "privacy_event": [event_to_json(e, relation) if e is not None else None for e in events],
        "tuning": tuning,
    })


def test_eps_released_of_a_grid_is_the_composition_of_every_config():
    sigmas = [2.0, 3.0, 5.0]
    rows = _rows([dp_accounting.GaussianDpEvent(s) for s in sigmas],
                 [_cks_epsilon(_gaussian_rdp(s), DELTA) for s in sigmas], DELTA)
    out = released_guarantees(rows, rows.iloc[[0]], rt=1.0)
    assert out["eps_released"].iloc[0] == pytest.approx(_cks_epsilon(sum(_gaussian_rdp(s) for s in sigmas), DELTA),
                                                        rel=1e-9)
    assert out["trained"].iloc[0] == 3 and out["released_under"].iloc[0] == "composition of the 3 configs trained"
    # a config trained on other data (another seed) is not part of this release
    other = rows.assign(seed=1)
    out2 = released_guarantees(pd.concat([rows, other]), rows.iloc[[0]], rt=1.0)
    assert out2["eps_released"].iloc[0] == out["eps_released"].iloc[0]


def test_pure_dp_rows_compose_to_at_most_the_sum_of_their_eps():
    # k-RR at eps = 1 on a binary attribute: p = 2 / (e + 1); one config releases exactly eps 1
    rr = dp_accounting.RandomizedResponseDpEvent(2 / (math.e + 1), 2)
    one = released_guarantees(_rows([rr], [1.0], 0.0, "private_reductions", relation="replace_one"),
                              _rows([rr], [1.0], 0.0, "private_reductions", relation="replace_one"), rt=1.0)
    assert one["eps_released"].iloc[0] == pytest.approx(1.0) and one["delta_released"].iloc[0] == DELTA
    many = _rows([rr] * 40, [1.0] * 40, 0.0, "private_reductions", relation="replace_one")
    out = released_guarantees(many, many.iloc[[0]], rt=1.0)
    assert 1.0 < out["eps_released"].iloc[0] < 40.0  # RDP beats basic composition at 40 configs


def test_selections_are_composed_once_per_distinct_scope_and_as_each_alone():
    """``released_guarantees`` composes each distinct scope once (seeds of one grid share their
    events): every selection's eps equals that selection's scope released alone, the seeds of
    equal events included, and two scopes of the same events whose pure-DP sums differ (the
    basic bound decides at 2 configs) are not mistaken for one."""
    rr = dp_accounting.RandomizedResponseDpEvent(2 / (math.e + 1), 2)
    seeds = []
    for seed, eps in enumerate([[0.1, 0.1], [0.1, 0.1], [0.2, 0.3]]):
        seeds.append(_rows([rr, rr], eps, 0.0, "private_reductions", relation="replace_one").assign(seed=seed))
    rows = pd.concat(seeds, ignore_index=True)
    picks = rows.groupby("seed").head(1)
    together = released_guarantees(rows, picks, rt=1.0)
    alone = [released_guarantees(s, s.iloc[[0]], rt=1.0)["eps_released"].iloc[0] for s in seeds]
    assert together["eps_released"].tolist() == alone
    assert alone[0] == pytest.approx(0.2) and alone[2] == pytest.approx(0.5)


def test_methods_without_an_event_are_not_covered():
    rows = _rows([None, None], [4.0, 4.0], 0.0, "federate")
    out = released_guarantees(rows, rows.iloc[[0]], rt=1.0)
    assert math.isnan(out["eps_released"].iloc[0])
    assert out["released_under"].iloc[0] == "not covered: a local guarantee per representation"
    rows = _rows([None], [math.inf], 0.0, "unconstrained")
    assert released_guarantees(rows, rows, rt=1.0)["released_under"].iloc[0] == "not covered: no privacy"


# -- a mean over seeds: every seed's release composed ---------------------------------------------------

def _event_by_hand(blob):
    """A DpEvent rebuilt from the stored JSON with dp_accounting's own classes (not fairdp's decoder)."""
    if isinstance(blob, dict) and "class" in blob:
        cls = getattr(dp_accounting.dp_event, blob["class"])
        return cls(**{k: _event_by_hand(v) for k, v in blob.items() if k != "class"})
    if isinstance(blob, dict) and set(blob) == {"float"}:
        return float(blob["float"])
    if isinstance(blob, list):
        return [_event_by_hand(v) for v in blob]
    return blob


def _seeds(per_seed: list[list], eps: float, delta: float, method: str, relation: str, tuning=None) -> pd.DataFrame:
    """Rows of one (dataset, method), one run per seed, each with the given configs' events."""
    return pd.concat([_rows(events, [eps] * len(events), delta, method, tuning, relation).assign(seed=seed)
                      for seed, events in enumerate(per_seed)], ignore_index=True)


def _summary(rows: pd.DataFrame, rt: float) -> pd.Series:
    from fairdp.analysis import select_by_rt

    released = released_guarantees(rows, select_by_rt(rows, rt), rt)
    (row,) = release_summary(released, rows, rt).to_dict("records")
    return pd.Series(row), released


def test_the_mean_over_seeds_composes_every_config_of_every_seed_as_dp_accounting_does():
    """eps_released was the largest over seeds, but a mean over seeds releases every seed's
    pick of the same data: its cost is the composition of every config trained in every seed."""
    def sgd(sigma, steps=60):  # DP-SGD's shape: T Poisson-sampled Gaussian steps
        return dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(0.05, dp_accounting.GaussianDpEvent(sigma)), steps)

    per_seed = [[sgd(1.1), sgd(2.0)], [sgd(1.1), sgd(2.0)], [sgd(1.1), sgd(2.0)]]
    rows = _seeds(per_seed, 1.0, DELTA, "dpsgd", "add_or_remove_one")
    row, released = _summary(rows, rt=1.0)

    stored = [_event_by_hand(json.loads(text)["event"]) for text in rows["privacy_event"]]
    assert {json.loads(text)["relation"] for text in rows["privacy_event"]} == {"add_or_remove_one"}
    everything = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    everything.compose(dp_accounting.ComposedDpEvent(stored))
    assert row[MEAN_OVER_SEEDS] == pytest.approx(everything.get_epsilon(DELTA), rel=1e-9)
    one = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    one.compose(dp_accounting.ComposedDpEvent(stored[:2]))  # seed 0's two configs
    assert row[PER_SEED] == pytest.approx(one.get_epsilon(DELTA), rel=1e-9)
    assert released["eps_released"].tolist() == pytest.approx([one.get_epsilon(DELTA)] * 3, rel=1e-9)
    assert row[MEAN_OVER_SEEDS] > row[PER_SEED] and row["seeds"] == 3
    assert row["bound, mean over seeds"] == "composition of the 6 configs trained in the 3 seeds (the same data)"
    assert row["guarantee"] == "central, add/remove one record"


def test_the_mean_over_seeds_of_pure_dp_rows_is_at_most_the_plain_sum():
    rr = dp_accounting.RandomizedResponseDpEvent(2 / (math.e + 1), 2)  # k-RR at eps 1
    rows = _seeds([[rr], [rr]], 1.0, 0.0, "private_reductions", "replace_one")
    row, _ = _summary(rows, rt=1.0)
    accountant = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    accountant.compose(dp_accounting.ComposedDpEvent([_event_by_hand(json.loads(t)["event"])
                                                      for t in rows["privacy_event"]]))
    plain_sum = float(rows["eps_formal"].sum())
    assert plain_sum == 2.0 and accountant.get_epsilon(DELTA) > plain_sum  # two configs: the sum is the bound
    assert row[MEAN_OVER_SEEDS] == pytest.approx(plain_sum) and row["δ"] == DELTA
    many = _seeds([[rr] * 10, [rr] * 10, [rr] * 10], 1.0, 0.0, "private_reductions", "replace_one")
    row, _ = _summary(many, rt=1.0)
    accountant = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    accountant.compose(dp_accounting.ComposedDpEvent([_event_by_hand(json.loads(t)["event"])
                                                      for t in many["privacy_event"]]))
    assert row[MEAN_OVER_SEEDS] == pytest.approx(min(accountant.get_epsilon(DELTA), 30.0), rel=1e-9)
    assert row[MEAN_OVER_SEEDS] < 30.0


def test_the_mean_over_seeds_of_best_of_random_searches_composes_their_repeat_and_select():
    grid = dp_accounting.GaussianDpEvent(2.0)
    record = json.dumps({"count": "poisson", "mean": 4, "shape": None, "drawn": 2, "grid_size": 1,
                         "grid_events": [event_to_json(grid, "add_or_remove_one")]})
    rows = _seeds([[grid, grid], [grid], [grid, grid, grid]], 1.0, DELTA, "dpsgd", "add_or_remove_one", record)
    row, _ = _summary(rows, rt=0.0)
    inner = _event_by_hand(json.loads(json.loads(record)["grid_events"][0])["event"])
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(dp_accounting.dp_event.RepeatAndSelectDpEvent(inner, 4.0, math.inf), 3)
    assert row[MEAN_OVER_SEEDS] == pytest.approx(accountant.get_epsilon(DELTA), rel=1e-9)
    alone = dp_accounting.rdp.RdpAccountant()
    alone.compose(dp_accounting.dp_event.RepeatAndSelectDpEvent(inner, 4.0, math.inf))
    assert row[PER_SEED] == pytest.approx(alone.get_epsilon(DELTA), rel=1e-9)


def test_a_mean_over_seeds_of_a_local_method_is_not_covered():
    rows = pd.concat([_rows([None, None], [4.0, 4.0], 0.0, "federate").assign(seed=s) for s in (0, 1)],
                     ignore_index=True)
    rr = dp_accounting.RandomizedResponseDpEvent(0.5, 2)
    rows = pd.concat([rows, _seeds([[rr], [rr]], 1.0, 0.0, "private_reductions", "replace_one")], ignore_index=True)
    from fairdp.analysis import select_by_rt

    released = released_guarantees(rows, select_by_rt(rows, 1.0), 1.0)
    table = release_summary(released, rows, 1.0).set_index("method")
    assert math.isnan(table.loc["federate", MEAN_OVER_SEEDS])
    assert table.loc["federate", "bound, mean over seeds"] == "not covered: a local guarantee per representation"
    assert table.loc["federate", "guarantee"] == "local, replace one record's representation"
    assert table.loc["private_reductions", "guarantee"] == "local, replace one record's attribute"



def test_the_reports_release_tables_from_one_computation_are_the_separate_calls():
    """``selection_release`` (the report's: scopes and compositions computed once) gives
    ``released_guarantees`` and ``release_summary`` exactly, over kinds composed apart."""
    from fairdp.analysis import select_by_rt
    from fairdp.analysis._release import selection_release

    rows = pd.concat([_rows([None, None], [4.0, 4.0], 0.0, "federate").assign(seed=s) for s in (0, 1)],
                     ignore_index=True)
    rr = dp_accounting.RandomizedResponseDpEvent(0.5, 2)
    rows = pd.concat([rows, _seeds([[rr], [rr]], 1.0, 0.0, "private_reductions", "replace_one")], ignore_index=True)
    selected = select_by_rt(rows, 1.0)
    released, summary = selection_release(rows, selected, 1.0)
    apart = released_guarantees(rows, selected, 1.0)
    pd.testing.assert_frame_equal(released, apart)
    pd.testing.assert_frame_equal(summary, release_summary(apart, rows, 1.0))

# -- random count: repeat and select ------------------------------------------------------------------

@pytest.mark.parametrize(("sigma", "mean", "shape", "pinned"), [
    # dp-accounting 0.6.0, RdpAccountant().compose(RepeatAndSelectDpEvent(GaussianDpEvent(sigma), mean, shape))
    (2.0, 10, math.inf, 4.908152109911617),
    (2.0, 10, 1.0, 4.3150722993888255),
    (2.0, 10, 0.0, 3.638537753049733),
    (2.0, 10, 0.5, 3.9977212299531684),
    (5.0, 50, math.inf, 4.757926890031319),
])
def test_repeat_and_select_pins_dp_accounting(sigma, mean, shape, pinned):
    got = repeat_and_select_epsilon([dp_accounting.GaussianDpEvent(sigma)], "add_or_remove_one", DELTA, mean, shape)
    assert got == pytest.approx(pinned, rel=1e-9)
    # random search costs more than one run and far less than composing mean runs
    assert _cks_epsilon(_gaussian_rdp(sigma), DELTA) < got < _cks_epsilon(mean * _gaussian_rdp(sigma), DELTA)


@pytest.mark.parametrize(("mean", "shape"), [(10, 1.0), (10, 0.5), (25, 2.0), (8, 0.0)])
def test_truncated_negative_binomial_bound_matches_theorem_2_by_hand(mean, shape):
    """Papernot & Steinke Theorem 2 for a Gaussian run: RDP at order l is
    eps(l) + (1 + eta) min_lh [(1 - 1/lh) eps(lh) + log(1/gamma) / lh] + log(E[K]) / (l - 1),
    then made monotone in l (RDP grows with the order), then converted."""
    rdp = _gaussian_rdp(3.0)
    gamma = truncated_negative_binomial_gamma(shape, mean)
    c = (1 + shape) * min((1 - 1 / lh) * e + math.log(1 / gamma) / lh for lh, e in zip(ORDERS, rdp))
    out = np.array([e + c + math.log(mean) / (lam - 1) if lam > 1 else math.inf for lam, e in zip(ORDERS, rdp)])
    out = np.array([out[ORDERS >= lam].min() for lam in ORDERS])
    got = repeat_and_select_epsilon([dp_accounting.GaussianDpEvent(3.0)], "add_or_remove_one", DELTA, mean, shape)
    assert got == pytest.approx(_cks_epsilon(out, DELTA), rel=1e-6)


def test_a_trial_drawing_from_several_configs_is_bounded_by_their_largest_curve():
    low, high = dp_accounting.GaussianDpEvent(1.5), dp_accounting.GaussianDpEvent(4.0)
    alone = repeat_and_select_epsilon([low], "add_or_remove_one", DELTA, 20, math.inf)
    # sigma 1.5's curve is above sigma 4's at every order: the mixture costs what sigma 1.5 costs
    assert repeat_and_select_epsilon([low, high], "add_or_remove_one", DELTA, 20, math.inf) == \
        pytest.approx(alone, rel=1e-12)
    # curves that cross: at least what each costs alone
    sampled = dpsgd_event(0.8, 50, 1000, 5)
    both = repeat_and_select_epsilon([sampled, high], "add_or_remove_one", DELTA, 20, 1.0)
    for e in (sampled, high):
        assert both >= repeat_and_select_epsilon([e], "add_or_remove_one", DELTA, 20, 1.0) - 1e-12


@pytest.mark.parametrize(("mean", "shape"), [(10, 1.0), (10, 0.5), (20, 0.0), (5, 3.0)])
def test_gamma_is_dp_accountings(mean, shape):
    assert truncated_negative_binomial_gamma(shape, mean) == pytest.approx(
        rdp_module._gamma_truncated_negative_binomial(shape, mean), rel=1e-7)


@pytest.mark.parametrize("count", [TrialCount("poisson", 12.0), TrialCount("truncated_negative_binomial", 12.0, 1.0),
                                   TrialCount("truncated_negative_binomial", 12.0, 0.5),
                                   TrialCount("truncated_negative_binomial", 12.0, 0.0),
                                   # drawn by inversion: redrawing NB until >= 1 would take 200 and 220 tries
                                   TrialCount("truncated_negative_binomial", 1.005, 1.0),
                                   TrialCount("truncated_negative_binomial", 20.0, 0.001)])
def test_trial_counts_have_the_mean_the_bound_assumes(count):
    rng = np.random.default_rng(0)
    k = np.array([count.draw(rng) for _ in range(20000)])
    se = k.std() / math.sqrt(len(k))
    assert abs(k.mean() - count.mean) < 4 * se
    if count.count != "poisson":
        assert k.min() >= 1  # truncated at zero: every run trains something
    else:  # Poisson's variance is its mean
        assert k.var() == pytest.approx(count.mean, rel=0.05)


@pytest.mark.parametrize("min_acceptance", [0.0, 1.0], ids=["rejection", "inversion"])
@pytest.mark.parametrize(("mean", "shape"), [(3.0, 0.5), (3.0, 2.0)])
def test_both_truncated_negative_binomial_samplers_draw_definition_1(monkeypatch, min_acceptance, mean, shape):
    """Either path draws NB(eta, gamma) given K >= 1 (scipy's pmf, renormalised): a chi-square
    test over k = 1..7 and the tail."""
    from scipy import stats

    import fairdp.privacy._release as release
    monkeypatch.setattr(release, "REJECTION_MIN_ACCEPTANCE", min_acceptance)
    count = TrialCount("truncated_negative_binomial", mean, shape)
    gamma = count.gamma()
    rng = np.random.default_rng(7)
    k = np.array([count.draw(rng) for _ in range(20000)])
    pmf = stats.nbinom.pmf(np.arange(1, 8), shape, gamma) / stats.nbinom.sf(0, shape, gamma)
    expected = np.append(pmf, 1 - pmf.sum()) * len(k)
    observed = np.append([np.sum(k == i) for i in range(1, 8)], np.sum(k >= 8))
    assert k.min() >= 1
    assert stats.chisquare(observed, expected).pvalue > 1e-3


def test_eps_released_under_tuning_depends_on_whether_the_selection_is_a_best_of():
    grid = [dp_accounting.GaussianDpEvent(2.0), dp_accounting.GaussianDpEvent(3.0)]
    record = json.dumps({"count": "poisson", "mean": 10, "shape": None, "drawn": 3, "grid_size": 2,
                         "grid_events": sorted(event_to_json(e, "add_or_remove_one") for e in grid)})
    drawn = [grid[0], grid[1], grid[0]]
    rows = _rows(drawn, [1.0] * 3, DELTA, tuning=record)
    best_of = released_guarantees(rows, rows.iloc[[0]], rt=0.0)
    assert best_of["eps_released"].iloc[0] == pytest.approx(
        repeat_and_select_epsilon(grid, "add_or_remove_one", DELTA, 10, math.inf), rel=1e-12)
    assert best_of["released_under"].iloc[0].startswith("repeat-and-select")
    # RT > 0 picks relative to the best accuracy among the trials: no total order, so composition
    relaxed = released_guarantees(rows, rows.iloc[[0]], rt=1.0)
    assert relaxed["eps_released"].iloc[0] == pytest.approx(
        _cks_epsilon(2 * _gaussian_rdp(2.0) + _gaussian_rdp(3.0), DELTA), rel=1e-9)
    assert "no best-of" in relaxed["released_under"].iloc[0]


# -- a tuned study ------------------------------------------------------------------------------------

BASE = {"name": "tuned", "dataset": {"name": "synthetic", "rows": 600, "features": 6}, "seeds": [0, 1],
        "train": {"epochs": 1, "batch_size": 100}, "evaluate": {"leakage": False, "mdl": False},
        "selection": {"fairness": "dp_gap", "rt": 0},
        "tuning": {"count": "poisson", "mean": 3},
        "methods": {"dpsgd": {"grid": {"eps": [1.0], "clip_primal": [10.0]}},
                    "pfld": {"grid": {"fairness_notion": ["dp"], "eps": [0.5, 2.0], "clip_primal": [10.0],
                                      "clip_dual": [5.0]}}}}


@pytest.mark.parametrize(("tuning", "extra", "field"), [
    ({"count": "uniform", "mean": 3}, {}, "tuning.count"),
    ({"count": "poisson", "mean": 0.5}, {}, "tuning.mean"),
    ({"count": "poisson", "mean": 3, "shape": 1}, {}, "tuning.shape"),
    ({"count": "truncated_negative_binomial", "mean": 3}, {}, "tuning.shape"),
    ({"count": "truncated_negative_binomial", "mean": 3, "shape": -1}, {}, "tuning.shape"),
    ({"count": "truncated_negative_binomial", "mean": 3, "shape": 1e-9}, {}, "tuning.shape"),
    ({"count": "truncated_negative_binomial", "mean": 3, "shape": 1.7976931348623157e308}, {}, "tuning.shape"),
    ({"count": "poisson", "mean": 1e7}, {}, "tuning.mean"),
    ({"count": "poisson"}, {}, "tuning.mean"),
    ({"count": "poisson", "mean": 3}, {"selection": {"fairness": "dp_gap", "by": ["eps"]}}, "tuning"),
    ({"count": "poisson", "mean": 3}, {"search": {"method": "dpsgd", "objectives": {"valid_accuracy": "max"},
                                                  "space": {"eps": {"low": 1, "high": 2}}, "fixed": {"clip_primal": 10}}},
     "tuning"),
])
def test_bad_tuning_is_refused_naming_the_field(tuning, extra, field):
    with pytest.raises(InputError, match=f"^{field}"):
        parse_spec({**BASE, **extra, "tuning": tuning})


def test_bad_tuning_exits_2_before_writing_anything(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, "tuning": {"count": "poisson", "mean": 0.5}}))
    assert_input_error(run_main("run", str(path), "--results", str(tmp_path / "r"), "--executor", "local"),
                       "tuning.mean")
    assert not (tmp_path / "r").exists()


def test_tuning_draws_a_seeded_random_count_with_fresh_ids_for_repeats():
    spec = parse_spec(BASE)
    plan = spec.methods[0]
    counts = []
    for seed in range(40):
        configs, ids = run_configs(spec, plan, seed)
        assert (configs, ids) == run_configs(spec, plan, seed)  # a resumed study draws the same
        assert len(set(ids)) == len(ids) == len(configs)  # one config drawn twice: two trials
        counts.append(len(ids))
    assert len(set(counts)) > 2  # the count is random across runs ...
    assert np.mean(counts) == pytest.approx(3, abs=0.9)  # ... with the asked mean (40 runs: SE 0.27)
    assert len({tuple(tuning_draws(spec.tuning, 2, "pfld", seed)) for seed in range(10)}) > 5
    untuned = parse_spec({k: v for k, v in BASE.items() if k != "tuning"})
    assert run_configs(untuned, untuned.methods[0], 0)[0] == list(untuned.methods[0].configs)


def test_a_tuned_study_stores_its_draws_and_analyze_reports_eps_released(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(BASE))
    results = tmp_path / "r"
    proc = run_main("run", str(path), "--results", str(results), "--executor", "local")
    assert proc.returncode == 0, proc.stderr
    rows = pd.read_parquet(results)
    spec = parse_spec(BASE)
    for plan in spec.methods:
        for seed in spec.seeds:
            _, ids = run_configs(spec, plan, seed)
            got = rows[(rows["method"] == plan.name) & (rows["seed"] == seed)]
            assert sorted(got["config_id"]) == sorted(ids)
            for record in got["tuning"]:
                blob = json.loads(record)
                assert blob["drawn"] == len(ids) and blob["grid_size"] == len(plan.configs)
                assert len(blob["grid_events"]) == len(plan.configs)  # distinct sigmas per eps
    # repeats of dpsgd's one config are independent trials: fresh noise, different models
    dpsgd = rows[rows["method"] == "dpsgd"]
    repeats = dpsgd.groupby("seed").filter(lambda g: len(g) >= 2)
    assert len(repeats), "no run drew dpsgd's config twice; pick seeds that do"
    for _, g in repeats.groupby("seed"):
        assert g["test_confusion"].nunique() > 1
    # the stored event reproduces the row's eps_formal
    for event, eps in zip(rows["privacy_event"], rows["eps_formal"]):
        e, relation = event_from_json(event)
        assert composed_epsilon([e], relation, DELTA) == pytest.approx(eps, rel=1e-12)
    rerun = run_main("run", str(path), "--results", str(results), "--executor", "local")
    assert rerun.returncode == 0 and len(pd.read_parquet(results)) == len(rows)
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**BASE, "tuning": {"count": "poisson", "mean": 5}}))
    assert_input_error(run_main("run", str(other), "--results", str(results), "--executor", "local"), "tuning")
    table = run_main("analyze", str(results), "--selected", "--rt", "0", "--fairness", "dp_gap", "--format", "csv")
    assert table.returncode == 0, table.stderr
    out = pd.read_csv(__import__("io").StringIO(table.stdout))
    assert {"eps_formal", "eps_released", "delta_released", "released_under"} <= set(out.columns)
    dp = out[out["method"] == "dpsgd"]
    want = repeat_and_select_epsilon([event_from_json(dpsgd["privacy_event"].iloc[0])[0]], "add_or_remove_one",
                                     DELTA, 3, math.inf)
    assert dp["eps_released"].to_numpy() == pytest.approx(want, rel=1e-9)
    assert (out["eps_released"] > out["eps_formal"]).all()
    # the report's "ε of one config" is the calibrated config's exact ε, at or just under the grid's
    # eps, and the report says so rather than leaving a figure like 4.99867 unexplained
    assert ((dpsgd["eps_formal"] <= dpsgd["eps"]) & (dpsgd["eps_formal"] > 0.99 * dpsgd["eps"])).all()
    from fairdp.analysis import write_report

    write_report(rows, tmp_path / "report", ReportOptions(rt=0, fairness="dp_gap", rts=(0,), ci=None))
    md = whole_report(tmp_path / "report")
    released = md.split("## What a selection releases")[1].split("\n## ")[0]
    assert "at or just below that target" in released
    # what no eps covers: the validation rows, and the splits' counts every row publishes
    assert "test_confusion" in released and "valid_confusion" in released
    # the whole table's cost, every config of every seed, against dp-accounting called directly
    from fairdp.analysis import whole_table_release

    whole = whole_table_release(rows).set_index("methods").loc["dpsgd"]
    accountant = dp_accounting.rdp.RdpAccountant(neighboring_relation=_RELATIONS["add_or_remove_one"])
    for event in rows.loc[(rows["method"] == "dpsgd") & (rows["status"] == "ok"), "privacy_event"]:
        accountant.compose(event_from_json(event)[0])
    assert whole["ε, all seeds"] == pytest.approx(accountant.get_epsilon(DELTA), rel=1e-9)
    main = md.split("## Test results")[1].split("\n## ")[0]
    assert "Releasing this whole table at once" in main and "dpsgd on " in main


# -- the kind of each guarantee ---------------------------------------------------------------------

def test_each_method_states_the_kind_of_its_guarantee():
    """DP-SGD protects a whole record, PF-LD the attribute only, FEDERATE's family each record's
    released representation, private reductions each record's attribute (both local)."""
    from fairdp.methods import get_method, method_names
    from fairdp.privacy._shared import guarantee_kind

    want = {"dpsgd": "central, add/remove one record", "pfld": "central, replace one record's attribute",
            "private_reductions": "local, replace one record's attribute",
            "dpsgd_global_adapt": "central, add/remove one record", "dpsgd_f": "central, add/remove one record",
            "dp_fermi": "central, add/remove one record",
            **{m: "local, replace one record's representation" for m in ("federate", "dpnr", "cape", "noise")}}
    for name in method_names():
        method = get_method(name)
        assert method.guarantee_kind == want.get(name), name
        assert (method.guarantee_kind is None) == (method.privacy_scope is None)
    assert guarantee_kind("central", "replace_one") == "central, replace one record"
    with pytest.raises(ValueError, match="scope"):
        guarantee_kind("global", "add_or_remove_one")
    with pytest.raises(ValueError, match="attribute"):
        guarantee_kind("central", "replace_attribute", "record")
    with pytest.raises(ValueError, match="unit"):
        guarantee_kind("local", "replace_one", "row")


# -- events as JSON: the text a row stores -------------------------------------------------------------

def test_event_json_is_canonical_strict_json_with_finite_floats_plain():
    """The stored text is one canonical form (keys sorted, no spaces), strict JSON (inf as a
    tagged string, never the non-standard Infinity token), finite floats as plain numbers; it
    decodes to the same event and relation."""
    def strict(text):
        return json.loads(text, parse_constant=lambda name: pytest.fail(f"non-standard JSON constant {name}"))

    assert event_to_json(dp_accounting.GaussianDpEvent(2.0), "add_or_remove_one") == \
        '{"event":{"class":"GaussianDpEvent","noise_multiplier":2.0},"relation":"add_or_remove_one"}'
    assert event_to_json(dp_accounting.GaussianDpEvent(math.inf), "replace_one") == \
        '{"event":{"class":"GaussianDpEvent","noise_multiplier":{"float":"inf"}},"relation":"replace_one"}'
    events = [dpsgd_event(0.9, 100, 1000, 3), pfld_event(1.3, 4.0, 256, 30000, 2),
              dp_accounting.ComposedDpEvent([dp_accounting.LaplaceDpEvent(math.inf),
                                             dp_accounting.RandomizedResponseDpEvent(0.25, 3)])]
    for event in events:
        for relation in ("add_or_remove_one", "replace_one", "replace_attribute"):
            text = event_to_json(event, relation)
            assert text == json.dumps(strict(text), sort_keys=True, separators=(",", ":"))
            assert event_from_json(text) == (event, relation)
    assert strict(event_to_json(events[2], "replace_one"))["event"]["events"][0]["noise_multiplier"] == {"float": "inf"}


# -- curves: what only the accountant decides --------------------------------------------------------------

def test_curves_outside_the_fast_path_are_the_accountants_or_its_refusal():
    """A leaf fairdp has no curve of its own for (a zCDP event) is composed by the accountant
    itself (to the bit, also beside a Gaussian step); a Poisson-sampled Gaussian step is
    refused under replace-one (the accountant has no bound for it), alone or composed, and is
    the accountant's under the other two relations."""
    zcdp = dp_accounting.dp_event.ZCDpEvent(0.3, 0.1)
    for event in (zcdp, dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(2.0), zcdp])):
        for relation in _RELATIONS:
            accountant = dp_accounting.rdp.RdpAccountant(ORDERS, _RELATIONS[relation])
            accountant.compose(event)
            assert np.array_equal(rdp_curve(event, relation), accountant._rdp)
    sampled = dp_accounting.PoissonSampledDpEvent(0.05, dp_accounting.GaussianDpEvent(1.1))
    for event in (sampled, dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(2.0), sampled])):
        with pytest.raises(dp_accounting.UnsupportedEventError):
            rdp_curve(event, "replace_one")
        for relation in ("add_or_remove_one", "replace_attribute"):
            accountant = dp_accounting.rdp.RdpAccountant(ORDERS, _RELATIONS[relation])
            accountant.compose(event)
            assert np.array_equal(rdp_curve(event, relation), accountant._rdp)


# -- the truncated negative binomial: mean, gamma, draws ---------------------------------------------------

def _tnb_pmf(shape: float, gamma: float, k: np.ndarray) -> np.ndarray:
    """Definition 1's pmf at k >= 1 (scipy's NB(eta, gamma), or logarithmic at eta = 0, given K >= 1)."""
    from scipy import stats

    if shape == 0:
        return stats.logser.pmf(k, 1 - gamma)
    return stats.nbinom.pmf(k, shape, gamma) / stats.nbinom.sf(0, shape, gamma)


@pytest.mark.parametrize("shape", [0.0, 1e-3, 0.5, 1.0, 3.0])
def test_truncated_negative_binomial_mean_sums_its_pmf_and_is_one_at_gamma_one(shape):
    from fairdp.privacy._release import truncated_negative_binomial_mean

    k = np.arange(1, 200_000, dtype=np.float64)
    for gamma in (0.05, 0.3, 0.9):
        assert truncated_negative_binomial_mean(gamma, shape) == pytest.approx(
            float(np.sum(k * _tnb_pmf(shape, gamma, k))), rel=1e-9)
    # gamma = 1: every run trains exactly one config (the limit of K given K >= 1)
    assert truncated_negative_binomial_mean(1.0, shape) == 1.0


@pytest.mark.parametrize("shape", [0.0, 0.5, 1.0, 3.0])
def test_gamma_inverts_the_mean(shape):
    from fairdp.privacy._release import truncated_negative_binomial_mean as mean_of

    for mean in (1.5, 12.0, 1e3, 1e6):  # 1e6: spec's largest mean, gamma near 1e-6
        gamma = truncated_negative_binomial_gamma(shape, mean)
        assert 0 < gamma < 1 and mean_of(gamma, shape) == pytest.approx(mean, rel=1e-9)
        assert mean_of(gamma, shape) >= mean  # the smaller end: at least the asked mean, as dp-accounting rounds
    # a mean of one trial (spec's smallest) is gamma 1, K = 1
    assert truncated_negative_binomial_gamma(shape, 1.0) == 1.0
    # the mean of a gamma the bisection reaches exactly gives that gamma back, not a neighbour below
    for gamma in (0.75, 0.5, 0.375, 0.125, 2.0 ** -10):
        assert truncated_negative_binomial_gamma(shape, mean_of(gamma, shape)) == gamma
    # it stops at the first bracket [lo, hi] with hi - lo <= 1e-12 hi and returns lo: with
    # hi = 1e12 * 2^-40 that bracket is 2^-40 wide, exactly 1e-12 hi
    hi = 1e12 * 2.0 ** -40
    assert hi - (hi - 2.0 ** -40) == 1e-12 * hi
    assert truncated_negative_binomial_gamma(shape, mean_of(hi - 2.0 ** -41, shape)) == hi - 2.0 ** -40


@pytest.mark.parametrize("shape", [0.0, 1e-3, 0.5, 1.0, 3.0])
def test_a_mean_of_one_trial_draws_one(shape):
    count = TrialCount("truncated_negative_binomial", 1.0, shape)
    assert count.gamma() == 1.0
    rng = np.random.default_rng(3)
    assert {count.draw(rng) for _ in range(50)} == {1}


def _rejection_draws(shape: float, gamma: float, seed: int, n: int) -> list[int]:
    """NB(eta, gamma) from numpy, redrawn until >= 1 (Definition 1 by rejection), written out."""
    rng, out = np.random.default_rng(seed), []
    while len(out) < n:
        k = int(rng.negative_binomial(shape, gamma))
        if k >= 1:
            out.append(k)
    return out


# shape found by search: 1 - gamma^eta is REJECTION_MIN_ACCEPTANCE to the last bit at mean 5
_AT_THE_THRESHOLD = 0.003787981416816121


@pytest.mark.parametrize(("mean", "shape"), [(12.0, 1.0), (3.0, 0.5), (5.0, _AT_THE_THRESHOLD)])
def test_seeded_draws_are_pinned_to_rejection_where_it_accepts_often_enough(mean, shape):
    """A resumed study draws the same counts: at an acceptance 1 - gamma^eta of at least
    REJECTION_MIN_ACCEPTANCE (threshold included) a draw is numpy's NB redrawn until >= 1."""
    from fairdp.privacy._release import REJECTION_MIN_ACCEPTANCE

    count = TrialCount("truncated_negative_binomial", mean, shape)
    acceptance = -math.expm1(shape * math.log(count.gamma()))
    assert acceptance >= REJECTION_MIN_ACCEPTANCE == 0.01
    if shape == _AT_THE_THRESHOLD:
        assert acceptance == REJECTION_MIN_ACCEPTANCE
    rng = np.random.default_rng(11)
    assert [count.draw(rng) for _ in range(300)] == _rejection_draws(shape, count.gamma(), 11, 300)


@pytest.mark.parametrize(("mean", "shape"), [(20.0, 1e-3), (1.005, 1.0), (400.0, 1e-4)])
def test_seeded_draws_by_inversion_are_the_exact_quantiles_of_their_uniforms(mean, shape):
    """Below REJECTION_MIN_ACCEPTANCE a draw is the smallest k whose CDF (scipy's pmf, summed
    here) reaches one uniform of the generator: far into the tail too (k > 64, past the
    sampler's first chunk of the pmf)."""
    count = TrialCount("truncated_negative_binomial", mean, shape)
    gamma = count.gamma()
    assert -math.expm1(shape * math.log(gamma)) < 0.01
    rng = np.random.default_rng(5)
    draws = np.array([count.draw(rng) for _ in range(3000)])
    cdf = np.cumsum(_tnb_pmf(shape, gamma, np.arange(1, 200_000, dtype=np.float64)))
    want = np.searchsorted(cdf, np.random.default_rng(5).random(3000), side="left") + 1
    assert np.array_equal(draws, want)
    if mean > 10:
        assert (draws > 64).sum() > 100


# -- the trial count as stored and shown ---------------------------------------------------------------

def test_trial_counts_are_stored_as_strict_json_and_shown_by_name():
    from fairdp.privacy._shared import trial_count_from_dict

    poisson = TrialCount("poisson", 12.0)
    tnb = TrialCount("truncated_negative_binomial", 12.0, 0.5)
    assert poisson.to_dict() == {"count": "poisson", "mean": 12.0, "shape": None}
    assert tnb.to_dict() == {"count": "truncated_negative_binomial", "mean": 12.0, "shape": 0.5}
    for count in (poisson, tnb, TrialCount("truncated_negative_binomial", 3.0, 0.0)):
        text = json.dumps(count.to_dict(), allow_nan=False)  # the tuning record a row stores
        assert trial_count_from_dict(json.loads(text)) == count
    assert poisson.describe() == "Poisson, mean 12"
    assert tnb.describe() == "truncated negative binomial, mean 12, shape 0.5"
    # a spec's count cannot be changed after it was checked, and serves as a key
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        tnb.mean = 1e9
    assert len({tnb, TrialCount("truncated_negative_binomial", 12.0, 0.5), poisson}) == 2


def test_a_heavy_tailed_trial_count_is_drawn_in_bounded_memory():
    """Mean 1e6 at shape 1e-6 (a spec the parser accepts): the inversion sampler's tail runs to
    billions of terms; it sums them a bounded chunk at a time (it once ran out of memory)."""
    import tracemalloc

    from fairdp.privacy._release import TrialCount

    count = TrialCount("truncated_negative_binomial", 1e6, 1e-6)
    rng = np.random.default_rng(4)  # its third draw is past 1.1e7: the tail's chunks reach their cap
    tracemalloc.start()
    try:
        draws = [count.draw(rng) for _ in range(3)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert all(d >= 1 for d in draws) and max(draws) > 1e7
    assert peak < 100e6, peak  # a few arrays of 2^20 terms; the uncapped sampler held 2^24 and more
