"""Ghost clipping for ``FunctionalPack``: per-sample gradient norms and the clipped weighted sum
from each layer's inputs and output-gradients, without materialising per-sample gradients.

Why: for a layer y = f(x; W) linear in W (nn.Linear, a convolution after im2col, an affine
normalisation, an embedding lookup), row z's gradient is a product of what the layer saw
(its input a_z) and what came back (its output-gradient delta_z): for nn.Linear g_z =
delta_z^T a_z, so ||g_z||^2 = ||delta_z||^2 ||a_z||^2 for one position and
sum_{t,s} (a_t . a_s)(delta_t . delta_s) for T positions (Goodfellow 2015; Li et al. 2022), and
sum_z c_z g_z = (c * Delta)^T A is one matmul. Materialising g_z costs a vjp per row and R
copies of every parameter; this costs one vjp per row w.r.t. zero "probes" added to the layers'
outputs (whose gradients are the output-gradients) and a few batched matmuls.

How (``FunctionalPack`` drives it): the pack's meta module is copied once more and every layer
this module covers has its class swapped for a ``Ghost*`` subclass (``install``). Outside a
recording the subclass is the layer itself. While ``Recorder`` is recording, each call computes
the layer with its covered parameters DETACHED, adds that call's probe and records a copy of
its input; the caller returns the inputs as auxiliary outputs of the per-row function (so they
leave vmap as outputs, never held as batched tensors in Python state) and pulls the row's
cotangent back to the probes. A covered parameter's gradient is then computed only from the
recorded (input, output-gradient) pairs, never by autograd through the parameter: a parameter
also read outside its layer (weight tying, ``self.fc.weight`` used elsewhere) would miss that
use, so ``FunctionalPack`` detects such parameters once per input shape (``ghost_plan``: a
batch-of-one gradient w.r.t. the parameters with every covered layer detaching them) and
leaves them to the materialised per-sample path, parameter by parameter, as it does every
parameter of a layer this module does not cover.

Per layer, the cheaper exact form: one position (nn.Linear on rows), ||delta||^2 ||a||^2; T
positions (a sequence, a convolution's output positions after im2col), the ghost identity when
T (p + q) < p q, else each row's p x q gradient (for a convolution one grouped convolution's
weight gradient whose groups are the rows, as Opacus and vmap compute it); normalisations'
affine parameters and biases: each row's gradient, as small as the parameter; an embedding:
sum_{t,s} [i_t = i_s != padding_idx] delta_t . delta_s.

Every ``Part`` holds one parameter's per-row gradients in some form over (K configs, r rows):
``sq()`` its squared norm per row, exactly the materialised gradient's, ``mask(keep)`` zeroes
rows, ``total(coef)`` sum_z coef[k, z] g_z per config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

# -- the layers: swapped-in subclasses that record while a Recorder records --------------------


class Recorder:
    """What the ghost layers of one pack share during one call of the module: whether they
    record, which parameters they detach, the probes they add (None: discovering shapes), and
    per call, in call order, the layer's id, a copy of its input and its output's shape."""

    def __init__(self):
        self.active = False
        self.detach: frozenset[str] = frozenset()
        self.probes: list[torch.Tensor] | None = None
        self.calls: list[int] = []
        self.inputs: list[torch.Tensor] = []
        self.outputs: list[tuple[tuple[int, ...], torch.dtype]] = []

    def start(self, detach, probes) -> None:
        self.active, self.detach, self.probes = True, frozenset(detach), probes
        self.calls, self.inputs, self.outputs = [], [], []

    def stop(self) -> tuple[list[int], list[torch.Tensor], list]:
        """Ends the recording; returns (calls, inputs, outputs) and keeps none of them."""
        out = self.calls, self.inputs, self.outputs
        self.active, self.probes = False, None
        self.calls, self.inputs, self.outputs = [], [], []
        return out

    def call(self, layer: _GhostLayer, x: torch.Tensor) -> torch.Tensor:
        i = len(self.calls)
        self.calls.append(layer._ghost_id)
        self.inputs.append(x.clone())  # an in-place change after the call must not change the record
        params = {local: None if p is None else p.detach() if layer._ghost_names[local] in self.detach else p
                  for local, p in ((local, getattr(layer, local)) for local in layer._ghost_names)}
        out = layer._ghost_op(x, **params)
        if self.probes is None:
            self.outputs.append((tuple(out.shape), out.dtype))
            return out
        if i >= len(self.probes):
            raise RuntimeError("the module called its layers more often than on its first call: ghost clipping "
                               "needs the same layers called in the same order for every row")
        return out + self.probes[i]


class _GhostLayer:
    """Mixin of the swapped-in classes: the layer itself unless its pack's recorder records."""

    _ghost_recorder: Recorder
    _ghost_id: int
    _ghost_names: dict[str, str]  # the layer's parameter attribute -> its name in the pack

    def forward(self, x):
        if not self._ghost_recorder.active:
            return super().forward(x)
        return self._ghost_recorder.call(self, x)


class GhostLinear(_GhostLayer, nn.Linear):
    def _ghost_op(self, x, weight, bias=None):
        return F.linear(x, weight, bias)


class GhostConv1d(_GhostLayer, nn.Conv1d):
    def _ghost_op(self, x, weight, bias=None):
        return self._conv_forward(x, weight, bias)


class GhostConv2d(_GhostLayer, nn.Conv2d):
    def _ghost_op(self, x, weight, bias=None):
        return self._conv_forward(x, weight, bias)


class GhostLayerNorm(_GhostLayer, nn.LayerNorm):
    def _ghost_op(self, x, weight, bias=None):
        return F.layer_norm(x, self.normalized_shape, weight, bias, self.eps)


class GhostGroupNorm(_GhostLayer, nn.GroupNorm):
    def _ghost_op(self, x, weight, bias=None):
        return F.group_norm(x, self.num_groups, weight, bias, self.eps)


class GhostEmbedding(_GhostLayer, nn.Embedding):
    def _ghost_op(self, x, weight):
        return F.embedding(x, weight, self.padding_idx)


GHOST_CLASSES = {nn.Linear: GhostLinear, nn.Conv1d: GhostConv1d, nn.Conv2d: GhostConv2d,
                 nn.LayerNorm: GhostLayerNorm, nn.GroupNorm: GhostGroupNorm, nn.Embedding: GhostEmbedding}


def why_not_covered(module: nn.Module) -> str | None:
    """Why this module's layer type or settings keep it on the materialised path (None: covered).
    Only these exact classes: a subclass may compute something else in its forward."""
    kind = type(module)
    if kind not in GHOST_CLASSES:
        return "not a layer ghost clipping covers"
    if isinstance(module, nn.modules.conv._ConvNd):
        if module.padding_mode != "zeros":
            return f"padding_mode {module.padding_mode!r}"
        if isinstance(module.padding, str) and module.padding != "valid":
            return f"padding {module.padding!r}"
    if isinstance(module, nn.Embedding) and (module.max_norm is not None or module.sparse
                                             or module.scale_grad_by_freq):
        return "max_norm, sparse or scale_grad_by_freq"
    if not any(True for _ in module.parameters(recurse=False)):
        return "no parameters"
    return None


def install(base: nn.Module, names: set[str], recorder: Recorder) -> dict[int, Layer]:
    """Swap the class of every covered layer of ``base`` (a meta copy only the ghost path calls)
    for its ``Ghost*`` subclass; ``names``: the pack's parameter names. A layer one of whose
    parameters is held under another name as well (tied to another module's) is left as it is:
    the parameter is then read outside the layer it is recorded for, which ``ghost_plan`` finds.
    Returns the layers by id."""
    layers: dict[int, Layer] = {}
    for path, module in base.named_modules():
        if why_not_covered(module) is not None:
            continue
        prefix = path + "." if path else ""
        own = {local: prefix + local for local, _ in module.named_parameters(recurse=False)}
        if not set(own.values()) <= names:
            continue
        module.__class__ = GHOST_CLASSES[type(module)]
        module._ghost_recorder, module._ghost_id, module._ghost_names = recorder, len(layers), own
        layers[len(layers)] = Layer(module, own)
    return layers


@dataclass
class Layer:
    module: nn.Module  # its meta copy: settings only (kernel, groups, eps, padding_idx)
    names: dict[str, str]  # attribute -> the parameter's name in the pack


@dataclass
class Plan:
    """What one input shape's module does, found once per pack and input shape
    (``FunctionalPack.ghost_plan``)."""

    calls: list[int]  # the ghost layers' ids in call order
    shapes: list[tuple[tuple[int, ...], torch.dtype]]  # each call's output (the probe's shape)
    covered: list[str]  # the parameters whose gradients come from the records
    uncovered: list[str]  # the others: materialised
    row_floats: int = 0  # floats recorded per row (chunking)
    outside: list[str] = field(default_factory=list)  # covered layers' parameters read elsewhere too


def plan_of(layers: dict[int, Layer], names: list[str], calls: list[int], inputs: list[torch.Tensor],
            outputs: list, outside: set[str]) -> Plan:
    """The plan from a discovery call: a layer's parameter is covered unless it is read outside
    the layer (``outside``)."""
    candidates = {n for layer in layers.values() for n in layer.names.values()}
    covered = [n for n in names if n in candidates and n not in outside]
    row_floats = sum(x.numel() for x in inputs) + sum(math.prod(s) for s, _ in outputs)
    for (shape, _), i in zip(outputs, calls):  # and what the norms make of them (``_layer_parts``)
        m = layers[i].module
        if isinstance(m, (nn.Linear, nn.modules.conv._ConvNd)):
            out_features = m.out_features if isinstance(m, nn.Linear) else m.out_channels
            groups = getattr(m, "groups", 1)
            p = (m.in_features if isinstance(m, nn.Linear) else m.in_channels // groups * math.prod(m.kernel_size))
            q, t = out_features // groups, math.prod(shape) // out_features
            if t > 1:  # the unfolded patches, or each row's gradient
                row_floats += groups * (t * p if t * (p + q) < p * q else p * q)
    return Plan(calls, list(outputs), covered,
                [n for n in names if n not in covered], row_floats, sorted(outside & candidates))


# -- the parts: one parameter's per-row gradients, (K, r) leading -----------------------------


class Rowwise:
    """Per-row gradients held whole, (K, r, *shape): the materialised path, and the small
    parameters of the ghost path (biases, normalisations' affine parameters)."""

    def __init__(self, g: torch.Tensor):
        self.g = g

    def sq(self) -> torch.Tensor:
        return self.g.flatten(2).pow(2).sum(-1)

    def mask(self, keep: torch.Tensor) -> None:
        self.g = torch.where(keep.reshape(*keep.shape, *([1] * (self.g.dim() - 2))), self.g, 0)

    def total(self, coef: torch.Tensor) -> torch.Tensor:
        return torch.einsum("kr,kr...->k...", coef, self.g)


class Outer:
    """A weight whose row gradient is sum_t delta_t a_t^T per group: a (K, r, G, T, p) inputs,
    g (K, r, G, T, q) output-gradients; the parameter is (G * q, p) reshaped to ``shape``."""

    def __init__(self, a: torch.Tensor, g: torch.Tensor, shape: tuple[int, ...]):
        self.a, self.g, self.shape = a, g, shape

    def sq(self) -> torch.Tensor:
        a, g = self.a, self.g
        t, p, q = a.shape[3], a.shape[4], g.shape[4]
        if t == 1:
            return (a.pow(2).sum(-1) * g.pow(2).sum(-1)).sum((2, 3))
        if t * (p + q) < p * q:  # the ghost identity: T^2 (p + q) per row and group
            return ((a @ a.transpose(-1, -2)) * (g @ g.transpose(-1, -2))).sum((2, 3, 4))
        return (g.transpose(-1, -2) @ a).pow(2).sum((2, 3, 4))  # the row's gradient itself: T p q

    def mask(self, keep: torch.Tensor) -> None:
        keep = keep.reshape(*keep.shape, 1, 1, 1)
        self.a, self.g = torch.where(keep, self.a, 0), torch.where(keep, self.g, 0)

    def total(self, coef: torch.Tensor) -> torch.Tensor:
        k, r, groups, t, p = self.a.shape
        q = self.g.shape[4]
        cg = (self.g * coef.reshape(k, r, 1, 1, 1)).permute(0, 2, 4, 1, 3).reshape(k * groups, q, r * t)
        a = self.a.permute(0, 2, 1, 3, 4).reshape(k * groups, r * t, p)
        return torch.bmm(cg, a).reshape(k, *self.shape)


class Lookup:
    """An embedding's weight: row z's gradient adds delta_t at row i_t of the table for every
    position t whose index is not ``padding``. idx (K, r, T), g (K, r, T, D)."""

    def __init__(self, idx: torch.Tensor, g: torch.Tensor, rows: int, padding: int | None):
        self.idx, self.g, self.rows = idx, g, rows
        self.live = None if padding is None else (idx != padding)

    def sq(self) -> torch.Tensor:
        same = self.idx.unsqueeze(-1) == self.idx.unsqueeze(-2)
        if self.live is not None:
            same = same & self.live.unsqueeze(-1)
        return ((self.g @ self.g.transpose(-1, -2)) * same).sum((-1, -2))

    def mask(self, keep: torch.Tensor) -> None:
        self.g = torch.where(keep.reshape(*keep.shape, 1, 1), self.g, 0)

    def total(self, coef: torch.Tensor) -> torch.Tensor:
        k, r, t, d = self.g.shape
        cg = self.g * coef.reshape(k, r, 1, 1)
        if self.live is not None:
            cg = cg * self.live.unsqueeze(-1)
        index = (self.idx + self.rows * torch.arange(k, device=self.idx.device).reshape(k, 1, 1)).reshape(-1)
        out = torch.zeros(k * self.rows, d, dtype=cg.dtype, device=cg.device)
        return out.index_add_(0, index, cg.reshape(-1, d)).reshape(k, self.rows, d)


class Zero:
    """A covered layer the module did not call: no gradient."""

    def __init__(self, k: int, r: int, shape, dtype, device):
        self.k, self.r, self.shape, self.dtype, self.device = k, r, tuple(shape), dtype, device

    def sq(self) -> torch.Tensor:
        return torch.zeros(self.k, self.r, dtype=self.dtype, device=self.device)

    def mask(self, keep: torch.Tensor) -> None:
        pass

    def total(self, coef: torch.Tensor) -> torch.Tensor:
        return torch.zeros(self.k, *self.shape, dtype=self.dtype, device=self.device)


def _rows(t: torch.Tensor, last: int) -> torch.Tensor:
    """(K, r, ...) -> (K, r, positions, last): every position of a row's call."""
    return t.reshape(t.shape[0], t.shape[1], -1, last)


def _patches(module: nn.modules.conv._ConvNd, x: torch.Tensor, g: torch.Tensor):
    """A convolution's records as (inputs, output-gradients) per group and position: x (K, r,
    *input of one call) -> (K, r, G, N * L, C_in / G * prod(kernel)), g -> (K, r, G, N * L, C_out / G)."""
    k, r = x.shape[:2]
    dims = len(module.kernel_size)
    groups = module.groups
    xs = x.reshape(-1, module.in_channels, *x.shape[x.dim() - dims:])
    padding = (0,) * dims if isinstance(module.padding, str) else module.padding
    if dims == 1:  # as an image of height 1
        cols = F.unfold(xs.unsqueeze(2), (1, module.kernel_size[0]), dilation=(1, module.dilation[0]),
                        padding=(0, padding[0]), stride=(1, module.stride[0]))
    else:
        cols = F.unfold(xs, module.kernel_size, dilation=module.dilation, padding=padding, stride=module.stride)
    positions = cols.shape[-1]
    a = cols.reshape(k, r, -1, groups, cols.shape[1] // groups, positions).permute(0, 1, 3, 2, 5, 4)
    a = a.reshape(k, r, groups, -1, cols.shape[1] // groups)
    gs = g.reshape(k, r, -1, groups, module.out_channels // groups, positions).permute(0, 1, 3, 2, 5, 4)
    return a, gs.reshape(k, r, groups, -1, module.out_channels // groups)


def parts(layers: dict[int, Layer], plan: Plan, inputs: list[torch.Tensor], outgrads: list[torch.Tensor],
          shapes: dict[str, tuple[int, ...]], dtype: torch.dtype, k: int, r: int, device) -> dict:
    """Every covered parameter's ``Part`` from one chunk's records: ``inputs`` and ``outgrads``
    per call (K, r, *the call's input / output), in the parameters' precision ``dtype``."""
    by_layer: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    for i, a, g in zip(plan.calls, inputs, outgrads):
        by_layer.setdefault(i, []).append((a, g))
    covered = set(plan.covered)
    out = {}
    for i, layer in layers.items():
        wanted = {local: n for local, n in layer.names.items() if n in covered}
        if not wanted:
            continue
        records = by_layer.get(i, [])
        if not records:
            out.update({n: Zero(k, r, shapes[n], dtype, device) for n in wanted.values()})
            continue
        out.update(_layer_parts(layer.module, records, wanted, shapes, dtype))
    return out


def _layer_parts(m: nn.Module, records, wanted: dict[str, str], shapes, dtype) -> dict:
    out = {}
    if isinstance(m, nn.Embedding):
        idx = torch.cat([a.reshape(a.shape[0], a.shape[1], -1) for a, _ in records], 2)
        g = torch.cat([_rows(g.to(dtype), m.embedding_dim) for _, g in records], 2)
        return {wanted["weight"]: Lookup(idx, g, m.num_embeddings, m.padding_idx)}
    if isinstance(m, (nn.LayerNorm, nn.GroupNorm)):
        w = b = 0
        for a, g in records:
            a, g = a, g.to(dtype)
            if isinstance(m, nn.LayerNorm):
                xhat = F.layer_norm(a, m.normalized_shape, eps=m.eps)  # in the layer's precision, as its backward
                lead = a.dim() - len(m.normalized_shape)  # (K, r) and the call's positions
                wz, bz = xhat.to(dtype) * g, g
                if lead > 2:
                    wz, bz = wz.flatten(2, lead - 1).sum(2), bz.flatten(2, lead - 1).sum(2)
            else:  # (K, r, N, C, *spatial): per channel, summed over the call's samples and positions
                c = m.num_channels
                xhat = F.group_norm(a.reshape(-1, c, a[0, 0, 0, 0].numel()), m.num_groups, eps=m.eps)
                xhat = xhat.reshape(a.shape[0], a.shape[1], -1, c, xhat.shape[-1]).to(dtype)
                gg = g.reshape(xhat.shape)
                wz, bz = (xhat * gg).sum((2, 4)), gg.sum((2, 4))
            w, b = w + wz, b + bz
        found = {"weight": w, "bias": b}
        return {n: Rowwise(found[local].reshape(found[local].shape[0], found[local].shape[1], *shapes[n]))
                for local, n in wanted.items()}
    if isinstance(m, nn.modules.conv._ConvNd):
        # positions a row's calls cover, and the weight's (C_in / G * kernel, C_out / G) per group
        positions = sum(g[0, 0].numel() for _, g in records) // m.out_channels
        p, q = m.in_channels // m.groups * math.prod(m.kernel_size), m.out_channels // m.groups
        if positions * (p + q) >= p * q:  # each row's gradient is the cheaper: a grouped convolution
            if "weight" in wanted:
                out[wanted["weight"]] = Rowwise(sum(_conv_weight_rows(m, a.to(dtype), g.to(dtype))
                                                    for a, g in records))
            if "bias" in wanted:
                out[wanted["bias"]] = Rowwise(sum(_rows(g.to(dtype), _spatial(g, m)).sum(-1).reshape(
                    g.shape[0], g.shape[1], -1, m.out_channels).sum(2) for _, g in records))
            return out
        pairs = [_patches(m, a.to(dtype), g.to(dtype)) for a, g in records]
        a, g = _cat([p[0] for p in pairs], 3), _cat([p[1] for p in pairs], 3)
    else:  # nn.Linear
        a = _cat([_rows(a.to(dtype), m.in_features) for a, _ in records], 2).unsqueeze(2)
        g = _cat([_rows(g.to(dtype), m.out_features) for _, g in records], 2).unsqueeze(2)
    if "weight" in wanted:
        out[wanted["weight"]] = Outer(a, g, shapes[wanted["weight"]])
    if "bias" in wanted:
        out[wanted["bias"]] = Rowwise(g.sum(3).flatten(2))
    return out


def _cat(tensors: list[torch.Tensor], dim: int) -> torch.Tensor:
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors, dim)


def _spatial(t: torch.Tensor, m: nn.modules.conv._ConvNd) -> int:
    """Entries per channel of a convolution's record (K, r, [n,] C, *spatial)."""
    return math.prod(t.shape[t.dim() - len(m.kernel_size):])


def _conv_weight_rows(m: nn.modules.conv._ConvNd, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Each row's weight gradient of one call of a convolution, (K, r, *weight): the weight
    gradient of one grouped convolution whose groups are the rows (Opacus's and vmap's trick),
    the call's samples n its batch. x (K, r, [n,] C_in, *spatial), g (K, r, [n,] C_out, *spatial)."""
    k, r = x.shape[:2]
    dims = len(m.kernel_size)
    xs = x.reshape(k * r, -1, m.in_channels, *x.shape[x.dim() - dims:]).transpose(0, 1)
    gs = g.reshape(k * r, -1, m.out_channels, *g.shape[g.dim() - dims:]).transpose(0, 1)
    n = xs.shape[0]
    xs = xs.reshape(n, k * r * m.in_channels, *xs.shape[3:])
    gs = gs.reshape(n, k * r * m.out_channels, *gs.shape[3:])
    padding = (0,) * dims if isinstance(m.padding, str) else m.padding
    weight = torch.nn.grad.conv1d_weight if dims == 1 else torch.nn.grad.conv2d_weight
    w = weight(xs, (k * r * m.out_channels, *m.weight.shape[1:]), gs, m.stride, padding, m.dilation,
               k * r * m.groups)
    return w.reshape(k, r, *m.weight.shape)

