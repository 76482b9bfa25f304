"""A user's module that mixes the rows of a batch cannot weaken DP-SGD's or PF-LD's bound.

Per-sample clipping bounds one record's influence on the clipped sum by C only if each row's
output, and so its loss and the cotangent its gradient is pulled back along, is its own. Two
defences, each tested here: the packed module's private step evaluates every row on its own
(so the sum moves by at most C when a record is removed, for any module), and the study, like
``fairdp check-model``, refuses the modules it can see mixing rows in training mode before
anything is written, naming the role.
"""

from __future__ import annotations

import pytest
import torch
import yaml

from fairdp import _rng
from fairdp.engine import FunctionalPack
from fairdp.engine._shared import build_instances, row_mixing
from fairdp.errors import InputError
from fairdp.methods.dpsgd import cross_entropy_grad
from fairdp.study import parse_spec
from fairdp.study._context import load_study_data
from fairdp.study.spec._spec import check_models
from tests.conftest import assert_input_error, run_main

MIXERS = '''
import torch
from torch import nn


class Centred(nn.Linear):
    def forward(self, x):
        return super().forward(x - x.mean(0))


class CentredWhileTraining(nn.Linear):
    def forward(self, x):
        return super().forward(x - x.mean(0) if self.training else x)


class BatchSoftmax(nn.Linear):
    def forward(self, x):
        return torch.softmax(super().forward(x), dim=0) * 4


class BatchScale(nn.Module):
    """A batch statistic inside a custom layer."""
    def forward(self, x):
        return x / (x.abs().mean(0, keepdim=True) + 1)


class RunningCentre(nn.Linear):
    """Running-mean centring: a buffer updated in place by every forward."""
    def __init__(self, i, o):
        super().__init__(i, o)
        self.register_buffer("mean", torch.zeros(i))

    def forward(self, x):
        self.mean.mul_(0.9).add_(0.1 * x.detach().mean(0))
        return super().forward(x - self.mean)


class Noisy(nn.Linear):
    def forward(self, x):
        return super().forward(x + 0.1 * torch.randn_like(x))


class FaintlyNoisy(nn.Linear):
    """Randomness a millionth of the signal is still randomness no config's stream holds."""
    def forward(self, x):
        return super().forward(x + 1e-6 * torch.randn_like(x))


class SqueezeBatch(nn.Linear):
    """Drops the batch axis of a batch of one (a bare .squeeze() slip): a row evaluated on its
    own, as per-sample clipping evaluates it, gets an output of another shape."""
    def forward(self, x):
        return super().forward(x).squeeze(0)


def centred(i, o):
    return nn.Sequential(Centred(i, 6), nn.Tanh(), nn.Linear(6, o))


def centred_while_training(i, o):
    return nn.Sequential(CentredWhileTraining(i, 6), nn.Tanh(), nn.Linear(6, o))


def batch_softmax(i, o):
    return nn.Sequential(nn.Linear(i, 6), nn.Tanh(), BatchSoftmax(6, o))


def batch_scale(i, o):
    return nn.Sequential(nn.Linear(i, 6), BatchScale(), nn.Tanh(), nn.Linear(6, o))


def running_centre(i, o):
    return nn.Sequential(RunningCentre(i, 6), nn.Tanh(), nn.Linear(6, o))


def noisy(i, o):
    return nn.Sequential(Noisy(i, 6), nn.Tanh(), nn.Linear(6, o))


def faintly_noisy(i, o):
    return nn.Sequential(FaintlyNoisy(i, 6), nn.Tanh(), nn.Linear(6, o))


def squeeze_batch(i, o):
    return nn.Sequential(nn.Linear(i, 6), nn.Tanh(), SqueezeBatch(6, o))


def independent(i, o):
    return nn.Sequential(nn.Linear(i, 6), nn.Tanh(), nn.Dropout(0.5), nn.Linear(6, o))
'''

# factory -> what the refusal says
REFUSED = {
    "centred": "row 0's output depends on the other rows of its batch in training mode",
    "centred_while_training": "row 0's output depends on the other rows of its batch in training mode",
    "batch_softmax": "row 0's output depends on the other rows of its batch in training mode",
    "batch_scale": "row 0's output depends on the other rows of its batch in training mode",
    "running_centre": "its forward updates 0.mean in place",
    "noisy": "random numbers drawn outside nn.Dropout",
    "faintly_noisy": "random numbers drawn outside nn.Dropout",
    "squeeze_batch": "row 0's output depends on the other rows of its batch in training mode",
}
# the mixers a packed step can evaluate row by row (an in-place update of a buffer that every
# row shares cannot be vmapped over rows; random numbers cannot be drawn under vmap by default)
TRAINABLE = ["centred", "centred_while_training", "batch_softmax", "batch_scale"]


@pytest.fixture(scope="module")
def mixers(tmp_path_factory):
    import importlib.util

    path = tmp_path_factory.mktemp("mixers") / "mixers.py"
    path.write_text(MIXERS)
    spec = importlib.util.spec_from_file_location("fairdp_test_mixers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


X = torch.randn(6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_row_mixing_names_every_way_a_module_mixes_rows_in_training_mode(mixers, name):
    module = getattr(mixers, name)(5, 3).double()
    why = row_mixing(module, X)
    assert why is not None and REFUSED[name] in why
    assert module.training  # the user's module is left as it was
    if name == "running_centre":
        assert torch.equal(module[0].mean, torch.zeros(5))  # a copy ran, not the module itself


def test_a_module_whose_rows_are_their_own_passes_with_dropout_held_fixed(mixers):
    assert row_mixing(mixers.independent(5, 3).double(), X) is None
    assert row_mixing(mixers.independent(5, 3).double().eval(), X) is None


def test_a_module_whose_output_is_nan_for_some_rows_does_not_mix_them(tmp_path):
    """NaN is the same output twice and the same alone as in the batch: not mixing, not random
    (the packed step drops such a row's gradient)."""
    x = X.clone()
    x[2, 0] = -1.0
    assert row_mixing(_load(SQRT, tmp_path).root_first(5, 3).double(), x) is None


def _clipped_sum(pack: FunctionalPack, x: torch.Tensor, y: torch.Tensor, clip: float, counts: bool = False):
    """DP-SGD's clipped sum (no noise, weight 1 a row) as the packed step computes it, flattened
    (with ``counts``: and the rows clipped and weighted, (2, 1))."""
    logits, trace = pack.forward_traced(x)
    unit = cross_entropy_grad(logits, y).to(logits.dtype)
    for p in pack.parameters():
        p.grad = None
    weight = -torch.ones(1, len(y), dtype=torch.float64)
    clipped = pack.add_clipped(trace, unit, None, weight, torch.tensor([clip], dtype=torch.float64), None, None)
    flat = torch.cat([p.grad.flatten() for p in pack.parameters()])
    return (flat, clipped) if counts else flat


def _worst_move(mixers, name: str, clip: float, whole_batch: bool) -> float:
    """The largest norm, in units of C, by which removing one record moves the clipped sum,
    over every record of three batches and initialisations; ``whole_batch``: with the rows'
    outputs from one forward of the whole batch (what the packed step did before)."""
    worst = 0.0
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(12, 5, dtype=torch.float64, generator=g) * 3 + 1
        x[0] *= 10  # an outlier: removing it moves the batch's statistics most
        y = torch.randint(0, 4, (12,), generator=g)
        pack = FunctionalPack(build_instances(lambda: getattr(mixers, name)(5, 4),
                                              _rng.PackStream.from_names([f"mix/{seed}/init"]),
                                              device="cpu", dtype=torch.float64))
        if whole_batch:
            pack.forward_traced = lambda rows, pack=pack: (pack(rows).detach(), rows)
        whole = _clipped_sum(pack, x, y, clip)
        for j in range(len(y)):
            keep = torch.arange(len(y)) != j
            moved = (whole - _clipped_sum(pack, x[keep], y[keep], clip)).norm().item() / clip
            assert moved == moved  # not NaN
            worst = max(worst, moved)
    return worst


@pytest.mark.parametrize("name", TRAINABLE)
def test_removing_one_record_moves_the_packed_clipped_sum_by_at_most_c(mixers, name):
    """For any module, even one that mixes rows: the bound the accountant is told. Evaluated
    with the whole batch at once, the cotangent of every row carries the others: the centring
    modules then move the sum by 1.77 C here."""
    assert _worst_move(mixers, name, 0.5, whole_batch=False) <= 1 + 1e-9
    if name.startswith("centred"):
        assert _worst_move(mixers, name, 0.5, whole_batch=True) > 1.5


def _dataset():
    return load_study_data("synthetic", {"rows": 300, "features": 5})


@pytest.mark.parametrize("name", sorted(REFUSED))
@pytest.mark.parametrize("method, grid", [("dpsgd", {"eps": [2.0], "clip_primal": [1.0]}), ("pfld", {})])
def test_a_study_refuses_a_row_mixing_module_for_a_per_sample_clipped_method(mixers, tmp_path, name, method, grid):
    (tmp_path / "mixers.py").write_text(MIXERS)
    raw = {"name": "mix", "dataset": {"name": "synthetic", "rows": 300, "features": 5}, "seeds": [0],
           "train": {"epochs": 1, "batch_size": 100}, "architecture": {"models": {"encoder": "mixers.py:" + name}},
           "methods": {method: {"grid": grid}}}
    spec = parse_spec(raw, base_dir=tmp_path)
    with pytest.raises(InputError) as err:
        check_models(spec, _dataset(), [method])
    message = str(err.value)
    assert message.startswith("architecture.models.encoder: ") and f"clipped per sample by {method}" in message
    assert REFUSED[name] in message


def test_a_method_that_does_not_clip_per_sample_keeps_its_module(mixers, tmp_path):
    (tmp_path / "mixers.py").write_text(MIXERS)
    raw = {"name": "mix", "dataset": {"name": "synthetic", "rows": 300, "features": 5}, "seeds": [0],
           "architecture": {"models": {"encoder": "mixers.py:centred"}}, "methods": {"unconstrained": {}}}
    check_models(parse_spec(raw, base_dir=tmp_path), _dataset(), ["unconstrained"])


def test_the_run_exits_2_naming_the_role_and_writes_nothing(tmp_path):
    (tmp_path / "mixers.py").write_text(MIXERS)
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({
        "name": "mix", "dataset": {"name": "synthetic", "rows": 300, "features": 5}, "seeds": [0],
        "train": {"epochs": 1, "batch_size": 100},
        "architecture": {"models": {"classifier": "mixers.py:centred_while_training"}},
        "methods": {"dpsgd": {"grid": {"eps": [2.0], "clip_primal": [1.0]}}}}))
    run = run_main("run", str(study), "--results", str(tmp_path / "r"), "--executor", "local", cwd=tmp_path)
    assert_input_error(run, "architecture.models.classifier", "mixers.py:centred_while_training",
                       "cannot be clipped per sample by dpsgd", "in training mode")
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").rglob("*.parquet"))


def test_check_model_fails_a_module_that_mixes_rows_only_in_training_mode(tmp_path):
    (tmp_path / "mixers.py").write_text(MIXERS)
    run = run_main("check-model", "mixers.py:centred_while_training", "--in", "5", "--out", "3", cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert [ln for ln in run.stdout.splitlines() if ln.startswith("FAIL")] == [
        "FAIL  a row's output does not depend on the rest of its batch, in training mode: row 0's output depends "
        "on the other rows of its batch in training mode (batch statistics, or an operation across rows): "
        "per-sample clipping would not bound a row's influence"]


# -- a record whose gradient is not finite ----------------------------------------------------

SQRT = '''
import torch
from torch import nn


class RootFirst(nn.Linear):
    """NaN for a row whose first feature is negative: a user's module can make any record's
    gradient non-finite from finite data."""
    def forward(self, x):
        return super().forward(torch.cat([x[:, :1].sqrt(), x[:, 1:]], dim=1))


def root_first(i, o):
    return nn.Sequential(RootFirst(i, 6), nn.Tanh(), nn.Linear(6, o))
'''


def _load(source: str, tmp_path):
    import importlib.util

    path = tmp_path / "nets.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("fairdp_test_nets", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_record_whose_gradient_is_not_finite_adds_nothing_on_the_functional_path(tmp_path):
    nets = _load(SQRT, tmp_path)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(10, 5, dtype=torch.float64, generator=g)
    x[3, 0] = -1.0  # its output, and so its gradient, is NaN
    y = torch.randint(0, 2, (10,), generator=g)
    pack = FunctionalPack(build_instances(lambda: nets.root_first(5, 2), _rng.PackStream.from_names(["nan/init"]),
                                          device="cpu", dtype=torch.float64))
    whole, counts = _clipped_sum(pack, x, y, 0.5, counts=True)
    keep = torch.arange(10) != 3
    assert torch.isfinite(whole).all()
    assert torch.equal(whole, _clipped_sum(pack, x[keep], y[keep], 0.5))
    assert counts[1].tolist() == [9]  # the row is not counted as weighted


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_record_whose_gradient_is_not_finite_adds_nothing_on_the_hand_packed_chain(bad):
    from fairdp.engine import PackedLinear, add_clipped_gradients, backprop_errors, forward_traced

    g = torch.Generator().manual_seed(1)
    layers = [PackedLinear(_rng.PackStream.from_names(["a/init", "b/init"]), 4, 8, dtype=torch.float64),
              PackedLinear(_rng.PackStream.from_names(["a/init", "b/init"]), 8, 2, dtype=torch.float64)]

    def clipped(x, y):
        out, inputs, _ = forward_traced(layers, x)
        deltas = backprop_errors(layers, inputs, cross_entropy_grad(out, y))
        for p in (p for layer in layers for p in layer.parameters()):
            p.grad = None
        counts = add_clipped_gradients(layers, inputs, deltas, -torch.ones(2, len(y), dtype=torch.float64),
                                       torch.tensor([0.5, 0.5], dtype=torch.float64), None, None)
        return torch.cat([p.grad.flatten() for layer in layers for p in layer.parameters()]), counts

    x = torch.randn(7, 4, dtype=torch.float64, generator=g)
    y = torch.randint(0, 2, (7,), generator=g)
    x[2, 1] = bad
    keep = torch.arange(7) != 2
    (whole, counts), (without, _) = clipped(x, y), clipped(x[keep], y[keep])
    assert torch.isfinite(whole).all()
    assert torch.allclose(whole, without, rtol=1e-12, atol=1e-15)  # a zero row changes only the sums' rounding
    assert counts[1].tolist() == [6, 6]  # the row is not counted as weighted
