"""Train K configurations of one method at once and keep each config's best-validation epoch.

One Adam over the stacked parameters is exactly K independent Adams: Adam is elementwise
and the pack's loss is the sum of the configs' losses, so config k's gradient is the
gradient of its own loss. Within a seed every config sees the same minibatch order;
everything else random (initialisation, dropout masks, Laplace noise) comes from the
config's own streams (``fairdp.engine._seeds``), which is what makes a pack of K give each
config the result it would get alone.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fairdp import _rng
from fairdp.data import Dataset
from fairdp.engine._arch import Architecture, TrainSettings
from fairdp.engine._packed import PackedMLP, grad_reverse
from fairdp.engine._seeds import stream_seed
from fairdp.privacy import laplace_privatize, minmax_privatize

PRIVATIZERS = ("none", "laplace", "minmax")
SCHEDULES = ("ganin", "constant")
EVAL_CHUNK = 4096  # rows per evaluation step: bounds memory at K x 4096 x D


@dataclass(frozen=True)
class ModelSpec:
    """What distinguishes the representation-learning methods from one another."""

    privatizer: str = "none"     # priv layer after the encoder (FEDERATE eq. 3, or DPNR's min-max)
    adversaries: int = 0         # adversarial branches behind a gradient reversal layer
    schedule: str = "ganin"      # lambda_e = lam * (2 / (1 + exp(-gamma p)) - 1), or constant lam
    orthogonality: bool = False  # Han et al.'s difference loss between adversaries, weight lam_ort

    def __post_init__(self):
        if self.privatizer not in PRIVATIZERS:
            raise ValueError(f"privatizer must be one of {PRIVATIZERS}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}")


def resolve_device(device: str | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class PackedModel(nn.Module):
    """Encoder E -> priv -> classifier C, with adversaries A_i behind a gradient reversal layer."""

    def __init__(self, spec: ModelSpec, arch: Architecture, d_in: int, n_classes: int, n_groups: int,
                 init_generators: list[torch.Generator], *, device, dtype):
        super().__init__()
        self.spec = spec
        g, kw = init_generators, dict(device=device, dtype=dtype)
        d = arch.representation_dim
        self.encoder = PackedMLP(g, [d_in, *arch.encoder], dropout=arch.dropout, activate_last=True, **kw)
        self.classifier = PackedMLP(g, [d, *arch.classifier, n_classes], dropout=arch.dropout,
                                    activate_last=False, **kw)
        self.adversaries = nn.ModuleList(
            PackedMLP(g, [d, *arch.adversary, n_groups], dropout=arch.dropout, activate_last=False, **kw)
            for _ in range(spec.adversaries)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (K, B, C) without dropout or noise: the path per-sample gradients go through."""
        return self.classifier(self.represent(x, None, None))

    def represent(self, x, eps, noise_generators, dropout_generators=None) -> torch.Tensor:
        """The representation an attacker sees: the encoder's output, privatised if the method is DP."""
        h = self.encoder(x, dropout_generators)
        if self.spec.privatizer == "laplace":
            h = laplace_privatize(h, eps, generator=noise_generators)
        elif self.spec.privatizer == "minmax":
            h = minmax_privatize(h, eps, generator=noise_generators)
        return h


def difference_loss(hidden: list[torch.Tensor]) -> torch.Tensor:
    """Han et al. (2021) orthogonality loss over all pairs of adversaries, per config (K,).

    Each adversary's last hidden representation (K, B, H) is mean-centred over the batch
    and row-L2-normalised (as in the domain-separation difference loss it comes from);
    the loss is sum_{i<j} ||H_i^T H_j||_F^2.
    """
    normed = []
    for h in hidden:
        h = h - h.mean(dim=1, keepdim=True)
        normed.append(h / h.norm(dim=2, keepdim=True).clamp_min(1e-8))
    total = hidden[0].new_zeros(hidden[0].shape[0])
    for i in range(len(normed)):
        for j in range(i + 1, len(normed)):
            total = total + torch.bmm(normed[i].transpose(1, 2), normed[j]).pow(2).sum(dim=(1, 2))
    return total


class BestEpochs:
    """Per config: the validation accuracy of every epoch, the best one, and its parameters.

    Every parameter has the config axis first, so keeping config k's best weights is a
    masked copy along that axis; ``restore`` puts each config's best weights back.
    """

    def __init__(self, params: list[nn.Parameter], epochs: int):
        self.params = params
        k = params[0].shape[0]
        self.best_acc = torch.full((k,), -1.0, dtype=torch.float64)
        self.best_epoch = np.zeros(k, dtype=np.int64)
        self.history = np.zeros((k, epochs))
        self.state = [p.detach().clone() for p in params]

    @torch.no_grad()
    def update(self, epoch: int, accuracy: torch.Tensor) -> None:
        """Record ``accuracy`` (K,) of 0-based ``epoch``; keep the weights of configs that improved."""
        self.history[:, epoch] = accuracy.numpy()
        improved = accuracy > self.best_acc
        if not improved.any():
            return
        self.best_acc = torch.where(improved, accuracy, self.best_acc)
        self.best_epoch[improved.numpy()] = epoch + 1
        mask = improved.to(self.params[0].device)
        for i, p in enumerate(self.params):
            self.state[i] = torch.where(mask.reshape(-1, *([1] * (p.dim() - 1))), p.detach(), self.state[i])

    @torch.no_grad()
    def restore(self) -> None:
        for p, best in zip(self.params, self.state):
            p.copy_(best)


@dataclass
class PackResult:
    """Per-config outcomes of one pack, arrays with a leading config axis K."""

    configs: list[dict]
    best_epoch: np.ndarray                       # (K,) 1-based epoch with the best valid accuracy
    valid_accuracy_history: np.ndarray           # (K, epochs), percent
    predictions: dict[str, np.ndarray]           # split -> (K, n_split) predicted labels
    representations: dict[str, np.ndarray]       # split -> (K, n_split, D), what an attacker sees
    duration_s: float
    model: nn.Module | None = field(default=None, repr=False)  # the trained pack, best epochs restored
    # (eps, delta) per config when the guarantee depends on the run (an accountant's value);
    # None: the method's formal_privacy(config, D) says it.
    privacy: list[tuple[float, float]] | None = None
    diagnostics: dict = field(default_factory=dict)  # method-specific, e.g. PF-LD's clipped fractions


def _per_config(values: list, device, dtype) -> torch.Tensor:
    return torch.tensor([float(v) for v in values], device=device, dtype=dtype)


def lambda_schedule(lam: torch.Tensor, epoch: int, epochs: int, gamma: float, schedule: str) -> torch.Tensor:
    """Ganin & Lempitsky's ramp lam * (2 / (1 + exp(-gamma p)) - 1), p = epoch / epochs (0-based epoch)."""
    if schedule == "constant":
        return lam
    p = epoch / epochs
    return lam * (2.0 / (1.0 + math.exp(-gamma * p)) - 1.0)


# Float32 activation budgets per layer for a chunk of configs on a CPU: a core's cache for
# elementwise-bound models, a larger slice of the last-level cache for GEMM-bound ones.
CPU_CHUNK_FLOATS = 1 << 20
CPU_CHUNK_FLOATS_GEMM_BOUND = 1 << 23
CPU_BATCHED_INTENSITY = 500  # matmul FLOPs per activation element above which batching pays on a CPU


# On CUDA a pack runs as one batched model unless its memory estimate exceeds this share of
# the trial's part of the device (the rest: CUDA context, allocator slack, the probes).
CUDA_MEMORY_SHARE = 0.6
# Float32 copies of each layer's output alive in a training step: pre- and post-activation,
# dropout mask, privacy noise, and the two gradients flowing back.
ACTIVATION_COPIES = 6


def bytes_per_config(shapes: list[tuple[int, int]], batch_size: int, eval_rows: int, itemsize: int = 4) -> int:
    """Memory estimate of one config in a pack: parameters with their gradient and two Adam
    moments, a training step's activations, and a forward pass over an evaluation split."""
    params = sum(a * b + b for a, b in shapes)
    widths = sum(b for _, b in shapes)
    return itemsize * (4 * params + ACTIVATION_COPIES * batch_size * widths + eval_rows * widths)


def cuda_config_chunk(per_config: int, device_bytes: int, gpu_share: float, k: int) -> int:
    """Configs per batched chunk on a GPU: as many as fit in ``CUDA_MEMORY_SHARE`` of the
    trial's share of the device (``gpu_share`` = the trial's fractional GPU), at least one."""
    return max(1, min(k, int(CUDA_MEMORY_SHARE * gpu_share * device_bytes // max(per_config, 1))))


def layer_shapes(spec: ModelSpec, arch: Architecture, d_in: int, n_classes: int, n_groups: int):
    """(fan_in, fan_out) of every linear layer of one config's model."""
    sizes = [[d_in, *arch.encoder], [arch.representation_dim, *arch.classifier, n_classes]]
    sizes += [[arch.representation_dim, *arch.adversary, n_groups]] * spec.adversaries
    return [(a, b) for s in sizes for a, b in zip(s[:-1], s[1:])]


def config_chunk(settings: TrainSettings, shapes: list[tuple[int, int]], k: int, device: torch.device,
                 eval_rows: int = 0) -> int:
    """How many of a pack's K configs are computed as one batched model.

    On CUDA all K (batching is what fills the GPU) unless the pack's memory estimate
    (``bytes_per_config``) exceeds ``CUDA_MEMORY_SHARE`` of the trial's share of the device
    (``TrainSettings.gpu_share``); then as many as fit (``cuda_config_chunk``). On a CPU it depends on the model's
    arithmetic intensity (matmul FLOPs per activation element, sum(in*out) / sum(out)).
    Measured on a 2-core machine (benchmarks/bench_engine.py): the Adult-shaped FEDERATE
    model (intensity ~250) runs slower per config when batched, because the elementwise
    work (dropout, noise, normalisation) on K x batch x width activations spills out of
    cache; the Twitter-shaped one (2304-d input, intensity ~800) runs 1.3x faster per config
    in a pack of 15, the shared-input GEMM dominating, but slower again at 150. So a chunk's
    widest activation is kept within ``CPU_CHUNK_FLOATS`` (elementwise-bound) or
    ``CPU_CHUNK_FLOATS_GEMM_BOUND`` (GEMM-bound). Chunking never changes results: every
    config has its own random streams and its own Adam state.
    """
    if settings.config_chunk is not None:
        return min(settings.config_chunk, k)
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        return cuda_config_chunk(bytes_per_config(shapes, settings.batch_size, eval_rows), total, settings.gpu_share, k)
    intensity = sum(a * b for a, b in shapes) / sum(b for _, b in shapes)
    budget = CPU_CHUNK_FLOATS_GEMM_BOUND if intensity >= CPU_BATCHED_INTENSITY else CPU_CHUNK_FLOATS
    widest = max(b for _, b in shapes)
    return max(1, min(k, budget // (settings.batch_size * widest)))


def train_pack(spec: ModelSpec, arch: Architecture, settings: TrainSettings, data: Dataset,
               configs: list[dict], config_ids: list[str], seed: int,
               splits_out: tuple[str, ...] = ("valid", "test")) -> PackResult:
    """Train one pack; each config dict may hold ``eps``, ``lam`` and ``lam_ort``."""
    device = resolve_device(settings.device)
    shapes = layer_shapes(spec, arch, data.n_features, data.n_classes, data.n_groups)
    chunk = config_chunk(settings, shapes, len(configs), device, eval_rows=max(len(v) for v in data.splits.values()))
    if chunk < len(configs):
        t0 = time.perf_counter()
        parts = [_train_batched(spec, arch, settings, data, configs[i:i + chunk], config_ids[i:i + chunk],
                                seed, splits_out, device) for i in range(0, len(configs), chunk)]
        return PackResult(
            configs=list(configs),
            best_epoch=np.concatenate([p.best_epoch for p in parts]),
            valid_accuracy_history=np.concatenate([p.valid_accuracy_history for p in parts]),
            predictions={n: np.concatenate([p.predictions[n] for p in parts]) for n in splits_out},
            representations={n: np.concatenate([p.representations[n] for p in parts]) for n in splits_out},
            duration_s=time.perf_counter() - t0,
        )
    return _train_batched(spec, arch, settings, data, configs, config_ids, seed, splits_out, device)


def _train_batched(spec, arch, settings, data, configs, config_ids, seed, splits_out, device) -> PackResult:
    t0 = time.perf_counter()
    dtype = getattr(torch, settings.dtype)
    k = len(configs)
    gens = {s: _rng.make_generators([stream_seed(seed, c, s) for c in config_ids], device)
            for s in ("init", "dropout", "noise", "eval_noise")}
    model = PackedModel(spec, arch, data.n_features, data.n_classes, data.n_groups, gens["init"],
                        device=device, dtype=dtype)
    eps = lam = lam_ort = None
    if spec.privatizer != "none":
        eps = _per_config([c["eps"] for c in configs], device, dtype).reshape(k, 1, 1)
    if spec.adversaries:
        lam = _per_config([c["lam"] for c in configs], device, dtype)
    if spec.orthogonality:
        lam_ort = _per_config([c["lam_ort"] for c in configs], device, dtype)

    X = {name: torch.as_tensor(part.X, device=device, dtype=dtype) for name, part in
         ((n, data.split(n)) for n in ("train", "valid", "test"))}
    y = {n: torch.as_tensor(data.split(n).y, device=device) for n in ("train", "valid", "test")}
    s_train = torch.as_tensor(data.split("train").s, device=device)
    n_train = X["train"].shape[0]
    order = torch.Generator(device="cpu").manual_seed(seed)  # shared minibatch order within a seed
    opt = torch.optim.Adam(model.parameters(), lr=settings.lr)

    best = BestEpochs(list(model.parameters()), settings.epochs)
    for epoch in range(settings.epochs):
        model.train()
        lam_e = lambda_schedule(lam, epoch, settings.epochs, settings.gamma, spec.schedule) if lam is not None else None
        perm = torch.randperm(n_train, generator=order).to(device)
        for start in range(0, n_train, settings.batch_size):
            idx = perm[start:start + settings.batch_size]
            xb, yb = X["train"][idx], y["train"][idx]
            z = model.represent(xb, eps, gens["noise"], gens["dropout"])
            logits = model.classifier(z, gens["dropout"])
            loss = per_config_cross_entropy(logits, yb)
            if spec.adversaries:
                zr = grad_reverse(z, lam_e)
                sb = s_train[idx]
                for adv in model.adversaries:
                    loss = loss + per_config_cross_entropy(adv(zr, gens["dropout"]), sb)
                if spec.orthogonality:
                    # The difference loss trains the adversaries only: evaluate it on a detached
                    # representation so it never reaches the encoder through the reversal layer.
                    hidden = [adv(z.detach(), gens["dropout"], return_hidden=True)[1] for adv in model.adversaries]
                    loss = loss + lam_ort * difference_loss(hidden)
            opt.zero_grad(set_to_none=True)
            loss.sum().backward()
            opt.step()
        best.update(epoch, per_config_accuracy(predict(model, X["valid"], eps, gens["eval_noise"]), y["valid"]))
    best.restore()
    predictions, representations = {}, {}
    for name in splits_out:
        reps, preds = represent_and_predict(model, X[name], eps, gens["eval_noise"])
        predictions[name] = preds.cpu().numpy()
        representations[name] = reps.cpu().numpy()
    return PackResult(configs=list(configs), best_epoch=best.best_epoch, valid_accuracy_history=best.history,
                      predictions=predictions, representations=representations,
                      duration_s=time.perf_counter() - t0, model=model)


def per_config_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per config: logits (K, B, C), target (B,) -> (K,)."""
    k, b, c = logits.shape
    return F.cross_entropy(logits.reshape(k * b, c), target.repeat(k), reduction="none").view(k, b).mean(1)


def per_config_accuracy(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return (pred == target).double().mean(dim=1).cpu() * 100.0


@torch.no_grad()
def represent_and_predict(model: PackedModel, X: torch.Tensor, eps, noise_generators):
    """Evaluation-mode representations (fresh noise) and predicted labels, in row chunks."""
    model.eval()
    reps, preds = [], []
    for start in range(0, X.shape[0], EVAL_CHUNK):
        z = model.represent(X[start:start + EVAL_CHUNK], eps, noise_generators)
        reps.append(z)
        preds.append(model.classifier(z).argmax(-1))
    return torch.cat(reps, dim=1), torch.cat(preds, dim=1)


@torch.no_grad()
def predict(model: PackedModel, X: torch.Tensor, eps, noise_generators) -> torch.Tensor:
    model.eval()
    return torch.cat([model.classifier(model.represent(X[i:i + EVAL_CHUNK], eps, noise_generators)).argmax(-1)
                      for i in range(0, X.shape[0], EVAL_CHUNK)], dim=1)
