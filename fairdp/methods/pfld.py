"""PF-LD (Tran et al. 2021): F-LD with DP primal and dual steps protecting the sensitive attribute.

A config names its target privacy ``eps`` (delta = 1e-5, the paper's), and clipping bounds
``clip_primal`` (C_p) and ``clip_dual`` (C_d); the noise multipliers are calibrated to the
target by the study's accountant (``train.accountant``: dp-accounting's RDP by default, or
its PLD) for the run's batch size, training-set size and epochs
(``fairdp.privacy.calibrate_pfld_sigmas``), and each row reports that accountant's
``eps_formal`` for the multipliers the run used. The guarantee is for Definition 1's
adjacency, one record's (binary) sensitive attribute changed, which the mechanism turns into
adding or removing one record's clipped contribution (``fairdp.methods._lagrangian``): rows
store it as the relation ``replace_attribute``.

``private_group`` (0 or 1, default 1) names the group whose rows form the private part of the
group term: the primal step's Poisson sample is drawn among its rows and the dual step
releases its noisy sums and count; the other group's are the public totals minus them. The
mechanism, its sensitivity and the accountant's event are the same for either group; the
cost of a step grows with the sample, q times the group's size, so the smaller group is the
cheaper choice. It is a public setting of the study, never read from the data (a choice made
from the data would depend on the attribute it protects). A config that does not name it
trains at 1 and keeps the id it had before the setting existed (``HyperParam.default``).
"""

from fairdp.methods._base import TARGET_EPS, HyperParam, RunInfo
from fairdp.methods._lagrangian import PrivateLagrangianStep, TranMethod, check_binary_attribute
from fairdp.methods._registry import register_method
from fairdp.methods.fld import NOTION
from fairdp.privacy import Guarantee, calibrate_pfld_sigmas, pfld_epsilon, pfld_event
from fairdp.privacy._shared import PFLD_DELTA

CLIP_PRIMAL = HyperParam("clip_primal", low=0.0, low_open=True, doc="C_p, per-sample gradient clip")
CLIP_DUAL = HyperParam("clip_dual", low=0.0, low_open=True, doc="C_d, per-sample h(z) clip")
PRIVATE_GROUP = HyperParam("private_group", low=0, high=1, integer=True, default=PrivateLagrangianStep.PRIVATE_GROUP,
                           doc="the group (0 or 1) whose rows are the private part; a public choice, "
                               "the smaller group by public knowledge is cheaper (default 1)")


@register_method
class PFLD(TranMethod):
    name = "pfld"
    clips_per_sample = True
    poisson_sampled = True
    privacy_scope = "central"
    binary_only = True
    neighbour_relation = "replace_attribute"
    hyperparams = (NOTION, TARGET_EPS, CLIP_PRIMAL, CLIP_DUAL, PRIVATE_GROUP)

    def paper_grid(self, dataset):
        # Tran et al. Figures 2-3: eps swept at C_p in {.., 10, 20, ..}, C_d = 5; group 1's rows
        # private, as fairdp's PF-LD has always drawn them (the default: the configs' ids as before)
        return {"fairness_notion": ["dp", "eo", "ap"], "eps": [0.1, 0.5, 1.0, 2.0, 5.0, 10.0],
                "clip_primal": [1.0, 5.0, 10.0, 20.0, 50.0], "clip_dual": [5.0],
                "private_group": [PRIVATE_GROUP.default]}

    def check_dataset(self, data, path=None):
        super().check_dataset(data, path)
        check_binary_attribute(data, self.name, path)

    def noise_multipliers(self, config: dict, run: RunInfo) -> tuple[float, float]:
        """(sigma_p, sigma_d) calibrated so that the run is (eps, 1e-5)-DP (Theorem 3) by the
        run's accountant (RDP or PLD)."""
        return calibrate_pfld_sigmas(config["eps"], PFLD_DELTA, run.batch_size, run.n, run.epochs,
                                     accountant=run.accountant)

    def privacy(self, config, run):
        # calibration keeps the accountant's eps at or below the target; report the accountant's
        return Guarantee(pfld_epsilon(*self.noise_multipliers(config, run), run.batch_size, run.n, run.epochs,
                                      PFLD_DELTA, run.accountant), PFLD_DELTA)

    def dp_event(self, config, run):
        return pfld_event(*self.noise_multipliers(config, run), run.batch_size, run.n, run.epochs)

    def make_step(self, ctx):
        run = RunInfo.of(ctx.data, ctx.settings, ctx.arch.representation_dim)
        return PrivateLagrangianStep(ctx, [self.noise_multipliers(c, run) for c in ctx.configs])
