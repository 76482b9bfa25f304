"""Reductions (Agarwal et al. 2018): fairlearn's exponentiated-gradient reduction to a
sequence of cost-sensitive logistic regressions, under a demographic-parity, equalized-odds
or accuracy-parity (error-rate parity) constraint.

This is Tran et al.'s (PF-LD) baseline "A", which they describe as "the fair logistic
regression model based on reduction approaches", hence sklearn's ``LogisticRegression`` as
the base learner. ``bound`` is the constraint slack on fairlearn's group-vs-population
moments: |E[g | A=a, E] - E[g | E]| <= bound for every group a, with g = h and E = everything
(dp), g = h and E = {Y = y} for each label y (eo), g = 1[h != Y] and E = everything (ap). As
in Agarwal et al.'s original code, the same number also sets the bound B = 1/bound on the
Lagrange multipliers (fairlearn's ``eps``), so the guaranteed violation, bound + O(1/B),
scales with the slack asked for.

The released model is fairlearn's randomized classifier: a distribution over the logistic
regressions found. An attacker sees its scores, P(h(x) = 0) and P(h(x) = 1) per row
(``_pmf_predict``); a prediction is one draw from them, with a per-config generator seeded by
the "predict" stream, so runs reproduce exactly. The method is not private.
"""

from __future__ import annotations

import time
import warnings
from typing import TYPE_CHECKING

import numpy as np
from threadpoolctl import threadpool_limits

from fairdp.data import Dataset
from fairdp.engine import stream_seed
from fairdp.engine.contract import PackResult
from fairdp.methods._base import HyperParam, Method
from fairdp.methods._registry import register_method

# fairlearn and sklearn (scipy under them) are imported where used: importing fairdp must not cost
# a CLI start or Ray worker ~2 s
if TYPE_CHECKING:
    from fairlearn.reductions import ExponentiatedGradient

NOTIONS = ("dp", "eo", "ap")
"""The fairness notions: demographic parity, equalized odds, accuracy parity."""


def _constraint(notion: str) -> type:
    """``notion``'s fairlearn constraint class."""
    from fairlearn.reductions import DemographicParity, EqualizedOdds, ErrorRateParity

    return dict(zip(NOTIONS, (DemographicParity, EqualizedOdds, ErrorRateParity)))[notion]


NOTION = HyperParam("fairness_notion", choices=NOTIONS,
                    doc="constraint: demographic parity, equalized odds or accuracy parity")
# A difference of two rates is at most 1, so a larger slack would constrain nothing.
BOUND = HyperParam("bound", low=0.0, low_open=True, high=1.0,
                   doc="constraint slack on each group-vs-population rate difference")

# fairlearn's default difference bound (0.01) and looser slacks up to 0.1, log-spaced: Agarwal
# et al. trace the accuracy-fairness trade-off by sweeping the slack, and Tran et al. do not
# state the one they used, so the sweep lets model selection (RT) choose.
PAPER_BOUNDS = [0.01, 0.02, 0.05, 0.1]


def fit_reduction(X: np.ndarray, y: np.ndarray, groups: np.ndarray, notion: str,
                  bound: float) -> ExponentiatedGradient:
    """Exponentiated gradient with slack ``bound`` for ``notion`` w.r.t. ``groups``."""
    from fairlearn.reductions import ExponentiatedGradient
    from sklearn.linear_model import LogisticRegression

    constraint = _constraint(notion)(difference_bound=bound)
    model = ExponentiatedGradient(LogisticRegression(max_iter=1000), constraints=constraint,
                                  eps=bound)
    # The oracle solves dozens of small logistic regressions: threaded BLAS only adds
    # synchronisation (several times slower when the cores are shared, as in a Ray pack).
    with threadpool_limits(limits=1), warnings.catch_warnings():
        # fairlearn grows pandas Series by assignment, which pandas deprecates: one warning per
        # iteration, harmless for the pandas installed, and slower to emit than the fit itself.
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"fairlearn\.")
        return model.fit(X, y, sensitive_features=groups)


def release(models: list[ExponentiatedGradient], data: Dataset, configs: list[dict], config_ids: list[str],
            seed: int, t0: float) -> PackResult:
    """Scores (K, n, 2) and one reproducible draw of the randomized classifier per row."""
    predictions: dict[str, list[np.ndarray]] = {"valid": [], "test": []}
    representations: dict[str, list[np.ndarray]] = {"valid": [], "test": []}
    for model, cid in zip(models, config_ids):
        rng = np.random.default_rng(stream_seed(seed, cid, "predict"))
        for name in ("valid", "test"):
            scores = np.asarray(model._pmf_predict(data.split(name).X), dtype=np.float32)
            representations[name].append(scores)
            predictions[name].append((rng.random(len(scores)) < scores[:, 1]).astype(np.int64))
    k = len(configs)
    return PackResult(configs=configs, best_epoch=np.zeros(k, dtype=np.int64),
                      valid_history={},
                      predictions={n: np.stack(p) for n, p in predictions.items()},
                      representations={n: np.stack(r) for n, r in representations.items()},
                      duration_s=time.perf_counter() - t0)


@register_method
class Reductions(Method):
    name = "reductions"
    binary_only = True
    hyperparams = (NOTION, BOUND)

    def representation_dim(self, data, arch=None):
        return data.n_classes  # the released class scores

    def paper_grid(self, dataset):
        return {"fairness_notion": list(NOTIONS), "bound": PAPER_BOUNDS}

    def fit(self, data, configs, config_ids, seed, settings, arch, callback=None, checkpoint=None):
        t0 = time.perf_counter()
        X, y, s = data.split("train")
        models = [fit_reduction(X, y, s, c["fairness_notion"], c["bound"]) for c in configs]
        return release(models, data, configs, config_ids, seed, t0)
