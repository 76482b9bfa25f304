"""DP-FERMI (Lowy, Gupta & Razaviyayn 2023): the per-row ERMI estimator against FERMI's matrix
form and its maximum against ERMI, the noise of both steps and of the count release measured,
W's projection, non-binary attributes, the reduction to SGD, the calibration."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from fairdp.data import load_dataset
from fairdp.engine import TrainSettings
from fairdp.engine.contract import Batch, PackContext
from fairdp.errors import InputError
from fairdp.methods import RunInfo, dp_fermi, get_method
from fairdp.methods._lagrangian import ARCHITECTURE
from fairdp.methods.dp_fermi import (
    W_RADIUS,
    ermi_logit_grad,
    ermi_terms,
    ermi_w_grad,
    project_frobenius,
)
from fairdp.privacy import calibrate_dp_fermi_sigmas, dp_fermi_epsilon, gaussian_epsilon

METHOD = get_method("dp_fermi")
CONFIG = {"lam": 1.0, "fairness_notion": "eo", "eps": 1.0, "clip_primal": 2.0, "clip_dual": 3.0}


def _closed_form(probs, s, w, p_s):
    """FERMI's psi_i as matrices: -Tr(W diag(F) W^T) + 2 Tr(W F e_s^T P_s^(-1/2)) - 1."""
    k = len(p_s)
    e_s = np.eye(k)[s]
    return -np.trace(w @ np.diag(probs) @ w.T) + 2 * np.trace(w @ np.outer(probs, e_s) @ np.diag(p_s ** -0.5)) - 1


def _random_case(seed, rows=7, k=3, m=4):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(rows, m))
    s = rng.integers(k, size=rows)
    w = rng.normal(size=(rows, k, m))
    p_s = rng.dirichlet(np.ones(k)) * 0.9 + 0.1 / k
    return logits, s, w, p_s


@pytest.mark.parametrize("seed", range(4))
def test_psi_and_its_gradients_are_fermis_closed_form(seed):
    logits, s, w, p_s = _random_case(seed)
    z = torch.tensor(logits, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    probs = torch.softmax(z, -1)
    psi, a = ermi_terms(probs, torch.tensor(s), wt, torch.tensor(p_s[s] ** -0.5))
    f = probs.detach().numpy()
    want = [_closed_form(f[i], s[i], w[i], p_s) for i in range(len(s))]
    np.testing.assert_allclose(psi.detach().numpy(), want, rtol=1e-12, atol=1e-12)
    psi.sum().backward()  # autograd of the estimator: what the written-out gradients must equal
    with torch.no_grad():
        got_z = ermi_logit_grad(probs, a)
        got_w = ermi_w_grad(probs, torch.tensor(s), torch.tensor(w), torch.tensor(p_s[s] ** -0.5), len(p_s))
    np.testing.assert_allclose(got_z.numpy(), z.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got_w.numpy(), wt.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_the_estimators_maximum_over_w_is_ermi(seed):
    """On a small population (the rows' soft predictions and groups), the mean of psi_i over
    the rows, maximised over W numerically, is ERMI = sum_{j,r} P(yhat=j, s=r)^2 / (P(yhat=j)
    P(s=r)) - 1, with P(yhat=j, s=r) the mean of F_j(x_i) [s_i = r], and is reached at FERMI's
    W*_rj = P(j, r) / (sqrt(P(r)) P(j))."""
    rng = np.random.default_rng(seed)
    rows, k, m = 40, 3, 2
    probs = torch.tensor(rng.dirichlet(np.ones(m), size=rows))
    s = torch.tensor(rng.integers(k, size=rows))
    s[:k] = torch.arange(k)  # every group present
    p_s = np.bincount(s.numpy(), minlength=k) / rows
    joint = np.stack([(probs.numpy() * (s.numpy() == r)[:, None]).mean(0) for r in range(k)])  # (k, m)
    p_yhat = probs.numpy().mean(0)
    ermi = (joint ** 2 / (p_yhat[None, :] * p_s[:, None])).sum() - 1

    def mean_psi(flat):
        w = torch.tensor(flat).view(1, k, m).expand(rows, k, m)
        return float(ermi_terms(probs, s, w, torch.tensor(p_s[s.numpy()] ** -0.5))[0].mean())

    best = minimize(lambda v: -mean_psi(v), np.zeros(k * m), method="BFGS", options={"gtol": 1e-10})
    assert -best.fun == pytest.approx(ermi, abs=1e-8)
    w_star = joint / (np.sqrt(p_s)[:, None] * p_yhat[None, :])
    assert mean_psi(w_star.ravel()) == pytest.approx(ermi, rel=1e-12, abs=1e-12)
    assert ermi >= -1e-12


def test_project_frobenius_keeps_the_ball_and_moves_outside_points_onto_it():
    w = torch.tensor([[[3.0, 4.0]], [[30.0, 40.0]], [[0.0, 0.0]]])  # norms 5, 50, 0
    out = project_frobenius(w, 5.0)
    torch.testing.assert_close(out[0], w[0])
    torch.testing.assert_close(out[1], w[1] / 10)
    torch.testing.assert_close(out[2], w[2])


def _step(data, config, name, batch_size=300, sigmas=None, dtype="float64"):
    settings = METHOD.effective_settings(TrainSettings(epochs=2, batch_size=batch_size, dtype=dtype))
    ctx = PackContext(data, [config], [name], 0, settings, ARCHITECTURE, torch.device("cpu"))
    if sigmas is None:
        return METHOD.make_step(ctx)
    return dp_fermi.DPFERMIStep(ctx, [sigmas])


def _batch(step, rows=300):
    train = step.ctx.split("train")
    idx = torch.arange(rows)
    return Batch(idx, train.X[idx], train.y[idx], train.s[idx])


def test_theta_and_w_noise_have_std_sigma_c_over_b(monkeypatch):
    """From one state and one Poisson sample (fixed here), two noise streams move theta apart by
    lr * (N(0, (sigma_theta C_theta / B)^2) - the other's), and each W step from a fixed W_t adds
    lr_w * N(0, (sigma_w C_W / B)^2) per entry, with the accountant-calibrated multipliers."""
    sample = (torch.arange(280).unsqueeze(0), torch.ones(1, 280, dtype=torch.bool))
    monkeypatch.setattr(dp_fermi, "poisson_sample", lambda *args, **kwargs: sample)
    data = load_dataset("synthetic", rows=1500, features=8, groups=3, seed=3)
    steps = [_step(data, CONFIG, f"stream-{i}") for i in range(2)]
    steps[1].model.load_state_dict(steps[0].model.state_dict())
    steps[1].p_inv_sqrt = steps[0].p_inv_sqrt.clone()  # the count releases differ by their noise
    for step in steps:
        step.update(_batch(step), step.optimizer())
    lr = steps[0].optimizer().param_groups[0]["lr"]
    diff = torch.cat([(p - q).detach().flatten() for p, q in zip(steps[0].model.parameters(),
                                                                    steps[1].model.parameters())]) / lr
    run = RunInfo.of(data, steps[0].ctx.settings, 64)
    s_theta, s_w, _ = METHOD.noise_multipliers(CONFIG, run)
    n = diff.numel()
    assert float(diff.std()) == pytest.approx(2 ** 0.5 * s_theta * CONFIG["clip_primal"] / 300, rel=5 / (2 * n) ** 0.5)

    # the W step alone, from one W_t and one sample 400 times: only its noise differs
    step = steps[0]
    w0 = torch.full_like(step.w, 0.1)
    train = step.ctx.split("train")
    idx, valid = sample
    y, s = train.y[idx], train.s[idx]
    probs = torch.softmax(step.model(train.X[idx]), -1).detach()
    slots = step._slots(y)
    rows = torch.arange(1).unsqueeze(1)
    w_rows, p_rows = w0[rows, slots], step.p_inv_sqrt[rows, slots, s]
    moves = []
    for _ in range(400):
        step.w = w0.clone()
        step._ascend(probs, s, slots, w_rows, p_rows, valid, 300.0)
        moves.append((step.w - w0).flatten())
    moves = torch.stack(moves) / step.lr_w[0]  # (400, L k m): (clipped sum + noise) / B
    assert (moves.std(0) > 0).all()  # eo: every label's W gets noise
    m = moves.shape[0] * moves.shape[1]
    pooled = float(((moves - moves.mean(0)) ** 2).sum() / (m - moves.shape[1])) ** 0.5
    assert pooled == pytest.approx(s_w * CONFIG["clip_dual"] / 300, rel=5 / (2 * m) ** 0.5)


def test_the_count_release_has_std_sigma_count():
    """Each config releases the training rows' group counts (eo: per label) plus N(0, sigma_count^2)."""
    data = load_dataset("synthetic", rows=1500, features=8, groups=3, seed=3)
    configs = [{**CONFIG, "fairness_notion": nt} for nt in ("dp", "eo") for _ in range(100)]
    settings = METHOD.effective_settings(TrainSettings(epochs=2, batch_size=300, dtype="float64"))
    ctx = PackContext(data, configs, [f"c{i}" for i in range(len(configs))], 0, settings,
                      _narrow_arch(), torch.device("cpu"))
    step = METHOD.make_step(ctx)
    train = data.split("train")
    table = np.zeros((2, 3))
    np.add.at(table, (train.y, train.s), 1)
    released = step.released_counts.numpy()
    dp_noise = released[:100, 0] - table.sum(0)
    eo_noise = released[100:] - table
    assert (released[:100, 1:] == 0).all()  # dp releases the group counts only
    noise = np.concatenate([dp_noise.ravel(), eo_noise.ravel()])
    _, _, s_count = METHOD.noise_multipliers(CONFIG, RunInfo.of(data, settings, 64))
    assert noise.std() == pytest.approx(s_count, rel=5 / (2 * noise.size) ** 0.5)
    assert abs(noise.mean()) < 5 * s_count / noise.size ** 0.5
    # P_s^(-1/2) is computed from the released counts alone
    counts = np.clip(released[100], 1, None)
    np.testing.assert_allclose(step.p_inv_sqrt[100].numpy(), (counts / counts.sum(1, keepdims=True)) ** -0.5)
    counts = np.clip(released[0, 0], 1, None)
    np.testing.assert_allclose(step.p_inv_sqrt[0, 1].numpy(), (counts / counts.sum()) ** -0.5)


def _narrow_arch():
    from dataclasses import replace

    return replace(ARCHITECTURE, encoder=(8,))  # 200 configs: a narrow network


def test_w_stays_in_its_projection_set(monkeypatch):
    data = load_dataset("synthetic", rows=1500, features=8, groups=3, seed=3)
    step = _step(data, {**CONFIG, "lr_w": 500.0, "eps": 0.5}, "far")
    norms = []
    for _ in range(10):
        step.update(_batch(step), step.optimizer())
        norms.append(step.w.flatten(2).norm(dim=2))
    norms = torch.stack(norms)
    assert (norms <= W_RADIUS * (1 + 1e-12)).all()
    assert (norms > W_RADIUS * (1 - 1e-9)).any()  # the steps do leave the ball: the projection acted


def test_a_row_whose_w_gradient_is_not_finite_adds_nothing():
    """As the engine's clipping drops such rows from the theta sum: W stays finite, and the
    finite rows alone are counted."""
    data = load_dataset("synthetic", rows=600, features=6, groups=3, seed=4)
    step = _step(data, CONFIG, "nan", batch_size=100, sigmas=(1.0, 1.0, 1.0))
    probs = torch.full((1, 4, 2), float("nan"), dtype=torch.float64)
    probs[0, :2] = 0.5
    s, slots = torch.tensor([[0, 1, 2, 0]]), torch.tensor([[0, 1, 0, 1]])
    rows = torch.zeros(1, 1, dtype=torch.long)
    step._ascend(probs, s, slots, step.w[rows, slots], step.p_inv_sqrt[rows, slots, s],
                 torch.ones(1, 4, dtype=torch.bool), 100.0)
    assert torch.isfinite(step.w).all() and step.w_clip_counts[0, 1] == 2


def test_it_trains_with_a_three_group_attribute():
    data = load_dataset("synthetic", rows=1500, features=8, groups=3, seed=3)
    assert data.n_groups == 3
    configs = [{**CONFIG, "fairness_notion": nt, "eps": 8.0} for nt in ("dp", "eo")]
    res = METHOD.train_pack(data, configs, seed=0, settings=TrainSettings(epochs=3, batch_size=128))
    assert res.predictions["test"].shape == (2, len(data.splits["test"]))
    assert (res.valid_history["accuracy"][:, -1] > 60).all()
    assert all(eps <= 8.0 for eps, _ in res.privacy)


def test_the_regulariser_lowers_the_gap_it_targets():
    """On data whose label leaks the (three-group) attribute, lam = 4 at a loose eps lowers the
    valid demographic-parity gap far below lam = 0's (74 against 3 points at this seed)."""
    data = load_dataset("synthetic", rows=4000, features=10, groups=3, label_correlation=0.7, leakage=2.0, seed=0)
    configs = [{**CONFIG, "fairness_notion": "dp", "eps": 100.0, "clip_primal": 5.0, "clip_dual": 5.0, "lam": lam}
               for lam in (0.0, 4.0)]
    res = METHOD.train_pack(data, configs, seed=0, settings=TrainSettings(epochs=15, batch_size=128))
    gap = res.valid_history["dp_gap"][:, -1]
    assert gap[1] < gap[0] / 3, gap


def test_lambda_zero_without_noise_is_plain_sgd_on_the_loss():
    """lambda = 0, no noise, a clip no row reaches and B = n (q = 1: every row sampled): the
    theta step is one SGD step on the mean cross-entropy."""
    data = load_dataset("synthetic", rows=600, features=6, groups=3, seed=4)
    n = len(data.splits["train"])
    config = {**CONFIG, "lam": 0.0, "clip_primal": 1e12}
    step = _step(data, config, "plain", batch_size=n, sigmas=(0.0, 0.0, 0.0))
    train = step.ctx.split("train")
    before = [p.detach().clone() for p in step.model.parameters()]
    loss = torch.nn.functional.cross_entropy(step.model(train.X)[0], train.y)
    grads = torch.autograd.grad(loss, list(step.model.parameters()))
    step.update(_batch(step, n), step.optimizer())
    for p, b, g in zip(step.model.parameters(), before, grads):
        torch.testing.assert_close(p.detach(), b - 0.1 * g)


def test_the_theta_step_is_the_gradient_of_loss_plus_lambda_psi():
    """Without noise or clipping and with q = 1, the theta step follows mean(CE + lambda psi_i)
    at the current W (set away from 0, so that psi depends on theta)."""
    data = load_dataset("synthetic", rows=600, features=6, groups=3, seed=4)
    n = len(data.splits["train"])
    config = {**CONFIG, "lam": 1.5, "clip_primal": 1e12}
    step = _step(data, config, "psi", batch_size=n, sigmas=(0.0, 0.0, 0.0))
    step.w = torch.randn(step.w.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    train = step.ctx.split("train")
    before = [p.detach().clone() for p in step.model.parameters()]
    probs = torch.softmax(step.model(train.X)[0], -1)
    w_rows, p_rows = step.w[0][train.y], step.p_inv_sqrt[0][train.y, train.s]
    psi, _ = ermi_terms(probs, train.s, w_rows, p_rows)
    loss = torch.nn.functional.nll_loss(probs.log(), train.y) + 1.5 * psi.mean()
    grads = torch.autograd.grad(loss, list(step.model.parameters()))
    step.update(_batch(step, n), step.optimizer())
    for p, b, g in zip(step.model.parameters(), before, grads):
        torch.testing.assert_close(p.detach(), b - 0.1 * g)


def test_calibration_meets_the_target_with_a_tenth_for_the_counts():
    for eps in (0.5, 3.0, 9.0):
        s_theta, s_w, s_count = calibrate_dp_fermi_sigmas(eps, 1e-5, 300, 1500, 2)
        assert s_theta == s_w
        assert gaussian_epsilon(s_count, 1, 1.0, 1e-5) <= 0.1 * eps
        assert 0.95 * eps <= dp_fermi_epsilon(s_theta, s_w, s_count, 300, 1500, 2, 1e-5) <= eps
    assert calibrate_dp_fermi_sigmas(0.5, 1e-5, 300, 1500, 2)[0] > calibrate_dp_fermi_sigmas(9.0, 1e-5, 300, 1500, 2)[0]
    sigmas = calibrate_dp_fermi_sigmas(1.0, 1e-5, 300, 1500, 2, accountant="pld")
    assert 0.95 <= dp_fermi_epsilon(*sigmas, 300, 1500, 2, 1e-5, "pld") <= 1.0
    assert math.isinf(dp_fermi_epsilon(0.0, 1.0, 1.0, 300, 1500, 2, 1e-5))


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(["lam", "fairness_notion", "eps", "clip_primal", "clip_dual", "lr_w"]),
       value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5), st.text(max_size=3),
                       st.sampled_from(["dp", "eo", "ap"]), st.booleans()))
def test_config_validation_accepts_what_is_in_range_and_names_the_key_otherwise(key, value):
    config = {**CONFIG, key: value}
    try:
        out = METHOD.validate_config(config)
    except InputError as e:
        assert str(e).startswith(f"config.{key}:") and "\n" not in str(e)
        return
    if key == "fairness_notion":
        assert value in ("dp", "eo")
    else:
        assert not isinstance(value, (bool, str)) and math.isfinite(value)
        assert value >= 0 if key == "lam" else value > 0
        assert out[key] == float(value)
