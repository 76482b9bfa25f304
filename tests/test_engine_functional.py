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
    counts = chain.add_clipped(trace, unit, row_scale, weight, clip, None, None, plain_scale=plain_scale,
                               per_layer=per_layer)
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
