"""GapReg, a fairdp plugin method: the task loss plus a demographic-parity gap penalty
(the "GapReg" baseline of Chuang & Mroueh, "Fair Mixup", ICLR 2021).

This file is the whole method. A study lists it under ``plugins:`` and then ``gap_reg`` is
trained, stored (with its ``lam_gap`` column), analysed and searched like a built-in method.
The model and the loop are fairdp's (encoder -> classifier, Adam, dropout, the
best-validation epoch, packs of configs); the method adds one term to each minibatch's
loss: lam_gap * sum over groups a of |mean_batch p(x) - mean_{batch, s=a} p(x)|, where
p(x) = P(y_hat = 1 | x) is the soft prediction.
"""

import torch

from fairdp.engine import per_config_cross_entropy
from fairdp.methods import HyperParam, NeuralMethod, RepresentationStep, register_method

LAM_GAP = HyperParam("lam_gap", low=0.0, doc="weight of the demographic-parity gap penalty")


class GapRegStep(RepresentationStep):
    per_config_attributes = ("lam_gap",)  # what a pruned pack keeps of the survivors' state

    def __init__(self, ctx, spec):
        super().__init__(ctx, spec)
        self.lam_gap = ctx.per_config("lam_gap")  # (K,): one weight per config of the pack

    def loss(self, batch):
        _, logits = self.forward_train(batch.x)  # (K, B, classes), dropout from each config's stream
        p = torch.softmax(logits, dim=-1)[..., 1]  # (K, B)
        groups = torch.nn.functional.one_hot(batch.s, self.ctx.data.n_groups).to(p.dtype)  # (B, G)
        count = groups.sum(0)
        group_mean = (p @ groups) / count.clamp_min(1)  # (K, G)
        gap = ((group_mean - p.mean(1, keepdim=True)).abs() * (count > 0)).sum(1)
        return per_config_cross_entropy(logits, batch.y) + self.lam_gap * gap


@register_method
class GapReg(NeuralMethod):
    name = "gap_reg"
    binary_only = True
    hyperparams = (LAM_GAP,)

    def paper_grid(self, dataset):
        return {"lam_gap": [0.0, 0.5, 1.0, 2.0, 5.0]}

    def make_step(self, ctx):
        return GapRegStep(ctx, self.spec)
