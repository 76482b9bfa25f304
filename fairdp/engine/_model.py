"""The packed encoder/classifier/adversary model that most neural methods train.

Encoder E -> privatiser (none, FEDERATE's Laplace layer, or DPNR's min-max) -> classifier C,
with adversaries A_i reading the representation (behind a gradient reversal layer, which
the method's step applies). Every parameter has a leading config axis K.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from fairdp.engine._arch import Architecture
from fairdp.engine._packed import PackedMLP
from fairdp.engine._settings import full_precision
from fairdp.privacy import laplace_privatize, minmax_privatize

PRIVATIZERS = ("none", "laplace", "minmax")
SCHEDULES = ("ganin", "constant")


@dataclass(frozen=True)
class ModelSpec:
    """What distinguishes the representation-learning methods from one another."""

    privatizer: str = "none"     # priv layer after the encoder (FEDERATE eq. 3, or DPNR's min-max)
    adversaries: int = 0         # adversarial branches behind a gradient reversal layer
    schedule: str = "ganin"      # lambda_e = lam * (2 / (1 + exp(-gamma p)) - 1), or constant lam
    orthogonality: bool = False  # Han et al.'s difference loss between adversaries, weight lam_ort

    def __post_init__(self):
        if self.privatizer not in PRIVATIZERS:
            raise ValueError(f"privatizer must be one of {PRIVATIZERS}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}")


class PackedModel(nn.Module):
    """Encoder E -> priv -> classifier C, with adversaries A_i reading the representation."""

    def __init__(self, spec: ModelSpec, arch: Architecture, d_in: int, n_classes: int, n_groups: int,
                 init_generators: list[torch.Generator], *, device, dtype):
        super().__init__()
        self.spec = spec
        g, kw = init_generators, dict(device=device, dtype=dtype)
        d = arch.representation_dim
        self.encoder = PackedMLP(g, [d_in, *arch.encoder], dropout=arch.dropout, activate_last=True, **kw)
        self.classifier = PackedMLP(g, [d, *arch.classifier, n_classes], dropout=arch.dropout,
                                    activate_last=False, **kw)
        self.adversaries = nn.ModuleList(
            PackedMLP(g, [d, *arch.adversary, n_groups], dropout=arch.dropout, activate_last=False, **kw)
            for _ in range(spec.adversaries)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (K, B, C) without dropout or noise: the path per-sample gradients go through."""
        return self.classifier(self.represent(x, None, None))

    def represent(self, x, eps, noise_generators, dropout_generators=None) -> torch.Tensor:
        """The representation an attacker sees: the encoder's output, privatised if the method is DP."""
        h = self.encoder(x, dropout_generators)
        if self.spec.privatizer == "none":
            return h
        # The mechanism's normalisation and noise are what the eps-LDP proof is about: always
        # fp32 (or the run's float64), never autocast's bf16, whose rounding would change both.
        with full_precision(h.device):
            h = h.float() if h.dtype == torch.bfloat16 else h
            # eps was checked once for the pack (RepresentationStep), not at every step
            if self.spec.privatizer == "laplace":
                return laplace_privatize(h, eps, generator=noise_generators, eps_checked=True)
            return minmax_privatize(h, eps, generator=noise_generators, eps_checked=True)


def layer_shapes(spec: ModelSpec, arch: Architecture, d_in: int, n_classes: int, n_groups: int):
    """(fan_in, fan_out) of every linear layer of one config's ``PackedModel``."""
    sizes = [[d_in, *arch.encoder], [arch.representation_dim, *arch.classifier, n_classes]]
    sizes += [[arch.representation_dim, *arch.adversary, n_groups]] * spec.adversaries
    return [(a, b) for s in sizes for a, b in zip(s[:-1], s[1:])]
