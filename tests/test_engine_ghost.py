"""Ghost clipping on the functional path: for modules built from every covered layer (nn.Linear
on rows and on sequences, Conv1d and Conv2d with stride, padding, dilation and groups,
LayerNorm, GroupNorm, Embedding with and without padding_idx, the digits CNN) and modules
with parameters it leaves to the materialised path (a bare nn.Parameter, MultiheadAttention, a
weight read outside its layer), ``add_clipped``'s clipped, weighted, noised sum and counts equal
the materialised path's, in float64, to rounding."""

import functools
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from fairdp import _rng
from fairdp.engine._functional import FunctionalPack, build_instances

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "models.py"


@functools.cache  # one module: its classes are the same for every instance a pack stacks
def _examples():
    spec = importlib.util.spec_from_file_location("fairdp_example_models", EXAMPLES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Tokens(nn.Module):
    """Rows of T token ids (as floats, the pack's input dtype) -> embeddings -> a linear head per row."""

    def __init__(self, vocab=7, dim=4, t=5, padding_idx=None):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=padding_idx)
        self.head = nn.Linear(t * dim, 3)

    def forward(self, x):
        return self.head(self.embed(x.long()).flatten(1))


class Seq(nn.Module):
    """Rows of (T, d): a Linear on every position, LayerNorm, a Linear read twice (two calls)."""

    def __init__(self, d=5, h=24):  # wide enough that the ghost identity is the cheaper norm
        super().__init__()
        self.inp = nn.Linear(d, h)
        self.norm = nn.LayerNorm(h)
        self.mix = nn.Linear(h, h)
        self.out = nn.Linear(h, 2)

    def forward(self, x):
        h = self.norm(torch.tanh(self.inp(x)))
        h = torch.tanh(self.mix(torch.tanh(self.mix(h))))
        return self.out(h.mean(1))


class Conv1(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 3, stride=2, padding=1, dilation=2, groups=2)
        self.norm = nn.GroupNorm(2, 4)
        self.head = nn.Linear(4 * 4, 2)

    def forward(self, x):  # rows of 2 x 9
        return self.head(torch.tanh(self.norm(self.conv(x.view(-1, 2, 9)))).flatten(1))


class Conv2(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(2, 4, 3, stride=(2, 1), padding=(1, 2), dilation=(1, 2))
        self.b = nn.Conv2d(4, 4, 2, groups=4, bias=False, padding="valid")
        self.head = nn.Linear(4 * 2 * 5, 2)

    def forward(self, x):  # rows of 2 x 5 x 6
        h = torch.tanh(self.a(x.view(-1, 2, 5, 6)))
        return self.head(torch.tanh(self.b(h)).flatten(1))


class ConvWide(nn.Module):
    """Many channels over few positions: the norms by the ghost identity over unfolded patches
    (the cheaper there), where Conv1 and Conv2 take each row's gradient from a grouped convolution."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(6, 8, 3, groups=2)
        self.b = nn.Conv2d(4, 6, 2)
        self.head = nn.Linear(8 * 2 + 6 * 4, 2)

    def forward(self, x):  # rows of 6 x 4, then of 4 x 3 x 3
        h = torch.tanh(self.a(x[:, :24].view(-1, 6, 4))).flatten(1)
        return self.head(torch.cat([h, torch.tanh(self.b(x[:, 24:].view(-1, 4, 3, 3))).flatten(1)], 1))


class Bare(nn.Module):
    """A bare parameter read in forward and MultiheadAttention: both left to the materialised path."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 4))
        self.lin = nn.Linear(4, 4)
        self.attn = nn.MultiheadAttention(4, 2, batch_first=True)
        self.out = nn.Linear(4, 2)

    def forward(self, x):  # rows of 3 x 4
        h = torch.tanh(self.lin(x * self.scale))
        h, _ = self.attn(h, h, h)
        return self.out(h.mean(1))


class Tied(nn.Module):
    """An encoder's weight read again outside its layer (a tied decoder, a penalty-like use)."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(5, 4)
        self.dec = nn.Linear(4, 3)

    def forward(self, x):
        h = torch.tanh(self.enc(x))
        return self.dec(h) + h @ self.enc.weight[:3, :4].T


class SharedModule(nn.Module):
    """One nn.Linear object reached under two names (its parameters named once): called twice."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = self.a
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        return self.out(torch.tanh(self.b(torch.tanh(self.a(x)))))


class TiedEmbedding(nn.Module):
    """An output layer tied to the embedding (weight shared by two modules, named once)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(6, 4)
        self.out = nn.Linear(4, 6, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, x):
        return self.out(torch.tanh(self.embed(x.long())).mean(1))


def _digits():
    return _examples().digits_cnn(64, 3, channels=4, dropout=0.1)


# name -> (factory, input row shape, integer inputs below, parameters left to the materialised path)
MODULES = {
    "mlp": (lambda: nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 7), nn.Tanh(), nn.Linear(7, 3)),
            (5,), None, set()),
    "sequence": (Seq, (4, 5), None, set()),
    "conv1d_groupnorm": (Conv1, (18,), None, set()),
    "conv2d": (Conv2, (60,), None, set()),
    "conv_wide": (ConvWide, (60,), None, set()),
    "layernorm": (lambda: nn.Sequential(nn.Linear(5, 6), nn.LayerNorm(6), nn.Tanh(), nn.Linear(6, 2)),
                  (5,), None, set()),
    "embedding": (Tokens, (5,), 7, set()),
    "embedding_padding": (lambda: Tokens(padding_idx=2), (5,), 7, set()),
    "digits_cnn": (_digits, (64,), None, set()),
    "fallback": (Bare, (3, 4), None, {"scale", "attn.in_proj_weight", "attn.in_proj_bias",
                                       "attn.out_proj.weight", "attn.out_proj.bias"}),
    "tied": (Tied, (5,), None, {"enc.weight"}),
    "shared_module": (SharedModule, (4,), None, set()),
    "tied_embedding": (TiedEmbedding, (5,), 6, {"embed.weight"}),
}


def _pack(name, k=3):
    factory, row, _, _ = MODULES[name]
    instances = build_instances(factory, _rng.PackStream.from_names([f"g{i}/init" for i in range(k)]),
                                device="cpu", dtype=torch.float64)
    return FunctionalPack(instances, shared_input_dims=1 + len(row))


def _inputs(name, rows, seed=0, k=3, nan_row=None, per_config=False):
    _, row, ints, _ = MODULES[name]
    g = torch.Generator().manual_seed(seed)
    shape = (k, rows, *row) if per_config else (rows, *row)
    x = torch.randint(0, ints, shape, generator=g).double() if ints else torch.randn(shape, dtype=torch.float64,
                                                                                       generator=g)
    if nan_row is not None and not ints:  # the row's gradient is NaN
        x[(slice(None),) * per_config + (nan_row,)] = float("nan")
    return x


def _both(pack, args, kwargs):
    """.grad and counts after add_clipped on the ghost and the materialised path."""
    out = []
    for ghost in (True, False):
        for p in pack.parameters():
            p.grad = None
        kw = {"noise_std": None, **kwargs}  # with noise: the same streams on both paths
        kw["generators"] = _rng.PackStream.from_names([f"n{i}" for i in range(pack.k)])
        counts = pack.add_clipped(*args, **kw, ghost=ghost)
        out.append((counts, {n: p.grad.clone() for n, p in pack.named_stacks()}))
    return out


def _assert_same(pack, args, kwargs, rtol=1e-10):
    (c_ghost, g_ghost), (c_mat, g_mat) = _both(pack, args, kwargs)
    np.testing.assert_array_equal(c_ghost, c_mat)
    for n in pack.names:
        scale = g_mat[n].abs().max().item() or 1.0
        assert torch.isfinite(g_ghost[n]).all(), n
        torch.testing.assert_close(g_ghost[n], g_mat[n], rtol=rtol, atol=rtol * scale, msg=n)
    return c_ghost, g_ghost


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("per_layer", [False, True])
@pytest.mark.parametrize("variant", ["plain", "scaled_noisy", "nan_row_extra", "per_config"])
def test_the_ghost_path_gives_the_materialised_clipped_sum(name, per_layer, variant):
    """Clip bounds of three sizes (one binds on every row, one on some, one on none), weights of
    both signs and some zero; with row_scale, plain_scale, noise from the same streams, extra
    rows given by their gradients, a row whose gradient is NaN, rows per config: the same .grad
    and counts on both paths, and the parameters left to the materialised path are those named."""
    pack = _pack(name)
    k, rows = pack.k, 6
    x = _inputs(name, rows, nan_row=2 if variant == "nan_row_extra" else None, per_config=variant == "per_config")
    out, trace = pack.forward_traced(x)
    g = torch.Generator().manual_seed(1)
    unit = torch.randn(out.shape, dtype=torch.float64, generator=g)
    weight = torch.randn(k, rows, dtype=torch.float64, generator=g)
    weight[:, 4] = 0
    clip = torch.tensor([1e-3, 0.3, 1e3], dtype=torch.float64)
    kwargs = {"per_layer": per_layer}
    row_scale = None
    if variant == "scaled_noisy":
        row_scale = torch.rand(k, rows, dtype=torch.float64, generator=g) + 0.5
        kwargs.update(plain_scale=torch.rand(k, 3, dtype=torch.float64, generator=g),
                      noise_std=torch.tensor([0.1, 0.0, 2.0], dtype=torch.float64))
    if variant == "nan_row_extra":
        extra_x = _inputs(name, 2, seed=3)
        kwargs["extra_rows"] = (pack.per_sample_grads(extra_x, torch.randn(k, 2, out.shape[-1], dtype=torch.float64,
                                                                           generator=g)),
                                torch.rand(k, 2, dtype=torch.float64, generator=g))
    counts, _ = _assert_same(pack, (trace, unit, row_scale, weight, clip), kwargs)
    assert set(pack.ghost_plan(trace).uncovered) == MODULES[name][3]
    nan = variant == "nan_row_extra" and not MODULES[name][2]
    extra = 2 if variant == "nan_row_extra" else 0
    assert counts[1].tolist() == [5 - nan + extra] * k  # row 4 weighs 0; a NaN row adds nothing
    if variant == "plain":
        assert counts[0].tolist()[0] == 5 and counts[0].tolist()[2] == 0  # C = 1e-3 binds everywhere, 1e3 nowhere


def test_a_weight_read_outside_its_layer_is_found_and_still_clipped():
    """enc.weight is read by enc and again in forward: ghost clipping would see only its use in
    enc, so it is found (ghost_plan) and left to the materialised path, whose autograd sees
    both; its clipped sum is the materialised one, and differs from the layer-only gradient."""
    pack = _pack("tied")
    x = _inputs("tied", 6)
    plan = pack.ghost_plan(x)
    assert plan.outside == ["enc.weight"] and "enc.weight" in plan.uncovered and "enc.bias" in plan.covered
    out, trace = pack.forward_traced(x)
    unit = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    args = (trace, unit, None, torch.ones(3, 6, dtype=torch.float64),
            torch.tensor([1e-3, 0.3, 1e3], dtype=torch.float64))
    _, grads = _assert_same(pack, args, {})
    # with the outside use ignored (enc.weight forced onto the ghost path) the sum is another:
    # detection is what keeps it right
    plan.covered.append("enc.weight")
    plan.uncovered.remove("enc.weight")
    try:
        for p in pack.parameters():
            p.grad = None
        pack.add_clipped(*args, None, None)
        wrong = dict(pack.named_stacks())["enc.weight"].grad
    finally:
        pack._ghost_plans.clear()
    assert not torch.allclose(wrong[2], grads["enc.weight"][2], rtol=1e-3)


def test_the_materialised_path_is_what_add_clipped_takes_when_told():
    """ghost=False calls per_sample_grads for every chunk; the default does not for a module
    ghost clipping covers whole."""
    pack = _pack("mlp")
    x = _inputs("mlp", 4)
    out, trace = pack.forward_traced(x)
    calls = []
    inner = pack.per_sample_grads
    pack.per_sample_grads = lambda *a: (calls.append(1), inner(*a))[1]
    args = (trace, torch.ones_like(out), None, torch.ones(3, 4, dtype=torch.float64), torch.ones(3, dtype=torch.float64),
            None, None)
    pack.add_clipped(*args)
    assert not calls
    pack.add_clipped(*args, ghost=False)
    assert calls


def _linear_or_conv(kind, a, b, c, kernel, stride, padding, dilation, groups):
    if kind == "linear":
        return lambda: nn.Sequential(nn.Linear(a, b), nn.Tanh(), nn.Linear(b, c)), (a,)
    if kind == "linear_sequence":
        return lambda: nn.Sequential(nn.Linear(a, b), nn.Tanh(), nn.Linear(b, c), nn.Flatten(1)), (kernel, a)
    length = (kernel - 1) * dilation + 6
    conv = nn.Conv1d if kind == "conv1d" else nn.Conv2d
    shape = (groups, length) if kind == "conv1d" else (groups, length, length - 1)

    def factory():
        return nn.Sequential(nn.Unflatten(1, shape), conv(groups, groups * b, kernel, stride=stride, padding=padding,
                                                            dilation=dilation, groups=groups), nn.Tanh(),
                             nn.Flatten(1))
    return factory, (int(np.prod(shape)),)


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(["linear", "linear_sequence", "conv1d", "conv2d"]),
       a=st.integers(1, 5), b=st.integers(1, 4), c=st.integers(1, 3), kernel=st.integers(1, 3),
       stride=st.integers(1, 2), padding=st.integers(0, 2), dilation=st.integers(1, 2), groups=st.integers(1, 2),
       rows=st.integers(1, 5), clip=st.floats(1e-3, 1e2), per_layer=st.booleans(), seed=st.integers(0, 2**16))
def test_random_linear_and_conv_layers_clip_as_the_materialised_path(kind, a, b, c, kernel, stride, padding, dilation,
                                                                      groups, rows, clip, per_layer, seed):
    factory, row = _linear_or_conv(kind, a, b, c, kernel, stride, padding, dilation, groups)
    torch.manual_seed(seed)
    pack = FunctionalPack([factory().double() for _ in range(2)], shared_input_dims=1 + len(row))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, *row, dtype=torch.float64, generator=g)
    out, trace = pack.forward_traced(x)
    unit = torch.randn(out.shape, dtype=torch.float64, generator=g)
    weight = torch.randn(2, rows, dtype=torch.float64, generator=g)
    clips = torch.tensor([clip, clip * 10], dtype=torch.float64)
    _assert_same(pack, (trace, unit, None, weight, clips), {"per_layer": per_layer}, rtol=1e-9)


@pytest.mark.parametrize("rows_per_chunk", [1, 4])
def test_ghost_rows_are_recorded_in_chunks_that_fit_the_per_sample_budget_with_the_same_sum(monkeypatch,
                                                                                            rows_per_chunk):
    """The ghost path's chunks hold K x rows x (recorded floats + uncovered parameters) at most
    PER_SAMPLE_BYTES: as many rows a chunk as fit, the last what is left, and the sum and counts
    of one chunk (here with a bare parameter materialised beside the recorded layers)."""
    from fairdp.engine import _functional  # the module whose budget is replaced

    pack = _pack("fallback")
    x = _inputs("fallback", 10)
    out, trace = pack.forward_traced(x)
    g = torch.Generator().manual_seed(4)
    args = (trace, torch.randn(out.shape, dtype=torch.float64, generator=g), None,
            torch.randn(3, 10, dtype=torch.float64, generator=g), torch.tensor([0.01, 0.1, 1.0], dtype=torch.float64),
            None, None)

    def clipped_sum():
        for p in pack.parameters():
            p.grad = None
        counts = pack.add_clipped(*args)
        return torch.cat([p.grad.flatten() for p in pack.parameters()]), counts

    whole, whole_counts = clipped_sum()
    plan = pack.ghost_plan(trace)
    per_row = (plan.row_floats + sum(pack.params[n.replace(".", "__")][0].numel() for n in plan.uncovered)) * 8
    monkeypatch.setattr(_functional, "PER_SAMPLE_BYTES", int(3 * per_row * (rows_per_chunk + 0.5)))
    chunks = []
    inner = pack._ghost_rows
    monkeypatch.setattr(pack, "_ghost_rows", lambda plan, rows, cot: (chunks.append(cot.shape[1]),
                                                                       inner(plan, rows, cot))[1])
    chunked, chunked_counts = clipped_sum()
    assert chunks == [rows_per_chunk] * (10 // rows_per_chunk) + ([10 % rows_per_chunk] if 10 % rows_per_chunk else [])
    torch.testing.assert_close(chunked, whole, rtol=1e-12, atol=1e-14)
    assert chunked_counts.tolist() == whole_counts.tolist()
