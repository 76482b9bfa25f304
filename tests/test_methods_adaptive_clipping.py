"""DPSGD-Global-Adapt (Esipova et al. 2023, Alg. 2) and DPSGD-F (Xu et al. 2021; Esipova et al.'s
Alg. 4), measured: the per-row scaling and clipping against explicit per-row gradients, the
gradient noise and the counts' noise against their stated scales, Z's update and the group
bounds against the papers' formulas written out here, and the accounting against dp-accounting."""

import math

import dp_accounting
import numpy as np
import pytest
import torch
from dp_accounting.rdp import RdpAccountant
from hypothesis import given, settings
from hypothesis import strategies as st

from fairdp import _rng
from fairdp.data import load_dataset
from fairdp.engine import ModelSpec, PackedModel, TrainSettings
from fairdp.engine.contract import Batch, PackContext
from fairdp.errors import InputError
from fairdp.methods import RunInfo, dpsgd_f, dpsgd_global_adapt, get_method
from fairdp.methods._lagrangian import ARCHITECTURE
from fairdp.methods.dpsgd import cross_entropy_grad
from fairdp.privacy import calibrate_dpsgd_sigma, dpsgd_epsilon
from fairdp.privacy._shared import PFLD_DELTA

F64 = torch.float64


def _model(k=2, d=6):
    return PackedModel(ModelSpec(), ARCHITECTURE, d, 2, 2, _rng.make_generators(list(range(k)), "cpu"),
                       device="cpu", dtype=F64)


def _batch(b=40, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, d, generator=g, dtype=F64), torch.randint(0, 2, (b,), generator=g)


def _row_gradients(model, xb, yb):
    """Each row's gradient of its own cross-entropy, by autograd one row at a time: a list over
    rows of per-parameter tensors (K, ...), and the norms (B, K)."""
    grads, norms = [], []
    for z in range(len(yb)):
        model.zero_grad()
        k = next(model.parameters()).shape[0]
        torch.nn.functional.cross_entropy(model(xb[z:z + 1]).reshape(-1, 2), yb[z:z + 1].repeat(k),
                                          reduction="sum").backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        norms.append(torch.sqrt(sum(p.grad.pow(2).flatten(1).sum(1) for p in model.parameters())))
    model.zero_grad()
    return grads, torch.stack(norms)


def _traced(model, xb, yb):
    chain = model.per_sample_chain()
    logits, trace = chain.forward_traced(xb)
    return chain, trace, cross_entropy_grad(logits, yb).to(logits.dtype)


def _expected_sum(model, grads, scale):
    """sum over rows of scale[z] (K,) * g_z, per parameter."""
    out = [torch.zeros_like(p) for p in model.parameters()]
    for z, g in enumerate(grads):
        for e, gp in zip(out, g):
            e += gp * scale[z].view(-1, *[1] * (gp.dim() - 1))
    return out


# -- DPSGD-Global-Adapt: the per-row rule C0 g / max(||g||, Z) ------------------------------------

def test_global_adapt_scales_every_row_by_c0_over_max_of_its_norm_and_z():
    model = _model()
    xb, yb = _batch()
    grads, norms = _row_gradients(model, xb, yb)
    z = torch.quantile(norms, 0.5, dim=0)  # half the rows above Z, half below, per config
    c0 = torch.tensor([0.3, 0.05], dtype=F64)
    chain, trace, unit = _traced(model, xb, yb)
    rows = torch.ones(2, len(yb), dtype=F64)
    counts = dpsgd_global_adapt.global_adapt_gradients(chain, trace, unit, rows, c0, z, torch.zeros(2, dtype=F64),
                                                       40.0, _rng.make_generators([1, 2], "cpu"))
    scale = c0 / torch.maximum(norms, z)  # the paper's rule, per row and config
    expected = _expected_sum(model, grads, scale)
    for p, e in zip(model.parameters(), expected):
        torch.testing.assert_close(p.grad, e / 40)
    np.testing.assert_array_equal(counts[0], (norms > z).sum(0).numpy())
    np.testing.assert_array_equal(counts[1], [40, 40])
    # every row's contribution is within C0, the sensitivity the noise is scaled to
    assert bool((scale * norms <= c0 * (1 + 1e-12)).all())


def test_global_adapt_with_z_below_c0_keeps_every_row_within_c0():
    """Z may fall below C0 (the update does not stop it): C0 g / max(||g||, Z) then scales small
    rows up, and still no row's contribution exceeds C0."""
    model = _model()
    xb, yb = _batch()
    grads, norms = _row_gradients(model, xb, yb)
    z = norms.min(0).values * 0.5
    c0 = norms.max(0).values * 2
    chain, trace, unit = _traced(model, xb, yb)
    dpsgd_global_adapt.global_adapt_gradients(chain, trace, unit, torch.ones(2, 40, dtype=F64), c0, z,
                                              torch.zeros(2, dtype=F64), 40.0, None)
    expected = _expected_sum(model, grads, c0 / torch.maximum(norms, z))  # every row: C0 g / ||g||
    for p, e in zip(model.parameters(), expected):
        torch.testing.assert_close(p.grad, e / 40)


@pytest.mark.parametrize("sigma,c0", [(1.0, 1.0), (3.0, 0.5)])
def test_global_adapt_noise_has_std_sigma_c0_over_b(sigma, c0):
    """With C0 far below every row's norm the signal is negligible, so the gradient is the noise:
    N(0, (sigma C0 / B)^2) per entry, whatever Z is."""
    model = _model(k=2, d=50)
    xb, yb = _batch(b=64, d=50)
    chain, trace, unit = _traced(model, xb, yb)
    clip = torch.full((2,), c0 * 1e-9, dtype=F64)
    dpsgd_global_adapt.global_adapt_gradients(chain, trace, unit, torch.ones(2, 64, dtype=F64), clip,
                                              torch.tensor([1e-3, 50.0], dtype=F64),
                                              torch.full((2,), sigma * 1e9, dtype=F64), 64.0,
                                              _rng.make_generators([7, 8], "cpu"))
    noise = torch.cat([p.grad.flatten(1) for p in model.parameters()], dim=1)
    assert noise.shape[1] > 5000
    np.testing.assert_allclose(noise.std(dim=1).numpy(), sigma * c0 / 64, rtol=5 / math.sqrt(2 * noise.shape[1]))


def _global_adapt_step(data, config, ids, batch_size=300):
    method = get_method("dpsgd_global_adapt")
    settings = method.effective_settings(TrainSettings(epochs=2, batch_size=batch_size, dtype="float64"))
    return method, settings, method.make_step(PackContext(data, [method.validate_config(c) for c in config],
                                                          ids, 0, settings, ARCHITECTURE, torch.device("cpu")))


def _fixed_sample(monkeypatch, module, rows):
    sample = (torch.arange(rows).unsqueeze(0), torch.ones(1, rows, dtype=torch.bool))
    monkeypatch.setattr(module, "poisson_sample", lambda *args, **kwargs: sample)


@pytest.mark.parametrize("tolerance", [1.0, 0.7])
def test_z_follows_the_papers_update_from_the_count_of_large_rows(tolerance, monkeypatch):
    """Without the count's noise, one step moves Z to Z exp(-eta_Z + b / B), b the sampled rows
    whose gradient norm (at the step's parameters) exceeds gamma Z, counted here from autograd."""
    data = load_dataset("synthetic", rows=600, features=6, seed=2)
    _fixed_sample(monkeypatch, dpsgd_global_adapt, 50)
    config = {"eps": 2.0, "clip_primal": 0.5, "strict_clip": 1.0, "strict_clip_lr": 0.3,
              "strict_clip_tolerance": tolerance}
    _, _, step = _global_adapt_step(data, [config], ["z"], batch_size=100)
    step.sigma_count = torch.zeros(1, dtype=F64)
    train = step.ctx.split("train")
    xb, yb = train.X[:50], train.y[:50]
    _, norms = _row_gradients(step.model, xb, yb)
    z0 = float(torch.quantile(norms[:, 0], 0.6))
    step.z = torch.tensor([z0], dtype=F64)
    b = int((norms[:, 0] > tolerance * z0).sum())
    assert 0 < b < 50
    idx = torch.arange(100)
    step.update(Batch(idx, train.X[idx], train.y[idx], train.s[idx]), step.optimizer())
    assert float(step.z[0]) == pytest.approx(z0 * math.exp(-0.3 + b / 100), rel=1e-12)


def test_the_counts_noise_has_std_count_noise_ratio_times_sigma(monkeypatch):
    """The count's noise, measured through Z: from one state and one fixed sample, each step's
    B (log(Z' / Z) + eta_Z) - b is the noise added to the count b; over many steps its mean is 0
    and its std the calibrated sigma_c = count_noise_ratio * sigma."""
    data = load_dataset("synthetic", rows=600, features=6, seed=2)
    _fixed_sample(monkeypatch, dpsgd_global_adapt, 30)
    config = {"eps": 4.0, "clip_primal": 0.5, "strict_clip": 1.0, "strict_clip_lr": 0.1,
              "strict_clip_tolerance": 1.0, "count_noise_ratio": 3.0}
    method, settings, step = _global_adapt_step(data, [config], ["count"], batch_size=60)
    sigma, sigma_count = method.noise_multipliers(method.validate_config(config), RunInfo.of(data, settings, 64))
    assert float(step.sigma_count[0]) == pytest.approx(sigma_count) and sigma_count == pytest.approx(3 * sigma)
    train = step.ctx.split("train")
    _, norms = _row_gradients(step.model, train.X[:30], train.y[:30])
    b = int((norms[:, 0] > 1.0).sum())
    state = {k: v.clone() for k, v in step.model.state_dict().items()}
    idx = torch.arange(60)
    batch = Batch(idx, train.X[idx], train.y[idx], train.s[idx])
    noise = []
    for _ in range(1500):
        step.model.load_state_dict(state)
        step.z = torch.ones(1, dtype=F64)
        step.update(batch, step.optimizer())
        noise.append(60 * (math.log(float(step.z[0])) + 0.1) - b)
    noise = np.array(noise)
    n = len(noise)
    assert abs(noise.mean()) < 5 * sigma_count / math.sqrt(n)
    assert noise.std() == pytest.approx(sigma_count, rel=5 / math.sqrt(2 * n))


# -- DPSGD-F: per-group counts, bounds and clipping -------------------------------------------------

def _bounds_by_hand(released, c0, b):
    """Algorithm 4: C_k = C0 (1 + (m_k / b_k) / (m / B)), ratio 0 for an empty group, C0 if m = 0."""
    out = np.zeros(released.shape[:2])
    for i in range(released.shape[0]):
        m = released[i, :, 0].sum()
        for k in range(released.shape[1]):
            size = released[i, k].sum()
            ratio = released[i, k, 0] / size if size > 0 else 0.0
            out[i, k] = c0[i] * (1 + (ratio / (m / b) if m > 0 else 0.0))
    return out


def test_group_bounds_are_algorithm_4s():
    released = torch.tensor([[[10.0, 30.0], [20.0, 0.0], [0.0, 0.0]],
                             [[0.0, 5.0], [0.0, 7.0], [0.0, 1.0]],
                             [[3.0, 0.0], [1.0, 9.0], [4.0, 4.0]]], dtype=F64)
    c0 = torch.tensor([0.5, 1.0, 2.0], dtype=F64)
    got = dpsgd_f.group_bounds(released, c0, 64.0).numpy()
    np.testing.assert_allclose(got, _bounds_by_hand(released.numpy(), c0.numpy(), 64.0), rtol=1e-14)
    assert (got >= c0.numpy()[:, None]).all()  # no group below C0: max C_k >= every row's bound


def test_group_counts_and_clipping_by_group_match_explicit_rows():
    model = _model()
    xb, yb = _batch()
    groups = torch.arange(40).remainder(3).expand(2, -1)
    grads, norms = _row_gradients(model, xb, yb)
    c0 = torch.quantile(norms, 0.5, dim=0)  # between two rows' norms: no row on the bound
    chain, trace, unit = _traced(model, xb, yb)
    rows = torch.ones(2, 40, dtype=F64)
    counts = dpsgd_f.group_counts(chain, trace, unit, rows, groups, 3, c0)
    for k in range(3):
        in_k = (groups[0] == k).unsqueeze(1)
        np.testing.assert_array_equal(counts[:, k, 0].numpy(), ((norms > c0) & in_k).sum(0).numpy())
        np.testing.assert_array_equal(counts[:, k, 1].numpy(), ((norms <= c0) & in_k).sum(0).numpy())
    assert all(p.grad is None for p in model.parameters())  # counting leaves no gradient behind
    bounds = c0.unsqueeze(1) * torch.tensor([[1.0, 1.5, 3.0], [2.0, 1.0, 1.2]], dtype=F64)
    got = dpsgd_f.dpsgd_f_gradients(chain, trace, unit, rows, groups, bounds, c0, torch.zeros(2, dtype=F64), 40.0,
                                    None)
    per_row = bounds.gather(1, groups).T  # (B, K)
    expected = _expected_sum(model, grads, torch.clamp(per_row / norms, max=1.0))  # clip(g, C_k(row))
    for p, e in zip(model.parameters(), expected):
        torch.testing.assert_close(p.grad, e / 40)
    np.testing.assert_array_equal(got[0], (norms > per_row).sum(0).numpy())


class _WithoutRowNorms:
    """The chain without ``row_norms``: DPSGD-F's counts then take a clipping pass per group."""

    def __init__(self, chain):
        self.chain = chain

    def parameters(self):
        return self.chain.parameters()

    def add_clipped(self, *args, **kwargs):
        return self.chain.add_clipped(*args, **kwargs)


def test_group_counts_from_row_norms_are_the_per_group_passes():
    """One pass of norms counted by group gives the per-group clipping passes' counts, padding
    (weight 0) and a row with a non-finite gradient left out of both."""
    model = _model()
    xb, yb = _batch(b=60, seed=3)
    chain, trace, unit = _traced(model, xb, yb)
    unit = unit.clone()
    unit[1, 7] = torch.inf  # config 1's row 7: not finite
    groups = torch.randint(0, 4, (2, 60), generator=torch.Generator().manual_seed(1))
    rows = torch.ones(2, 60, dtype=F64)
    rows[:, 50:] = 0  # padding
    _, norms = _row_gradients(model, xb, yb)
    c0 = torch.quantile(norms, 0.4, dim=0)
    fast = dpsgd_f.group_counts(chain, trace, unit, rows, groups, 4, c0)
    slow = dpsgd_f.group_counts(_WithoutRowNorms(chain), trace, unit, rows, groups, 4, c0)
    torch.testing.assert_close(fast, slow, rtol=0, atol=0)
    assert fast[1].sum() == 49 and fast[0].sum() == 50  # config 1 lost its non-finite row


def test_dpsgd_f_noise_is_scaled_to_the_largest_bound_of_every_group():
    """sigma max_k C_k / B, the max over all groups: here every sampled row is in group 0 and
    the largest bound is group 2's, so a noise scaled to the rows present would be 3x smaller."""
    model = _model(k=2, d=50)
    xb, yb = _batch(b=64, d=50)
    chain, trace, unit = _traced(model, xb, yb)
    groups = torch.zeros(2, 64, dtype=torch.long)
    bounds = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]], dtype=F64) * 1e-9
    dpsgd_f.dpsgd_f_gradients(chain, trace, unit, torch.ones(2, 64, dtype=F64), groups, bounds,
                              torch.full((2,), 0.5e-9, dtype=F64), torch.tensor([2e9, 1e9], dtype=F64), 64.0,
                              _rng.make_generators([3, 4], "cpu"))
    noise = torch.cat([p.grad.flatten(1) for p in model.parameters()], dim=1)
    np.testing.assert_allclose(noise.std(dim=1).numpy(), [2 * 3 / 64, 0.5 / 64], rtol=5 / math.sqrt(2 * noise.shape[1]))


def test_dpsgd_f_released_counts_have_std_sigma_c(monkeypatch):
    """Each step releases floor(count + N(0, sigma_c^2)), floored at 0: with every cell far above
    0 (all training rows sampled), released - true count is floor(sigma_c N), of mean -1/2 and
    variance sigma_c^2 + 1/12; the true counts are recounted here from autograd."""
    data = load_dataset("synthetic", rows=1400, features=6, seed=5)
    method = get_method("dpsgd_f")
    config = method.validate_config({"eps": 8.0, "clip_primal": 0.5, "count_noise_ratio": 1.0})
    settings = method.effective_settings(TrainSettings(epochs=1, batch_size=700, dtype="float64"))
    step = method.make_step(PackContext(data, [config], ["counts"], 0, settings, ARCHITECTURE, torch.device("cpu")))
    train = step.ctx.split("train")
    n = len(train.y)
    _fixed_sample(monkeypatch, dpsgd_global_adapt, n)  # both steps draw it in AdaptiveClippingStep
    sigma, sigma_count = method.noise_multipliers(config, RunInfo.of(data, settings, 64))
    assert float(step.sigma_count[0]) == pytest.approx(sigma_count) == pytest.approx(sigma)
    norms = torch.sqrt(sum(g.pow(2).flatten(2).sum(2) for g in _per_row_gradients(step.model, train.X, train.y)))[0]
    c0 = float(np.quantile(norms.numpy(), 0.5))
    step.clip = torch.tensor([c0], dtype=F64)
    true = np.array([[int(((norms > c0) & (train.s == k)).sum()), int(((norms <= c0) & (train.s == k)).sum())]
                     for k in range(data.n_groups)])
    assert true.min() > 20 * sigma_count
    seen = []
    real = dpsgd_f.group_bounds
    monkeypatch.setattr(dpsgd_f, "group_bounds", lambda released, *a: seen.append(released.clone()) or real(released, *a))
    state = {k: v.clone() for k, v in step.model.state_dict().items()}
    idx = torch.arange(700)
    batch = Batch(idx, train.X[idx], train.y[idx], train.s[idx])
    for _ in range(400):
        step.model.load_state_dict(state)
        step.update(batch, step.optimizer())
    diff = (torch.stack(seen)[:, 0].numpy() - true).ravel()
    m = len(diff)
    assert abs(diff.mean() + 0.5) < 5 * sigma_count / math.sqrt(m)
    assert diff.std() == pytest.approx(math.sqrt(sigma_count ** 2 + 1 / 12), rel=5 / math.sqrt(2 * m))


def _per_row_gradients(model, x, y):
    """Per-row gradients of the cross-entropy by torch.func, per parameter (K, n, ...)."""
    from torch.func import functional_call, grad, vmap

    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, xz, yz):
        return torch.nn.functional.cross_entropy(functional_call(model, p, (xz.unsqueeze(0),))[0], yz.unsqueeze(0))

    g = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    return [v.movedim(0, 1) for v in g.values()]


# -- the accounting ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["dpsgd_global_adapt", "dpsgd_f"])
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_a_config_spends_dpsgds_budget_at_the_same_eps(name, accountant):
    """Calibration makes the joint multiplier DP-SGD's: the eps axis is DP-SGD's, and the
    gradient noise is sqrt(1 + ratio^-2) times DP-SGD's multiplier."""
    method = get_method(name)
    run = RunInfo(n=3000, batch_size=256, epochs=3, representation_dim=64, n_groups=2, accountant=accountant)
    for eps, ratio in ((1.0, 10.0), (4.0, 2.0)):
        config = method.validate_config({**method.expand(method.paper_grid("adult"))[0], "eps": eps,
                                         "count_noise_ratio": ratio})
        sigma, sigma_count = method.noise_multipliers(config, run)
        dp_sigma = calibrate_dpsgd_sigma(eps, PFLD_DELTA, 256, 3000, 3, accountant)
        assert sigma == pytest.approx(dp_sigma * math.sqrt(1 + ratio ** -2), rel=1e-12)
        got = method.privacy(config, run)
        assert got.delta == PFLD_DELTA and got.eps <= eps
        assert got.eps == pytest.approx(dpsgd_epsilon(dp_sigma, 256, 3000, 3, PFLD_DELTA, accountant), rel=1e-9)


def test_one_sample_for_both_releases_costs_more_than_two_independent_samples():
    """Why the count is not accounted as the authors' code does (a second, separately sampled
    Gaussian step): at q < 1 the pair from one sample is worse than two independent samples, and
    the joint event fairdp stores is at least as costly as both readings."""
    run = RunInfo(n=2560, batch_size=256, epochs=5, representation_dim=64, n_groups=2)
    method = get_method("dpsgd_global_adapt")
    config = method.validate_config({**method.expand(method.paper_grid("adult"))[0], "eps": 3.0,
                                     "count_noise_ratio": 1.0})
    sigma, sigma_count = method.noise_multipliers(config, run)
    q, steps = 0.1, 50
    separate = RdpAccountant()
    for s in (sigma, sigma_count):
        separate.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(float(s))), steps)
    ours = method.privacy(config, run).eps
    assert ours > separate.get_epsilon(PFLD_DELTA)


# -- config validation ------------------------------------------------------------------------------

KEYS = {"dpsgd_global_adapt": ("eps", "clip_primal", "strict_clip", "strict_clip_lr", "strict_clip_tolerance",
                               "count_noise_ratio"),
        "dpsgd_f": ("eps", "clip_primal", "count_noise_ratio")}
VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5), st.text(max_size=3),
                   st.none(), st.booleans())


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(sorted(KEYS)), data=st.data())
def test_fuzzed_configs_are_accepted_in_range_or_refused_naming_the_key(name, data):
    method = get_method(name)
    keys = KEYS[name]
    config = data.draw(st.dictionaries(st.sampled_from(keys), VALUES, min_size=len(keys) - 1))
    try:
        out = method.validate_config(config)
    except InputError as err:
        message = str(err)
        assert "\n" not in message
        assert any(message.startswith(f"config.{k}:") for k in keys), message
        return
    for key in keys:
        value = out[key]
        assert isinstance(value, float) and math.isfinite(value)
        low_open = key in ("eps", "clip_primal", "strict_clip", "count_noise_ratio")
        assert value > 0 if low_open else value >= 0
