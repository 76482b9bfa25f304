"""Privacy probes: Leakage and MDL of the sensitive attribute, batched over a pack of representations.

Leakage (FEDERATE D.1): the accuracy (percent) of a probe that predicts the sensitive
attribute from the representation, trained on the valid split's representations and
scored on the test split's. MDL (Voita & Titov 2020, online code): the code length in
kbits of transmitting the attribute given the representation, block by block.

The default probe is scikit-learn's ``MLPClassifier`` recipe: one hidden layer of 100 ReLU
units, Adam (lr 1e-3), L2 penalty ``alpha`` (1e-4) added as sklearn does
(0.5 * alpha * ||W||^2 / batch), minibatches of 200, early stopping on a stratified 10%
held out (stop after 10 epochs without a ``tol`` gain in held-out accuracy, keep the best
epoch's weights). Differences, on purpose: the output is a softmax over the groups (sklearn
uses one logistic unit for two classes, the same model), and features are standardised
with the probe's training rows (``standardize=True``): an L1-normalised representation has
entries ~1/D, on which an unscaled MLP barely trains, so an unscaled probe would
understate the leakage of exactly the DP methods.

FEDERATE's probe (its public code, saist1993/DPNLP ``calculate_leakage``) is
``make_pipeline(StandardScaler(), MLPClassifier(alpha=1, max_iter=1000))``: standardised,
L2 alpha 1, no early stopping, at most 1000 epochs, which is :data:`FEDERATE_PROBE`. Its
MDL probe is the same MLP on unscaled inputs; fairdp uses one probe for both metrics.

The torch probes train K representations at once (stacked weights, one Adam = K Adams,
the same held-out split, initialisation and minibatch order for every config, so a
config's number does not depend on its pack); ``backend="sklearn"`` is the reference.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch

from fairdp.engine import per_config_cross_entropy
from fairdp.engine._shared import resolve_device
from fairdp.errors import InputError
from fairdp.metrics._probe_settings import ProbeSettings

MDL_BLOCKS = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.25, 12.5, 25.0, 50.0, 100.0)  # percent of the probing set
MIN_EARLY_STOPPING_ROWS = 50  # below this a 10% held-out set is a handful of rows: stop on training loss
CUDA_GRAPHS = True  # replay probe steps from a captured graph on CUDA (see _Steps); False: eager


def _as_pack(reprs) -> tuple[np.ndarray, bool]:
    arr = np.asarray(reprs)
    if arr.ndim == 2:
        return arr[None], False
    if arr.ndim != 3:
        raise InputError(f"representation: expected (rows, D) or (K, rows, D), got shape {arr.shape}")
    return arr, True


def _labels(s, n: int, what: str) -> np.ndarray:
    s = np.asarray(s)
    if s.ndim != 1 or len(s) != n:
        raise InputError(f"{what}: expected one label per row ({n}), got shape {s.shape}")
    if not np.issubdtype(s.dtype, np.integer) or (len(s) and s.min() < 0):
        raise InputError(f"{what}: expected non-negative integer codes")
    return s.astype(np.int64)


class _PackedProbe:
    """K probes: (K, n, D) -> (K, n, C) logits; every config starts from the same weights."""

    def __init__(self, weights: list[torch.Tensor], biases: list[torch.Tensor], binary: bool):
        self.weights, self.biases, self.binary = weights, biases, binary

    @classmethod
    def init(cls, k: int, d: int, c: int, settings: ProbeSettings, device, dtype) -> _PackedProbe:
        g = torch.Generator().manual_seed(settings.seed)
        # Two groups: one logit, as sklearn's logistic output unit (a 2-way softmax would
        # move the log-odds twice as fast and make small-sample probes overconfident).
        out = 1 if c == 2 else c
        sizes = [d, settings.hidden, out] if settings.kind == "mlp" else [d, out]
        weights, biases = [], []
        for a, b in zip(sizes[:-1], sizes[1:]):
            bound = math.sqrt(6.0 / (a + b))  # Glorot uniform, as sklearn's MLP (ReLU factor 6)
            w = torch.empty(a, b).uniform_(-bound, bound, generator=g)
            bias = torch.empty(b).uniform_(-bound, bound, generator=g)
            weights.append(w.expand(k, a, b).to(device, dtype).clone().requires_grad_())
            biases.append(bias.expand(k, 1, b).to(device, dtype).clone().requires_grad_())
        return cls(weights, biases, c == 2)

    def parameters(self) -> list[torch.Tensor]:
        return [*self.weights, *self.biases]

    def select(self, idx: torch.Tensor) -> _PackedProbe:
        """The probes of configs ``idx`` only, as new leaf tensors."""
        take = [p.detach()[idx].clone().requires_grad_() for p in self.parameters()]
        return _PackedProbe(take[:len(self.weights)], take[len(self.weights):], self.binary)

    def __call__(self, x):
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = torch.baddbmm(b, x, w)
            if i < len(self.weights) - 1:
                x = torch.relu(x)
        return torch.cat([torch.zeros_like(x), x], dim=-1) if self.binary else x

    def l2(self) -> torch.Tensor:
        return sum(w.pow(2).sum(dim=(1, 2)) for w in self.weights)


def _adam(params, settings: ProbeSettings, old: torch.optim.Adam | None = None, old_params=None, idx=None):
    """Adam over ``params``; with ``old``, carry over its per-config state for configs ``idx``.
    On CUDA it is capturable (its step count lives on the device) so that a graph can replay it."""
    opt = torch.optim.Adam(params, lr=settings.step_size, betas=(0.9, 0.999), eps=1e-8,
                           capturable=params[0].is_cuda)
    if old is not None:
        for p_old, p_new in zip(old_params, params):
            state = old.state.get(p_old)
            if state:
                opt.state[p_new] = {"step": state["step"].clone(), "exp_avg": state["exp_avg"][idx].clone(),
                                    "exp_avg_sq": state["exp_avg_sq"][idx].clone()}
    return opt


@contextlib.contextmanager
def _flush_denormals():
    """Compute with float32 denormals flushed to zero, then back to torch's default (off).

    L2 decay drives a probe's unused weights towards zero, through the denormal range, where
    x86 CPUs compute 10-100x slower: FEDERATE's alpha-1 leakage probe took 6x longer on Adult
    (148 s against 23 s for 4 representations), with bit for bit the same leakage and MDL.
    The mode is the calling thread's: torch's other intra-op threads keep theirs.
    """
    supported = torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if supported:
            torch.set_flush_denormal(False)


class _Steps:
    """Minibatch steps of a pack of probes, each adding its per-config loss x rows to ``loss_sum``.

    A step is ~50 kernels on (K, 200, D) slices, each far too small to fill a GPU, so on CUDA
    launching them one by one bounds the probe (the GPU was ~20% busy). There, after
    ``WARMUP`` eager steps on a side stream (lazy set-up must not happen during capture),
    the step is captured once as a CUDA graph and replayed for every full minibatch: the
    same kernels on the same buffers, one launch. A shorter last minibatch runs eagerly.
    """

    WARMUP = 3

    def __init__(self, probe: _PackedProbe, opt: torch.optim.Adam, X: torch.Tensor, y: torch.Tensor,
                 alpha: float, batch_size: int):
        self.probe, self.opt, self.X, self.y, self.alpha = probe, opt, X, y, alpha
        self.loss_sum = torch.zeros(X.shape[0], dtype=torch.float64, device=X.device)
        self.cuda = X.is_cuda and CUDA_GRAPHS
        self.graph: torch.cuda.CUDAGraph | None = None
        if self.cuda:
            self.batch_size, self.warmup = batch_size, self.WARMUP
            self.idx = torch.zeros(batch_size, dtype=torch.long, device=X.device)
            self.side = torch.cuda.Stream(X.device)

    def _step(self, idx: torch.Tensor) -> None:
        loss = (per_config_cross_entropy(self.probe(self.X[:, idx]), self.y[idx])
                + 0.5 * self.alpha * self.probe.l2() / len(idx))
        self.opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        self.opt.step()
        self.loss_sum += loss.detach().double() * len(idx)

    def __call__(self, idx: torch.Tensor) -> None:
        if not self.cuda or len(idx) != self.batch_size:
            self._step(idx)
        elif self.graph is not None:
            self.idx.copy_(idx)
            self.graph.replay()
        elif self.warmup > 0:
            self.warmup -= 1
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                self._step(idx)
            torch.cuda.current_stream().wait_stream(self.side)
        else:
            self.opt.zero_grad(set_to_none=True)  # backward allocates the grads in the graph's pool
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self._step(self.idx)
            self.idx.copy_(idx)
            self.graph.replay()  # capturing records the step without running it


def _fit_torch(X: torch.Tensor, y: torch.Tensor, n_classes: int, settings: ProbeSettings) -> _PackedProbe:
    """Train K probes on X (K, n, D), y (n,) with sklearn's MLP recipe (see :func:`_train_probes`)."""
    with _flush_denormals():
        return _train_probes(X, y, n_classes, settings)


def _train_probes(X: torch.Tensor, y: torch.Tensor, n_classes: int, settings: ProbeSettings) -> _PackedProbe:
    """Train K probes on X (K, n, D), y (n,) with sklearn's MLP recipe.

    With early stopping each config keeps its best held-out epoch's weights; without, its
    last. A config that has stopped leaves the pack (its weights, Adam state and inputs are
    dropped from the batched tensors), so the pack costs what its configs cost, not K times
    its slowest one; the others' trajectories are unchanged (per-config Adam, shared order).
    """
    # here, not at the top: scikit-learn costs every fairdp start ~0.5 s
    from sklearn.model_selection import train_test_split

    k, n, d = X.shape
    probe = _PackedProbe.init(k, d, n_classes, settings, X.device, X.dtype)
    opt = _adam(probe.parameters(), settings)
    final = [p.detach().clone() for p in probe.parameters()]  # each config's weights once it stops
    # A linear probe is a convex problem (logistic regression): train it to convergence of
    # the training loss, as sklearn's LogisticRegression does, not to a held-out plateau.
    early = settings.early_stopping and settings.kind == "mlp" and n >= MIN_EARLY_STOPPING_ROWS
    if early:
        y_np = y.cpu().numpy()
        counts = np.bincount(y_np)
        stratify = y_np if counts[counts > 0].min() >= 2 else None
        fit_idx, val_idx = train_test_split(np.arange(n), test_size=settings.validation_fraction,
                                            random_state=settings.seed, stratify=stratify)
        fit_idx, val_idx = torch.as_tensor(fit_idx, device=X.device), torch.as_tensor(val_idx, device=X.device)
        X_val, y_val = X[:, val_idx], y[val_idx]
        kept = [p.detach().clone() for p in probe.parameters()]  # best held-out epoch so far
    else:
        fit_idx = torch.arange(n, device=X.device)
    active = torch.arange(k)  # original config index of each row of the batched tensors
    best_score = torch.full((k,), -math.inf, dtype=torch.float64)
    stale = torch.zeros(k, dtype=torch.long)
    order = torch.Generator().manual_seed(settings.seed)
    m = len(fit_idx)
    bs = min(settings.batch_size, m)
    steps = _Steps(probe, opt, X, y, settings.alpha, bs)
    for epoch in range(settings.max_epochs):
        perm = fit_idx[torch.randperm(m, generator=order).to(X.device)]
        steps.loss_sum.zero_()
        for start in range(0, m, bs):
            steps(perm[start:start + bs])
        epoch_loss = steps.loss_sum.cpu()  # the epoch's one host sync
        with torch.no_grad():
            if early:  # sklearn: stale unless held-out accuracy beats the best by tol
                score = (probe(X_val).argmax(-1) == y_val).double().mean(1).cpu()
                improved = (score > best_score).to(X.device)
                for i, p in enumerate(probe.parameters()):
                    kept[i] = torch.where(improved.view(-1, 1, 1), p, kept[i])
            else:  # sklearn without early stopping: the epoch's mean training loss must fall by tol
                score = -epoch_loss / m
            stale = torch.where(score < best_score + settings.tol, stale + 1, 0)
            best_score = torch.maximum(best_score, score)
            done = stale > settings.patience
            if epoch == settings.max_epochs - 1:
                done[:] = True
            if not done.any():
                continue
            source = kept if early else [p.detach() for p in probe.parameters()]
            for i in range(len(final)):
                final[i][active[done]] = source[i][done.to(X.device)]
            if done.all():
                break
            keep = torch.nonzero(~done).view(-1)
            keep_dev = keep.to(X.device)
            old_params = probe.parameters()
            probe = probe.select(keep_dev)
            opt = _adam(probe.parameters(), settings, opt, old_params, keep_dev)
            X = X[keep_dev]
            steps = _Steps(probe, opt, X, y, settings.alpha, bs)
            if early:
                X_val = X_val[keep_dev]
                kept = [p[keep_dev] for p in kept]
            active, best_score, stale = active[keep], best_score[keep], stale[keep]
    return _PackedProbe(final[:len(probe.weights)], final[len(probe.weights):], probe.binary)


def _standardize(train: torch.Tensor, *others: torch.Tensor):
    mean = train.mean(dim=1, keepdim=True)
    std = train.std(dim=1, unbiased=False, keepdim=True)
    std = torch.where(std > 0, std, torch.ones_like(std))
    return [(t - mean) / std for t in (train, *others)]


def _sklearn_probe(settings: ProbeSettings, n_rows: int):
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if settings.kind == "linear":
        model = LogisticRegression(C=1.0 / max(settings.alpha, 1e-12), max_iter=1000)
    else:
        model = MLPClassifier(hidden_layer_sizes=(settings.hidden,), learning_rate_init=settings.step_size,
                              alpha=settings.alpha, batch_size=min(settings.batch_size, n_rows),
                              max_iter=settings.max_epochs, tol=settings.tol,
                              n_iter_no_change=settings.patience,
                              early_stopping=settings.early_stopping and n_rows >= MIN_EARLY_STOPPING_ROWS,
                              validation_fraction=settings.validation_fraction, random_state=settings.seed)
    return make_pipeline(StandardScaler(), model) if settings.standardize else model


def _tensor(a: np.ndarray, settings: ProbeSettings) -> torch.Tensor:
    return torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float32, device=resolve_device(settings.device))


def leakage(train_repr, train_s, test_repr, test_s, settings: ProbeSettings | None = None,
            n_groups: int | None = None):
    """Probe accuracy (percent) on ``test`` after training on ``train``: a float, or (K,) for packs."""
    settings = settings or ProbeSettings()
    tr, packed = _as_pack(train_repr)
    te, _ = _as_pack(test_repr)
    if tr.shape[0] != te.shape[0] or tr.shape[2] != te.shape[2]:
        raise InputError(f"test_repr: shape {te.shape} does not match train_repr {tr.shape}")
    s_tr = _labels(train_s, tr.shape[1], "train_s")
    s_te = _labels(test_s, te.shape[1], "test_s")
    c = n_groups or int(max(s_tr.max(), s_te.max())) + 1
    if settings.backend == "sklearn":
        acc = np.array([_sklearn_probe(settings, len(s_tr)).fit(a, s_tr).score(b, s_te) * 100
                        for a, b in zip(tr, te)])
    else:
        Xtr, Xte = _tensor(tr, settings), _tensor(te, settings)
        if settings.standardize:
            Xtr, Xte = _standardize(Xtr, Xte)
        probe = _fit_torch(Xtr, torch.as_tensor(s_tr, device=Xtr.device), c, settings)
        with torch.no_grad():
            pred = probe(Xte).argmax(-1).cpu().numpy()
        acc = (pred == s_te).mean(axis=1) * 100
    return acc if packed else float(acc[0])


def mdl_block_ends(n: int, blocks: Sequence[float] = MDL_BLOCKS) -> list[int]:
    """Row counts at which the online code's blocks end (at least 1, strictly increasing)."""
    ends = []
    for frac in blocks:
        t = min(n, max(1, int(n * frac / 100)))
        if not ends or t > ends[-1]:
            ends.append(t)
    return ends


def uniform_codelength(n: int, n_groups: int) -> float:
    """kbits to send n labels with a uniform code: what a representation carrying no information costs."""
    return n * math.log2(n_groups) / 1000


def online_code(repr, s, settings: ProbeSettings | None = None, n_groups: int | None = None):
    """The online code block by block: (block end rows, bits per block of shape (K, blocks)).

    Rows are shuffled once with ``settings.seed``. Block 0 (the first 0.1%) is sent with a
    uniform code, t1 * log2(C) bits; block i > 0 holds rows t_{i-1}..t_i and is sent with a
    probe trained on rows 0..t_{i-1}, scoring ONLY those new rows (Voita & Titov eq. 3;
    FEDERATE's public code scores the whole next prefix, counting rows the probe was
    trained on). Every row is coded exactly once.
    """
    settings = settings or ProbeSettings()
    X, _ = _as_pack(repr)
    s = _labels(s, X.shape[1], "s")
    c = n_groups or int(s.max()) + 1
    order = np.random.default_rng(settings.seed).permutation(len(s))
    X, s = X[:, order], s[order]
    ends = mdl_block_ends(len(s))
    bits = np.zeros((X.shape[0], len(ends)))
    bits[:, 0] = ends[0] * math.log2(c)
    Xt = _tensor(X, settings)
    if settings.standardize:
        # Sender and receiver both hold every representation (only labels are sent), so the
        # scaling may use all rows; fitting it on a 4-row prefix would blow test rows up.
        (Xt,) = _standardize(Xt)
        if settings.backend == "sklearn":
            X = Xt.cpu().numpy()
    settings = replace(settings, standardize=False)
    for b, (start, stop) in enumerate(zip(ends[:-1], ends[1:]), start=1):
        if len(np.unique(s[:start])) < 2:
            # Nothing to train a probe on: code the block with the prefix's add-one frequencies.
            freq = (np.bincount(s[:start], minlength=c) + 1) / (start + c)
            bits[:, b] = -np.log2(freq[s[start:stop]]).sum()
            continue
        if settings.backend == "sklearn":
            for k in range(X.shape[0]):
                model = _sklearn_probe(settings, start).fit(X[k, :start], s[:start])
                proba = np.full((stop - start, c), 1e-300)
                proba[:, model.classes_] = np.maximum(model.predict_proba(X[k, start:stop]).astype(np.float64), 1e-300)
                bits[k, b] = -np.log2(proba[np.arange(stop - start), s[start:stop]]).sum()
            continue
        fit, block = Xt[:, :start], Xt[:, start:stop]
        probe = _fit_torch(fit, torch.as_tensor(s[:start], device=Xt.device), c,
                           replace(settings, batch_size=min(settings.batch_size, start)))
        with torch.no_grad():
            logp = torch.log_softmax(probe(block).double(), dim=-1)
            target = torch.as_tensor(s[start:stop], device=Xt.device).view(1, -1, 1).expand(X.shape[0], -1, 1)
            bits[:, b] = (-logp.gather(2, target).sum(dim=(1, 2)) / math.log(2)).cpu().numpy()
    return ends, bits


def mdl(repr, s, settings: ProbeSettings | None = None, n_groups: int | None = None):
    """Online-code MDL (kbits) of ``s`` given ``repr``: a float, or (K,) for a pack (see :func:`online_code`)."""
    _, packed = _as_pack(repr)
    kbits = online_code(repr, s, settings, n_groups)[1].sum(axis=1) / 1000
    return kbits if packed else float(kbits[0])
