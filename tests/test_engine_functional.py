"""Any nn.Module packed (torch.func): configs independent of their pack, the built-in MLP
through the functional path equal to the hand-packed one, per-sample clipping equal to a
per-row loop for both chains, and what cannot be packed refused by name."""

import numpy as np
import pytest
import torch
from torch import nn

from fairdp import _rng
from fairdp.engine import Architecture, ModelSpec, PackedModel
from fairdp.engine._functional import FunctionalPack, build_instances, mlp, packing_problems
from fairdp.engine._packed import PackedMLP

D_IN = 6


def _streams(names):
    return _rng.PackStream.from_names(names)


class SmallCNN(nn.Module):
    """A user's module: rows of 16 features seen as 4 x 4 images, a convolution, dropout, a head."""

    def __init__(self, d_in, d_out, channels=3):
        super().__init__()
        self.conv = nn.Conv2d(1, channels, 3, padding=1)
        self.norm = nn.GroupNorm(1, channels)
        self.drop = nn.Dropout(0.3)
        self.head = nn.Linear(channels * d_in, d_out)

    def forward(self, x):
        h = self.norm(torch.relu(self.conv(x.view(-1, 1, 4, 4))))
        return self.head(self.drop(h.flatten(1)))


def _cnn_pack(names, dtype=torch.float64):
    return FunctionalPack(build_instances(lambda: SmallCNN(16, 2), _streams([f"{n}/init" for n in names]),
                                          device="cpu", dtype=dtype))


def test_a_config_gets_the_same_weights_and_outputs_in_a_pack_as_alone():
    names = ["a", "b", "c"]
    pack = _cnn_pack(names)
    x = torch.randn(10, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    out = pack(x, _streams([f"{n}/dropout" for n in names]))
    assert out.shape == (3, 10, 2)
    for i, n in enumerate(names):
        alone = _cnn_pack([n])
        for name in pack.names:
            torch.testing.assert_close(alone.params[name.replace(".", "__")][0],
                                       pack.params[name.replace(".", "__")][i], rtol=0, atol=0)
        # to rounding: vmap batches the convolution of 3 configs with other kernels than of one
        np.testing.assert_allclose(alone(x, _streams([f"{n}/dropout"]))[0].detach().numpy(),
                                   out[i].detach().numpy(), rtol=1e-12, atol=1e-12)
    # dropout draws differ between configs and between calls, and evaluation draws none
    assert not torch.equal(out[0], out[1])
    evaluated = pack(x)
    torch.testing.assert_close(evaluated, pack(x), rtol=0, atol=0)


def test_each_configs_dropout_mask_is_its_own_streams_in_a_pack_and_alone():
    """Dropout alone, on ones: the masks themselves, bit for bit."""
    class Scale(nn.Module):  # a parameter of ones, then dropout: the output is the mask
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(8))
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(x * self.w)

    def pack(names):
        return FunctionalPack(build_instances(Scale, _streams(names), device="cpu", dtype=torch.float32))

    names = ["a", "b", "c"]
    ones = torch.ones(50, 8)
    masks = pack(names)(ones, _streams(names)).detach()
    assert set(masks.unique().tolist()) == {0.0, 2.0}
    for i, n in enumerate(names):
        np.testing.assert_array_equal(pack([n])(ones, _streams([n]))[0].detach().numpy(), masks[i].numpy())
    assert not torch.equal(masks[0], masks[1])
    assert 0.4 < (masks == 0).float().mean() < 0.6
    with pytest.raises(ValueError, match="no parameters"):
        FunctionalPack([nn.Dropout(0.5)])


def test_a_configs_dropout_mask_is_the_hand_packed_layers_mask():
    """The built-in MLP through the functional path (weights copied from the hand-packed
    pack) computes what the hand-packed layers compute, dropout draws included."""
    k, sizes = 3, [D_IN, 8, 5]
    hand = PackedMLP(_streams([f"c{i}/init" for i in range(k)]), sizes, dropout=0.25, activate_last=True,
                     dtype=torch.float64)
    instances = [mlp(sizes, 0.25, True).double() for _ in range(k)]
    for i, inst in enumerate(instances):
        linears = [m for m in inst if isinstance(m, nn.Linear)]
        for lin, layer in zip(linears, hand.layers):
            lin.weight.data.copy_(layer.weight[i].T)
            lin.bias.data.copy_(layer.bias[i, 0])
    functional = FunctionalPack(instances)
    x = torch.randn(7, D_IN, dtype=torch.float64)
    drop = [f"c{i}/dropout" for i in range(k)]
    torch.testing.assert_close(functional(x, _streams(drop)), hand(x, _streams(drop)), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(functional(x), hand(x), rtol=1e-12, atol=1e-12)


def _models(kind, k=2, d=16, dtype=torch.float64):
    """A PackedModel of ModelSpec() whose per-sample chain is hand-packed or functional."""
    init = _streams([f"m{i}/init" for i in range(k)])
    arch = Architecture(encoder=(12, 8), classifier=(), adversary=(), dropout=0.0)
    models = {"hand": None, "mlp": {"classifier": lambda i, o: mlp([i, o], 0.0, False)},
              "cnn": {"encoder": lambda i, o: nn.Sequential(SmallCNN(i, o), nn.ReLU())}}[kind]
    return PackedModel(ModelSpec(), arch, d, 2, 2, init, device="cpu", dtype=dtype, models=models)


def _row_grads(model, x, cot):
    """Each row's gradient of <cot[k, z], logits_k(x_z)> by autograd, one row at a time:
    (rows, {parameter: (K, *shape)})."""
    out = []
    for z in range(x.shape[0]):
        model.zero_grad()
        (model(x[z:z + 1]) * cot[:, z:z + 1]).sum().backward()
        out.append([p.grad.clone() for p in model.parameters()])
    return out


@pytest.mark.parametrize("kind", ["hand", "mlp", "cnn"])
@pytest.mark.parametrize("per_layer", [False, True], ids=["flat", "per_layer"])
def test_clipped_sum_and_plain_term_equal_a_per_row_loop(kind, per_layer):
    model = _models(kind)
    assert model.path == ("hand-packed" if kind == "hand" else "functional")
    chain = model.per_sample_chain()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(9, 16, dtype=torch.float64, generator=g)
    logits, trace = chain.forward_traced(x)
    torch.testing.assert_close(logits, model(x))
    unit = torch.randn(2, 9, 2, dtype=torch.float64, generator=g)
    row_scale = torch.rand(2, 9, dtype=torch.float64, generator=g) + 0.5
    plain_scale = torch.rand(2, 4, dtype=torch.float64, generator=g)
    weight = torch.randn(2, 9, dtype=torch.float64, generator=g)
    weight[1, 3] = 0.0  # a row that does not count
    clip = torch.tensor([0.05, 3.0], dtype=torch.float64)
    for p in model.parameters():
        p.grad = None
    # flat clipping is what add_clipped does unless told (DP-SGD's and PF-LD's default)
    counts = chain.add_clipped(trace, unit, row_scale, weight, clip, None, None, plain_scale=plain_scale,
                               **({"per_layer": True} if per_layer else {}))
    got = [p.grad.clone() for p in model.parameters()]

    rows = _row_grads(model, x, unit * row_scale.unsqueeze(2))
    plain = _row_grads(model, x[:4], unit[:, :4] * plain_scale.unsqueeze(2))
    params = list(model.parameters())
    # the layers per-layer clipping bounds one by one: a module's weight and bias together
    groups = [[0, 1], [2, 3], [4, 5]] if kind == "hand" else \
        [[chain.names.index(n) for n in group] for group in chain.layer_groups()]
    expected = [torch.zeros_like(p) for p in params]
    exceeded = torch.zeros(2, dtype=torch.long)
    for z, grads in enumerate(rows):
        sq = [g_.flatten(1).pow(2).sum(1) for g_ in grads]
        norm = torch.sqrt(sum(sq))
        exceeded += ((norm > clip) & (weight[:, z] != 0)).long()
        for group in groups:
            bound, n = (clip / len(groups) ** 0.5, torch.sqrt(sum(sq[i] for i in group))) if per_layer else (clip, norm)
            factor = torch.clamp(bound / n, max=1.0) * weight[:, z]
            for i in group:
                expected[i] -= grads[i] * factor.view(-1, *[1] * (grads[i].dim() - 1))
    for grads in plain:
        for i, g_ in enumerate(grads):
            expected[i] += g_
    for e, g_ in zip(expected, got):
        torch.testing.assert_close(g_, e, rtol=1e-9, atol=1e-12)
    assert counts.tolist() == [exceeded.tolist(), [9, 8]]
    assert counts[0, 0] > 0 and counts[0, 1] < 8  # the bounds chosen clip some rows, not every row


@pytest.mark.parametrize("kind", ["hand", "cnn"])
def test_noise_has_the_requested_std_per_entry_and_is_independent_per_config(kind):
    model = _models(kind, d=16)
    chain = model.per_sample_chain()
    x = torch.randn(4, 16, dtype=torch.float64)
    logits, trace = chain.forward_traced(x)
    std = torch.tensor([0.5, 2.0], dtype=torch.float64)
    for p in model.parameters():
        p.grad = None
    # no signal: weight 0 everywhere, so every entry of .grad is noise
    chain.add_clipped(trace, torch.ones_like(logits), None, torch.zeros(2, 4, dtype=torch.float64),
                      torch.ones(2, dtype=torch.float64), std, _streams(["n0", "n1"]))
    noise = torch.cat([p.grad.flatten(1) for p in model.parameters()], dim=1)  # (K, P)
    n = noise.shape[1]
    assert n > 150
    for k in range(2):
        # the sample std of n normal draws is within 5 of its standard errors (sigma / sqrt(2n))
        assert abs(noise[k].std().item() - std[k].item()) < 5 * std[k].item() / (2 * n) ** 0.5
    assert abs(np.corrcoef(noise[0].numpy(), noise[1].numpy())[0, 1]) < 5 / n ** 0.5


def test_what_cannot_be_packed_is_named_with_its_layer():
    class WithNorms(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.AlphaDropout(0.1))
            self.inst = nn.InstanceNorm1d(4, track_running_stats=True)
            self.ok = nn.Sequential(nn.LayerNorm(4), nn.Dropout(0.1))

    problems = packing_problems(WithNorms())
    assert [p.split(" ")[0] for p in problems] == ["body.1", "body.2", "inst"]
    assert "BatchNorm1d" in problems[0] and "per-sample clipping bounds nothing" in problems[0]
    with pytest.raises(ValueError, match=r"cannot pack this model: body\.1 \(BatchNorm1d\)"):
        FunctionalPack([WithNorms(), WithNorms()])
    assert packing_problems(SmallCNN(16, 2)) == []


def test_a_factory_that_returns_no_module_is_refused():
    with pytest.raises(TypeError, match="returned int, not a torch.nn.Module"):
        build_instances(lambda: 3, _streams(["a"]), device="cpu", dtype=torch.float32)


class Shifted(nn.Module):
    """A user's layer holding a constant buffer (stacked per config like the parameters)."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.lin = nn.Linear(d_in, d_out)
        self.register_buffer("shift", torch.linspace(-1.0, 1.0, d_in))

    def forward(self, x):
        return self.lin(x - self.shift)


def _shifted_pack(k=2):
    factory = lambda: nn.Sequential(Shifted(4, 6), nn.Tanh(), nn.Linear(6, 2))  # noqa: E731
    instances = build_instances(factory, _streams([f"sh{i}/init" for i in range(k)]), device="cpu",
                                dtype=torch.float64)
    return instances, FunctionalPack(instances)


def test_rows_per_config_and_a_buffer_are_clipped_as_each_configs_module_row_by_row():
    """Each config its own rows (K, R, d), as DP-SGD's and PF-LD's Poisson samples are, through a
    module with a buffer, gradients of norm below 1 around the clip bounds: the clipped sum and
    the plain term are those of each config's own module, row by row, by autograd."""
    instances, pack = _shifted_pack()
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 7, 4, dtype=torch.float64, generator=g)
    unit = torch.randn(2, 7, 2, dtype=torch.float64, generator=g) * 0.05
    row_scale = torch.rand(2, 7, dtype=torch.float64, generator=g) + 0.5
    plain_scale = torch.rand(2, 3, dtype=torch.float64, generator=g)
    weight = torch.randn(2, 7, dtype=torch.float64, generator=g)
    clip = torch.tensor([0.01, 0.03], dtype=torch.float64)
    out, trace = pack.forward_traced(x)
    counts = pack.add_clipped(trace, unit, row_scale, weight, clip, None, None, plain_scale=plain_scale)
    expected = {n: torch.zeros_like(pack.params[n.replace(".", "__")]) for n in pack.names}
    norms = torch.zeros(2, 7, dtype=torch.float64)
    for k, module in enumerate(instances):
        for z in range(7):
            for scale, clipped in ((row_scale[k, z], True), (plain_scale[k, z] if z < 3 else None, False)):
                if scale is None:
                    continue
                module.zero_grad()
                row_out = module(x[k, z:z + 1])
                torch.testing.assert_close(out[k, z], row_out[0].detach(), rtol=1e-12, atol=1e-12)
                (row_out[0] * unit[k, z] * scale).sum().backward()
                grads = dict(module.named_parameters())
                if clipped:
                    norms[k, z] = torch.sqrt(sum(p.grad.pow(2).sum() for p in grads.values()))
                    factor = -weight[k, z] * torch.clamp(clip[k] / norms[k, z], max=1.0)
                else:
                    factor = 1.0
                for n, p in grads.items():
                    expected[n][k] += factor * p.grad
    assert ((norms > clip.unsqueeze(1)) & (norms < 1)).any()  # bounds that bind on gradients of norm below 1
    for n in pack.names:
        torch.testing.assert_close(pack.params[n.replace(".", "__")].grad, expected[n], rtol=1e-9, atol=1e-13)
    assert counts.tolist() == [((norms > clip.unsqueeze(1)) & (weight != 0)).sum(1).tolist(), [7, 7]]


@pytest.mark.parametrize("rows_per_chunk", [1, 3])
def test_rows_are_clipped_in_chunks_that_fit_the_per_sample_budget_with_the_same_sum(monkeypatch, rows_per_chunk):
    """K x rows x parameters per-sample gradients at most PER_SAMPLE_BYTES, counted in the larger
    of the clipped sums' and the cotangent's bytes (here float32 sums of float64 gradients: 8): as
    many rows a chunk as fit, the last what is left, and the sum of one chunk. The materialised
    path (``ghost=False``); the ghost path's chunks: tests/test_engine_ghost.py."""
    from fairdp.engine import _functional

    instances, pack = _shifted_pack()
    g = torch.Generator().manual_seed(6)
    x = torch.randn(10, 4, dtype=torch.float64, generator=g)
    unit = torch.randn(2, 10, 2, dtype=torch.float64, generator=g)
    weight = torch.randn(2, 10, dtype=torch.float32, generator=g)
    clip = torch.tensor([0.2, 1.0])

    def clipped_sum():
        for p in pack.parameters():
            p.grad = None
        counts = pack.add_clipped(x, unit, None, weight, clip, None, None, ghost=False)
        return torch.cat([p.grad.flatten() for p in pack.parameters()]), counts

    whole, whole_counts = clipped_sum()
    per_row = sum(p[0].numel() for p in pack.params.values()) * 8
    monkeypatch.setattr(_functional, "PER_SAMPLE_BYTES", int(2 * per_row * (rows_per_chunk + 0.5)))
    chunks = []
    inner = pack.per_sample_grads
    monkeypatch.setattr(pack, "per_sample_grads", lambda rows, cot: (chunks.append(cot.shape[1]), inner(rows, cot))[1])
    chunked, chunked_counts = clipped_sum()
    assert chunks == [rows_per_chunk] * (10 // rows_per_chunk) + ([10 % rows_per_chunk] if 10 % rows_per_chunk else [])
    torch.testing.assert_close(chunked, whole, rtol=1e-6, atol=1e-7)
    assert chunked_counts.tolist() == whole_counts.tolist()


def test_a_functional_row_exactly_at_the_clip_bound_is_neither_scaled_nor_counted():
    """One config of nn.Linear(2, 2), inputs 0 (only the bias has a gradient: the cotangent):
    row 0 has norm 5 = C and passes unchanged, row 1 (norm 10) has weight 0 and counts nowhere,
    row 2 (norm 10, weight 2) is clipped to 5 and counted. Zero noise is drawn and added."""
    pack = FunctionalPack(build_instances(lambda: nn.Linear(2, 2), _streams(["edge/init"]), device="cpu",
                                          dtype=torch.float64))
    unit = torch.tensor([[[3.0, 4.0], [6.0, 8.0], [6.0, 8.0]]], dtype=torch.float64)
    counts = pack.add_clipped(torch.zeros(3, 2, dtype=torch.float64), unit, None,
                              torch.tensor([[-1.0, 0.0, -2.0]], dtype=torch.float64),
                              torch.tensor([5.0], dtype=torch.float64), torch.zeros(1, dtype=torch.float64),
                              _streams(["edge/noise"]))
    assert pack.params["bias"].grad.tolist() == [[9.0, 12.0]] and not pack.params["weight"].grad.any()
    assert counts.tolist() == [[1], [2]]


def _tanh_pack(k=2):
    import torch
    from torch import nn

    from fairdp.engine import FunctionalPack

    torch.manual_seed(0)
    return FunctionalPack([nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 2)) for _ in range(k)])


@pytest.mark.parametrize("per_layer", [False, True])
def test_extra_rows_enter_the_clipped_sum_as_the_rows_they_are(per_layer):
    """The functional pack's hook for given gradients: rows whose per-sample gradients are given
    (extra_rows) are clipped, weighted, counted and noised exactly as the same rows given as
    inputs; the step's one noise draw is unchanged."""
    import torch

    from fairdp._rng import PackStream

    pack = _tanh_pack()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(9, 5, generator=gen) * 3
    unit = torch.randn(2, 9, 2, generator=gen)
    weight = torch.rand(2, 9, generator=gen) - 0.3
    clip, noise = torch.tensor([0.5, 0.8]), torch.tensor([0.2, 0.1])
    given = pack.per_sample_grads(x[6:], unit[:, 6:])
    out = []
    for extra in (False, True):
        for p in pack.parameters():
            p.grad = None
        gens = PackStream.from_names(["a", "b"], "cpu")
        if extra:
            counts = pack.add_clipped(x[:6], unit[:, :6], None, weight[:, :6], clip, noise, gens, per_layer=per_layer,
                                      extra_rows=(given, weight[:, 6:]))
        else:
            counts = pack.add_clipped(x, unit, None, weight, clip, noise, gens, per_layer=per_layer)
        out.append((counts, [p.grad.clone() for p in pack.parameters()]))
    (counts_rows, rows), (counts_given, by_hook) = out
    np.testing.assert_array_equal(counts_given, counts_rows)
    assert counts_rows[0].min() > 0 and counts_rows[1].tolist() == [9, 9]  # some rows clipped, all weighted
    for a, b in zip(rows, by_hook):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def _hand_and_functional_mlp(k=2, sizes=(D_IN, 6, 3)):
    """The built-in MLP hand-packed and through a functional pack, with the same weights."""
    from fairdp.engine._per_sample import HandPackedChain

    hand = PackedMLP(_streams([f"c{i}/init" for i in range(k)]), list(sizes), dropout=0.0, activate_last=False,
                     dtype=torch.float64)
    instances = [mlp(list(sizes), 0.0, False).double() for _ in range(k)]
    for i, inst in enumerate(instances):
        for lin, layer in zip([m for m in inst if isinstance(m, nn.Linear)], hand.layers):
            lin.weight.data.copy_(layer.weight[i].T)
            lin.bias.data.copy_(layer.bias[i, 0])
    return HandPackedChain(hand.layers), FunctionalPack(instances)


def test_the_noise_of_a_linear_weight_is_the_hand_packed_layers_entry_for_entry():
    """On either path one config's noise is one draw for all its parameters, laid out as the
    hand-packed layers hold them ((in, out) weights, then the bias): the same stream gives the
    built-in MLP the same noise on the same weight entry, whichever path trains it."""
    hand, functional = _hand_and_functional_mlp()
    x = torch.randn(5, D_IN, dtype=torch.float64)
    grads = []
    for chain in (hand, functional):
        for p in chain.parameters():
            p.grad = None
        out, trace = chain.forward_traced(x)
        # rows weighted 0: every entry of .grad is the noise
        chain.add_clipped(trace, torch.ones_like(out), None, torch.zeros(2, 5, dtype=torch.float64),
                          torch.ones(2, dtype=torch.float64), torch.tensor([0.5, 2.0], dtype=torch.float64),
                          _streams(["n0", "n1"]))
        grads.append(chain)
    by_name = dict(functional.named_stacks())
    for i, layer in enumerate(hand.layers):
        weight, bias = by_name[f"{2 * i}.weight"], by_name[f"{2 * i}.bias"]
        torch.testing.assert_close(weight.grad.transpose(1, 2), layer.weight.grad, rtol=0, atol=0)
        torch.testing.assert_close(bias.grad, layer.bias.grad.squeeze(1), rtol=0, atol=0)
    assert hand.layers[0].weight.grad.abs().min() > 0


def test_add_clipped_adds_to_a_gradient_already_there():
    """``.grad`` already holding a gradient (another term of the step's objective) gets the
    clipped noisy sum added to it, on either path."""
    x = torch.randn(5, D_IN, dtype=torch.float64)
    for chain in _hand_and_functional_mlp():
        params = [p for _, p in chain.named_stacks()] if isinstance(chain, FunctionalPack) else \
            list(chain.parameters())
        out, trace = chain.forward_traced(x)
        args = (trace, torch.randn_like(out), None, torch.rand(2, 5, dtype=torch.float64),
                torch.ones(2, dtype=torch.float64), None, None)
        for p in params:
            p.grad = None
        chain.add_clipped(*args)
        alone = [p.grad.clone() for p in params]
        before = [torch.full_like(p, 0.25) for p in params]
        for p, b in zip(params, before):
            p.grad = b.clone()
        chain.add_clipped(*args)
        for p, a, b in zip(params, alone, before):
            torch.testing.assert_close(p.grad, a + b, rtol=1e-12, atol=1e-12)
