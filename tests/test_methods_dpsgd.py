"""DP-SGD (Tran et al.'s P): clipped per-row gradients, noise of the calibrated scale, the accountant's eps."""

import numpy as np
import pytest
import torch

from fairdp import _rng
from fairdp.data import load_dataset
from fairdp.engine import ModelSpec, PackedModel, TrainSettings
from fairdp.methods import dpsgd, get_method
from fairdp.methods._lagrangian import ARCHITECTURE
from fairdp.methods.dpsgd import dpsgd_gradients
from fairdp.privacy import calibrate_dpsgd_sigma, gaussian_epsilon
from fairdp.privacy._shared import PFLD_DELTA


def _model(k=2, d=6, dtype=torch.float64):
    gens = _rng.make_generators(list(range(k)), "cpu")
    return PackedModel(ModelSpec(), ARCHITECTURE, d, 2, 2, gens, device="cpu", dtype=dtype)


def _batch(b=40, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, d, generator=g, dtype=torch.float64), torch.randint(0, 2, (b,), generator=g)


def test_without_noise_or_clipping_the_gradient_is_the_mean_loss_gradient():
    model = _model()
    xb, yb = _batch()
    counts = dpsgd_gradients(model.per_sample_chain(), xb, yb, torch.full((2,), 1e12, dtype=torch.float64),
                             torch.zeros(2, dtype=torch.float64), _rng.make_generators([5, 6], "cpu"))
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    logits = model(xb)
    torch.nn.functional.cross_entropy(logits.reshape(-1, 2), yb.repeat(2), reduction="none").view(2, -1).mean(1).sum().backward()
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g, p.grad)
    assert (counts[0] == 0).all() and (counts[1] == 40).all()


def test_with_a_tiny_clip_every_row_is_clipped_and_the_step_is_the_mean_of_clipped_row_gradients():
    model = _model()
    xb, yb = _batch()
    c = torch.tensor([1e-3, 5e-3], dtype=torch.float64)
    counts = dpsgd_gradients(model.per_sample_chain(), xb, yb, c, torch.zeros(2, dtype=torch.float64), _rng.make_generators([5, 6], "cpu"))
    assert (counts[0] == 40).all()
    got = [p.grad.clone() for p in model.parameters()]
    expected = [torch.zeros_like(g) for g in got]
    for z in range(len(yb)):  # explicit per-row gradients, clipped per config
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(xb[z:z + 1]).reshape(-1, 2), yb[z:z + 1].repeat(2),
                                          reduction="sum").backward()
        norm = torch.sqrt(sum(p.grad.pow(2).flatten(1).sum(1) for p in model.parameters()))
        scale = torch.clamp(c / norm, max=1.0)
        for e, p in zip(expected, model.parameters()):
            e += p.grad * scale.view(-1, *[1] * (p.dim() - 1)) / len(yb)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("sigma,clip", [(1.0, 1.0), (3.0, 0.5)])
def test_noise_has_std_sigma_times_c_over_b(sigma, clip):
    """With the clip far below every row's gradient norm the signal is negligible, so the
    gradient is the noise: N(0, (sigma C / B)^2) per parameter entry, independent per config."""
    model = _model(k=2, d=50)
    xb, yb = _batch(b=64, d=50)
    tiny_signal_clip = torch.full((2,), clip, dtype=torch.float64)
    dpsgd_gradients(model.per_sample_chain(), xb, yb, tiny_signal_clip * 1e-9, torch.full((2,), sigma * 1e9, dtype=torch.float64),
                    _rng.make_generators([7, 8], "cpu"))
    noise = torch.cat([p.grad.flatten(1) for p in model.parameters()], dim=1)  # (K, P)
    expected = sigma * clip / 64
    assert noise.shape[1] > 5000
    np.testing.assert_allclose(noise.std(dim=1).numpy(), expected, rtol=0.05)
    assert abs(float(torch.corrcoef(noise)[0, 1])) < 0.05


def test_calibration_meets_the_target_and_the_pack_reports_the_accountants_eps():
    for eps in (0.5, 2.0, 8.0):
        sigma = calibrate_dpsgd_sigma(eps, 1e-5, 300, 1500, 2)
        got = gaussian_epsilon(sigma, 2 * 5, 300 / 1500, 1e-5)
        assert 0.95 * eps <= got <= eps
    assert calibrate_dpsgd_sigma(0.5, 1e-5, 300, 1500, 2) > calibrate_dpsgd_sigma(8.0, 1e-5, 300, 1500, 2)
    data = load_dataset("synthetic", rows=1500, features=8, seed=3)
    configs = [{"eps": 1.0, "clip_primal": 1.0}, {"eps": 8.0, "clip_primal": 10.0}]
    res = get_method("dpsgd").train_pack(data, configs, seed=0, settings=TrainSettings(epochs=2, batch_size=300))
    for cfg, (eps, delta) in zip(configs, res.privacy):
        assert 0.95 * cfg["eps"] <= eps <= cfg["eps"] and delta == PFLD_DELTA
    assert res.predictions["test"].shape == (2, len(data.splits["test"]))


def test_a_training_step_adds_noise_of_std_sigma_c_over_b(monkeypatch):
    """DP-SGD's own step inside the engine's loop, not the building block: from identical
    parameters and one Poisson sample (fixed here, so that only the noise streams differ), two
    noise streams move each entry by lr * N(0, (sigma C / B)^2) apart, so the difference has
    std sqrt(2) lr sigma C / B with the accountant-calibrated sigma and B the expected size."""
    from fairdp.engine.contract import Batch, PackContext
    from fairdp.methods import RunInfo

    sample = (torch.arange(280).unsqueeze(0), torch.ones(1, 280, dtype=torch.bool))
    monkeypatch.setattr(dpsgd, "poisson_sample", lambda *args, **kwargs: sample)
    data = load_dataset("synthetic", rows=1500, features=8, seed=3)
    method = get_method("dpsgd")
    settings = method.effective_settings(TrainSettings(epochs=2, batch_size=300, dtype="float64"))
    config = {"eps": 1.0, "clip_primal": 2.0}
    steps = [method.make_step(PackContext(data, [config], [f"stream-{i}"], 0, settings, ARCHITECTURE,
                                          torch.device("cpu"))) for i in range(2)]
    steps[1].model.load_state_dict(steps[0].model.state_dict())
    train = steps[0].ctx.split("train")
    idx = torch.arange(300)
    for step in steps:
        step.update(Batch(idx, train.X[idx], train.y[idx], train.s[idx]), step.optimizer())
    lr = steps[0].optimizer().param_groups[0]["lr"]
    diff = torch.cat([(p - q).detach().flatten() for p, q in zip(steps[0].model.parameters(),
                                                                    steps[1].model.parameters())]) / lr
    sigma = method.noise_multiplier(config, RunInfo.of(data, settings, 64))
    n = diff.numel()
    assert float(diff.std()) == pytest.approx(2 ** 0.5 * sigma * 2.0 / 300, rel=5 / (2 * n) ** 0.5)


def _step(data, config, name, batch_size=300):
    from fairdp.engine.contract import PackContext

    method = get_method("dpsgd")
    settings = method.effective_settings(TrainSettings(epochs=2, batch_size=batch_size, dtype="float64"))
    return method.make_step(PackContext(data, [config], [name], 0, settings, ARCHITECTURE, torch.device("cpu")))


def test_a_step_reads_its_own_poisson_sample_not_the_loops_minibatch():
    """The rows a step trains on are its own Poisson sample: two steps of one stream from one
    state give the same update whatever minibatch the loop hands them (garbage included)."""
    from fairdp.engine.contract import Batch

    data = load_dataset("synthetic", rows=1500, features=8, seed=3)
    steps = [_step(data, {"eps": 1.0, "clip_primal": 2.0}, "same") for _ in range(2)]
    train = steps[0].ctx.split("train")
    idx = torch.arange(300)
    steps[0].update(Batch(idx, train.X[idx], train.y[idx], train.s[idx]), steps[0].optimizer())
    junk = torch.full((300, train.X.shape[1]), 1e6, dtype=train.X.dtype)
    steps[1].update(Batch(idx, junk, 1 - train.y[idx], train.s[idx]), steps[1].optimizer())
    for p, q in zip(steps[0].model.parameters(), steps[1].model.parameters()):
        assert torch.equal(p, q)


def test_the_steps_samples_have_rate_b_over_n_and_the_sum_is_divided_by_b(monkeypatch):
    """Over many steps the sample sizes are Binomial(n, B / n) (mean B, variance B (1 - B / n)),
    and the step divides by B, not by the size it drew."""
    from fairdp.engine.contract import Batch

    data = load_dataset("synthetic", rows=1500, features=8, seed=3)
    step = _step(data, {"eps": 1.0, "clip_primal": 1e12}, "rate", batch_size=90)
    n, sizes, divisors = step.n, [], []
    real = dpsgd.dpsgd_gradients

    def spy(chain, xb, yb, clip, sigma, generators, valid=None, expected_rows=None, per_layer=False):
        sizes.append(int(valid.sum()))
        divisors.append(expected_rows)
        return real(chain, xb, yb, clip, sigma * 0, generators, valid=valid, expected_rows=expected_rows,
                    per_layer=per_layer)

    monkeypatch.setattr(dpsgd, "dpsgd_gradients", spy)
    idx = torch.arange(90)
    train = step.ctx.split("train")
    for _ in range(400):
        step.update(Batch(idx, train.X[idx], train.y[idx], train.s[idx]), step.optimizer())
    q = 90 / n
    sizes = np.array(sizes)
    assert abs(sizes.mean() - 90) < 4 * np.sqrt(90 * (1 - q) / len(sizes))
    assert 0.8 < sizes.var() / (90 * (1 - q)) < 1.25
    assert all(d == pytest.approx(90.0) for d in divisors)


@pytest.mark.parametrize("name", ["dpsgd", "pfld"])
def test_train_clipping_per_layer_reaches_every_clipped_step(name, monkeypatch):
    """``train.clipping: per_layer`` is what each of the method's steps clips by (the per-layer
    arithmetic itself is checked against a per-row loop in tests/test_engine_functional.py), and
    it changes what trains; left out, every step clips the whole gradient."""
    from fairdp.engine._per_sample import HandPackedChain

    seen = []
    real = HandPackedChain.add_clipped

    def spy(self, *args, per_layer=False, **kwargs):
        seen.append(per_layer)
        return real(self, *args, per_layer=per_layer, **kwargs)

    monkeypatch.setattr(HandPackedChain, "add_clipped", spy)
    data = load_dataset("synthetic", rows=600, features=6, seed=4)
    method = get_method(name)
    # a bound that clips; PF-LD's private term weighs nothing before its first dual step
    config = {**method.expand(method.paper_grid(data.name))[0], "eps": 4.0, "clip_primal": 0.1}
    outputs = {}
    for clipping in (None, "per_layer"):
        seen.clear()
        settings = TrainSettings(epochs=2, batch_size=128, dtype="float64", clipping=clipping)
        outputs[clipping] = method.train_pack(data, [config], seed=0, settings=settings).representations["test"]
        assert seen and set(seen) == {clipping == "per_layer"}
    assert not np.array_equal(outputs[None], outputs["per_layer"])
