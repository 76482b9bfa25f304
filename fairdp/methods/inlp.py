"""INLP (Ravfogel et al. 2020): iterative nullspace projection on the penultimate layer of a
trained unconstrained model, then the final layer retrained on the projected features.

The unconstrained model is the one ``unconstrained`` trains for the same seed (same config
id, same streams), so INLP debiases exactly that baseline. One INLP run to the largest
iteration count yields the projection for every smaller count, so a pack of iteration
counts costs one INLP run plus K linear heads trained together. Both the baseline and the
heads train in the engine's loop.
"""

import numpy as np
import torch

from fairdp.engine import ModelSpec, PackedLinear, fit_pack, layer_shapes, per_config_cross_entropy
from fairdp.engine.contract import PackContext, PackStep
from fairdp.methods._base import HyperParam, NeuralMethod
from fairdp.methods._nullspace import inlp as nullspace_iterations
from fairdp.methods._registry import register_method
from fairdp.methods._representation import RepresentationStep
from fairdp.methods.unconstrained import Unconstrained

ITERATIONS = HyperParam("iterations", low=1, integer=True, doc="nullspace projection iterations")


class ProjectedHeadStep(PackStep):
    """K linear classifiers on the penultimate features projected by each config's P (K, H, H);
    the projected features are what an attacker sees."""

    per_config_attributes = ("P",)

    def __init__(self, ctx: PackContext, features: dict[str, torch.Tensor], projections: torch.Tensor):
        super().__init__(ctx)
        self.features, self.P = features, projections
        self.model = PackedLinear(ctx.generators("init"), projections.shape[1], ctx.data.n_classes,
                                  device=ctx.device, dtype=ctx.dtype)

    def inputs(self, split):
        return self.features[split]

    def loss(self, batch):
        return per_config_cross_entropy(self.model(torch.matmul(batch.x, self.P)), batch.y)

    def evaluate(self, x):
        z = torch.matmul(x, self.P)
        return z, self.model(z)


@register_method
class INLP(NeuralMethod):
    name = "inlp"
    hyperparams = (ITERATIONS,)

    def paper_grid(self, dataset):
        # FEDERATE D.4: 15-45 iterations for Bias in Bios, 2-7 for Twitter-sized data.
        return {"iterations": list(range(15, 46)) if dataset == "bios" else list(range(2, 8))}

    def layer_shapes(self, data, arch):
        # the heads are what the pack trains; one chunk keeps the baseline to one run
        return [(arch.classifier[-1] if arch.classifier else arch.representation_dim, data.n_classes)]

    def architecture_fields(self):
        return ("encoder", "classifier", "dropout")  # the unconstrained model it projects: no adversary

    def make_step(self, ctx):
        data, arch = ctx.data, ctx.arch
        base = fit_pack(lambda c: RepresentationStep(c, ModelSpec()), data, [{}], [Unconstrained().config_id({})],
                        ctx.seed, ctx.settings, arch, splits_out=(),
                        shapes=layer_shapes(ModelSpec(), arch, data.n_features, data.n_classes, data.n_groups))
        features = {n: _penultimate(base.model, ctx.split(n).X) for n in ("train", "valid", "test")}
        most = max(c["iterations"] for c in ctx.configs)
        projections = nullspace_iterations(features["train"].double().cpu().numpy(), data.split("train").s,
                                           most, seed=ctx.seed)
        P = torch.stack([torch.as_tensor(np.asarray(projections[c["iterations"] - 1]), dtype=ctx.dtype)
                         for c in ctx.configs]).to(ctx.device)  # (K, H, H)
        return ProjectedHeadStep(ctx, features, P)


def _penultimate(model, X: torch.Tensor) -> torch.Tensor:
    """The input of the classifier's last layer, evaluation mode, for one config: (n, H), on
    either packing path (``train.packing``)."""
    model.eval()
    with torch.no_grad():
        z = model.represent(X, None, None)
        if hasattr(model.classifier, "last_linear_input"):  # the functional path's part
            return model.classifier.last_linear_input(z)[0]
        return model.classifier(z, return_hidden=True)[1][0]
