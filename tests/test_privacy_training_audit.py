"""One-run auditing (Steinke, Nasr and Jagielski 2023): the bound against independent
computations, and the audit of a trained DP-SGD or PF-LD config, correct and with a planted bug.

The bound's p-value is checked against a computation written from Theorems 1 and 3 alone (exact
binomial sums with math.comb, the max over every i in 1..m); its coverage on the mechanism
where it is tight (eps-randomized response of each canary's sign, plus an exact reveal with
probability delta for (eps, delta)) is computed exactly over the binomial law of the number of
correct guesses, and its p-value against a Monte Carlo simulation of that mechanism.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fairdp.errors import InputError
from fairdp.privacy.training_audit import (
    epsilon_ceiling,
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


# -- the audit of a trained config -------------------------------------------------------------

AUDIT = dict(canaries=600, epochs=4, batch_size=100)
# PF-LD's private part starts at 0 (the multipliers do) and grows with the dual steps: a canary's
# attribute shows after a few epochs
PFLD_AUDIT = dict(AUDIT, epochs=6)


@pytest.fixture(scope="module")
def data():
    from fairdp.data import load_dataset

    return load_dataset("synthetic", rows=2500, features=12, seed=1)


def _audit(data, method, eps=1.0, **kwargs):
    from fairdp.testing.training_audit import audit_training

    config = ({"eps": eps, "clip_primal": 1.0} if method == "dpsgd" else
              {"fairness_notion": "dp", "eps": eps, "clip_primal": 1.0, "clip_dual": 1.0})
    return audit_training(method, config, data, **{**(AUDIT if method == "dpsgd" else PFLD_AUDIT), **kwargs})


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


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dpsgd_at_its_calibrated_noise_is_never_refuted(data, seed):
    result = _audit(data, "dpsgd", seed=seed)
    assert result.claimed_eps == pytest.approx(1.0, rel=0.05) and result.claimed_delta == 1e-5
    assert result.eps_lower <= result.claimed_eps, result.to_dict()
    assert not result.refuted and not result.planted_bug
    assert result.correct <= result.guesses == 2 * 60
    assert result.n_train == len(data.splits["train"]) + result.positive_signs


def test_dpsgd_with_a_hundredth_of_its_noise_is_caught(data):
    result = _audit(data, "dpsgd", seed=0, noise_scale=0.01)
    assert result.refuted and result.eps_lower > result.claimed_eps, result.to_dict()
    assert result.correct >= 0.95 * result.guesses  # the canaries are plain to see


def test_dpsgd_without_clipping_is_caught_by_large_canaries(data):
    """Clipping off, the noise still scaled to the clipping bound: a canary of norm 50 has a
    gradient far above the bound, and its column moves far more than the noise hides."""
    correct = _audit(data, "dpsgd", seed=0, canary_norm=50.0)
    assert correct.eps_lower <= correct.claimed_eps, correct.to_dict()
    buggy = _audit(data, "dpsgd", seed=0, canary_norm=50.0, clipping=False)
    assert buggy.refuted, buggy.to_dict()


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_pfld_at_its_calibrated_noise_is_never_refuted(data, seed):
    result = _audit(data, "pfld", seed=seed)
    assert result.claimed_delta == 1e-5 and "attribute" in result.adjacency
    assert result.eps_lower <= result.claimed_eps, result.to_dict()


def test_pfld_with_a_hundredth_of_its_noise_is_caught(data):
    """Only the private part of the fairness gradient reads a canary's attribute; with its
    noise (and the dual step's) scaled by 0.01 the auditor reads the attribute from the model."""
    result = _audit(data, "pfld", seed=0, noise_scale=0.01)
    assert result.refuted, result.to_dict()


def test_the_result_is_json_and_reproducible(data):
    a = _audit(data, "dpsgd", seed=3, canaries=100, epochs=1)
    b = _audit(data, "dpsgd", seed=3, canaries=100, epochs=1)
    record = json.loads(json.dumps(a.to_dict()))
    assert record["guesses"] == 20 and record["canaries"] == 100 and record["refuted"] is False
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.signs, b.signs)


@pytest.mark.parametrize("method,kwargs,name", [
    ("fld", {}, "method"),
    ("dpsgd", dict(canaries=10, k_positive=6, k_negative=5), "k_positive"),
    ("dpsgd", dict(canaries=1), "canaries"),
    ("dpsgd", dict(noise_scale=0.0), "noise_scale"),
    ("dpsgd", dict(beta=1.5), "beta"),
])
def test_bad_audit_arguments_are_refused(data, method, kwargs, name):
    from fairdp.testing.training_audit import audit_training

    with pytest.raises(InputError, match=name):
        audit_training(method, {"eps": 1.0, "clip_primal": 1.0}, data, **kwargs)


def test_a_config_missing_a_hyperparameter_is_refused(data):
    from fairdp.testing.training_audit import audit_training

    with pytest.raises(InputError, match="clip_primal"):
        audit_training("dpsgd", {"eps": 1.0}, data)


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
    (["--method", "dpsgd", "--eps", "1", "--dataset", "nope"], "nope"),
    (["--method", "dpsgd", "--eps", "1", "-o", "rows"], "--option"),
    (["--method", "dpsgd", "--eps", "1", "--clip", "0"], "clip_primal"),
    (["--method", "pfld", "--eps", "1", "--notion", "xx"], "--notion"),
    (["--eps", "1"], "--method"),
])
def test_cli_bad_input_exits_2_with_one_line(args, name, tmp_path):
    # the one real CLI start of `audit-training` in the fast set: a refusal, which imports little
    run = run_cli if args == ["--method", "dpsgd", "--eps", "0"] else run_main
    proc = run("audit-training", *args, cwd=tmp_path)
    assert_input_error(proc, name)
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_cli_audit_training_json_catches_a_planted_bug(tmp_path):
    proc = run_main("audit-training", "--method", "dpsgd", "--eps", "1", *SMALL, "--noise-scale", "0.01", "--json",
                    cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["method"] == "dpsgd" and record["canaries"] == 200 and record["guesses"] == 40
    assert record["planted_bug"] is True and record["verdict"] == "REFUTED"
    assert record["eps_lower"] > record["claimed_eps"]
    assert "fairdp audit-training: epoch 2/2" in proc.stderr  # progress on stderr
    assert list(tmp_path.iterdir()) == []


def test_cli_audit_training_table(tmp_path):
    proc = run_main("audit-training", "--method", "pfld", "--eps", "1", *SMALL, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["method", "config", "claimed"]
    assert "pfld" in lines[2] and "consistent" in lines[2]
    assert "a lower bound" in proc.stdout


def test_cli_method_names_match_the_audit():
    from fairdp import cli
    from fairdp.testing.training_audit import METHODS

    assert cli.AUDIT_TRAINING_METHODS == METHODS
