"""Per-sample gradient clipping with noise, without materialising per-sample gradients.

The building block of DP-SGD (Abadi et al. 2016) and of PF-LD's private group term (Tran
et al. 2021, eq. 8), for a ReLU chain of packed linear layers. For a linear layer the
gradient of row z's scalar f_z is g_z = a_z delta_z^T (the layer's input times the
backpropagated error of f_z), so ||g_z||^2 = sum over layers of ||delta_z||^2 (||a_z||^2 + 1)
(the +1 is the bias) and a weighted sum of clipped g_z is one batched matmul
A^T (coef * Delta) per layer: ghost norms (Goodfellow 2015; Li et al. 2022) instead of B
backward passes. Everything is batched over the config axis K.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fairdp import _rng
from fairdp.engine._packed import PackedLinear
from fairdp.engine._settings import full_precision


def forward_traced(layers: Sequence[PackedLinear], x: torch.Tensor):
    """Run ``x`` through a ReLU chain of packed layers (no ReLU after the last); returns the
    output (K, B, out), every layer's input (K, B, in, detached) and every layer's output,
    which is what ``add_clipped_gradients`` needs (the errors are gradients w.r.t. the outputs)."""
    k = layers[0].weight.shape[0]
    inputs, outputs = [], []
    for i, layer in enumerate(layers):
        inputs.append((x if x.dim() == 3 else x.expand(k, *x.shape)).detach())
        z = layer(x)
        outputs.append(z)
        x = torch.relu(z) if i < len(layers) - 1 else z
    return x, inputs, outputs


@torch.no_grad()
def backprop_errors(layers: Sequence[PackedLinear], inputs, grad_output: torch.Tensor) -> list[torch.Tensor]:
    """Every layer's error (the gradient w.r.t. its output, what autograd would give for the
    ``outputs`` of ``forward_traced``) from ``grad_output``, the gradient w.r.t. the chain's
    output of the first R traced rows, (K, R, out). A ReLU chain's backward is linear in its
    output's gradient, delta_{l-1} = (delta_l W_l^T) * [a_l > 0] with a_l the layer's input:
    one batched matmul and one masking pass a layer, without an autograd graph."""
    rows = grad_output.shape[1]
    deltas = [grad_output]
    for layer, a in zip(reversed(layers[1:]), reversed(inputs[1:])):
        d = torch.bmm(deltas[-1], layer.weight.transpose(1, 2).to(deltas[-1].dtype))
        deltas.append(torch.ops.aten.threshold_backward(d, a[:, :rows].to(d.dtype), 0))  # ReLU's own backward
    return deltas[::-1]


@torch.no_grad()
def add_clipped_gradients(layers: Sequence[PackedLinear], inputs, deltas, weight: torch.Tensor,
                          clip: torch.Tensor, noise_std: torch.Tensor | None, generators,
                          plain=None, per_layer: bool = False) -> np.ndarray:
    """Add -sum_z weight[k, z] * clip(g_z, clip[k]) + N(0, noise_std[k]^2) to every ``.grad``
    (no noise, and no draw, when ``noise_std`` is None), and with ``plain`` (per layer, the
    errors of an unclipped objective of the first rows, (K, P, out) with P <= B) that
    objective's gradient too, in the same matmul.

    ``inputs`` and ``deltas`` are, per layer, its input (K, B, in) and the gradient of
    sum_z f_z w.r.t. its output (K, B, out), so g_z is row z's gradient of f_z for config
    k, clipped to L2 norm ``clip[k]`` over all layers' parameters. The noise is one draw per
    config (all parameter entries at once) from that config's generator. Rows with weight 0
    do not count, nor do rows whose gradient is not finite (a NaN would carry the row into
    every parameter): they add nothing. ``per_layer``: each layer's part of g_z (weight and bias) is clipped to
    clip / sqrt(layers) instead, so the whole stays within ``clip`` (Opacus's per-layer
    clipping with equal bounds). Returns, per config, how many weighted rows had a gradient
    norm above ``clip`` and how many rows were weighted: shape (2, K).
    """
    # Norms, clipping, the weighted sum and the noise in the parameters' dtype (fp32 or
    # float64) even under bf16 autocast: the sensitivity bound C and the noise scale that the
    # accountant charges for are exact only if clipping and noise are not rounded to bf16.
    with full_precision(weight.device):
        return _add_clipped(layers, [a.to(clip.dtype) for a in inputs], [d.to(clip.dtype) for d in deltas],
                            weight, clip, noise_std, generators,
                            [d.to(clip.dtype) for d in plain] if plain is not None else None, per_layer)


def _add_clipped(layers, inputs, deltas, weight, clip, noise_std, generators, plain, per_layer) -> np.ndarray:
    per_layer_sq = [d.pow(2).sum(-1) * (a.pow(2).sum(-1) + 1) for a, d in zip(inputs, deltas)]  # (K, B) each
    norms = sum(per_layer_sq).sqrt()
    # a row whose gradient is not finite (or whose norm overflows) adds nothing: its clipped
    # value would be NaN and carry the row into every parameter; zero stays within the bound.
    # Rare: looked for on a CPU, applied blindly on a GPU (looking would make the host wait)
    finite = torch.isfinite(norms)
    if weight.device.type != "cpu" or not finite.all():
        keep = finite.unsqueeze(-1)
        inputs = [torch.where(keep, a, 0) for a in inputs]
        deltas = [torch.where(keep, d, 0) for d in deltas]
        weight = torch.where(finite, weight, 0)
        per_layer_sq = [torch.where(finite, sq, 0) for sq in per_layer_sq]
        norms = torch.where(finite, norms, 0)
    if per_layer:
        bound = clip.unsqueeze(1) / len(layers) ** 0.5
        coefs = [(weight * torch.clamp(bound / sq.sqrt().clamp_min(1e-12), max=1.0)).unsqueeze(-1)
                 for sq in per_layer_sq]
    else:
        factor = torch.clamp(clip.unsqueeze(1) / norms.clamp_min(1e-12), max=1.0)  # min(1, C / ||g||)
        coefs = [(weight * factor).unsqueeze(-1)] * len(layers)  # (K, B, 1)
    # one draw per config for all parameter entries: per-parameter draws cost a dispatch each
    sizes = [n for layer in layers for n in (layer.weight[0].numel(), layer.bias[0].numel())]
    chunks = None
    if noise_std is not None:
        noise = _rng.normal((sum(sizes),), generators, device=weight.device,
                            dtype=torch.promote_types(weight.dtype, clip.dtype)) * noise_std.unsqueeze(1)
        chunks = iter(noise.split(sizes, dim=1))
    for i, (layer, a, d, coef) in enumerate(zip(layers, inputs, deltas, coefs)):
        cd = coef * d
        if plain is not None:  # the unclipped objective's rows: the first ones
            cd[:, :plain[i].shape[1]] -= plain[i]
        for param, g in ((layer.weight, torch.bmm(a.transpose(1, 2), cd)), (layer.bias, cd.sum(dim=1, keepdim=True))):
            step = g.neg_() if chunks is None else next(chunks).view_as(g).sub_(g)
            if param.grad is None:
                param.grad = step
            else:
                param.grad += step
    weighted = weight != 0  # (K, B)
    exceeded = ((norms > clip.unsqueeze(1)) & weighted).sum(1)
    return torch.stack([exceeded, weighted.sum(1)]).cpu().numpy()


class HandPackedChain:
    """Per-sample clipping over a ReLU chain of packed linear layers (ghost norms, one
    backward by hand): the interface ``FunctionalPack`` offers for any module, so that DP-SGD
    and PF-LD take either."""

    def __init__(self, layers: Sequence[PackedLinear]):
        self.layers = list(layers)

    def parameters(self):
        return (p for layer in self.layers for p in layer.parameters())

    @torch.no_grad()
    def forward_traced(self, x: torch.Tensor):
        """(the chain's output (K, B, out), the trace ``add_clipped`` needs: each layer's input)."""
        out, inputs, _ = forward_traced(self.layers, x)
        return out, inputs

    @torch.no_grad()
    def row_norms(self, trace, unit: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Each row's gradient norm over every layer's parameters, (K, B), in ``dtype``, as
        ``add_clipped`` computes it (not finite where the gradient is not): a count by rows'
        norms without the clipped sum's matmuls."""
        deltas = backprop_errors(self.layers, trace, unit)
        with full_precision(unit.device):
            return sum(d.to(dtype).pow(2).sum(-1) * (a.to(dtype).pow(2).sum(-1) + 1)
                       for a, d in zip(trace, deltas)).sqrt()

    @torch.no_grad()
    def add_clipped(self, trace, unit: torch.Tensor, row_scale: torch.Tensor | None, weight: torch.Tensor,
                    clip: torch.Tensor, noise_std: torch.Tensor | None, generators,
                    plain_scale: torch.Tensor | None = None, per_layer: bool = False) -> np.ndarray:
        """``add_clipped_gradients`` with row z's gradient that of <unit[k, z] row_scale[k, z],
        output> (``row_scale`` None: 1) and, with ``plain_scale`` (K, P), the unclipped
        gradient of the first P rows' <unit plain_scale, output>: one backward of ``unit``."""
        deltas = backprop_errors(self.layers, trace, unit)
        clipped = deltas if row_scale is None else [d * row_scale.unsqueeze(2).to(d.dtype) for d in deltas]
        plain = None if plain_scale is None else \
            [d[:, :plain_scale.shape[1]] * plain_scale.unsqueeze(2).to(d.dtype) for d in deltas]
        return add_clipped_gradients(self.layers, trace, clipped, weight, clip, noise_std, generators,
                                     plain=plain, per_layer=per_layer)
