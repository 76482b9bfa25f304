"""The training step of FEDERATE's family: encoder -> privatiser -> classifier, adversaries
behind a gradient reversal layer (unconstrained, noise, dpnr, adversarial, multi_adversarial,
federate, cape, and any method built on them)."""

from __future__ import annotations

import torch

from fairdp.engine import (
    ModelSpec,
    PackedModel,
    grad_reverse,
    lambda_schedule,
    pairwise_difference_loss,
    per_config_cross_entropy,
)
from fairdp.engine.contract import Batch, PackContext, PackStep
from fairdp.privacy import check_eps


class RepresentationStep(PackStep):
    """Per minibatch: the task loss, plus each adversary's loss through the gradient reversal
    layer at this epoch's lambda (Ganin & Lempitsky's ramp, or constant), plus Han et al.'s
    difference loss between adversaries. Configs carry ``eps`` (private spec), ``lam``
    (adversaries) and ``lam_ort`` (orthogonality) as needed; each config's dropout masks and
    noise come from its own streams."""

    per_config_attributes = ("eps", "lam", "lam_ort", "lam_epoch")

    def __init__(self, ctx: PackContext, spec: ModelSpec):
        super().__init__(ctx)
        self.spec = spec
        data = ctx.data
        self.model = PackedModel(spec, ctx.arch, data.n_features, data.n_classes, data.n_groups,
                                 ctx.generators("init"), device=ctx.device, dtype=ctx.dtype,
                                 packing=ctx.settings.packing)
        self.eps = None
        if spec.privatizer != "none":
            eps = ctx.per_config("eps")
            check_eps(eps)  # once per pack: every step privatises with eps_checked
            # host floats: the mechanism's tables are built once from them, and a GPU never waits
            self.eps = tuple(float(e) for e in eps.cpu().tolist())
        self.lam = ctx.per_config("lam") if spec.adversaries else None
        self.lam_ort = ctx.per_config("lam_ort") if spec.orthogonality else None
        self.lam_epoch = None

    def begin_epoch(self, epoch: int) -> None:
        if self.lam is not None:
            s = self.ctx.settings
            self.lam_epoch = lambda_schedule(self.lam, epoch, s.epochs, s.gamma, self.spec.schedule)

    def forward_train(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(representation, task logits) with dropout and training noise from each config's streams."""
        dropout = self.ctx.generators("dropout")
        z = self.model.represent(x, self.eps, self.ctx.generators("noise"), dropout)
        return z, self.model.classifier(z, dropout)

    def loss(self, batch: Batch) -> torch.Tensor:
        z, logits = self.forward_train(batch.x)
        loss = per_config_cross_entropy(logits, batch.y)
        if self.spec.adversaries:
            dropout = self.ctx.generators("dropout")
            zr = grad_reverse(z, self.lam_epoch)
            for adv in self.model.adversaries:
                loss = loss + per_config_cross_entropy(adv(zr, dropout), batch.s)
            if self.spec.orthogonality:
                # The difference loss trains the adversaries only: evaluate it on a detached
                # representation so it never reaches the encoder through the reversal layer.
                hidden = [adv(z.detach(), dropout, return_hidden=True)[1] for adv in self.model.adversaries]
                loss = loss + self.lam_ort * pairwise_difference_loss(hidden)
        return loss

    def evaluate(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Representations with fresh evaluation noise (the ``eval_noise`` stream), and logits."""
        z = self.model.represent(x, self.eps, self.ctx.generators("eval_noise"))
        return z, self.model.classifier(z)
