"""The guarantee of releasing what a study selected: tuning's privacy cost.

A study trains many configs on the same data and releases the one a selection picks; the
choice depends on every trained config, so the release costs more than one config's eps.
Two bounds, both through Google's ``dp-accounting`` RDP accountant:

* fixed count: composition of every config the selection looked at (``composed_epsilon``),
  valid for any selection rule;
* random count (Papernot & Steinke, "Hyperparameter Tuning with Renyi Differential
  Privacy", ICLR 2022): run K ~ Poisson(mu) or a truncated negative binomial trials, each a
  config drawn uniformly from the grid and trained with fresh randomness, and release the
  best by a fixed total order on outputs. ``repeat_and_select_epsilon`` is dp-accounting's
  ``RepeatAndSelectDpEvent`` bound (Theorems 2 and 6). A trial is "draw a config, train
  it", whose RDP at each order is at most the largest of the grid's configs (joint
  quasi-convexity of Renyi divergence), so the repeated event's curve is the pointwise
  maximum of the grid's curves (with one distinct event, that event's curve: what the
  accountant computes for a ``RepeatAndSelectDpEvent``, to the bit).

DP-SGD's and PF-LD's events are Gaussian steps; their curves are summed as the accountant sums
them, from each distinct step's curve computed once per process (``rdp_curve``). The fixed-count
bound may instead compose the events' privacy loss distributions (``composed_epsilon(...,
accountant="pld")``, dp-accounting's ``PLDAccountant``, the relation as below: it builds the same
add/remove distributions for REPLACE_SPECIAL as for ADD_OR_REMOVE_ONE, see
``fairdp.privacy._accounting``); the random-count bound is RDP's only (dp-accounting's PLD
accountant has no repeat-and-select).

Events are stored with each result row as JSON (``event_to_json``), with the neighbouring
relation the method's guarantee is stated under (DP-SGD: add/remove one record; PF-LD: one
record's attribute replaced, ``replace_attribute``; randomized response on an attribute:
replace one).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import attr
import numpy as np

from fairdp.privacy._accounting import (
    _check_accountant,
    _check_delta,
    pld_epsilon_of,
    quiet_accountant,
)

# dp_accounting (and scipy under it) is imported where used: importing fairdp must not cost a CLI
# start or Ray worker ~2 s
if TYPE_CHECKING:
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

RELATION_NAMES = ("add_or_remove_one", "replace_one", "replace_attribute")
"""The neighbouring relations rows state their guarantees under."""


@functools.cache
def _relations() -> dict[str, dp_accounting.NeighboringRelation]:
    """Each of ``RELATION_NAMES`` as dp-accounting's ``NeighboringRelation``."""
    import dp_accounting

    rel = dp_accounting.NeighboringRelation
    # "replace_attribute": one record's sensitive attribute changes (Tran et al.'s Definition 1) in a
    # mechanism built so that the change adds or removes one bounded contribution (fairdp's PF-LD):
    # accounted as dp-accounting's REPLACE_SPECIAL, the relation whose Poisson-sampled Gaussian bound
    # is the add/remove one, with each step's multiplier taken against that contribution's bound.
    return dict(zip(RELATION_NAMES, (rel.ADD_OR_REMOVE_ONE, rel.REPLACE_ONE, rel.REPLACE_SPECIAL)))


@functools.cache
def _orders() -> np.ndarray:
    """The RDP orders every curve is computed at (dp-accounting's defaults)."""
    from dp_accounting.rdp import rdp_privacy_accountant

    return np.asarray(rdp_privacy_accountant.DEFAULT_RDP_ORDERS, dtype=np.float64)


COUNTS = ("poisson", "truncated_negative_binomial")
"""Trial-count distributions a study may draw (``tuning.count``); geometric and logarithmic
are the truncated negative binomial at shape 1 and 0."""


# -- events as JSON ------------------------------------------------------------------------------

def event_to_json(event: dp_accounting.DpEvent, relation: str) -> str:
    """``event`` and its neighbouring relation as one JSON object (classes by name)."""
    if relation not in RELATION_NAMES:
        raise ValueError(f"unknown neighbouring relation {relation!r}; one of {sorted(RELATION_NAMES)}")
    return json.dumps({"relation": relation, "event": _encode(event)}, sort_keys=True, separators=(",", ":"))


def event_from_json(text: str) -> tuple[dp_accounting.DpEvent, str]:
    """(event, relation) back from ``event_to_json``."""
    blob = json.loads(text)
    return _decode(blob["event"]), blob["relation"]


def _encode(value):
    import dp_accounting

    if isinstance(value, dp_accounting.DpEvent):
        fields = {f.name: _encode(getattr(value, f.name)) for f in attr.fields(type(value))}
        return {"class": type(value).__name__, **fields}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}
    return value


def _decode(value):
    from dp_accounting import dp_event as dp_event_module

    if isinstance(value, dict) and "class" in value:
        cls = getattr(dp_event_module, value["class"])
        return cls(**{k: _decode(v) for k, v in value.items() if k != "class"})
    if isinstance(value, dict) and set(value) == {"float"}:
        return float(value["float"])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


# -- bounds --------------------------------------------------------------------------------------

def _accountant(relation: str) -> RdpAccountant:
    from dp_accounting.rdp import RdpAccountant

    if relation not in RELATION_NAMES:
        raise ValueError(f"unknown neighbouring relation {relation!r}")
    return RdpAccountant(_orders(), _relations()[relation])


@functools.lru_cache(maxsize=4096)
def _step_rdp(q: float, sigma: float) -> np.ndarray:
    """dp-accounting's RDP of one Gaussian step, Poisson-sampled at rate ``q`` (1: every record),
    at ``ORDERS``: the function its accountant adds to its curve for such a step, computed once
    per process (a study's configs share a few (q, sigma), its seeds share all of them)."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdp_module

    with quiet_accountant():
        curve = rdp_module._compute_rdp_poisson_subsampled_gaussian(q, sigma, _orders())
    curve.setflags(write=False)
    return curve


@functools.lru_cache(maxsize=4096)
def _leaf_rdp(event: dp_accounting.DpEvent, relation: str) -> np.ndarray:
    """dp-accounting's RDP of one leaf event (no composition inside: a randomized response, a
    Laplace step, a repeat-and-select) at ``ORDERS``: its accountant's curve after composing
    the event once, ``0 + 1 * f(event)``, which is ``f(event)`` to the bit; computed once per
    process (a study's rows repeat a few events thousands of times)."""
    curve = _accountant_curve(event, relation)
    curve.setflags(write=False)
    return curve


def _accountant_curve(event: dp_accounting.DpEvent, relation: str) -> np.ndarray:
    """The RDP curve of dp-accounting's accountant after composing ``event`` (raises what it raises)."""
    with quiet_accountant():
        accountant = _accountant(relation)
        accountant.compose(event)
        return np.array(accountant._rdp, dtype=np.float64)  # the accountant exposes no getter


def _leaf_steps(event: dp_accounting.DpEvent, relation: str, count: int = 1) -> list[tuple] | None:
    """``event``'s leaves as (count, curve) in the order dp-accounting's RDP accountant visits
    them (each leaf adds ``count * f(leaf)`` to its curve), Gaussian steps from ``_step_rdp``,
    any other leaf from ``_leaf_rdp``; None where the accountant itself must decide (a sampled
    step the relation does not allow, an event it may refuse)."""
    from dp_accounting import dp_event as ev

    if isinstance(event, ev.NoOpDpEvent):
        return []
    if isinstance(event, ev.SelfComposedDpEvent):
        return _leaf_steps(event.event, relation, event.count * count)
    if isinstance(event, ev.ComposedDpEvent):
        steps = [_leaf_steps(e, relation, count) for e in event.events]
        return None if any(s is None for s in steps) else [step for s in steps for step in s]
    if isinstance(event, ev.GaussianDpEvent):
        return [(count, _step_rdp(1.0, event.noise_multiplier))]
    if isinstance(event, ev.PoissonSampledDpEvent):
        if isinstance(event.event, ev.GaussianDpEvent) and relation in ("add_or_remove_one", "replace_attribute"):
            return [(count, _step_rdp(event.sampling_probability, event.event.noise_multiplier))]
        return None
    if isinstance(event, (ev.RandomizedResponseDpEvent, ev.LaplaceDpEvent, ev.RepeatAndSelectDpEvent)):
        try:
            return [(count, _leaf_rdp(event, relation))]
        except Exception:  # noqa: BLE001 - refused or unhashable: the accountant says why
            return None
    return None


def rdp_curve(event: dp_accounting.DpEvent, relation: str) -> np.ndarray:
    """RDP of ``event`` at each of ``ORDERS``, as dp-accounting's accountant composes it.

    The accountant adds ``count * f(leaf)`` to its curve for every leaf of a composition, in
    its traversal order; so does this, from each leaf's curve computed once per process
    (``_step_rdp`` for DP-SGD's and PF-LD's Gaussian steps, ``_leaf_rdp`` for randomized
    response, Laplace and repeat-and-select), which makes the curve the accountant's to the
    bit. Anything else goes through the accountant itself."""
    if relation not in RELATION_NAMES:
        raise ValueError(f"unknown neighbouring relation {relation!r}")
    steps = _leaf_steps(event, relation)
    if steps is None:
        return _accountant_curve(event, relation)
    rdp = np.zeros_like(_orders(), dtype=np.float64)
    for count, curve in steps:
        rdp += count * curve
    return rdp


def composed_epsilon(events: list[dp_accounting.DpEvent], relation: str, delta: float,
                     accountant: str = "rdp") -> float:
    """eps at ``delta`` of running every event on the same data: RDP composition, or with
    ``accountant="pld"`` dp-accounting's PLD accountant (pessimistic estimate, an upper bound;
    ``fairdp.privacy._accounting.pld_epsilon_of``), which raises dp-accounting's
    ``UnsupportedEventError`` for an event it has no distribution of (a repeat-and-select)."""
    import dp_accounting

    if not events:
        raise ValueError("composed_epsilon: no events")
    if _check_accountant(accountant) == "pld":
        if relation not in RELATION_NAMES:
            raise ValueError(f"unknown neighbouring relation {relation!r}")
        return pld_epsilon_of(dp_accounting.ComposedDpEvent(list(events)), _relations()[relation],
                              _check_delta(delta))
    return epsilon_of_rdp(rdp_curve(dp_accounting.ComposedDpEvent(list(events)), relation), delta)


def _repeat_and_select_curve(events: list[dp_accounting.DpEvent], relation: str, mean: float,
                             shape: float, caller: str) -> np.ndarray:
    """RDP at ``ORDERS`` of a random search over configs with ``events`` (see the module
    docstring): dp-accounting's repeat-and-select function of the pointwise largest curve, as
    its accountant applies it to a ``RepeatAndSelectDpEvent``'s inner event."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdp_module

    distinct = {event_to_json(e, relation): e for e in events}
    if not distinct:
        raise ValueError(f"{caller}: no events")
    inner = np.max([rdp_curve(e, relation) for e in distinct.values()], axis=0)
    return np.asarray(rdp_module._compute_rdp_repeat_and_select(_orders(), inner, float(mean), float(shape)),
                      dtype=np.float64)


def repeat_and_select_epsilon(events: list[dp_accounting.DpEvent], relation: str, delta: float,
                              mean: float, shape: float) -> float:
    """eps at ``delta`` of Papernot & Steinke's random search: K trials (mean ``mean``; shape
    inf: Poisson, 1: geometric, 0: logarithmic, else truncated negative binomial), each a
    config drawn uniformly from those whose events are ``events`` and trained afresh, and
    release of the best by a fixed total order on outputs."""
    delta = _check_delta(delta)
    return epsilon_of_rdp(_repeat_and_select_curve(events, relation, mean, shape, "repeat_and_select_epsilon"),
                          delta)


def repeat_and_select_rdp(events: list[dp_accounting.DpEvent], relation: str, mean: float,
                          shape: float) -> np.ndarray:
    """RDP at each of ``ORDERS`` of one ``repeat_and_select_epsilon`` release: curves of
    releases on the same data add (several seeds' selections, each a best-of)."""
    return _repeat_and_select_curve(events, relation, mean, shape, "repeat_and_select_rdp")


def epsilon_of_rdp(rdp: np.ndarray, delta: float) -> float:
    """eps at ``delta`` of an RDP curve at ``ORDERS`` (dp-accounting's conversion, as its
    accountant's ``get_epsilon``)."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdp_module

    return float(rdp_module.compute_epsilon(_orders(), np.asarray(rdp, dtype=np.float64), _check_delta(delta))[0])


# -- the random trial count ---------------------------------------------------------------------

@dataclass(frozen=True)
class TrialCount:
    """The distribution of a study's number of trials per run (``tuning:`` in a spec)."""

    count: str            # one of COUNTS
    mean: float           # >= 1 (Poisson: > 0)
    shape: float = math.inf  # the truncated negative binomial's eta; inf for Poisson

    def __post_init__(self):
        if self.count not in COUNTS:
            raise ValueError(f"count must be one of {COUNTS}, got {self.count!r}")
        if self.count == "poisson" and self.shape != math.inf:
            raise ValueError("a Poisson count has no shape")

    def gamma(self) -> float:
        """The truncated negative binomial's halting probability gamma for ``mean``."""
        return truncated_negative_binomial_gamma(self.shape, self.mean)

    def draw(self, rng: np.random.Generator) -> int:
        """One trial count: Poisson(mean), or Papernot & Steinke's Definition 1 (a negative
        binomial NB(eta, gamma) conditioned on K >= 1; logarithmic at eta = 0)."""
        if self.count == "poisson":
            return int(rng.poisson(self.mean))
        gamma = self.gamma()
        if gamma >= 1:
            return 1
        if self.shape == 0:
            return int(rng.logseries(1 - gamma))
        untruncated_positive = -math.expm1(self.shape * math.log(gamma))  # P(NB >= 1) = 1 - gamma^eta
        if untruncated_positive < REJECTION_MIN_ACCEPTANCE:
            return _truncated_negative_binomial_by_inversion(self.shape, gamma, untruncated_positive, rng)
        while True:
            k = int(rng.negative_binomial(self.shape, gamma))
            if k >= 1:
                return k

    def to_dict(self) -> dict:
        return {"count": self.count, "mean": self.mean,
                "shape": None if self.shape == math.inf else self.shape}

    def describe(self) -> str:
        if self.count == "poisson":
            return f"Poisson, mean {self.mean:g}"
        return f"truncated negative binomial, mean {self.mean:g}, shape {self.shape:g}"


def trial_count_from_dict(d: dict) -> TrialCount:
    shape = d.get("shape")
    return TrialCount(d["count"], float(d["mean"]), math.inf if shape is None else float(shape))


# Drawing NB(eta, gamma) until it is >= 1 takes 1 / (1 - gamma^eta) draws on average: fine for the
# shapes and means studies use, unbounded as the mean nears 1 or eta nears 0; there, inversion.
REJECTION_MIN_ACCEPTANCE = 0.01


_MAX_CHUNK = 1 << 20
"""The most pmf terms the inversion sampler holds at once: a tail of billions of terms (a mean
of 1e6 at shape 1e-6) is summed in bounded memory, not in one array."""


def _truncated_negative_binomial_by_inversion(shape: float, gamma: float, untruncated_positive: float,
                                              rng: np.random.Generator) -> int:
    """The smallest k >= 1 whose CDF under Definition 1 reaches a uniform u, the pmf summed in
    growing chunks. Where this is used the pmf falls from k = 1 (it can only rise while
    (eta - 1)(1 - gamma) > gamma, which needs 1 - gamma^eta near 1), so a chunk that adds nothing
    ends the support as float sees it; a u above that total (rounding, below 1e-12) is redrawn,
    which samples the computed pmf exactly."""
    from scipy.special import gammaln

    log_scale = shape * math.log(gamma) - math.log(untruncated_positive) - math.lgamma(shape)
    log_fail = math.log1p(-gamma)
    while True:
        u, total, first, size = rng.random(), 0.0, 1, 64  # most draws end in the first chunk: start small
        while True:
            k = np.arange(first, first + size, dtype=np.float64)
            pmf = np.exp(gammaln(k + shape) - gammaln(k + 1) + k * log_fail + log_scale)
            cdf = total + np.cumsum(pmf)
            i = int(np.searchsorted(cdf, u, side="left"))
            if i < size:
                return first + i
            if cdf[-1] == total:
                break  # u fell in the rounding gap above the computed total: draw it again
            total, first, size = float(cdf[-1]), first + size, min(size * 2, _MAX_CHUNK)


def truncated_negative_binomial_mean(gamma: float, shape: float) -> float:
    """E[K] of Definition 1: eta (1/gamma - 1) / (1 - gamma^eta); 1/gamma at eta = 1 and
    (1/gamma - 1) / log(1/gamma) at eta = 0 (the logarithmic distribution)."""
    if gamma == 1:
        return 1.0
    if shape == 0:
        return (1 / gamma - 1) / math.log(1 / gamma)
    # 1 - gamma^eta as -expm1(eta log gamma): the plain difference rounds to 0 as gamma^eta nears 1
    return shape * (1 / gamma - 1) / -math.expm1(shape * math.log(gamma))


def truncated_negative_binomial_gamma(shape: float, mean: float) -> float:
    """gamma in (0, 1] whose ``truncated_negative_binomial_mean`` is ``mean`` (the mean falls as
    gamma grows), by bisection to 1e-12; the smaller end, as dp-accounting rounds."""
    if mean <= 1:
        return 1.0
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        if truncated_negative_binomial_mean(mid, shape) < mean:
            hi = mid
        else:
            lo = mid
    return lo
