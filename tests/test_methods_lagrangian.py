"""F-LD and PF-LD (Tran et al. 2021): constraints that work, clipping that clips, accounting that holds."""

import numpy as np
import pytest
import torch
from torch.func import functional_call, grad, vmap

from fairdp import _rng
from fairdp.data import load_dataset
from fairdp.engine import (
    ModelSpec,
    PackedModel,
    TrainSettings,
    add_clipped_gradients,
    fit_pack,
    forward_traced,
    layer_shapes,
)
from fairdp.errors import InputError
from fairdp.methods import get_method
from fairdp.methods._lagrangian import ARCHITECTURE, LagrangianStep, constraint_masks, h_all
from fairdp.metrics import accuracy, dp_gap


def train_lagrangian(data, configs, config_ids, seed, settings, *, private, sigmas=None):
    """F-LD or PF-LD configs through the engine's loop, with the config ids (streams) given."""
    shapes = layer_shapes(ModelSpec(), ARCHITECTURE, data.n_features, data.n_classes, data.n_groups)
    settings = get_method("fld").effective_settings(settings)  # F-LD's and PF-LD's learning rate
    return fit_pack(lambda ctx: LagrangianStep(ctx, private=private, sigmas=sigmas), data, configs, config_ids,
                    seed, settings, ARCHITECTURE, shapes=shapes)


@pytest.fixture(scope="module")
def adult():
    return load_dataset("adult")


def test_fld_halves_the_dp_gap_at_small_accuracy_cost(adult):
    """Real Adult (sex): a 20-point demographic-parity gap. On synthetic data whose disparity
    is a base-rate gap, halving it costs more than 5 points by construction (the classifier
    is confident everywhere), so the claim is checked where it is meaningful."""
    settings = TrainSettings(epochs=10, batch_size=256)
    y, s = adult.split("test").y, adult.split("test").s
    base = get_method("unconstrained").train_pack(adult, [{}], seed=0, settings=settings, arch=ARCHITECTURE)
    fair = get_method("fld").train_pack(adult, [{"fairness_notion": "dp"}], seed=0, settings=settings)
    gap_base, gap_fair = dp_gap(base.predictions["test"][0], s), dp_gap(fair.predictions["test"][0], s)
    acc_base, acc_fair = accuracy(y, base.predictions["test"][0]), accuracy(y, fair.predictions["test"][0])
    assert gap_base > 15
    assert gap_fair <= gap_base / 2
    assert acc_fair > acc_base - 5


def test_constraint_sets_follow_eq_1():
    y = torch.tensor([0, 1, 1, 0, 1])
    s = torch.tensor([0, 0, 1, 1, 1])
    pop, grp = constraint_masks("dp", y, s, 2)
    assert pop.all() and grp.tolist() == [[1, 1, 0, 0, 0], [0, 0, 1, 1, 1]]
    pop, grp = constraint_masks("eo", y, s, 2)  # (label, group) pairs: population = rows with that label
    assert pop.tolist()[0] == [1, 0, 0, 1, 0] and grp.tolist()[3] == [0, 0, 1, 0, 1]


def test_ghost_clipping_matches_explicit_per_sample_gradients():
    """The clipped, weighted group gradient from layer inputs and errors equals the one built
    from explicit per-sample gradients (torch.func vmap), and so do the clip counts."""
    gens = _rng.make_generators([1, 2], "cpu")
    model = PackedModel(ModelSpec(), ARCHITECTURE, 6, 2, 2, gens, device="cpu", dtype=torch.float64)
    params = {n: p.detach() for n, p in model.named_parameters()}
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(7, 6, dtype=torch.float64, generator=g), torch.randint(0, 2, (7,), generator=g)
    is_ap = torch.tensor([False, True])

    def h_sum(p, row, label):
        logits = functional_call(model, p, (row.unsqueeze(0),))[:, 0]
        ce = torch.nn.functional.cross_entropy(logits, label.repeat(2), reduction="none")
        return torch.where(is_ap, ce, torch.softmax(logits, -1)[:, 1]).sum()

    per_sample = vmap(grad(h_sum), in_dims=(None, 0, 0))(params, x, y)  # name -> (B, K, ...)
    norms = sum(g.flatten(2).pow(2).sum(-1) for g in per_sample.values()).sqrt()  # (B, K)
    ranked = norms.sort(dim=0).values
    c_p = (ranked[3] + ranked[4]) / 2  # 3 of 7 rows clipped per config, none at the bound (rounding)
    weight = torch.rand(2, 7, dtype=torch.float64, generator=g)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    layers = [*model.encoder.layers, *model.classifier.layers]
    logits, inputs, outputs = forward_traced(layers, x)
    deltas = torch.autograd.grad(h_all(logits, y, is_ap).sum(), outputs)
    counts = add_clipped_gradients(layers, inputs, deltas, weight, c_p, torch.zeros(2, dtype=torch.float64), gens)
    assert counts.tolist() == [[3, 3], [7, 7]]
    coef = weight.T * torch.clamp(c_p / norms, max=1.0)
    for n, p in model.named_parameters():
        expected = -torch.einsum("bk,bk...->k...", coef, per_sample[n])
        torch.testing.assert_close(p.grad, expected)


def test_pfld_clips_per_sample_gradients_only_when_cp_is_small():
    data = load_dataset("synthetic", rows=1500, features=8, seed=3)
    # a large budget keeps the dual noise from zeroing a multiplier, so group terms run in epoch 2
    configs = [{"fairness_notion": "dp", "eps": 1e4, "clip_primal": cp, "clip_dual": 5.0} for cp in (1e-4, 1e4)]
    res = get_method("pfld").train_pack(data, configs, seed=0, settings=TrainSettings(epochs=2, batch_size=300))
    tiny, huge = res.diagnostics["clipped_fraction"]
    assert tiny == 1.0 and huge == 0.0


def test_pfld_reports_the_accountants_eps_within_its_target():
    data = load_dataset("synthetic", rows=1500, features=8, seed=3)
    configs = [{"fairness_notion": nt, "eps": eps, "clip_primal": 10.0, "clip_dual": 5.0}
               for nt, eps in (("dp", 0.5), ("eo", 2.0), ("ap", 8.0))]
    res = get_method("pfld").train_pack(data, configs, seed=0, settings=TrainSettings(epochs=2, batch_size=300))
    for cfg, (eps, delta) in zip(configs, res.privacy):
        assert 0.95 * cfg["eps"] <= eps <= cfg["eps"] and delta == 1e-5
    assert np.isfinite(res.predictions["test"]).all()


def test_pfld_without_noise_or_clipping_is_fld():
    """PF-LD's path (population terms by autograd, group terms from per-sample gradients) with
    zero noise and clipping bounds no gradient reaches is exactly F-LD's gradient."""
    data = load_dataset("synthetic", rows=1200, features=8, label_correlation=0.5, seed=5)
    settings = TrainSettings(epochs=3, batch_size=200, dtype="float64")
    ids = ["same-streams"]
    for notion in ("dp", "ap"):
        fld = train_lagrangian(data, [{"fairness_notion": notion}], ids, 0, settings, private=False)
        pfld = train_lagrangian(data, [{"fairness_notion": notion, "clip_primal": 1e12, "clip_dual": 1e12}],
                                ids, 0, settings, private=True, sigmas=[(0.0, 0.0)])
        np.testing.assert_array_equal(fld.predictions["test"], pfld.predictions["test"])
        np.testing.assert_allclose(fld.representations["test"], pfld.representations["test"], rtol=1e-8, atol=1e-10)


def test_lagrangian_methods_need_binary_labels():
    data = load_dataset("synthetic", rows=600, classes=3, seed=0)
    with pytest.raises(InputError, match="binary labels"):
        get_method("fld").train_pack(data, [{"fairness_notion": "dp"}], seed=0, settings=TrainSettings(epochs=1))


def test_pfld_approaches_fld_as_the_budget_grows(adult):
    """With the paper's C_p = 10 and C_d = 5, PF-LD at a huge budget is F-LD up to clipping:
    same DP violation within 1 point and accuracy within 0.5, seed by seed."""
    settings = TrainSettings(epochs=5, batch_size=256)
    valid = adult.split("valid")
    for seed in range(3):
        fld = get_method("fld").train_pack(adult, [{"fairness_notion": "dp"}], seed=seed, settings=settings)
        pfld = get_method("pfld").train_pack(
            adult, [{"fairness_notion": "dp", "eps": 1e6, "clip_primal": 10.0, "clip_dual": 5.0}], seed=seed,
            settings=settings)
        f, p = fld.predictions["valid"][0], pfld.predictions["valid"][0]
        assert abs(dp_gap(p, valid.s) - dp_gap(f, valid.s)) < 1.0
        assert abs(accuracy(valid.y, p) - accuracy(valid.y, f)) < 0.5


@pytest.mark.slow
def test_pfld_violation_is_larger_at_eps_1_than_with_ample_budget(adult):
    """Tran et al. Figure 2's trend at its ends, averaged over twenty seeds on Adult (sex): at
    eps = 1 the noisy primal and dual steps enforce the constraints less well than at eps =
    1e4. In between the seed-to-seed spread (std ~5 points) hides it: the means at eps 1, 3,
    10, 100 were 11.0, 9.5, 11.1, 8.1 over ten seeds, not monotone. Below eps ~0.5 the noise
    wipes out the classifier (accuracy at the majority rate) and the gap vanishes trivially."""
    configs = [{"fairness_notion": "dp", "eps": e, "clip_primal": 10.0, "clip_dual": 5.0} for e in (1.0, 1e4)]
    valid = adult.split("valid")
    gaps = []
    for seed in range(20):
        res = get_method("pfld").train_pack(adult, configs, seed=seed, settings=TrainSettings(epochs=5, batch_size=256))
        gaps.append([dp_gap(res.predictions["valid"][k], valid.s) for k in range(2)])
    mean_gap = np.mean(gaps, axis=0)
    # ten seeds gave 10.8 vs 7.6 (std 5.1 and 1.6): the margin leaves ~2.5 standard errors
    assert mean_gap[0] > mean_gap[1] + 1.0, mean_gap


# -- the noise PF-LD actually adds, measured ---------------------------------------------------

def _twin_steps(method, data, config, settings):
    """Two steps of one config with identical parameters and different noise streams: the
    difference of their updates is the difference of two noise draws, the signal cancels."""
    from fairdp.engine import PackContext

    settings = method.effective_settings(settings)  # the method's own learning rate
    steps = [method.make_step(PackContext(data, [config], [f"stream-{i}"], 0, settings, ARCHITECTURE,
                                          torch.device("cpu"))) for i in range(2)]
    steps[1].model.load_state_dict(steps[0].model.state_dict())
    return steps


def _params(step):
    return torch.cat([p.detach().flatten() for p in step.model.parameters()])


def test_pfld_primal_step_adds_noise_of_std_sigma_p_delta_p():
    """One primal step on a hand-made batch: groups of 3 and 5 rows, so Theorem 1's
    Delta_p = 2 C_p lambda_max / (min |B_G| - 1) = 2 * 10 * 1 / 2 = 10. SGD moves each
    parameter entry by -lr * N(0, (sigma_p Delta_p)^2); two noise streams from the same
    parameters differ by a N(0, 2 (lr sigma_p Delta_p)^2) per entry."""
    from fairdp.engine import Batch
    from fairdp.methods import RunInfo

    data = load_dataset("synthetic", rows=1500, features=8, seed=3)
    settings = TrainSettings(epochs=2, batch_size=300, dtype="float64")
    method = get_method("pfld")
    config = {"fairness_notion": "dp", "eps": 1.0, "clip_primal": 10.0, "clip_dual": 5.0}
    a, b = _twin_steps(method, data, config, settings)
    train = a.ctx.split("train")
    idx = torch.arange(8)
    batch = Batch(idx, train.X[idx], train.y[idx], torch.tensor([0, 0, 0, 1, 1, 1, 1, 1]))
    for step in (a, b):
        step.update(batch, step.optimizer())
    sigma_p, _ = method.noise_multipliers(config, RunInfo.of(data, settings, 64))
    lr = a.optimizer().param_groups[0]["lr"]
    diff = (_params(a) - _params(b)) / lr
    expected = (2 ** 0.5) * sigma_p * 10.0
    n = diff.numel()
    assert n > 4000
    assert float(diff.std()) == pytest.approx(expected, rel=5 / (2 * n) ** 0.5)  # 5 standard errors


def test_pfld_dual_step_adds_noise_of_std_sigma_d_delta_d():
    """The dual ascent (eq. 10): each constraint violation gets N(0, (sigma_d Delta_d)^2) with
    Theorem 2's Delta_d = sqrt(2) C_d / (min |D_G| - 1) over the whole training set. With the
    multipliers reset to 0.5 before each of 1,000 dual steps, at a budget (eps = 1000) whose
    noise keeps them inside (0, 1) (the clamp would cut the noise), two noise streams from
    the same parameters differ by N(0, 2 (sigma_d Delta_d)^2)."""
    from fairdp.methods import RunInfo

    data = load_dataset("synthetic", rows=1500, features=8, seed=3)
    settings = TrainSettings(epochs=2, batch_size=300, dtype="float64")
    method = get_method("pfld")
    config = {"fairness_notion": "dp", "eps": 1000.0, "clip_primal": 10.0, "clip_dual": 5.0}
    a, b = _twin_steps(method, data, config, settings)
    s = data.split("train").s
    delta_d = 2 ** 0.5 * 5.0 / (np.bincount(s).min() - 1)
    _, sigma_d = method.noise_multipliers(config, RunInfo.of(data, settings, 64))
    diffs, lams = [], []
    for _ in range(1000):
        for step in (a, b):
            step.lam["dp"].fill_(0.5)
            step.end_epoch(0)
            lams.append(step.lam["dp"].flatten())
        diffs.append((a.lam["dp"] - b.lam["dp"]).flatten())
    diffs, lams = torch.cat(diffs), torch.cat(lams)
    assert 0 < float(lams.min()) and float(lams.max()) < 1
    expected = (2 ** 0.5) * sigma_d * delta_d
    assert float(diffs.std()) == pytest.approx(expected, rel=5 / (2 * diffs.numel()) ** 0.5)
