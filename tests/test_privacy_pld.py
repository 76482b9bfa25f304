"""dp-accounting's PLD accountant beside RDP (``train.accountant``): the eps fairdp reports under
"pld" is ``PLDAccountant``'s on events each test builds itself, it is below RDP's for the same
noise, calibration under PLD certifies its sigma with PLD and trains with it, and rows say which
accountant reported their eps."""

from __future__ import annotations

import math

import dp_accounting
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from fairdp.analysis import released_guarantees
from fairdp.data import load_dataset
from fairdp.engine import TrainSettings
from fairdp.engine.contract import PackContext
from fairdp.errors import InputError
from fairdp.methods import RunInfo, get_method
from fairdp.metrics import ProbeSettings
from fairdp.privacy import (
    calibrate_dpsgd_sigma,
    calibrate_pfld_sigmas,
    composed_epsilon,
    dpsgd_epsilon,
    gaussian_epsilon,
    pfld_epsilon,
)
from fairdp.privacy._accounting import PLD_DISCRETIZATION
from fairdp.privacy._shared import event_to_json
from fairdp.study import ResultStore, parse_spec, study_columns
from fairdp.study.executors import Pack, StudyContext, run_pack
from fairdp.study.run._resume_checks import check_same_training

DELTA = 1e-5
REL = dp_accounting.NeighboringRelation
# Adult's shape (Tran et al.'s runs): 30,000 training rows, batch 256, 30 epochs, sigma 1
ADULT = (256, 30000, 30)
# a small run, for what is evaluated many times (a calibration)
SMALL = (256, 6000, 3)


def _steps(batch_size: int, n: int, epochs: int) -> int:
    return epochs * -(-n // batch_size)  # every mini-batch of every epoch, the last partial one too


def _dpsgd(sigma: float, batch_size: int, n: int, epochs: int) -> dp_accounting.DpEvent:
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(batch_size / n, dp_accounting.GaussianDpEvent(sigma)),
        _steps(batch_size, n, epochs))


def _pfld(sigma_p: float, sigma_d: float, batch_size: int, n: int, epochs: int) -> dp_accounting.DpEvent:
    return dp_accounting.ComposedDpEvent([
        _dpsgd(sigma_p, batch_size, n, epochs),
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma_d), epochs)])


def _pld(event, relation=REL.ADD_OR_REMOVE_ONE) -> float:
    accountant = PLDAccountant(relation, value_discretization_interval=1e-4)
    accountant.compose(event)
    return accountant.get_epsilon(DELTA)


def _rdp(event, relation=REL.ADD_OR_REMOVE_ONE) -> float:
    accountant = RdpAccountant(neighboring_relation=relation)
    accountant.compose(event)
    return accountant.get_epsilon(DELTA)


# -- (a) fairdp's PLD eps is PLDAccountant's -----------------------------------------------------

def test_the_discretisation_is_the_documented_one():
    assert PLD_DISCRETIZATION == 1e-4


@pytest.mark.parametrize("sigma", [1.5, 3.0])
def test_dpsgd_and_gaussian_epsilon_under_pld_are_the_accountants(sigma):
    b, n, e = SMALL
    want = _pld(_dpsgd(sigma, b, n, e))
    assert dpsgd_epsilon(sigma, b, n, e, DELTA, "pld") == pytest.approx(want, rel=1e-12)
    assert gaussian_epsilon(sigma, _steps(b, n, e), b / n, DELTA, accountant="pld") == pytest.approx(want, rel=1e-12)
    # q = 1: a Poisson sample of every record (the PLD of 7 such steps is within 1e-8 of 7 plain
    # Gaussian steps', an exact sqrt(7) rescaling; both pessimistic)
    assert gaussian_epsilon(sigma, 7, 1.0, DELTA, "pld") == pytest.approx(_pld(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(1.0, dp_accounting.GaussianDpEvent(sigma)), 7)), rel=1e-12)


def test_pfld_epsilon_under_pld_is_the_accountants_and_replace_special_is_add_or_remove():
    """PF-LD's relation, REPLACE_SPECIAL, gets the add/remove distributions from the PLD
    accountant (the module docstring's argument): the same eps under either relation."""
    b, n, e = SMALL
    event = _pfld(1.5, 8.0, b, n, e)
    want = _pld(event, REL.REPLACE_SPECIAL)
    assert want == _pld(event, REL.ADD_OR_REMOVE_ONE)
    assert pfld_epsilon(1.5, 8.0, b, n, e, DELTA, "pld") == pytest.approx(want, rel=1e-12)
    assert pfld_epsilon(0.0, 8.0, b, n, e, DELTA, "pld") == math.inf  # no noise: not private


# -- (b) PLD's eps is below RDP's for the same noise ---------------------------------------------

def test_pld_is_below_rdp_on_adults_shape():
    """Measured: DP-SGD at sigma 1, 2.919 (PLD) against 3.209 (RDP); PF-LD at (1, 50), 2.956
    against 3.248. PLD's is at least 8% lower on both (9.0% measured)."""
    b, n, e = ADULT
    pld, rdp = dpsgd_epsilon(1.0, b, n, e, DELTA, "pld"), dpsgd_epsilon(1.0, b, n, e, DELTA)
    assert rdp == pytest.approx(_rdp(_dpsgd(1.0, b, n, e)), rel=1e-12)
    assert pld <= 0.92 * rdp
    pld, rdp = pfld_epsilon(1.0, 50.0, b, n, e, DELTA, "pld"), pfld_epsilon(1.0, 50.0, b, n, e, DELTA)
    assert pld <= 0.92 * rdp


# -- (c) calibration under PLD: a smaller sigma, certified by PLD ---------------------------------

def test_dpsgd_calibration_under_pld_is_smaller_and_certified_by_pld():
    b, n, e = SMALL
    sigma, rdp_sigma = calibrate_dpsgd_sigma(0.5, DELTA, b, n, e, "pld"), calibrate_dpsgd_sigma(0.5, DELTA, b, n, e)
    assert sigma < 0.95 * rdp_sigma  # measured: 2.822 against 3.078
    assert _pld(_dpsgd(sigma, b, n, e)) <= 0.5 < _pld(_dpsgd(sigma / (1 + 1e-3), b, n, e))  # smallest, to 0.1%
    assert _rdp(_dpsgd(sigma, b, n, e)) > 0.5  # RDP would not certify it


def test_pfld_calibration_under_pld_is_smaller_and_certified_by_pld():
    b, n, e = SMALL
    (sp, sd), (rp, rd) = calibrate_pfld_sigmas(0.5, DELTA, b, n, e, accountant="pld"), \
        calibrate_pfld_sigmas(0.5, DELTA, b, n, e)
    assert sp < rp and sd < rd
    assert _pld(_pfld(sp, sd, b, n, e), REL.REPLACE_SPECIAL) <= 0.5 < _pld(_pfld(sp / (1 + 1e-3), sd, b, n, e))
    dual = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sd), e)  # 10% of the budget
    assert _pld(dual) <= 0.05 < _pld(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sd / 1.001), e))


# -- (d) a DP-SGD pack under PLD trains with PLD's sigma and reports PLD's eps --------------------

@pytest.fixture(scope="module")
def data():
    return load_dataset("synthetic", rows=600, features=8, seed=1)


def test_a_dpsgd_pack_under_pld_trains_with_and_reports_pld_sigmas(data):
    method = get_method("dpsgd")
    configs = [{"eps": 0.5, "clip_primal": 1.0}, {"eps": 1.0, "clip_primal": 1.0}]
    settings = TrainSettings(epochs=1, batch_size=128, dtype="float64", accountant="pld")
    n = len(data.splits["train"])
    # the run train_pack hands the privacy hook (a trained pack's rows: the test below)
    run = RunInfo.of(data, settings, method.representation_dim(data))
    assert run.accountant == "pld" and RunInfo(1, 1, 1, 1, 2).accountant == "rdp"
    rdp_run = RunInfo.of(data, TrainSettings(epochs=1, batch_size=128, dtype="float64"), run.representation_dim)
    sigmas = []
    for config, (eps, delta) in zip(configs, (method.privacy(c, run) for c in configs)):
        sigma = calibrate_dpsgd_sigma(config["eps"], DELTA, 128, n, 1, "pld")
        sigmas.append(sigma)
        assert delta == DELTA and eps == pytest.approx(_pld(_dpsgd(sigma, 128, n, 1)), rel=1e-12)
        assert eps <= config["eps"]
        assert eps != method.privacy(config, rdp_run).eps  # the RDP pack's guarantee is another
    # the step trains with PLD's (smaller) sigmas
    ctx = PackContext(data, configs, ["a", "b"], 0, method.effective_settings(settings),
                      method.default_architecture(data.name), torch.device("cpu"))
    step_sigmas = method.make_step(ctx).sigma.tolist()
    assert step_sigmas == pytest.approx(sigmas, rel=1e-12)
    assert all(s < method.noise_multiplier(c, rdp_run) for s, c in zip(step_sigmas, configs))


# -- (e) rows say which accountant reported their eps --------------------------------------------

def _context(tmp_path, accountant: str) -> StudyContext:
    return StudyContext(study="pld", dataset="synthetic", dataset_options={"rows": 600, "features": 8, "seed": 1},
                        train=TrainSettings(epochs=1, batch_size=128, dtype="float64", accountant=accountant),
                        leakage=False, mdl=False, probe=ProbeSettings(max_epochs=2), results=str(tmp_path),
                        cpus_per_trial=1, columns=tuple(study_columns(["dpsgd", "unconstrained"])))


def test_rows_store_the_accountant_and_old_rows_without_it_resume(tmp_path):
    ctx = _context(tmp_path, "pld")
    for name, configs in (("dpsgd", ({"eps": 0.5, "clip_primal": 1.0},)), ("unconstrained", ({},))):
        method = get_method(name)
        run_pack(ctx, Pack(name, 0, configs, tuple(method.config_id(c) for c in configs)))
    df, corrupt = ResultStore(tmp_path).read()
    assert corrupt == [] and len(df) == 2
    got = df.set_index("method")["accountant"]
    assert got["dpsgd"] == "pld" and pd.isna(got["unconstrained"])
    # the trained pack's row reports PLD's eps for the sigma PLD calibrated
    n = len(load_dataset("synthetic", **ctx.dataset_options).splits["train"])
    sigma = calibrate_dpsgd_sigma(0.5, DELTA, 128, n, 1, "pld")
    eps = df.set_index("method").loc["dpsgd", "eps_formal"]
    assert eps == pytest.approx(_pld(_dpsgd(sigma, 128, n, 1)), rel=1e-12) and eps <= 0.5
    # resuming the rows under the other accountant is refused, naming the column
    with pytest.raises(InputError, match="dpsgd runs with accountant pld, this run asks for rdp"):
        check_same_training(_context(tmp_path, "rdp"), df, "results", ["dpsgd", "unconstrained"])
    check_same_training(ctx, df, "results", ["dpsgd", "unconstrained"])
    # a result set written before the column existed (every pack file without it) reads, and resumes
    for path in ResultStore(tmp_path).pack_files():
        table = pq.read_table(path)
        pq.write_table(table.drop_columns(["accountant"]), path)
    old, corrupt = ResultStore(tmp_path, columns=ctx.columns).read()
    assert corrupt == [] and len(old) == 2 and "accountant" not in old.columns  # as the store reads a set
    for accountant in ("rdp", "pld"):
        check_same_training(_context(tmp_path, accountant), old, "results", ["dpsgd", "unconstrained"])


def test_a_selection_of_pld_rows_is_composed_by_pld_and_a_mixed_one_by_rdp():
    b, n, e = SMALL
    events = [_dpsgd(s, b, n, e) for s in (2.0, 3.0)]
    rows = pd.DataFrame({
        "study": "s", "dataset": "d", "method": "dpsgd", "seed": 0, "config_id": ["c0", "c1"], "status": "ok",
        "valid_accuracy": [80.0, 81.0], "valid_tpr_gap": [5.0, 1.0],
        "eps_formal": [_pld(ev) for ev in events], "delta": DELTA, "accountant": "pld",
        "privacy_event": [event_to_json(ev, "add_or_remove_one") for ev in events], "tuning": None})
    out = released_guarantees(rows, rows.iloc[[0]], rt=1.0)
    assert out["eps_released"].iloc[0] == pytest.approx(_pld(dp_accounting.ComposedDpEvent(events)), rel=1e-12)
    assert out["released_under"].iloc[0] == "composition of the 2 configs trained (PLD)"
    assert composed_epsilon(events, "add_or_remove_one", DELTA, "pld") == out["eps_released"].iloc[0]
    mixed = rows.assign(accountant=["pld", "rdp"])
    out = released_guarantees(mixed, mixed.iloc[[0]], rt=1.0)
    assert out["eps_released"].iloc[0] == pytest.approx(_rdp(dp_accounting.ComposedDpEvent(events)), rel=1e-9)
    assert out["released_under"].iloc[0] == "composition of the 2 configs trained"
    old = rows.drop(columns="accountant")  # rows from before the column: RDP's
    assert released_guarantees(old, old.iloc[[0]], rt=1.0)["eps_released"].iloc[0] == out["eps_released"].iloc[0]


# -- (f) a bad accountant is one InputError line naming it ----------------------------------------

def test_a_bad_accountant_is_refused_naming_the_key():
    with pytest.raises(InputError, match=r"^train\.accountant: must be one of rdp, pld, got 'moments'$"):
        TrainSettings(accountant="moments")
    study = {"name": "x", "dataset": {"name": "synthetic", "rows": 200, "features": 4}, "seeds": [0],
             "train": {"epochs": 1, "accountant": "PLD"}, "methods": {"dpsgd": {}}}
    with pytest.raises(InputError, match=r"^train\.accountant: must be one of rdp, pld, got 'PLD'$"):
        parse_spec(study)
    assert parse_spec({**study, "train": {"accountant": "pld"}}).train.accountant == "pld"
    for bad in (None, ["pld"], 1, "RDP"):
        with pytest.raises(InputError, match="^accountant must be one of rdp, pld"):
            gaussian_epsilon(1.0, 10, 0.1, DELTA, bad)
    with pytest.raises(InputError, match="^accountant must be one of rdp, pld, got 'x'$"):
        calibrate_dpsgd_sigma(1.0, DELTA, *SMALL, "x")


@pytest.mark.parametrize("power, scale", [(2.0, 1.0), (1.0, 30.0), (3.0, 0.01), (0.5, 5.0)])
@pytest.mark.parametrize("start", [0.3, 1.0, 7.0])
def test_the_pld_search_returns_a_certified_bracket_in_few_evaluations(power, scale, start):
    """``_smallest_sigma_pld`` on decreasing functions of several shapes, started below, near and
    above the answer: the sigma returned meets the target and the one 0.1% below does not."""
    from fairdp.privacy._accounting import _smallest_sigma_pld

    calls = []

    def eps(sigma):
        calls.append(sigma)
        return scale / sigma ** power + 0.01 / sigma

    sigma = _smallest_sigma_pld(eps, 2.0, start)
    assert eps(sigma) <= 2.0 < eps(sigma / (1 + 1e-3))
    assert len(calls) <= 2 + 14  # two checks here; the search itself: a bracket, then a few probes (5-12)
