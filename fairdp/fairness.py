"""Group-fairness metrics (percent) from confusion counts, for one model or a pack of K.

Notation: y are true labels 0..C-1, y_pred predicted labels, s group codes 0..G-1. For a
class c and group g (one-vs-rest when C > 2):

- TPR_g,c = P(y_pred=c | y=c, s=g), FPR_g,c = P(y_pred=c | y!=c, s=g),
- SR_g,c  = P(y_pred=c | s=g) (selection rate), ACC_g = P(y_pred=y | s=g).

A gap of a rate is its largest difference between any two groups, max_g - min_g, i.e. a
magnitude. Binary tasks (C <= 2) use the positive class only, O = {1}; class 0 adds nothing
to dp_gap or eo_gap (its TPR/FPR/SR are 1 minus class 1's FPR/TPR/SR) and is left out of
tpr_gap and grms as FEDERATE defines them. Multi-class tasks use every class, O = {0..C-1}.

- ``tpr_gap``: FEDERATE sec. 5, TPR-gap = P_g(y_pred=1|y=1) - P_not-g(y_pred=1|y=1), as a
  magnitude; with G > 2 groups the largest pairwise gap; with C > 2 classes the largest
  per-class TPR gap.
- ``grms``: FEDERATE eq. 5 (Romanov et al. 2019), sqrt(mean_{c in O} TPR-gap_c^2). For binary
  tasks O = {1}, so grms == tpr_gap exactly ("boils down to TPR-gap in binary setting").
- ``dp_gap``, ``eo_gap``, ``ap_gap``: Tran et al. (PF-LD) report "the maximal difference in
  fairness constraint violations between any two protected groups" for demographic parity,
  equalized odds and accuracy parity: the gaps of SR, of both TPR and FPR (equalized odds
  over y in {0, 1}), and of ACC. PF-LD trains on group-vs-population constraints
  |E_D[h] - E_{D_g}[h]| (their eq. 1) but evaluates the pairwise maximum used here, which
  bounds the group-vs-population violation from above. Their notions are stated for binary
  y_pred; for C > 2 dp_gap and eo_gap are our one-vs-rest extension: the maximum over
  classes of the per-class SR gap, resp. of the per-class TPR and FPR gaps (not the full
  P(y_pred=a | y=b, s) matrix).

Undefined rates: a group with fewer than ``min_group_count`` rows in a rate's conditioning
set (y=c rows for TPR_g,c, y!=c rows for FPR_g,c, all its rows for SR and ACC) is left out
of that gap: its rate is not estimated (``small_groups`` lists such groups and their sizes).
``min_group_count`` is 1 here by default, the textbook definition (a group with no such row
is left out, as fairlearn's MetricFrame leaves out an undefined rate); a study sets its own
(``evaluate.min_group_count``, 30 by default): an intersection of attributes can hold a group
of one positive, whose TPR is 0 or 100 and would decide a max-gap by itself.
A gap defined for fewer than two groups is NaN; a maximum over classes skips NaN gaps and
is NaN when all are; grms averages over the classes whose gap is defined (NaN if none).
Nothing here divides by zero or warns.

Inputs: y and s are 1-D integer codes of length n; y_pred is 1-D (n,) or a pack (K, n) of K
configs' predictions for the same rows, in which case every metric returns an array (K,).
C and G are inferred as 1 + the largest code (C at least 2), or given as ``n_classes`` and
``n_groups``, so that a multi-class task whose sample shows only classes 0 and 1 is still
scored as multi-class (this changes tpr_gap and grms only) and an absent group is reported.
All metrics come from one np.bincount over (config, group, y, y_pred), so packs of
hundreds of configs on 10^4 rows take milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from fairdp.errors import InputError

Score = float | np.ndarray

MIN_GROUP_COUNT = 30
"""A study's default ``evaluate.min_group_count``: a rate estimated from n rows has a standard
error of at most 50 / sqrt(n) percentage points, 9.1 at n = 30 and 50 at n = 1, so below 30 a
group's rate is mostly its sampling noise, and its noise would decide a max-gap. The functions
here default to 1, the plain definition."""


@dataclass(frozen=True)
class _Counts:
    """Confusion counts per (config, group, class): arrays of shape (K, G, C) or (K, G)."""

    tp: np.ndarray  # y == c and y_pred == c
    pos: np.ndarray  # y == c
    pred: np.ndarray  # y_pred == c
    size: np.ndarray  # (K, G) rows in the group
    correct: np.ndarray  # (K, G) y_pred == y
    packed: bool
    least: int = 1  # the fewest rows a rate is estimated from (``min_group_count``)

    @property
    def binary(self) -> bool:
        return self.tp.shape[2] <= 2

    def classes(self) -> slice:
        """The classes O the task-level gaps range over: {1} for binary tasks, all otherwise."""
        return slice(1, 2) if self.binary else slice(None)

    def out(self, value: np.ndarray) -> Score:
        """A float for a 1-D y_pred, the (K,) array for a pack."""
        return value if self.packed else float(value[0])


def _least(min_group_count) -> int:
    """``min_group_count`` checked: an integer >= 1, or InputError naming it."""
    if (isinstance(min_group_count, bool) or not isinstance(min_group_count, (int, np.integer))
            or min_group_count < 1):
        raise InputError(f"min_group_count must be an integer >= 1, got {min_group_count!r}")
    return int(min_group_count)


def _codes(name: str, value: ArrayLike, ndims: tuple[int, ...]) -> np.ndarray:
    """Non-negative integer codes as int64, or InputError naming ``name``."""
    arr = np.asarray(value)
    if arr.ndim not in ndims:
        shapes = " or ".join(f"{d}-D" for d in ndims)
        raise InputError(f"{name} must be {shapes}, got shape {arr.shape}")
    if arr.size == 0:
        raise InputError(f"{name} is empty")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            raise InputError(f"{name} must hold integer codes, got {arr[bad].flat[0]}")
    elif arr.dtype.kind not in "biu":
        raise InputError(f"{name} must hold integer codes, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.min() < 0:
        raise InputError(f"{name} must hold non-negative codes, got {arr.min()}")
    return arr


def _size(
    name: str, given: int | None, inferred: int, least: int, codes: dict[str, np.ndarray]
) -> int:
    """``given`` (an integer >= ``least``, above every code) or max(``inferred``, ``least``)."""
    if given is None:
        return max(inferred, least)
    if isinstance(given, bool) or not isinstance(given, (int, np.integer)) or given < least:
        raise InputError(f"{name} must be an integer >= {least}, got {given!r}")
    for arg, arr in codes.items():
        if arr.max() >= given:
            raise InputError(f"{arg} has code {arr.max()} but {name} is {given}")
    return int(given)


def _counts(
    y: ArrayLike | None,
    y_pred: ArrayLike,
    s: ArrayLike | None,
    n_classes: int | None,
    n_groups: int | None,
    min_group_count: int = 1,
) -> _Counts:
    """Validate the inputs and count them in one bincount; y or s None means all zeros."""
    least = _least(min_group_count)
    return _from_confusion(*_confusion(y, y_pred, s, n_classes, n_groups), least=least)


def _confusion(
    y: ArrayLike | None,
    y_pred: ArrayLike,
    s: ArrayLike | None,
    n_classes: int | None,
    n_groups: int | None,
) -> tuple[np.ndarray, bool]:
    """Counts (K, G, C, C) of (config, group, y, y_pred), and whether y_pred was a pack."""
    yp = _codes("y_pred", y_pred, (1, 2))
    n = yp.shape[-1]
    given = {"y_pred": yp}
    for name, value in (("y", y), ("s", s)):
        if value is None:
            continue
        given[name] = _codes(name, value, (1,))
        if given[name].shape[0] != n:
            raise InputError(f"{name} has {given[name].shape[0]} entries but y_pred has {n}")
    yt = given.get("y", np.zeros(n, np.int64))
    sg = given.get("s", np.zeros(n, np.int64))
    label_codes = {k: v for k, v in given.items() if k != "s"}
    C = _size("n_classes", n_classes, 1 + max(int(v.max()) for v in label_codes.values()), 2,
              label_codes)
    G = _size("n_groups", n_groups, 1 + int(sg.max()), 1, {"s": sg} if s is not None else {})
    packed = yp.ndim == 2
    yp2 = yp.reshape(-1, n)
    K = yp2.shape[0]
    idx = ((np.arange(K)[:, None] * G + sg) * C + yt) * C + yp2
    conf = np.bincount(idx.ravel(), minlength=K * G * C * C).reshape(K, G, C, C)
    return conf, packed


def _from_confusion(conf: np.ndarray, packed: bool = True, least: int = 1) -> _Counts:
    """``_Counts`` of confusion counts (K, G, C, C) indexed (config, group, y, y_pred)."""
    tp = np.diagonal(conf, axis1=2, axis2=3)
    return _Counts(tp=tp, pos=conf.sum(3), pred=conf.sum(2), size=conf.sum((2, 3)),
                   correct=tp.sum(2), packed=packed, least=least)


def _rate(num: np.ndarray, den: np.ndarray, least: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """100 * num / den where den >= least (and > 0), and that mask (0 elsewhere, never a
    division warning)."""
    ok = np.broadcast_to(den >= max(least, 1), np.broadcast_shapes(num.shape, den.shape))
    return 100.0 * np.divide(num, den, out=np.zeros(ok.shape), where=ok), ok


def _nan_rate(num: np.ndarray, den: np.ndarray, least: int = 1) -> np.ndarray:
    """100 * num / den, NaN where den < least (or 0)."""
    rate, ok = _rate(num, den, least)
    return np.where(ok, rate, np.nan)


def _spread(rate: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Largest pairwise difference over the group axis 1 among defined entries, and its mask."""
    hi = np.where(ok, rate, -np.inf).max(axis=1)
    lo = np.where(ok, rate, np.inf).min(axis=1)
    defined = ok.sum(axis=1) >= 2
    return np.where(defined, hi, 0.0) - np.where(defined, lo, 0.0), defined


def _max(gap: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Max over the last axis of the defined gaps; NaN where none is defined."""
    top = np.where(ok, gap, -np.inf).max(axis=-1)
    return np.where(ok.any(axis=-1), top, np.nan)


def _tpr_gaps(c: _Counts) -> tuple[np.ndarray, np.ndarray]:
    """Per-class TPR gaps (K, |O|) and their masks."""
    o = c.classes()
    return _spread(*_rate(c.tp[:, :, o], c.pos[:, :, o], c.least))


def tpr_gap(
    y: ArrayLike, y_pred: ArrayLike, s: ArrayLike,
    *, n_classes: int | None = None, n_groups: int | None = None, min_group_count: int = 1,
) -> Score:
    """TPR-gap (FEDERATE sec. 5), percent: the largest TPR gap between groups over O."""
    c = _counts(y, y_pred, s, n_classes, n_groups, min_group_count)
    return c.out(_tpr_gap(c))


def _tpr_gap(c: _Counts) -> np.ndarray:
    return _max(*_tpr_gaps(c))


def grms(
    y: ArrayLike, y_pred: ArrayLike, s: ArrayLike,
    *, n_classes: int | None = None, n_groups: int | None = None, min_group_count: int = 1,
) -> Score:
    """GRMS (FEDERATE eq. 5), percent: root mean square of the defined per-class TPR gaps."""
    c = _counts(y, y_pred, s, n_classes, n_groups, min_group_count)
    return c.out(_grms(c))


def _grms(c: _Counts) -> np.ndarray:
    gap, ok = _tpr_gaps(c)
    m = ok.sum(axis=-1)
    mean_sq = np.divide((np.where(ok, gap, 0.0) ** 2).sum(axis=-1), m,
                        out=np.full(m.shape, np.nan), where=m > 0)
    return np.sqrt(mean_sq)


def dp_gap(
    y_pred: ArrayLike, s: ArrayLike,
    *, n_classes: int | None = None, n_groups: int | None = None, min_group_count: int = 1,
) -> Score:
    """Demographic-parity violation (Tran et al.), percent: the largest selection-rate gap."""
    c = _counts(None, y_pred, s, n_classes, n_groups, min_group_count)
    return c.out(_dp_gap(c))


def _dp_gap(c: _Counts) -> np.ndarray:
    o = c.classes()
    return _max(*_spread(*_rate(c.pred[:, :, o], c.size[:, :, None], c.least)))


def eo_gap(
    y: ArrayLike, y_pred: ArrayLike, s: ArrayLike,
    *, n_classes: int | None = None, n_groups: int | None = None, min_group_count: int = 1,
) -> Score:
    """Equalized-odds violation (Tran et al.), percent: the largest TPR or FPR gap."""
    c = _counts(y, y_pred, s, n_classes, n_groups, min_group_count)
    return c.out(_eo_gap(c))


def _eo_gap(c: _Counts) -> np.ndarray:
    o = c.classes()
    tpr, tpr_ok = _tpr_gaps(c)
    neg = c.size[:, :, None] - c.pos[:, :, o]
    fpr, fpr_ok = _spread(*_rate(c.pred[:, :, o] - c.tp[:, :, o], neg, c.least))
    return _max(np.concatenate([tpr, fpr], -1), np.concatenate([tpr_ok, fpr_ok], -1))


def ap_gap(
    y: ArrayLike, y_pred: ArrayLike, s: ArrayLike,
    *, n_classes: int | None = None, n_groups: int | None = None, min_group_count: int = 1,
) -> Score:
    """Accuracy-parity violation (Tran et al.), percent: the largest per-group accuracy gap."""
    c = _counts(y, y_pred, s, n_classes, n_groups, min_group_count)
    return c.out(_ap_gap(c))


def _ap_gap(c: _Counts) -> np.ndarray:
    gap, ok = _spread(*_rate(c.correct, c.size, c.least))
    return np.where(ok, gap, np.nan)


def accuracy(y: ArrayLike, y_pred: ArrayLike) -> Score:
    """Accuracy, percent."""
    c = _counts(y, y_pred, None, None, None)
    return c.out(_accuracy(c))


def _accuracy(c: _Counts) -> np.ndarray:
    """Over all groups (a single group when s is not given)."""
    return 100.0 * c.correct.sum(1) / c.size.sum(1)


def macro_f1(y: ArrayLike, y_pred: ArrayLike) -> Score:
    """Macro F1, percent: mean of 2TP / (2TP + FP + FN) over the classes present in y or
    y_pred (per config), as sklearn's ``f1_score(average="macro")``; binary tasks average
    both classes."""
    c = _counts(y, y_pred, None, None, None)
    f1, ok = _rate(2 * c.tp[:, 0], c.pos[:, 0] + c.pred[:, 0])
    return c.out(f1.sum(axis=-1) / ok.sum(axis=-1))


def group_rates(
    y: ArrayLike, y_pred: ArrayLike, s: ArrayLike,
    *, n_classes: int | None = None, n_groups: int | None = None, min_group_count: int = 1,
) -> pd.DataFrame:
    """Per-group rates behind the gaps, percent, one row per (group, class c in O).

    Columns: ``group``, ``class``, ``count`` (rows in the group), ``positives`` (rows with
    y == c), ``tpr``, ``fpr``, ``selection_rate`` (one-vs-rest for class c) and ``accuracy``
    (the group's accuracy over all classes, repeated on its rows). A rate is NaN where its
    conditioning set has fewer than ``min_group_count`` rows (or none), as the gaps leave it
    out. Binary tasks have one row per group (c = 1); a pack (K, n) adds a leading ``config``.
    """
    c = _counts(y, y_pred, s, n_classes, n_groups, min_group_count)
    o = c.classes()
    tp, pos, pred = c.tp[:, :, o], c.pos[:, :, o], c.pred[:, :, o]
    size = np.broadcast_to(c.size[:, :, None], tp.shape)
    config, group, cls = np.meshgrid(np.arange(tp.shape[0]), np.arange(tp.shape[1]),
                                     np.arange(c.tp.shape[2])[o], indexing="ij")
    cols = {
        "config": config,
        "group": group,
        "class": cls,
        "count": size,
        "positives": pos,
        "tpr": _nan_rate(tp, pos, c.least),
        "fpr": _nan_rate(pred - tp, size - pos, c.least),
        "selection_rate": _nan_rate(pred, size, c.least),
        "accuracy": _nan_rate(c.correct[:, :, None], size, c.least),
    }
    if not c.packed:
        del cols["config"]
    return pd.DataFrame({name: value.ravel() for name, value in cols.items()})


SMALL_GROUP_SETS = ("rows", "positives", "negatives")
"""The conditioning sets a group's rates are estimated from: all its rows (selection rate,
accuracy), its rows of class c (TPR) and its rows of another class (FPR)."""


def small_groups(conf: ArrayLike, min_group_count: int) -> pd.DataFrame:
    """The groups whose rates a gap leaves out at ``min_group_count``, from confusion counts
    (G, C, C) indexed (group, y, y_pred): one row per (group, class c in O, conditioning set
    of ``SMALL_GROUP_SETS``) with fewer than ``min_group_count`` rows but at least one (a set
    with no row is not a small group: the group has no such rows at all), with ``count``, its
    size. Columns ``group``, ``class``, ``set``, ``count``, ordered by group, class, set."""
    least = _least(min_group_count)
    conf = np.asarray(conf)
    if conf.ndim != 3 or conf.shape[1] != conf.shape[2] or conf.shape[1] < 2:
        raise InputError(f"conf: expected counts of shape (G, C, C) with C >= 2, got {conf.shape}")
    c = _from_confusion(conf[None].astype(np.int64), least=least)
    o = c.classes()
    pos = c.pos[0, :, o]  # (G, |O|)
    size = np.broadcast_to(c.size[0, :, None], pos.shape)
    sets = np.stack([size, pos, size - pos], axis=-1)  # (G, |O|, 3)
    group, cls, which = np.nonzero((sets > 0) & (sets < least))
    classes = np.arange(c.tp.shape[2])[o]
    return pd.DataFrame({"group": group, "class": classes[cls],
                         "set": np.asarray(SMALL_GROUP_SETS, dtype=object)[which],
                         "count": sets[group, cls, which]})


def confusion(
    y: ArrayLike, y_pred: ArrayLike, s: ArrayLike,
    *, n_classes: int | None = None, n_groups: int | None = None,
) -> np.ndarray:
    """Counts of (group, y, y_pred): (G, C, C) for one model, (K, G, C, C) for a pack. Every
    metric here is a function of them (``scores_from_confusion``), so a row that stores them
    can be re-scored, and bootstrapped, without its predictions."""
    conf, packed = _confusion(y, y_pred, s, n_classes, n_groups)
    return conf if packed else conf[0]


SCORES = {"accuracy": _accuracy, "tpr_gap": _tpr_gap, "grms": _grms, "dp_gap": _dp_gap,
          "eo_gap": _eo_gap, "ap_gap": _ap_gap}
"""What ``scores_from_confusion`` computes: accuracy and every fairness gap."""


def scores_from_confusion(conf: ArrayLike, min_group_count: int = 1) -> dict[str, np.ndarray]:
    """Accuracy and every fairness gap (percent) of confusion counts (..., G, C, C) indexed
    (group, y, y_pred), as ``accuracy``, ``tpr_gap``, ... compute them from predictions at
    the same ``min_group_count``; leading axes (configs, bootstrap draws) are kept."""
    least = _least(min_group_count)
    conf = np.asarray(conf)
    if conf.ndim < 3 or conf.shape[-1] != conf.shape[-2] or conf.shape[-1] < 2:
        raise InputError(f"conf: expected counts of shape (..., G, C, C) with C >= 2, got {conf.shape}")
    lead = conf.shape[:-3]
    c = _from_confusion(conf.reshape(-1, *conf.shape[-3:]), least=least)
    return {name: fn(c).reshape(lead) for name, fn in SCORES.items()}
