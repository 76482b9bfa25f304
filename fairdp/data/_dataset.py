"""The one dataset type every loader returns, and the checks every loader shares."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from fairdp.errors import InputError

SPLITS = ("train", "valid", "test")
INT64_MAX = 2**63 - 1  # integers are stored and computed as int64


def physical_memory() -> int | None:
    """This machine's physical memory in bytes (None where the OS does not say): what a
    dataset or a model that must be held at once is checked against before anything is made."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_fits_memory(needed: float, path: str, what: str) -> None:
    """InputError naming ``path`` if ``needed`` bytes (``what`` they hold) exceed this machine's
    physical memory: numpy or torch would otherwise fail on the allocation, or swap for hours."""
    have = physical_memory()
    if have is not None and needed > have:
        raise InputError(f"{path}: {what}: {_gib(needed)}, more than this machine's {_gib(have)} of memory")


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n < 2**40 else f"{n / 2**40:,.2f} TiB"


class Split(NamedTuple):
    X: np.ndarray
    y: np.ndarray
    s: np.ndarray


@dataclass(frozen=True, eq=False)
class Dataset:
    """Features, labels and an integer-coded sensitive attribute, with fixed splits.

    ``X`` is float32 (rows x features); ``y`` and ``s`` are int64 codes ``0..C-1`` and
    ``0..G-1`` whose names are ``class_names`` and ``group_names``. ``splits`` maps
    train/valid/test to disjoint row indices. ``sha256`` maps each source file to its
    digest (empty for generated data). ``preprocessing`` says in words what was done.
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    s: np.ndarray
    splits: Mapping[str, np.ndarray]
    feature_names: tuple[str, ...]
    class_names: tuple[str, ...]
    group_names: tuple[str, ...]
    label_name: str
    sensitive_name: str
    source: str
    sha256: Mapping[str, str] = field(default_factory=dict)
    preprocessing: str = ""

    def __post_init__(self) -> None:
        check_arrays(
            self.X, self.y, self.s,
            origin=self.source, label_name=self.label_name, sensitive_name=self.sensitive_name,
            feature_names=self.feature_names,
        )
        object.__setattr__(self, "X", np.ascontiguousarray(self.X, dtype=np.float32))
        object.__setattr__(self, "y", np.asarray(self.y, dtype=np.int64))
        object.__setattr__(self, "s", np.asarray(self.s, dtype=np.int64))
        n = len(self.y)
        if len(self.feature_names) != self.X.shape[1]:
            raise ValueError(f"{len(self.feature_names)} feature names for {self.X.shape[1]} features")
        if self.y.min() < 0 or self.y.max() >= len(self.class_names):
            raise ValueError("labels must be coded 0..n_classes-1")
        if self.s.min() < 0 or self.s.max() >= len(self.group_names):
            raise ValueError("sensitive attribute must be coded 0..n_groups-1")
        if set(self.splits) != set(SPLITS):
            raise ValueError(f"splits must be exactly {SPLITS}, got {sorted(self.splits)}")
        seen = np.zeros(n, dtype=bool)
        for name in SPLITS:
            idx = np.asarray(self.splits[name], dtype=np.int64)
            if len(idx) == 0:
                raise InputError(f"{self.source}: the {name} split is empty")
            if idx.min() < 0 or idx.max() >= n:
                raise ValueError(f"{name} split indexes outside 0..{n - 1}")
            if seen[idx].any() or len(np.unique(idx)) != len(idx):
                raise ValueError(f"{name} split overlaps another split or repeats rows")
            seen[idx] = True

    @property
    def n_rows(self) -> int:
        return len(self.y)

    @property
    def n_features(self) -> int:
        return self.X.shape[1]

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def n_groups(self) -> int:
        return len(self.group_names)

    def split(self, name: str) -> Split:
        idx = self.splits[name]
        return Split(self.X[idx], self.y[idx], self.s[idx])

    def group_class_counts(self, split: str) -> np.ndarray:
        """Rows of each (group, class) in ``split``: a (G, C) array."""
        idx = self.splits[split]
        return np.bincount(self.s[idx] * self.n_classes + self.y[idx],
                           minlength=self.n_groups * self.n_classes).reshape(self.n_groups, self.n_classes)

    def summary(self) -> dict:
        """The JSON object of ``fairdp data describe --json``."""
        return {
            "name": self.name,
            "rows": self.n_rows,
            "features": self.n_features,
            "classes": self.n_classes,
            "groups": self.n_groups,
            "splits": {k: int(len(self.splits[k])) for k in SPLITS},
            "sha256": dict(self.sha256),
            "label": self.label_name,
            "sensitive": self.sensitive_name,
            "class_names": list(self.class_names),
            "group_names": list(self.group_names),
            "class_counts": np.bincount(self.y, minlength=self.n_classes).tolist(),
            "group_counts": np.bincount(self.s, minlength=self.n_groups).tolist(),
            # per split, each group's rows of each class: the denominators of its rates there
            # (an intersection's group can hold a handful of a split's positives)
            "split_group_class_counts": {k: self.group_class_counts(k).tolist() for k in SPLITS},
            "source": self.source,
            "preprocessing": self.preprocessing,
        }


def check_arrays(
    X: np.ndarray,
    y: np.ndarray,
    s: np.ndarray,
    *,
    origin: str,
    label_name: str = "label",
    sensitive_name: str = "sensitive",
    feature_names: Sequence[str] | None = None,
) -> None:
    """Reject what no study can use, naming the file (``origin``) and the column."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise InputError(f"{origin}: features must be a 2-D array (rows x features), got shape {X.shape}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise InputError(f"{origin}: features are empty, shape {X.shape}")
    if not np.issubdtype(X.dtype, np.number):
        raise InputError(f"{origin}: features must be numeric, got dtype {X.dtype}")
    for what, arr in ((label_name, y), (sensitive_name, s)):
        arr = np.asarray(arr)
        if arr.ndim != 1 or len(arr) != X.shape[0]:
            raise InputError(
                f"{origin}: column '{what}' must have one value per row ({X.shape[0]}), got shape {arr.shape}"
            )
    bad_cols = np.flatnonzero(~np.isfinite(X).all(axis=0))
    if len(bad_cols):
        j = int(bad_cols[0])
        col = feature_names[j] if feature_names is not None else f"#{j}"
        row = int(np.flatnonzero(~np.isfinite(X[:, j]))[0])
        raise InputError(f"{origin}: feature column '{col}' has NaN or inf values (first at row {row})")
    if len(np.unique(y)) < 2:
        raise InputError(f"{origin}: label column '{label_name}' has a single class; a task needs at least 2")
    if len(np.unique(s)) < 2:
        raise InputError(
            f"{origin}: sensitive column '{sensitive_name}' has a single group; fairness needs at least 2"
        )


def encode(values: Sequence, *, origin: str, column: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """Integer codes ``0..K-1`` for a column's values (sorted), and the values' names."""
    arr = np.asarray(values)
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise InputError(f"{origin}: column '{column}' has missing or non-finite values")
    if arr.dtype == object and any(v is None or (isinstance(v, float) and v != v) for v in arr):
        raise InputError(f"{origin}: column '{column}' has missing values")
    names, codes = np.unique(arr, return_inverse=True)
    return codes.astype(np.int64).reshape(-1), tuple(_name(v) for v in names)


INTERSECTION = " × "  # joins attribute names (sensitive_name) and their groups' names (group_names)


def sensitive_attributes(value: object, key: str = "sensitive") -> tuple:
    """The attributes a loader's ``sensitive`` option names: ``(value,)`` for a single one
    (whatever its type: the loader checks it as it always has), or a list or tuple of 2 or
    more distinct strings, their intersection. An empty list, a list of one, a repeated name
    or a name that is not a string is an InputError naming ``dataset.<key>``."""
    if not isinstance(value, (list, tuple)):
        return (value,)
    names = list(value)
    if not names:
        raise InputError(f"dataset.{key}: an empty list names no attribute; give one name, "
                         "or a list of 2 or more for their intersection")
    bad = [v for v in names if not isinstance(v, str)]
    if bad:
        raise InputError(f"dataset.{key}: a list of attribute names (strings), got {bad[0]!r} in {names!r}")
    if len(names) == 1:
        raise InputError(f"dataset.{key}: a list of one attribute {names!r}; give it as a string "
                         f"({key}: {names[0]}), or list 2 or more for their intersection")
    repeated = next((v for i, v in enumerate(names) if v in names[:i]), None)
    if repeated is not None:
        raise InputError(f"dataset.{key}: '{repeated}' is named more than once in {names!r}")
    return tuple(names)


def intersect(
    values: Sequence[Sequence], names: Sequence[str], *, origin: str
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Group codes and names for the intersection of attributes: ``values[i]`` holds attribute
    ``names[i]``'s value per row (a pandas Series, an array or a list).

    Each attribute is coded alone by :func:`encode` (its own group order: its values sorted).
    The groups are the combinations present in the rows, coded ``0..G-1`` in lexicographic
    order of their tuples of per-attribute codes (the first attribute varies slowest), and
    named by their attributes' group names joined by " × " ("Female × White"). A single
    attribute is exactly :func:`encode`'s codes and names.
    """
    if len(values) != len(names) or not names:
        raise ValueError(f"{len(values)} value columns for {len(names)} attribute names")
    coded = [encode(np.asarray(v), origin=origin, column=str(n)) for v, n in zip(values, names)]
    if len(coded) == 1:
        return coded[0]
    lengths = {len(codes) for codes, _ in coded}
    if len(lengths) != 1:
        raise ValueError(f"attribute columns of different lengths {sorted(lengths)}")
    table = np.stack([codes for codes, _ in coded], axis=1)
    present, inverse = np.unique(table, axis=0, return_inverse=True)
    group_names = tuple(
        INTERSECTION.join(coded[i][1][code] for i, code in enumerate(row)) for row in present.tolist()
    )
    return inverse.astype(np.int64).reshape(-1), group_names


def intersection_name(names: Sequence[str]) -> str:
    """The ``sensitive_name`` of an intersection ("sex × race"); a single attribute's own name."""
    if len(names) == 1:
        return names[0]
    return INTERSECTION.join(str(n) for n in names)


def _name(v) -> str:
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


def subsample(data: Dataset, rows: int, seed: int) -> Dataset:
    """``data`` with at most ``rows`` train rows and ``rows // 4`` (at least 50) valid and test
    rows, drawn without replacement by ``seed``: a smaller audit of a large dataset."""
    rng = np.random.default_rng([seed, 0x5EB])
    caps = {"train": rows, "valid": max(rows // 4, 50), "test": max(rows // 4, 50)}
    splits = {name: np.sort(rng.permutation(np.asarray(idx))[:caps[name]]) for name, idx in data.splits.items()}
    keep = np.concatenate([splits[n] for n in ("train", "valid", "test")])
    position = np.full(data.n_rows, -1)
    position[keep] = np.arange(len(keep))
    return Dataset(
        name=data.name, X=data.X[keep], y=data.y[keep], s=data.s[keep],
        splits={n: position[idx] for n, idx in splits.items()}, feature_names=data.feature_names,
        class_names=data.class_names, group_names=data.group_names, label_name=data.label_name,
        sensitive_name=data.sensitive_name, source=f"{data.source}, subsampled to {rows} train rows (seed {seed})",
        sha256=data.sha256, preprocessing=data.preprocessing,
    )
