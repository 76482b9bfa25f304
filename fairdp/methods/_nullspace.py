"""Iterative nullspace projection (INLP, Ravfogel et al. 2020), the linear algebra.

INLP removes a sensitive attribute s from representations X by repeatedly fitting a
linear probe for s and projecting X onto the nullspace of every probe found so far, so
that no direction any probe used survives. Everything is computed in float64 with
torch; the projections are returned as float64 (D, D) tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from fairdp.errors import InputError

# sklearn (scipy under it) is imported where used: importing fairdp must not cost a CLI start or
# Ray worker ~2 s.
if TYPE_CHECKING:
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

CLASSIFIERS = ("logistic", "svm")


def _as_float64(a: torch.Tensor | np.ndarray) -> torch.Tensor:
    return torch.as_tensor(a, dtype=torch.float64)


def rowspace_projection(W: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Orthogonal projection P_R onto the row space of W, shape (r, D) (or one row (D,)).

    P_R = B^T B for an orthonormal basis B of the row space: the right singular vectors of
    W whose singular value exceeds max(r, D) * eps_float64 * s_max (numpy's matrix_rank
    tolerance), so duplicate or dependent rows add nothing and a zero W gives P_R = 0.
    """
    W = torch.atleast_2d(_as_float64(W))
    _, S, Vh = torch.linalg.svd(W, full_matrices=False)
    if S.numel() == 0:
        return torch.zeros(W.shape[1], W.shape[1], dtype=torch.float64)
    tol = S.max() * max(W.shape) * torch.finfo(torch.float64).eps
    basis = Vh[S > tol]
    return basis.T @ basis


def nullspace_projection(Ws: Sequence[torch.Tensor | np.ndarray]) -> torch.Tensor:
    """Projection onto the intersection of the nullspaces of all W in ``Ws``.

    The intersection of the nullspaces is the orthogonal complement of the span of all
    rows together, so P_N = I - P_R(stack(Ws)). This is what Ravfogel et al.'s
    ``get_projection_to_intersection_of_nullspaces`` aims at, but computed from one basis
    of the stacked rows rather than from a sum of per-W projections.
    """
    if len(Ws) == 0:
        raise ValueError("Ws must hold at least one matrix")
    stacked = torch.cat([torch.atleast_2d(_as_float64(W)) for W in Ws])
    return torch.eye(stacked.shape[1], dtype=torch.float64) - rowspace_projection(stacked)


def _make_classifier(classifier: str, seed: int) -> LogisticRegression | LinearSVC:
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    if classifier == "logistic":
        return LogisticRegression(max_iter=1000, random_state=seed)
    if classifier == "svm":
        return LinearSVC(random_state=seed)
    raise InputError(f"classifier must be one of {', '.join(CLASSIFIERS)}, got {classifier!r}")


def inlp(
    X: torch.Tensor | np.ndarray,
    s: torch.Tensor | np.ndarray,
    iterations: int,
    *,
    classifier: str = "logistic",
    seed: int = 0,
    min_accuracy: float | None = None,
) -> list[torch.Tensor]:
    """INLP (Ravfogel et al. 2020, Algorithm 1): the projections after 1..``iterations`` steps.

    Step i fits a linear classifier predicting ``s`` from X @ P (P the current projection,
    identity at first), adds its weight matrix (one row for binary s, one per class
    otherwise) to the removed set, and sets P = nullspace_projection(all weights). The list
    holds P after every step, so configurations that differ only in the iteration count
    share one run. ``classifier`` is "logistic" (sklearn LogisticRegression) or "svm"
    (LinearSVC, as in Ravfogel et al.), seeded with ``seed``, fitted and scored on the
    given data. When a probe's accuracy is below ``min_accuracy`` it is not removed
    (Ravfogel et al. skip it) and, since refitting on the same projected data would give
    the same probe, P stays fixed for the remaining steps.
    """
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise InputError(f"iterations must be an integer >= 1, got {iterations}")
    X = _as_float64(X)
    labels = np.asarray(s).ravel()
    if X.dim() != 2 or X.shape[0] != labels.shape[0]:
        raise InputError(
            f"X must be (N, D) with one label per row, got X {tuple(X.shape)} and s {labels.shape}"
        )
    if np.unique(labels).size < 2:
        raise InputError("s must take at least 2 distinct values")
    P = torch.eye(X.shape[1], dtype=torch.float64)
    weights: list[torch.Tensor] = []
    projections: list[torch.Tensor] = []
    done = False
    for _ in range(iterations):
        if not done:
            projected = (X @ P).numpy()
            clf = _make_classifier(classifier, seed).fit(projected, labels)
            if min_accuracy is not None and clf.score(projected, labels) < min_accuracy:
                done = True
            else:
                weights.append(_as_float64(clf.coef_))
                P = nullspace_projection(weights)
        projections.append(P)
    return projections
