"""Synthetic data with a known amount of label bias and attribute leakage, for tests and demos."""

from __future__ import annotations

import math

import numpy as np

from fairdp.data._dataset import INT64_MAX, Dataset, check_fits_memory
from fairdp.data._encoded import int_option
from fairdp.data._registry import register
from fairdp.data._splits import stratified_split
from fairdp.errors import InputError

# Norm of each class centroid in the label block: two classes sit 3 noise standard
# deviations apart, so a linear model learns y well (Bayes accuracy 93%) but not perfectly.
LABEL_SIGNAL = 1.5


def _directions(rng: np.random.Generator, k: int, dim: int, norm: float) -> np.ndarray:
    """``k`` fixed random vectors, centred (two of them point opposite ways) and of length ``norm``."""
    v = rng.normal(size=(k, dim))
    v -= v.mean(axis=0)
    return v * (norm / np.linalg.norm(v, axis=1, keepdims=True))


MAX_LEAKAGE = 1e6


def _number(name: str, value: object, high: float | None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"dataset.{name}: must be a finite number, got {value!r}")
    if value < 0 or (high is not None and value > high):
        bound = f"[0, {high:g}]" if high is not None else ">= 0"
        raise InputError(f"dataset.{name}: must be in {bound}, got {value!r}")
    return float(value)


def _at_most(name: str, value: int, high: int, what: str) -> int:
    if value > high:
        raise InputError(f"dataset.{name}: must be <= {what} ({high:,}), got {value:,}")
    return value


@register(
    "synthetic",
    kind="generated",
    description="Gaussian features with controllable label-attribute correlation and attribute "
    "leakage (for tests and fast demos)",
)
def make_synthetic(
    rows: int = 4000,
    features: int = 20,
    groups: int = 2,
    classes: int = 2,
    label_correlation: float = 0.5,
    leakage: float = 1.0,
    seed: int = 0,
    split_seed: int = 0,
) -> Dataset:
    """Draw a dataset whose two sources of unfairness are set by two numbers.

    * ``s`` is uniform over ``groups``. With probability ``label_correlation`` the label is
      ``y = s mod classes``, otherwise uniform over ``classes``, so
      ``P(y = s mod classes) = 1/classes + label_correlation * (1 - 1/classes)``:
      0 makes ``y`` independent of ``s``, 1 makes it a function of ``s``.
    * Features are unit-variance Gaussian noise plus two mean shifts in disjoint blocks. The
      first ``features - features // 2`` columns (``label_*``) carry the label: class ``c``
      is shifted by a fixed random vector of norm 1.5. The last ``features // 2`` columns
      (``leak_*``) carry the attribute: group ``g`` is shifted by a fixed random vector of
      norm ``leakage``. The vectors of the classes (and of the groups) are centred, so with
      two of them they point opposite ways: two groups sit ``2 * leakage`` apart. With
      ``leakage = 0``, X depends on ``s`` only through ``y``; as it grows a probe recovers
      ``s`` from X ever better.

    ``seed`` fixes the draw and ``split_seed`` the 60/20/20 split, stratified by label only.
    """
    rows = int_option("rows", rows, 10)
    features = int_option("features", features, 2)
    groups = _at_most("groups", int_option("groups", groups, 2), rows, "rows")
    classes = _at_most("classes", int_option("classes", classes, 2), rows, "rows")
    rho = _number("label_correlation", label_correlation, 1.0)
    # the features are stored as float32: a shift near its largest value (3.4e38) overflows; far
    # below that every probe already separates the groups perfectly
    scale = _number("leakage", leakage, MAX_LEAKAGE)
    seed = _at_most("seed", int_option("seed", seed, 0), INT64_MAX, "2**63 - 1, the largest int64")
    split_seed = _at_most("split_seed", int_option("split_seed", split_seed, 0), INT64_MAX,
                          "2**63 - 1, the largest int64")
    # checked before drawing: the float64 draw, its float32 copy and three int64 columns
    check_fits_memory(rows * (features * 12 + 24), "dataset.rows",
                      f"{rows:,} rows of {features:,} features")

    rng = np.random.default_rng(seed)
    n_leak = features // 2
    n_label = features - n_leak
    s = rng.integers(groups, size=rows)
    tied = rng.random(rows) < rho
    y = np.where(tied, s % classes, rng.integers(classes, size=rows))

    centroids = _directions(rng, classes, n_label, LABEL_SIGNAL)
    shifts = _directions(rng, groups, n_leak, scale)
    X = rng.normal(size=(rows, features))
    X[:, :n_label] += centroids[y]
    X[:, n_label:] += shifts[s]

    options = (
        f"rows={rows}, features={features}, groups={groups}, classes={classes}, "
        f"label_correlation={rho:g}, leakage={scale:g}, seed={seed}, split_seed={split_seed}"
    )
    return Dataset(
        name="synthetic",
        X=X.astype(np.float32),
        y=y,
        s=s,
        splits=stratified_split(y, seed=split_seed),
        feature_names=tuple(f"label_{j}" for j in range(n_label))
        + tuple(f"leak_{j}" for j in range(n_leak)),
        class_names=tuple(str(c) for c in range(classes)),
        group_names=tuple(f"g{g}" for g in range(groups)),
        label_name="y",
        sensitive_name="s",
        source=f"fairdp.data.make_synthetic({options})",
        preprocessing=(
            f"Generated: P(y = s mod {classes}) = {1 / classes + rho * (1 - 1 / classes):.3g}; "
            f"{n_label} label features (class centroids of norm {LABEL_SIGNAL:g}), {n_leak} "
            f"leak features (group shifts of norm {scale:g}), unit Gaussian noise; 60/20/20 split "
            f"stratified by label only, seed {split_seed}."
        ),
    )
