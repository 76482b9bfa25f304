"""Private reductions (Mozannar, Ohannessian & Srebro 2020, "Fair learning with private
demographic data"; Tran et al.'s model "M"): the learner never sees the sensitive attribute,
only its k-ary randomized response, and runs the reductions of ``reductions`` on it with the
constraint slack corrected for the known flip rates.

What is implemented, precisely:

1. Every training row releases Z = A with probability pi = e^eps / (e^eps + k - 1), else one
   of the k - 1 other groups uniformly (probability q = 1 / (e^eps + k - 1) each). Since
   pi / q = e^eps, this is eps-local DP for A (Kairouz et al.'s k-RR, Mozannar et al.'s
   mechanism); the features and labels are public, as in Tran et al.'s setting.
2. Because the noise is independent of (X, Y, h) given A, for any randomized classifier h
   with g = h (dp, eo) or g = 1[h != y] (ap), any event E (everything, or Y = y for eo) and
   any group b, with r_b = P(Z=b | E) = q + (pi - q) P(A=b | E):

       E[g | Z=b, E] - E[g | E] = kappa_b * (E[g | A=b, E] - E[g | E]),
       kappa_b = (pi - q) P(A=b | E) / r_b = 1 - q / r_b.

   This holds for every k (for k = 2 and balanced groups kappa = 2 pi - 1, the (1 - 2 x flip
   rate) shrinkage). fairlearn's moments are exactly these group-vs-population differences,
   so a slack of ``bound * min_b kappa_b`` on Z (minimum over groups and, for eo, labels)
   implies the slack ``bound`` on the true attribute, in the population. kappa is estimated
   from the privatized data alone: P(A=b | E) = (P(Z=b | E) - q) / (pi - q), floored at one
   row of the event (1 / n_E) so that a group the noise hides gets a tiny positive kappa,
   i.e. a near-zero slack, rather than a negative one.
3. ``reductions``' exponentiated gradient (logistic-regression oracle) is trained on
   (X, Y, Z) with the corrected slack; the randomized classifier, its scores and the draws
   of its predictions are released exactly as ``reductions`` releases them.

Left out of Mozannar et al.: their second step, a post-processing LP (Hardt et al.'s
equalized-odds post-processing inverted through the flip probabilities) fitted on a held-out
half of the privatized data. It needs the privatized attribute at prediction time, which
Tran et al.'s setting forbids ("the attribute A is not part of the model input during
inference"), and Tran et al. describe M as "the fair model A on perturbed noisy data". Also
left out: their finite-sample slack terms; the correction here is the population one.

The guarantee, (eps, 0), is on A only (label-DP style): the notion PF-LD's guarantee uses.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

import numpy as np

from fairdp.engine import stream_seed
from fairdp.methods._base import HyperParam, Method
from fairdp.methods._registry import register_method
from fairdp.methods.reductions import (
    BOUND,
    NOTION,
    NOTIONS,
    PAPER_BOUNDS,
    fit_reduction,
    release,
)
from fairdp.privacy import Guarantee

# Tran et al. set eps = 1 unless stated otherwise and sweep eps for their privacy-fairness-
# accuracy trade-off (their Figure 2); the sweep spans an order of magnitude either side.
PAPER_EPS = [0.1, 0.5, 1.0, 2.0, 5.0, 10.0]

EPS = HyperParam("eps", low=0.0, low_open=True,
                 doc="privacy budget of the randomized response on the attribute")


def keep_probability(eps: float, n_groups: int) -> float:
    """pi = e^eps / (e^eps + k - 1), written to stay finite for any eps."""
    return 1.0 / (1.0 + (n_groups - 1) * math.exp(-eps))


def keep_threshold(eps: float, n_groups: int) -> int:
    """T: a code is kept when its 64-bit word is below T, so with probability T / 2^64, at most
    pi and below it by under 2^-49 relative. pi in floating point can be a few ulps above the
    true e^eps / (e^eps + k - 1); the margin of 2^-50 puts T's rate below the true pi, so that
    P(keep) / P(one other code) = (k - 1) T / (2^64 - T) <= e^eps exactly, the ratio the
    guarantee states (float uniforms compared with a float pi hold it only up to rounding)."""
    low = Fraction(keep_probability(eps, n_groups)) * (1 - Fraction(1, 2 ** 50))
    return math.floor(low * 2 ** 64)


def randomized_response(s: np.ndarray, n_groups: int, eps: float,
                        rng: np.random.Generator) -> np.ndarray:
    """k-ary randomized response: keep each code with probability ``keep_threshold`` / 2^64
    (one 64-bit word a row, an exact integer comparison), else a uniformly drawn other code
    (NumPy's bounded integers are exact)."""
    keep = rng.bit_generator.random_raw(len(s)) < np.uint64(keep_threshold(eps, n_groups))
    other = (s + rng.integers(1, n_groups, size=len(s))) % n_groups
    return np.where(keep, s, other)


def corrected_bound(z: np.ndarray, y: np.ndarray, n_groups: int, notion: str, bound: float,
                    eps: float) -> float:
    """``bound`` times the smallest shrinkage kappa_b (module docstring, step 2)."""
    pi = keep_probability(eps, n_groups)
    q = (1.0 - pi) / (n_groups - 1)
    everything = np.ones(len(z), dtype=bool)
    events = [y == label for label in (0, 1)] if notion == "eo" else [everything]
    kappa = []
    for event in events:
        n = int(event.sum())
        r = np.bincount(z[event], minlength=n_groups) / n
        share = np.maximum((r - q) / (pi - q), 1.0 / n)
        kappa.append((pi - q) * share / (q + (pi - q) * share))
    return bound * float(np.min(kappa))


@register_method
class PrivateReductions(Method):
    name = "private_reductions"
    privacy_scope = "local"
    privacy_unit = "attribute"  # each record's attribute is randomized, not a representation
    binary_only = True
    hyperparams = (NOTION, BOUND, EPS)

    def representation_dim(self, data, arch=None):
        return data.n_classes  # the released class scores

    def paper_grid(self, dataset):
        return {"fairness_notion": list(NOTIONS), "bound": PAPER_BOUNDS, "eps": PAPER_EPS}

    def fit(self, data, configs, config_ids, seed, settings, arch, callback=None, checkpoint=None):
        t0 = time.perf_counter()
        X, y, s = data.split("train")
        models = []
        for c, cid in zip(configs, config_ids):
            rng = np.random.default_rng(stream_seed(seed, cid, "noise"))
            z = randomized_response(s, data.n_groups, c["eps"], rng)
            bound = corrected_bound(z, y, data.n_groups, c["fairness_notion"], c["bound"], c["eps"])
            models.append(fit_reduction(X, y, z, c["fairness_notion"], bound))
        return release(models, data, configs, config_ids, seed, t0)

    def privacy(self, config, run):
        # k-ary randomized response: P(keep) / P(a given other code) = e^eps, so eps-LDP for A
        return Guarantee(float(config["eps"]), 0.0)

    neighbour_relation = "replace_one"  # one person's attribute changes

    def dp_event(self, config, run):
        import dp_accounting  # imported here, not at the top: it pulls in scipy (~2 s per fairdp start)

        # dp-accounting's randomized response keeps the input with probability 1 - p and
        # otherwise outputs a uniform one of the k codes: keep = 1 - p + p/k = pi, other = p/k
        # = 1 / (e^eps + k - 1), i.e. p = k (1 - pi) / (k - 1), this method's k-RR exactly
        k = run.n_groups
        return dp_accounting.RandomizedResponseDpEvent(k * (1 - keep_probability(config["eps"], k)) / (k - 1), k)
