"""PF-LD (Tran et al. 2021): F-LD with DP primal and dual steps protecting the sensitive attribute.

A config names its target privacy ``eps`` (delta = 1e-5, the paper's), and clipping bounds
``clip_primal`` (C_p) and ``clip_dual`` (C_d); the noise multipliers are calibrated to the
target by the RDP accountant for the run's batch size, training-set size and epochs
(``fairdp.privacy.calibrate_pfld_sigmas``), and each row reports the accountant's
``eps_formal`` for the run it had.
"""

from fairdp.methods._base import EPS, HyperParam, Method
from fairdp.methods._lagrangian import ARCHITECTURE, train_lagrangian
from fairdp.methods._registry import register_method
from fairdp.methods.fld import NOTION
from fairdp.privacy import PFLD_DELTA, calibrate_pfld_sigmas, pfld_epsilon

CLIP_PRIMAL = HyperParam("clip_primal", low=0.0, low_open=True, doc="C_p, per-sample gradient clip")
CLIP_DUAL = HyperParam("clip_dual", low=0.0, low_open=True, doc="C_d, per-sample h(z) clip")


@register_method
class PFLD(Method):
    name = "pfld"
    binary_only = True
    hyperparams = (NOTION, EPS, CLIP_PRIMAL, CLIP_DUAL)

    def paper_grid(self, dataset):
        # Tran et al. Figures 2-3: eps swept at C_p in {.., 10, 20, ..}, C_d = 5.
        return {"fairness_notion": ["dp", "eo", "ap"], "eps": [0.1, 0.5, 1.0, 2.0, 5.0, 10.0],
                "clip_primal": [1.0, 5.0, 10.0, 20.0, 50.0], "clip_dual": [5.0]}

    def default_architecture(self, dataset):
        return ARCHITECTURE

    def formal_privacy(self, config, representation_dim):
        # Calibration keeps the accountant's eps at or below the target; a trained pack
        # reports the accountant's own value (PackResult.privacy).
        return float(config["eps"]), PFLD_DELTA

    def train_pack(self, data, configs, seed, settings, arch=None):
        configs = [self.validate_config(c) for c in configs]
        n = len(data.splits["train"])
        batch = min(settings.batch_size, n)
        sigmas = [calibrate_pfld_sigmas(c["eps"], PFLD_DELTA, batch, n, settings.epochs) for c in configs]
        result = train_lagrangian(data, configs, [self.config_id(c) for c in configs], seed, settings,
                                  private=True, sigmas=sigmas, arch=arch or ARCHITECTURE)
        result.privacy = [(pfld_epsilon(sp, sd, batch, n, settings.epochs, PFLD_DELTA), PFLD_DELTA)
                          for sp, sd in sigmas]
        return result
