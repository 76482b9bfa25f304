"""The empirical eps lower bound of one-run privacy auditing (Steinke, Nasr and Jagielski,
"Privacy auditing with one (1) training run", NeurIPS 2023; arXiv 2305.08846): pure maths,
no training. ``fairdp.testing.training_audit`` runs the audit that feeds it.

The game. m canaries each get an independent uniform sign S_i in {-1, +1} (in DP-SGD's
add/remove adjacency: canary i is in the training set or not; in PF-LD's attribute
adjacency: canary i's sensitive attribute is 1 or 0). One training run M(S) is observed; the
auditor then guesses the signs of r of the canaries (T_i in {-1, +1}) and abstains on the
others (T_i = 0), and W is the number of correct guesses. Its number of guesses r must be
fixed before the run's outcome is seen (here: the k+ highest and k- lowest scores, r = k+ + k-).

* Theorem 1 of the paper (eps-DP): if M is eps-DP with respect to each S_i, W is
  stochastically dominated by Binomial(r, e^eps / (1 + e^eps)): every canary's guess is at
  best as good as eps-randomized response, whatever the auditor does.
* Theorem 3 ((eps, delta)-DP): with f(v) = P[Binomial(r, e^eps / (1 + e^eps)) >= v],
  P[W >= v] <= f(v) + 2 m delta max_{i in 1..m} (f(v - i) - f(v)) / i.

``one_run_p_value`` is that right-hand side: the p-value of v correct guesses under the null
hypothesis "M is (eps, delta)-DP". For i > v, f(v - i) = 1 = f(0), so (f(v - i) - f(v)) / i
decreases in i and the maximum is reached at some i <= v; the paper's reference code for the
p-value sums only i = 1..v, and so does this one.

``one_run_epsilon_lower_bound`` turns v correct out of r guesses into the largest eps that the
observation refutes at significance beta: a search for the largest eps whose p-value is
below beta, as the paper's code does (double an upper end until its p-value reaches beta,
then bisect, keeping the lower end's p-value below beta). The result holds with probability
at least 1 - beta: if M were (eps, delta)-DP for an eps at or above it, an outcome this good
would have had probability below beta. A bound above a method's claimed eps refutes the claim
at that confidence; a bound below it proves nothing (the audit can refute a claim, never
establish one). With r guesses and m canaries, not even r correct guesses out of r can give a
bound above ``one_run_epsilon_lower_bound(r, r, m, beta, delta)`` (about ln(r / ln(1 / beta))
for delta = 0): the audit's ceiling.

``event_epsilon_lower_bound`` is the other game's bound, for a release audited from many
samples on two fixed neighbouring inputs (``fairdp.privacy.audit.audit`` picks the event and
bounds its two probabilities with Clopper-Pearson intervals): (eps, delta)-DP needs
P[M(x) in E] <= e^eps P[M(x') in E] + delta for every event, so the pure-eps log-ratio that
``audit`` reports is corrected by delta. ``distinguishing_ceiling`` is that game's most.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special, stats

from fairdp.errors import InputError
from fairdp.privacy.audit import clopper_pearson

EPS_TOLERANCE = 1e-9
"""The bisection stops when its bracket is narrower than this (absolute, in eps)."""

_EPS_CAP = 1e4
"""A guard on the doubling search: from eps = 37 on, e^eps / (1 + e^eps) is 1 in floating
point, every guess is "expected" right and nothing is refuted, so the doubling stops by 64."""


def _check_counts(correct: object, guesses: object, m: object) -> tuple[int, int, int]:
    for name, value in (("correct", correct), ("guesses", guesses), ("m", m)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise InputError(f"{name} must be an integer, got {value!r}")
    correct, guesses, m = int(correct), int(guesses), int(m)
    if not 0 <= correct <= guesses <= m:
        raise InputError(f"need 0 <= correct <= guesses <= m, got correct={correct}, guesses={guesses}, m={m}")
    if m < 1:
        raise InputError(f"m must be >= 1 canary, got {m}")
    return correct, guesses, m


def _check_delta(delta: object) -> float:
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 <= delta <= 1:
        raise InputError(f"delta must be in [0, 1], got {delta!r}")
    return float(delta)


def guess_accuracy(eps: float) -> float:
    """e^eps / (1 + e^eps): the chance that eps-randomized response reports a sign correctly,
    the best per-guess accuracy an eps-DP mechanism allows (Theorem 1)."""
    return float(special.expit(eps))  # no overflow at any eps, inf included


def one_run_p_value(correct: int, guesses: int, m: int, eps: float, delta: float = 0.0) -> float:
    """P[W >= correct] bounded under the null hypothesis that the run is (eps, delta)-DP.

    Theorem 1 (delta = 0): f(v) = P[Binomial(r, e^eps / (1 + e^eps)) >= v], v = ``correct``,
    r = ``guesses``. Theorem 3 (delta > 0) adds 2 m delta max_{1 <= i <= v} (f(v - i) - f(v)) / i,
    m = ``m`` canaries. Capped at 1; v = 0 gives 1.
    """
    v, r, m = _check_counts(correct, guesses, m)
    delta = _check_delta(delta)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise InputError(f"eps must be a number >= 0, got {eps!r}")
    if v == 0:
        return 1.0
    q = guess_accuracy(eps)
    tail = float(stats.binom.sf(v - 1, r, q))  # f(v) = P[B >= v]
    if delta == 0:
        return tail
    # f(v - i) - f(v) = P[v - i <= B < v] = sum_{j = 1..i} P[B = v - j], for i = 1..v
    between = np.cumsum(stats.binom.pmf(np.arange(v - 1, -1, -1), r, q))
    alpha = float(np.max(between / np.arange(1, v + 1)))
    return min(tail + 2 * m * delta * alpha, 1.0)


def one_run_epsilon_lower_bound(correct: int, guesses: int, m: int, beta: float = 0.05,
                                delta: float = 0.0) -> float:
    """The largest eps >= 0 that ``correct`` right guesses out of ``guesses`` (among ``m``
    canaries) refute at significance ``beta``: sup {eps : one_run_p_value(...) < beta}, found
    by the paper's search (0 when even eps = 0 is not refuted).

    With probability at least 1 - beta over the canaries' signs and the run's randomness, a
    run that is (eps, delta)-DP gives a bound <= eps (Theorems 1 and 3). The returned value's
    own p-value is below beta (checked), so it is refuted whether or not the p-value is
    monotone in eps: refuting eps refutes every smaller eps too.
    """
    v, r, m = _check_counts(correct, guesses, m)
    delta = _check_delta(delta)
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 < beta < 1:
        raise InputError(f"beta must be in (0, 1), got {beta!r}")

    def refuted(eps: float) -> bool:
        return one_run_p_value(v, r, m, eps, delta) < beta

    if not refuted(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while refuted(hi):  # keep p(lo) < beta <= p(hi)
        lo, hi = hi, 2 * hi
        if hi > _EPS_CAP:  # unreachable (see _EPS_CAP); a guard, not a branch the maths takes
            return lo
    while hi - lo > EPS_TOLERANCE:
        mid = (lo + hi) / 2
        if refuted(mid):
            lo = mid
        else:
            hi = mid
    return lo


def epsilon_ceiling(guesses: int, m: int, beta: float = 0.05, delta: float = 0.0) -> float:
    """The largest bound ``guesses`` guesses among ``m`` canaries can give: all of them right.
    A claim above it cannot be refuted by this audit, however leaky the run."""
    return one_run_epsilon_lower_bound(guesses, guesses, m, beta, delta)


def event_epsilon_lower_bound(p_lower: float, p_upper: float, delta: float = 0.0) -> float:
    """The eps an event E refutes for an (eps, ``delta``) claim, given P[M(x) in E] >= ``p_lower``
    and P[M(x') in E] <= ``p_upper`` (bounds that hold jointly at the audit's confidence).

    (eps, delta)-DP needs P[M(x) in E] <= e^eps P[M(x') in E] + delta, so p_lower > e^eps
    p_upper + delta is impossible for it: every eps below ln((p_lower - delta) / p_upper) is
    refuted. 0 when p_lower <= delta (nothing refuted); with delta = 0 it is ``audit``'s
    pure-eps bound.
    """
    for name, value in (("p_lower", p_lower), ("p_upper", p_upper)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not 0 <= value <= 1:
            raise InputError(f"{name} must be a probability in [0, 1], got {value!r}")
    delta = _check_delta(delta)
    if p_lower <= delta:  # p_upper = 1 needs no case: the log is then <= 0
        return 0.0
    if p_upper == 0:  # a Clopper-Pearson upper bound is never 0; an exact 0 refutes every eps
        return math.inf
    return max(0.0, math.log((p_lower - delta) / p_upper))


def distinguishing_ceiling(held_out: int, confidence: float = 0.95, delta: float = 0.0) -> float:
    """The largest ``event_epsilon_lower_bound`` that ``held_out`` samples per input can give:
    the event holds on every held-out sample of one input and on none of the other's, each
    probability bounded at confidence 1 - (1 - ``confidence``) / 2 (the union bound that
    ``fairdp.privacy.audit.audit`` uses). About ln(held_out / ln(2 / (1 - confidence)))."""
    if isinstance(held_out, bool) or not isinstance(held_out, (int, np.integer)) or held_out < 1:
        raise InputError(f"held_out must be an integer >= 1, got {held_out!r}")
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
        raise InputError(f"confidence must be in (0, 1), got {confidence!r}")
    each = 1 - (1 - confidence) / 2
    p_lower = float(clopper_pearson(int(held_out), int(held_out), each)[0])
    p_upper = float(clopper_pearson(0, int(held_out), each)[1])
    return event_epsilon_lower_bound(p_lower, p_upper, delta)
