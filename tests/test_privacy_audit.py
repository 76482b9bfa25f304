"""Empirical DP audit: sound on FEDERATE's mechanism, refutes DPNR/CAPE and the L2 code variant."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from scipy import stats

from fairdp import cli
from fairdp.errors import InputError
from fairdp.privacy import l1_normalize, laplace_privatize, minmax_normalize
from fairdp.privacy._mechanisms import l2_privatize_like_federate_code
from fairdp.privacy.audit import (
    MECHANISMS,
    MIN_SAMPLES,
    _best_event,
    _Event,
    _statistics,
    audit,
    clopper_pearson,
)

from .conftest import assert_input_error, run_cli, run_main

N = 200_000


def audit_target(name: str, dim: int, eps: float, n: int = N, **kwargs):
    target = MECHANISMS[name]
    x, x_prime = target.worst_pair(dim)
    return audit(lambda h: target.privatize(h, eps), x, x_prime, n, **kwargs)


# --- Clopper-Pearson -------------------------------------------------------------------


def test_clopper_pearson_closed_forms_at_the_ends():
    n, c = 50, 0.9
    lower, upper = clopper_pearson(np.array([0, n]), n, c)
    assert lower[0] == 0 and upper[1] == 1
    assert upper[0] == pytest.approx(1 - (1 - c) ** (1 / n))
    assert lower[1] == pytest.approx((1 - c) ** (1 / n))


def test_clopper_pearson_textbook_value():
    # the two-sided 95% interval for 5 of 10 is [0.1871, 0.8129]: two one-sided 97.5% bounds
    lower, upper = clopper_pearson(5, 10, 0.975)
    assert float(lower) == pytest.approx(0.18709, abs=1e-5)
    assert float(upper) == pytest.approx(0.81291, abs=1e-5)


@pytest.mark.parametrize("p", [0.001, 0.03, 0.3, 0.5, 0.9])
def test_clopper_pearson_never_undercovers(p):
    """Exact coverage over every count k: P[lower(K) > p] and P[upper(K) < p] <= 1 - c."""
    n, c = 200, 0.9
    k = np.arange(n + 1)
    lower, upper = clopper_pearson(k, n, c)
    pmf = stats.binom.pmf(k, n, p)
    assert pmf[lower > p].sum() <= 1 - c + 1e-12
    assert pmf[upper < p].sum() <= 1 - c + 1e-12


# --- sanity -----------------------------------------------------------------------------


def test_noiseless_mechanism_on_distinct_inputs_gives_a_large_bound():
    x, x_prime = torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0.0, 1.0, 2.5])
    result = audit(torch.clone, x, x_prime, 10_000)
    # all 5000 held-out outputs in E for x, none for x': about ln(5000 / ln(40))
    assert result.eps_lower > 7
    assert result.p_lower > 0.999


@pytest.mark.parametrize("mechanism", [torch.clone, lambda h: laplace_privatize(h, 1.0)])
def test_identical_inputs_give_zero(mechanism):
    x = torch.tensor([0.3, -1.0, 2.0, 0.5])
    assert audit(mechanism, x, x.clone(), 20_000).eps_lower == 0


def test_worst_pairs_reach_the_true_epsilon():
    """Noise-free check of the registry: L1 distance of the normalised pair / noise scale."""
    dim, eps = 16, 0.7
    normalise = {
        "laplace": (l1_normalize, 2 / eps),
        "minmax": (minmax_normalize, 1 / eps),
        "l2": (lambda h: h / torch.linalg.vector_norm(h), 2 / eps),
    }
    for name, target in MECHANISMS.items():
        f, scale = normalise[name]
        x, x_prime = target.worst_pair(dim)
        loss = (f(x) - f(x_prime)).abs().sum().item() / scale
        assert loss == pytest.approx(target.true_eps(eps, dim), rel=1e-5), name
        assert target.claimed_eps(eps, dim) == eps


def test_seeded_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    first = audit_target("laplace", 4, 1.0, n=10_000, seed=5)
    assert torch.equal(torch.rand(3), expected)
    assert audit_target("laplace", 4, 1.0, n=10_000, seed=5) == first


@pytest.mark.parametrize("statistic", ["laplace", "linear"])
def test_each_statistic_alone_gives_a_valid_nontrivial_bound(statistic):
    result = audit_target("laplace", 8, 2.0, n=40_000, statistic=statistic)
    assert result.event.startswith(statistic)
    assert 0.5 < result.eps_lower <= 2.0


def test_bound_holds_with_the_stated_confidence():
    """Many small audits of a tight pair: the bound exceeds the true eps in < 1 - c of them."""
    x, x_prime = MECHANISMS["laplace"].worst_pair(2)
    bounds = np.array([
        audit(lambda h: laplace_privatize(h, 2.0), x, x_prime, 2000, seed=s, confidence=0.5).eps_lower
        for s in range(100)
    ])
    assert (bounds > 2.0).mean() <= 0.5
    assert bounds.mean() > 1.0  # and the audit is not vacuous at 1000 held-out samples


@pytest.mark.parametrize("kwargs, name", [
    ({"n_samples": MIN_SAMPLES - 1}, "n_samples"),
    ({"confidence": 1.0}, "confidence"),
    ({"statistic": "mean"}, "statistic"),
    ({"x_prime": [0.0, 1.0]}, "same length"),
    ({"x": [[0.0, 1.0, 2.0]]}, "x must"),
    ({"x": [0.0, math.nan, 1.0]}, "x must be finite"),
    ({"n_samples": True}, "n_samples"),
    ({"n_samples": 2000.0}, "n_samples"),
    ({"confidence": 0.0}, "confidence"),
    ({"x": [], "x_prime": []}, "x must"),
    ({"x_prime": np.zeros((1, 3))}, "x_prime must"),
])
def test_bad_arguments_raise(kwargs, name):
    args = {"x": [0.0, 1.0, 0.0], "x_prime": [1.0, 0.0, 0.0], "n_samples": MIN_SAMPLES}
    args.update(kwargs)
    n_samples = args.pop("n_samples")
    with pytest.raises(InputError, match=name):
        audit(torch.clone, n_samples=n_samples, **args)


def test_mechanism_with_a_wrong_output_shape_is_rejected():
    with pytest.raises(InputError, match="mechanism"):
        audit(lambda h: h[:1], [0.0, 1.0], [1.0, 0.0], MIN_SAMPLES)


# --- the three mechanisms of fairdp.privacy ----------------------------------------------


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("dim", [2, 8, 32])
def test_laplace_privatize_is_never_contradicted(eps, dim):
    result = audit_target("laplace", dim, eps, n=100_000)
    assert result.eps_lower <= eps
    if dim <= 8:  # the worst pair's loss atom is frequent enough to be measured tightly
        assert result.eps_lower > 0.8 * eps


@pytest.mark.parametrize("dim", [8, 16])
def test_minmax_privatize_refutes_the_published_analysis(dim):
    result = audit_target("minmax", dim, 1.0)
    assert 1.0 < result.eps_lower <= MECHANISMS["minmax"].true_eps(1.0, dim) == dim


def test_l2_variant_of_the_federate_code_is_caught_and_laplace_is_not():
    dim, eps = 16, 1.0
    l2 = audit_target("l2", dim, eps)
    assert MECHANISMS["l2"].privatize is l2_privatize_like_federate_code
    assert eps < l2.eps_lower <= math.sqrt(dim) * eps
    assert audit_target("laplace", dim, eps).eps_lower <= eps


# --- CLI ---------------------------------------------------------------------------------


def test_cli_mechanism_names_match_the_registry():
    assert cli.AUDIT_MECHANISMS == tuple(MECHANISMS)


def test_cli_audit_json():
    proc = run_main("audit", "--mechanism", "minmax", "--eps", "1", "--dim", "8",
                    "--samples", "20000", "--seed", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["mechanism"] == "minmax" and record["dim"] == 8 and record["seed"] == 3
    assert record["claimed_eps"] == 1.0 and record["true_eps"] == 8.0
    assert record["n_samples"] == 20000 and record["confidence"] == 0.95
    assert 1.0 < record["eps_lower"] <= 8.0
    assert record["verdict"] == "VIOLATED"
    assert 0 < record["p_upper"] < record["p_lower"] <= 1


@pytest.mark.parametrize("args, name", [
    (("--eps", "0"), "--eps"),
    (("--dim", "1"), "--dim"),
    (("--samples", "10"), "--samples"),
    (("--confidence", "1"), "--confidence"),
    (("--mechanism", "gauss"), "--mechanism"),
])
def test_cli_audit_bad_input(args, name):
    base = {"--mechanism": "laplace", "--eps": "1", "--dim": "4"}
    base.update(dict(zip(args[::2], args[1::2])))
    run = run_cli if name == "--eps" else run_main  # the one real CLI start of `audit` in the fast set
    proc = run("audit", *[a for kv in base.items() for a in kv])
    assert_input_error(proc, name)


# --- the pieces, pinned against their definitions ----------------------------------------


def test_clopper_pearson_matches_the_beta_quantiles_at_every_count():
    n, c = 30, 0.9
    k = np.arange(n + 1)
    lower, upper = clopper_pearson(k, n, c)
    assert lower[0] == 0 and upper[n] == 1
    inner = k[1:]  # k = 1 included: its lower bound is positive, not the k = 0 value
    np.testing.assert_allclose(lower[1:], stats.beta.ppf(1 - c, inner, n - inner + 1), rtol=1e-12)
    np.testing.assert_allclose(upper[:-1], stats.beta.ppf(c, k[:-1] + 1, n - k[:-1]), rtol=1e-12)
    assert lower[1] == pytest.approx(1 - c ** (1 / n))


def test_statistics_follow_their_formulas():
    """laplace: sum of (|z - m'| - |z - m|) / 2 over coordinates, m and m' the medians;
    linear: (z - (mu + mu') / 2) . (mu - mu'), mu and mu' the means. Both antisymmetric."""
    gen = torch.Generator().manual_seed(0)
    y = torch.randn(101, 4, generator=gen, dtype=torch.float64) + torch.tensor([1.0, -2.0, 0.5, 0.0])
    y_prime = torch.randn(101, 4, generator=gen, dtype=torch.float64) * 2 - torch.tensor([0.5, 1.0, -3.0, 0.0])
    y_prime[:, 3] = y[:, 3]  # one coordinate with equal medians: it must contribute 0
    z = torch.randn(50, 4, generator=gen, dtype=torch.float64) * 3
    m = torch.as_tensor(np.median(y.numpy(), axis=0))
    m_prime = torch.as_tensor(np.median(y_prime.numpy(), axis=0))
    mu, mu_prime = y.numpy().mean(axis=0), y_prime.numpy().mean(axis=0)
    fns = _statistics(y, y_prime, ("laplace", "linear"))
    swapped = _statistics(y_prime, y, ("laplace", "linear"))
    laplace = ((z - m_prime).abs() - (z - m).abs()).sum(dim=-1) / 2
    linear = (z.numpy() - (mu + mu_prime) / 2) @ (mu - mu_prime)
    np.testing.assert_allclose(fns["laplace"](z).numpy(), laplace.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fns["linear"](z).numpy(), linear, rtol=1e-10, atol=1e-12)
    for name in fns:
        np.testing.assert_allclose(swapped[name](z).numpy(), -fns[name](z).numpy(), rtol=1e-10, atol=1e-12)
    # saturated coordinates contribute exactly +-|m - m'| / 2: far on x's side, the sum of the halves
    far = (m + 100 * torch.sign(m - m_prime)).unsqueeze(0)
    assert fns["laplace"](far).item() == pytest.approx(((m - m_prime).abs() / 2).sum().item())


def test_event_counts_ties_at_the_threshold():
    s = np.array([0.0, 1.0, 1.0, 2.0, 3.0])
    assert _Event("s", True, 1.0, True, 0.0).count(s) == 4
    assert _Event("s", False, 1.0, True, 0.0).count(s) == 3
    assert _Event("s", False, 2.0, True, 0.0).describe() == "s statistic <= 2"


def _reference_best_event(s_x, s_xp, confidence):
    """Brute force over the documented candidates: the sample values of either input at ranks
    floor(geomspace(1, n, 256)) - 1 from the bottom and from the top; both tails, both favoured
    inputs, counts by direct comparison, the first strictly best in (upper, x favoured, threshold)
    order, score ln(lower bound of the favoured count) - ln(upper bound of the other)."""
    n = len(s_x)
    ranks = sorted({int(r) - 1 for r in np.geomspace(1, n, 256).astype(np.int64)})
    candidates = set()
    for s in (np.sort(s_x), np.sort(s_xp)):
        candidates |= {float(s[r]) for r in ranks} | {float(s[n - 1 - r]) for r in ranks}
    t = np.array(sorted(candidates))
    best = None
    for upper in (True, False):
        k_x, k_xp = ((s[:, None] >= t) if upper else (s[:, None] <= t) for s in (s_x, s_xp))
        for x_favoured in (True, False):
            k_num, k_den = (k_x, k_xp) if x_favoured else (k_xp, k_x)
            k_num, k_den = k_num.sum(axis=0), k_den.sum(axis=0)
            with np.errstate(divide="ignore", invalid="ignore"):
                low = np.where(k_num > 0, stats.beta.ppf(1 - confidence, k_num, n - k_num + 1), 0.0)
                up = np.where(k_den < n, stats.beta.ppf(confidence, k_den + 1, n - k_den), 1.0)
                score = np.log(low) - np.log(up)
            for i in range(t.size):
                if best is None or score[i] > best[-1]:
                    best = (upper, x_favoured, t[i], score[i])
    return best


@pytest.mark.parametrize("case", ["x_above", "x_prime_above", "antisymmetric", "middle"])
def test_best_event_is_the_best_documented_candidate(case):
    rng = np.random.default_rng(7)
    n, c = 2000, 0.975
    a, b = rng.uniform(0, 1.1, n), rng.uniform(0, 1, n)
    s_x, s_xp = {
        "x_above": (a, b),
        "x_prime_above": (b, a),
        "antisymmetric": (a - 0.3, 0.3 - a),  # every score ties with its mirror: the first one is kept
        "middle": (rng.uniform(0, 1, n), rng.uniform(0.45, 1.45, n)),
    }[case]
    event = _best_event("s", s_x, s_xp, c)
    upper, x_favoured, threshold, score = _reference_best_event(s_x, s_xp, c)
    assert (event.statistic, event.upper, event.x_favoured, event.threshold) == ("s", upper, x_favoured, threshold)
    assert event.score == pytest.approx(score, rel=1e-9)
    if case == "antisymmetric":
        assert event.upper and event.x_favoured


def test_appendix_c_pair():
    x, x_prime = MECHANISMS["minmax"].worst_pair(4)
    assert x.tolist() == [0.0, 1.0, 1.0, 1.0]
    assert x_prime.tolist() == [1.0, 0.0, 0.0, 0.0]


# --- audit end to end, checked against counts taken from the mechanism's own outputs ------


def _randomized_response(record):
    """One-bit randomized response on +-1 rows, flipping with probability 1/4: truly ln(3)-DP.
    Records every output batch it returns."""
    def mechanism(h):
        out = torch.where(torch.rand(h.shape[0], 1) < 0.25, -h, h)
        record.append(out.clone())
        return out
    return mechanism


def test_bounds_are_the_union_bounded_clopper_pearson_of_the_held_out_counts():
    n, c = 4001, 0.9
    batches = []
    result = audit(_randomized_response(batches), [1.0], [-1.0], n, confidence=c)
    # one batch per input and half, selection first: n // 2 rows, then the other n - n // 2
    n_held = n - n // 2
    sizes = [len(b) for b in batches]
    assert sizes == [n // 2, n // 2, n_held, n_held]
    held_x, held_xp = batches[2].ravel(), batches[3].ravel()
    # the event is {output = +1} in favour of x or {output = -1} in favour of x'
    if result.numerator == "x":
        k_num, k_den = int((held_x == 1).sum()), int((held_xp == 1).sum())
    else:
        k_num, k_den = int((held_xp == -1).sum()), int((held_x == -1).sum())
    each = 1 - (1 - c) / 2  # each one-sided bound at 1 - alpha / 2: jointly at c
    assert result.p_lower == pytest.approx(stats.beta.ppf(1 - each, k_num, n_held - k_num + 1), rel=1e-12)
    assert result.p_upper == pytest.approx(stats.beta.ppf(each, k_den + 1, n_held - k_den), rel=1e-12)
    assert result.eps_lower == pytest.approx(max(0.0, math.log(result.p_lower / result.p_upper)), rel=1e-12)
    assert result.eps_point == pytest.approx(math.log(k_num / k_den), rel=1e-12)
    assert 0.5 < result.eps_lower <= math.log(3) < result.eps_point + 0.3
    assert result.n_samples == n and result.confidence == c


def test_an_event_never_seen_in_the_held_out_half_gives_zero():
    """A mechanism that stops leaking after the selection half: p_lower = 0, so eps_lower = 0."""
    calls = []

    def mechanism(h):
        calls.append(len(h))
        return h.clone() if len(calls) <= 2 else torch.zeros_like(h)

    c = 0.95
    result = audit(mechanism, [1.0], [-1.0], 1000, confidence=c)
    assert calls == [500] * 4
    assert result.p_lower == 0 and result.eps_lower == 0.0 and result.eps_point is None
    assert result.p_upper == pytest.approx(stats.beta.ppf(1 - (1 - c) / 2, 1, 500), rel=1e-12)


def test_a_symmetric_pair_is_reported_in_favour_of_x():
    """The two mirror events of a symmetric noiseless pair score the same: the upper tail
    favouring x, found first, is the one reported."""
    result = audit(torch.clone, [1.0], [-1.0], 1000)
    assert result.numerator == "x"
    assert result.event == "laplace statistic >= 1"
    n_held = 500
    assert result.p_lower == pytest.approx(0.025 ** (1 / n_held), rel=1e-12)
    assert result.p_upper == pytest.approx(1 - 0.025 ** (1 / n_held), rel=1e-12)


def test_draws_come_in_bounded_chunks_and_all_samples_are_used():
    """Batches of max(4096, 2**22 // D) rows (the first one, which fits the statistics, at
    least 4096): n // 2 rows per input choose the event and the other n - n // 2 bound it."""
    dim, n = 1024, 8195
    chunk = max(4096, 2**22 // dim)
    sizes = {1.0: [], 0.0: []}

    def mechanism(h):
        sizes[h[0, 0].item()].append(len(h))
        return h.clone()

    x = torch.zeros(dim)
    x[0] = 1.0
    audit(mechanism, x, torch.zeros(dim), n, statistic="linear")
    n_select, n_held = n // 2, n - n // 2
    expected = [chunk, n_select - chunk, chunk, n_held - chunk]
    assert sizes[1.0] == sizes[0.0] == expected
    assert max(sizes[1.0]) * dim <= 2**22


def test_rows_reach_the_mechanism_as_floats():
    dtypes = []

    def mechanism(h):
        dtypes.append(h.dtype)
        return h.clone()

    audit(mechanism, [0, 1, 2], [2, 1, 0], MIN_SAMPLES)
    assert set(dtypes) == {torch.get_default_dtype()}
    dtypes.clear()
    audit(mechanism, torch.tensor([0.0, 1.0], dtype=torch.float64), [1.0, 0.0], MIN_SAMPLES)
    assert dtypes[0] == torch.float64  # a float row keeps its precision


def test_the_minimum_sample_count_is_1000():
    assert audit(torch.clone, [0.0, 1.0], [1.0, 0.0], 1000).n_samples == 1000
    with pytest.raises(InputError, match="n_samples"):
        audit(torch.clone, [0.0, 1.0], [1.0, 0.0], 999)


def test_seed_defaults_to_zero_and_results_are_immutable_values():
    x, x_prime = MECHANISMS["laplace"].worst_pair(2)

    def run(**kwargs):
        return audit(lambda h: laplace_privatize(h, 1.0), x, x_prime, 2000, **kwargs)

    default = run()
    assert default == run(seed=0) != run(seed=1)
    assert len({default, run(seed=0)}) == 1  # hashable, equal results hash alike
    with pytest.raises(dataclasses.FrozenInstanceError):
        default.eps_lower = 10.0


