"""Empirical DP audit: sound on FEDERATE's mechanism, refutes DPNR/CAPE and the L2 code variant."""

from __future__ import annotations

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
from fairdp.privacy.audit import MECHANISMS, MIN_SAMPLES, audit, clopper_pearson

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
