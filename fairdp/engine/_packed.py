"""Packed layers: K independent models of one architecture evaluated as batched matmuls.

Every parameter carries a leading config axis K. Config k's weights are initialised from
its own stream with ``torch.nn.Linear``'s distribution (uniform in +-1/sqrt(fan_in) for
weight and bias), and its dropout masks come from its own stream, so config k trained
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

    def __init__(self, generators: _rng.Generators, d_in: int, d_out: int,
                 *, device=None, dtype=torch.float32):
        super().__init__()
        k = len(generators)
        bound = 1.0 / math.sqrt(d_in)
        self.weight = nn.Parameter(torch.empty(k, d_in, d_out, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(k, 1, d_out, device=device, dtype=dtype))
        with torch.no_grad():
            # nn.Linear's (out, in) order, then its bias, from each config's own stream
            draw = dict(device=device, dtype=dtype, low=-bound, high=bound)
            self.weight.copy_(_rng.uniform((d_out, d_in), generators, **draw).transpose(1, 2))
            self.bias.copy_(_rng.uniform((1, d_out), generators, **draw))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:  # the same input rows for every config: one broadcast matmul
            return torch.matmul(x, self.weight) + self.bias
        return torch.baddbmm(self.bias, x, self.weight)


class PackedMLP(nn.Module):
    """Linear layers with ReLU and dropout between them (and after the last if ``activate_last``)."""

    def __init__(self, generators: _rng.Generators, sizes: Sequence[int], *,
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
                x = torch.relu_(x)  # x is the layer's fresh output: no copy
                if dropout_generators is not None and self.dropout > 0:
                    x = _rng.dropout(x, 1.0 - self.dropout, dropout_generators)
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
