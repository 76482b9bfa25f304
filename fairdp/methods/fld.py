"""F-LD (Tran et al. 2021, Algorithm 1): fairness constraints by Lagrangian duality, no privacy."""

from fairdp.methods._base import HyperParam
from fairdp.methods._lagrangian import NOTIONS, LagrangianStep, TranMethod
from fairdp.methods._registry import register_method

NOTION = HyperParam("fairness_notion", choices=NOTIONS, doc="dp, eo or ap (demographic parity, "
                    "equalized odds, accuracy parity)")


@register_method
class FLD(TranMethod):
    name = "fld"
    binary_only = True
    hyperparams = (NOTION,)

    def paper_grid(self, dataset):
        return {"fairness_notion": list(NOTIONS)}

    def make_step(self, ctx):
        return LagrangianStep(ctx)
