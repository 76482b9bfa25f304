"""F-LD (Tran et al. 2021, Algorithm 1): fairness constraints by Lagrangian duality, no privacy."""

from fairdp.methods._base import HyperParam, NeuralMethod
from fairdp.methods._lagrangian import ARCHITECTURE, NOTIONS, PRIMAL_STEP, LagrangianStep
from fairdp.methods._registry import register_method

NOTION = HyperParam("fairness_notion", choices=NOTIONS, doc="dp, eo or ap (demographic parity, "
                    "equalized odds, accuracy parity)")


@register_method
class FLD(NeuralMethod):
    name = "fld"
    binary_only = True
    hyperparams = (NOTION,)

    def paper_grid(self, dataset):
        return {"fairness_notion": list(NOTIONS)}

    optimizer = "sgd"  # Algorithm 1's plain gradient steps
    default_lr = PRIMAL_STEP

    def default_architecture(self, dataset):
        return ARCHITECTURE

    def make_step(self, ctx):
        return LagrangianStep(ctx, private=False)
