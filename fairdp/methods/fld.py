"""F-LD (Tran et al. 2021, Algorithm 1): fairness constraints by Lagrangian duality, no privacy."""

from fairdp.methods._base import HyperParam, Method
from fairdp.methods._lagrangian import ARCHITECTURE, NOTIONS, train_lagrangian
from fairdp.methods._registry import register_method

NOTION = HyperParam("fairness_notion", choices=NOTIONS, doc="dp, eo or ap (demographic parity, "
                    "equalized odds, accuracy parity)")


@register_method
class FLD(Method):
    name = "fld"
    binary_only = True
    hyperparams = (NOTION,)

    def paper_grid(self, dataset):
        return {"fairness_notion": list(NOTIONS)}

    def default_architecture(self, dataset):
        return ARCHITECTURE

    def train_pack(self, data, configs, seed, settings, arch=None):
        configs = [self.validate_config(c) for c in configs]
        return train_lagrangian(data, configs, [self.config_id(c) for c in configs], seed, settings,
                                private=False, arch=arch or ARCHITECTURE)
