"""Lagrangian-dual fairness (Tran, Fioretto & Van Hentenryck 2021): F-LD and its private PF-LD.

Fairness notions as population-vs-group constraints (their eq. 1),
E_{z in D_P_i}[h(z)] = E_{z in D_G_i}[h(z)], over soft predictions p(x) = P(y_hat = 1 | x):

- ``dp`` (demographic parity): h = p; for each group a: P_a = all rows, G_a = rows of group a.
- ``eo`` (equalized odds): h = p; for each label y and group a: P = rows with label y,
  G = rows with label y in group a (2m constraints).
- ``ap`` (accuracy parity): h = the per-row cross-entropy loss; P_a = all rows, G_a = group a.

Binary labels only, as in the paper: the constraints are written for y in {0, 1}, so a
dataset with more classes is rejected with a clear error.

F-LD (Algorithm 1, ``LagrangianStep``, any number of groups): minibatch primal steps on
J + lambda^T |mu(B_P) - mu(B_G)|, i.e. lambda_i sign_i (grad mu(B_P_i) - grad mu(B_G_i)) with the
sign of the batch violation, then a dual ascent step lambda += s |mu(D_P) - mu(D_G)| on the
whole training set after each epoch, multipliers kept in [0, lambda_max].

PF-LD (``PrivateLagrangianStep``) protects the sensitive attribute A under Definition 1's
adjacency: one record's attribute changes, its features and label (public) do not. The
paper's eq. 8 and Theorems 1-2 leave three things that depend on A unprotected, each of
which changes the released update by more than the sensitivity the accountant is told:

1. the sign of each batch violation multiplies the unclipped population gradient, and one
   record can flip it (an unbounded change);
2. the group means divide by the group sizes |B_G_i|, and Delta_p itself uses
   min |B_G_i|: both change with one record's attribute (a data-dependent noise scale);
3. under Definition 1 a changed attribute moves the record out of one group and into
   another: two group means change at once, not one (Theorem 1 bounds one).

fairdp's PF-LD therefore computes the same Lagrangian gradient from released quantities
only, for a binary attribute (groups 0 and 1; refused otherwise, see ``check_dataset``). Each
config names the private group g (``private_group``, 0 or 1, default 1), a public setting of
the study, never read from the data; o = 1 - g is the other group:

* Dual step (once per epoch but the last; eq. 10): per population set P (all rows for dp and
  ap, each label's rows for eo) the clipped sum S_g = sum over P of group g's clip(h, C_d) is
  released with N(0, (sigma_d H)^2) noise, H = min(C_d, 1) for dp and eo (h is a probability,
  so clipping at C_d > 1 would only add noise) and C_d for ap; the first dual step also
  releases each P's group-g count with N(0, sigma_d^2). One record's attribute moves one S_g
  by at most H and one count by 1: Gaussian mechanisms of multiplier sigma_d. Group o's
  sum and count are P's (public) minus group g's, so each signed violation
  v_a = mu(D_P) - S_a / n_a is post-processing; lambda_a += s |v_a| and the sign of v_a are
  what the primal steps use (point 1).
* Primal step: with w_a = lambda_a sign_a / n_a and P the disjoint union of G_0 and G_1, the
  group term -sum_a w_a sum_{z in G_a} clip(grad h(z), C_p) equals, since
  sum_{G_o} = sum_P - sum_{G_g},
      -w_o sum_{z in P} clip(grad h(z))  -  (w_g - w_o) sum_{z in G_g} clip(grad h(z)):
  a public part over all of P (weight rho = w_o), estimated on the minibatch (n / |B| times
  its sum), and a private part over group g, -kappa sum_{z in G_g} clip(grad h(z)) with
  kappa = (w_g - w_o) / q (for g = 1: rho = lambda_0 sign_0 / n_0 and
  kappa = (lambda_1 sign_1 / n_1 - lambda_0 sign_0 / n_0) / q; g = 0 swaps the groups' roles),
  summed over a Poisson sample of group g's training rows at rate q = |B| / n, drawn afresh
  for every step from the config's own stream and independently of the minibatch (so the
  public terms, which depend on which rows the minibatch holds, reveal nothing about who was
  sampled). The normalisers n_a are the released counts (point 2). A record contributes
  kappa clip(grad h) to the private part if its attribute is g and nothing otherwise: changing
  it is adding or removing one clipped vector of norm <= Delta_p = C_p max_P |kappa| (point 3),
  computed from released values only, for either g. Gaussian noise N(0, (sigma_p Delta_p)^2) on every parameter makes the
  step the Poisson-sampled Gaussian mechanism of eq. 11 (Lemma 1), with no assumption on how
  the minibatches are drawn; the noise is floating-point Gaussian (Box-Muller in float64), so
  the analysis is that of the ideal mechanism, without a floating-point proof.

Loss and population terms are the paper's: computed on the minibatch, unclipped. With no
noise, clipping bounds nobody reaches and one minibatch per epoch (|B| = n, q = 1), PF-LD's
update is F-LD's (tested). Per-sample gradient norms and clipped sums come from per-layer
inputs and errors (ghost norms, ``fairdp.engine.add_clipped_gradients``), the errors
backpropagated by hand (``fairdp.engine.backprop_errors``) once for the minibatch and the
private sample together: with two logits every row's gradient, of its loss or of h, is a
multiple of one direction (``binary_slopes``; see ``PrivateLagrangianStep.update``). All K configs of a
pack train together: stacked parameters, per-config multipliers, clipping bounds, noise
scales and Poisson samples, each from the config's own streams.

Either private group gives the same guarantee: the adjacency, the mechanisms (one Poisson
sampled Gaussian per primal step of multiplier sigma_p on Delta_p, Gaussian dual releases of
multiplier sigma_d), their sensitivities and so the accountant's events are the same, and g is
fixed before training from public knowledge. What g changes is the private sample's size,
q |G_g|, hence a step's cost: the smaller group is the cheaper choice. A g chosen from the
data (the smaller group as counted) would be a function of the attribute released outside
the accounting, so fairdp never chooses it.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from fairdp import _rng
from fairdp.engine import Architecture, ModelSpec, PackedModel
from fairdp.engine.contract import Batch, PackContext, PackStep
from fairdp.errors import InputError
from fairdp.methods._base import NeuralMethod

NOTIONS = ("dp", "eo", "ap")
LAMBDA_MAX = 1.0    # multipliers' cap (Algorithm 1, line 6); Delta_p grows with it
DUAL_STEP = 1.0     # dual ascent step size s
# Algorithm 1's primal step is plain gradient descent, theta -= alpha * grad (with Adam the
# PF-LD noise would dominate the second-moment estimate and stall the public loss's signal).
# Tran et al. give no alpha; 0.1 is fairdp's default for fld, pfld and dpsgd, and the PF-LD
# studies select it on validation from a grid (studies/pfld_adult.yaml says why).
PRIMAL_STEP = 0.1
# The paper's classifier: a network with two hidden layers (Tran et al., Experimental Analysis).
ARCHITECTURE = Architecture(encoder=(64, 64), classifier=(), adversary=(), dropout=0.0)


class TranMethod(NeuralMethod):
    """What F-LD, PF-LD and DP-SGD share as methods: Tran et al.'s two-hidden-layer network,
    trained by Algorithm 1's plain gradient steps at ``PRIMAL_STEP`` unless a study says."""

    optimizer = "sgd"
    default_lr = PRIMAL_STEP

    def default_architecture(self, dataset):
        return ARCHITECTURE

    def architecture_fields(self):
        return ("encoder", "classifier")  # ClassifierSGDStep: no adversary, no dropout

    def model_roles(self):
        return ("encoder", "classifier")  # one chain, clipped per sample (PackedModel.per_sample_chain)


class ClassifierSGDStep(PackStep):
    """Tran et al.'s setting, shared by F-LD, PF-LD and DP-SGD: the plain classifier (the
    packed model without privatiser or adversaries, no dropout) trained by Algorithm 1's
    plain SGD steps, and returned after the last epoch (the constraints' multipliers grow
    over the epochs, so selecting the most accurate epoch would undo them)."""

    selection = "last"

    def __init__(self, ctx: PackContext):
        super().__init__(ctx)
        data = ctx.data
        self.model = PackedModel(ModelSpec(), ctx.arch, data.n_features, data.n_classes, data.n_groups,
                                 ctx.generators("init"), device=ctx.device, dtype=ctx.dtype,
                                 packing=ctx.settings.packing)
        self.clip_counts = np.zeros((2, ctx.k))  # rows clipped, rows clipped or not

    def optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=self.ctx.lr)

    def evaluate(self, x):
        z = self.model.represent(x, None, None)
        return z, self.model.classifier(z)

    def clipped_fraction(self) -> dict:
        return {"clipped_fraction": self.clip_counts[0] / np.maximum(self.clip_counts[1], 1)}

    def slice_state(self, index):
        self.clip_counts = self.clip_counts[:, index]  # configs on the second axis


def constraint_masks(notion: str, y: torch.Tensor, s: torch.Tensor, n_groups: int):
    """Membership of each row in each constraint's population and group sets: two (I, n) bool masks."""
    if notion == "eo":
        pop = torch.stack([y == label for label in (0, 1) for _ in range(n_groups)])
        grp = torch.stack([(y == label) & (s == a) for label in (0, 1) for a in range(n_groups)])
    else:
        pop = torch.ones(n_groups, len(y), dtype=torch.bool, device=y.device)
        grp = torch.stack([s == a for a in range(n_groups)])
    return pop, grp


def _h(notion: str, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """h(z) per config and row: P(y_hat = 1) for dp/eo, the row's cross-entropy for ap."""
    if notion == "ap":
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), y.repeat(logits.shape[0]), reduction="none"
        ).view(logits.shape[0], -1)
    return torch.softmax(logits, dim=-1)[..., 1]


def _means(h: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """mu per config and constraint: h (K, n), masks (I, n) -> (K, I); empty sets give 0."""
    m = masks.to(h.dtype)
    return (h @ m.T) / m.sum(dim=1).clamp_min(1)


def h_all(logits: torch.Tensor, y: torch.Tensor, is_ap: torch.Tensor) -> torch.Tensor:
    """h(z) of each config's notion for every row (K, B): the row's loss for ap, P(y_hat = 1)
    otherwise. ``y`` holds the rows' labels, shared (B,) or per config (K, B)."""
    k = logits.shape[0]
    labels = y.reshape(-1) if y.dim() == 2 else y.repeat(k)
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels, reduction="none")
    return torch.where(is_ap.unsqueeze(1), ce.view(k, -1), torch.softmax(logits, dim=-1)[..., 1])


def binary_slopes(logits: torch.Tensor, y: torch.Tensor, is_ap: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's gradient of its cross-entropy and of h w.r.t. its two logits as multiples of
    the direction (-1, +1), (K, B) each in fp32 (or the run's float64). Two-class softmax
    depends on z_1 - z_0 only, so every such gradient lies along it: d CE / dz = (p_1 - y)
    (-1, +1), d p_1 / dz = p_1 (1 - p_1) (-1, +1); h is the cross-entropy for ap, p_1 else."""
    z = logits if logits.dtype == torch.float64 else logits.float()
    p1 = torch.softmax(z, dim=-1)[..., 1]
    labels = y if y.dim() == 2 else y.expand(z.shape[:2])
    slope_ce = p1 - labels.to(z.dtype)
    return slope_ce, torch.where(is_ap.view(-1, 1), slope_ce, p1 * (1 - p1))


def poisson_sample(n: int, q: float, generators, device, among: torch.Tensor | None = None, sampler: str = "gaps"):
    """(index (K, M), valid (K, M)): each config's Poisson sample of the n training rows at rate
    q (of those ``among`` marks, (1, n) bool, if given), row indices in row order, padded to the
    longest with row 0 (``valid`` False). The rate is exact, never above the q the accountant
    charges for, whichever ``sampler`` draws it (``_rng.POISSON_SAMPLERS``): "gaps", the gaps between sampled
    rows (``_rng.gap_sample``, O(qn) words a step), or "coins", a coin per row (``_rng.coins``,
    n bytes a step; fairdp's sampler before "gaps"). The two give different samples of the same
    law. Every row is drawn for, whether ``among`` holds it or not, so what is drawn does not
    depend on ``among``."""
    if sampler not in _rng.POISSON_SAMPLERS:
        raise ValueError(f"poisson_sample: sampler must be one of {', '.join(_rng.POISSON_SAMPLERS)}, got {sampler!r}")
    if sampler == "gaps":
        picked = _rng.gap_sample(n, q, generators)
        if among is not None:
            marked = among.reshape(-1).cpu().numpy()
            picked = [rows[marked[rows]] for rows in picked]
        m = max(max(len(rows) for rows in picked), 1)
        index = np.zeros((len(picked), m), dtype=np.int64)
        for k, rows in enumerate(picked):
            index[k, :len(rows)] = rows
        sizes = torch.tensor([len(rows) for rows in picked])
        valid = torch.arange(m).unsqueeze(0) < sizes.unsqueeze(1)
        return torch.from_numpy(index).to(device), valid.to(device)
    keep = _rng.coins((n,), q, generators, device=device)
    if among is not None:
        keep = keep & among
    # each config's kept rows in row order, then padding: nonzero lists them config by config,
    # and a row's place is its rank among its config's
    config, row = keep.nonzero(as_tuple=True)
    counts = torch.bincount(config, minlength=len(keep))
    m = max(int(counts.max()), 1)
    first = torch.cumsum(counts, 0) - counts
    index = torch.zeros(len(counts), m, dtype=torch.long, device=keep.device)
    index[config, torch.arange(len(row), device=keep.device) - first[config]] = row
    valid = torch.arange(m, device=keep.device).unsqueeze(0) < counts.unsqueeze(1)
    return index, valid


def gather_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table[index]`` for an index (K, M) of rows: one ``index_select`` of the flat index (on
    a CPU about twice as fast as advanced indexing at K = 8, M = 2,048; the same values)."""
    return table.index_select(0, index.reshape(-1)).view(*index.shape, *table.shape[1:])


class LagrangianStep(ClassifierSGDStep):
    """F-LD (Algorithm 1) for a chunk of configs; each config has its ``fairness_notion``."""

    def __init__(self, ctx: PackContext):
        super().__init__(ctx)
        data, device, dtype = ctx.data, ctx.device, ctx.dtype
        self.n_groups = data.n_groups
        notions = [c["fairness_notion"] for c in ctx.configs]
        self.by_notion = {nt: [i for i, c in enumerate(notions) if c == nt] for nt in sorted(set(notions))}
        self.lam = {nt: torch.zeros(len(idx), 2 * data.n_groups if nt == "eo" else data.n_groups,
                                    device=device, dtype=dtype) for nt, idx in self.by_notion.items()}

    def slice_state(self, index):
        super().slice_state(index)
        old_notion = {i: nt for nt, idx in self.by_notion.items() for i in idx}
        # the multipliers are held per notion, in pack order within each: keep the survivors'
        rows = {nt: [idx.index(i) for i in index if old_notion[i] == nt] for nt, idx in self.by_notion.items()}
        self.lam = {nt: self.lam[nt][rows[nt]] for nt in rows if rows[nt]}
        notions = [c["fairness_notion"] for c in self.ctx.configs]
        self.by_notion = {nt: [i for i, c in enumerate(notions) if c == nt] for nt in sorted(set(notions))}

    def update(self, batch: Batch, optimizer) -> None:
        k = self.ctx.k
        xb, yb, sb = batch.x, batch.y, batch.s
        logits = self.model(xb)
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, 2), yb.repeat(k), reduction="none").view(k, -1).mean(1)
        for nt, cfg in self.by_notion.items():
            pop, grp = constraint_masks(nt, yb, sb, self.n_groups)
            h = _h(nt, logits[cfg], yb)
            mu_p, mu_g = _means(h, pop), _means(h, grp)
            sign = torch.sign(mu_p - mu_g).detach()
            if int(grp.sum(dim=1).min()) < 2:
                continue  # a group (nearly) absent from the batch: no estimate of its mean
            loss[cfg] = loss[cfg] + (self.lam[nt] * sign * (mu_p - mu_g)).sum(1)
        optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()
        optimizer.step()

    @torch.no_grad()
    def end_epoch(self, epoch: int) -> None:
        """Dual ascent on the whole training set (Algorithm 1 lines 5-6)."""
        train = self.ctx.split("train")
        logits = self.model(train.X)
        for nt, cfg in self.by_notion.items():
            pop, grp = constraint_masks(nt, train.y, train.s, self.n_groups)
            violation = (_means(_h(nt, logits[cfg], train.y), pop) - _means(_h(nt, logits[cfg], train.y), grp)).abs()
            self.lam[nt] = (self.lam[nt] + DUAL_STEP * violation).clamp(0.0, LAMBDA_MAX)


def check_binary_attribute(data, method: str, path: str | None = None) -> None:
    """PF-LD's attribute-level guarantee is proven for two groups (see the module docstring)."""
    if data.n_groups != 2:
        raise InputError(f"{path or 'methods.' + method}: '{method}' protects a binary sensitive attribute "
                         f"(its privacy proof splits the group term into a public part and one group's, "
                         f"private_group's); "
                         f"'{data.name}' has {data.n_groups} groups: choose a binary attribute, or use "
                         f"a private method that takes more groups: dpsgd, dpsgd_global_adapt, dpsgd_f, dp_fermi "
                         f"or private_reductions")


class PrivateLagrangianStep(ClassifierSGDStep):
    """PF-LD for a chunk of configs (see the module docstring for the mechanism and its proof).

    Each config has ``fairness_notion``, ``clip_primal`` (C_p), ``clip_dual`` (C_d) and
    ``private_group`` (g, 0 or 1; ``PRIVATE_GROUP`` where it names none); ``sigmas`` holds each
    config's noise multipliers (sigma_p, sigma_d). State per config, over two population slots
    (eo: label 0 and label 1; dp and ap: slot 0 is every row, slot 1 is empty) and two groups
    (indexed by group, 0 and 1, whichever is private): the multipliers ``lam`` and signs
    ``sign`` (K, 2, 2), the released counts of the private group ``count1`` (K, 2; group 1's at
    the default g = 1, whence the name), NaN until the first dual step. ``released`` is the last
    dual step's output (the private group's noisy sums, then counts, per slot: (K, 4)).
    ``private_rows`` (K, n) marks each config's group-g training rows: read only by the
    private part (its sample and its dual release).
    """

    PRIVATE_GROUP = 1  # the private group of a config that names none: fairdp's PF-LD as first written
    per_config_attributes = ("is_ap", "is_eo", "c_p", "h_bound", "sig_p", "sig_d", "lam", "sign", "count1",
                             "released", "population_sizes", "private_group", "private_rows")

    def __init__(self, ctx: PackContext, sigmas: list[tuple[float, float]]):
        super().__init__(ctx)
        data, device, dtype = ctx.data, ctx.device, ctx.dtype
        check_binary_attribute(data, "pfld")
        if len(sigmas) != ctx.k:
            raise ValueError("PF-LD needs one (sigma_primal, sigma_dual) per config")
        notions = [c["fairness_notion"] for c in ctx.configs]
        self.is_ap = torch.tensor([nt == "ap" for nt in notions], device=device)
        self.is_eo = torch.tensor([nt == "eo" for nt in notions], device=device)
        self.c_p = ctx.per_config("clip_primal")
        # h is a probability for dp and eo: a clip above 1 clips nothing, so the bound is 1
        self.h_bound = torch.where(self.is_ap, ctx.per_config("clip_dual"), ctx.per_config("clip_dual").clamp(max=1.0))
        self.sig_p = torch.tensor([sp for sp, _ in sigmas], device=device, dtype=dtype)
        self.sig_d = torch.tensor([sd for _, sd in sigmas], device=device, dtype=dtype)
        self.lam = torch.zeros(ctx.k, 2, 2, device=device, dtype=dtype)
        self.sign = torch.zeros(ctx.k, 2, 2, device=device, dtype=dtype)
        self.count1 = torch.full((ctx.k, 2), math.nan, device=device, dtype=dtype)
        self.released = torch.zeros(ctx.k, 4, device=device, dtype=dtype)  # (S_g per slot, count per slot)
        groups = [c.get("private_group", self.PRIVATE_GROUP) for c in ctx.configs]
        if any(isinstance(g, bool) or g not in (0, 1) for g in groups):
            raise ValueError(f"PF-LD's private_group is 0 or 1, got {groups}")
        self.private_group = torch.tensor([int(g) for g in groups], device=device)
        train = ctx.split("train")
        self.n = len(train.y)
        self.q = min(ctx.settings.batch_size, self.n) / self.n
        # read only by the private part (its sample and its dual release)
        self.private_rows = train.s.unsqueeze(0) == self.private_group.unsqueeze(1)
        self.population_sizes = self._count_population()

    def _slots(self, y: torch.Tensor) -> torch.Tensor:
        """(K, B) population slot of each row for each config (y is (B,) or (K, B))."""
        y = y if y.dim() == 2 else y.expand(self.ctx.k, -1)
        return torch.where(self.is_eo.unsqueeze(1), y, torch.zeros_like(y))

    def _count_population(self) -> torch.Tensor:
        """(K, 2) rows of each population slot in the training set (public: labels only)."""
        y = self.ctx.split("train").y
        n1 = float((y == 1).sum())
        eo = torch.tensor([self.n - n1, n1], device=self.lam.device, dtype=self.lam.dtype)
        other = torch.tensor([float(self.n), 0.0], device=self.lam.device, dtype=self.lam.dtype)
        return torch.where(self.is_eo.unsqueeze(1), eo, other)

    def _by_group(self, private: torch.Tensor, other: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(group 0's, group 1's) of per-config values given as the private group's and the
        other's (K, ...): a swap where g = 0."""
        g1 = (self.private_group == 1).view(-1, *([1] * (private.dim() - 1)))
        return torch.where(g1, other, private), torch.where(g1, private, other)

    def _normalisers(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(n_0, n_1) per config and slot from the released counts of the private group (1
        where none yet); the other group's is the slot's size minus it."""
        sizes = self.population_sizes
        n_private = torch.nan_to_num(self.count1, nan=1.0)
        n_private = torch.minimum(n_private.clamp(min=1.0), (sizes - 1).clamp(min=1.0))
        return self._by_group(n_private, (sizes - n_private).clamp(min=1.0))

    def coefficients(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(rho, kappa), (K, 2) each: the public part's weight of a minibatch row of each slot
        (before the n / |B| estimate), w_o, and the private part's weight of a sampled row of
        the private group g, (w_g - w_o) / q, with w_a = lambda_a sign_a / n_a and o = 1 - g."""
        n0, n1 = self._normalisers()
        w0 = self.lam[..., 0] * self.sign[..., 0] / n0
        w1 = self.lam[..., 1] * self.sign[..., 1] / n1
        g1 = (self.private_group == 1).unsqueeze(1)
        w_private, w_other = torch.where(g1, w1, w0), torch.where(g1, w0, w1)
        return w_other, (w_private - w_other) / self.q

    def primal_sensitivity(self) -> torch.Tensor:
        """Delta_p per config: the largest norm one record's private contribution can have."""
        return self.c_p * self.coefficients()[1].abs().amax(dim=1)

    def poisson_sample(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Each config's Poisson sample of its private group's training rows at rate q
        (``poisson_sample``, whose ``among`` is one (1, n) mask for every config). A pack whose
        configs name different groups draws among all rows and keeps each config's own group's:
        the same sample, since every row is drawn for whether ``among`` holds it or not."""
        generators, device = self.ctx.generators("sample"), self.lam.device
        sampler = self.ctx.settings.poisson_sampler
        if bool((self.private_group == self.private_group[0]).all()):
            return poisson_sample(self.n, self.q, generators, device, among=self.private_rows[:1], sampler=sampler)
        index, valid = poisson_sample(self.n, self.q, generators, device, sampler=sampler)
        keep = valid & self.private_rows.gather(1, index)
        # each config's kept rows first, in row order (a stable sort), then padding with row 0
        order = torch.sort((~keep).to(torch.uint8), dim=1, stable=True).indices
        index, keep = index.gather(1, order), keep.gather(1, order)
        m = max(int(keep.sum(dim=1).max()), 1)
        return torch.where(keep[:, :m], index[:, :m], torch.zeros_like(index[:, :m])), keep[:, :m]

    def update(self, batch: Batch, optimizer) -> None:
        # One pass over the minibatch's B rows and the private sample's M rows together (the
        # costs at these sizes are per operation, not per row): their forward, one backward
        # (backprop_errors) of the logits' direction (-1, +1), along which every row's
        # gradient of its loss and of h lies (``binary_slopes``), the per-row norms, and one
        # matmul a layer for the loss's gradient plus every clipped contribution
        # (add_clipped_gradients' plain). The sum is the one the step releases.
        k, b, chain = self.ctx.k, len(batch.y), self.model.per_sample_chain()
        index, valid = self.poisson_sample()
        train = self.ctx.split("train")
        # the minibatch's attributes are never read; the sample's are, inside the mechanism
        x = torch.cat([batch.x.expand(k, *batch.x.shape), gather_rows(train.X, index)], dim=1)  # (K, B + M, d)
        y = torch.cat([batch.y.expand(k, -1), gather_rows(train.y, index)], dim=1)
        logits, trace = chain.forward_traced(x)
        slope_ce, slope_h = binary_slopes(logits, y, self.is_ap)
        onehot = torch.nn.functional.one_hot(self._slots(y), 2).to(slope_h.dtype)  # (K, B + M, 2)
        # the objective, on the minibatch: mean cross-entropy plus sum_a lambda_a sign_a mu(B_P)
        in_slot = onehot[:, :b].sum(dim=1).clamp(min=1.0)  # (K, 2) rows of each slot in the batch
        pop_weight = (onehot[:, :b] @ ((self.lam * self.sign).sum(dim=2) / in_slot).to(slope_h.dtype).unsqueeze(2))
        slope_loss = slope_ce[:, :b] / b + pop_weight.squeeze(2) * slope_h[:, :b]
        direction = torch.tensor([-1.0, 1.0], device=logits.device, dtype=logits.dtype)
        # the group term: the public part's weight on every minibatch row (n / |B| times the
        # minibatch's sum estimates P's), the private part's on the sample's group-g rows
        rho, kappa = self.coefficients()
        onehot = onehot.to(rho.dtype)
        weight = torch.cat([(onehot[:, :b] @ rho.unsqueeze(2)).squeeze(2) * (self.n / b),
                            (onehot[:, b:] @ kappa.unsqueeze(2)).squeeze(2) * valid.to(rho.dtype)], dim=1)
        noise_std = self.sig_p * self.primal_sensitivity()
        optimizer.zero_grad(set_to_none=True)
        # every row's gradient of h is slope_h times that of the logits' direction; the
        # minibatch's loss gradient (unclipped) is slope_loss times it
        self.clip_counts += chain.add_clipped(trace, direction.expand(*logits.shape).contiguous(), slope_h,
                                              weight, self.c_p, noise_std, self.ctx.generators("noise"),
                                              plain_scale=slope_loss,
                                              per_layer=self.ctx.settings.clipping == "per_layer")
        optimizer.step()

    @torch.no_grad()
    def end_epoch(self, epoch: int) -> None:
        """The private dual step (eq. 10), after every epoch but the last (whose multipliers
        no step would use): release each slot's clipped sum over the private group g (and, the
        first time, its count), then update the multipliers and signs from the released values."""
        if epoch + 1 >= self.ctx.settings.epochs:
            return
        train = self.ctx.split("train")
        h = h_all(self.model(train.X), train.y, self.is_ap)  # (K, n), >= 0
        h_clip = torch.minimum(h, self.h_bound.unsqueeze(1))
        slots = torch.nn.functional.one_hot(self._slots(train.y), 2).to(h.dtype)  # (K, n, 2)
        private = self.private_rows.to(h.dtype).unsqueeze(2)     # (K, n, 1): rows of group g
        sums_p = (h_clip.unsqueeze(2) * slots).sum(1)            # (K, 2) public: sum over P of clip(h)
        means_p = (h.unsqueeze(2) * slots).sum(1) / slots.sum(1).clamp(min=1.0)  # mu(D_P), unclipped
        sums_g = (h_clip.unsqueeze(2) * slots * private).sum(1)  # private
        noise = _rng.normal((4,), self.ctx.generators("noise"), device=h.device, dtype=h.dtype)
        released_sums = sums_g + noise[:, :2] * (self.sig_d * self.h_bound).unsqueeze(1)
        if torch.isnan(self.count1).all():  # the first dual step also releases the counts
            counts_g = (slots * private).sum(1)
            self.count1 = counts_g + noise[:, 2:] * self.sig_d.unsqueeze(1)
        self.released = torch.cat([released_sums, self.count1], dim=1)
        n0, n1 = self._normalisers()
        n_private, n_other = self._by_group(n0, n1)  # the swap is its own inverse
        # v_g from the released sum; v_o from P's public sum minus it (post-processing)
        violation = torch.stack(self._by_group(means_p - released_sums / n_private,
                                               means_p - (sums_p - released_sums) / n_other), dim=2)
        live = (self.population_sizes > 0).to(h.dtype).unsqueeze(2)  # slot 1 of dp and ap holds no rows
        self.lam = ((self.lam + DUAL_STEP * violation.abs()).clamp(0.0, LAMBDA_MAX)) * live
        self.sign = torch.sign(violation) * live

    def diagnostics(self) -> dict:
        return self.clipped_fraction()
