"""FEDERATE (Maheshwari et al. 2022): laplace_privatize after the encoder + an adversary.

eps-DP representation (Theorem 1); lam x eps grid of 15 x 10 = 150 runs per seed (D.4).
"""

from fairdp.engine import ModelSpec
from fairdp.methods._base import EPS, LAM, NeuralMethod
from fairdp.methods._registry import register_method
from fairdp.methods.adversarial import FEDERATE_LAM
from fairdp.methods.noise import FEDERATE_EPS


@register_method
class Federate(NeuralMethod):
    name = "federate"
    privacy_scope = "local"
    hyperparams = (LAM, EPS)
    spec = ModelSpec(privatizer="laplace", adversaries=1)

    def paper_grid(self, dataset):
        return {"lam": list(FEDERATE_LAM), "eps": list(FEDERATE_EPS)}
