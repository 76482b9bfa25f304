"""The fast RDP curve that steers the noise search (``fairdp.privacy._rdp_guide``): it agrees
with dp-accounting called directly, and the search's answer never rests on it (a guide that
is wrong still gives the accountant's own answer; a right one saves its evaluations)."""

from __future__ import annotations

import functools
import logging
import math

import numpy as np
import pytest
from dp_accounting import GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent
from dp_accounting.rdp import RdpAccountant
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairdp.privacy import calibrate_dpsgd_sigma, dpsgd_epsilon
from fairdp.privacy._accounting import _smallest_sigma, quiet_accountant
from fairdp.privacy._rdp_guide import ORDERS, _log_a_frac, epsilon_from_rdp, sampled_gaussian_rdp


def _dp_accounting_eps(q: float, sigma: float, steps: int, delta: float) -> float:
    with quiet_accountant():
        accountant = RdpAccountant()
        accountant.compose(SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), steps))
        return accountant.get_epsilon(delta)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log_q=st.floats(-4, -0.02), log_sigma=st.floats(-0.5, 1.7), steps=st.integers(1, 100_000),
       delta=st.sampled_from([1e-3, 1e-5, 1e-7]))
def test_the_guides_eps_is_dp_accountings_to_rounding(log_q, log_sigma, steps, delta):
    q, sigma = 10.0**log_q, 10.0**log_sigma
    exact = _dp_accounting_eps(q, sigma, steps, delta)
    guide = epsilon_from_rdp(steps * sampled_gaussian_rdp(q, sigma), delta)
    assert guide == pytest.approx(exact, rel=1e-9, abs=1e-12)


# the last: one fractional order's series would stop only at its 1001st term, past dp-accounting's
# 1000: it is left out (inf) by both
@pytest.mark.parametrize(("q", "sigma"), [(0.24, 0.7), (0.01, 3.0), (1e-3, 20.0), (0.5, 1.0),
                                          (0.05298316906283707, 0.8912509381337456)])
def test_each_orders_rdp_is_dp_accountings(q, sigma):
    with quiet_accountant():
        exact = dp_rdp._compute_rdp_poisson_subsampled_gaussian(q, sigma, dp_rdp.DEFAULT_RDP_ORDERS)
    guide = sampled_gaussian_rdp(q, sigma)
    finite = np.isfinite(exact)
    assert np.array_equal(np.isfinite(guide), finite)
    # log A_alpha near 0 holds ~1e-16 absolute: a tiny RDP agrees in absolute terms
    np.testing.assert_allclose(guide[finite], exact[finite], rtol=1e-9, atol=1e-14)


@pytest.mark.parametrize("block", [3, 7, 128])
@pytest.mark.parametrize(("q", "sigma"), [(0.24, 0.7), (0.01, 3.0), (0.5, 1.0)])
def test_the_fractional_series_does_not_depend_on_how_many_terms_a_block_holds(q, sigma, block):
    """``block`` only sets how many terms of every order are summed at a time: with blocks of 3
    or 7 terms every order's series runs over many blocks, each carrying the last one's sums and
    terms, and gives dp-accounting's log A_alpha, term by term as it sums it."""
    alphas = ORDERS[ORDERS != np.floor(ORDERS)]
    np.testing.assert_allclose(_log_a_frac(q, sigma, alphas, block=block), _exact_log_a_frac(q, sigma),
                               rtol=1e-12, atol=1e-15)


@functools.cache
def _exact_log_a_frac(q: float, sigma: float) -> np.ndarray:
    with quiet_accountant():
        return np.array([dp_rdp._compute_log_a_frac(q, sigma, float(a)) for a in ORDERS[ORDERS != np.floor(ORDERS)]])


def test_the_plain_gaussian_is_alpha_over_two_sigma_squared():
    np.testing.assert_array_equal(sampled_gaussian_rdp(1.0, 2.0), ORDERS / 8.0)


def _counted(f):
    calls = []

    def counted(sigma):
        calls.append(sigma)
        return f(sigma)

    return counted, calls


Q, STEPS, DELTA, TARGET = 64 / 2000, 3 * 32, 1e-5, 2.0


@functools.cache
def _exact(sigma: float) -> float:
    return _dp_accounting_eps(Q, sigma, STEPS, DELTA)


@functools.lru_cache(maxsize=1)
def _unguided_search() -> tuple[float, int]:
    """The search with dp-accounting alone: its answer and how many sigmas it evaluated."""
    counted, calls = _counted(_exact)
    return _smallest_sigma(counted, TARGET), len(set(calls))


def test_a_right_guide_gives_the_unguided_answer_with_two_accountant_calls():
    guided, calls = _counted(_exact)
    guide = lambda s: epsilon_from_rdp(STEPS * sampled_gaussian_rdp(Q, s), DELTA)  # noqa: E731
    answer, unguided_calls = _unguided_search()
    assert _smallest_sigma(guided, TARGET, guide) == answer
    # the certificate (both ends of the bracket) and nothing else: the guide was 1e-6 clear of
    # the target at every point of this search
    assert len(set(calls)) == 2 and unguided_calls >= 10


@pytest.mark.parametrize("wrong", [0.5, 2.0, "nan"])
def test_a_wrong_guide_still_gives_the_accountants_answer(wrong, caplog):
    guide = (lambda s: math.nan) if wrong == "nan" else (lambda s: wrong * _exact(s))
    with caplog.at_level(logging.WARNING, logger="fairdp"):
        assert _smallest_sigma(_exact, TARGET, guide) == _unguided_search()[0]
    assert wrong == "nan" or "misled" in caplog.text  # a nan guide decides nothing: no bracket to fail


def test_calibration_returns_a_certified_bracket():
    """The calibrated sigma meets the target by dp-accounting itself; a sigma 0.1% smaller does not."""
    sigma = calibrate_dpsgd_sigma(3.0, 1e-5, 128, 2000, 3)
    steps = 3 * -(-2000 // 128)
    assert _dp_accounting_eps(128 / 2000, sigma, steps, 1e-5) <= 3.0
    assert _dp_accounting_eps(128 / 2000, sigma / 1.001, steps, 1e-5) > 3.0
    assert dpsgd_epsilon(sigma, 128, 2000, 3, 1e-5) == _dp_accounting_eps(128 / 2000, sigma, steps, 1e-5)


def test_the_eps_of_a_curve_is_dp_accountings_at_its_edge_cases():
    """An order of 1.01 or below gives no bound (here it would have given eps 0), and a divergence
    whose KL bound delta^2 + expm1(-rdp) is exactly 0 (not above it) is not bounded by 0: both
    as dp-accounting's compute_epsilon, called directly."""
    orders, rdp = np.array([1.01, 2.0]), np.array([4.0, 4.0])
    assert epsilon_from_rdp(rdp, 0.99, orders) == pytest.approx(dp_rdp.compute_epsilon(orders, rdp, 0.99)[0], rel=1e-12)
    assert epsilon_from_rdp(rdp, 0.99, orders) > 2.0
    tie = 1.0000000000500001e-10  # 1e-5^2 + expm1(-tie) == 0 exactly in float64
    assert 1e-5**2 + math.expm1(-tie) == 0.0
    curve = np.full(ORDERS.shape, tie)
    expected = dp_rdp.compute_epsilon(ORDERS, curve, 1e-5)[0]
    assert expected > 0 and epsilon_from_rdp(curve, 1e-5) == pytest.approx(expected, rel=1e-12)
