"""Noise: Lyu et al.'s DP representation with FEDERATE's corrected analysis, no adversary.

laplace_privatize after the encoder (L1 normalisation + Laplace(2/eps)): eps-LDP per row.
"""

from fairdp.engine import ModelSpec
from fairdp.methods._base import EPS, NeuralMethod
from fairdp.methods._registry import register_method

FEDERATE_EPS = [8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 20.0]  # FEDERATE D.4


@register_method
class Noise(NeuralMethod):
    name = "noise"
    privacy_scope = "local"
    hyperparams = (EPS,)
    spec = ModelSpec(privatizer="laplace")

    def paper_grid(self, dataset):
        return {"eps": list(FEDERATE_EPS)}
