"""The packed encoder/classifier/adversary model that most neural methods train.

Encoder E -> privatiser (none, FEDERATE's Laplace layer, or DPNR's min-max) -> classifier C,
with adversaries A_i reading the representation (behind a gradient reversal layer, which
the method's step applies). Every parameter has a leading config axis K.

Each part is the architecture's MLP, hand-packed (``PackedMLP``), or a module of the user's
(``models``: a factory per role) packed by ``FunctionalPack``. Without a privatiser or
adversaries, a model with any such module packs encoder and classifier as one module, the
chain whose per-sample gradients DP-SGD and PF-LD clip (``per_sample_chain``); a part the
user left to the architecture is then its MLP as a plain module (``mlp``). Every built-in
MLP starts from the hand-packed layers' draws, on either path: ``packing="functional"``
(``TrainSettings.packing``) packs them all by ``FunctionalPack`` and computes what the
hand-packed layers compute, to rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from fairdp.engine._arch import ROLES, Architecture
from fairdp.engine._functional import (
    FunctionalPack,
    blank_instances,
    build_instances,
    copy_hand_weights,
    mlp,
    packing_of,
)
from fairdp.engine._packed import PackedMLP
from fairdp.engine._per_sample import HandPackedChain
from fairdp.engine._settings import full_precision
from fairdp.privacy import laplace_privatize, minmax_privatize

PRIVATIZERS = ("none", "laplace", "minmax")
# a role's module from its input and output sizes: factory(in_features, out_features) -> nn.Module
ModelFactory = Callable[[int, int], nn.Module]
SCHEDULES = ("ganin", "constant")
# "auto": fairdp's hand-packed layers wherever they apply; "functional": every part through
# FunctionalPack (the built-in MLPs with the same initial weights), to compare or benchmark
PACKINGS = ("auto", "functional")


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
    """Encoder E -> priv -> classifier C, with adversaries A_i reading the representation.

    ``models`` maps a role (``ROLES``) to the factory of the user's module for it (default:
    the architecture's ``models``); the other roles are the architecture's MLPs, initialised
    with the hand-packed layers' draws. ``packing`` "functional" packs those MLPs by
    ``FunctionalPack`` too (``TrainSettings.packing``), where "auto" keeps them hand-packed
    wherever no module of the user's shares their chain."""

    def __init__(self, spec: ModelSpec, arch: Architecture, d_in: int, n_classes: int, n_groups: int,
                 init_generators, *, device, dtype, models: Mapping[str, ModelFactory] | None = None,
                 packing: str = "auto"):
        super().__init__()
        if packing not in PACKINGS:
            raise ValueError(f"packing must be one of {PACKINGS}, got {packing!r}")
        self.spec = spec
        g, kw = init_generators, dict(device=device, dtype=dtype)
        d = arch.representation_dim
        models = dict(arch.model_factories() if models is None else models)
        unknown = set(models) - set(ROLES)
        if unknown:
            raise ValueError(f"no model role {sorted(unknown)}; roles: {', '.join(ROLES)}")
        # hidden sizes between a role's input and output, and whether its output is activated
        # (the encoder's last size is the representation's)
        hidden = {"encoder": (arch.encoder[:-1], True), "classifier": (arch.classifier, False),
                  "adversary": (arch.adversary, False)}

        def hand(role: str, d_from: int, d_to: int) -> PackedMLP:
            layers, activate_last = hidden[role]
            return PackedMLP(g, [d_from, *layers, d_to], dropout=arch.dropout, activate_last=activate_last, **kw)

        def plain(role: str) -> ModelFactory:
            if role in models:
                return models[role]
            layers, activate_last = hidden[role]
            return lambda i, o: mlp([i, *layers, o], arch.dropout, activate_last)

        def part(role: str, d_from: int, d_to: int) -> nn.Module:
            if role in models:
                return FunctionalPack(build_instances(lambda: models[role](d_from, d_to), g, **kw))
            packed = hand(role, d_from, d_to)
            if packing == "auto":
                return packed
            instances = blank_instances(lambda: plain(role)(d_from, d_to), len(g), **kw)
            copy_hand_weights(instances, packed)
            return FunctionalPack(instances)

        self.functional: FunctionalPack | None = None  # the encoder-classifier chain, when packed as one
        if (models or packing == "functional") and spec.privatizer == "none" and not spec.adversaries:
            chain = [("encoder", d_in, d), ("classifier", d, n_classes)]

            def factory():
                return nn.Sequential(*(plain(role)(i, o) for role, i, o in chain))

            # the user's modules from the config's seeded torch RNG, then the MLPs' hand draws
            users = [role for role, _, _ in chain if role in models]
            instances = build_instances(factory, g, **kw) if users else blank_instances(factory, len(g), **kw)
            for index, (role, i, o) in enumerate(chain):
                if role not in models:
                    copy_hand_weights([inst[index] for inst in instances], hand(role, i, o))
            self.functional = FunctionalPack(instances)
            self.encoder, self.classifier = self.functional.stage("0"), self.functional.stage("1")
        else:
            self.encoder = part("encoder", d_in, d)
            self.classifier = part("classifier", d, n_classes)
        # Han et al.'s difference loss reads each adversary's last hidden layer, which only the
        # hand-packed MLP exposes (``return_hidden``): those adversaries stay hand-packed
        adversary = (lambda: hand("adversary", d, n_groups)) if spec.orthogonality else \
            (lambda: part("adversary", d, n_groups))
        self.adversaries = nn.ModuleList(adversary() for _ in range(spec.adversaries))

    @property
    def path(self) -> str:
        """Which packing the model takes: "hand-packed", "functional" or "mixed"."""
        return packing_of(self)

    def per_sample_chain(self):
        """The input-to-logits chain that per-sample gradients go through (DP-SGD, PF-LD):
        ghost norms over the hand-packed layers, or vmap over the functional pack."""
        if self.functional is not None:
            return self.functional
        if isinstance(self.encoder, PackedMLP) and isinstance(self.classifier, PackedMLP):
            return HandPackedChain([*self.encoder.layers, *self.classifier.layers])
        raise ValueError("per-sample gradients need encoder and classifier packed as one chain: a model "
                         "without privatiser or adversaries")

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
    """(fan_in, fan_out) of every linear layer of one config's ``PackedModel``; a user's
    module counts as its parameters of two or more dimensions, each read as (numel / out,
    out) with out its first dimension (exact for linear layers, a convolution's weights and
    output channels otherwise): what the memory and chunk rules size from."""
    d = arch.representation_dim
    parts = [("encoder", d_in, [d_in, *arch.encoder]), ("classifier", d, [d, *arch.classifier, n_classes])]
    parts += [("adversary", d, [d, *arch.adversary, n_groups])] * spec.adversaries
    models = dict(arch.models)
    shapes = []
    for role, d_from, sizes in parts:
        if role in models:
            module = models[role].build(d_from, sizes[-1])
            shapes += [(p.numel() // p.shape[0], p.shape[0]) for p in module.parameters() if p.dim() >= 2 and p.numel()]
        else:
            shapes += list(zip(sizes[:-1], sizes[1:]))
    return shapes
