"""DP-SGD (Abadi et al. 2016): the plain classifier trained privately, without fairness.

Tran et al.'s "P" (private, no fairness) next to PF-LD: the same two-hidden-layer network
and plain SGD steps as ``fld``/``pfld``, but every row's gradient of its own loss is clipped
to ``clip_primal`` (C) and Gaussian noise N(0, sigma^2 C^2) is added to the clipped sum
before dividing by the batch size B. It protects whole training rows (features, label and
sensitive attribute), not only the attribute as PF-LD does. Each step's rows are a Poisson
sample of the training set at rate q = B / n, drawn at that exact rate by the study's sampler
(``train.sampler``: geometric gaps, or a coin per row; as Opacus's default
``poisson_sampling``), not the loop's shuffled minibatch, and the sum is divided by the
expected size B: epochs * ceil(n / B) steps are then the sampled Gaussian mechanism the RDP
accountant composes, up to the noise, a floating-point (float64 Box-Muller) Gaussian (fairdp
0.3 trained on shuffled fixed-size batches, which that analysis covers only heuristically).

The guarantee, "central, add/remove one record", is for the training split as fixed, with its
size n public: every row publishes q = B / n exactly (its ``privacy_event``), and adding or
removing a record of the dataset as loaded would change n_train and move rows across the
split, which it does not cover; nor the features' standardisation, computed from the training
rows without noise. A replacement keeps n: the analysis converts the guarantee to replace-one
(2 eps, (1 + e^eps) delta) by group privacy before comparing it with PF-LD's attribute-level one
(``fairdp.privacy.convert_guarantee``). sigma is calibrated to the target ``eps`` at delta =
1e-5 for the run's batch size, training-set size and epochs (``calibrate_dpsgd_sigma``) by
the study's accountant (``train.accountant``: dp-accounting's RDP by default, or its PLD,
whose tighter eps calibrates a smaller sigma); rows report that accountant's eps for the sigma
used, and name it in their ``accountant`` column. Per-row gradient norms come from ghost
norms (``fairdp.engine.add_clipped_gradients``) on the built-in network, from torch.func's
per-sample gradients on a user's module (``PackedModel.per_sample_chain``), as in PF-LD.
"""

from __future__ import annotations

import numpy as np
import torch

from fairdp.methods._base import TARGET_EPS, HyperParam, RunInfo
from fairdp.methods._lagrangian import ClassifierSGDStep, TranMethod, gather_rows, poisson_sample
from fairdp.methods._registry import register_method
from fairdp.privacy import Guarantee, calibrate_dpsgd_sigma, dpsgd_epsilon, dpsgd_event
from fairdp.privacy._shared import PFLD_DELTA

CLIP = HyperParam("clip_primal", low=0.0, low_open=True, doc="C, per-row gradient clip")


@register_method
class DPSGD(TranMethod):
    name = "dpsgd"
    clips_per_sample = True
    poisson_sampled = True
    privacy_scope = "central"
    hyperparams = (TARGET_EPS, CLIP)

    def paper_grid(self, dataset):
        # the eps sweep of Tran et al. Figure 2, at their C_p grid's ends and middle
        return {"eps": [0.1, 0.5, 1.0, 2.0, 5.0, 10.0], "clip_primal": [1.0, 10.0, 50.0]}

    def noise_multiplier(self, config: dict, run: RunInfo) -> float:
        """sigma calibrated so that the run is (eps, 1e-5)-DP by the run's accountant (RDP or PLD)."""
        return calibrate_dpsgd_sigma(config["eps"], PFLD_DELTA, run.batch_size, run.n, run.epochs, run.accountant)

    def privacy(self, config, run):
        # (eps, delta) for add/remove one record of the training split as fixed, n public (q = B / n)
        sigma = self.noise_multiplier(config, run)
        return Guarantee(dpsgd_epsilon(sigma, run.batch_size, run.n, run.epochs, PFLD_DELTA, run.accountant),
                         PFLD_DELTA)

    def dp_event(self, config, run):
        return dpsgd_event(self.noise_multiplier(config, run), run.batch_size, run.n, run.epochs)

    def make_step(self, ctx):
        run = RunInfo.of(ctx.data, ctx.settings, ctx.arch.representation_dim)
        return DPSGDStep(ctx, [self.noise_multiplier(c, run) for c in ctx.configs])


class DPSGDStep(ClassifierSGDStep):
    """Each step draws its own rows: a Poisson sample of the training set at rate q = B / n
    (each config from its own stream), not the loop's shuffled minibatch, so that the
    accountant's sampled Gaussian mechanism is the step's analysis (its noise a floating-point
    Gaussian); the clipped sum plus noise is divided by the expected sample size q n = B, a
    constant, as the analysis assumes."""

    per_config_attributes = ("clip", "sigma")

    def __init__(self, ctx, sigmas: list[float]):
        super().__init__(ctx)
        self.clip = ctx.per_config("clip_primal")
        self.sigma = torch.tensor(sigmas, device=ctx.device, dtype=ctx.dtype)
        self.n = len(ctx.split("train").y)
        self.q = min(ctx.settings.batch_size, self.n) / self.n

    def update(self, batch, optimizer):
        index, valid = poisson_sample(self.n, self.q, self.ctx.generators("sample"), self.clip.device,
                                      sampler=self.ctx.settings.poisson_sampler)
        train = self.ctx.split("train")
        optimizer.zero_grad(set_to_none=True)
        self.clip_counts += dpsgd_gradients(self.model.per_sample_chain(), gather_rows(train.X, index),
                                            gather_rows(train.y, index),
                                            self.clip, self.sigma,
                                            self.ctx.generators("noise"), valid=valid,
                                            expected_rows=self.q * self.n,
                                            per_layer=self.ctx.settings.clipping == "per_layer")
        optimizer.step()

    def diagnostics(self):
        return self.clipped_fraction()


def dpsgd_gradients(chain, xb: torch.Tensor, yb: torch.Tensor, clip: torch.Tensor,
                    sigma: torch.Tensor, generators, valid: torch.Tensor | None = None,
                    expected_rows: float | None = None, per_layer: bool = False) -> np.ndarray:
    """Set every parameter's ``.grad`` to DP-SGD's (sum over rows of clip(g_z, C) + N(0, sigma^2 C^2)) / B.

    ``chain`` is the model's per-sample chain (``PackedModel.per_sample_chain``). g_z is row
    z's gradient of its own cross-entropy (all K configs at once; ``clip`` and ``sigma`` per
    config). The rows are shared, ``xb`` (B, d) and ``yb`` (B,), or each config's own,
    (K, M, d) and (K, M) with ``valid`` (K, M) marking the real ones (padding adds nothing);
    B is ``expected_rows`` when given (a Poisson sample's expected size), else the number of
    rows. ``per_layer``: each layer clipped to C / sqrt(layers). Returns (rows clipped, rows)
    per config, shape (2, K).
    """
    k = clip.shape[0]
    b = float(expected_rows) if expected_rows is not None else yb.shape[-1]
    logits, trace = chain.forward_traced(xb)
    # each row's loss gradient w.r.t. its logits, pulled back through the chain per row
    unit = cross_entropy_grad(logits, yb).to(logits.dtype)
    for p in chain.parameters():
        p.grad = None
    weight = torch.full((k, yb.shape[-1]), -1.0 / b, device=xb.device, dtype=clip.dtype)  # the step adds -weight * g
    if valid is not None:
        weight = weight * valid.to(clip.dtype)
    return chain.add_clipped(trace, unit, None, weight, clip, sigma * clip / b, generators, per_layer=per_layer)


def cross_entropy_grad(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The gradient of each row's cross-entropy w.r.t. its logits, (K, B, C): softmax - onehot."""
    z = logits if logits.dtype == torch.float64 else logits.float()
    labels = y if y.dim() == 2 else y.expand(z.shape[:2])
    return torch.softmax(z, dim=-1) - torch.nn.functional.one_hot(labels, z.shape[-1]).to(z.dtype)
