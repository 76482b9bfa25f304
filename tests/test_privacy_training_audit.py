"""One-run auditing (Steinke, Nasr and Jagielski 2023): the bound against independent
computations, and the audit of a trained DP-SGD or PF-LD config, correct and with planted bugs;
PF-LD's dual release audited on its own.

The bound's p-value is checked against a computation written from Theorems 1 and 3 alone (exact
binomial sums with math.comb, the max over every i in 1..m); its coverage on the mechanism
where it is tight (eps-randomized response of each canary's sign, plus an exact reveal with
probability delta for (eps, delta)) is computed exactly over the binomial law of the number of
correct guesses, and its p-value against a Monte Carlo simulation of that mechanism. The
distinguishing game's (eps, delta) bound is checked on every event of a Gaussian mechanism
against its exact privacy profile.

The white-box gradient canaries are checked part by part (their places, how a sampled canary
enters the step, the auditor's reference against the step's own update), then as a whole: each
planted bug (noise x0.2, noise on the first layer only, clipping off, PF-LD's dual release
without noise) is refuted, and the correct mechanisms are not, at several seeds.
"""

from __future__ import annotations

import json
import math
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairdp.errors import InputError
from fairdp.privacy import training_audit
from fairdp.privacy.training_audit import (
    distinguishing_ceiling,
    epsilon_ceiling,
    event_epsilon_lower_bound,
    guess_accuracy,
    one_run_epsilon_lower_bound,
    one_run_p_value,
)

from .conftest import assert_input_error, run_cli, run_main


def _tails(r: int, q: float) -> list[float]:
    """P[Binomial(r, q) >= w] for w = 0..r + 1, by exact summation of log-space terms (no scipy)."""
    if q >= 1.0:
        pmf = [0.0] * r + [1.0]
    else:
        pmf = [math.exp(math.log(math.comb(r, w)) + w * math.log(q) + (r - w) * math.log1p(-q)) for w in range(r + 1)]
    tails = [0.0] * (r + 2)
    for w in range(r, -1, -1):
        tails[w] = tails[w + 1] + pmf[w]
    return tails


def _theorem_p_value(v: int, r: int, m: int, eps: float, delta: float) -> float:
    """Theorem 3 as stated: f(v) + 2 m delta max_{i in 1..m} (f(v - i) - f(v)) / i, capped at 1,
    with f(w) = P[Binomial(r, e^eps / (1 + e^eps)) >= w] (1 for w <= 0)."""
    tails = _tails(r, math.exp(eps) / (1 + math.exp(eps)))

    def f(w: int) -> float:
        return 1.0 if w <= 0 else tails[w]

    alpha = max((f(v - i) - f(v)) / i for i in range(1, m + 1))
    return min(f(v) + 2 * m * delta * alpha, 1.0)


@pytest.mark.parametrize("v,r,m", [(0, 10, 10), (1, 1, 5), (7, 10, 40), (10, 10, 40), (35, 60, 100),
                                   (60, 60, 100), (48, 100, 150), (150, 200, 400)])
@pytest.mark.parametrize("eps,delta", [(0.0, 0.0), (0.5, 0.0), (1.0, 1e-5), (2.0, 1e-3), (4.0, 0.01)])
def test_p_value_is_the_theorem_computed_independently(v, r, m, eps, delta):
    got = one_run_p_value(v, r, m, eps, delta)
    assert got == pytest.approx(_theorem_p_value(v, r, m, eps, delta), rel=1e-9, abs=1e-15)


def test_p_value_at_eps_zero_is_the_fair_coin_tail_and_the_pure_case_is_a_binomial_tail():
    assert one_run_p_value(8, 10, 10, 0.0) == pytest.approx(sum(math.comb(10, w) for w in (8, 9, 10)) / 2 ** 10)
    q = guess_accuracy(1.0)
    assert q == pytest.approx(math.e / (1 + math.e))
    assert one_run_p_value(20, 20, 100, 1.0) == pytest.approx(q ** 20)


def _randomized_response_correct(rng, trials: int, r: int, eps: float, delta: float) -> np.ndarray:
    """W over ``trials`` runs of the mechanism that reports each canary's sign exactly with
    probability delta, else by eps-randomized response: (eps, delta)-DP in each sign, and the
    auditor that guesses r reports is right on each with chance delta + (1 - delta) q."""
    signs = rng.choice([-1, 1], size=(trials, r))
    reveal = rng.random((trials, r)) < delta
    keep = rng.random((trials, r)) < guess_accuracy(eps)
    out = np.where(reveal | keep, signs, -signs)
    return (out == signs).sum(axis=1)


def test_p_value_is_tight_on_randomized_response_by_monte_carlo():
    """delta = 0: W is exactly Binomial(r, q), so the bound is the simulated tail (Theorem 1)."""
    rng = np.random.default_rng(0)
    r, eps, trials = 50, 1.0, 200_000
    w = _randomized_response_correct(rng, trials, r, eps, 0.0)
    for v in (36, 40, 44):
        empirical = (w >= v).mean()
        exact = one_run_p_value(v, r, r, eps, 0.0)
        assert abs(empirical - exact) < 4 * math.sqrt(exact * (1 - exact) / trials) + 1e-4, (v, empirical, exact)


def test_p_value_bounds_an_eps_delta_mechanism_by_monte_carlo():
    rng = np.random.default_rng(1)
    r, m, eps, delta, trials = 40, 40, 1.0, 0.01, 200_000
    w = _randomized_response_correct(rng, trials, r, eps, delta)
    for v in (30, 33, 36):
        assert (w >= v).mean() <= one_run_p_value(v, r, m, eps, delta) + 3 * math.sqrt(0.25 / trials)


@pytest.mark.parametrize("eps_true,delta", [(0.5, 0.0), (1.0, 0.0), (2.0, 0.0), (1.0, 1e-3), (2.0, 0.01)])
@pytest.mark.parametrize("r", [20, 100, 300])
def test_the_bound_exceeds_the_true_eps_with_probability_at_most_beta(eps_true, delta, r):
    """Exact coverage: on the (eps, delta) mechanism above, W ~ Binomial(r, delta + (1 - delta) q);
    summing its law over the outcomes whose bound exceeds eps_true gives at most beta."""
    beta, m = 0.05, r
    p = delta + (1 - delta) * guess_accuracy(eps_true)
    wrong = 0.0
    for v in range(r, -1, -1):  # the bound grows with v (tested below): stop at the first v it clears
        if one_run_epsilon_lower_bound(v, r, m, beta, delta) <= eps_true:
            break
        wrong += math.comb(r, v) * p ** v * (1 - p) ** (r - v)
    assert wrong <= beta


@pytest.mark.parametrize("v,r,m,delta", [(10, 10, 100, 0.0), (80, 100, 1000, 1e-5), (150, 200, 1000, 1e-5),
                                         (200, 200, 1000, 1e-5), (600, 600, 1000, 1e-5), (55, 60, 60, 1e-3)])
def test_the_search_finds_the_largest_refuted_eps(v, r, m, delta):
    beta = 0.05
    eps = one_run_epsilon_lower_bound(v, r, m, beta, delta)
    assert eps > 0
    assert one_run_p_value(v, r, m, eps, delta) < beta
    assert one_run_p_value(v, r, m, eps + 1e-6, delta) >= beta
    # brute force on a grid, with the independent p-value: the largest grid eps refuted
    grid = np.arange(max(0.0, round(eps, 2) - 0.3), eps + 0.3, 0.01)
    refuted = [e for e in grid if _theorem_p_value(v, r, m, float(e), delta) < beta]
    assert refuted and eps - 0.01 <= max(refuted) <= eps


def test_the_bound_grows_with_the_correct_guesses_and_stops_at_the_ceiling():
    bounds = [one_run_epsilon_lower_bound(v, 200, 1000, 0.05, 1e-5) for v in range(0, 201, 10)]
    assert bounds[:10] == [0.0] * 10  # at most half right: nothing refuted
    assert all(a <= b for a, b in zip(bounds, bounds[1:]))
    assert bounds[-1] == epsilon_ceiling(200, 1000, 0.05, 1e-5)
    # all r right at delta = 0: q^r = beta, eps = logit(beta^(1/r)) ~ ln(r / ln(1/beta))
    ceiling = epsilon_ceiling(100, 100, 0.05)
    q = 0.05 ** (1 / 100)
    assert ceiling == pytest.approx(math.log(q / (1 - q)), abs=1e-6)
    assert epsilon_ceiling(1000, 1000, 0.05) > ceiling > epsilon_ceiling(10, 10, 0.05)
    # delta costs: the same outcome refutes less
    assert one_run_epsilon_lower_bound(180, 200, 1000, 0.05, 1e-4) < one_run_epsilon_lower_bound(180, 200, 1000, 0.05)


@pytest.mark.parametrize("kwargs,name", [
    (dict(correct=5, guesses=4, m=10), "correct"),
    (dict(correct=1, guesses=11, m=10), "guesses"),
    (dict(correct=1.5, guesses=4, m=10), "correct"),
    (dict(correct=1, guesses=4, m=10, beta=0.0), "beta"),
    (dict(correct=1, guesses=4, m=10, beta=1.0), "beta"),
    (dict(correct=1, guesses=4, m=10, delta=-1e-5), "delta"),
    (dict(correct=1, guesses=4, m=10, delta=True), "delta"),
])
def test_bad_counts_are_refused(kwargs, name):
    with pytest.raises(InputError, match=name):
        one_run_epsilon_lower_bound(**kwargs)


@pytest.mark.parametrize("function,args,name", [
    (one_run_p_value, (0, 0, 0, 1.0), "m"),
    (one_run_p_value, (1, 2, 3, 1.0, 1.5), "delta"),
    (one_run_p_value, (1, 2, 3, True), "eps"),
    (one_run_p_value, (1, 2, 3, -0.5), "eps"),
    (one_run_p_value, (1, 2, 3, math.nan), "eps"),
    (one_run_p_value, (1, 2, 3, "1"), "eps"),
    (one_run_epsilon_lower_bound, (1, 2, 3, True), "beta"),
    (one_run_epsilon_lower_bound, (1, 2, 3, math.nan), "beta"),
    (one_run_epsilon_lower_bound, (1, 2, 3, "0.05"), "beta"),
    (event_epsilon_lower_bound, (True, 0.5), "p_lower"),
    (event_epsilon_lower_bound, (0.5, -0.1), "p_upper"),
    (event_epsilon_lower_bound, (0.5, 0.1, 2.0), "delta"),
    (distinguishing_ceiling, (True,), "held_out"),
    (distinguishing_ceiling, (0,), "held_out"),
    (distinguishing_ceiling, (-3,), "held_out"),
    (distinguishing_ceiling, (10.0,), "held_out"),
    (distinguishing_ceiling, (10, True), "confidence"),
    (distinguishing_ceiling, (10, 0), "confidence"),
    (distinguishing_ceiling, (10, 1), "confidence"),
    (distinguishing_ceiling, (10, 1.5), "confidence"),
    (distinguishing_ceiling, (10, -0.5), "confidence"),
    (distinguishing_ceiling, (10, "0.95"), "confidence"),
])
def test_bad_arguments_are_refused_naming_the_argument(function, args, name):
    with pytest.raises(InputError, match=name):
        function(*args)


def test_arguments_at_the_ends_of_their_ranges_are_accepted():
    assert one_run_p_value(1, 1, 1, 0.0) == 0.5  # one canary is enough
    assert one_run_p_value(5, 10, 10, 0.5, 1.0) == 1.0  # delta = 1 allows anything
    assert one_run_p_value(5, 10, 10, 0.5, 1) == one_run_p_value(5, 10, 10, 0.5, 1.0)
    assert one_run_epsilon_lower_bound(10, 10, 10, 0.999999) > 0
    assert event_epsilon_lower_bound(1.0, 0.5) == pytest.approx(math.log(2))
    assert event_epsilon_lower_bound(np.float64(1.0), 0.25) == pytest.approx(math.log(4))
    assert event_epsilon_lower_bound(0.5, 1.0) == 0.0
    assert event_epsilon_lower_bound(0.5, 0.0) == math.inf  # nothing of x' in the event: no eps holds
    assert distinguishing_ceiling(1) == 0.0  # one sample per input distinguishes nothing at 95%
    assert distinguishing_ceiling(np.int64(2000), 0.5) > distinguishing_ceiling(2000, 0.95)


def test_the_default_significance_is_five_percent():
    assert one_run_epsilon_lower_bound(90, 100, 100) == one_run_epsilon_lower_bound(90, 100, 100, 0.05)
    assert epsilon_ceiling(100, 100) == epsilon_ceiling(100, 100, 0.05)
    assert distinguishing_ceiling(500) == distinguishing_ceiling(500, 0.95)


@settings(max_examples=200, deadline=None)
@given(eps=st.one_of(st.floats(-1e6, 1e6), st.sampled_from([math.inf, -math.inf, 36.5, 37.0, 709.9, 710.0])))
def test_guess_accuracy_is_the_logistic_function_without_overflow(eps):
    """e^eps / (1 + e^eps), computed from whichever side does not overflow."""
    expected = 1 / (1 + math.exp(-eps)) if eps >= 0 else math.exp(eps) / (1 + math.exp(eps))
    assert guess_accuracy(eps) == pytest.approx(expected, rel=1e-15, abs=1e-300)


def _step_p_value(threshold: float, above: float):
    """A stand-in p-value: 0.01 below ``threshold``, ``above`` from it on (monotone in eps)."""
    return lambda v, r, m, eps, delta: 0.01 if eps < threshold else above


@pytest.mark.parametrize("threshold", [0.3, 0.75, 1.0, 5.0, 33.3])
def test_the_search_brackets_the_refuted_eps_to_its_tolerance(monkeypatch, threshold):
    """The doubling-then-bisection search, on a p-value that crosses beta at a known eps: the
    result is refuted and within EPS_TOLERANCE of the crossing."""
    monkeypatch.setattr(training_audit, "one_run_p_value", _step_p_value(threshold, 0.5))
    eps = one_run_epsilon_lower_bound(10, 10, 10, 0.05)
    assert threshold - training_audit.EPS_TOLERANCE <= eps < threshold


def test_a_p_value_equal_to_beta_is_not_a_refutation(monkeypatch):
    """Refuted means p < beta: a p-value of exactly beta from eps = 2 on stops the search at 2."""
    monkeypatch.setattr(training_audit, "one_run_p_value", _step_p_value(2.0, 0.05))
    assert 2.0 - training_audit.EPS_TOLERANCE <= one_run_epsilon_lower_bound(10, 10, 10, 0.05) < 2.0


def test_the_doubling_stops_at_its_cap_on_a_p_value_that_refutes_everything(monkeypatch):
    """Unreachable with the real p-value (see _EPS_CAP); a broken one must not loop forever."""
    monkeypatch.setattr(training_audit, "one_run_p_value", lambda *args: 0.0)
    assert one_run_epsilon_lower_bound(10, 10, 10, 0.05) == 8192.0


# -- the distinguishing game's (eps, delta) bound -------------------------------------------------


def _gaussian_delta(eps: float, mu: float) -> float:
    """The exact delta(eps) of the Gaussian mechanism with mu = sensitivity / sigma (Balle and
    Wang 2018): Phi(-eps / mu + mu / 2) - e^eps Phi(-eps / mu - mu / 2)."""
    phi = NormalDist().cdf
    return phi(-eps / mu + mu / 2) - math.exp(eps) * phi(-eps / mu - mu / 2)


@settings(max_examples=200, deadline=None)
@given(mu=st.floats(0.05, 5.0), threshold=st.floats(-6.0, 8.0), eps=st.floats(0.0, 6.0))
def test_an_event_of_a_gaussian_mechanism_never_refutes_its_exact_profile(mu, threshold, eps):
    """Every event {y >= t} of N(mu, 1) against N(0, 1), with its exact probabilities, gives a
    bound at most eps at the mechanism's exact delta(eps): the bound is sound for (eps, delta)."""
    phi = NormalDist().cdf
    p_x, p_x_prime = 1 - phi(threshold - mu), 1 - phi(threshold)
    delta = min(max(_gaussian_delta(eps, mu), 0.0), 1.0)
    assert event_epsilon_lower_bound(p_x, p_x_prime, delta) <= eps + 1e-9


def test_the_event_bound_is_the_log_ratio_less_delta():
    assert event_epsilon_lower_bound(0.5, 0.05) == pytest.approx(math.log(10))
    assert event_epsilon_lower_bound(0.5, 0.05, 0.25) == pytest.approx(math.log(5))
    assert event_epsilon_lower_bound(0.01, 0.05) == 0.0  # the ratio favours the other input
    assert event_epsilon_lower_bound(1e-5, 1e-9, 1e-5) == 0.0  # delta covers the whole event
    with pytest.raises(InputError, match="p_upper"):
        event_epsilon_lower_bound(0.5, 1.5)


def test_the_distinguishing_ceiling_is_every_held_out_sample_on_one_side():
    # Clopper-Pearson at n of n and 0 of n, each at confidence 0.975: (0.025)^(1/n) and 1 - that
    n, beta = 2000, 0.05
    low = (beta / 2) ** (1 / n)
    assert distinguishing_ceiling(n, 1 - beta) == pytest.approx(math.log(low / (1 - low)), rel=1e-9)
    assert distinguishing_ceiling(n, 1 - beta, 1e-5) == pytest.approx(math.log((low - 1e-5) / (1 - low)), rel=1e-9)
    assert distinguishing_ceiling(4000) > distinguishing_ceiling(n) > distinguishing_ceiling(1000)


# -- the audit of a trained config -------------------------------------------------------------

AUDIT = dict(canaries=600, epochs=4, batch_size=100)
# input canaries: PF-LD's private part starts at 0 (the multipliers do) and grows with the dual
# steps: a canary's attribute shows after a few epochs
PFLD_INPUT_AUDIT = dict(AUDIT, epochs=6)
DUAL = dict(epochs=4, samples=2000)


@pytest.fixture(scope="module")
def data():
    from fairdp.data import load_dataset

    return load_dataset("synthetic", rows=2500, features=12, seed=1)


@pytest.fixture(scope="module")
def small():
    """A smaller set for the dual release audit, whose every draw reads every training row."""
    from fairdp.data import load_dataset

    return load_dataset("synthetic", rows=1000, features=12, seed=1)


def _config(method, eps=1.0, notion="dp"):
    return ({"eps": eps, "clip_primal": 1.0} if method == "dpsgd" else
            {"fairness_notion": notion, "eps": eps, "clip_primal": 1.0, "clip_dual": 1.0})


def _audit(data, method, eps=1.0, notion="dp", **kwargs):
    from fairdp.testing.training_audit import audit_training

    base = PFLD_INPUT_AUDIT if method == "pfld" and kwargs.get("canary_kind") == "input" else AUDIT
    return audit_training(method, _config(method, eps, notion), data, **{**base, **kwargs})


def _step(data, method, batch_size=100, notion="dp", model="built-in"):
    """The method's own step for one config on ``data``, as fit_pack builds it; ``model``
    "user": the study's module of the user's (``_user_study``), through a functional pack."""
    from fairdp.engine import TrainSettings
    from fairdp.engine.contract import PackContext
    from fairdp.methods import get_method

    impl = get_method(method)
    config = impl.validate_config(_config(method, notion=notion))
    settings = impl.config_settings(config, TrainSettings(epochs=4, batch_size=batch_size, config_chunk=1))
    arch = impl.default_architecture(data.name) if model == "built-in" else \
        _user_study(method).method_settings[method].architecture
    ctx = PackContext(data, [config], [impl.config_id(config)], 0, settings, arch, __import__("torch").device("cpu"))
    return impl.make_step(ctx)


USER_MODELS = {"encoder": {"factory": "models.py:residual_mlp", "width": 32, "blocks": 1},
               "classifier": "torch.nn:Linear"}
"""A module of the user's (the example residual MLP, with LayerNorm and dropout) and a linear
head: the step's per-sample chain is a functional pack."""


def _user_study(method, **train):
    """A study of one ``method`` config on the ``data`` fixture's set with ``USER_MODELS``."""
    from fairdp.study import parse_spec

    from .conftest import REPO

    grid = {k: [v] for k, v in _config(method).items()}
    return parse_spec({"name": "audit-user", "dataset": {"name": "synthetic", "rows": 2500, "features": 12, "seed": 1},
                       "seeds": [0], "train": {"epochs": 4, "batch_size": 100, **train},
                       "architecture": {"encoder": [16], "models": USER_MODELS},
                       "methods": {method: {"grid": grid}}}, base_dir=REPO / "examples")


# gradient canaries: where they sit


@pytest.mark.parametrize("m", [6, 37, 600, 1200])
def test_gradient_canaries_cover_every_parameter_group_on_coordinates_of_their_own(m):
    from fairdp.testing.training_audit import place_gradient_canaries

    shapes = [(12, 64), (64, 64), (64, 2)]
    placed = place_gradient_canaries(shapes, m, seed=3)
    assert len(placed) == m
    coords = placed.flat_index(shapes)
    assert len(set(coords.tolist())) == m  # one coordinate each
    groups = placed.group()
    assert set(groups.tolist()) == set(range(6))  # every layer's weight and bias
    sizes = [n for a, b in shapes for n in (a * b, b)]
    counts = np.bincount(groups, minlength=6)
    assert all(c <= max(s // 2, 1) for c, s in zip(counts, sizes))  # most of each group canary-free
    for layer in range(3):  # no weight canary on a unit whose bias holds one
        mine = placed.layer == layer
        assert not set(placed.unit[mine & ~placed.is_bias]) & set(placed.unit[mine & placed.is_bias])
    # in proportion to the group's size, where the caps let it
    if m == 600:
        assert counts[2] > counts[0] > counts[4] > counts[5] and counts[2] == pytest.approx(600 * 4096 / 5122, abs=2)
    np.testing.assert_array_equal(place_gradient_canaries(shapes, m, seed=3).flat_index(shapes), coords)


def test_too_many_gradient_canaries_are_refused():
    from fairdp.testing.training_audit import place_gradient_canaries

    with pytest.raises(InputError, match="canaries: at most"):
        place_gradient_canaries([(4, 4), (4, 2)], 15, seed=0)


def test_a_canary_coordinate_is_the_parameter_entry_it_names(data):
    """flat_index against the parameters themselves: a marker put at each canary's entry is
    found at its flat index of the chain's parameters flattened in order."""
    import torch

    from fairdp.testing.training_audit import place_gradient_canaries

    step = _step(data, "dpsgd")
    layers = step.model.per_sample_chain().layers
    shapes = [tuple(layer.weight.shape[1:]) for layer in layers]
    placed = place_gradient_canaries(shapes, 300, seed=1)
    marked = [torch.zeros_like(p[0]) for layer in layers for p in (layer.weight, layer.bias)]
    for i in range(300):
        tensor = marked[2 * placed.layer[i] + int(placed.is_bias[i])]
        tensor[(0 if placed.is_bias[i] else placed.column[i]), placed.unit[i]] = i + 1
    flat = torch.cat([t.reshape(-1) for t in marked]).numpy()
    np.testing.assert_array_equal(flat[placed.flat_index(shapes)], np.arange(1, 301))


# gradient canaries: how they enter the step


@pytest.mark.parametrize("model", ["built-in", "user"])
def test_the_audit_chain_adds_what_the_engine_chain_adds(data, model):
    """With no canaries and no planted bug the audit's chain gives the engine's clipped noisy
    sum, bit for bit: its rows, clipping and noise are the engine's (the hand-packed layers, or
    the functional pack of a module of the user's)."""
    import torch

    from fairdp._rng import PackStream
    from fairdp.engine import FunctionalPack
    from fairdp.testing.training_audit import _AuditChain, _chain_parameters

    for method in ("dpsgd", "pfld"):
        step = _step(data, method, model=model)
        assert isinstance(step.model.per_sample_chain(), FunctionalPack) == (model == "user")
        engine = step.model.per_sample_chain()
        audit = _AuditChain(engine, None, False)
        train = step.ctx.split("train")
        x = train.X[:64].unsqueeze(0)
        unit = torch.randn(1, 64, 2, generator=torch.Generator().manual_seed(0))
        scale, weight = torch.rand(1, 64) * 3, torch.rand(1, 64) - 0.5
        grads = []
        for chain in (engine, audit):
            gens = PackStream.from_names(["audit-chain-noise"], "cpu")  # the same draw for both
            for p in chain.parameters():
                p.grad = None
            _, trace = chain.forward_traced(x)
            chain.add_clipped(trace, unit, scale, weight, torch.tensor([0.7]), torch.tensor([0.3]), gens,
                              plain_scale=scale[:, :10])
            grads.append([p.grad.clone() for p in _chain_parameters(engine)])
        for a, b in zip(*grads):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("clipping", [True, False])
def test_a_sampled_canary_adds_a_records_clipped_gradient_on_its_coordinate(data, clipping):
    """Every canary present and sampled (q = 1), the real rows weighted 0 and no noise: the
    step's gradient is the canaries' alone, -weight * clip(N e_j) on each canary's coordinate
    (and a weight canary's 1e-6 sliver of its square on its unit's bias), N = 10 C clipped to C."""
    import torch

    from fairdp.testing.training_audit import _AuditChain, _WhiteBoxGame, place_gradient_canaries

    step = _step(data, "dpsgd")
    step.q = 1.0  # every present canary is sampled
    engine = step.model.per_sample_chain()
    shapes = [tuple(layer.weight.shape[1:]) for layer in engine.layers]
    placed = place_gradient_canaries(shapes, 100, seed=2)
    clip = 1.0 if clipping else 1e12
    game = _WhiteBoxGame("dpsgd", step, engine, placed, np.ones(100), np.zeros(100, dtype=np.int64), 10.0, seed=0)
    chain = _AuditChain(engine, game, False)
    x = step.ctx.split("train").X[:5].unsqueeze(0)
    _, trace = chain.forward_traced(x)
    chain.add_clipped(trace, torch.ones(1, 5, 2), None, torch.zeros(1, 5), torch.tensor([clip]), None, None)
    grad = torch.cat([p.grad[0].reshape(-1) for p in chain.parameters()]).double().numpy()
    weight = -1.0 / (step.q * step.n)
    norm = 1.0 if clipping else 10.0  # the clipped canary's norm
    a = 1e3
    entry = np.where(placed.is_bias, norm, norm * a / math.sqrt(a * a + 1))
    np.testing.assert_allclose(grad[placed.flat_index(shapes)], -weight * entry, rtol=1e-5)
    rest = np.delete(grad, placed.flat_index(shapes))
    sliver = norm / math.sqrt(a * a + 1) * abs(weight)
    assert np.abs(rest).max() <= 8 * sliver  # a few weight canaries' slivers on one bias at most
    assert len(game.residuals) == 1  # the step's residual, recorded once


def _noiseless_full_batch(step):
    """The step with q = 1 (its sample: every candidate row) and no noise: nothing random left."""
    import torch

    step.q = 1.0
    if hasattr(step, "sigma"):
        step.sigma = torch.zeros_like(step.sigma)
    else:
        step.sig_p = torch.zeros_like(step.sig_p)
        step.lam.fill_(0.4)
        step.sign.copy_(torch.tensor([[[1.0, -1.0], [0.0, 0.0]]]))  # kappa != 0: a private part
        step.count1.fill_(float((step.ctx.split("train").s == 1).sum()))


@pytest.mark.parametrize("model", ["built-in", "user"])
@pytest.mark.parametrize("method", ["dpsgd", "pfld"])
def test_the_reference_is_the_steps_own_update_when_nothing_is_random(data, method, model):
    """The auditor's reference is the update without noise, canaries and the private sample's
    randomness: with q = 1 and no noise the step's whole gradient, so the residual is 0; and a
    canary's push stands out of it alone (on the built-in network and on a module of the user's)."""
    import torch

    from fairdp.engine.contract import Batch
    from fairdp.testing.training_audit import (
        _AuditChain,
        _WhiteBoxGame,
        place_gradient_canaries,
        place_parameter_canaries,
    )

    step = _step(data, method, batch_size=len(data.splits["train"]), model=model)
    _noiseless_full_batch(step)
    engine = step.model.per_sample_chain()
    if model == "user":
        sizes = [p[0].numel() for _, p in engine.named_stacks()]
        placed = place_parameter_canaries(sizes, 50, seed=0)
        coords = placed.flat_index(sizes)
    else:
        shapes = [tuple(layer.weight.shape[1:]) for layer in engine.layers]
        placed = place_gradient_canaries(shapes, 50, seed=0)
        coords = placed.flat_index(shapes)
    signs = np.where(np.arange(50) < 25, 1, -1)
    game = _WhiteBoxGame(method, step, engine, placed, signs, np.zeros(50, dtype=np.int64), 10.0, seed=0)
    chain = _AuditChain(engine, game, False)
    step.model.per_sample_chain = lambda: chain
    train = step.ctx.split("train")
    rows = torch.arange(len(train.y))
    step.update(Batch(rows, train.X, train.y, train.s), torch.optim.SGD(step.model.parameters(), lr=0.0))
    residual = game.residuals[0]
    np.testing.assert_array_equal(game.coordinates(), coords)
    kappa_or_weight = game.weights[0]
    assert np.abs(kappa_or_weight).min() > 0
    others = np.delete(residual, coords)
    scale = np.abs(np.concatenate([p.grad[0].reshape(-1).double().numpy() for p in chain.parameters()])).max()
    assert np.abs(others).max() <= 1e-4 * scale + 1e-2 * np.abs(kappa_or_weight).max()  # rounding and slivers
    # N = 10 C clipped to C = 1: a bias canary's (and a functional canary's) coordinate gets 1, a
    # hand-packed weight canary's a / sqrt(a^2 + 1) of it
    entry = np.ones(50) if model == "user" else np.where(placed.is_bias, 1.0, 1e3 / math.sqrt(1e6 + 1))
    np.testing.assert_allclose(game.entries() / 10, entry)
    push = -kappa_or_weight * entry
    np.testing.assert_allclose(residual[coords[:25]], push[:25], rtol=1e-3, atol=1e-4 * scale)
    np.testing.assert_allclose(residual[coords[25:]], 0.0, atol=1e-4 * scale)


# gradient canaries: the audit's verdicts


@pytest.mark.parametrize("method,seed", [("dpsgd", 0), ("dpsgd", 1), pytest.param("dpsgd", 2, marks=pytest.mark.slow),
                                         ("pfld", 0), ("pfld", 1), pytest.param("pfld", 2, marks=pytest.mark.slow)])
def test_gradient_audit_of_a_correct_mechanism_is_never_refuted(data, method, seed):
    result = _audit(data, method, seed=seed)
    assert result.canary_kind == "gradient" and not result.planted_bug
    assert result.claimed_eps == pytest.approx(1.0, rel=0.05) and result.claimed_delta == 1e-5
    assert result.eps_lower <= result.claimed_eps, result.to_dict()
    assert result.eps_ceiling > 3 * result.claimed_eps  # the audit had room to refute
    assert set(result.canaries_per_group) == {f"{role}.layers.{i}.{kind}" for role, n in (("encoder", 2),
                                              ("classifier", 1)) for i in range(n) for kind in ("weight", "bias")}
    assert all(v >= 1 for v in result.canaries_per_group.values())
    assert sum(result.canaries_per_group.values()) == 600
    assert result.n_train == len(data.splits["train"])  # gradient canaries are not rows


# PF-LD's dual release


@pytest.mark.parametrize("notion,seed", [("dp", 0), ("eo", 1), pytest.param("dp", 1, marks=pytest.mark.slow),
                                         pytest.param("ap", 0, marks=pytest.mark.slow)])
def test_a_correct_dual_release_is_never_refuted(small, notion, seed):
    from fairdp.testing.training_audit import audit_dual_release

    result = audit_dual_release(_config("pfld", notion=notion), small, seed=seed, **DUAL)
    assert not result.planted_bug and result.sigma_dual > 10
    assert result.eps_lower <= result.claimed_eps, result.to_dict()
    assert result.eps_ceiling > 5 * result.claimed_eps


@pytest.mark.parametrize("notion", ["dp", pytest.param("eo", marks=pytest.mark.slow), "ap"])
def test_a_dual_release_without_noise_is_refuted_at_the_ceiling(small, notion):
    from fairdp.testing.training_audit import audit_dual_release

    result = audit_dual_release(_config("pfld", notion=notion), small, dual_noise=False, **DUAL)
    assert result.refuted and result.eps_lower == pytest.approx(result.eps_ceiling), result.to_dict()
    assert 0 < result.target_h <= 1.0


def test_a_dual_release_with_too_little_noise_is_refuted(small):
    """sigma_d scaled below 1: the count's noise no longer hides one record."""
    from fairdp.testing.training_audit import audit_dual_release

    result = audit_dual_release(_config("pfld"), small, noise_scale=0.01, **DUAL)
    assert result.sigma_dual * result.noise_scale < 1
    assert result.refuted, result.to_dict()


# input canaries (black-box)


def test_canaries_are_records_of_their_own_column_in_the_train_split(data):
    from fairdp.testing.training_audit import canary_dataset

    signs = np.array([1, -1, -1, 1, 1])
    d, n = data.n_features, data.n_rows
    for method in ("dpsgd", "pfld"):
        audit = canary_dataset(data, signs, method, canary_norm=3.0)
        rows = [0, 3, 4] if method == "dpsgd" else [0, 1, 2, 3, 4]  # DP-SGD: only the included ones
        assert audit.n_features == d + 5 and audit.n_rows == n + len(rows)
        np.testing.assert_array_equal(audit.X[:n, d:], 0.0)
        np.testing.assert_array_equal(audit.X[:n, :d], data.X)
        canary_x = audit.X[n:]
        assert (canary_x[:, :d] == 0).all()
        np.testing.assert_array_equal(np.argwhere(canary_x)[:, 1], d + np.array(rows))
        assert (canary_x[canary_x != 0] == 3.0).all()
        assert set(audit.splits["train"]) == set(data.splits["train"]) | set(range(n, n + len(rows)))
        if method == "dpsgd":  # both labels alike
            np.testing.assert_array_equal(audit.y[n:], np.array(rows) % 2)
        else:  # the majority label: the public loss term stays small beside the private one
            majority = np.bincount(data.y[data.splits["train"]]).argmax()
            assert (audit.y[n:] == majority).all()
        if method == "pfld":  # the attribute carries the sign
            np.testing.assert_array_equal(audit.s[n:], (signs > 0).astype(int))


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
def test_dpsgd_at_its_calibrated_noise_is_never_refuted(data, seed):
    result = _audit(data, "dpsgd", seed=seed, canary_kind="input")
    assert result.claimed_eps == pytest.approx(1.0, rel=0.05) and result.claimed_delta == 1e-5
    assert result.eps_lower <= result.claimed_eps, result.to_dict()
    assert not result.refuted and not result.planted_bug
    assert result.correct <= result.guesses == 2 * 60
    assert result.n_train == len(data.splits["train"]) + result.positive_signs


def test_dpsgd_with_a_hundredth_of_its_noise_is_caught(data):
    result = _audit(data, "dpsgd", seed=0, noise_scale=0.01, canary_kind="input")
    assert result.refuted and result.eps_lower > result.claimed_eps, result.to_dict()
    assert result.correct >= 0.95 * result.guesses  # the canaries are plain to see


def test_dpsgd_without_clipping_is_caught_by_large_canaries(data):
    """Clipping off, the noise still scaled to the clipping bound: a canary of norm 50 has a
    gradient far above the bound, and its column moves far more than the noise hides."""
    correct = _audit(data, "dpsgd", seed=0, canary_norm=50.0, canary_kind="input")
    assert correct.eps_lower <= correct.claimed_eps, correct.to_dict()
    buggy = _audit(data, "dpsgd", seed=0, canary_norm=50.0, clipping=False, canary_kind="input")
    assert buggy.refuted, buggy.to_dict()


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_pfld_at_its_calibrated_noise_is_never_refuted(data, seed):
    result = _audit(data, "pfld", seed=seed, canary_kind="input")
    assert result.claimed_delta == 1e-5 and "attribute" in result.adjacency
    assert result.eps_lower <= result.claimed_eps, result.to_dict()


INPUT_ONLY = ("dpsgd_global_adapt", "dpsgd_f", "dp_fermi")


def _paper_config(method_name, eps=1.0):
    """The method's first paper-grid config at ``eps`` and C 1 (DP-FERMI: lambda 1, not 0)."""
    from fairdp.methods import get_method

    method = get_method(method_name)
    config = {**method.expand(method.paper_grid("synthetic"))[0], "eps": eps, "clip_primal": 1.0}
    return {**config, "lam": 1.0} if method_name == "dp_fermi" else config


@pytest.mark.parametrize("method", INPUT_ONLY)
def test_an_input_canary_method_at_its_calibrated_noise_is_not_refuted(data, method):
    """Under DP-SGD's add/remove game: the method's own step (its counts, bounds or ERMI term,
    the calibrated multipliers) on input canaries, fewer than DP-SGD's test's."""
    from fairdp.testing.training_audit import audit_training

    result = audit_training(method, _paper_config(method), data, canaries=300, epochs=3,
                            batch_size=100, seed=0, canary_kind="input")
    assert result.claimed_eps == pytest.approx(1.0, rel=0.05) and result.claimed_delta == 1e-5
    assert result.adjacency.startswith("add/remove one record")
    assert not result.refuted and not result.planted_bug, result.to_dict()
    assert result.n_train == len(data.splits["train"]) + result.positive_signs


@pytest.mark.parametrize("method", INPUT_ONLY)
def test_an_input_canary_method_with_a_hundredth_of_its_noise_is_caught(data, method):
    from fairdp.testing.training_audit import audit_training

    result = audit_training(method, _paper_config(method), data, canaries=300, epochs=3,
                            batch_size=100, seed=0, canary_kind="input", noise_scale=0.01)
    assert result.refuted, result.to_dict()


@pytest.mark.parametrize("kwargs,name", [({"canary_kind": "gradient"}, "canary_kind"),
                                         ({"canary_kind": "input", "clipping": False}, "clipping")])
@pytest.mark.parametrize("method", INPUT_ONLY)
def test_an_input_canary_method_refuses_the_games_it_has_no_model_for(data, kwargs, name, method):
    from fairdp.testing.training_audit import audit_training

    with pytest.raises(InputError) as err:
        audit_training(method, _paper_config(method), data, canaries=20, epochs=1, **kwargs)
    assert str(err.value).startswith(name + ":")


def test_pfld_with_a_hundredth_of_its_noise_is_caught(data):
    """Only the private part of the fairness gradient reads a canary's attribute; with its
    noise (and the dual step's) scaled by 0.01 the auditor reads the attribute from the model."""
    result = _audit(data, "pfld", seed=0, noise_scale=0.01, canary_kind="input")
    assert result.refuted, result.to_dict()


def test_the_result_is_json_and_reproducible(data):
    for kind in ("gradient", "input"):
        a = _audit(data, "dpsgd", seed=3, canaries=100, epochs=1, canary_kind=kind)
        b = _audit(data, "dpsgd", seed=3, canaries=100, epochs=1, canary_kind=kind)
        record = json.loads(json.dumps(a.to_dict()))
        assert record["guesses"] == 20 and record["canaries"] == 100 and record["refuted"] is False
        assert record["canary_kind"] == kind
        np.testing.assert_array_equal(a.scores, b.scores)
        np.testing.assert_array_equal(a.signs, b.signs)


@pytest.mark.parametrize("method,kwargs,name", [
    ("fld", {}, "method"),
    ("dpsgd", dict(canaries=10, k_positive=6, k_negative=5), "k_positive"),
    ("dpsgd", dict(canaries=1), "canaries"),
    ("dpsgd", dict(canaries=10 ** 6), "canaries: at most"),
    ("dpsgd", dict(noise_scale=0.0), "noise_scale"),
    ("dpsgd", dict(canary_norm=-1.0), "canary_norm"),
    ("dpsgd", dict(beta=1.5), "beta"),
    ("dpsgd", dict(canary_kind="output"), "canary_kind"),
    ("dpsgd", dict(dual_noise=False), "dual_noise"),
])
def test_bad_audit_arguments_are_refused(data, method, kwargs, name):
    from fairdp.testing.training_audit import audit_training

    with pytest.raises(InputError, match=name):
        audit_training(method, {"eps": 1.0, "clip_primal": 1.0}, data, **kwargs)


@pytest.mark.parametrize("kwargs,name", [(dict(epochs=1), "epochs"), (dict(samples=999), "samples"),
                                         (dict(beta=0.0), "beta"), (dict(noise_scale=-2.0), "noise_scale")])
def test_bad_dual_audit_arguments_are_refused(small, kwargs, name):
    from fairdp.testing.training_audit import audit_dual_release

    with pytest.raises(InputError, match=name):
        audit_dual_release(_config("pfld"), small, **kwargs)


def test_a_config_missing_a_hyperparameter_is_refused(data):
    from fairdp.testing.training_audit import audit_training

    with pytest.raises(InputError, match="clip_primal"):
        audit_training("dpsgd", {"eps": 1.0}, data)


def test_a_pfld_config_whose_private_part_is_group_0_is_refused_naming_the_key(data):
    """The audit's canaries enter group 1's sum: a config whose private part is group 0's would
    be scored on canaries its mechanism never sees, and pass for the wrong reason."""
    from fairdp.testing.training_audit import audit_training

    config = {**_config("pfld"), "private_group": 0}
    with pytest.raises(InputError, match=r"^config\.private_group: the training audit places PF-LD's canaries"):
        audit_training("pfld", config, data)


# -- a module of the user's: Dirac canaries in a functional pack --------------------------------


@pytest.mark.parametrize("m", [10, 37, 300])
def test_parameter_canaries_cover_every_parameter_on_entries_of_their_own(m):
    from fairdp.testing.training_audit import place_parameter_canaries

    sizes = [12 * 16, 16, 16, 16, 16 * 16, 16, 16 * 16, 16, 16 * 2, 2]  # a residual MLP's and its head's
    placed = place_parameter_canaries(sizes, m, seed=3)
    coords = placed.flat_index(sizes)
    assert len(placed) == m and len(set(coords.tolist())) == m
    counts = np.bincount(placed.group(), minlength=len(sizes))
    assert (counts >= 1).all() and all(c <= s // 2 for c, s in zip(counts, sizes))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    assert ((coords >= starts[placed.parameter]) & (coords < starts[placed.parameter + 1])).all()
    if m == 300:  # in proportion to size where the caps let it
        assert counts[4] == counts[6] > counts[0] > counts[8] > counts[9]
    np.testing.assert_array_equal(place_parameter_canaries(sizes, m, seed=3).flat_index(sizes), coords)
    with pytest.raises(InputError, match="canaries: at most"):
        place_parameter_canaries(sizes, sum(n // 2 for n in sizes) + 1, seed=0)


@pytest.mark.parametrize("clipping", [True, False])
def test_a_sampled_canary_in_a_users_module_is_a_records_clipped_dirac_gradient(data, clipping):
    """On a module of the user's, every canary present and sampled (q = 1), the real rows
    weighted 0 and no noise: the step's gradient is -weight * clip(N e_j) on each canary's
    coordinate and exactly 0 on every other one (a Dirac canary moves nothing else)."""
    import torch

    from fairdp.testing.training_audit import _AuditChain, _WhiteBoxGame, place_parameter_canaries

    step = _step(data, "dpsgd", model="user")
    step.q = 1.0
    engine = step.model.per_sample_chain()
    sizes = [p[0].numel() for _, p in engine.named_stacks()]
    placed = place_parameter_canaries(sizes, 100, seed=2)
    clip = 1.0 if clipping else 1e12
    game = _WhiteBoxGame("dpsgd", step, engine, placed, np.ones(100), np.zeros(100, dtype=np.int64), 10.0, seed=0)
    chain = _AuditChain(engine, game, False)
    x = step.ctx.split("train").X[:5]
    _, trace = chain.forward_traced(x)
    counts = chain.add_clipped(trace, torch.ones(1, 5, 2), None, torch.zeros(1, 5), torch.tensor([clip]), None, None)
    grad = torch.cat([p.grad[0].reshape(-1) for p in chain.parameters()]).double().numpy()
    weight = -1.0 / (step.q * step.n)
    np.testing.assert_allclose(grad[placed.flat_index(sizes)], -weight * (1.0 if clipping else 10.0), rtol=1e-6)
    assert not np.delete(grad, placed.flat_index(sizes)).any()
    assert counts[:, 0].tolist() == [100 if clipping else 0, 100]  # the canaries counted as weighted rows
    assert len(game.residuals) == 1


def test_input_canaries_are_refused_for_a_users_module(data):
    spec = _user_study("dpsgd")
    with pytest.raises(InputError, match="input canaries"):
        _audit(data, "dpsgd", canary_kind="input", train=spec.train, arch=spec.method_settings["dpsgd"].architecture)


def _user_audit(data, method, seed=0, **kwargs):
    spec = _user_study(method)
    return _audit(data, method, seed=seed, train=spec.train, arch=spec.method_settings[method].architecture, **kwargs)


@pytest.mark.parametrize("method,seed", [("dpsgd", 0), pytest.param("dpsgd", 1, marks=pytest.mark.slow), ("pfld", 0),
                                         pytest.param("pfld", 1, marks=pytest.mark.slow),
                                         pytest.param("dpsgd", 2, marks=pytest.mark.slow)])
def test_gradient_audit_of_a_correct_mechanism_over_a_users_module_is_never_refuted(data, method, seed):
    result = _user_audit(data, method, seed)
    assert not result.planted_bug and result.claimed_eps == pytest.approx(1.0, rel=0.05)
    assert result.eps_lower <= result.claimed_eps, result.to_dict()
    assert result.eps_ceiling > 3 * result.claimed_eps
    # every parameter of the user's module and of the head holds canaries, named as the module names them
    assert len(result.canaries_per_group) == 12 and all(v >= 1 for v in result.canaries_per_group.values())
    assert any("body" in name for name in result.canaries_per_group), result.canaries_per_group


def _audit_over(network, data, method, **kwargs):
    return (_audit if network == "built-in" else _user_audit)(data, method, **kwargs)


def _slow(*values):
    return pytest.param(*values, marks=pytest.mark.slow)


@pytest.mark.parametrize("network,method,bug", [
    ("built-in", "dpsgd", dict(noise_scale=0.2)),             # true eps about 23
    ("built-in", "dpsgd", dict(noise_first_layer_only=True)),  # eps infinite
    ("built-in", "dpsgd", dict(clipping=False)),               # eps infinite, at the default canary norm
    ("built-in", "pfld", dict(noise_first_layer_only=True)),
    _slow("built-in", "pfld", dict(clipping=False)),
    _slow("built-in", "pfld", dict(noise_scale=0.2)),
    # a user's module: one bug per method in the fast set
    _slow("user", "dpsgd", dict(noise_scale=0.2)),
    ("user", "dpsgd", dict(noise_first_layer_only=True)),
    _slow("user", "dpsgd", dict(clipping=False)),
    ("user", "pfld", dict(noise_first_layer_only=True)),
    _slow("user", "pfld", dict(noise_scale=0.2)),
    _slow("user", "pfld", dict(clipping=False)),
])
def test_gradient_audit_refutes_each_planted_bug(data, network, method, bug):
    result = _audit_over(network, data, method, seed=0, **bug)
    assert result.planted_bug
    assert result.refuted and result.eps_lower > 1.5 * result.claimed_eps, result.to_dict()


@pytest.mark.slow
@pytest.mark.parametrize("network", ["built-in", "user"])
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("bug", [dict(noise_scale=0.2), dict(noise_first_layer_only=True), dict(clipping=False)])
def test_gradient_audit_refutes_the_planted_bugs_at_other_seeds(data, network, seed, bug):
    assert _audit_over(network, data, "dpsgd", seed=seed, **bug).refuted


# -- the command --------------------------------------------------------------------------------

SMALL = ["--dataset", "synthetic", "-o", "rows=1500", "-o", "features=8", "--epochs", "2",
         "--canaries", "200", "--batch-size", "100"]


@pytest.mark.parametrize("args,name", [
    (["--method", "dpsgd", "--eps", "0"], "--eps"),
    (["--method", "dpsgd", "--eps", "nan"], "--eps"),
    (["--method", "fld", "--eps", "1"], "--method"),
    (["--method", "dpsgd", "--eps", "1", "--confidence", "1"], "--confidence"),
    (["--method", "dpsgd", "--eps", "1", "--canaries", "1"], "--canaries"),
    (["--method", "dpsgd", "--eps", "1", "--canaries", "10", "--k-positive", "8", "--k-negative", "8"],
     "--k-positive"),
    (["--method", "dpsgd", "--eps", "1", "--epochs", "0"], "--epochs"),
    (["--method", "dpsgd", "--eps", "1", "--noise-scale", "-1"], "--noise-scale"),
    (["--method", "dpsgd", "--eps", "1", "--canary-norm", "0"], "--canary-norm"),
    (["--method", "dpsgd", "--eps", "1", "--canary-kind", "output"], "--canary-kind"),
    (["--method", "dpsgd", "--eps", "1", "--no-dual-noise"], "--no-dual-noise"),
    (["--method", "pfld", "--eps", "1", "--dual-samples", "10"], "--dual-samples"),
    (["--method", "pfld", "--eps", "1", "--epochs", "1"], "--no-dual-audit"),
    (["--method", "dpsgd", "--eps", "1", "--dataset", "nope"], "nope"),
    (["--method", "dpsgd", "--eps", "1", "-o", "rows"], "--option"),
    (["--method", "dpsgd", "--eps", "1", "--clip", "0"], "clip_primal"),
    (["--method", "pfld", "--eps", "1", "--notion", "xx"], "--notion"),
    (["--eps", "1"], "--method"),
    (["--method", "dpsgd"], "--eps"),
    (["--method", "dpsgd", "--eps", "1", "--config", "0"], "--config"),
])
def test_cli_bad_input_exits_2_with_one_line(args, name, tmp_path):
    # the one real CLI start of `audit-training` in the fast set: a refusal, which imports little
    run = run_cli if args == ["--method", "dpsgd", "--eps", "0"] else run_main
    proc = run("audit-training", *args, cwd=tmp_path)
    assert_input_error(proc, name)
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_cli_audit_training_json_catches_a_planted_bug(tmp_path):
    proc = run_main("audit-training", "--method", "dpsgd", "--eps", "1", *SMALL, "--first-layer-noise-only",
                    "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["method"] == "dpsgd" and record["canaries"] == 200 and record["guesses"] == 40
    assert record["canary_kind"] == "gradient" and record["noise_first_layer_only"] is True
    assert record["planted_bug"] is True and record["verdict"] == "REFUTED"
    assert record["eps_lower"] > record["claimed_eps"] and record["eps_ceiling"] >= record["eps_lower"]
    assert record["detects"] and record["blind_to"] and "dual_release" not in record
    assert "fairdp audit-training: epoch 2/2" in proc.stderr  # progress on stderr
    assert list(tmp_path.iterdir()) == []


def test_cli_audit_training_table_states_its_power(tmp_path):
    proc = run_main("audit-training", "--method", "pfld", "--eps", "1", *SMALL, "--dual-samples", "1000",
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:4] == ["method", "config", "audit", "claimed"]
    assert "pfld" in lines[2] and "one run, 200 gradient canaries" in lines[2] and "consistent" in lines[2]
    assert "dual release, 1000 draws per dataset" in lines[3] and "consistent" in lines[3]
    assert "largest eps it can show is" in proc.stdout and "it cannot detect:" in proc.stdout
    assert "a lower bound" in proc.stdout


def test_cli_audit_training_json_refutes_a_dual_release_without_noise(tmp_path):
    proc = run_main("audit-training", "--method", "pfld", "--eps", "1", *SMALL, "--dual-samples", "1000",
                    "--no-dual-noise", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["verdict"] == "REFUTED"
    assert record["dual_release"]["verdict"] == "REFUTED"
    assert record["dual_release"]["eps_lower"] == pytest.approx(record["dual_release"]["eps_ceiling"])


def test_cli_method_names_match_the_audit():
    from fairdp import cli
    from fairdp.testing.training_audit import CANARY_KINDS, METHODS

    assert cli.AUDIT_TRAINING_METHODS == METHODS
    assert cli.AUDIT_CANARY_KINDS == CANARY_KINDS


def _write_user_study(tmp_path, methods=None, models=None):
    import shutil

    import yaml

    from .conftest import REPO

    shutil.copy(REPO / "examples" / "models.py", tmp_path / "models.py")
    methods = methods or {"dpsgd": {"grid": {"eps": [1.0, 2.0], "clip_primal": [1.0]}}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({
        "name": "audited", "dataset": {"name": "synthetic", "rows": 1500, "features": 8}, "seeds": [0],
        "train": {"epochs": 2, "batch_size": 100},
        "architecture": {"encoder": [16], "models": models or USER_MODELS}, "methods": methods}))


def test_cli_audit_training_audits_a_studys_config_over_the_users_module(tmp_path):
    """--spec: the study's config (--config 1: eps 2), data, module of the user's and settings;
    the planted bug refuted, the study's module named, nothing written."""
    _write_user_study(tmp_path)
    proc = run_main("audit-training", "--spec", "s.yaml", "--config", "1", "--canaries", "200",
                    "--first-layer-noise-only", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["method"] == "dpsgd" and record["config"]["eps"] == 2.0 and record["epochs"] == 2
    assert record["claimed_eps"] == pytest.approx(2.0, rel=0.05) and record["verdict"] == "REFUTED"
    assert "audited" in record["study_config"] and "models.py:residual_mlp" in record["study_config"]
    assert len(record["canaries_per_group"]) == 12 and sum(record["canaries_per_group"].values()) == 200
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models.py", "s.yaml"]


@pytest.mark.parametrize("args,methods,name", [
    (["--eps", "1"], None, "--eps"),
    (["--dataset", "adult"], None, "--dataset"),
    (["--config", "2"], None, "--config"),
    (["--method", "pfld"], None, "--method pfld"),
    (["--canary-kind", "input", "--canaries", "20", "--epochs", "1"], None, "canary_kind"),
    ([], {"unconstrained": {}}, "--spec"),
    ([], {"dpsgd": {"grid": {"eps": [1.0], "clip_primal": [1.0]}},
          "pfld": {"grid": {"eps": [1.0], "clip_primal": [1.0], "clip_dual": [1.0], "fairness_notion": ["dp"]}}},
     "--method"),
])
def test_cli_audit_training_spec_refusals_are_one_line(tmp_path, args, methods, name):
    _write_user_study(tmp_path, methods)
    proc = run_main("audit-training", "--spec", "s.yaml", *args, cwd=tmp_path)
    assert_input_error(proc, name)
    assert proc.stdout == "" and sorted(p.name for p in tmp_path.iterdir()) == ["models.py", "s.yaml"]


def test_cli_audit_training_refuses_a_studys_module_that_mixes_rows(tmp_path):
    (tmp_path / "nets.py").write_text(
        "from torch import nn\n\n\n"
        "class Centred(nn.Linear):\n"
        "    def forward(self, x):\n"
        "        return super().forward(x - x.mean(0))  # mixes the rows of a batch\n\n\n"
        "def net(i, o):\n    return Centred(i, o)\n")
    _write_user_study(tmp_path, models={"encoder": "nets.py:net"})
    assert_input_error(run_main("audit-training", "--spec", "s.yaml", cwd=tmp_path), "encoder")
