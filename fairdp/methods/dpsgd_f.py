"""DPSGD-F (Xu, Du & Wu, KDD 2021, "Removing disparate impact on model accuracy in
differentially private stochastic gradient descent"), as Esipova et al. (ICLR 2023, appendix B,
Algorithm 4) state it from the authors' code and run it as a baseline: DP-SGD whose clipping
bound is raised for the groups whose gradients are clipped most.

DP-SGD's network and steps (``fairdp.methods.dpsgd``): every step is a Poisson sample of the
training rows at rate q = B / n, and its clipped sum plus Gaussian noise is divided by the
expected size B. Each step first counts, per group k of the sensitive attribute, the sampled
rows whose gradient norm is above the base bound C0 (``clip_primal``), m_k, and at or below it,
o_k, and releases the 2K counts with N(0, sigma_c^2) noise each, floored at 0 (Algorithm 4's
post-processing). From the released counts, with b_k = m_k + o_k and m = sum_k m_k:

    C_k = C0 (1 + (m_k / b_k) / (m / B))

(C_k = C0 where b_k = 0 or m = 0). Each sampled row's gradient is clipped to its group's
C_k, and the sum gets N(0, sigma^2 (max_k C_k)^2) noise, the largest bound over all K groups.

The guarantee is DP-SGD's kind, "central, add/remove one record" of the training split as
fixed (n public), where a record is its features, label and sensitive attribute: DPSGD-F reads
the attribute of every sampled row (to count and to clip by group), so, unlike DP-SGD and
DPSGD-Global-Adapt, it needs the attribute at training time, and protects it only as part of
the record (replacing one record's attribute is a replace-one change: twice the eps by group
privacy, ``fairdp.privacy.convert_guarantee``). One record moves one of the 2K counts by 1 and
the clipped sum by at most its bound C_k <= max_k C_k, the noise's scale, the bounds being
functions of the released counts; both come from one Poisson sample, so a step is one sampled
Gaussian mechanism of the joint multiplier (sigma^-2 + sigma_c^-2)^-1/2
(``fairdp.privacy.joint_noise_multiplier``), calibrated as DPSGD-Global-Adapt's: the joint
multiplier is DP-SGD's sigma for the target ``eps``, sigma_c = ``count_noise_ratio`` * sigma.

Where fairdp departs from the papers or the authors' code, and the settings neither states, are
in docs/methods.md ("DPSGD-Global-Adapt and DPSGD-F: settings the papers leave unstated").
"""

from __future__ import annotations

import numpy as np
import torch

from fairdp import _rng
from fairdp.methods._base import TARGET_EPS, HyperParam
from fairdp.methods._lagrangian import gather_rows
from fairdp.methods._registry import register_method
from fairdp.methods.dpsgd_global_adapt import (
    COUNT_NOISE_RATIO,
    AdaptiveClippingMethod,
    AdaptiveClippingStep,
    exceeding_counts,
)

CLIP = HyperParam("clip_primal", low=0.0, low_open=True,
                  doc="C0, the base bound: the counts are of rows above it, and every group's bound is >= C0")


class DPSGDFStep(AdaptiveClippingStep):
    """Algorithm 4 for a chunk of configs: each step's own Poisson sample (as DP-SGD's), its
    noisy per-group counts, the group bounds from them, and the sum clipped by group with
    noise scaled to the largest bound. No state outlives a step but the model's."""

    per_config_attributes = ("clip", "sigma", "sigma_count", "last_bounds")

    def __init__(self, ctx, sigmas: list[tuple[float, float]]):
        super().__init__(ctx, sigmas)
        self.n_groups = ctx.data.n_groups
        self.last_bounds = self.clip.unsqueeze(1).repeat(1, self.n_groups)  # (K, groups), for diagnostics

    def update(self, batch, optimizer):
        index, valid, chain, trace, unit = self.traced_sample()
        groups = gather_rows(self.ctx.split("train").s, index)  # (K, M): the attribute, read inside the mechanism
        per_layer = self.ctx.settings.clipping == "per_layer"
        rows = valid.to(self.clip.dtype)
        b = self.q * self.n
        optimizer.zero_grad(set_to_none=True)
        counts = group_counts(chain, trace, unit, rows, groups, self.n_groups, self.clip, per_layer)
        noise = _rng.normal((2 * self.n_groups,), self.ctx.generators("noise"), device=self.clip.device,
                            dtype=self.clip.dtype).view(-1, self.n_groups, 2)
        released = (counts + noise * self.sigma_count.view(-1, 1, 1)).floor().clamp(min=0)
        self.last_bounds = group_bounds(released, self.clip, b)
        self.clip_counts += dpsgd_f_gradients(chain, trace, unit, rows, groups, self.last_bounds, self.clip,
                                              self.sigma, b, self.ctx.generators("noise"), per_layer)
        optimizer.step()

    def diagnostics(self):
        return {**self.clipped_fraction(), "last_max_group_clip": self.last_bounds.amax(dim=1).double().cpu().numpy()}


@register_method
class DPSGDF(AdaptiveClippingMethod):
    name = "dpsgd_f"
    hyperparams = (TARGET_EPS, CLIP, COUNT_NOISE_RATIO)
    default_lr = 0.01  # Esipova et al. App. B.2: "for non-global methods, the learning rate is 0.01"
    step_class = DPSGDFStep

    def paper_grid(self, dataset):
        # Esipova et al. App. B.2: C0 0.5 on the tabular sets, count noise 10 sigma; the eps of their
        # sigma 1 runs (Dutch 2.84, Adult 3.41, MNIST 5.90; at delta 1e-6), which DPSGD-F "negligibly" exceeds
        return {"eps": [2.84, 3.41, 5.9], "clip_primal": [0.5], "count_noise_ratio": [COUNT_NOISE_RATIO.default]}


def group_counts(chain, trace, unit: torch.Tensor, rows: torch.Tensor, groups: torch.Tensor, n_groups: int,
                 clip: torch.Tensor, per_layer: bool = False) -> torch.Tensor:
    """(K, groups, 2): per config and group k, (m_k, o_k), the weighted rows of group k whose
    gradient norm is above ``clip`` (C0) and at or below it; a row whose gradient is not finite
    is in neither, as the engine's clipping leaves it out. From every row's norm at once where the
    chain gives them (``row_norms``: fairdp's own network), else one noiseless pass of the
    engine's clipping per group (``exceeding_counts``)."""
    if hasattr(chain, "row_norms"):
        norms = chain.row_norms(trace, unit, clip.dtype)
        counted = (rows != 0) & torch.isfinite(norms)
        above = counted & (norms > clip.unsqueeze(1))
        member = torch.nn.functional.one_hot(groups, n_groups).to(clip.dtype)  # (K, M, groups)
        m = (above.to(clip.dtype).unsqueeze(-1) * member).sum(1)
        return torch.stack([m, (counted.to(clip.dtype).unsqueeze(-1) * member).sum(1) - m], dim=-1)
    out = []
    for k in range(n_groups):
        above, total = exceeding_counts(chain, trace, unit, rows * (groups == k).to(rows.dtype), clip, per_layer)
        out.append(np.stack([above, total - above], axis=1))  # (K, 2)
    return torch.as_tensor(np.stack(out, axis=1), device=clip.device, dtype=clip.dtype)


def group_bounds(released: torch.Tensor, clip: torch.Tensor, expected_rows: float) -> torch.Tensor:
    """(K, groups): C_k = C0 (1 + (m_k / b_k) / (m / B)) from the released counts (K, groups, 2)
    of (m_k, o_k), b_k = m_k + o_k, m = sum_k m_k; a group with b_k = 0 has ratio 0, and m = 0
    leaves every bound at C0."""
    above = released[..., 0]
    sizes = released.sum(dim=2)
    ratio = torch.where(sizes > 0, above / sizes.clamp(min=1), torch.zeros_like(above))
    overall = above.sum(dim=1, keepdim=True) / expected_rows
    lift = torch.where(overall > 0, ratio / overall.clamp(min=torch.finfo(overall.dtype).tiny), torch.zeros_like(ratio))
    return clip.unsqueeze(1) * (1 + lift)


def dpsgd_f_gradients(chain, trace, unit: torch.Tensor, rows: torch.Tensor, groups: torch.Tensor,
                      bounds: torch.Tensor, clip: torch.Tensor, sigma: torch.Tensor, expected_rows: float,
                      generators, per_layer: bool = False) -> np.ndarray:
    """Set every parameter's ``.grad`` to (sum over rows of clip(g, C_k(row)) + N(0, sigma^2 max_k C_k^2)) / B.

    ``bounds`` (K, groups) are the group bounds C_k, ``groups`` (K, M) each row's group, ``rows``
    (K, M) weighs real rows 1 and padding 0; B is ``expected_rows``. clip(g, C_k) is computed as
    (C_k / C0) clip((C0 / C_k) g, C0) (the engine clips to one bound per config; row_scale scales
    the row's gradient first). Returns (rows with ||g|| > their C_k, rows) per config, (2, K).
    """
    per_row = bounds.gather(1, groups)  # (K, M)
    weight = -(per_row / clip.unsqueeze(1)) * rows / expected_rows
    return chain.add_clipped(trace, unit, clip.unsqueeze(1) / per_row, weight, clip,
                             sigma * bounds.amax(dim=1) / expected_rows, generators, per_layer=per_layer)
