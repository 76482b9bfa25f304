"""DP-SGD (Abadi et al. 2016): the plain classifier trained privately, without fairness.

Tran et al.'s "P" (private, no fairness) next to PF-LD: the same two-hidden-layer network
and plain SGD steps as ``fld``/``pfld``, but every row's gradient of its own loss is clipped
to ``clip_primal`` (C) and Gaussian noise N(0, sigma^2 C^2) is added to the clipped sum
before averaging over the batch. It protects whole training rows (features, label and
sensitive attribute), not only the attribute as PF-LD does. sigma is calibrated by the RDP
accountant to the target ``eps`` at delta = 1e-5 for the run's batch size, training-set
size and epochs (``calibrate_dpsgd_sigma``: epochs * ceil(n / B) sampled Gaussian steps
at rate B / n); rows report the accountant's eps for the sigma used. Per-row gradient norms
come from ghost norms (``_private_group_step``), as in PF-LD.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from fairdp.engine import PackedModel, per_config_accuracy
from fairdp.methods._base import EPS, HyperParam, Method
from fairdp.methods._lagrangian import (
    ARCHITECTURE,
    _private_group_step,
    final_model_result,
    layered_forward,
    sgd_pack,
)
from fairdp.methods._registry import register_method
from fairdp.privacy import PFLD_DELTA, calibrate_dpsgd_sigma, dpsgd_epsilon

CLIP = HyperParam("clip_primal", low=0.0, low_open=True, doc="C, per-row gradient clip")


@register_method
class DPSGD(Method):
    name = "dpsgd"
    hyperparams = (EPS, CLIP)

    def paper_grid(self, dataset):
        # the eps sweep of Tran et al. Figure 2, at their C_p grid's ends and middle
        return {"eps": [0.1, 0.5, 1.0, 2.0, 5.0, 10.0], "clip_primal": [1.0, 10.0, 50.0]}

    def default_architecture(self, dataset):
        return ARCHITECTURE

    def formal_privacy(self, config, representation_dim):
        return float(config["eps"]), PFLD_DELTA

    def train_pack(self, data, configs, seed, settings, arch=None):
        configs = [self.validate_config(c) for c in configs]
        n = len(data.splits["train"])
        batch = min(settings.batch_size, n)
        sigmas = [calibrate_dpsgd_sigma(c["eps"], PFLD_DELTA, batch, n, settings.epochs) for c in configs]
        result = train_dpsgd(data, configs, [self.config_id(c) for c in configs], seed, settings, sigmas,
                             arch or ARCHITECTURE)
        result.privacy = [(dpsgd_epsilon(s, batch, n, settings.epochs, PFLD_DELTA), PFLD_DELTA) for s in sigmas]
        return result


def train_dpsgd(data, configs, config_ids, seed, settings, sigmas, arch):
    t0 = time.perf_counter()
    k = len(configs)
    device, dtype, gens, model, opt, X, y = sgd_pack(data, config_ids, seed, settings, arch)
    clip = torch.tensor([c["clip_primal"] for c in configs], device=device, dtype=dtype)
    sigma = torch.tensor(sigmas, device=device, dtype=dtype)
    order = torch.Generator(device="cpu").manual_seed(seed)
    n_train = len(y["train"])
    history = np.zeros((k, settings.epochs))
    clip_counts = np.zeros((2, k))
    for epoch in range(settings.epochs):
        perm = torch.randperm(n_train, generator=order).to(device)
        for start in range(0, n_train, settings.batch_size):
            idx = perm[start:start + settings.batch_size]
            opt.zero_grad(set_to_none=True)
            clip_counts += dpsgd_gradients(model, X["train"][idx], y["train"][idx], clip, sigma, gens["noise"])
            opt.step()
        with torch.no_grad():
            history[:, epoch] = per_config_accuracy(model(X["valid"]).argmax(-1), y["valid"]).cpu().numpy()
    return final_model_result(model, X, configs, history, t0,
                              {"clipped_fraction": clip_counts[0] / np.maximum(clip_counts[1], 1)})


def dpsgd_gradients(model: PackedModel, xb: torch.Tensor, yb: torch.Tensor, clip: torch.Tensor,
                    sigma: torch.Tensor, generators) -> np.ndarray:
    """Set every parameter's ``.grad`` to DP-SGD's (sum over rows of clip(g_z, C) + N(0, sigma^2 C^2)) / B.

    g_z is row z's gradient of its own cross-entropy (all K configs at once; ``clip`` and
    ``sigma`` per config). Returns (rows clipped, rows) per config, shape (2, K).
    """
    k, b = clip.shape[0], len(yb)
    logits, inputs, outputs = layered_forward(model, xb)
    rows = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), yb.repeat(k), reduction="none").view(k, -1)
    deltas = torch.autograd.grad(rows.sum(), outputs)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    weight = torch.full((k, b), -1.0 / b, device=xb.device, dtype=logits.dtype)  # -(1/B): the step adds -weight * g
    return _private_group_step(model, inputs, deltas, weight, clip, sigma * clip / b, generators)
