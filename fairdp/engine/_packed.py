"""Packed layers: K independent models of one architecture evaluated as batched matmuls.

Every parameter carries a leading config axis K. Config k's weights are initialised from
its own generator exactly as ``torch.nn.Linear`` would (uniform in +-1/sqrt(fan_in) for
weight and bias), and its dropout masks come from its own generator, so config k trained
inside a pack follows the same trajectory as config k trained alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from fairdp import _rng


class PackedLinear(nn.Module):
    """K affine maps: x (K, B, d_in) or (B, d_in) shared by all configs -> (K, B, d_out)."""

    def __init__(self, generators: Sequence[torch.Generator], d_in: int, d_out: int,
                 *, device=None, dtype=torch.float32):
        super().__init__()
        k = len(generators)
        bound = 1.0 / math.sqrt(d_in)
        self.weight = nn.Parameter(torch.empty(k, d_in, d_out, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(k, 1, d_out, device=device, dtype=dtype))
        with torch.no_grad():
            for i, g in enumerate(generators):
                # nn.Linear stores (out, in); draw in that order so a pack of one matches it.
                self.weight[i].copy_(torch.empty(d_out, d_in, device=device, dtype=dtype)
                                     .uniform_(-bound, bound, generator=g).T)
                self.bias[i].uniform_(-bound, bound, generator=g)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:  # the same input rows for every config: one broadcast matmul
            return torch.matmul(x, self.weight) + self.bias
        return torch.baddbmm(self.bias, x, self.weight)


class PackedMLP(nn.Module):
    """Linear layers with ReLU and dropout between them (and after the last if ``activate_last``)."""

    def __init__(self, generators: Sequence[torch.Generator], sizes: Sequence[int], *,
                 dropout: float, activate_last: bool, device=None, dtype=torch.float32):
        super().__init__()
        if len(sizes) < 2:
            raise ValueError(f"an MLP needs at least input and output sizes, got {list(sizes)}")
        self.layers = nn.ModuleList(
            PackedLinear(generators, a, b, device=device, dtype=dtype) for a, b in zip(sizes[:-1], sizes[1:])
        )
        self.dropout = dropout
        self.activate_last = activate_last

    def forward(self, x: torch.Tensor, dropout_generators=None, *, return_hidden: bool = False):
        """``dropout_generators``: the per-config generators, or None for evaluation (no dropout)."""
        hidden = x
        for i, layer in enumerate(self.layers):
            last = i == len(self.layers) - 1
            if last:
                hidden = x
            x = layer(x)
            if not last or self.activate_last:
                x = torch.relu(x)
                if dropout_generators is not None and self.dropout > 0:
                    # masks drawn in the run's dtype even under bf16 autocast, so that each
                    # config's dropout stream is the same at every precision
                    draw = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
                    mask = _rng.dropout_scale(x.shape[1:], 1.0 - self.dropout, dropout_generators,
                                              device=x.device, dtype=draw)
                    x = x * mask.to(x.dtype)
        return (x, hidden) if return_hidden else x


class _ScaledGradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(scale)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        (scale,) = ctx.saved_tensors
        return -scale * grad, None


def grad_reverse(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Identity forward; backward multiplies config k's gradient by ``-scale[k]`` (Ganin & Lempitsky).

    ``scale`` has shape (K,); ``x`` has shape (K, B, D).
    """
    return _ScaledGradReverse.apply(x, scale.reshape(-1, 1, 1).to(x.dtype))
