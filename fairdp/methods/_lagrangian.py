"""Lagrangian-dual fairness (Tran, Fioretto & Van Hentenryck 2021): F-LD and its private PF-LD.

Fairness notions as population-vs-group constraints (their eq. 1),
E_{z in D_P_i}[h(z)] = E_{z in D_G_i}[h(z)], over soft predictions p(x) = P(y_hat = 1 | x):

- ``dp`` (demographic parity): h = p; for each group a: P_a = all rows, G_a = rows of group a.
- ``eo`` (equalized odds): h = p; for each label y and group a: P = rows with label y,
  G = rows with label y in group a (2m constraints).
- ``ap`` (accuracy parity): h = the per-row cross-entropy loss; P_a = all rows, G_a = group a.

Binary labels only, as in the paper: the constraints are written for y in {0, 1}, so a
dataset with more classes is rejected with a clear error. Any number of groups.

F-LD (Algorithm 1): minibatch primal steps on J + lambda^T |mu(B_P) - mu(B_G)|, then a dual
ascent step lambda += s |mu(D_P) - mu(D_G)| on the whole training set after each epoch,
multipliers kept in [0, lambda_max].

PF-LD: the primal group term uses per-sample gradients of h clipped to C_p (eq. 8,
population terms unclipped) plus Gaussian noise N(0, sigma_p^2 Delta_p^2),
Delta_p = 2 C_p lambda_max / (min_i |B_G_i| - 1) (Theorem 1); the dual step clips h to C_d
and adds N(0, sigma_d^2 Delta_d^2), Delta_d = sqrt(2) C_d / (min_i |D_G_i| - 1) (Theorem 2).
Eq. 8 writes the group term as lambda^T |grad mu(B_P) - clipped grad mu(B_G)|; we take the
gradient of lambda_i |mu(B_P_i) - mu(B_G_i)|, i.e. lambda_i sign_i (grad mu(B_P_i) - clipped
grad mu(B_G_i)) with the sign of the batch violation, which is what the Lagrangian's
subgradient is. A batch in which some group has fewer than two rows takes no group term
(Theorem 1's bound needs two) and no noise; the accountant still charges the step.
Per-sample gradient norms and clipped sums come from per-layer inputs and errors (ghost
norms, ``fairdp.engine.add_clipped_gradients``), never a Python loop over rows.
All K configs of a pack train together in the engine's loop (``LagrangianStep``): stacked
parameters, per-config lambda, clipping bounds and noise scales; noise from each config's
own stream.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from fairdp import _rng
from fairdp.engine import (
    Architecture,
    Batch,
    ModelSpec,
    PackContext,
    PackedModel,
    PackStep,
    add_clipped_gradients,
    forward_traced,
)
from fairdp.methods._base import NeuralMethod

NOTIONS = ("dp", "eo", "ap")
LAMBDA_MAX = 1.0    # multipliers' cap (Algorithm 1, line 6); Delta_p grows with it
DUAL_STEP = 1.0     # dual ascent step size s
# Algorithm 1's primal step is plain gradient descent, theta -= alpha * grad (with Adam the
# PF-LD noise would dominate the second-moment estimate and stall the public loss's signal).
# Tran et al. give no alpha; 0.1 is fairdp's choice, the default of fld, pfld and dpsgd.
PRIMAL_STEP = 0.1
# The paper's classifier: a network with two hidden layers (Tran et al., Experimental Analysis).
ARCHITECTURE = Architecture(encoder=(64, 64), classifier=(), adversary=(), dropout=0.0)


class TranMethod(NeuralMethod):
    """What F-LD, PF-LD and DP-SGD share as methods: Tran et al.'s two-hidden-layer network,
    trained by Algorithm 1's plain gradient steps at ``PRIMAL_STEP`` unless a study says."""

    optimizer = "sgd"
    default_lr = PRIMAL_STEP

    def default_architecture(self, dataset):
        return ARCHITECTURE


class ClassifierSGDStep(PackStep):
    """Tran et al.'s setting, shared by F-LD, PF-LD and DP-SGD: the plain classifier (the
    packed model without privatiser or adversaries, no dropout) trained by Algorithm 1's
    plain SGD steps, and returned after the last epoch (the constraints' multipliers grow
    over the epochs, so selecting the most accurate epoch would undo them)."""

    selection = "last"

    def __init__(self, ctx: PackContext):
        super().__init__(ctx)
        data = ctx.data
        self.model = PackedModel(ModelSpec(), ctx.arch, data.n_features, data.n_classes, data.n_groups,
                                 ctx.generators("init"), device=ctx.device, dtype=ctx.dtype)
        self.clip_counts = np.zeros((2, ctx.k))  # rows clipped, rows clipped or not

    def optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=self.ctx.lr)

    def layers(self):
        """The linear layers, input to logits, that per-sample gradients go through."""
        return [*self.model.encoder.layers, *self.model.classifier.layers]

    def evaluate(self, x):
        z = self.model.represent(x, None, None)
        return z, self.model.classifier(z)

    def clipped_fraction(self) -> dict:
        return {"clipped_fraction": self.clip_counts[0] / np.maximum(self.clip_counts[1], 1)}

    def slice_state(self, index):
        self.clip_counts = self.clip_counts[:, index]  # configs on the second axis


def constraint_masks(notion: str, y: torch.Tensor, s: torch.Tensor, n_groups: int):
    """Membership of each row in each constraint's population and group sets: two (I, n) bool masks."""
    if notion == "eo":
        pop = torch.stack([y == label for label in (0, 1) for _ in range(n_groups)])
        grp = torch.stack([(y == label) & (s == a) for label in (0, 1) for a in range(n_groups)])
    else:
        pop = torch.ones(n_groups, len(y), dtype=torch.bool, device=y.device)
        grp = torch.stack([s == a for a in range(n_groups)])
    return pop, grp


def _h(notion: str, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """h(z) per config and row: P(y_hat = 1) for dp/eo, the row's cross-entropy for ap."""
    if notion == "ap":
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), y.repeat(logits.shape[0]), reduction="none"
        ).view(logits.shape[0], -1)
    return torch.softmax(logits, dim=-1)[..., 1]


def _means(h: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """mu per config and constraint: h (K, n), masks (I, n) -> (K, I); empty sets give 0."""
    m = masks.to(h.dtype)
    return (h @ m.T) / m.sum(dim=1).clamp_min(1)


def h_all(logits: torch.Tensor, y: torch.Tensor, is_ap: torch.Tensor) -> torch.Tensor:
    """h(z) of each config's notion for every row (K, B): the row's loss for ap, P(y_hat = 1) otherwise."""
    k = logits.shape[0]
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.repeat(k), reduction="none")
    return torch.where(is_ap.unsqueeze(1), ce.view(k, -1), torch.softmax(logits, dim=-1)[..., 1])


class LagrangianStep(ClassifierSGDStep):
    """F-LD (``private=False``) or PF-LD for a chunk of configs; each config has
    ``fairness_notion`` and, for PF-LD, ``clip_primal`` and ``clip_dual``, with the noise
    multipliers (sigma_p, sigma_d) of each config in ``sigmas``."""

    def __init__(self, ctx: PackContext, *, private: bool, sigmas: list[tuple[float, float]] | None = None):
        super().__init__(ctx)
        data, device, dtype = ctx.data, ctx.device, ctx.dtype
        self.private, self.n_groups = private, data.n_groups
        notions = [c["fairness_notion"] for c in ctx.configs]
        self.by_notion = {nt: [i for i, c in enumerate(notions) if c == nt] for nt in sorted(set(notions))}
        self.is_ap = torch.tensor([nt == "ap" for nt in notions], device=device)
        self.lam = {nt: torch.zeros(len(idx), 2 * data.n_groups if nt == "eo" else data.n_groups,
                                    device=device, dtype=dtype) for nt, idx in self.by_notion.items()}
        self.noise = ctx.generators("noise")
        if private:
            if sigmas is None or len(sigmas) != ctx.k:
                raise ValueError("PF-LD needs one (sigma_primal, sigma_dual) per config")
            self.c_p, self.c_d = ctx.per_config("clip_primal"), ctx.per_config("clip_dual")
            self.sig_p = torch.tensor([sp for sp, _ in sigmas], device=device, dtype=dtype)
            self.sig_d = torch.tensor([sd for _, sd in sigmas], device=device, dtype=dtype)

    def slice_state(self, index):
        super().slice_state(index)
        old_notion = {i: nt for nt, idx in self.by_notion.items() for i in idx}
        # the multipliers are held per notion, in pack order within each: keep the survivors'
        rows = {nt: [idx.index(i) for i in index if old_notion[i] == nt] for nt, idx in self.by_notion.items()}
        self.lam = {nt: self.lam[nt][rows[nt]] for nt in rows if rows[nt]}
        notions = [c["fairness_notion"] for c in self.ctx.configs]
        self.by_notion = {nt: [i for i, c in enumerate(notions) if c == nt] for nt in sorted(set(notions))}
        self.is_ap, self.noise = self.is_ap[index], self.ctx.generators("noise")
        if self.private:
            self.c_p, self.c_d, self.sig_p, self.sig_d = (t[index] for t in (self.c_p, self.c_d, self.sig_p, self.sig_d))

    def update(self, batch: Batch, optimizer) -> None:
        k, dtype = self.ctx.k, self.ctx.dtype
        xb, yb, sb = batch.x, batch.y, batch.s
        if self.private:  # one forward serves the loss and the per-row errors of h
            logits, inputs, outputs = forward_traced(self.layers(), xb)
        else:
            logits = self.model(xb)
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, 2), yb.repeat(k), reduction="none").view(k, -1).mean(1)
        group_weight = torch.zeros(k, len(yb), device=xb.device, dtype=dtype)  # d(term)/d h(z) for group rows
        min_group = torch.zeros(k, device=xb.device, dtype=dtype)
        for nt, cfg in self.by_notion.items():
            pop, grp = constraint_masks(nt, yb, sb, self.n_groups)
            h = _h(nt, logits[cfg], yb)
            mu_p, mu_g = _means(h, pop), _means(h, grp)
            sign = torch.sign(mu_p - mu_g).detach()
            sizes = grp.sum(dim=1)
            if int(sizes.min()) < 2:
                continue  # Theorem 1 needs every group in the batch twice: no group term here
            weight = self.lam[nt] * sign  # (K_nt, I)
            if not self.private:
                loss[cfg] = loss[cfg] + (weight * (mu_p - mu_g)).sum(1)
            else:  # population terms by autograd; group terms from clipped per-sample gradients
                loss[cfg] = loss[cfg] + (weight * mu_p).sum(1)
                group_weight[cfg] += (weight / sizes.to(dtype)) @ grp.to(dtype)
                min_group[cfg] = sizes.min().to(dtype)
        optimizer.zero_grad(set_to_none=True)
        if self.private:
            deltas = torch.autograd.grad(h_all(logits, yb, self.is_ap).sum(), outputs, retain_graph=True)
        loss.sum().backward()
        if self.private:
            active = min_group >= 2
            delta_p = torch.where(active, 2 * self.c_p * LAMBDA_MAX / (min_group - 1).clamp_min(1), 0.0)
            # the group term enters the loss with a minus sign: -sum_z group_weight * clip(g_z)
            self.clip_counts += add_clipped_gradients(self.layers(), inputs, deltas, group_weight, self.c_p,
                                                      self.sig_p * delta_p, self.noise)
        optimizer.step()

    @torch.no_grad()
    def end_epoch(self, epoch: int) -> None:
        """Dual ascent on the whole training set (Algorithm 1 lines 5-6, eq. 10)."""
        train = self.ctx.split("train")
        logits = self.model(train.X)
        for nt, cfg in self.by_notion.items():
            pop, grp = constraint_masks(nt, train.y, train.s, self.n_groups)
            h = _h(nt, logits[cfg], train.y)
            if self.private:
                cd = self.c_d[cfg].unsqueeze(1)
                h_clip = h / torch.clamp(h.abs() / cd, min=1.0)
                violation = (_means(h, pop) - _means(h_clip, grp)).abs()
                delta_d = math.sqrt(2) * self.c_d[cfg] / (grp.sum(dim=1).min().to(h.dtype) - 1)
                g = _rng.normal((violation.shape[1],), [self.noise[i] for i in cfg], device=h.device, dtype=h.dtype)
                violation = violation + g * (self.sig_d[cfg] * delta_d).unsqueeze(1)
            else:
                violation = (_means(h, pop) - _means(h, grp)).abs()
            self.lam[nt] = (self.lam[nt] + DUAL_STEP * violation).clamp(0.0, LAMBDA_MAX)

    def diagnostics(self) -> dict:
        return self.clipped_fraction() if self.private else {}
