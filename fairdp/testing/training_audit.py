"""An end-to-end empirical privacy audit of training: one DP-SGD or PF-LD config trained once,
with canaries (Steinke, Nasr and Jagielski, NeurIPS 2023, "Privacy auditing with one (1)
training run"), and for PF-LD an audit of its dual release on its own. The bounds themselves
are ``fairdp.privacy.training_audit``; this module runs the games that feed them
(``fairdp audit-training`` on the command line).

Two kinds of canaries (``canary_kind``).

**Gradient canaries (white-box, the default).** Dirac canaries in gradient space, as in Nasr
et al.'s tight auditing (USENIX Security 2023) and Steinke et al.'s white-box audit: canary i
is a per-sample gradient of norm N (``canary_norm`` times the claimed clipping bound) on one
coordinate j_i of its own, and the m coordinates are spread over every parameter group (each
layer's weight and bias; ``place_gradient_canaries``). Each gets an independent uniform sign
S_i. Under DP-SGD's add/remove relation canary i is in the training set iff S_i = +1; under
PF-LD's attribute relation its attribute is 1 iff S_i = +1, and only then does it enter the
private part of the fairness gradient (with attribute 0 it contributes nothing there, and its
public terms, the same for both signs, are left out). A present canary is Poisson-sampled at
the step's rate q at every step, like a record, and enters the method's real step where a
sampled record's per-sample gradient enters: as one more row of the engine's
``add_clipped_gradients`` call, clipped with the rows (so a norm above the bound shows missing
clipping), weighted as a record (-1 / B for DP-SGD, kappa for PF-LD), and summed before the
step's one noise draw. (In the engine's per-layer factorisation a row's gradient is a_l d_l^T
plus d_l on the bias; a weight canary is a = 1000 e_c, d = N / sqrt(1000^2 + 1) e_r, so 1e-6 of
its square lands on bias r, a unit no canary is scored on; a bias canary is a = 0, d = N e_r.)
On a functional pack (a module of the user's, or ``packing: functional``) the canaries are
placed over every parameter tensor (``place_parameter_canaries``) and are exact Dirac gradients,
N on one entry and 0 elsewhere, given to the pack's ``add_clipped`` as rows (``extra_rows``).
``train`` and ``arch`` take a study's settings and modules (``fairdp audit-training --spec``).

What the white-box auditor sees: every step's released gradient (both methods' analyses
release every step's noisy sum; the iterates are its post-processing), the public data and
the public randomness (for PF-LD the minibatch, which the attribute does not reach, and the
released dual values that fix the weights rho and kappa). Not the noise, the Poisson samples
or the canaries' coins. Its score for canary i is the log-likelihood ratio, summed over the
steps, of "canary i sampled at rate q" against "absent" for the step's residual on j_i: the
residual is the step's gradient minus the auditor's reference, the update the step makes
without noise, canaries and the private sample's randomness (the public part exactly; for the
private part its expectation, q times every candidate record's weighted clipped gradient at the
current parameters), so the real data's drift does not drown the canaries. With mu the push a
sampled canary gives its coordinate under the claimed clipping and s^2 the residuals' robust
variance in the canary's parameter group over the epoch (the median absolute deviation over
the group's coordinates and steps), a step adds log(1 - q + q exp((mu r - mu^2 / 2) / s^2)).

**Input canaries (black-box).** m canary records with their own input directions: the
features are extended by m columns, zero for every real record, and canary i is R e_{d+i}
(``canary_norm`` R, default 4); its label is i mod 2 for DP-SGD and the train split's majority
label for PF-LD (``canary_labels``). They are ordinary records that go through the method's
real step and the engine's real loop (sampling, clipping, noise, PF-LD's dual steps). The
auditor sees the trained model's parameters and the initial ones (data-independent), and the
non-canary data. Score: for canary i, D_i = the change in the logit difference l_1 - l_0 at
canary i's input that its own column's movement causes (the final model at R e_{d+i}, minus
the final model with that column put back to its initial value). DP-SGD: score_i = D_i signed
towards canary i's label. PF-LD: the only path from canary i's attribute to the model is the
private part of the fairness gradient, which pushes h (P(y_hat = 1) for dp and eo, the loss for
ap) of group 1's rows up when group 1 is the disadvantaged one and down otherwise; the auditor
reads which from the final model on the real training rows, turns it into the sign of the push
on l_1 - l_0, and centres D_i on the median of the canaries of its label.

**Guesses and bound.** The k+ highest scores are guessed +1, the k- lowest -1, the rest
abstain (k+ and k- fixed before the run). v correct guesses out of r = k+ + k- give the
empirical eps lower bound of the paper's Theorem 3 at the config's claimed delta
(``one_run_epsilon_lower_bound``), at confidence 1 - beta, never above
``epsilon_ceiling(r, m)``.

**PF-LD's dual release** (``audit_dual_release``) is audited on its own: the released group-1
sums and counts are aggregates, in which one-run canaries cannot be told apart. Two
neighbouring training sets differ in one record's attribute (the record with the largest
clipped h at the model, the one that moves the release most); the real step's first dual
release is drawn many times on each, at one fixed model, and ``fairdp.privacy.audit.audit``
picks an event on half the draws and bounds its two probabilities on the other half
(Clopper-Pearson); ``event_epsilon_lower_bound`` turns them into an (eps, delta) bound.

A bound above the claimed eps refutes the claim (an implementation or analysis bug); a bound
below it proves nothing. Planted bugs, for tests and demonstrations, keep the correct run's
claim: ``noise_scale`` (the noise multipliers scaled), ``clipping=False`` (per-row clipping off,
the noise kept at the clipped sensitivity), ``noise_first_layer_only`` (the step's noise kept on
the first layer's weight and bias only) and, for PF-LD, ``dual_noise=False`` (the dual sums and
counts released without noise).

DPSGD-Global-Adapt, DPSGD-F and DP-FERMI (``dpsgd_global_adapt``, ``dpsgd_f``, ``dp_fermi``)
are audited with input canaries only, as DP-SGD (add/remove one record, the same labels and
score); their gradient canaries are refused (``INPUT_CANARIES_ONLY``), and of the planted bugs
only ``noise_scale`` (on every multiplier of a step, ``NOISE_ATTRIBUTES``) and
``noise_first_layer_only`` apply.

One caveat of the input game for DP-SGD: the training set has n + (number of included
canaries) rows, and the method calibrates its noise multiplier and sampling rate to the
realised n (``RunInfo``), so the mechanism's parameters move slightly with the canaries' signs;
the claimed eps is the method's own for the realised run. Gradient canaries are not rows of
the dataset: n, q and the noise are the real data's.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from fairdp.data import Dataset
from fairdp.engine import (
    Architecture,
    FunctionalPack,
    TrainSettings,
    add_clipped_gradients,
    backprop_errors,
    fit_pack,
)
from fairdp.engine.contract import EpochReport, PackContext, PackStep
from fairdp.errors import InputError
from fairdp.methods import NeuralMethod, RunInfo, get_method
from fairdp.privacy.audit import audit as audit_mechanism
from fairdp.privacy.training_audit import (
    distinguishing_ceiling,
    epsilon_ceiling,
    event_epsilon_lower_bound,
    one_run_epsilon_lower_bound,
)

METHODS = ("dpsgd", "pfld", "dpsgd_global_adapt", "dpsgd_f", "dp_fermi")
"""The methods whose training this audit runs: central (eps, delta)-DP of the training data."""

INPUT_CANARIES_ONLY = ("dpsgd_global_adapt", "dpsgd_f", "dp_fermi")
"""Methods audited with input canaries only: the white-box game's reference and scores model
DP-SGD's and PF-LD's steps (a sampled canary's push is its clipped gradient times the record
weight), not DPSGD-Global-Adapt's scaling by C0 / max(||g||, Z) with a Z that moves with the
noisy counts, DPSGD-F's bounds per group from noisy counts, or DP-FERMI's ERMI term with its W
step; their input canaries are ordinary records, through the method's own step, as DP-SGD's."""

NOISE_ATTRIBUTES = {"dpsgd": ("sigma",), "pfld": ("sig_p", "sig_d"), "dpsgd_global_adapt": ("sigma", "sigma_count"),
                    "dpsgd_f": ("sigma", "sigma_count"), "dp_fermi": ("sigma_theta", "sigma_w")}
"""Each method's step's noise multipliers, what ``noise_scale`` scales (every release of a step;
DP-FERMI's one count release is drawn before training, so it keeps its noise)."""

ADJACENCY = {
    "dpsgd": "add/remove one record: canary i is in the training set iff S_i = +1",
    "dpsgd_global_adapt": "add/remove one record: canary i is in the training set iff S_i = +1",
    "dpsgd_f": "add/remove one record: canary i is in the training set iff S_i = +1",
    "dp_fermi": "add/remove one record: canary i is in the training set iff S_i = +1",
    "pfld": "replace one record's attribute: canary i's sensitive attribute is 1 iff S_i = +1",
}

CANARY_KINDS = ("gradient", "input")
"""``gradient``: white-box Dirac canaries in gradient space, scored on every step's update;
``input``: black-box canary records with their own input columns, scored on the final model."""

CANARY_NORM = 4.0
"""R, the input canaries' one non-zero feature. In Tran et al.'s network at initialisation, a
canary of norm 4 has a loss gradient of norm about 1 (the default clip: it contributes about the
sensitivity the noise is scaled to) with about a third of its square in the canary's own
column; norm 50 puts 0.88 there at norm 6.6 (what catching disabled clipping needs), norm 1
only 0.03."""

GRADIENT_CANARY_NORM = 10.0
"""A gradient canary's norm, in clipping bounds: clipped to the bound in a correct step, ten
times its push without clipping, which the auditor (expecting the clipped push) sees plainly."""

_WEIGHT_CANARY_INPUT = 1e3
"""a of a weight canary (a e_c, d e_r): 1 / (1 + a^2) of its square lands on bias r."""

DUAL_SAMPLES = 4000
"""Dual releases drawn per neighbouring dataset: half choose the event, half bound it; the
ceiling with 2000 held out at delta 1e-5 and confidence 0.95 is about 6.3."""

_DUAL_CONFIGS = 64
"""Releases drawn per call of the dual step: configs of one pack sharing one model."""

_NO_CLIP = 1e12
"""The clipping bound of the planted ``clipping=False`` bug: no gradient reaches it."""

DETECTS = {
    "gradient": (
        "a step's noise below the claim, on every parameter or on any one layer's (every layer's weight and "
        "bias holds canaries)",
        "per-row clipping missing or looser than claimed (a canary's gradient is 10 clipping bounds)",
    ),
    "input": (
        "a step's noise far below the claim on the first layer's weights (a canary's own input column)",
        "per-row clipping missing, surely with canaries far above the bound (--canary-norm 50)",
    ),
}
"""What each kind of canary is built to see (docs/guide/metrics.md has the measurements)."""

BLIND_TO = {
    "gradient": (
        "leaks outside the steps' clipped noisy sums: PF-LD's dual release (audited on its own), its public "
        "terms, evaluation or model selection",
        "leaks through the real records' data rather than through a record's own clipped gradient (a "
        "data-dependent sampling rate, normaliser or noise scale), or a real record's per-sample gradient "
        "computed wrongly (a canary's gradient is given, not computed: a module that mixes the rows of a batch "
        "is for the study's checks and check-model to refuse)",
        "an eps above the largest showable one, and excess leakage the one-run bound cannot resolve: it is "
        "loose for Poisson-subsampled steps (DP-SGD at eps 1 with noise x0.5, true eps 2.8, shows about 0.5)",
    ),
    "input": (
        "everything but a record's effect on its own input column of the first layer: noise missing on the "
        "deeper layers, PF-LD's dual release",
        "leaks that show in the training's iterates but not in the final model",
        "an eps above the largest showable one, and all but gross errors: noise x0.2, and clipping off at the "
        "default canary norm, are at its margin (bounds of 0.5 to 1.2 against a claim of 1, by dataset)",
    ),
}
"""What each kind of canary cannot see: a bound at or below the claim says nothing of these."""

DUAL_DETECTS = (
    "noise on PF-LD's released group-1 sums and counts far below the claim: none at all, or a dual noise "
    "multiplier sigma_d near 1 (at eps 1: refuted at sigma_d 1.0, not at 2.0)",
)
"""What the dual release audit is built to see."""

DUAL_BLIND_TO = (
    "the primal steps (the one-run audit's part); of the releases, only the first (sums and counts) is drawn",
    "a dual noise multiplier reduced but still above about 2: PF-LD's calibration puts sigma_d far above "
    "that (about 60 to 70 at eps 1), so a correct release shows about 0",
    "an eps above the largest showable one",
)
"""What the dual release audit cannot see."""


@dataclass(frozen=True)
class TrainingAuditResult:
    """The outcome of ``audit_training``.

    ``eps_lower`` holds with probability >= 1 - ``beta``: the trained run is not
    (eps, ``claimed_delta``)-DP for any eps < eps_lower. ``refuted``: eps_lower > claimed_eps.
    ``eps_ceiling`` is the most this audit could have shown (every guess right).
    ``correct`` of the ``k_positive + k_negative`` guesses were right (``correct_positive``
    among the +1 guesses). ``canaries_per_group``: the gradient canaries in each parameter
    (empty for input canaries). ``noise_scale``, ``clipping``, ``noise_first_layer_only`` and
    ``dual_noise`` say whether a bug was planted.
    """

    method: str
    dataset: str
    config: dict
    canary_kind: str
    claimed_eps: float
    claimed_delta: float
    eps_lower: float
    eps_ceiling: float
    beta: float
    canaries: int
    canaries_per_group: dict
    k_positive: int
    k_negative: int
    correct: int
    correct_positive: int
    positive_signs: int
    n_train: int
    epochs: int
    batch_size: int
    seed: int
    canary_norm: float
    noise_scale: float
    clipping: bool
    noise_first_layer_only: bool
    dual_noise: bool
    adjacency: str
    duration_s: float
    scores: np.ndarray = field(repr=False, compare=False)
    signs: np.ndarray = field(repr=False, compare=False)

    @property
    def guesses(self) -> int:
        return self.k_positive + self.k_negative

    @property
    def refuted(self) -> bool:
        return self.eps_lower > self.claimed_eps

    @property
    def planted_bug(self) -> bool:
        return self.noise_scale != 1.0 or not self.clipping or self.noise_first_layer_only or not self.dual_noise

    def to_dict(self) -> dict:
        """Everything but the per-canary arrays, JSON-ready."""
        out = {k: v for k, v in asdict(self).items() if k not in ("scores", "signs")}
        return {**out, "guesses": self.guesses, "refuted": self.refuted, "planted_bug": self.planted_bug}


@dataclass(frozen=True)
class DualReleaseAuditResult:
    """The outcome of ``audit_dual_release``.

    ``eps_lower`` holds with probability >= 1 - ``beta``: the dual release, and so the run, is
    not (eps, ``claimed_delta``)-DP for any eps < eps_lower (``claimed_eps`` is the whole run's
    claim, which covers the release). ``event`` is the distinguishing event, chosen on half the
    ``samples`` draws per dataset; ``p_lower`` bounds its probability under the favoured
    dataset (``numerator``: "x" is the target's attribute 1, "x_prime" attribute 0) from below
    and ``p_upper`` under the other from above, on the other half. ``target_row`` (a row index
    of the dataset) is the record whose attribute differs, ``target_h`` its clipped h.
    """

    dataset: str
    config: dict
    claimed_eps: float
    claimed_delta: float
    eps_lower: float
    eps_ceiling: float
    beta: float
    samples: int
    target_row: int
    target_h: float
    event: str
    numerator: str
    p_lower: float
    p_upper: float
    sigma_dual: float
    noise_scale: float
    dual_noise: bool
    seed: int
    duration_s: float

    @property
    def refuted(self) -> bool:
        return self.eps_lower > self.claimed_eps

    @property
    def planted_bug(self) -> bool:
        return self.noise_scale != 1.0 or not self.dual_noise

    def to_dict(self) -> dict:
        return {**asdict(self), "refuted": self.refuted, "planted_bug": self.planted_bug}


def canary_labels(base: Dataset, m: int, method: str) -> np.ndarray:
    """The canaries' labels. DP-SGD: i mod 2, both classes alike. PF-LD: every canary has the
    train split's majority label, the one the model leans to at a canary's (all-zero) features:
    the public loss term, which moves a canary whatever its attribute, is then small beside
    the private fairness term, which moves it only with attribute 1."""
    if method == "pfld":
        majority = int(np.bincount(base.y[np.asarray(base.splits["train"])], minlength=base.n_classes).argmax())
        return np.full(m, majority, dtype=np.int64)
    return np.arange(m) % base.n_classes


def canary_dataset(base: Dataset, signs: np.ndarray, method: str, canary_norm: float = CANARY_NORM) -> Dataset:
    """``base`` with m = len(signs) canary columns and the canaries of ``signs`` in its train split.

    Every base row gets m zero columns; canary i is ``canary_norm`` in column d + i and 0
    elsewhere, labelled by ``canary_labels``. DP-SGD and DPSGD-Global-Adapt (add/remove one
    record): only the canaries with sign +1 are rows, in train; PF-LD: every canary is a train row, sensitive attribute 1 iff its sign is +1 (for
    DP-SGD the attribute is (i // 2) mod (groups), independent of the label and sign).
    """
    m, d = len(signs), base.n_features
    rows = np.arange(m) if method == "pfld" else np.flatnonzero(signs > 0)  # add/remove: the included ones
    x_canary = np.zeros((len(rows), d + m), dtype=np.float32)
    x_canary[np.arange(len(rows)), d + rows] = canary_norm
    y_canary = canary_labels(base, m, method)[rows]
    s_canary = (signs[rows] > 0).astype(np.int64) if method == "pfld" else (rows // 2) % base.n_groups
    X = np.concatenate([np.concatenate([base.X, np.zeros((base.n_rows, m), np.float32)], axis=1), x_canary])
    splits = dict(base.splits)
    splits["train"] = np.concatenate([np.asarray(base.splits["train"]), base.n_rows + np.arange(len(rows))])
    return Dataset(
        name=base.name, X=X, y=np.concatenate([base.y, y_canary]), s=np.concatenate([base.s, s_canary]),
        splits=splits, feature_names=(*base.feature_names, *(f"canary_{i}" for i in range(m))),
        class_names=base.class_names, group_names=base.group_names, label_name=base.label_name,
        sensitive_name=base.sensitive_name, source=f"{base.source} + {m} audit canaries",
        sha256=base.sha256, preprocessing=base.preprocessing,
    )


def _plant(step: PackStep, method: str, noise_scale: float, clipping: bool, dual_noise: bool = True) -> None:
    """Scale the step's noise multipliers (``NOISE_ATTRIBUTES``) by ``noise_scale``; with
    ``clipping=False`` (DP-SGD, PF-LD), raise its clipping bound out of reach and keep the noise's
    standard deviation (multiplier times bound) what it was; with ``dual_noise=False`` (PF-LD),
    release the dual sums and counts without noise. The clipping bounds are DP-SGD's ``clip`` and
    PF-LD's ``c_p``."""
    noises = NOISE_ATTRIBUTES[method]
    clip = {"dpsgd": "clip", "pfld": "c_p"}.get(method)
    for name in (*noises, *((clip,) if clip else ())):
        if not isinstance(getattr(step, name, None), torch.Tensor):
            raise RuntimeError(f"the audit's planted bug needs the {method} step's '{name}' tensor; "
                               f"{type(step).__name__} has none (renamed?)")
    for name in noises:
        scale = (noise_scale if dual_noise else 0.0) if name == "sig_d" else noise_scale
        setattr(step, name, getattr(step, name) * scale)
    if not clipping:
        sigma, bound = noises[0], getattr(step, clip)
        setattr(step, sigma, getattr(step, sigma) * bound / _NO_CLIP)
        setattr(step, clip, torch.full_like(bound, _NO_CLIP))


@dataclass(frozen=True)
class GradientCanaries:
    """Where m Dirac gradient canaries sit in a ReLU chain of packed layers: canary i is on
    layer ``layer[i]``'s bias entry ``unit[i]`` if ``is_bias[i]``, else on its weight entry
    (``column[i]``, ``unit[i]``) (the weight is (in, out): input ``column``, output ``unit``).
    No weight canary shares its output unit with a bias canary of its layer, so a weight
    canary's sliver on its unit's bias touches no canary's coordinate."""

    layer: np.ndarray
    is_bias: np.ndarray
    column: np.ndarray
    unit: np.ndarray

    def __len__(self) -> int:
        return len(self.layer)

    def flat_index(self, shapes: list[tuple[int, int]]) -> np.ndarray:
        """Each canary's coordinate in the chain's parameters flattened in order (layer by
        layer, weight (in, out) row-major, then bias)."""
        starts, at = [], 0
        for fan_in, fan_out in shapes:
            starts.append((at, at + fan_in * fan_out))
            at += (fan_in + 1) * fan_out
        weight_start = np.array([w for w, _ in starts])[self.layer]
        bias_start = np.array([b for _, b in starts])[self.layer]
        fan_out = np.array([o for _, o in shapes])[self.layer]
        return np.where(self.is_bias, bias_start + self.unit, weight_start + self.column * fan_out + self.unit)

    def group(self) -> np.ndarray:
        """Each canary's parameter group: 2 layer for a weight, 2 layer + 1 for a bias."""
        return 2 * self.layer + self.is_bias.astype(np.int64)


def _share(total: int, sizes: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """``total`` split over groups in proportion to ``sizes``, at most ``caps`` each and at least
    one each where it fits: the largest shortfall from the proportional share gets the next.
    Never more than the caps hold (the caller refuses a total they cannot)."""
    total = min(int(total), int(caps.sum()))
    alloc = np.minimum(caps, 1 if total >= len(sizes) else 0).astype(np.int64)
    target = total * sizes / sizes.sum()
    alloc = np.maximum(alloc, np.minimum(caps, np.floor(target).astype(np.int64)))
    while alloc.sum() > total:  # the minimum of one overshot a small total
        alloc[np.argmax(np.where(alloc > 1, alloc - target, -np.inf))] -= 1
    while alloc.sum() < total:
        spare = alloc < caps
        alloc[np.argmax(np.where(spare, target - alloc, -np.inf))] += 1
    return alloc


def place_gradient_canaries(shapes: list[tuple[int, int]], m: int, seed: int) -> GradientCanaries:
    """``m`` canary coordinates over every parameter group of a chain of layers of
    ``shapes`` ((in, out) each), drawn by ``seed``: each group's share in proportion to its size,
    at least one per group, at most half its coordinates (half of the bias units, and half of
    the weight entries whose unit holds no bias canary), so that most of a group's coordinates
    are canary-free. Raises InputError when m does not fit."""
    rng = np.random.default_rng([seed, 0xD1AC])
    sizes = np.array([n for fan_in, fan_out in shapes for n in (fan_in * fan_out, fan_out)], dtype=float)
    # bias groups first (their units are then barred to the layer's weight canaries)
    halves = np.array([c for fan_in, fan_out in shapes for c in (fan_in * fan_out // 2, fan_out // 2)])
    n_bias = _share(m, sizes, halves)[1::2]
    weight_caps = np.array([fan_in * (fan_out - b) // 2 for (fan_in, fan_out), b in zip(shapes, n_bias)])
    if weight_caps.sum() + n_bias.sum() < m:
        raise InputError(f"canaries: at most {int(weight_caps.sum() + n_bias.sum())} gradient canaries fit this "
                         f"model (half of each parameter group's coordinates), got {m}")
    n_weight = _share(m - int(n_bias.sum()), sizes[0::2], weight_caps)
    layer, is_bias, column, unit = [], [], [], []
    for i, ((fan_in, fan_out), nb, nw) in enumerate(zip(shapes, n_bias, n_weight)):
        bias_units = rng.choice(fan_out, size=nb, replace=False)
        free_units = np.setdiff1d(np.arange(fan_out), bias_units)
        cells = rng.choice(fan_in * len(free_units), size=nw, replace=False)
        layer += [i] * (nb + nw)
        is_bias += [True] * nb + [False] * nw
        column += [0] * nb + list(cells // len(free_units))
        unit += list(bias_units) + list(free_units[cells % len(free_units)])
    order = rng.permutation(m)  # canary i's place does not follow its index
    return GradientCanaries(np.array(layer)[order], np.array(is_bias)[order], np.array(column, dtype=np.int64)[order],
                            np.array(unit, dtype=np.int64)[order])


@dataclass(frozen=True)
class ParameterCanaries:
    """Where m Dirac gradient canaries sit in a functional pack's parameters (a module of the
    user's, or the built-in MLP under ``packing: functional``): canary i is entry ``entry[i]``
    of parameter ``parameter[i]`` (one config's tensor flattened; the pack's ``names`` order).
    A canary's gradient is N on its entry and 0 elsewhere, exactly: no other coordinate moves."""

    parameter: np.ndarray
    entry: np.ndarray

    def __len__(self) -> int:
        return len(self.parameter)

    def flat_index(self, sizes: list[int]) -> np.ndarray:
        """Each canary's coordinate in the parameters flattened one after another."""
        return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)[self.parameter] + self.entry

    def group(self) -> np.ndarray:
        """Each canary's parameter group: its parameter tensor."""
        return self.parameter


def place_parameter_canaries(sizes: list[int], m: int, seed: int) -> ParameterCanaries:
    """``m`` canary coordinates over parameter tensors of ``sizes`` entries, drawn by ``seed``:
    each tensor's share in proportion to its size, at least one per tensor, at most half its
    entries (most of a tensor's coordinates are canary-free, for the residuals' variance).
    Raises InputError when m does not fit."""
    rng = np.random.default_rng([seed, 0xD1AC, 1])
    sizes_arr = np.array(sizes, dtype=np.int64)
    caps = sizes_arr // 2
    if caps.sum() < m:
        raise InputError(f"canaries: at most {int(caps.sum())} gradient canaries fit this model (half of each "
                         f"parameter's entries), got {m}")
    counts = _share(m, sizes_arr.astype(float), caps)
    parameter = np.repeat(np.arange(len(sizes)), counts)
    entry = np.concatenate([rng.choice(n, size=c, replace=False) for n, c in zip(sizes, counts)]).astype(np.int64)
    order = rng.permutation(m)  # canary i's place does not follow its index
    return ParameterCanaries(parameter[order], entry[order])


def _first_rows(chain, trace, n: int):
    """The first ``n`` rows of a chain's trace: the hand-packed chain's per-layer inputs, or a
    functional pack's input (rows shared by every config, or per config)."""
    if isinstance(trace, list):
        return [a[:, :n] for a in trace]
    return trace[:n] if trace.dim() == chain.shared_input_dims else trace[:, :n]


def _chain_parameters(chain) -> list[torch.Tensor]:
    """The chain's parameters in the order its canaries' coordinates flatten them: a functional
    pack's in ``names`` order, the hand-packed layers' weight then bias, layer by layer."""
    if isinstance(chain, FunctionalPack):
        return [p for _, p in chain.named_stacks()]
    return list(chain.parameters())


def _first_layer(chain) -> list[torch.Tensor]:
    """The parameters of the chain's first layer: the noise the planted
    ``noise_first_layer_only`` bug keeps."""
    if isinstance(chain, FunctionalPack):
        first = set(chain.layer_groups()[0])
        return [p for name, p in chain.named_stacks() if name in first]
    return list(chain.layers[0].parameters())


class _AuditChain:
    """The step's per-sample chain (``PackedModel.per_sample_chain``: the hand-packed layers
    or a functional pack), offering the same ``forward_traced`` and ``add_clipped``, with the
    audit's parts around the chain's one clipped sum: the gradient canaries added as rows, the
    auditor's reference and the residual recorded (``game``), and the planted
    ``noise_first_layer_only`` bug."""

    def __init__(self, chain, game: _WhiteBoxGame | None, noise_first_layer_only: bool):
        self.chain = chain
        self.game = game
        self.noise_first_layer_only = noise_first_layer_only

    def parameters(self):
        return iter(_chain_parameters(self.chain))

    @torch.no_grad()
    def forward_traced(self, x: torch.Tensor):
        return self.chain.forward_traced(x)

    @torch.no_grad()
    def add_clipped(self, trace, unit, row_scale, weight, clip, noise_std, generators, plain_scale=None,
                    per_layer: bool = False) -> np.ndarray:
        params = _chain_parameters(self.chain)
        reference, sampled = None, None
        if self.game is not None:
            reference = self.game.reference(trace, unit, row_scale, weight, clip, plain_scale, per_layer)
            sampled = self.game.sample()

        def add(noise_std, generators) -> np.ndarray:
            if self.game is not None:
                return self.game.add_with_canaries(sampled, trace, unit, row_scale, weight, clip, noise_std,
                                                   generators, plain_scale, per_layer)
            return self.chain.add_clipped(trace, unit, row_scale, weight, clip, noise_std, generators,
                                          plain_scale=plain_scale, per_layer=per_layer)

        counts = add(noise_std, generators)
        if self.noise_first_layer_only and noise_std is not None:
            noisy = [p.grad for p in params]
            for p in params:
                p.grad = None
            add(None, None)  # the same sum without noise: deterministic
            first = {id(p) for p in _first_layer(self.chain)}
            for p, g in zip(params, noisy):
                if id(p) in first:
                    p.grad = g
        if self.game is not None:
            self.game.record(params, reference)
        return counts


class _WhiteBoxGame:
    """The gradient-canary game inside one run of a DP-SGD or PF-LD step (one config) through
    its per-sample ``chain``: which canaries are present (``signs``), their coins, their rows,
    the auditor's reference and the residuals it observes, step by step. ``canaries`` are
    ``GradientCanaries`` on the hand-packed chain's layers, ``ParameterCanaries`` on a
    functional pack's parameters."""

    def __init__(self, method: str, step: PackStep, chain, canaries: GradientCanaries | ParameterCanaries,
                 signs: np.ndarray, slots: np.ndarray, norm: float, seed: int):
        self.method, self.step, self.chain, self.canaries, self.norm = method, step, chain, canaries, norm
        self.present = signs > 0
        self.slots = torch.as_tensor(slots, device=step.ctx.device)
        self.coins = np.random.default_rng([seed, 0xC015])
        self.epoch = 0
        self.residuals: list[np.ndarray] = []   # per step: gradient - reference, flattened
        self.weights: list[np.ndarray] = []     # per step: each canary's record weight
        self.step_epochs: list[int] = []
        dtype, device = step.ctx.dtype, step.ctx.device
        m = len(canaries)
        if isinstance(chain, FunctionalPack):
            self.sizes = [int(p[0].numel()) for p in _chain_parameters(chain)]
            self.layers = len(chain.layer_groups())
            return
        # hand-packed: per layer, every canary's (a, d): zero outside its own layer
        self.shapes = [tuple(layer.weight.shape[1:]) for layer in chain.layers]
        self.sizes = [n for fan_in, fan_out in self.shapes for n in (fan_in * fan_out, fan_out)]
        self.layers = len(chain.layers)
        self.rows_in, self.rows_err = [], []
        weight_d = norm / math.sqrt(_WEIGHT_CANARY_INPUT ** 2 + 1)
        for i, layer in enumerate(chain.layers):
            fan_in, fan_out = layer.weight.shape[1:]
            a = torch.zeros(m, fan_in, dtype=dtype, device=device)
            d = torch.zeros(m, fan_out, dtype=dtype, device=device)
            mine = np.flatnonzero(canaries.layer == i)
            weights = mine[~canaries.is_bias[mine]]
            a[weights, canaries.column[weights]] = _WEIGHT_CANARY_INPUT
            d[mine, canaries.unit[mine]] = torch.as_tensor(np.where(canaries.is_bias[mine], norm, weight_d),
                                                           dtype=dtype, device=device)
            self.rows_in.append(a)
            self.rows_err.append(d)

    def coordinates(self) -> np.ndarray:
        """Each canary's coordinate in the chain's parameters flattened in order."""
        if isinstance(self.canaries, ParameterCanaries):
            return self.canaries.flat_index(self.sizes)
        return self.canaries.flat_index(self.shapes)

    def entries(self) -> np.ndarray:
        """Each canary's gradient on its own coordinate, before clipping: N, or for a
        hand-packed weight canary N a / sqrt(a^2 + 1) (the rest of its square is on its unit's bias)."""
        if isinstance(self.canaries, ParameterCanaries):
            return np.full(len(self.canaries), self.norm)
        a = _WEIGHT_CANARY_INPUT
        return np.where(self.canaries.is_bias, self.norm, self.norm * a / math.sqrt(a * a + 1))

    def record_weights(self) -> torch.Tensor:
        """(1, m): the weight the step gives a sampled record in each canary's place (the
        engine adds -weight times its clipped gradient): DP-SGD -1 / B (B = q n, the expected
        sample size), PF-LD the private part's kappa of the canary's population slot."""
        step = self.step
        if self.method == "dpsgd":
            return torch.full((1, len(self.canaries)), -1.0 / (step.q * step.n), dtype=step.ctx.dtype,
                              device=step.ctx.device)
        kappa = step.coefficients()[1]  # (1, 2): from released values only
        return kappa[:, self.slots]

    def sample(self) -> np.ndarray:
        """The present canaries this step's coins sample (each at the step's rate q)."""
        return np.flatnonzero(self.present & (self.coins.random(len(self.canaries)) < self.step.q))

    def add_with_canaries(self, sampled, trace, unit, row_scale, weight, clip, noise_std, generators, plain_scale,
                          per_layer) -> np.ndarray:
        """The chain's clipped noisy sum of the step's rows with the ``sampled`` canaries as more
        rows: clipped, weighted as records and summed before the step's one noise draw."""
        index = torch.as_tensor(sampled, device=weight.device, dtype=torch.long)
        canary_weight = self.record_weights()[:, index].to(weight.dtype)
        if isinstance(self.chain, FunctionalPack):
            grads = {}
            for g, (name, p) in enumerate(self.chain.named_stacks()):
                rows = torch.zeros(p.shape[0], len(sampled), p[0].numel(), dtype=clip.dtype, device=p.device)
                mine = np.flatnonzero(self.canaries.parameter[sampled] == g)
                rows[:, mine, self.canaries.entry[sampled][mine]] = self.norm
                grads[name] = rows.view(p.shape[0], len(sampled), *p.shape[1:])
            return self.chain.add_clipped(trace, unit, row_scale, weight, clip, noise_std, generators,
                                          plain_scale=plain_scale, per_layer=per_layer,
                                          extra_rows=(grads, canary_weight))
        # hand-packed: the rows' errors, clipped rows and plain objective as HandPackedChain forms them
        layers = self.chain.layers
        deltas = backprop_errors(layers, trace, unit)
        clipped = deltas if row_scale is None else [d * row_scale.unsqueeze(2).to(d.dtype) for d in deltas]
        plain = None if plain_scale is None else \
            [d[:, :plain_scale.shape[1]] * plain_scale.unsqueeze(2).to(d.dtype) for d in deltas]
        trace = [torch.cat([a, rows[index].to(a.dtype).unsqueeze(0)], dim=1) for a, rows in zip(trace, self.rows_in)]
        clipped = [torch.cat([d, rows[index].to(d.dtype).unsqueeze(0)], dim=1)
                   for d, rows in zip(clipped, self.rows_err)]
        return add_clipped_gradients(layers, trace, clipped, torch.cat([weight, canary_weight], dim=1), clip,
                                     noise_std, generators, plain=plain, per_layer=per_layer)

    def _expected_private(self):
        """(rows, unit, row_scale, weight) of every candidate record of the private sum, each
        weighted by q times the weight it has when sampled: the sum's expectation over the
        Poisson sample, in the chain's ``add_clipped`` terms."""
        step = self.step
        train = step.ctx.split("train")
        if self.method == "dpsgd":
            x, y = train.X, train.y
        else:
            x, y = train.X[train.s == 1], train.y[train.s == 1]
        logits, trace = self.chain.forward_traced(x)
        z = logits if logits.dtype == torch.float64 else logits.float()
        p1 = torch.softmax(z, dim=-1)
        if self.method == "dpsgd":  # each row's cross-entropy gradient w.r.t. its logits
            unit = (p1 - torch.nn.functional.one_hot(y, z.shape[-1]).to(z.dtype)).to(logits.dtype)
            weight = torch.full((1, len(y)), -1.0 / step.n, dtype=step.ctx.dtype, device=x.device)
            return trace, unit, None, weight
        # PF-LD: h's gradient along the logits' direction (-1, +1): p1 (1 - p1), or p1 - y for ap
        p = p1[..., 1]
        slope = torch.where(step.is_ap.view(-1, 1), p - y.to(p.dtype), p * (1 - p))
        direction = torch.tensor([-1.0, 1.0], dtype=logits.dtype, device=x.device).expand(*logits.shape)
        slot = torch.where(step.is_eo.view(-1, 1), y.view(1, -1), torch.zeros_like(y).view(1, -1))
        weight = step.q * step.coefficients()[1].gather(1, slot)
        return trace, direction.contiguous(), slope, weight

    def reference(self, trace, unit, row_scale, weight, clip, plain_scale, per_layer) -> list[torch.Tensor]:
        """The auditor's reference for this step's gradient, per parameter: the public rows
        (PF-LD's minibatch: the rows the plain objective covers, first) exactly, and the
        private sum's expectation (``_expected_private``); no noise, no canaries."""
        params = _chain_parameters(self.chain)
        if any(p.grad is not None for p in params):
            raise RuntimeError("the audited step did not clear its gradients before its clipped sum")
        public = 0 if plain_scale is None else plain_scale.shape[1]
        if public:
            self.chain.add_clipped(_first_rows(self.chain, trace, public), unit[:, :public],
                                   None if row_scale is None else row_scale[:, :public], weight[:, :public], clip,
                                   None, None, plain_scale=plain_scale, per_layer=per_layer)
        self.chain.add_clipped(*self._expected_private(), clip, None, None, per_layer=per_layer)
        out = [p.grad.detach().clone() for p in params]
        for p in params:
            p.grad = None
        return out

    def record(self, params, reference) -> None:
        residual = torch.cat([(p.grad - r)[0].reshape(-1) for p, r in zip(params, reference)])
        self.residuals.append(residual.double().cpu().numpy())
        self.weights.append(self.record_weights()[0].double().cpu().numpy())
        self.step_epochs.append(self.epoch)


def _gradient_scores(game: _WhiteBoxGame, push: np.ndarray, q: float) -> np.ndarray:
    """Each canary's log-likelihood ratio, summed over the steps, of its coordinate's residuals
    under "sampled at rate q" against "absent", with Gaussian residuals of the group's robust
    variance over the epoch; ``push``: what a sampled canary gives its coordinate per
    unit of record weight under the claimed clipping."""
    residuals = np.stack(game.residuals)                # (T, P)
    mu = -np.stack(game.weights) * push                 # (T, m): the engine adds -weight * g
    epochs = np.array(game.step_epochs)
    coordinate = game.coordinates()
    group = game.canaries.group()
    ends = np.cumsum(game.sizes)
    bounds = list(zip(ends - np.array(game.sizes), ends))  # each parameter group's coordinates
    variance = np.empty((len(residuals), len(bounds)))  # per step, per group
    for e in np.unique(epochs):
        steps = epochs == e
        floor = (1e-6 * np.abs(mu[steps]).max()) ** 2 + 1e-300  # a noiseless, dataless group: 0
        for g, (lo, hi) in enumerate(bounds):
            part = residuals[steps, lo:hi]
            mad = np.median(np.abs(part - np.median(part)))
            variance[steps, g] = max((1.4826 * mad) ** 2, floor)
    observed = residuals[:, coordinate]                 # (T, m)
    x = (mu * observed - mu ** 2 / 2) / variance[:, group]
    return np.logaddexp(math.log1p(-q), math.log(q) + x).sum(axis=0)


def _check_int(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise InputError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _logit_difference(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """l_1 - l_0 of config 0 at rows ``x`` (binary tasks), or for more classes the margin of
    class 1 over the largest other logit."""
    logits = model(x)[0]
    if logits.shape[-1] == 2:
        return logits[:, 1] - logits[:, 0]
    return logits[:, 1] - torch.cat([logits[:, :1], logits[:, 2:]], dim=1).max(dim=1).values


def _own_column_effect(model: torch.nn.Module, init: dict[str, torch.Tensor], d: int, m: int,
                       canary_norm: float) -> np.ndarray:
    """D_i per canary: the final model's l_1 - l_0 at canary i's input minus
    that of the final model with the canary columns of the first layer put back to their
    initial values (canary i's input reads only its own column, so this is its column's effect)."""
    first = model.encoder.layers[0].weight
    dtype, device = first.dtype, first.device
    x = torch.zeros(m, d + m, dtype=dtype, device=device)
    x[torch.arange(m), d + torch.arange(m)] = canary_norm
    reset = copy.deepcopy(model)
    with torch.no_grad():
        reset.encoder.layers[0].weight[:, d:] = init["encoder.layers.0.weight"][:, d:]
        effect = _logit_difference(model, x) - _logit_difference(reset, x)
    return effect.double().cpu().numpy()


def _pfld_push(model: torch.nn.Module, data: Dataset, notion: str, base_train: np.ndarray,
               labels: np.ndarray) -> np.ndarray:
    """Per canary: the sign (+1 or -1) with which PF-LD's private fairness term moves the
    l_1 - l_0 of a group-1 row of the canary's label, as the auditor reads it from the final
    model on the real training rows.

    A primal step moves the parameters by lr kappa clip(grad h(z)) for each sampled group-1 row z
    (``PrivateLagrangianStep``), kappa > 0 when group 1's mean h in the population set is below
    group 0's: the disadvantaged group's h is pushed up. h is
    P(y_hat = 1) for dp and eo (rising with l_1 - l_0) and the row's loss for ap (rising with
    l_1 - l_0 for label 0, falling for label 1); eo's population set is the rows of one label.
    """
    first = model.encoder.layers[0].weight
    x = torch.as_tensor(data.X[base_train], dtype=first.dtype, device=first.device)  # canary columns: 0
    y, s = data.y[base_train], data.s[base_train]
    with torch.no_grad():
        logits = model(x)[0]
        if notion == "ap":
            h = torch.nn.functional.cross_entropy(logits, torch.as_tensor(y, device=logits.device), reduction="none")
        else:
            h = torch.softmax(logits, dim=-1)[:, 1]
    h = h.double().cpu().numpy()
    push = {}
    for label in (0, 1):
        pop = (y == label) if notion == "eo" else np.ones(len(y), dtype=bool)
        g0, g1 = pop & (s == 0), pop & (s == 1)
        gap = (h[g0].mean() if g0.any() else 0.0) - (h[g1].mean() if g1.any() else 0.0)
        up = 1.0 if gap >= 0 else -1.0  # group 1's h pushed up when it is the lower one
        push[label] = up * ((1.0 if label == 0 else -1.0) if notion == "ap" else 1.0)
    return np.array([push[int(label)] for label in labels])


def _check_positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise InputError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _check_beta(beta: object) -> float:
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 < beta < 1:
        raise InputError(f"beta must be in (0, 1), got {beta!r}")
    return float(beta)


def _neural_method(method: str) -> NeuralMethod:
    if method not in METHODS:
        raise InputError(f"method: the training audit runs {', '.join(METHODS)}, got {method!r}")
    impl = get_method(method)
    if not isinstance(impl, NeuralMethod) or type(impl).fit is not NeuralMethod.fit:
        raise InputError(f"method {method!r} does not train through the engine's loop as NeuralMethod.fit does")
    return impl


def _audit_settings(train: TrainSettings | None, epochs: object, batch_size: object, lr: float | None,
                    dtype: str | None, device: str | None, config_chunk: int) -> TrainSettings:
    """What an audited run trains with: ``train`` (a study's; default the engine's defaults)
    with the audit's epochs, batch size, dtype (None: ``train``'s, else float32), device and
    configs per chunk, and its learning rate where given; never pruned."""
    base = train if train is not None else TrainSettings()
    return dataclasses.replace(base, epochs=_check_int("epochs", epochs, 1),
                               batch_size=_check_int("batch_size", batch_size, 1),
                               lr=base.lr if lr is None else lr,
                               dtype=dtype or (base.dtype if train is not None else "float32"), device=device,
                               config_chunk=config_chunk, prune=None, gpu_share=1.0)


def audit_training(
    method: str,
    config: dict,
    data: Dataset,
    *,
    canaries: int = 1000,
    canary_kind: str = "gradient",
    k_positive: int | None = None,
    k_negative: int | None = None,
    epochs: int = 5,
    batch_size: int = 100,
    lr: float | None = None,
    seed: int = 0,
    beta: float = 0.05,
    canary_norm: float | None = None,
    dtype: str | None = None,
    device: str | None = "cpu",
    noise_scale: float = 1.0,
    clipping: bool = True,
    noise_first_layer_only: bool = False,
    dual_noise: bool = True,
    train: TrainSettings | None = None,
    arch: Architecture | None = None,
    progress: Callable[[str], None] | None = None,
) -> TrainingAuditResult:
    """Audit one ``method`` config (``dpsgd``, ``pfld`` or, with input canaries,
    ``dpsgd_global_adapt``) trained on ``data`` with ``canaries``
    canaries of ``canary_kind`` ("gradient" or "input"), in one run (see the module docstring
    for the games, the scores and the bound).

    ``k_positive`` and ``k_negative`` (default m // 10 each) are how many of the highest and
    lowest scores are guessed +1 and -1. ``seed`` draws the canaries' signs and places, and
    seeds the run. ``beta``: 1 - confidence. ``canary_norm``: a gradient canary's norm in
    clipping bounds (default ``GRADIENT_CANARY_NORM``) or an input canary's feature (default
    ``CANARY_NORM``). ``noise_scale``, ``clipping=False``, ``noise_first_layer_only`` and
    ``dual_noise=False`` (PF-LD) plant a bug (see ``_plant``); the claimed eps and delta are
    always the method's own for the config. ``train`` and ``arch``: a study's training settings
    (clipping, packing, precision, accountant; ``epochs``, ``batch_size``, ``lr``, ``device``
    and ``dtype`` are this call's) and architecture, a module of the user's included (default:
    the method's own network and settings); a config's own ``lr``, ``batch_size`` and module
    keywords apply as in a study. ``progress`` receives one line per epoch.
    """
    t0 = time.perf_counter()
    impl = _neural_method(method)
    if canary_kind not in CANARY_KINDS:
        raise InputError(f"canary_kind must be one of {', '.join(CANARY_KINDS)}, got {canary_kind!r}")
    m = _check_int("canaries", canaries, 2)
    k_pos = _check_int("k_positive", m // 10 if k_positive is None else k_positive, 0)
    k_neg = _check_int("k_negative", m // 10 if k_negative is None else k_negative, 0)
    if k_pos + k_neg > m or k_pos + k_neg == 0:
        raise InputError(f"k_positive + k_negative must be in [1, canaries = {m}], got {k_pos} + {k_neg}")
    seed = _check_int("seed", seed, 0)
    beta = _check_beta(beta)
    gradient = canary_kind == "gradient"
    if canary_norm is None:
        canary_norm = GRADIENT_CANARY_NORM if gradient else CANARY_NORM
    canary_norm = _check_positive("canary_norm", canary_norm)
    noise_scale = _check_positive("noise_scale", noise_scale)
    if not dual_noise and method != "pfld":
        raise InputError(f"dual_noise: only pfld releases dual values, got method {method!r}")
    if method in INPUT_CANARIES_ONLY and gradient:
        raise InputError(f"canary_kind: {method} is audited with input canaries only (the gradient game models "
                         f"DP-SGD's and PF-LD's steps), got {canary_kind!r}")
    if method in INPUT_CANARIES_ONLY and not clipping:
        raise InputError(f"clipping: the planted clipping bug lifts DP-SGD's and PF-LD's one bound; {method}'s "
                         f"bounds move with its releases (or its rows are scaled, not clipped), none to lift")
    config = impl.validate_config(config)
    if method == "pfld" and config.get("private_group", 1) != 1:
        # its canaries enter group 1's sum (the private part at the default): an audit of the other
        # group's part would score canaries the mechanism never sees
        raise InputError(f"config.private_group: the training audit places PF-LD's canaries in group 1, the "
                         f"private part at the default; this config's private part is group "
                         f"{config['private_group']}: audit it at private_group 1 (the mechanism is the same)")
    impl.check_dataset(data)
    if data.n_classes != 2:
        raise InputError(f"the training audit scores binary tasks; '{data.name}' has {data.n_classes} classes")

    signs = np.where(np.random.default_rng([seed, 0xCA7A]).random(m) < 0.5, 1, -1)
    labels = canary_labels(data, m, method)
    audit_data = data if gradient else canary_dataset(data, signs, method, canary_norm)
    impl.check_dataset(audit_data)
    settings = impl.config_settings(config, _audit_settings(train, epochs, batch_size, lr, dtype, device, 1))
    arch = impl.config_architecture(config, arch or impl.default_architecture(audit_data.name))
    run = RunInfo.of(audit_data, settings, impl.representation_dim(audit_data, arch))
    claimed = impl.privacy(config, run)

    init: dict[str, torch.Tensor] = {}
    games: list[_WhiteBoxGame] = []
    per_group: dict[str, int] = {}

    def make_step(ctx: PackContext) -> PackStep:
        step = impl.make_step(ctx)  # the method's own step: its sampling, clipping and noise
        if noise_scale != 1.0 or not clipping or not dual_noise:
            _plant(step, method, noise_scale, clipping, dual_noise)
        init.update({name: p.detach().clone() for name, p in step.model.named_parameters()})
        chain = step.model.per_sample_chain()
        functional = isinstance(chain, FunctionalPack)
        if not gradient and functional:
            raise InputError("canary_kind: input canaries are scored on the built-in hand-packed MLP's first layer; "
                             "this model trains through a functional pack (a module of the user's, or packing: "
                             "functional): use gradient canaries")
        if gradient or noise_first_layer_only:
            game = None
            if gradient:
                if functional:
                    placed = place_parameter_canaries([int(p[0].numel()) for p in _chain_parameters(chain)], m, seed)
                    names = list(chain.names)
                else:
                    placed = place_gradient_canaries([tuple(layer.weight.shape[1:]) for layer in chain.layers], m, seed)
                    named = {id(p): name for name, p in step.model.named_parameters()}
                    names = [named[id(p)] for p in chain.parameters()]
                per_group.update({name: int((placed.group() == g).sum()) for g, name in enumerate(names)})
                # a canary's population slot (PF-LD's eo: its label's; dp and ap have one)
                slots = labels if config.get("fairness_notion") == "eo" else np.zeros(m, dtype=np.int64)
                game = _WhiteBoxGame(method, step, chain, placed, signs, slots,
                                     canary_norm * float(config["clip_primal"]), seed)
                games.append(game)
                begin = step.begin_epoch

                def begin_epoch(epoch: int, begin=begin, game=game) -> None:
                    game.epoch = epoch
                    begin(epoch)

                step.begin_epoch = begin_epoch
            audited = _AuditChain(chain, game, noise_first_layer_only)
            step.model.per_sample_chain = lambda: audited  # the step's one path to its clipped sum
        return step

    def report(r: EpochReport) -> None:
        if progress is not None:
            progress(f"audit-training: epoch {r.epoch}/{r.epochs}, valid accuracy {float(r.valid_accuracy[0]):.1f}%")

    if progress is not None:
        progress(f"audit-training: training {method} ({', '.join(f'{k}={v}' for k, v in config.items())}) on "
                 f"{data.name}: {run.n} train rows with {m} {canary_kind} canaries, {settings.epochs} epochs")
    result = fit_pack(make_step, audit_data, [config], [impl.config_id(config)], seed, settings, arch,
                      shapes=impl.layer_shapes(audit_data, arch), callback=report)
    model = result.model
    if model is None or not init:
        raise RuntimeError("fit_pack returned no model for the audited config")

    if gradient:
        game = games[0]
        if not game.residuals:
            raise RuntimeError("the audited step never computed a clipped sum")
        clip = float(config["clip_primal"])
        bound = clip / math.sqrt(game.layers) if settings.clipping == "per_layer" else clip
        push = game.entries() * min(1.0, bound / game.norm)  # the canary's coordinate after the claimed clipping
        scores = _gradient_scores(game, push, game.step.q)
    else:
        effect = _own_column_effect(model, init, data.n_features, m, canary_norm)
        if method != "pfld":  # add/remove one record (DP-SGD, DPSGD-Global-Adapt)
            scores = np.where(labels == 1, effect, -effect)  # towards the canary's own label
        else:
            centred = effect.copy()
            for label in np.unique(labels):
                mask = labels == label
                centred[mask] -= np.median(effect[mask])
            push = _pfld_push(model, audit_data, config["fairness_notion"], np.asarray(data.splits["train"]), labels)
            scores = push * centred

    order = np.argsort(scores, kind="stable")
    guessed_negative = order[:k_neg]
    guessed_positive = order[m - k_pos:] if k_pos > 0 else order[:0]
    correct_pos = int((signs[guessed_positive] > 0).sum())
    correct = correct_pos + int((signs[guessed_negative] < 0).sum())
    r = k_pos + k_neg
    eps_lower = one_run_epsilon_lower_bound(correct, r, m, beta, claimed.delta)
    adjacency = ADJACENCY[method]
    if gradient and method == "pfld":
        adjacency += " (its private primal contribution; the dual release is audited on its own)"
    return TrainingAuditResult(
        method=method, dataset=data.name, config=dict(config), canary_kind=canary_kind,
        claimed_eps=float(claimed.eps), claimed_delta=float(claimed.delta), eps_lower=eps_lower,
        eps_ceiling=epsilon_ceiling(r, m, beta, claimed.delta), beta=beta, canaries=m, canaries_per_group=per_group,
        k_positive=k_pos, k_negative=k_neg, correct=correct, correct_positive=correct_pos,
        positive_signs=int((signs > 0).sum()), n_train=run.n, epochs=settings.epochs, batch_size=run.batch_size,
        seed=seed, canary_norm=canary_norm, noise_scale=noise_scale, clipping=bool(clipping),
        noise_first_layer_only=bool(noise_first_layer_only), dual_noise=bool(dual_noise), adjacency=adjacency,
        duration_s=time.perf_counter() - t0, scores=scores, signs=signs,
    )


def _fixed_logits(x: torch.Tensor, rows: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    if x is not rows:
        raise RuntimeError("the dual release audit's fixed model is read on the training rows only")
    return logits


def audit_dual_release(
    config: dict,
    data: Dataset,
    *,
    epochs: int = 5,
    batch_size: int = 100,
    samples: int = DUAL_SAMPLES,
    seed: int = 0,
    beta: float = 0.05,
    dtype: str | None = None,
    device: str | None = "cpu",
    noise_scale: float = 1.0,
    dual_noise: bool = True,
    train: TrainSettings | None = None,
    arch: Architecture | None = None,
    progress: Callable[[str], None] | None = None,
) -> DualReleaseAuditResult:
    """Audit PF-LD's dual release on its own: the first dual step's noisy group-1 sums and
    counts, drawn ``samples`` times on each of two training sets that differ in one record's
    attribute, at one fixed model (the config's initial one), through the real step's
    ``end_epoch``; the event and its probabilities by ``fairdp.privacy.audit.audit`` at
    confidence 1 - ``beta``, the bound by ``event_epsilon_lower_bound`` at the run's claimed
    delta. The claim is the config's for a run of ``epochs`` and ``batch_size`` (the release
    is one of its parts: a correct release cannot exceed it). ``noise_scale`` and
    ``dual_noise=False`` plant bugs, and ``train`` and ``arch`` are a study's, as in
    ``audit_training``.
    """
    t0 = time.perf_counter()
    impl = _neural_method("pfld")
    samples = _check_int("samples", samples, 1000)
    seed = _check_int("seed", seed, 0)
    beta = _check_beta(beta)
    noise_scale = _check_positive("noise_scale", noise_scale)
    if _check_int("epochs", epochs, 1) < 2:
        raise InputError(f"epochs must be >= 2 for PF-LD to release dual values (after every epoch but the last), "
                         f"got {epochs}")
    config = impl.validate_config(config)
    impl.check_dataset(data)
    settings = impl.config_settings(config, _audit_settings(train, epochs, batch_size, None, dtype, device,
                                                            _DUAL_CONFIGS))
    arch = impl.config_architecture(config, arch or impl.default_architecture(data.name))
    run = RunInfo.of(data, settings, impl.representation_dim(data, arch))
    claimed = impl.privacy(config, run)
    torch_device = torch.device(device or "cpu")
    config_id = impl.config_id(config)

    def build(dataset: Dataset, name: str) -> PackStep:
        ids = [f"{config_id}/dual-release-audit/{name}/{k}" for k in range(_DUAL_CONFIGS)]
        ctx = PackContext(dataset, [config] * _DUAL_CONFIGS, ids, seed, settings, arch, torch_device)
        step = impl.make_step(ctx)
        if noise_scale != 1.0 or not dual_noise:
            _plant(step, "pfld", noise_scale, True, dual_noise)
        return step

    # the model: config 0's initial one, shared by every config of both steps
    probe = build(data, "model")
    model = {name: p.detach()[:1].clone() for name, p in probe.model.named_parameters()}
    train_rows = np.asarray(data.splits["train"])
    with torch.no_grad():
        train = probe.ctx.split("train")
        logits = probe.model(train.X)[0]
        h = torch.nn.functional.cross_entropy(logits, train.y, reduction="none") if probe.is_ap[0] else \
            torch.softmax(logits, dim=-1)[:, 1]
        h_clip = torch.minimum(h, probe.h_bound[0]).double().cpu().numpy()
    target = int(np.argmax(h_clip))  # the record whose attribute moves the released sum most

    steps = {}
    for attribute in (1, 0):
        s = data.s.copy()
        s[train_rows[target]] = attribute
        step = build(dataclasses.replace(data, s=s), f"attribute-{attribute}")
        with torch.no_grad():
            for name, p in step.model.named_parameters():
                p.copy_(model[name].expand_as(p))
            # the model is fixed: its logits on the training rows, which end_epoch reads, once
            rows = step.ctx.split("train").X
            fixed = step.model(rows)
        step.model.forward = lambda x, fixed=fixed, rows=rows: _fixed_logits(x, rows, fixed)
        steps[attribute] = step

    def release(rows: torch.Tensor) -> torch.Tensor:
        step = steps[int(rows[0, 0].item())]
        out, drawn = [], 0
        while drawn < len(rows):
            step.count1.fill_(math.nan)  # each draw is the first dual step's: sums and counts
            step.end_epoch(0)
            out.append(step.released.detach().double().cpu())
            drawn += _DUAL_CONFIGS
        return torch.cat(out)[:len(rows)]

    if progress is not None:
        progress(f"audit-training: PF-LD's dual release, {samples} draws on each of two datasets differing in "
                 f"train row {int(train_rows[target])}'s attribute")
    found = audit_mechanism(release, [1.0], [0.0], samples, confidence=1 - beta, seed=seed)
    held_out = samples - samples // 2
    return DualReleaseAuditResult(
        dataset=data.name, config=dict(config), claimed_eps=float(claimed.eps), claimed_delta=float(claimed.delta),
        eps_lower=event_epsilon_lower_bound(found.p_lower, found.p_upper, claimed.delta),
        eps_ceiling=distinguishing_ceiling(held_out, 1 - beta, claimed.delta), beta=beta, samples=samples,
        target_row=int(train_rows[target]), target_h=float(h_clip[target]), event=found.event,
        numerator=found.numerator, p_lower=found.p_lower, p_upper=found.p_upper,
        sigma_dual=float(impl.noise_multipliers(config, run)[1]), noise_scale=noise_scale, dual_noise=bool(dual_noise), seed=seed,
        duration_s=time.perf_counter() - t0,
    )
