"""RDP and PLD accounting of PF-LD (Tran, Fioretto & Van Hentenryck 2021, "Privacy Analysis") and DP-SGD.

PF-LD releases two noisy quantities, and both are accounted here with Google's
``dp-accounting`` (its ``RdpAccountant`` by default, its ``PLDAccountant`` when a study says
``train: {accountant: pld}``; see "PLD" below), not with hand-written RDP:

* primal step, eq. (8), once per mini-batch: the private part of the group term, a sum over a
  Poisson sample (rate q = |B| / n) of one clipped vector per group-1 record, plus Gaussian
  noise of std sigma_p Delta_p, Delta_p the largest norm of one record's vector. Lemma 1's
  sampled Gaussian (SG) mechanism, eq. (11): a ``PoissonSampledDpEvent`` of a
  ``GaussianDpEvent(sigma_p)`` (of the ideal Gaussian: the noise drawn is floating point);
* dual step, eq. (10), over all of D: clipped group sums (and, once, group counts) with
  Gaussian noise of std sigma_d times their sensitivity: a plain ``GaussianDpEvent(sigma_d)``
  (Lemma 2's q = 1). Run after every epoch but the last, plus the one count release: T events.

How fairdp's PF-LD makes these the mechanisms it releases (the sign of the violation, the
group sizes and the two groups a changed attribute touches, which the paper's eq. 8 leaves
data-dependent) is in ``fairdp.methods._lagrangian``.

Noise multiplier. The accountant wants std / sensitivity. Eqs. (8) and (10) add std
sigma_p * Delta_p (sigma_d * Delta_d) to a quantity of sensitivity Delta_p (Delta_d), so
the multipliers are sigma_p and sigma_d themselves. Lemma 1's "sigma = sigma_p Delta_p" is
the raw std; eq. (11) is written for a unit shift N(1, sigma^2), so only the ratio sigma_p
is consistent with it. Clipping bounds (C_p, C_d) therefore do not enter the accounting.

Step count. Algorithm 1 runs one primal update per mini-batch of each of the T epochs, the
last partial batch included (as ``fairdp.engine`` iterates ``range(0, n, batch_size)``):
T * ceil(n / |B|) primal steps. This is >= ceil(T n / |B|), Theorem 3's count, so the
guarantee holds under either reading. PF-LD draws its private sample by Poisson sampling, so
eq. (11) is its analysis (of the ideal Gaussian; the noise drawn is floating point); so does DP-SGD, whose every step is a Poisson sample of the
training rows at rate |B| / n (not the engine's shuffled fixed-size batches, which the
sampled Gaussian analysis would cover only heuristically).

Composition and conversion. Theorem 3 adds the RDP curves of T ceil(n/|B|) primal and T
dual steps (one ``ComposedDpEvent``). The accountant converts RDP to (eps, delta) with
Canonne-Kamath-Steinke 2020, Prop. 12, which is never larger than the Mironov 2017 Prop. 3
conversion quoted under Theorem 3 at any order, so our eps is at most the paper's.

Adjacency. PF-LD: Definition 1, one record's sensitive attribute replaced. The mechanism makes
that change add or remove one record's bounded contribution, so the SG bound for adding or
removing a record applies; dp-accounting names this relation ``REPLACE_SPECIAL`` (the record
replaced by a "special" one that contributes nothing: here, the reference group), and rows
store it as ``replace_attribute``. DP-SGD: add or remove one whole record.

Calibration. The noise search (``_smallest_sigma``) is steered by ``fairdp.privacy._rdp_guide``,
the same formulas vectorised over the orders, but every eps it reports and every step of the
search near the target is dp-accounting's, and the bracket it returns is certified by
dp-accounting at both ends.

PLD. ``accountant="pld"`` composes the same ``DpEvent``s with dp-accounting's privacy loss
distribution accountant (``dp_accounting.pld.PLDAccountant``; Koskela et al. 2020, Doroshenko
et al. 2022's "connect the dots"), which computes the (eps, delta) of the composition itself
instead of converting an RDP curve, hence a smaller eps for the same noise (measured on
Adult's shape, n 30,000, batch 256, 30 epochs: DP-SGD at sigma 1, 2.919 against RDP's 3.209;
PF-LD at sigma_p 1, sigma_d 50, 2.956 against 3.248) and a smaller calibrated noise for the
same target (DP-SGD: 0.929x RDP's sigma at eps 1, 0.962x at eps 8). Its estimate is
pessimistic (``pessimistic_estimate=True``, dp-accounting's default): every privacy loss is
rounded *up* to the grid and the probability mass truncated from the tails is counted as an
infinite loss, so the eps it reports is an upper bound on the mechanism's true eps at delta,
not an approximation of it. The grid, ``PLD_DISCRETIZATION`` = 1e-4 (dp-accounting's default),
only trades tightness against time: on the shape above the eps it reports is within 2e-5
(absolute) of the 1e-5 grid's, which costs 10x more (8.6 s against 0.7 s at sigma 1), while a
1e-3 grid is 2e-3 off, as large as the change a calibration's 0.1% noise step makes. One
evaluation takes 0.03-1.5 s there on 2 cores (more noise: less), so calibrations search from
RDP's answer (below).

Relations under PLD. The PLD accountant takes a Gaussian or Poisson-sampled Gaussian event
under ``ADD_OR_REMOVE_ONE`` (DP-SGD) and under ``REPLACE_SPECIAL`` (PF-LD) alike
(``pld_privacy_accountant.PLDAccountant._maybe_compose``), and for both builds the same pair
of privacy loss distributions, "remove" ((1 - q) N(0, s^2) + q N(1, s^2) against N(0, s^2))
and "add" (the reverse), reporting the larger eps of the two directions
(``privacy_loss_distribution.from_gaussian_mechanism``, ``_pld_for_subsampled_mechanism``:
REPLACE_SPECIAL "results in the same privacy loss distribution"). That is the sound analysis
for PF-LD: replacing a record by the "special" one that contributes nothing is, in fairdp's
mechanism, exactly adding or removing its clipped contribution (see "Adjacency"), in either
direction, so no other relation has to stand in for it; ``tests/test_privacy_pld.py`` checks
that both relations give PF-LD's event the same eps.

Calibration under PLD (``_smallest_sigma_pld``) starts from the RDP calibration's sigma (PLD's
eps is the smaller, so that sigma is nearly always within the budget and the answer a few
percent below it) and interpolates log eps in log sigma; every decision is the PLD
accountant's, so the sigma returned is certified by PLD (its eps <= the target) and the one
0.1% below it is not. The RDP path is untouched: its answers are bit for bit those before PLD.

Why dp-accounting rather than opacus: both ship the Mironov-Talwar-Zhang 2019 SG bound of
eq. (11), and opacus could take the dual step as a q = 1 step, but dp-accounting states
each step as a ``DpEvent`` composed in one accountant, is the accountant TF-Privacy
delegates to, and does not drag in a second torch-pinned training library.

Paper defaults ("Experimental Analysis"): eps = 1.0, delta = 1e-5, C_p = 10.0, C_d = 5.0.
The paper gives no batch size or epoch count for its accuracy runs; only its timing
table (Table 1) names |B| in {16, 64, 256}.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Callable
from numbers import Integral, Real
from typing import TYPE_CHECKING

from absl import logging as absl_logging

from fairdp.errors import InputError

# dp_accounting (and scipy under it) is imported where used: importing fairdp must not cost a CLI
# start or Ray worker ~2 s.
if TYPE_CHECKING:
    import dp_accounting

logger = logging.getLogger(__name__)

PFLD_EPSILON = 1.0
PFLD_DELTA = 1e-5
PFLD_CLIP_PRIMAL = 10.0
PFLD_CLIP_DUAL = 5.0

ACCOUNTANTS = ("rdp", "pld")
"""dp-accounting's accountants a study may choose (``train.accountant``): "rdp", its
``RdpAccountant`` (the default, and every committed result's), or "pld", its
``PLDAccountant`` with a pessimistic estimate (see the module docstring)."""
PLD_DISCRETIZATION = 1e-4  # the PLD grid of privacy losses (dp-accounting's default): see the module docstring

_SIGMA_RTOL = 1e-3  # relative precision of calibrated noise multipliers
# the guide's eps agrees with dp-accounting's to ~1e-12 (relative): beyond 1e-6 of the target it decides
_GUIDE_MARGIN = 1e-6


def _check_int(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise InputError(f"{name} must be an integer, got {value!r}")
    if value < low:
        raise InputError(f"{name} must be >= {low}, got {value}")
    return int(value)


def _check_real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or math.isnan(value):
        raise InputError(f"{name} must be a number, got {value!r}")
    return float(value)


def _check_sigma(name: str, value: float | None) -> float:
    """A noise multiplier: finite and >= 0; ``None`` means 0, i.e. no noise at all."""
    sigma = 0.0 if value is None else _check_real(name, value)
    if not 0 <= sigma < math.inf:
        raise InputError(f"{name} must be finite and >= 0 (0 or None: no noise), got {sigma}")
    return sigma


def _check_accountant(accountant: object) -> str:
    if isinstance(accountant, str) and accountant in ACCOUNTANTS:
        return accountant
    raise InputError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, got {accountant!r}")


def _check_delta(delta: object) -> float:
    value = _check_real("delta", delta)
    if not 0 < value < 1:
        raise InputError(f"delta must be in (0, 1), got {value}")
    return value


def _check_run(
    batch_size: object, n: object, epochs: object, delta: object
) -> tuple[int, int, int, float]:
    """Validated (batch_size, n, epochs, delta) of a PF-LD run."""
    n = _check_int("n", n, 1)
    batch_size = _check_int("batch_size", batch_size, 1)
    if batch_size > n:
        raise InputError(f"batch_size must be <= n = {n}, got {batch_size}")
    return batch_size, n, _check_int("epochs", epochs, 1), _check_delta(delta)


@contextlib.contextmanager
def quiet_accountant():
    """dp-accounting logs a warning for every RDP order whose series fails to converge (small
    orders at large q) and leaves that order out; eps is the minimum over the other orders,
    still a valid bound, so those warnings (dozens per calibration) are silenced here."""
    verbosity = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)
    try:
        yield
    finally:
        absl_logging.set_verbosity(verbosity)


def _epsilon(events: list[dp_accounting.DpEvent], delta: float,
             relation: dp_accounting.NeighboringRelation | None = None, accountant: str = "rdp") -> float:
    """eps at ``delta`` of the composition of ``events``: RDP (Mironov 2017, Prop. 1) or, for
    ``accountant="pld"``, their privacy loss distributions (pessimistic, at
    ``PLD_DISCRETIZATION``); ``relation`` defaults to ``NeighboringRelation.ADD_OR_REMOVE_ONE``."""
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    if relation is None:
        relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    if accountant == "pld":
        return pld_epsilon_of(dp_accounting.ComposedDpEvent(events), relation, delta)
    with quiet_accountant():
        accountant = RdpAccountant(neighboring_relation=relation)
        accountant.compose(dp_accounting.ComposedDpEvent(events))
        return float(accountant.get_epsilon(delta))


def pld_epsilon_of(event: dp_accounting.DpEvent, relation: dp_accounting.NeighboringRelation,
                   delta: float) -> float:
    """eps at ``delta`` of ``event`` by dp-accounting's PLD accountant: pessimistic estimate
    (an upper bound), privacy losses on a grid of ``PLD_DISCRETIZATION``."""
    from dp_accounting.pld import PLDAccountant

    accountant = PLDAccountant(relation, value_discretization_interval=PLD_DISCRETIZATION)
    accountant.compose(event)
    return float(accountant.get_epsilon(delta))


def _step_count(batch_size: int, n: int, epochs: int) -> int:
    """Steps of a run: one per mini-batch of each epoch, the last partial one included."""
    return epochs * -(-n // batch_size)


def _sampled_gaussian(sigma: float, q: float, steps: int) -> dp_accounting.DpEvent:
    import dp_accounting

    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps
    )


def gaussian_epsilon(sigma: float | None, steps: int, q: float, delta: float, accountant: str = "rdp") -> float:
    """eps of ``steps`` sampled Gaussian steps (rate ``q``, noise multiplier ``sigma``).

    This is DP-SGD's guarantee (Abadi et al. 2016; Mironov, Talwar & Zhang 2019), the
    building block of Lemmas 1 and 2; ``q = 1`` is the plain Gaussian mechanism. ``sigma``
    0 or ``None`` gives inf. ``accountant``: one of ``ACCOUNTANTS``.
    """
    sigma = _check_sigma("sigma", sigma)
    steps = _check_int("steps", steps, 1)
    q = _check_real("q", q)
    if not 0 < q <= 1:
        raise InputError(f"q must be in (0, 1], got {q}")
    return _epsilon([_sampled_gaussian(sigma, q, steps)], _check_delta(delta),
                    accountant=_check_accountant(accountant))


@functools.lru_cache(maxsize=1024)  # each row reports the eps its calibration certified: computed once
def pfld_epsilon(
    sigma_primal: float | None,
    sigma_dual: float | None,
    batch_size: int,
    n: int,
    epochs: int,
    delta: float,
    accountant: str = "rdp",
) -> float:
    """eps such that a PF-LD run is (eps, delta)-DP w.r.t. the sensitive attributes.

    Theorem 3: RDP composition of ``epochs * ceil(n / batch_size)`` primal steps (Lemma 1,
    sampled Gaussian, q = batch_size / n, multiplier ``sigma_primal``) and ``epochs`` dual
    releases (Lemma 2, Gaussian, multiplier ``sigma_dual``); see the module docstring for why
    the multipliers are sigma_p, sigma_d and for the step count. A sigma of 0 or ``None``
    means that step adds no noise, so the run is not private and eps is inf. ``accountant``
    "pld" composes the same event by privacy loss distributions (see the module docstring).
    """
    import dp_accounting

    return _epsilon([pfld_event(sigma_primal, sigma_dual, batch_size, n, epochs)], _check_delta(delta),
                    dp_accounting.NeighboringRelation.REPLACE_SPECIAL, _check_accountant(accountant))


def pfld_event(sigma_primal: float | None, sigma_dual: float | None, batch_size: int, n: int,
               epochs: int) -> dp_accounting.DpEvent:
    """The ``DpEvent`` of a PF-LD run (Theorem 3): ``epochs * ceil(n / batch_size)`` sampled
    Gaussian primal steps composed with ``epochs`` Gaussian dual steps."""
    import dp_accounting

    sigma_primal = _check_sigma("sigma_primal", sigma_primal)
    sigma_dual = _check_sigma("sigma_dual", sigma_dual)
    batch_size, n, epochs, _ = _check_run(batch_size, n, epochs, 0.5)
    primal_steps = _step_count(batch_size, n, epochs)
    return dp_accounting.ComposedDpEvent([
        _sampled_gaussian(sigma_primal, batch_size / n, primal_steps),
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma_dual), epochs),
    ])


def _bisect(within: Callable[[float], bool]) -> tuple[float, float]:
    """(lo, hi) with ``within(hi)``, not ``within(lo)`` and hi <= lo (1 + _SIGMA_RTOL), by
    geometric bisection from [0.5, 1] on a ``within`` that holds from some sigma on."""
    lo, hi = 0.5, 1.0
    while not within(hi):
        lo, hi = hi, 2 * hi
    while within(lo):
        lo, hi = lo / 2, lo
    while hi > lo * (1 + _SIGMA_RTOL):
        mid = math.sqrt(lo * hi)
        if within(mid):
            hi = mid
        else:
            lo = mid
    return lo, hi


def _smallest_sigma(epsilon_of: Callable[[float], float], target: float,
                    guide: Callable[[float], float] | None = None) -> float:
    """Smallest sigma, up to a factor 1 + _SIGMA_RTOL, with ``epsilon_of(sigma) <= target``.

    Geometric bisection on a decreasing ``epsilon_of``, keeping the invariant
    ``epsilon_of(lo) > target >= epsilon_of(hi)`` and returning ``hi``: the answer is
    rounded up, so the budget holds exactly, not approximately.

    ``guide``, a fast approximation of ``epsilon_of`` (``fairdp.privacy._rdp_guide``), takes
    the decisions it is clearly right about (more than _GUIDE_MARGIN from the target);
    ``epsilon_of`` takes the others, then certifies the bracket found, at both ends. A bracket
    that fails (a guide wrong by more than the margin) is searched again with ``epsilon_of``
    alone, so the answer is the unguided search's whenever the guide decides as it would.
    """
    epsilon_of = functools.lru_cache(maxsize=None)(epsilon_of)  # a bracket's last lo was its hi
    if guide is not None:
        def within(sigma: float) -> bool:
            approx = guide(sigma)
            if abs(approx - target) > _GUIDE_MARGIN * target:  # inf: decided; nan: not
                return approx <= target
            return epsilon_of(sigma) <= target

        lo, hi = _bisect(within)
        if epsilon_of(hi) <= target < epsilon_of(lo):
            return hi
        logger.warning("the RDP guide misled the noise search for eps %s; searching with the accountant alone",
                       target)
    return _bisect(lambda sigma: epsilon_of(sigma) <= target)[1]


def _smallest_sigma_pld(epsilon_of: Callable[[float], float], target: float, start: float) -> float:
    """Smallest sigma, up to a factor 1 + _SIGMA_RTOL, with ``epsilon_of(sigma) <= target``,
    for an ``epsilon_of`` that costs a PLD composition (0.03-1.5 s): searched from ``start``
    (the RDP-calibrated sigma, which PLD's smaller eps nearly always leaves within the budget).

    The same invariant and answer as ``_smallest_sigma``, ``epsilon_of(lo) > target >=
    epsilon_of(hi)`` and ``hi`` returned, every decision ``epsilon_of``'s own (so ``hi`` is
    certified by it); only the probes differ. The bracket is found by steps out from
    ``start`` (10%, then each the square of the last); then each probe is the secant estimate
    of where log eps meets log target (log eps is nearly linear in log sigma), through the two
    points evaluated so far whose eps is nearest the target, placed half the tolerance above
    it and followed by one a whole tolerance below: a good estimate closes the bracket with
    those two evaluations (a calibration from RDP's sigma takes 4-5 instead of bisection's
    ~12). An estimate outside the bracket, or two probes in a row that fail to halve its
    log-width, make the next probe a plain geometric bisection."""
    epsilon_of = functools.lru_cache(maxsize=None)(epsilon_of)
    seen: dict[float, float] = {}

    def within(sigma: float) -> bool:
        seen[sigma] = epsilon_of(sigma)
        return seen[sigma] <= target

    step = 1.1  # squared at each step out: a start far off costs a few evaluations, not dozens
    if within(start):
        lo, hi = start / step, start
        while within(lo):
            step *= step
            lo, hi = lo / step, lo
    else:
        lo, hi = start, start * step
        while not within(hi):
            step *= step
            lo, hi = hi, hi * step
    half, slow = math.sqrt(1 + _SIGMA_RTOL), 0
    while hi > lo * (1 + _SIGMA_RTOL):
        width, probe = math.log(hi / lo), None
        finite = sorted((abs(math.log(e / target)), s, e) for s, e in seen.items() if 0 < e < math.inf)
        if slow < 2 and len(finite) >= 2 and finite[0][2] != finite[1][2]:
            (_, s1, e1), (_, s2, e2) = finite[:2]
            guess = s1 * math.exp(math.log(s2 / s1) * math.log(target / e1) / math.log(e2 / e1))
            if lo < guess * half < hi:
                probe = guess * half
            elif lo < guess < hi:  # within half the tolerance below hi: try one tolerance below it
                probe = max(hi / (1 + _SIGMA_RTOL), math.sqrt(lo * hi))
        if probe is None:
            probe, slow = math.sqrt(lo * hi), 0
        if within(probe):
            hi = probe
            below = hi / (1 + _SIGMA_RTOL)
            if below > lo:
                if within(below):
                    hi = below
                else:
                    lo = below
        else:
            lo = probe
        slow = slow + 1 if math.log(hi / lo) > width / 2 else 0
    return hi


def _dpsgd_guide(batch_size: int, n: int, epochs: int, delta: float) -> Callable[[float], float]:
    from fairdp.privacy import _rdp_guide  # scipy: loaded by a calibration, not by importing fairdp

    q, steps = batch_size / n, _step_count(batch_size, n, epochs)
    return lambda sigma: _rdp_guide.epsilon_from_rdp(steps * _rdp_guide.sampled_gaussian_rdp(q, sigma), delta)


def _pfld_guide(sigma_dual: float, batch_size: int, n: int, epochs: int, delta: float) -> Callable[[float], float]:
    from fairdp.privacy import _rdp_guide  # scipy: loaded by a calibration, not by importing fairdp

    q, steps = batch_size / n, _step_count(batch_size, n, epochs)
    dual = epochs * _rdp_guide.sampled_gaussian_rdp(1.0, sigma_dual)
    return lambda sigma: _rdp_guide.epsilon_from_rdp(steps * _rdp_guide.sampled_gaussian_rdp(q, sigma) + dual, delta)


# Calibration is a pure function of its arguments, and a method's privacy hook and its training
# both ask for the same run's multipliers: compute each once per process.
@functools.lru_cache(maxsize=1024)
def calibrate_pfld_sigmas(
    target_eps: float,
    delta: float,
    batch_size: int,
    n: int,
    epochs: int,
    dual_share: float = 0.1,
    accountant: str = "rdp",
) -> tuple[float, float]:
    """(sigma_primal, sigma_dual) that make a PF-LD run (target_eps, delta)-DP.

    The paper fixes eps but not how it is split between its two steps, so the split is
    ours: sigma_dual is the smallest multiplier whose ``epochs`` dual steps alone cost
    ``dual_share * target_eps`` (at the same delta); sigma_primal is then the smallest
    whose composition with them (Theorem 3, :func:`pfld_epsilon`) costs ``target_eps``.
    The default share 0.1 leaves the bulk to the primal step, which runs
    ceil(n / batch_size) times as often. Both multipliers are found to a relative
    precision of 1e-3 and rounded up, hence
    ``pfld_epsilon(sigma_primal, sigma_dual, ..., accountant) <= target_eps`` always: under
    ``accountant="pld"`` both eps (the dual share's and the whole run's) are PLD's, and the
    search starts from the RDP calibration's multipliers (``_smallest_sigma_pld``).
    """
    target_eps = _check_real("target_eps", target_eps)
    if not 0 < target_eps < math.inf:
        raise InputError(f"target_eps must be finite and > 0, got {target_eps}")
    dual_share = _check_real("dual_share", dual_share)
    if not 0 < dual_share < 1:
        raise InputError(f"dual_share must be in (0, 1), got {dual_share}")
    batch_size, n, epochs, delta = _check_run(batch_size, n, epochs, delta)
    if _check_accountant(accountant) == "pld":
        rdp_primal, rdp_dual = calibrate_pfld_sigmas(target_eps, delta, batch_size, n, epochs, dual_share, "rdp")
        sigma_dual = _smallest_sigma_pld(lambda s: gaussian_epsilon(s, epochs, 1.0, delta, "pld"),
                                         dual_share * target_eps, rdp_dual)
        sigma_primal = _smallest_sigma_pld(
            lambda s: pfld_epsilon(s, sigma_dual, batch_size, n, epochs, delta, "pld"), target_eps, rdp_primal)
        return sigma_primal, sigma_dual
    sigma_dual = _smallest_sigma(
        lambda s: gaussian_epsilon(s, epochs, 1.0, delta), dual_share * target_eps
    )
    sigma_primal = _smallest_sigma(
        lambda s: pfld_epsilon(s, sigma_dual, batch_size, n, epochs, delta, accountant), target_eps,
        _pfld_guide(sigma_dual, batch_size, n, epochs, delta),
    )
    return sigma_primal, sigma_dual


@functools.lru_cache(maxsize=1024)  # each row reports the eps its calibration certified: computed once
def dpsgd_epsilon(sigma: float | None, batch_size: int, n: int, epochs: int, delta: float,
                  accountant: str = "rdp") -> float:
    """eps of a DP-SGD run: ``epochs * ceil(n / batch_size)`` sampled Gaussian steps at rate
    batch_size / n (one per mini-batch, the last partial one included, as for PF-LD), by
    ``accountant`` (one of ``ACCOUNTANTS``)."""
    batch_size, n, epochs, delta = _check_run(batch_size, n, epochs, delta)
    return gaussian_epsilon(sigma, _step_count(batch_size, n, epochs), batch_size / n, delta, accountant)


def dpsgd_event(sigma: float | None, batch_size: int, n: int, epochs: int) -> dp_accounting.DpEvent:
    """The ``DpEvent`` of a DP-SGD run: ``epochs * ceil(n / batch_size)`` sampled Gaussian steps."""
    sigma = _check_sigma("sigma", sigma)
    batch_size, n, epochs, _ = _check_run(batch_size, n, epochs, 0.5)
    return _sampled_gaussian(sigma, batch_size / n, _step_count(batch_size, n, epochs))


@functools.lru_cache(maxsize=1024)
def calibrate_dpsgd_sigma(target_eps: float, delta: float, batch_size: int, n: int, epochs: int,
                          accountant: str = "rdp") -> float:
    """Smallest noise multiplier (to 1e-3, rounded up) with
    ``dpsgd_epsilon(sigma, batch_size, n, epochs, delta, accountant) <= target_eps``; under
    "pld" searched from the RDP calibration's sigma (``_smallest_sigma_pld``)."""
    target_eps = _check_real("target_eps", target_eps)
    if not 0 < target_eps < math.inf:
        raise InputError(f"target_eps must be finite and > 0, got {target_eps}")
    batch_size, n, epochs, delta = _check_run(batch_size, n, epochs, delta)
    if _check_accountant(accountant) == "pld":
        return _smallest_sigma_pld(lambda s: dpsgd_epsilon(s, batch_size, n, epochs, delta, "pld"), target_eps,
                                   calibrate_dpsgd_sigma(target_eps, delta, batch_size, n, epochs, "rdp"))
    # the accountant passed on as the methods pass it: their eps is then the search's, from the cache
    return _smallest_sigma(lambda s: dpsgd_epsilon(s, batch_size, n, epochs, delta, accountant), target_eps,
                           _dpsgd_guide(batch_size, n, epochs, delta))


# -- DP-SGD with a noisy count from the same Poisson sample ---------------------------------------
# DPSGD-Global-Adapt (Esipova et al. 2023, Alg. 2) and DPSGD-F (Xu, Du & Wu 2021; Esipova et al.'s
# Alg. 4) release, at every step, the clipped gradient sum with Gaussian noise of multiplier
# sigma_gradient and a count (of large gradients; per group for DPSGD-F) with Gaussian noise of
# multiplier sigma_count, both computed on one Poisson sample. One record moves the sum by at most
# its clipping bound and the count vector by 1 in L2, so the pair, scaled by its noise, is one
# Gaussian mechanism of multiplier (sigma_gradient^-2 + sigma_count^-2)^-1/2 on that sample (an
# adaptive pair of Gaussians is dominated by that one Gaussian): one sampled Gaussian step, as
# dp-accounting's RDP accountant itself reduces a Poisson-sampled composition of Gaussians. The
# authors' code (layer6ai-labs/fair-dp) instead composes two separately sampled Gaussian steps,
# which under-counts a shared sample (the joint mixture's loss is the larger for q < 1).

def joint_noise_multiplier(sigma_gradient: float | None, sigma_count: float | None) -> float:
    """The noise multiplier of two Gaussian releases of one sample taken together, each noise in
    units of its own sensitivity (a gradient sum and a count; DP-FERMI's theta and W sums):
    (sigma_gradient^-2 + sigma_count^-2)^-1/2; 0 (no privacy) when either is 0 or None."""
    sigma_gradient = _check_sigma("sigma_gradient", sigma_gradient)
    sigma_count = _check_sigma("sigma_count", sigma_count)
    if sigma_gradient == 0 or sigma_count == 0:
        return 0.0
    return 1.0 / math.sqrt(sigma_gradient ** -2 + sigma_count ** -2)


def adaptive_clipping_event(sigma_gradient: float | None, sigma_count: float | None, batch_size: int, n: int,
                            epochs: int) -> dp_accounting.DpEvent:
    """The ``DpEvent`` of a DPSGD-Global-Adapt or DPSGD-F run: ``epochs * ceil(n / batch_size)``
    Poisson-sampled Gaussian steps (rate batch_size / n) of the joint multiplier of the gradient
    sum and the count released from each sample (``joint_noise_multiplier``)."""
    batch_size, n, epochs, _ = _check_run(batch_size, n, epochs, 0.5)
    return _sampled_gaussian(joint_noise_multiplier(sigma_gradient, sigma_count), batch_size / n,
                             _step_count(batch_size, n, epochs))


@functools.lru_cache(maxsize=1024)  # each row reports the eps its calibration certified: computed once
def adaptive_clipping_epsilon(sigma_gradient: float | None, sigma_count: float | None, batch_size: int, n: int,
                              epochs: int, delta: float, accountant: str = "rdp") -> float:
    """eps at ``delta`` of ``adaptive_clipping_event`` by ``accountant`` (one of ``ACCOUNTANTS``)."""
    return dpsgd_epsilon(joint_noise_multiplier(sigma_gradient, sigma_count), batch_size, n, epochs, delta,
                         accountant)


@functools.lru_cache(maxsize=1024)
def calibrate_adaptive_clipping_sigmas(target_eps: float, delta: float, batch_size: int, n: int, epochs: int,
                                       count_ratio: float, accountant: str = "rdp") -> tuple[float, float]:
    """(sigma_gradient, sigma_count = count_ratio * sigma_gradient) whose joint multiplier is at
    least DP-SGD's calibrated sigma for (target_eps, delta) (``calibrate_dpsgd_sigma``), so that
    ``adaptive_clipping_epsilon(...) <= target_eps``: the run spends exactly DP-SGD's budget,
    its gradient noise sqrt(1 + count_ratio^-2) times DP-SGD's multiplier."""
    count_ratio = _check_real("count_ratio", count_ratio)
    if not 0 < count_ratio < math.inf:
        raise InputError(f"count_ratio must be finite and > 0, got {count_ratio}")
    joint = calibrate_dpsgd_sigma(target_eps, delta, batch_size, n, epochs, accountant)
    sigma_gradient = joint * math.sqrt(1 + count_ratio ** -2)
    # rounding may leave the joint multiplier an ulp below DP-SGD's certified one: step up until it is not
    while joint_noise_multiplier(sigma_gradient, count_ratio * sigma_gradient) < joint:
        sigma_gradient = math.nextafter(sigma_gradient, math.inf)
    return sigma_gradient, count_ratio * sigma_gradient


# -- DP-FERMI (Lowy, Gupta & Razaviyayn 2023) -------------------------------------------------
# Each step releases, on one Poisson sample (rate q = B / n), the clipped theta-gradient sum plus
# N(0, (sigma_theta C_theta)^2) and the clipped W-gradient sum plus N(0, (sigma_w C_w)^2); once,
# before training, the training rows' group counts (eo: per label) plus N(0, sigma_count^2).
# Adding or removing one record moves the first two by at most C_theta and C_w and one count by
# 1: the step is one Gaussian mechanism on the concatenation, whose multiplier is
# ``joint_noise_multiplier`` (rescale each block by 1 / (sigma_i C_i): unit noise, and the
# record's shift has norm at most sqrt(sigma_theta^-2 + sigma_w^-2)).

DP_FERMI_COUNT_SHARE = 0.1  # the eps share the one count release gets in the calibration (as PF-LD's dual share)


def dp_fermi_event(sigma_theta: float | None, sigma_w: float | None, sigma_count: float | None,
                   batch_size: int, n: int, epochs: int) -> dp_accounting.DpEvent:
    """The ``DpEvent`` of a DP-FERMI run: the count release, a ``GaussianDpEvent(sigma_count)``,
    composed with ``epochs * ceil(n / batch_size)`` Poisson-sampled Gaussian steps (rate
    batch_size / n) of multiplier ``joint_noise_multiplier(sigma_theta, sigma_w)``."""
    import dp_accounting

    joint = joint_noise_multiplier(sigma_theta, sigma_w)
    sigma_count = _check_sigma("sigma_count", sigma_count)
    batch_size, n, epochs, _ = _check_run(batch_size, n, epochs, 0.5)
    return dp_accounting.ComposedDpEvent([
        dp_accounting.GaussianDpEvent(sigma_count),
        _sampled_gaussian(joint, batch_size / n, _step_count(batch_size, n, epochs)),
    ])


@functools.lru_cache(maxsize=1024)  # each row reports the eps its calibration certified: computed once
def dp_fermi_epsilon(sigma_theta: float | None, sigma_w: float | None, sigma_count: float | None,
                     batch_size: int, n: int, epochs: int, delta: float, accountant: str = "rdp") -> float:
    """eps at ``delta`` of a DP-FERMI run (``dp_fermi_event``) for adding or removing one record,
    by ``accountant`` (one of ``ACCOUNTANTS``); inf if any multiplier is 0 or None."""
    return _epsilon([dp_fermi_event(sigma_theta, sigma_w, sigma_count, batch_size, n, epochs)],
                    _check_delta(delta), accountant=_check_accountant(accountant))


def _dp_fermi_guide(sigma_count: float, batch_size: int, n: int, epochs: int,
                    delta: float) -> Callable[[float], float]:
    from fairdp.privacy import _rdp_guide  # scipy: loaded by a calibration, not by importing fairdp

    q, steps = batch_size / n, _step_count(batch_size, n, epochs)
    counts = _rdp_guide.sampled_gaussian_rdp(1.0, sigma_count)
    return lambda sigma: _rdp_guide.epsilon_from_rdp(
        steps * _rdp_guide.sampled_gaussian_rdp(q, sigma / math.sqrt(2)) + counts, delta)


@functools.lru_cache(maxsize=1024)
def calibrate_dp_fermi_sigmas(target_eps: float, delta: float, batch_size: int, n: int, epochs: int,
                              count_share: float = DP_FERMI_COUNT_SHARE,
                              accountant: str = "rdp") -> tuple[float, float, float]:
    """(sigma_theta, sigma_w, sigma_count) that make a DP-FERMI run (target_eps, delta)-DP.

    sigma_count is the smallest multiplier whose count release alone costs ``count_share *
    target_eps``; sigma_theta = sigma_w = sigma (the paper's noise has one multiplier for both
    steps: its sigma_theta^2 / sigma_w^2 is the ratio of their sensitivities) is then the
    smallest whose composition with it (``dp_fermi_epsilon``) costs ``target_eps``. Both to
    0.1% and rounded up, so ``dp_fermi_epsilon(*result, ..., accountant) <= target_eps``;
    under "pld" both searches are PLD's, started from the RDP calibration's answers."""
    target_eps = _check_real("target_eps", target_eps)
    if not 0 < target_eps < math.inf:
        raise InputError(f"target_eps must be finite and > 0, got {target_eps}")
    count_share = _check_real("count_share", count_share)
    if not 0 < count_share < 1:
        raise InputError(f"count_share must be in (0, 1), got {count_share}")
    batch_size, n, epochs, delta = _check_run(batch_size, n, epochs, delta)
    if _check_accountant(accountant) == "pld":
        rdp_sigma, _, rdp_count = calibrate_dp_fermi_sigmas(target_eps, delta, batch_size, n, epochs,
                                                            count_share, "rdp")
        sigma_count = _smallest_sigma_pld(lambda s: gaussian_epsilon(s, 1, 1.0, delta, "pld"),
                                          count_share * target_eps, rdp_count)
        sigma = _smallest_sigma_pld(
            lambda s: dp_fermi_epsilon(s, s, sigma_count, batch_size, n, epochs, delta, "pld"), target_eps,
            rdp_sigma)
        return sigma, sigma, sigma_count
    sigma_count = _smallest_sigma(lambda s: gaussian_epsilon(s, 1, 1.0, delta), count_share * target_eps)
    sigma = _smallest_sigma(lambda s: dp_fermi_epsilon(s, s, sigma_count, batch_size, n, epochs, delta, accountant),
                            target_eps, _dp_fermi_guide(sigma_count, batch_size, n, epochs, delta))
    return sigma, sigma, sigma_count
