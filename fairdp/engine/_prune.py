"""Multi-objective pruning inside a pack (issue 16): at rung epochs, configs that another
config still training beats on every objective by a margin stop training.

Optuna's pruners do not support multi-objective studies and Ray Tune's ASHA ranks one
metric; a pack sees all its configs' validation scores at the same epoch, so it can compare
them on the study's own objectives:

- valid accuracy (maximised) and the study's selection fairness gap on valid (minimised), of
  the model each config would report if it stopped now (its best-validation epoch so far, or
  its current one for methods that return the last epoch);
- leakage is left out at rungs: it needs a probe trained on each config's representations
  (FEDERATE's attacker, seconds per config), more than an epoch of the pack costs on Adult,
  so measuring it at a rung would cost what pruning saves.

Config j dominates config i when j's accuracy is at least ``margin`` points higher and j's gap
at least ``margin`` points lower (at margin 0: Pareto dominance, strictly better somewhere). A config no active config dominates (the non-dominated
front, widened by the margin) always continues, and at least ``keep`` of the configs still
training continue past each rung, so pruning never empties a pack. A gap that is undefined
(NaN: a group without positives in valid) compares false, so such a config is never pruned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fairdp.errors import InputError
from fairdp.schema import NOTION_GAP, NOTION_METRICS, SELECTION_FAIRNESS

DEFAULT_KEEP = 0.25
DEFAULT_MARGIN = 0.5  # points of accuracy and of the gap (both are percent)


@dataclass(frozen=True)
class Pruning:
    """A study's ``prune:`` block. ``rungs``: 1-based epochs, increasing, after which dominated
    configs stop; ``keep``: the least fraction of the configs still training at a rung that
    continue past it (rounded up, at least one); ``margin``: points by which a dominating
    config must be better on every objective; ``fairness``: the study's selection metric."""

    rungs: tuple[int, ...]
    keep: float = DEFAULT_KEEP
    margin: float = DEFAULT_MARGIN
    fairness: str = "tpr_gap"

    def __post_init__(self):
        if not isinstance(self.rungs, tuple) or not self.rungs:
            raise InputError(f"prune.rungs: must be a non-empty list of epochs, got {self.rungs!r}")
        for i, r in enumerate(self.rungs):
            if isinstance(r, bool) or not isinstance(r, int) or r < 1:
                raise InputError(f"prune.rungs[{i}]: must be an epoch >= 1, got {r!r}")
            if i and r <= self.rungs[i - 1]:
                raise InputError(f"prune.rungs[{i}]: rungs must increase, got {r} after {self.rungs[i - 1]}")
        if (isinstance(self.keep, bool) or not isinstance(self.keep, (int, float))
                or not math.isfinite(self.keep) or not 0 < self.keep <= 1):
            raise InputError(f"prune.keep: must be a fraction in (0, 1], got {self.keep!r}")
        if (isinstance(self.margin, bool) or not isinstance(self.margin, (int, float))
                or not math.isfinite(self.margin) or self.margin < 0):
            raise InputError(f"prune.margin: must be a number of points >= 0, got {self.margin!r}")
        if self.fairness not in SELECTION_FAIRNESS:
            raise InputError(f"prune: the selection fairness must be one of {', '.join(SELECTION_FAIRNESS)}, "
                             f"got {self.fairness!r}")


def dominators(accuracy: np.ndarray, gap: np.ndarray, margin: float) -> np.ndarray:
    """For each config, how many others beat it by ``margin`` on both accuracy (up) and gap (down)."""
    acc, gap = np.asarray(accuracy, dtype=float), np.asarray(gap, dtype=float)
    # beats[j, i]: config j dominates config i; at margin 0 that is Pareto dominance, which
    # also needs j strictly better somewhere (equal configs, or a config and itself, do not)
    beats = (acc[:, None] >= acc[None, :] + margin) & (gap[:, None] <= gap[None, :] - margin)
    beats &= (acc[:, None] > acc[None, :]) | (gap[:, None] < gap[None, :])
    return beats.sum(axis=0)


def configs_to_stop(accuracy: np.ndarray, gap: np.ndarray, pruning: Pruning) -> list[int]:
    """Positions (ascending) of the configs that stop at a rung: dominated ones, the most
    dominated first (then the least accurate, then the earliest position), while at least
    ``ceil(keep * active)`` configs continue."""
    active = len(accuracy)
    count = dominators(accuracy, gap, pruning.margin)
    candidates = [i for i in range(active) if count[i] > 0]
    budget = active - max(1, math.ceil(pruning.keep * active - 1e-9))
    candidates.sort(key=lambda i: (-count[i], accuracy[i], i))
    return sorted(candidates[:max(0, budget)])


def selection_gaps(scores: dict[str, np.ndarray], configs: list[dict], fairness: str) -> np.ndarray:
    """The selection gap (percent) of each config from its valid ``scores``
    (``scores_from_confusion`` of a pack); for ``notion_gap``, each config's violation of its
    own ``fairness_notion``."""
    if fairness != NOTION_GAP:
        return scores[fairness]
    # a config without a notion (a baseline beside F-LD's) is compared on demographic parity
    return np.array([scores[NOTION_METRICS[c.get("fairness_notion", "dp")]][i] for i, c in enumerate(configs)])

