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
norms, see ``_private_group_step``), never a Python loop over rows.
All K configs of a pack train together: stacked parameters, per-config lambda, clipping
bounds and noise scales; noise from each config's own stream.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from fairdp import _rng
from fairdp.engine import (
    Architecture,
    ModelSpec,
    PackedModel,
    PackResult,
    per_config_accuracy,
    resolve_device,
    stream_seed,
)
from fairdp.errors import InputError

NOTIONS = ("dp", "eo", "ap")
LAMBDA_MAX = 1.0    # multipliers' cap (Algorithm 1, line 6); Delta_p grows with it
DUAL_STEP = 1.0     # dual ascent step size s
# Algorithm 1's primal step is plain gradient descent, theta -= alpha * grad. With Adam the
# PF-LD noise would dominate the second-moment estimate and stall the public loss's signal.
PRIMAL_STEP = 0.1
# The paper's classifier: a network with two hidden layers (Tran et al., Experimental Analysis).
ARCHITECTURE = Architecture(encoder=(64, 64), classifier=(), adversary=(), dropout=0.0)


def sgd_pack(data, config_ids: list[str], seed: int, settings, arch: Architecture):
    """What F-LD, PF-LD and DP-SGD set up before their loops: device and dtype, each config's
    init and noise streams, the packed model with Algorithm 1's plain SGD step, the splits as
    tensors. Returns (device, dtype, generators, model, optimizer, X, y)."""
    device = resolve_device(settings.device)
    dtype = getattr(torch, settings.dtype)
    gens = {st: _rng.make_generators([stream_seed(seed, c, st) for c in config_ids], device)
            for st in ("init", "noise")}
    model = PackedModel(ModelSpec(), arch, data.n_features, data.n_classes, data.n_groups, gens["init"],
                        device=device, dtype=dtype)
    opt = torch.optim.SGD(model.parameters(), lr=PRIMAL_STEP)
    X = {n: torch.as_tensor(data.split(n).X, device=device, dtype=dtype) for n in ("train", "valid", "test")}
    y = {n: torch.as_tensor(data.split(n).y, device=device) for n in ("train", "valid", "test")}
    return device, dtype, gens, model, opt, X, y


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


def train_lagrangian(data, configs: list[dict], config_ids: list[str], seed: int, settings,
                     *, private: bool, sigmas: list[tuple[float, float]] | None = None,
                     arch: Architecture = ARCHITECTURE) -> PackResult:
    """Train a pack of F-LD (``private=False``) or PF-LD configs; each config has ``fairness_notion``
    and, for PF-LD, ``clip_primal`` and ``clip_dual`` (noise multipliers in ``sigmas``)."""
    if data.n_classes != 2:
        raise InputError(f"dataset: F-LD/PF-LD need binary labels (Tran et al.), '{data.name}' has "
                         f"{data.n_classes} classes")
    t0 = time.perf_counter()
    k = len(configs)
    device, dtype, gens, model, opt, X, y = sgd_pack(data, config_ids, seed, settings, arch)
    s_train = torch.as_tensor(data.split("train").s, device=device)
    notions = [c["fairness_notion"] for c in configs]
    by_notion = {nt: [i for i, c in enumerate(notions) if c == nt] for nt in sorted(set(notions))}
    is_ap = torch.tensor([nt == "ap" for nt in notions], device=device)
    n_train = len(y["train"])
    lam = {nt: torch.zeros(len(idx), 2 * data.n_groups if nt == "eo" else data.n_groups, device=device, dtype=dtype)
           for nt, idx in by_notion.items()}
    if private:
        c_p = torch.tensor([c["clip_primal"] for c in configs], device=device, dtype=dtype)
        c_d = torch.tensor([c["clip_dual"] for c in configs], device=device, dtype=dtype)
        sig_p = torch.tensor([sp for sp, _ in sigmas], device=device, dtype=dtype)
        sig_d = torch.tensor([sd for _, sd in sigmas], device=device, dtype=dtype)
    order = torch.Generator(device="cpu").manual_seed(seed)
    # Algorithm 1 returns the model after T epochs: selecting the most accurate epoch would
    # undo the constraints, whose multipliers grow over the epochs.
    history = np.zeros((k, settings.epochs))
    clip_counts = np.zeros((2, k))  # rows clipped, rows in a group term

    for epoch in range(settings.epochs):
        perm = torch.randperm(n_train, generator=order).to(device)
        for start in range(0, n_train, settings.batch_size):
            idx = perm[start:start + settings.batch_size]
            xb, yb, sb = X["train"][idx], y["train"][idx], s_train[idx]
            if private:  # one forward serves the loss and the per-row errors of h
                logits, inputs, outputs = layered_forward(model, xb)
            else:
                logits = model(xb)
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, 2), yb.repeat(k), reduction="none").view(k, -1).mean(1)
            group_weight = torch.zeros(k, len(idx), device=device, dtype=dtype)  # d(term)/d h(z) for group rows
            min_group = torch.zeros(k, device=device, dtype=dtype)
            for nt, cfg in by_notion.items():
                pop, grp = constraint_masks(nt, yb, sb, data.n_groups)
                h = _h(nt, logits[cfg], yb)
                mu_p, mu_g = _means(h, pop), _means(h, grp)
                sign = torch.sign(mu_p - mu_g).detach()
                sizes = grp.sum(dim=1)
                if int(sizes.min()) < 2:
                    continue  # Theorem 1 needs every group in the batch twice: no group term here
                weight = lam[nt] * sign  # (K_nt, I)
                if not private:
                    loss[cfg] = loss[cfg] + (weight * (mu_p - mu_g)).sum(1)
                else:  # population terms by autograd; group terms from clipped per-sample gradients
                    loss[cfg] = loss[cfg] + (weight * mu_p).sum(1)
                    group_weight[cfg] += (weight / sizes.to(dtype)) @ grp.to(dtype)
                    min_group[cfg] = sizes.min().to(dtype)
            opt.zero_grad(set_to_none=True)
            if private:
                deltas = torch.autograd.grad(h_all(logits, yb, is_ap).sum(), outputs, retain_graph=True)
            loss.sum().backward()
            if private:
                active = min_group >= 2
                delta_p = torch.where(active, 2 * c_p * LAMBDA_MAX / (min_group - 1).clamp_min(1), 0.0)
                clip_counts += _private_group_step(model, inputs, deltas, group_weight, c_p,
                                                   sig_p * delta_p, gens["noise"])
            opt.step()
        with torch.no_grad():  # dual ascent on the whole training set (Algorithm 1 lines 5-6, eq. 10)
            logits = model(X["train"])
            for nt, cfg in by_notion.items():
                pop, grp = constraint_masks(nt, y["train"], s_train, data.n_groups)
                h = _h(nt, logits[cfg], y["train"])
                if private:
                    cd = c_d[cfg].unsqueeze(1)
                    h_clip = h / torch.clamp(h.abs() / cd, min=1.0)
                    violation = (_means(h, pop) - _means(h_clip, grp)).abs()
                    delta_d = math.sqrt(2) * c_d[cfg] / (grp.sum(dim=1).min().to(dtype) - 1)
                    g = _rng.normal((violation.shape[1],), [gens["noise"][i] for i in cfg], device=device, dtype=dtype)
                    violation = violation + g * (sig_d[cfg] * delta_d).unsqueeze(1)
                else:
                    violation = (_means(h, pop) - _means(h, grp)).abs()
                lam[nt] = (lam[nt] + DUAL_STEP * violation).clamp(0.0, LAMBDA_MAX)
            acc = per_config_accuracy(model(X["valid"]).argmax(-1), y["valid"])
        history[:, epoch] = acc.numpy()
    diagnostics = {"clipped_fraction": clip_counts[0] / np.maximum(clip_counts[1], 1)} if private else {}
    return final_model_result(model, X, configs, history, t0, diagnostics)


def final_model_result(model: PackedModel, X: dict, configs: list[dict], history: np.ndarray, t0: float,
                       diagnostics: dict) -> PackResult:
    """The pack's result from the model after the last epoch (no best-epoch selection)."""
    predictions, representations = {}, {}
    with torch.no_grad():
        for n in ("valid", "test"):
            reps = model.represent(X[n], None, None)
            representations[n] = reps.cpu().numpy()
            predictions[n] = model.classifier(reps).argmax(-1).cpu().numpy()
    return PackResult(configs=list(configs), best_epoch=np.full(len(configs), history.shape[1]),
                      valid_accuracy_history=history, predictions=predictions, representations=representations,
                      duration_s=time.perf_counter() - t0, model=model, diagnostics=diagnostics)


def layered_forward(model: PackedModel, xb: torch.Tensor):
    """Logits (K, B, C) with every linear layer's input (K, B, in) and output kept for ghost norms."""
    layers = [*model.encoder.layers, *model.classifier.layers]
    inputs, outputs = [], []
    x = xb
    for i, layer in enumerate(layers):
        inputs.append((x if x.dim() == 3 else x.expand(len(model.encoder.layers[0].weight), *x.shape)).detach())
        z = layer(x)
        outputs.append(z)
        x = torch.relu(z) if i < len(layers) - 1 else z  # ReLU between layers, none after the logits
    return x, inputs, outputs


def h_all(logits: torch.Tensor, y: torch.Tensor, is_ap: torch.Tensor) -> torch.Tensor:
    """h(z) of each config's notion for every row (K, B): the row's loss for ap, P(y_hat = 1) otherwise."""
    k = logits.shape[0]
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.repeat(k), reduction="none")
    return torch.where(is_ap.unsqueeze(1), ce.view(k, -1), torch.softmax(logits, dim=-1)[..., 1])


@torch.no_grad()
def _private_group_step(model, inputs, deltas, group_weight, c_p, noise_std, generators) -> np.ndarray:
    """Add PF-LD's group-term gradient to each parameter's ``.grad`` (eq. 8).

    For every row z and config k: g = grad_theta h_k(z), clipped to norm C_p[k]; the group
    term's gradient is -sum_z group_weight[k, z] * clip(g), and N(0, noise_std[k]^2) is
    added to every parameter entry of config k. Per-sample gradients are never
    materialised: for a linear layer g_z = a_z delta_z^T (its input times the
    backpropagated error of h, ``deltas`` = grad of sum h wrt each layer's output), so
    ||g_z||^2 = sum over layers of ||delta_z||^2 (||a_z||^2 + 1) (the +1 is the bias), and
    the clipped weighted sum is one batched matmul A^T (coef * Delta) per layer: ghost
    norms (Goodfellow 2015; Li et al. 2022) instead of B backward passes. Returns, per
    config, how many rows in a group term had a per-sample gradient norm above C_p, and
    how many rows were in a group term (2, K).
    """
    layers = [*model.encoder.layers, *model.classifier.layers]
    sq = sum(d.pow(2).sum(-1) * (a.pow(2).sum(-1) + 1) for a, d in zip(inputs, deltas))  # (K, B)
    norms = sq.sqrt()
    factor = torch.clamp(c_p.unsqueeze(1) / norms.clamp_min(1e-12), max=1.0)  # min(1, C_p / ||g||)
    coef = (group_weight * factor).unsqueeze(-1)  # (K, B, 1)
    # one draw per config for all parameter entries: per-parameter draws cost a dispatch each
    sizes = [n for layer in layers for n in (layer.weight[0].numel(), layer.bias[0].numel())]
    noise = _rng.normal((sum(sizes),), generators, device=coef.device, dtype=coef.dtype) * noise_std.unsqueeze(1)
    chunks = iter(noise.split(sizes, dim=1))
    for layer, a, d in zip(layers, inputs, deltas):
        cd = coef * d
        for param, g in ((layer.weight, torch.bmm(a.transpose(1, 2), cd)), (layer.bias, cd.sum(dim=1, keepdim=True))):
            param.grad += next(chunks).view_as(g) - g
    in_group = group_weight != 0  # (K, B)
    exceeded = ((norms > c_p.unsqueeze(1)) & in_group).sum(1)
    return torch.stack([exceeded, in_group.sum(1)]).cpu().numpy()
