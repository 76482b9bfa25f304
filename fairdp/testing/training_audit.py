"""An end-to-end empirical privacy audit of training: one DP-SGD or PF-LD config trained once,
with canaries (Steinke, Nasr and Jagielski, NeurIPS 2023, "Privacy auditing with one (1)
training run"). The bound itself is ``fairdp.privacy.training_audit``; this module runs the
game whose outcome feeds it (``fairdp audit-training`` on the command line).

1. **Canaries.** m canary records get independent uniform signs S_i in {-1, +1}. Each has
   its own input direction: the dataset's features are extended by m columns, zero for every
   real record, and canary i is R e_{d+i} (zero features, R in its own column); its label is
   i mod 2 for DP-SGD and the train split's majority label for PF-LD (``canary_labels``).
   For DP-SGD (add/remove one record) canary i is in the training set iff S_i = +1; for PF-LD
   (one record's sensitive attribute replaced) every canary is in it, with attribute 1 iff
   S_i = +1. The extra columns are input-space "Dirac" canaries: canary i's own input weights
   (the first layer's column d+i) receive a gradient from canary i only, so the canaries do
   not drown one another, yet they are ordinary records that go through the method's real
   step and the engine's real loop (``fairdp.engine.fit_pack`` with the method's own
   ``make_step``, as ``NeuralMethod.fit`` trains it): sampling, per-row clipping, calibrated
   noise, PF-LD's dual steps and released counts, everything.
2. **What the auditor sees.** The trained model's parameters, and the initial ones, which are
   data-independent (drawn from the config's init stream before any record is read; DP-SGD's
   and PF-LD's analyses treat them as public, releasing every iterate from a given start), and
   the non-canary data (fixed in the game). Not the noise, the minibatches, the Poisson
   samples or the dual variables.
3. **Score.** For canary i, D_i = the change in the logit difference l_1 - l_0 at canary i's
   input that its own column's movement causes: the final model at R e_{d+i}, minus the final
   model with that column put back to its initial value (only that column reads canary i's
   input, so every other weight is shared). DP-SGD: score_i = D_i signed towards canary i's
   label (training on it pulls its logits towards its label; an absent canary's column moves
   by noise alone). PF-LD: the only path from canary i's attribute to the model is the
   private part of the fairness gradient (group 1's rows of a Poisson sample, weight kappa),
   which pushes h (P(y_hat = 1) for dp and eo, the loss for ap) of group 1's rows up when group
   1 is the disadvantaged one and down otherwise; the auditor reads which from the final
   model on the real training rows (whose attributes it knows), turns it into the sign of the
   push on l_1 - l_0, and centres D_i on the median of the canaries of its label (the public
   loss and population terms move every canary of a label alike, whatever its attribute, and
   the majority label keeps the loss term small).
4. **Guesses and bound.** The k+ highest scores are guessed +1, the k- lowest -1, the rest
   abstain (k+ and k- fixed before the run). v correct guesses out of r = k+ + k- give the
   empirical eps lower bound of the paper's Theorem 3 at the config's claimed delta
   (``one_run_epsilon_lower_bound``), at confidence 1 - beta.

A bound above the claimed eps refutes the claim (an implementation or analysis bug); a bound
below it proves nothing: the audit sees only the final model, through one score, with m
canaries, and its bound cannot exceed ``epsilon_ceiling(r, m)`` (about ln(r / 3) at beta 0.05)
however leaky the run. ``noise_scale`` and ``clipping=False`` plant bugs, for tests and
demonstrations: the same training with the noise multipliers scaled, or with per-row
clipping off (the noise kept at the clipped sensitivity); the claim stays the correct run's.

One caveat of the game for DP-SGD: the training set has n + (number of included canaries)
rows, and the method calibrates its noise multiplier and sampling rate to the realised n
(``RunInfo``), so the mechanism's parameters move slightly with the canaries' signs. The
claimed eps is the method's own claim for the realised run.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from fairdp.data import Dataset
from fairdp.engine import EpochReport, PackContext, PackStep, TrainSettings, fit_pack
from fairdp.errors import InputError
from fairdp.methods import NeuralMethod, RunInfo, get_method
from fairdp.privacy.training_audit import epsilon_ceiling, one_run_epsilon_lower_bound

METHODS = ("dpsgd", "pfld")
"""The methods whose training this audit runs: central (eps, delta)-DP of the training data."""

ADJACENCY = {
    "dpsgd": "add/remove one record: canary i is in the training set iff S_i = +1",
    "pfld": "replace one record's attribute: canary i's sensitive attribute is 1 iff S_i = +1",
}

CANARY_NORM = 4.0
"""R, the canaries' one non-zero feature. In Tran et al.'s network at initialisation, a canary
of norm 4 has a loss gradient of norm about 1 (the default clip: it contributes about the
sensitivity the noise is scaled to) with about a third of its square in the canary's own
column; norm 50 puts 0.88 there at norm 6.6 (what catching disabled clipping needs), norm 1
only 0.03."""

_NO_CLIP = 1e12
"""The clipping bound of the planted ``clipping=False`` bug: no gradient reaches it."""


@dataclass(frozen=True)
class TrainingAuditResult:
    """The outcome of ``audit_training``.

    ``eps_lower`` holds with probability >= 1 - ``beta``: the trained run is not
    (eps, ``claimed_delta``)-DP for any eps < eps_lower. ``refuted``: eps_lower > claimed_eps.
    ``eps_ceiling`` is the most this audit could have shown (every guess right).
    ``correct`` of the ``k_positive + k_negative`` guesses were right (``correct_positive``
    among the +1 guesses). ``noise_scale`` and ``clipping`` say whether a bug was planted.
    """

    method: str
    dataset: str
    config: dict
    claimed_eps: float
    claimed_delta: float
    eps_lower: float
    eps_ceiling: float
    beta: float
    canaries: int
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
        return self.noise_scale != 1.0 or not self.clipping

    def to_dict(self) -> dict:
        """Everything but the per-canary arrays, JSON-ready."""
        out = {k: v for k, v in asdict(self).items() if k not in ("scores", "signs")}
        return {**out, "guesses": self.guesses, "refuted": self.refuted, "planted_bug": self.planted_bug}


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
    elsewhere, labelled by ``canary_labels``. DP-SGD: only the canaries with sign +1 are rows, in
    train; PF-LD: every canary is a train row, sensitive attribute 1 iff its sign is +1 (for
    DP-SGD the attribute is (i // 2) mod (groups), independent of the label and sign).
    """
    m, d = len(signs), base.n_features
    rows = np.flatnonzero(signs > 0) if method == "dpsgd" else np.arange(m)
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


def _plant(step: PackStep, method: str, noise_scale: float, clipping: bool) -> None:
    """Scale the step's noise multipliers by ``noise_scale``; with ``clipping=False``, raise
    its clipping bound out of reach and keep the noise's standard deviation (multiplier times
    bound) what it was. The step's attributes are DP-SGD's ``sigma`` and ``clip`` and PF-LD's
    ``sig_p``, ``sig_d`` and ``c_p``."""
    names = {"dpsgd": ("sigma", "clip"), "pfld": ("sig_p", "c_p")}[method]
    for name in (*names, *(("sig_d",) if method == "pfld" else ())):
        if not isinstance(getattr(step, name, None), torch.Tensor):
            raise RuntimeError(f"the audit's planted bug needs the {method} step's '{name}' tensor; "
                               f"{type(step).__name__} has none (renamed?)")
    sigma, clip = names
    setattr(step, sigma, getattr(step, sigma) * noise_scale)
    if method == "pfld":
        step.sig_d = step.sig_d * noise_scale
    if not clipping:
        bound = getattr(step, clip)
        setattr(step, sigma, getattr(step, sigma) * bound / _NO_CLIP)
        setattr(step, clip, torch.full_like(bound, _NO_CLIP))


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


def audit_training(
    method: str,
    config: dict,
    data: Dataset,
    *,
    canaries: int = 1000,
    k_positive: int | None = None,
    k_negative: int | None = None,
    epochs: int = 5,
    batch_size: int = 100,
    lr: float | None = None,
    seed: int = 0,
    beta: float = 0.05,
    canary_norm: float = CANARY_NORM,
    dtype: str = "float32",
    device: str | None = "cpu",
    noise_scale: float = 1.0,
    clipping: bool = True,
    progress: Callable[[str], None] | None = None,
) -> TrainingAuditResult:
    """Audit one ``method`` config (``dpsgd`` or ``pfld``) trained on ``data`` plus ``canaries``
    canaries, in one run (see the module docstring for the game, the score and the bound).

    ``k_positive`` and ``k_negative`` (default m // 10 each) are how many of the highest and
    lowest scores are guessed +1 and -1. ``seed`` draws the canaries' signs and seeds the run.
    ``beta``: 1 - confidence. ``noise_scale`` and ``clipping=False`` plant a bug (see
    ``_plant``); the claimed eps and delta are always the method's own for the config.
    ``progress`` receives one line per epoch.
    """
    t0 = time.perf_counter()
    if method not in METHODS:
        raise InputError(f"method: the training audit runs {', '.join(METHODS)}, got {method!r}")
    m = _check_int("canaries", canaries, 2)
    k_pos = _check_int("k_positive", m // 10 if k_positive is None else k_positive, 0)
    k_neg = _check_int("k_negative", m // 10 if k_negative is None else k_negative, 0)
    if k_pos + k_neg > m or k_pos + k_neg == 0:
        raise InputError(f"k_positive + k_negative must be in [1, canaries = {m}], got {k_pos} + {k_neg}")
    seed = _check_int("seed", seed, 0)
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 < beta < 1:
        raise InputError(f"beta must be in (0, 1), got {beta!r}")
    for name, value in (("canary_norm", canary_norm), ("noise_scale", noise_scale)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
            raise InputError(f"{name} must be a finite number > 0, got {value!r}")
    impl = get_method(method)
    if not isinstance(impl, NeuralMethod) or type(impl).fit is not NeuralMethod.fit:
        raise InputError(f"method {method!r} does not train through the engine's loop as NeuralMethod.fit does")
    config = impl.validate_config(config)
    impl.check_dataset(data)
    if data.n_classes != 2:
        raise InputError(f"the training audit scores binary tasks; '{data.name}' has {data.n_classes} classes")

    signs = np.where(np.random.default_rng([seed, 0xCA7A]).random(m) < 0.5, 1, -1)
    audit_data = canary_dataset(data, signs, method, canary_norm)
    impl.check_dataset(audit_data)
    settings = impl.config_settings(config, TrainSettings(epochs=_check_int("epochs", epochs, 1),
                                                          batch_size=_check_int("batch_size", batch_size, 1),
                                                          lr=lr, dtype=dtype, device=device, config_chunk=1))
    arch = impl.default_architecture(audit_data.name)
    run = RunInfo.of(audit_data, settings, impl.representation_dim(audit_data, arch))
    claimed = impl.privacy(config, run)

    init: dict[str, torch.Tensor] = {}

    def make_step(ctx: PackContext) -> PackStep:
        step = impl.make_step(ctx)  # the method's own step: its sampling, clipping and noise
        if noise_scale != 1.0 or not clipping:
            _plant(step, method, noise_scale, clipping)
        init.update({name: p.detach().clone() for name, p in step.model.named_parameters()})
        return step

    def report(r: EpochReport) -> None:
        if progress is not None:
            progress(f"audit-training: epoch {r.epoch}/{r.epochs}, valid accuracy {float(r.valid_accuracy[0]):.1f}%")

    if progress is not None:
        progress(f"audit-training: training {method} ({', '.join(f'{k}={v}' for k, v in config.items())}) on "
                 f"{data.name}: {run.n} train rows with {m} canaries, {settings.epochs} epochs")
    result = fit_pack(make_step, audit_data, [config], [impl.config_id(config)], seed, settings, arch,
                      shapes=impl.layer_shapes(audit_data, arch), callback=report)
    model = result.model
    if model is None or not init:
        raise RuntimeError("fit_pack returned no model for the audited config")

    labels = canary_labels(data, m, method)
    effect = _own_column_effect(model, init, data.n_features, m, canary_norm)
    if method == "dpsgd":
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
    return TrainingAuditResult(
        method=method, dataset=data.name, config=dict(config), claimed_eps=float(claimed.eps),
        claimed_delta=float(claimed.delta), eps_lower=eps_lower, eps_ceiling=epsilon_ceiling(r, m, beta, claimed.delta),
        beta=float(beta), canaries=m, k_positive=k_pos, k_negative=k_neg, correct=correct,
        correct_positive=correct_pos, positive_signs=int((signs > 0).sum()), n_train=run.n, epochs=settings.epochs,
        batch_size=run.batch_size, seed=seed, canary_norm=float(canary_norm), noise_scale=float(noise_scale),
        clipping=bool(clipping), adjacency=ADJACENCY[method], duration_s=time.perf_counter() - t0,
        scores=scores, signs=signs,
    )
