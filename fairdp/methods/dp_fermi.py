"""DP-FERMI (Lowy, Gupta & Razaviyayn, ICLR 2023): noisy stochastic gradient descent-ascent on the ERMI-regularised loss.

The objective is FERMI's (Lowy et al. 2022), min over theta, max over W of
(1/n) sum_i [ loss(theta; x_i, y_i) + lambda psi_i(theta, W) ], with psi_i the per-row
stochastic estimator of the Exponential Renyi Mutual Information between the prediction
yhat and the sensitive attribute s:

    psi_i(theta, W) = -Tr(W E[yhat yhat^T | x_i] W^T) + 2 Tr(W E[yhat s_i^T | x_i, s_i] P_s^(-1/2)) - 1

with yhat the one-hot prediction drawn from F(x_i) = softmax(logits), so E[yhat yhat^T | x_i]
= diag(F(x_i)) and E[yhat s_i^T | x_i, s_i] = F(x_i) e_{s_i}^T; W is k x m (k groups, m
classes), P_s = diag(P(s = r)). Written out (``ermi_terms``):
psi_i = sum_j F_j a_j - 1 with a_j = -sum_r W_rj^2 + 2 W_{s_i j} / sqrt(P(s = s_i)). Its
maximum over W, reached at W_rj = P(yhat = j, s = r) / (sqrt(P(s = r)) P(yhat = j)), is
ERMI = sum_{j,r} P(yhat = j, s = r)^2 / (P(yhat = j) P(s = r)) - 1 (tested). Any number of
groups and classes. ``fairness_notion`` "dp" (demographic parity: yhat against s) or "eo"
(equalized odds: each label y has its own W_y and P_{s|y}, and row i's psi uses its label's,
so the objective is FERMI's conditional ERMI, E_y[ERMI(yhat; s | y)]).

Each step (Algorithm 1, two-timescale DP-SGDA) draws its rows as DP-SGD does: a Poisson
sample at rate q = B / n from the config's own stream, not the loop's minibatch, the sums
divided by the expected size B. From the same (theta_t, W_t):

* theta: every row's gradient of loss + lambda psi_i, clipped to ``clip_primal`` (C_theta)
  by the engine's per-sample clipping (``chain.add_clipped``; the row's gradient w.r.t. its
  logits is written out in ``ermi_logit_grad``), summed, plus N(0, (sigma C_theta)^2) per
  parameter; theta -= lr * (that) / B (plain SGD, the study's ``lr``);
* W (ascent): every row's gradient of psi_i w.r.t. its W, clipped to ``clip_dual`` (C_W),
  summed (each row into its label's W under eo), plus N(0, (sigma C_W)^2) per entry;
  W += ``lr_w`` * (that) / B, then W is projected onto the Frobenius ball of radius
  ``W_RADIUS`` (each label's W on its own under eo).

P_s enters every psi_i, so it must not be read from the data without noise (one record would
then move every row's gradient): before training each config releases the training rows'
group counts (eo: per label) once with N(0, sigma_count^2) noise, and P_s^(-1/2) is
computed from the released counts (each clamped at 1). Adding or removing one record moves
the theta sum by at most C_theta, the W sum by at most C_W (into one label's W) and one
count by 1: the run is ``fairdp.privacy.dp_fermi_event``, a Gaussian count release composed
with T = epochs * ceil(n / B) Poisson-sampled Gaussian steps of joint multiplier
(sigma_theta^-2 + sigma_W^-2)^(-1/2) = sigma / sqrt(2) (both blocks have multiplier sigma:
the paper's sigma_theta^2 / sigma_w^2 is the ratio of the two sensitivities). sigma and
sigma_count are calibrated to the target ``eps`` at delta 1e-5 by the study's accountant
(``calibrate_dp_fermi_sigmas``: 10% of eps to the count release alone, the rest to the
steps). The guarantee, "central, add/remove one record" (features, label and attribute),
is DP-SGD's kind, for the training split as fixed with n public, and its noise the same
floating-point Gaussian. What the paper leaves unstated, and where its code differs, is in
docs/methods.md ("DP-FERMI: settings the paper leaves unstated").
"""

from __future__ import annotations

import torch

from fairdp import _rng
from fairdp.methods._base import TARGET_EPS, HyperParam, RunInfo
from fairdp.methods._lagrangian import ClassifierSGDStep, TranMethod, gather_rows, poisson_sample
from fairdp.methods._registry import register_method
from fairdp.privacy import Guarantee, calibrate_dp_fermi_sigmas, dp_fermi_epsilon, dp_fermi_event
from fairdp.privacy._shared import PFLD_DELTA

NOTIONS = ("dp", "eo")
# the authors' code projects W onto the Frobenius ball of radius C = 5 (args.py)
W_RADIUS = 5.0
# the W step size: the authors' code has lr_W = 2 lr_theta (0.01 against 0.005); fairdp's theta
# step is the Tran family's 0.1, so 0.2 keeps the ratio
W_STEP = 0.2

LAM = HyperParam("lam", low=0.0, doc="lambda, the weight of the ERMI regulariser psi")
NOTION = HyperParam("fairness_notion", choices=NOTIONS, doc="dp or eo (ERMI of yhat and s, or of yhat and s "
                    "given y)")
CLIP_PRIMAL = HyperParam("clip_primal", low=0.0, low_open=True,
                         doc="C_theta, per-row clip of the theta step's gradient of loss + lambda psi")
CLIP_DUAL = HyperParam("clip_dual", low=0.0, low_open=True, doc="C_W, per-row clip of the W step's gradient of psi")
LR_W = HyperParam("lr_w", low=0.0, low_open=True, default=W_STEP, doc="eta_W, the W (ascent) step size (default 0.2: "
                  "twice the theta step's 0.1, as the authors' code's lr_W = 2 lr_theta)")


@register_method
class DPFERMI(TranMethod):
    name = "dp_fermi"
    clips_per_sample = True
    poisson_sampled = True
    privacy_scope = "central"
    hyperparams = (LAM, NOTION, TARGET_EPS, CLIP_PRIMAL, CLIP_DUAL, LR_W)

    def paper_grid(self, dataset):
        # the paper's eps (its code's epsilon_list, np.inf left out: a target eps is finite) and
        # lambda (lambd_list); its L_theta = C = 5 (lipschitz_theta, the W radius) as the clips; lr_w,
        # not the paper's, at its default (as pfld's grid names private_group)
        return {"lam": [0.0, 0.25, 0.5, 1.0, 1.5, 2.0], "fairness_notion": list(NOTIONS),
                "eps": [0.5, 1.0, 3.0, 9.0], "clip_primal": [5.0], "clip_dual": [5.0],
                "lr_w": [LR_W.default]}

    def noise_multipliers(self, config: dict, run: RunInfo) -> tuple[float, float, float]:
        """(sigma_theta, sigma_w, sigma_count) calibrated so that the run is (eps, 1e-5)-DP by the
        run's accountant (RDP or PLD)."""
        return calibrate_dp_fermi_sigmas(config["eps"], PFLD_DELTA, run.batch_size, run.n, run.epochs,
                                         accountant=run.accountant)

    def privacy(self, config, run):
        # add/remove one record of the training split as fixed, n public (q = B / n)
        return Guarantee(dp_fermi_epsilon(*self.noise_multipliers(config, run), run.batch_size, run.n, run.epochs,
                                          PFLD_DELTA, run.accountant), PFLD_DELTA)

    def dp_event(self, config, run):
        return dp_fermi_event(*self.noise_multipliers(config, run), run.batch_size, run.n, run.epochs)

    def make_step(self, ctx):
        run = RunInfo.of(ctx.data, ctx.settings, ctx.arch.representation_dim)
        return DPFERMIStep(ctx, [self.noise_multipliers(c, run) for c in ctx.configs])


def ermi_terms(probs: torch.Tensor, s: torch.Tensor, w_rows: torch.Tensor,
               p_inv_sqrt_rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(psi_i, a_i) of each row: psi_i = sum_j F_j a_j - 1, a_j = d psi_i / d F_j =
    -sum_r W_rj^2 + 2 W_{s_i j} P(s = s_i)^(-1/2). ``probs`` (..., m) are F(x_i), ``s`` (...)
    the rows' groups, ``w_rows`` (..., k, m) each row's W, ``p_inv_sqrt_rows`` (...) each row's
    P(s = s_i)^(-1/2). Elementwise only (no matmul: nothing for autocast to round)."""
    w_own = torch.gather(w_rows, -2, s[..., None, None].expand(*s.shape, 1, w_rows.shape[-1])).squeeze(-2)
    a = -(w_rows * w_rows).sum(-2) + 2 * w_own * p_inv_sqrt_rows[..., None]
    return (probs * a).sum(-1) - 1, a


def ermi_logit_grad(probs: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """d psi_i / d logits: through the softmax, F_l (a_l - sum_j a_j F_j)."""
    return probs * (a - (probs * a).sum(-1, keepdim=True))


def ermi_w_grad(probs: torch.Tensor, s: torch.Tensor, w_rows: torch.Tensor, p_inv_sqrt_rows: torch.Tensor,
                n_groups: int) -> torch.Tensor:
    """d psi_i / d W (..., k, m): -2 W_rj F_j + 2 [r = s_i] P(s = s_i)^(-1/2) F_j."""
    own = torch.nn.functional.one_hot(s, n_groups).to(probs.dtype) * p_inv_sqrt_rows[..., None]
    return 2 * (own[..., :, None] - w_rows) * probs[..., None, :]


def project_frobenius(w: torch.Tensor, radius: float) -> torch.Tensor:
    """Each (k, m) matrix of ``w`` (..., k, m) scaled onto the Frobenius ball of ``radius``
    where it lies outside it (the Euclidean projection onto the ball)."""
    norm = w.flatten(-2).norm(dim=-1)
    return w * torch.clamp(radius / norm.clamp_min(1e-300), max=1.0)[..., None, None]


class DPFERMIStep(ClassifierSGDStep):
    """DP-FERMI for a chunk of configs (the module docstring has the mechanism). State per
    config: ``w`` (K, L, k, m), one W per label slot (L = n_classes; a dp config uses slot 0
    only), ``p_inv_sqrt`` (K, L, k) P_s^(-1/2) (eo: P_{s|y}^(-1/2) per slot) from the released
    counts ``released_counts`` (K, L, k; dp: the group counts, in slot 0 only)."""

    per_config_attributes = ("lam", "clip_theta", "clip_w", "lr_w", "sigma_theta", "sigma_w", "is_eo",
                             "w", "p_inv_sqrt", "released_counts", "w_clip_counts")

    def __init__(self, ctx, sigmas: list[tuple[float, float, float]]):
        super().__init__(ctx)
        data, device, dtype = ctx.data, ctx.device, ctx.dtype
        if len(sigmas) != ctx.k:
            raise ValueError("DP-FERMI needs one (sigma_theta, sigma_w, sigma_count) per config")
        self.lam = ctx.per_config("lam")
        self.clip_theta = ctx.per_config("clip_primal")
        self.clip_w = ctx.per_config("clip_dual")
        self.lr_w = torch.tensor([float(c.get("lr_w", W_STEP)) for c in ctx.configs], device=device, dtype=dtype)
        self.sigma_theta = torch.tensor([s[0] for s in sigmas], device=device, dtype=dtype)
        self.sigma_w = torch.tensor([s[1] for s in sigmas], device=device, dtype=dtype)
        self.is_eo = torch.tensor([c["fairness_notion"] == "eo" for c in ctx.configs], device=device)
        self.n_groups, self.n_classes = data.n_groups, data.n_classes
        self.w = torch.zeros(ctx.k, self.n_classes, self.n_groups, self.n_classes, device=device, dtype=dtype)
        self.w_clip_counts = torch.zeros(ctx.k, 2, device=device, dtype=torch.float64)
        train = ctx.split("train")
        self.n = len(train.y)
        self.q = min(ctx.settings.batch_size, self.n) / self.n
        sigma_count = torch.tensor([s[2] for s in sigmas], device=device, dtype=dtype)
        self.released_counts, self.p_inv_sqrt = self._release_counts(train, sigma_count)

    def _release_counts(self, train, sigma_count: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each config's group counts (eo: per label) plus N(0, sigma_count^2) noise, and the
        P_s^(-1/2) they give: the one release of the attribute's distribution."""
        k, groups, classes = self.ctx.k, self.n_groups, self.n_classes
        table = torch.zeros(classes, groups, device=self.w.device, dtype=self.w.dtype)
        table.index_put_((train.y, train.s), torch.ones_like(train.y, dtype=self.w.dtype), accumulate=True)
        noise = _rng.normal((classes * groups,), self.ctx.generators("noise"), device=self.w.device,
                            dtype=self.w.dtype).view(k, classes, groups) * sigma_count.view(-1, 1, 1)
        eo = self.is_eo.view(-1, 1, 1)
        # dp releases the group counts (the table's column sums) with one draw each, in slot 0
        marginal = torch.zeros_like(noise)
        marginal[:, 0] = table.sum(0) + noise[:, 0]
        released = torch.where(eo, table + noise, marginal)
        counts = released.clamp_min(1.0)
        p = counts / counts.sum(-1, keepdim=True)
        p_inv_sqrt = torch.where(eo, p.rsqrt(), p[:, :1].rsqrt().expand_as(p))
        return released, p_inv_sqrt

    def _slots(self, y: torch.Tensor) -> torch.Tensor:
        """(K, M) each row's W slot: its label under eo, 0 under dp."""
        return torch.where(self.is_eo.unsqueeze(1), y, torch.zeros_like(y))

    def update(self, batch, optimizer):
        index, valid = poisson_sample(self.n, self.q, self.ctx.generators("sample"), self.w.device,
                                      sampler=self.ctx.settings.poisson_sampler)
        train = self.ctx.split("train")
        x, y, s = gather_rows(train.X, index), gather_rows(train.y, index), gather_rows(train.s, index)
        chain = self.model.per_sample_chain()
        logits, trace = chain.forward_traced(x)
        dtype = self.w.dtype
        probs = torch.softmax(logits.to(torch.float64 if dtype == torch.float64 else torch.float32), dim=-1).to(dtype)
        slots = self._slots(y)
        rows = torch.arange(self.ctx.k, device=slots.device).unsqueeze(1)
        w_rows = self.w[rows, slots]                                   # (K, M, k, m): each row's W_t
        p_rows = self.p_inv_sqrt[rows, slots, s]                       # (K, M)
        _, a = ermi_terms(probs, s, w_rows, p_rows)
        onehot = torch.nn.functional.one_hot(y, self.n_classes).to(dtype)
        unit = probs - onehot + self.lam.view(-1, 1, 1) * ermi_logit_grad(probs, a)
        expected = self.q * self.n
        weight = -valid.to(dtype) / expected  # the step adds -weight * g
        optimizer.zero_grad(set_to_none=True)
        self.clip_counts += chain.add_clipped(trace, unit.to(logits.dtype), None, weight, self.clip_theta,
                                              self.sigma_theta * self.clip_theta / expected,
                                              self.ctx.generators("noise"),
                                              per_layer=self.ctx.settings.clipping == "per_layer")
        self._ascend(probs, s, slots, w_rows, p_rows, valid, expected)
        optimizer.step()

    @torch.no_grad()
    def _ascend(self, probs, s, slots, w_rows, p_rows, valid, expected: float) -> None:
        """The W step from W_t: clipped per-row gradients of psi summed into their slots, plus
        N(0, (sigma_w C_W)^2) on every entry of the config's slots, over B; then the projection."""
        grad = ermi_w_grad(probs, s, w_rows, p_rows, self.n_groups)   # (K, M, k, m)
        norms = grad.flatten(2).norm(dim=2)
        live = valid & torch.isfinite(norms)  # a non-finite row adds nothing, as in add_clipped
        grad = torch.where(live[..., None, None], grad, 0)
        factor = torch.where(live, torch.clamp(self.clip_w.unsqueeze(1) / norms.clamp_min(1e-12), max=1.0), 0)
        into = torch.nn.functional.one_hot(slots, self.n_classes).to(grad.dtype) * factor.unsqueeze(2)  # (K, M, L)
        sums = (into[..., None, None] * grad.unsqueeze(2)).sum(1)     # (K, L, k, m), no matmul
        # the config's slots: every label's under eo, slot 0 under dp (its others are never read)
        used = torch.ones_like(self.w[:, :, 0, 0])
        used[:, 1:] = self.is_eo.unsqueeze(1).to(used.dtype)
        noise = _rng.normal((self.w[0].numel(),), self.ctx.generators("noise"), device=self.w.device,
                            dtype=self.w.dtype).view_as(self.w)
        noise = noise * (self.sigma_w * self.clip_w).view(-1, 1, 1, 1) * used[..., None, None]
        step = self.lr_w.view(-1, 1, 1, 1) * (sums + noise) / expected
        self.w = project_frobenius(self.w + step, W_RADIUS)
        self.w_clip_counts += torch.stack([((norms > self.clip_w.unsqueeze(1)) & live).sum(1),
                                           live.sum(1)], dim=1).to(torch.float64)

    def diagnostics(self):
        w_counts = self.w_clip_counts.cpu().numpy()
        return {**self.clipped_fraction(), "w_clipped_fraction": w_counts[:, 0] / w_counts[:, 1].clip(min=1)}
