"""CAPE (Plant et al. 2021) with its corrected noise: mean-pooled sentence embeddings in,
two dense layers, laplace_privatize (L1 + Laplace(2/eps), CAPE Algorithm 1), an adversary
with a constant lambda behind a gradient reversal layer. Architecture from CAPE Table 2
(256 hidden units, dropout 0.4, learning rate 1e-4); grid from Table 4."""

from fairdp.engine import ModelSpec
from fairdp.engine._shared import PRESETS
from fairdp.methods._base import EPS, LAM, NeuralMethod
from fairdp.methods._registry import register_method


@register_method
class Cape(NeuralMethod):
    name = "cape"
    privacy_scope = "local"
    hyperparams = (EPS, LAM)
    spec = ModelSpec(privatizer="laplace", adversaries=1, schedule="constant")
    default_lr = 1e-4  # CAPE Table 2

    def paper_grid(self, dataset):
        return {"eps": [0.01, 0.1, 0.5, 1.0], "lam": [0.1, 0.5, 1.0, 1.5]}

    def default_architecture(self, dataset):
        return PRESETS["cape"]
