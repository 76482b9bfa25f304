"""RDP accounting of PF-LD and DP-SGD: published values, dp-accounting called directly, composition,
monotonicity, calibration, inputs."""

from __future__ import annotations

import math

import dp_accounting
import pytest
from dp_accounting import (
    ComposedDpEvent,
    GaussianDpEvent,
    NeighboringRelation,
    PoissonSampledDpEvent,
    SelfComposedDpEvent,
)
from dp_accounting.rdp import RdpAccountant

from fairdp.errors import InputError
from fairdp.privacy import (
    calibrate_dpsgd_sigma,
    calibrate_pfld_sigmas,
    dpsgd_epsilon,
    dpsgd_event,
    gaussian_epsilon,
    pfld_epsilon,
    pfld_event,
)
from fairdp.privacy._accounting import PFLD_CLIP_DUAL, PFLD_CLIP_PRIMAL, PFLD_EPSILON
from fairdp.privacy._shared import PFLD_DELTA


@pytest.mark.parametrize(
    ("n", "batch_size", "sigma", "epochs", "delta", "expected"),
    [
        # tensorflow/privacy, tensorflow_privacy/privacy/analysis/compute_dp_sgd_privacy_test.py,
        # test_compute_dp_sgd_privacy 'Test0' and 'Test1' (steps = ceil(epochs * n / batch_size)).
        (60000, 150, 1.3, 15, 1e-5, 0.7242234026109595),
        (100000, 100, 1.0, 30, 1e-7, 1.4154988495444842),
    ],
)
def test_dp_sgd_matches_tf_privacy(n, batch_size, sigma, epochs, delta, expected):
    steps = math.ceil(epochs * n / batch_size)
    assert gaussian_epsilon(sigma, steps, batch_size / n, delta) == pytest.approx(
        expected, rel=1e-9
    )


def test_gaussian_matches_dp_accounting():
    # dp_accounting/rdp/rdp_privacy_accountant_test.py, test_compute_epsilon_delta_gaussian:
    # multiplier 4.530877117 is exactly (1, 1e-6)-DP on a fine order grid; the default grid
    # used here is within 3e-7 of it.
    assert gaussian_epsilon(4.530877117, 1, 1.0, 1e-6) == pytest.approx(1.0, abs=1e-6)


def test_mnist_tutorial_2_92_is_the_old_conversion():
    """tensorflow/privacy tutorials/README.md: eps = 2.92 at delta = 1e-5 for DP-SGD on MNIST.

    Run of tutorials/mnist_dpsgd_tutorial.py: noise multiplier 1.12 (not 1.1), batch 256 of
    60000, 60 epochs of 60000 // 256 steps, orders 1.1..10.9 and 12..63, converted with
    Mironov 2017 Prop. 3. The same RDP curve gives 2.92 under that conversion; dp-accounting's
    tighter one (Canonne et al. 2020, Prop. 12) gives 2.5165, which is what we report.
    """
    q, sigma, steps, delta = 256 / 60000, 1.12, 60 * (60000 // 256), 1e-5
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps
    )
    old = math.inf
    for a in [1 + x / 10 for x in range(1, 100)] + list(range(12, 64)):
        accountant = dp_accounting.rdp.RdpAccountant([a])
        tight = accountant.compose(event).get_epsilon(delta)
        # Prop. 12 is rdp + log1p(-1/a) - log(delta a)/(a-1); Prop. 3 is rdp - log(delta)/(a-1).
        old = min(old, tight - math.log1p(-1 / a) + math.log(a) / (a - 1))
    assert round(old, 2) == 2.92
    eps = gaussian_epsilon(sigma, steps, q, delta)
    assert eps == pytest.approx(2.5164624454431204, rel=1e-9)
    assert eps < old


def test_pfld_with_negligible_dual_noise_is_dp_sgd():
    # Test0 above: 60000 / 150 = 400 steps per epoch, so both step counts agree.
    eps = pfld_epsilon(1.3, 1e6, 150, 60000, 15, 1e-5)
    assert eps == pytest.approx(0.7242234026109595, rel=1e-9)


@pytest.mark.parametrize(("n", "batch_size"), [(1000, 300), (997, 64), (5000, 5000)])
def test_pfld_composes_both_steps(n, batch_size):
    epochs, delta, sp, sd = 7, 1e-5, 1.1, 4.0
    steps = epochs * math.ceil(n / batch_size)  # the last partial batch is a step
    primal = gaussian_epsilon(sp, steps, batch_size / n, delta)
    dual = gaussian_epsilon(sd, epochs, 1.0, delta)
    assert pfld_epsilon(sp, 1e6, batch_size, n, epochs, delta) == pytest.approx(primal, rel=1e-6)
    # Looser: at huge sigma the accountant's fractional-order series for the sampled
    # Gaussian bottoms out near 1e-7 per step instead of q^2 a / sigma^2 (conservative).
    assert pfld_epsilon(1e6, sd, batch_size, n, epochs, delta) == pytest.approx(dual, rel=1e-5)
    both = pfld_epsilon(sp, sd, batch_size, n, epochs, delta)
    assert max(primal, dual) < both < primal + dual


@pytest.mark.parametrize(
    ("sigma_primal", "sigma_dual"), [(0, 1.0), (None, 1.0), (1.0, 0), (1.0, None)]
)
def test_no_noise_is_not_private(sigma_primal, sigma_dual):
    assert pfld_epsilon(sigma_primal, sigma_dual, 64, 1000, 3, 1e-5) == math.inf


def _strictly_decreasing(values: list[float]) -> bool:
    return all(a > b for a, b in zip(values, values[1:]))


SIGMAS = [0.5, 0.8, 1.0, 1.5, 2.5, 5.0, 20.0]


def test_epsilon_monotone():
    base = dict(sigma_primal=1.0, sigma_dual=3.0, batch_size=64, n=10000, epochs=10, delta=1e-5)

    def eps(**change):
        return pfld_epsilon(**{**base, **change})

    assert _strictly_decreasing([eps(sigma_primal=s) for s in SIGMAS])
    assert _strictly_decreasing([eps(sigma_dual=s) for s in SIGMAS])
    assert _strictly_decreasing([eps(epochs=t) for t in [30, 20, 10, 5, 2, 1]])
    assert _strictly_decreasing([eps(batch_size=b) for b in [2048, 1000, 512, 256, 64, 16]])
    assert _strictly_decreasing([eps(delta=d) for d in [1e-9, 1e-7, 1e-5, 1e-3]])


RUNS = [(1000, 32, 5), (30000, 64, 20), (45000, 256, 50)]  # (n, batch_size, epochs)


@pytest.mark.parametrize("target", [0.1, 0.3, PFLD_EPSILON, 3.0, 10.0])
@pytest.mark.parametrize(("n", "batch_size", "epochs"), RUNS)
def test_calibration_meets_target(target, n, batch_size, epochs):
    sp, sd = calibrate_pfld_sigmas(target, PFLD_DELTA, batch_size, n, epochs)
    eps = pfld_epsilon(sp, sd, batch_size, n, epochs, PFLD_DELTA)
    assert 0.99 * target <= eps <= target
    dual = gaussian_epsilon(sd, epochs, 1.0, PFLD_DELTA)
    assert 0.99 * 0.1 * target <= dual <= 0.1 * target


@pytest.mark.parametrize("dual_share", [0.02, 0.5, 0.9])
def test_calibration_dual_share(dual_share):
    n, batch_size, epochs, delta = 20000, 128, 15, 1e-6
    sp, sd = calibrate_pfld_sigmas(2.0, delta, batch_size, n, epochs, dual_share=dual_share)
    assert 0.99 * 2.0 <= pfld_epsilon(sp, sd, batch_size, n, epochs, delta) <= 2.0
    dual = gaussian_epsilon(sd, epochs, 1.0, delta)
    assert 0.99 * dual_share * 2.0 <= dual <= dual_share * 2.0


def test_larger_dual_share_means_less_dual_noise():
    sigmas = [calibrate_pfld_sigmas(1.0, 1e-5, 64, 5000, 10, dual_share=s) for s in (0.1, 0.3)]
    assert sigmas[1][1] < sigmas[0][1] and sigmas[1][0] > sigmas[0][0]


GOOD = dict(sigma_primal=1.0, sigma_dual=1.0, batch_size=64, n=1000, epochs=3, delta=1e-5)


@pytest.mark.parametrize(
    ("change", "name"),
    [
        (dict(sigma_primal=-0.1), "sigma_primal"),
        (dict(sigma_primal=math.inf), "sigma_primal"),
        (dict(sigma_dual=math.nan), "sigma_dual"),
        (dict(sigma_dual="1"), "sigma_dual"),
        (dict(batch_size=1001), "batch_size"),
        (dict(batch_size=0), "batch_size"),
        (dict(batch_size=64.0), "batch_size"),
        (dict(n=0), "n"),
        (dict(epochs=0), "epochs"),
        (dict(epochs=True), "epochs"),
        (dict(delta=0.0), "delta"),
        (dict(delta=1.0), "delta"),
    ],
)
def test_pfld_epsilon_bad_input(change, name):
    with pytest.raises(InputError, match=rf"^{name} "):
        pfld_epsilon(**{**GOOD, **change})


@pytest.mark.parametrize(
    ("change", "name"),
    [
        (dict(target_eps=0.0), "target_eps"),
        (dict(target_eps=math.inf), "target_eps"),
        (dict(dual_share=0.0), "dual_share"),
        (dict(dual_share=1.0), "dual_share"),
        (dict(batch_size=2000), "batch_size"),
        (dict(delta=-1e-5), "delta"),
    ],
)
def test_calibrate_bad_input(change, name):
    args = dict(target_eps=1.0, delta=1e-5, batch_size=64, n=1000, epochs=3, dual_share=0.1)
    with pytest.raises(InputError, match=rf"^{name} "):
        calibrate_pfld_sigmas(**{**args, **change})


@pytest.mark.parametrize(
    ("args", "name"),
    [((1.0, 0, 0.5, 1e-5), "steps"), ((1.0, 10, 0.0, 1e-5), "q"), ((1.0, 10, 1.5, 1e-5), "q")],
)
def test_gaussian_epsilon_bad_input(args, name):
    with pytest.raises(InputError, match=rf"^{name} "):
        gaussian_epsilon(*args)


# --- DP-SGD's entry points, pinned against dp-accounting called directly (issue 40) -------------

def _direct(event, delta, relation=NeighboringRelation.ADD_OR_REMOVE_ONE):
    return RdpAccountant(neighboring_relation=relation).compose(event).get_epsilon(delta)


def _sgm(sigma, q, steps):
    return SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), steps)


def test_pfld_paper_defaults():
    """Tran et al., "Experimental Analysis": eps = 1, delta = 1e-5, C_p = 10, C_d = 5."""
    assert (PFLD_EPSILON, PFLD_DELTA, PFLD_CLIP_PRIMAL, PFLD_CLIP_DUAL) == (1.0, 1e-5, 10.0, 5.0)


def test_dpsgd_epsilon_matches_tf_privacy():
    # compute_dp_sgd_privacy_test.py 'Test0' again, through DP-SGD's own entry point
    assert dpsgd_epsilon(1.3, 150, 60000, 15, 1e-5) == pytest.approx(0.7242234026109595, rel=1e-9)


def test_dpsgd_counts_the_last_partial_batch_of_every_epoch():
    """997 rows in batches of 64 are 16 steps an epoch (the 16th has 37 rows): 7 epochs are 112
    sampled Gaussian steps at q = 64/997, not ceil(7 * 997 / 64) = 110 nor 7 * 15 = 105."""
    sigma, delta = 1.1, 1e-5
    eps = dpsgd_epsilon(sigma, 64, 997, 7, delta)
    assert eps == pytest.approx(_direct(_sgm(sigma, 64 / 997, 112), delta), rel=1e-12)
    for steps in (105, 110, 113):
        assert eps != pytest.approx(_direct(_sgm(sigma, 64 / 997, steps), delta), rel=1e-6)
    assert dpsgd_event(sigma, 64, 997, 7) == _sgm(sigma, 64 / 997, 112)
    assert dpsgd_event(None, 64, 997, 7) == _sgm(0.0, 64 / 997, 112)
    assert dpsgd_epsilon(0, 64, 997, 7, delta) == math.inf


def test_pfld_event_is_theorem_3s_composition():
    assert pfld_event(1.1, 4.0, 64, 997, 7) == ComposedDpEvent([
        _sgm(1.1, 64 / 997, 112), SelfComposedDpEvent(GaussianDpEvent(4.0), 7)])
    eps = pfld_epsilon(1.1, 4.0, 64, 997, 7, 1e-5)
    assert eps == pytest.approx(_direct(pfld_event(1.1, 4.0, 64, 997, 7), 1e-5,
                                        NeighboringRelation.REPLACE_SPECIAL), rel=1e-12)


def _is_smallest(sigma, epsilon_of, target):
    """sigma meets the target and one 2e-3 smaller does not: the smallest to 1e-3, rounded up."""
    return epsilon_of(sigma) <= target < epsilon_of(sigma / 1.002)


@pytest.mark.parametrize("target", [0.3, 2.0, 30.0])  # sigma above 1, about 1, below 0.5
def test_calibrate_dpsgd_sigma_is_the_smallest_multiplier(target):
    n, batch_size, epochs, delta = 1500, 300, 2, 1e-5
    sigma = calibrate_dpsgd_sigma(target, delta, batch_size, n, epochs)
    assert _is_smallest(sigma, lambda s: _direct(_sgm(s, batch_size / n, 10), delta), target)


def test_calibrate_pfld_sigmas_are_the_smallest_multipliers():
    n, batch_size, epochs, delta, target = 2000, 250, 3, 1e-5, 1.0
    sp, sd = calibrate_pfld_sigmas(target, delta, batch_size, n, epochs)
    dual = SelfComposedDpEvent(GaussianDpEvent(sd), epochs)
    assert _is_smallest(sd, lambda s: _direct(SelfComposedDpEvent(GaussianDpEvent(s), epochs), delta), 0.1 * target)
    assert _is_smallest(sp, lambda s: _direct(ComposedDpEvent([_sgm(s, batch_size / n, 24), dual]), delta,
                                              NeighboringRelation.REPLACE_SPECIAL), target)


def test_accounting_leaves_absl_verbosity_as_it_was():
    from absl import logging as absl_logging

    before = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.INFO)
    try:
        gaussian_epsilon(1.0, 10, 0.5, 1e-5)
        assert absl_logging.get_verbosity() == absl_logging.INFO
    finally:
        absl_logging.set_verbosity(before)


@pytest.mark.parametrize("bad", [True, "1.0", math.nan])
def test_noise_and_rates_must_be_numbers(bad):
    with pytest.raises(InputError, match=r"^sigma must be a number"):
        gaussian_epsilon(bad, 10, 0.5, 1e-5)
    with pytest.raises(InputError, match=r"^q must be a number"):
        gaussian_epsilon(1.0, 10, bad, 1e-5)


@pytest.mark.parametrize(("target", "sigma"), [
    (0.3, 8.286605548815658),  # above 1: the bracket doubles
    (2.0, 1.8945759815869656),  # between 1 and 2
    (30.0, 0.41171746742537635),  # below 0.5: the bracket halves
])
def test_calibrated_dpsgd_sigma_is_reproducible(target, sigma):
    """The noise multiplier of every stored DP-SGD row: a change to the search (its bracket, its
    steps, its precision) changes the noise of every private run, so rows of two fairdp versions
    would no longer be bit-equal. (dp-accounting is pinned to 0.6.x.) ``__wrapped__``: the search
    itself, past the per-process cache that other tests fill with the same arguments."""
    assert calibrate_dpsgd_sigma.__wrapped__(target, 1e-5, 300, 1500, 2) == pytest.approx(sigma, rel=1e-12)


def test_calibrated_pfld_sigmas_are_reproducible():
    assert calibrate_pfld_sigmas.__wrapped__(1.0, 1e-5, 250, 2000, 3) == pytest.approx(
        (2.9139351088028884, 58.88722614320489), rel=1e-12)


@pytest.mark.parametrize("sigma", [1.0, 0.5, 0.25, 2 ** -0.5])
def test_a_target_met_exactly_returns_that_sigma(sigma):
    """When the target is exactly the eps of a multiplier the search visits, that multiplier is
    the smallest that meets it (eps <= target, not <), and is returned as it is."""
    target = dpsgd_epsilon(sigma, 300, 1500, 2, 1e-5)
    assert calibrate_dpsgd_sigma.__wrapped__(target, 1e-5, 300, 1500, 2) == sigma


def test_a_one_row_dataset_is_the_gaussian_mechanism():
    """n = 1, batch_size = 1: every step uses the whole data (q = 1)."""
    assert dpsgd_epsilon(1.0, 1, 1, 1, 1e-5) == gaussian_epsilon(1.0, 1, 1.0, 1e-5)
    assert pfld_epsilon(1.0, 3.0, 1, 1, 2, 1e-5) == pytest.approx(
        _direct(ComposedDpEvent([_sgm(1.0, 1.0, 2), SelfComposedDpEvent(GaussianDpEvent(3.0), 2)]), 1e-5,
                NeighboringRelation.REPLACE_SPECIAL), rel=1e-12)


@pytest.mark.parametrize(("change", "name"), [
    (dict(target_eps=0.0), "target_eps"), (dict(target_eps=math.inf), "target_eps"),
    (dict(target_eps=-1.0), "target_eps"), (dict(n=0), "n"), (dict(batch_size=2000), "batch_size"),
])
def test_calibrate_dpsgd_bad_input(change, name):
    args = dict(target_eps=1.0, delta=1e-5, batch_size=64, n=1000, epochs=3)
    with pytest.raises(InputError, match=rf"^{name} "):
        calibrate_dpsgd_sigma(**{**args, **change})
