"""A private pick of the released config: the validation counts a selection reads, released
with discrete Gaussian noise, and its accounting (pure maths and an exact sampler).

A selection (the relaxation-threshold pick, a Pareto front, a best-of) reads each config's
validation accuracy and fairness gaps, and every one of them is a function of the config's
validation counts per (group, y, y_pred) (``valid_confusion``). Releasing those counts with
noise and selecting from the noisy ones makes the pick, and every metric computed from them,
post-processing of one mechanism: whatever the selection rule.

The mechanism. Each of the K configs' G x C x C counts gets independent noise drawn from the
discrete Gaussian N_Z(0, sigma^2), P(Z = z) proportional to exp(-z^2 / (2 sigma^2)) on the
integers (Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy",
NeurIPS 2020). Adding or removing one validation record changes one count of every config
by 1 (the record's cell: its group, label and that config's prediction); replacing one, or
one record's attribute (PF-LD's relation), moves it between two cells of every config, two
counts by 1 each. So ``cells`` counts change by 1 each: K under add/remove, 2K under a
replacement (``count_cells``). The noises are independent, so the Renyi divergence of the
released vectors is the sum over the changed counts of one count's, and one integer count
moved by 1 under N_Z(0, sigma^2) has Renyi divergence at most alpha / (2 sigma^2) at every
order alpha (their Proposition 5: the continuous Gaussian's); the release is the Gaussian
mechanism's RDP at multiplier sigma / sqrt(cells), dp-accounting's
``GaussianDpEvent(sigma / sqrt(cells))`` (``count_release_event``). Integers out, integers
in: no floating-point gap (Mironov 2012) to account for.

The sampler (``discrete_gaussian``) is the paper's Algorithm 3 (a discrete Laplace proposal
of scale t = floor(sigma) + 1, Algorithm 2, accepted with probability exp(-(|y| - sigma^2 /
t)^2 / (2 sigma^2))), every Bernoulli(exp(-gamma)) drawn by their Algorithm 1 in exact
rational arithmetic from uniform integers: the output's law is N_Z(0, sigma^2) exactly, sigma^2
being the float sigma's exact square.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from fairdp.errors import InputError
from fairdp.privacy._accounting import PFLD_DELTA, _check_delta
from fairdp.privacy._release import composed_epsilon


@dataclass(frozen=True)
class PrivateSelection:
    """A private selection's settings: ``eps`` at ``delta`` for releasing one run's validation
    counts (the selection's reads), composed with its training in ``private_released``;
    ``seed`` the noise's stream (None: the OS's entropy, for a release for real)."""

    eps: float
    delta: float = PFLD_DELTA
    seed: int | None = 0

    def __post_init__(self):
        if isinstance(self.eps, bool) or not isinstance(self.eps, (int, float)) or not math.isfinite(self.eps) \
                or self.eps <= 0:
            raise InputError(f"selection.private.eps: must be a finite number > 0, got {self.eps!r}")
        if isinstance(self.delta, bool) or not isinstance(self.delta, (int, float)) or not 0 < self.delta < 1:
            raise InputError(f"selection.private.delta: must be in (0, 1), got {self.delta!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise InputError(f"selection.private.seed: must be an integer, got {self.seed!r}")

    def __str__(self) -> str:
        seed = "the OS's entropy" if self.seed is None else f"seed {self.seed}"
        return f"eps {self.eps:g} at delta {self.delta:g} for the validation counts ({seed})"

    def to_dict(self) -> dict:
        return {"eps": float(self.eps), "delta": float(self.delta), "seed": self.seed}

    @classmethod
    def from_dict(cls, d: dict, path: str = "selection.private") -> PrivateSelection:
        """From a study file's ``selection.private`` mapping (``eps``; ``delta``, ``seed`` optional),
        every problem an ``InputError`` naming the key."""
        if not isinstance(d, dict):
            raise InputError(f"{path}: must be a mapping with eps (and optionally delta, seed), got {d!r}")
        unknown = sorted(set(d) - {"eps", "delta", "seed"})
        if unknown:
            raise InputError(f"{path}.{unknown[0]}: unknown key; known: eps, delta, seed")
        if "eps" not in d:
            raise InputError(f"{path}.eps: required (the eps of releasing the validation counts)")
        return cls(d["eps"], d.get("delta", PFLD_DELTA), d.get("seed", 0))


COUNT_CELLS_PER_CONFIG = {"add_or_remove_one": 1, "replace_one": 2, "replace_attribute": 2}
"""Counts of one config that one validation record changes (by 1 each), per neighbouring relation."""


def count_cells(relation: str, configs: int) -> int:
    """Counts changed by 1 when one validation record changes under ``relation``, over ``configs``
    configs' validation counts (K under add/remove, 2K under a replacement)."""
    if relation not in COUNT_CELLS_PER_CONFIG:
        raise ValueError(f"unknown neighbouring relation {relation!r}; one of {sorted(COUNT_CELLS_PER_CONFIG)}")
    if isinstance(configs, bool) or not isinstance(configs, (int, np.integer)) or configs < 1:
        raise ValueError(f"configs: expected an integer >= 1, got {configs!r}")
    return COUNT_CELLS_PER_CONFIG[relation] * int(configs)


def count_release_event(sigma: float, cells: int):
    """dp-accounting's event of releasing counts with N_Z(0, sigma^2) noise each when one record
    moves ``cells`` of them by 1: the Gaussian mechanism at multiplier sigma / sqrt(cells)."""
    import dp_accounting  # imported here: it pulls in scipy (~2 s per fairdp start)

    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma: expected a finite number > 0, got {sigma!r}")
    if isinstance(cells, bool) or not isinstance(cells, (int, np.integer)) or cells < 1:
        raise ValueError(f"cells: expected an integer >= 1, got {cells!r}")
    return dp_accounting.GaussianDpEvent(float(sigma) / math.sqrt(int(cells)))


def gaussian_multiplier(eps: float, delta: float) -> float:
    """The smallest noise multiplier (to 1e-9 relative) whose Gaussian mechanism is (eps, delta)-DP
    by dp-accounting's RDP accountant, what every other composition here uses."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps: expected a finite number > 0, got {eps!r}")
    delta = _check_delta(delta)
    import dp_accounting  # imported here: it pulls in scipy (~2 s per fairdp start)

    def eps_of(m: float) -> float:
        return composed_epsilon([dp_accounting.GaussianDpEvent(m)], "add_or_remove_one", delta)

    lo, hi = 1e-3, 1.0
    while eps_of(hi) > eps:
        lo, hi = hi, hi * 2
        if hi > 1e12:
            raise ValueError(f"eps {eps!r}: no noise multiplier below 1e12 reaches it at delta {delta!r}")
    while eps_of(lo) <= eps:
        lo /= 2
        if lo < 1e-12:
            return hi
    while hi - lo > 1e-9 * hi:  # eps_of decreases in m: keep eps_of(hi) <= eps
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if eps_of(mid) <= eps else (mid, hi)
    return hi


def count_sigma(eps: float, delta: float, cells: int) -> float:
    """The discrete Gaussian's sigma that makes a release moving ``cells`` counts (eps, delta)-DP."""
    return gaussian_multiplier(eps, delta) * math.sqrt(cells)


# -- the exact sampler ------------------------------------------------------------------------------

def _bernoulli(rng: random.Random, p: Fraction) -> bool:
    return rng.randrange(p.denominator) < p.numerator


def _bernoulli_exp_at_most_one(rng: random.Random, gamma: Fraction) -> bool:
    """Bernoulli(exp(-gamma)) for 0 <= gamma <= 1 (Algorithm 1, first part): the parity of the
    first k with a failed Bernoulli(gamma / k)."""
    k = 1
    while _bernoulli(rng, gamma / k):
        k += 1
    return k % 2 == 1


def _bernoulli_exp(rng: random.Random, gamma: Fraction) -> bool:
    """Bernoulli(exp(-gamma)) for gamma >= 0 (Algorithm 1): exp(-1) per whole unit, then the rest."""
    while gamma > 1:
        if not _bernoulli_exp_at_most_one(rng, Fraction(1)):
            return False
        gamma -= 1
    return _bernoulli_exp_at_most_one(rng, gamma)


def _discrete_laplace(rng: random.Random, t: int) -> int:
    """P(Y = y) proportional to exp(-|y| / t) (Algorithm 2)."""
    while True:
        u = rng.randrange(t)
        if not _bernoulli_exp(rng, Fraction(u, t)):
            continue
        v = 0
        while _bernoulli_exp(rng, Fraction(1)):
            v += 1
        x = u + t * v
        negative = rng.randrange(2) == 1
        if negative and x == 0:
            continue
        return -x if negative else x


def discrete_gaussian(sigma: float, size: int, rng: random.Random) -> np.ndarray:
    """``size`` independent draws of N_Z(0, sigma^2) (int64), sigma^2 the float's exact square
    (Algorithm 3, exact; ``rng`` supplies uniform integers only)."""
    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma: expected a finite number > 0, got {sigma!r}")
    sigma2 = Fraction(sigma) ** 2
    t = math.floor(Fraction(sigma)) + 1
    out = np.empty(int(size), dtype=np.int64)
    for i in range(out.size):
        while True:
            y = _discrete_laplace(rng, t)
            if _bernoulli_exp(rng, (abs(y) - sigma2 / t) ** 2 / (2 * sigma2)):
                out[i] = y
                break
    return out
