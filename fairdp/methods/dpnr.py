"""DPNR (Lyu et al. 2020) as published: per-row min-max to [0, 1] plus Laplace(1/eps).

The published analysis takes the L1 sensitivity to be 1; it is D (FEDERATE appendix C),
so a run's claimed ``eps`` is reported beside its true ``eps_formal = D * eps``. Word
dropout (DPNR 3.3.2) applies to token inputs; fairdp's datasets are encoded vectors, so
it is provided as a mechanism (``fairdp.privacy.word_dropout``) and not used here.
"""

from fairdp.engine import ModelSpec
from fairdp.methods._base import MINMAX_EPS, NeuralMethod
from fairdp.methods._registry import register_method

DPNR_EPS = [0.05, 0.1, 0.5, 1.0, 5.0]  # DPNR Table 2


@register_method
class DPNR(NeuralMethod):
    name = "dpnr"
    privacy_scope = "local"
    hyperparams = (MINMAX_EPS,)
    spec = ModelSpec(privatizer="minmax")

    def paper_grid(self, dataset):
        return {"eps": list(DPNR_EPS)}
