"""Train/valid/test splits stratified by label only, fixed by a public seed.

The split never reads the protected attribute: which rows train, and so ``n_train`` (inside
every DP event's sampling probability), the standardisation statistics and the minibatch
schedule, are the same for any two datasets that differ only in records' attribute values
(the neighbouring relation of PF-LD's Definition 1 and of the private reductions).
"""

from __future__ import annotations

import numpy as np

from fairdp.errors import InputError

DEFAULT_FRACTIONS = (0.6, 0.2, 0.2)


def stratified_split(
    y: np.ndarray,
    *,
    fractions: tuple[float, float, float] = DEFAULT_FRACTIONS,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Split row indices into train/valid/test, stratified by label only.

    The rows of each class (in sorted class order) are shuffled with one generator seeded by
    ``seed`` and cut at the cumulative fractions, so every split keeps the class proportions
    of the whole data (up to one row per class). The split depends on the labels, the number
    of rows, ``fractions`` and ``seed`` only, never on the sensitive attribute, which it
    does not take. Returned indices are sorted.
    """
    fr = np.asarray(fractions, dtype=float) if _numeric(fractions) else None
    if fr is None or fr.shape != (3,) or not np.isfinite(fr).all() or np.any(fr < 0) or not np.isclose(fr.sum(), 1.0):
        raise InputError(f"split fractions must be three non-negative numbers summing to 1, got {fractions!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"split seed must be an integer >= 0, got {seed!r}")
    y = np.asarray(y)
    if y.ndim != 1 or len(y) == 0:
        raise InputError(f"split labels must be a non-empty 1-D array (one label per row), got shape {y.shape}")
    rng = np.random.default_rng(int(seed))
    cuts = np.cumsum(fr)[:2]
    parts: dict[str, list[np.ndarray]] = {"train": [], "valid": [], "test": []}
    for label in np.unique(y):
        idx = np.flatnonzero(y == label)
        idx = idx[rng.permutation(len(idx))]
        a, b = np.round(cuts * len(idx)).astype(int)
        parts["train"].append(idx[:a])
        parts["valid"].append(idx[a:b])
        parts["test"].append(idx[b:])
    return {k: np.sort(np.concatenate(v)).astype(np.int64) for k, v in parts.items()}


def _numeric(fractions) -> bool:
    try:
        return np.asarray(fractions).dtype.kind in "iuf"
    except (TypeError, ValueError):
        return False
