"""A private pick of the released config: the exact discrete Gaussian sampler, the count
release's calibration and sensitivity, its measured noise, the pick's total eps against an
independent composition, an empirical audit that refutes a planted bug, and the pick being
post-processing of the noisy counts alone."""

from __future__ import annotations

import json
import math
import random

import dp_accounting
import numpy as np
import pandas as pd
import pytest
from dp_accounting.rdp import RdpAccountant
from scipy import stats

from fairdp.analysis import (
    PrivateSelection,
    private_pick_cost,
    private_valid_metrics,
    released_guarantees,
    select_by_rt,
)
from fairdp.errors import InputError
from fairdp.privacy import event_from_json
from fairdp.privacy._selection import (
    count_cells,
    count_sigma,
    discrete_gaussian,
    gaussian_multiplier,
)
from fairdp.privacy.training_audit import event_epsilon_lower_bound
from fairdp.study import ResultStore
from tests.conftest import REPO

DELTA = 1e-5


# -- the sampler ------------------------------------------------------------------------------------

@pytest.mark.parametrize("sigma", [0.4, 1.0, 3.7, 25.0])
def test_the_sampler_draws_the_discrete_gaussian(sigma):
    """Chi-square goodness of fit against P(z) proportional to exp(-z^2 / (2 sigma^2)), computed
    here over the integers; 30,000 draws, cells of expected count >= 5 (the tails pooled)."""
    n = 30_000
    draws = discrete_gaussian(sigma, n, random.Random(7))
    assert draws.dtype == np.int64
    support = np.arange(-int(12 * sigma) - 3, int(12 * sigma) + 4)
    pmf = np.exp(-support.astype(float) ** 2 / (2 * sigma**2))
    pmf /= pmf.sum()
    expected = n * pmf
    keep = expected >= 5
    lo, hi = support[keep][0], support[keep][-1]
    observed = [np.sum(draws < lo) + np.sum(draws == lo)]
    want = [expected[support <= lo].sum()]
    for z in support[(support > lo) & (support < hi)]:
        observed.append(np.sum(draws == z))
        want.append(expected[support == z][0])
    observed.append(np.sum(draws >= hi))
    want.append(expected[support >= hi].sum())
    assert stats.chisquare(observed, np.array(want) * n / np.sum(want)).pvalue > 1e-4
    # its variance is the discrete law's, computed here (a little under sigma^2 for small sigma)
    var = float((pmf * support**2).sum())
    assert draws.var() == pytest.approx(var, rel=5 * math.sqrt(2 / n) + 0.01)


def test_the_sampler_is_a_function_of_its_stream():
    a = discrete_gaussian(5.0, 100, random.Random("x"))
    b = discrete_gaussian(5.0, 100, random.Random("x"))
    np.testing.assert_array_equal(a, b)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="sigma"):
            discrete_gaussian(bad, 3, random.Random(0))


# -- calibration and sensitivity ----------------------------------------------------------------------

@pytest.mark.parametrize("eps", [0.1, 1.0, 4.0, 20.0])
@pytest.mark.parametrize("cells", [1, 18, 36, 300])
def test_the_calibrated_release_is_eps_dp_by_an_independent_accountant(eps, cells):
    sigma = count_sigma(eps, DELTA, cells)
    accountant = RdpAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(sigma / math.sqrt(cells)))
    got = accountant.get_epsilon(DELTA)
    assert got <= eps * (1 + 1e-9) and got == pytest.approx(eps, rel=1e-6)
    # and below the closed form of zCDP (Bun & Steinke 2016): rho = cells / (2 sigma^2) gives
    # (rho + 2 sqrt(rho ln(1 / delta)), delta)
    rho = cells / (2 * sigma**2)
    assert got <= rho + 2 * math.sqrt(rho * math.log(1 / DELTA))


def test_one_record_moves_one_count_per_config_or_two():
    assert count_cells("add_or_remove_one", 18) == 18
    assert count_cells("replace_one", 18) == 36
    assert count_cells("replace_attribute", 18) == 36
    with pytest.raises(ValueError, match="relation"):
        count_cells("swap", 1)
    with pytest.raises(ValueError, match="configs"):
        count_cells("replace_one", 0)


def _counts(y, pred, s, groups=2):
    conf = np.zeros((groups, 2, 2), dtype=np.int64)
    np.add.at(conf, (s, y, pred), 1)
    return conf


def test_one_record_changes_the_counts_as_count_cells_says():
    """Recomputed here from records: adding one, or changing one's attribute, moves each
    config's counts by 1 in one cell, or in two."""
    rng = np.random.default_rng(0)
    y, s = rng.integers(0, 2, 300), rng.integers(0, 2, 300)
    preds = [rng.integers(0, 2, 300) for _ in range(5)]
    base = [_counts(y, p, s) for p in preds]
    added = [_counts(np.r_[y, 1], np.r_[p, 0], np.r_[s, 1]) for p in preds]
    flipped_s = s.copy()
    flipped_s[17] = 1 - flipped_s[17]
    flipped = [_counts(y, p, flipped_s) for p in preds]
    assert sum(int(np.abs(a - b).sum()) for a, b in zip(added, base)) == count_cells("add_or_remove_one", 5)
    assert sum(int(np.abs(a - b).sum()) for a, b in zip(flipped, base)) == count_cells("replace_attribute", 5)
    assert all(int(np.abs(a - b).max()) == 1 for a, b in zip(flipped, base))


# -- an empirical audit ------------------------------------------------------------------------------------

def _audit(sigma: float, claimed_sigma: float, n: int = 20_000) -> tuple[float, float]:
    """The event bound of the count release with noise ``sigma`` on neighbouring counts 0 and
    1, the event {y >= t} chosen on one half and bounded (Clopper-Pearson, 95% jointly) on the
    other; with the eps its release claims at ``claimed_sigma``."""
    claimed = RdpAccountant()
    claimed.compose(dp_accounting.GaussianDpEvent(claimed_sigma))
    eps_claimed = claimed.get_epsilon(DELTA)
    rng = random.Random(11)
    one = 1 + discrete_gaussian(sigma, 2 * n, rng)
    zero = discrete_gaussian(sigma, 2 * n, rng)
    pick_one, pick_zero, held_one, held_zero = one[:n], zero[:n], one[n:], zero[n:]
    best, threshold = -math.inf, 0
    for t in range(int(np.min(pick_one)), int(np.max(pick_one)) + 1):
        a, b = np.mean(pick_one >= t), np.mean(pick_zero >= t)
        if a > 0.001 and math.log(a / max(b, 0.5 / n)) > best:
            best, threshold = math.log(a / max(b, 0.5 / n)), t
    k_one, k_zero = int(np.sum(held_one >= threshold)), int(np.sum(held_zero >= threshold))
    p_lower = stats.beta.ppf(0.025, k_one, n - k_one + 1) if k_one else 0.0
    p_upper = stats.beta.ppf(0.975, k_zero + 1, n - k_zero) if k_zero < n else 1.0
    return event_epsilon_lower_bound(float(p_lower), float(p_upper), DELTA), eps_claimed


def test_an_audit_of_the_release_does_not_contradict_its_eps_and_refutes_a_planted_bug():
    sigma = count_sigma(1.0, DELTA, 1)
    bound, claimed = _audit(sigma, sigma)
    assert claimed == pytest.approx(1.0, rel=1e-6) and bound <= claimed
    # a bug: a tenth of the noise, the same claim
    bound, claimed = _audit(sigma / 10, sigma)
    assert bound > claimed


# -- picks from the noisy counts ------------------------------------------------------------------

@pytest.fixture(scope="module")
def pfld_adult():
    rows = ResultStore(REPO / "results" / "pfld-adult").read()[0]
    keep = rows["seed"].isin([0, 1]) & rows["method"].isin(["pfld", "dpsgd", "unconstrained"])
    return rows[keep].reset_index(drop=True)


BY = ["fairness_notion", "eps"]


def test_the_released_counts_carry_the_stated_noise_and_the_metrics_are_theirs(pfld_adult):
    noisy = private_valid_metrics(pfld_adult, PrivateSelection(1.0), BY)
    run = noisy[(noisy["method"] == "pfld") & (noisy["seed"] == 0) & (noisy["fairness_notion"] == "dp")
                & (noisy["eps"] == 1.0)]
    exact = pfld_adult.loc[run.index]
    sigma = float(run["selection_sigma"].iloc[0])
    # PF-LD's relation moves 2 counts of each of the run's 18 configs: sigma for (1, 1e-5) at 36 cells
    assert len(run) == 18 and sigma == pytest.approx(gaussian_multiplier(1.0, DELTA) * 6, rel=1e-9)
    event, relation = event_from_json(run["selection_event"].iloc[0])
    assert relation == "replace_attribute" and event.noise_multiplier == pytest.approx(sigma / 6, rel=1e-12)
    released = np.array([json.loads(t) for t in run["valid_confusion"]], dtype=float)
    clear = np.array([json.loads(t) for t in exact["valid_confusion"]], dtype=float)
    noise = (released - clear)[clear > 6 * sigma]  # away from the clip at 0
    assert noise.size > 50
    assert noise.std(ddof=1) == pytest.approx(sigma, rel=5 / math.sqrt(2 * noise.size) + 0.02)
    assert abs(noise.mean()) < 5 * sigma / math.sqrt(noise.size)
    # every validation metric is the released counts' own
    conf = released[0]
    assert run["valid_accuracy"].iloc[0] == pytest.approx(100 * np.trace(conf.sum(0)) / conf.sum())


def test_the_pick_reads_nothing_but_the_noisy_counts(pfld_adult):
    noisy = private_valid_metrics(pfld_adult, PrivateSelection(1.0), BY)
    garbled = pfld_adult.assign(valid_accuracy=np.random.default_rng(0).uniform(0, 100, len(pfld_adult)),
                                valid_dp_gap=0.0, valid_eo_gap=0.0, valid_ap_gap=0.0)
    again = private_valid_metrics(garbled, PrivateSelection(1.0), BY)
    a = select_by_rt(noisy, rt=1.0, fairness="notion_gap", by=BY)
    b = select_by_rt(again, rt=1.0, fairness="notion_gap", by=BY)
    assert list(a["config_id"]) == list(b["config_id"])


def test_the_picks_total_eps_is_training_and_release_composed_independently(pfld_adult):
    noisy = private_valid_metrics(pfld_adult, PrivateSelection(2.0), BY)
    picked = released_guarantees(noisy, select_by_rt(noisy, rt=1.0, fairness="notion_gap", by=BY), 1.0, BY)
    checked = 0
    for _, pick in picked.iterrows():
        run = noisy[(noisy["method"] == pick["method"]) & (noisy["seed"] == pick["seed"])]
        for key in BY:  # a method without the key (DP-SGD's notion) is one run over its values
            if run[key].notna().any():
                run = run[run[key] == pick[key]]
        if pick["method"] == "unconstrained":
            assert math.isnan(pick["eps_released"]) and "not covered" in pick["released_under"]
            continue
        relation = event_from_json(run["privacy_event"].iloc[0])[1]
        cells = (2 if relation != "add_or_remove_one" else 1) * len(run)
        sigma = count_sigma(2.0, DELTA, cells)
        neighbours = {"add_or_remove_one": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE}.get(
            relation, dp_accounting.NeighboringRelation.REPLACE_SPECIAL)
        accountant = RdpAccountant(neighboring_relation=neighbours)
        for text in run["privacy_event"]:
            accountant.compose(event_from_json(text)[0])
        accountant.compose(dp_accounting.GaussianDpEvent(sigma / math.sqrt(cells)))
        assert pick["eps_released"] == pytest.approx(accountant.get_epsilon(DELTA), rel=1e-9)
        assert pick["delta_released"] == DELTA and "noisy validation counts" in pick["released_under"]
        checked += 1
    assert checked == len(picked[picked["method"] != "unconstrained"]) > 20


def test_training_that_read_validation_data_is_not_covered(pfld_adult):
    rows = pfld_adult.copy()
    rows.loc[rows["method"] == "dpsgd", "pruned_at"] = 10
    noisy = private_valid_metrics(rows, PrivateSelection(1.0), BY)
    picked = released_guarantees(noisy, select_by_rt(noisy, rt=1.0, fairness="notion_gap", by=BY), 1.0, BY)
    pruned = picked[picked["method"] == "dpsgd"]
    assert pruned["eps_released"].isna().all() and pruned["released_under"].str.contains("prune").all()
    assert picked.loc[picked["method"] == "pfld", "eps_released"].notna().all()


def test_the_cost_table_pairs_each_runs_two_picks(pfld_adult):
    cost = private_pick_cost(pfld_adult, PrivateSelection(1e6), 1.0, "notion_gap", BY)
    # at an enormous eps the noise is far below a count: every pick is the clear one
    pfld = cost[cost["method"] == "pfld"]
    assert (pfld["runs"] == 2).all() and (pfld["same_pick"] == 1.0).all()
    assert (pfld["accuracy_given_up_mean"] == 0).all() and (pfld["violation_added_mean"] == 0).all()
    assert (pfld["eps_total"] > pfld["eps_released"]).all()


@pytest.mark.parametrize(("kwargs", "key"), [({"eps": 0.0}, "eps"), ({"eps": math.inf}, "eps"),
                                             ({"eps": True}, "eps"), ({"eps": 1.0, "delta": 1.0}, "delta"),
                                             ({"eps": 1.0, "seed": 1.5}, "seed")])
def test_bad_settings_are_refused_naming_the_key(kwargs, key):
    with pytest.raises(InputError, match=rf"^selection\.private\.{key}: "):
        PrivateSelection(**kwargs)


def test_rows_without_validation_counts_are_refused(pfld_adult):
    with pytest.raises(InputError, match="valid_confusion"):
        private_valid_metrics(pfld_adult.assign(valid_confusion=None), PrivateSelection(1.0), BY)
    with pytest.raises(InputError, match="valid_confusion"):
        private_valid_metrics(pd.DataFrame(pfld_adult.drop(columns="valid_confusion")), PrivateSelection(1.0), BY)


# -- the study setting and the commands ------------------------------------------------------------

def _spec(tmp_path, selection):
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "dataset": {"name": "synthetic", "rows": 300}, "seeds": [0],
                                    "methods": {"dpsgd": {"grid": {"eps": [1.0], "clip_primal": [1.0]}}},
                                    "selection": selection}))
    return path


def test_a_study_names_its_private_selection_and_stores_it_with_its_selection(tmp_path):
    from fairdp.study import load_spec
    from fairdp.study.store._selection import StoredSelection

    spec = load_spec(_spec(tmp_path, {"private": {"eps": 2, "seed": 5}}))
    assert spec.private_selection == PrivateSelection(2, seed=5)
    stored = StoredSelection.of_spec(spec)
    assert StoredSelection.from_frame(stored.to_frame(), "x").private == PrivateSelection(2, seed=5)
    # a table written before the column existed reads as a clear selection
    old = stored.to_frame().drop(columns="private")
    assert StoredSelection.from_frame(old, "x").private is None
    for bad, key in (({"eps": 0}, "eps"), ({}, "eps"), ({"eps": 1, "sigma": 3}, "sigma"), (3, "private")):
        with pytest.raises(InputError, match=rf"^selection\.private(\.{key})?: "):
            load_spec(_spec(tmp_path, {"private": bad}))


def test_analyze_states_each_private_picks_total_eps(pfld_adult, tmp_path):
    from tests.conftest import run_main

    rows = tmp_path / "rows.parquet"
    pfld_adult.to_parquet(rows)
    proc = run_main("analyze", str(rows), "--by", "fairness_notion,eps", "--fairness", "notion_gap",
                    "--private-selection", "1", "--selected")
    assert proc.returncode == 0, proc.stderr
    assert "private eps 1 at delta 1e-05 for the validation counts (seed 0)" in proc.stderr
    assert "total eps" in proc.stderr and "pfld 1.13-" in proc.stderr
    assert "noisy validation counts it was picked from" in proc.stdout
    proc = run_main("analyze", str(rows), "--private-selection", "-1")
    assert proc.returncode == 2 and proc.stderr.strip().endswith("--private-selection: must be a finite number > 0, got -1.0")


def test_the_whole_tables_release_adds_every_runs_count_release_once(pfld_adult):
    from fairdp.analysis import whole_table_release

    noisy = private_valid_metrics(pfld_adult, PrivateSelection(1.0), BY)
    table = whole_table_release(noisy).set_index("methods")
    row = table.loc["pfld"]
    pfld = noisy[noisy["method"] == "pfld"]
    accountant = RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL)
    for text in pfld["privacy_event"]:
        accountant.compose(event_from_json(text)[0])
    runs = pfld.groupby(["seed", *BY])
    assert runs.ngroups == 2 * 18  # 2 seeds x 3 notions x 6 eps, each its own release
    for _, run in runs:
        accountant.compose(dp_accounting.GaussianDpEvent(count_sigma(1.0, DELTA, 2 * len(run)) / math.sqrt(2 * len(run))))
    assert row["ε, all seeds"] == pytest.approx(accountant.get_epsilon(DELTA), rel=1e-9)
    assert "36 runs' noisy validation counts" in row["bound"]
    clear = whole_table_release(pfld_adult).set_index("methods").loc["pfld"]
    assert row["ε, one seed (largest)"] > clear["ε, one seed (largest)"]


def test_the_covered_methods_are_the_ones_that_train_to_their_last_epoch():
    """A private pick covers the validation reads only where training never read the validation
    split: the methods whose steps keep the last epoch, and no other (a plugin's is not covered)."""
    from fairdp.analysis._private import LAST_EPOCH_METHODS, _uncovered
    from fairdp.methods import builtin_method_names, get_method
    from fairdp.methods._lagrangian import ClassifierSGDStep, TranMethod

    assert ClassifierSGDStep.selection == "last"
    assert LAST_EPOCH_METHODS == {n for n in builtin_method_names() if isinstance(get_method(n), TranMethod)}
    rows = pd.DataFrame([{"method": "gap_reg"}])
    assert "validation accuracy in the clear" in _uncovered(rows)
