"""The method contract: the checks every registered method passes, fairdp's own and a plugin's.

Run on fairdp's methods by ``tests/test_methods_contract.py`` (which adds the privacy checks
against independent computations, per method), and on a plugin's by ``fairdp check-method
MODULE``, which runs this module with pytest on the methods MODULE registers:

(a) a config trained in a pack gives what it gives alone (float64), a pack reproduces bit for
    bit, and a pack killed mid-training resumes from its checkpoint bit for bit;
(b) its rows go through evaluate_pack into a ResultStore and read back with every declared
    hyperparameter as a column and the privacy hook's guarantee;
(c) a method that reports a finite eps says what it protects (``privacy_scope``);
(d) the optimiser and learning rate it declares are the ones its step builds, and bad configs
    are refused with a one-line error naming the key.

``FAIRDP_CHECK_PLUGINS`` (paths or module names, separated by ``os.pathsep``) are loaded before
the methods are listed; with ``FAIRDP_CHECK_ONLY_PLUGINS=1`` only the methods they register are
checked.
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import pytest
import torch

from fairdp.data import load_dataset
from fairdp.engine import Checkpointing, TrainSettings
from fairdp.engine._shared import CheckpointFile
from fairdp.engine.contract import VALID_CURVES, PackContext
from fairdp.errors import InputError
from fairdp.fairness import confusion, scores_from_confusion
from fairdp.methods import NeuralMethod, RunInfo, get_method, load_plugins, method_names
from fairdp.metrics import ProbeSettings
from fairdp.study import ResultStore, study_columns
from fairdp.study.executors import Pack, StudyContext, run_pack

PLUGINS_ENV = "FAIRDP_CHECK_PLUGINS"
ONLY_PLUGINS_ENV = "FAIRDP_CHECK_ONLY_PLUGINS"


def _checked() -> tuple[tuple[str, ...], list[str]]:
    """(the plugins loaded, the methods to check)."""
    before = set(method_names())
    plugins = tuple(load_plugins([p for p in os.environ.get(PLUGINS_ENV, "").split(os.pathsep) if p],
                                 key=PLUGINS_ENV))
    if os.environ.get(ONLY_PLUGINS_ENV) == "1":
        return plugins, [n for n in method_names() if n not in before]
    return plugins, method_names()


PLUGINS, CHECKED = _checked()  # registered before parametrizing
DATA_OPTIONS = {"rows": 1500, "features": 12, "seed": 1}
SETTINGS = TrainSettings(epochs=2, batch_size=256, dtype="float64")


@pytest.fixture(scope="module")
def data():
    return load_dataset("synthetic", **DATA_OPTIONS)


CONTRACT_WIDTH = 32


def architecture_of(name: str, data):
    """The method's own architecture (its depths, dropout, modules) with every hidden layer
    ``CONTRACT_WIDTH`` units wide: what the contract trains. Packing, resuming and the rows do
    not depend on width, and the FEDERATE family's 300-unit layers cost the contract ~2x."""
    arch = get_method(name).default_architecture(data.name)
    return dataclasses.replace(arch, **{part: (CONTRACT_WIDTH,) * len(getattr(arch, part))
                                        for part in ("encoder", "classifier", "adversary")})


def configs_of(name: str, data) -> list[dict]:
    """Three configs spread over the method's paper grid (fewer if the grid is smaller)."""
    method = get_method(name)
    grid = method.expand(method.paper_grid(data.name))
    return [grid[i] for i in sorted({0, len(grid) // 2, len(grid) - 1})]


@pytest.fixture(scope="module")
def packs(data):
    """Each method's pack of ``configs_of``, trained once as one chunk in float64."""
    cache = {}

    def get(name):
        if name not in cache:
            configs = configs_of(name, data)
            settings = dataclasses.replace(SETTINGS, config_chunk=len(configs))
            cache[name] = get_method(name).train_pack(data, configs, seed=0, settings=settings,
                                                      arch=architecture_of(name, data))
        return cache[name]

    return get


# -- (a) packing is an execution detail ------------------------------------------------------

@pytest.mark.parametrize("name", CHECKED)
def test_a_pack_gives_each_config_what_it_gives_alone(name, data, packs):
    check_pack_and_alone(get_method(name), data, configs_of(name, data), SETTINGS, packs(name),
                         architecture_of(name, data))


def check_pack_and_alone(method, data, configs: list[dict], settings: TrainSettings, packed, arch=None) -> None:
    """``packed`` (``configs`` trained as one chunk at ``settings`` over ``arch``) reproduces
    bit for bit, has the shapes and curves rows are made from, and after one epoch gives each
    config what it gives alone."""
    k = len(configs)
    settings = dataclasses.replace(settings, config_chunk=k)
    dim = method.representation_dim(data, arch)
    by_epochs = packed.valid_accuracy_history.shape[1] > 0
    for split in ("valid", "test"):
        n = len(data.splits[split])
        preds, reps = packed.predictions[split], packed.representations[split]
        assert preds.shape == (k, n) and preds.min() >= 0 and preds.max() < data.n_classes
        assert reps.shape == (k, n, dim) and np.isfinite(reps).all()
    if by_epochs:  # same seed, same pack: bitwise (a method without epochs: each config alone, below)
        again = method.train_pack(data, configs, seed=0, settings=settings, arch=arch)
        for split in ("valid", "test"):
            np.testing.assert_array_equal(packed.predictions[split], again.predictions[split])
            np.testing.assert_array_equal(packed.representations[split], again.representations[split])
    assert packed.best_epoch.shape == (k,)
    epochs = settings.epochs
    if by_epochs:  # the kept epoch is one of them
        assert ((packed.best_epoch >= 1) & (packed.best_epoch <= epochs)).all()
        # the per-epoch curves at the kept epoch are the kept model's valid scores, as the rows
        # compute them (numpy counts of its predictions), unless evaluating it draws noise (a
        # local-DP representation is drawn afresh at every evaluation); the loss is a cross-entropy
        valid = data.split("valid")
        scores = scores_from_confusion(confusion(valid.y, packed.predictions["valid"], valid.s,
                                                 n_classes=data.n_classes, n_groups=data.n_groups),
                                       settings.min_group_count)
        assert sorted(packed.valid_history) == sorted(VALID_CURVES)
        kept = (np.arange(k), packed.best_epoch - 1)
        for curve in VALID_CURVES:
            assert packed.valid_history[curve].shape == (k, epochs)
            if curve != "loss" and method.privacy_scope != "local":
                np.testing.assert_allclose(packed.valid_history[curve][kept], scores[curve], atol=1e-9)
        assert (np.isfinite(packed.valid_history["loss"]) & (packed.valid_history["loss"] > 0)).all()
    # Pack and alone agree to rounding after one epoch; later, rounding that training amplifies
    # can move them apart (on CUDA, a different best epoch by epoch 30: test_engine's statistical
    # test). On a CPU fairdp's FEDERATE stays bit-identical for 30 epochs (test_engine), but a
    # method's own packed kernels need not, so the contract asks for one epoch. A method that
    # does not train by epochs trains its configs one by one: each alone is its packed self, bitwise.
    if by_epochs:
        alone_settings = dataclasses.replace(settings, epochs=1)
        packed_once = method.train_pack(data, configs, seed=0, settings=alone_settings, arch=arch)
    else:
        alone_settings, packed_once = settings, packed
    for i, cfg in enumerate(configs):
        alone = method.train_pack(data, [cfg], seed=0, settings=alone_settings, arch=arch)
        assert packed_once.best_epoch[i] == alone.best_epoch[0]
        np.testing.assert_allclose(packed_once.valid_accuracy_history[i], alone.valid_accuracy_history[0])
        for split in ("valid", "test"):
            np.testing.assert_array_equal(packed_once.predictions[split][i], alone.predictions[split][0])
            if by_epochs:
                np.testing.assert_allclose(packed_once.representations[split][i],
                                           alone.representations[split][0], rtol=1e-9, atol=1e-9)
            else:
                np.testing.assert_array_equal(packed_once.representations[split][i], alone.representations[split][0])
        assert packed_once.privacy[i] == alone.privacy[0]


class MemoryCheckpoint(CheckpointFile):
    """A checkpoint file in memory; counts its writes."""

    name = "memory"

    def __init__(self):
        self.blob, self.writes = None, 0

    def read(self):
        return self.blob

    def write(self, blob):
        self.blob, self.writes = blob, self.writes + 1

    def drop(self):
        self.blob = None


class Killed(Exception):
    pass


def assert_same_pack(got, want):
    """Two PackResults equal bit for bit in everything a row is made from."""
    np.testing.assert_array_equal(got.best_epoch, want.best_epoch)
    assert sorted(got.valid_history) == sorted(want.valid_history)
    for curve in want.valid_history:
        np.testing.assert_array_equal(got.valid_history[curve], want.valid_history[curve])
    for split in want.predictions:
        np.testing.assert_array_equal(got.predictions[split], want.predictions[split])
        np.testing.assert_array_equal(got.representations[split], want.representations[split])
    assert sorted(got.diagnostics) == sorted(want.diagnostics)
    for key in want.diagnostics:
        np.testing.assert_array_equal(got.diagnostics[key], want.diagnostics[key])
    assert got.privacy == want.privacy and got.privacy_events == want.privacy_events
    assert got.packing == want.packing


@pytest.mark.parametrize("name", CHECKED)
def test_a_pack_killed_mid_training_resumes_from_its_checkpoint_bit_for_bit(name, data, packs):
    if not packs(name).valid_accuracy_history.shape[1]:  # check_resume would train it to find out
        pytest.skip(f"{name} does not train by epochs: nothing to checkpoint")
    assert check_resume(get_method(name), data, configs_of(name, data), SETTINGS, packs(name),
                        architecture_of(name, data))


def check_resume(method, data, configs: list[dict], settings: TrainSettings, uninterrupted, arch=None) -> bool:
    """A run killed in its last epoch and started again continues from the saved epoch and
    computes exactly what the ``uninterrupted`` pack did: same streams, moments, best epochs.
    False for a method that does not train by epochs (nothing to checkpoint)."""
    settings = dataclasses.replace(settings, config_chunk=len(configs))
    file = MemoryCheckpoint()
    seen = []
    last = settings.epochs

    def kill_in_the_last_epoch(report):
        seen.append(report.epoch)
        if report.epoch == last:
            raise Killed

    killed = False
    try:
        method.train_pack(data, configs, seed=0, settings=settings, arch=arch, callback=kill_in_the_last_epoch,
                          checkpoint=Checkpointing(file, every_s=0))
    except Killed:
        killed = True
    if not seen:
        assert file.writes == 0 and not killed
        return False
    assert killed and file.writes == last - 1  # saved after each epoch before the last, killed in it
    resumed_epochs = []
    resumed = method.train_pack(data, configs, seed=0, settings=settings, arch=arch,
                                callback=lambda r: resumed_epochs.append(r.epoch),
                                checkpoint=Checkpointing(file, every_s=0))
    assert resumed_epochs == [last]  # the others came from the checkpoint
    assert resumed.resumed_s > 0
    assert_same_pack(resumed, uninterrupted)
    return True


# -- (b) rows, with every declared hyperparameter, through the store --------------------------

@pytest.mark.parametrize("name", CHECKED)
def test_rows_reach_the_store_with_every_hyperparameter_as_a_column(name, data, tmp_path):
    method = get_method(name)
    configs = configs_of(name, data)
    ctx = StudyContext(study="contract", dataset="synthetic", dataset_options=DATA_OPTIONS,
                       train=TrainSettings(epochs=2, batch_size=256), leakage=True, mdl=False,
                       probe=ProbeSettings(max_epochs=5), results=str(tmp_path), cpus_per_trial=1,
                       plugins=PLUGINS, columns=tuple(study_columns([name])))
    pack = Pack(name, 0, tuple(configs), tuple(method.config_id(c) for c in configs))
    rows = run_pack(ctx, pack)
    df, corrupt = ResultStore(tmp_path).read()
    assert corrupt == [] and len(df) == len(configs) == len(rows)
    assert (df["status"] == "ok").all() and (df["method"] == name).all()
    df = df.set_index("config_id").loc[list(pack.config_ids)]
    for h in method.hyperparams:
        assert h.name in df.columns, h.name
        stored = df[h.name].tolist()
        assert stored == [h.to_column(c[h.name]) for c in configs], (h.name, stored)
    for col in ("valid_accuracy", "test_accuracy", "valid_dp_gap", "leakage"):
        assert df[col].between(0, 100).all(), col
    # the rows' guarantee is the hook's, for the run's shape
    run = RunInfo.of(data, ctx.train, method.representation_dim(data))
    for (eps, delta), cfg in zip(df[["eps_formal", "delta"]].itertuples(index=False), configs):
        assert (eps, delta) == tuple(method.privacy(cfg, run))


# -- the optimiser a method declares is the one its step builds --------------------------------

@pytest.mark.parametrize("name", CHECKED)
def test_the_declared_optimizer_and_learning_rate_are_the_ones_used(name, data):
    method = get_method(name)
    if not isinstance(method, NeuralMethod):
        assert method.optimizer is None and method.effective_settings(SETTINGS).lr is None
        return
    expected = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[method.optimizer]
    for lr, want in ((None, method.default_lr), (0.0123, 0.0123)):
        settings = method.effective_settings(TrainSettings(epochs=1, batch_size=256, lr=lr))
        ctx = PackContext(data, configs_of(name, data)[:1], ["x"], 0, settings,
                          method.default_architecture(data.name), torch.device("cpu"))
        opt = method.make_step(ctx).optimizer()
        assert type(opt) is expected and opt.param_groups[0]["lr"] == want


# -- (d) bad configs --------------------------------------------------------------------------

def _bad_values(h):
    if h.choices is not None:
        return ["not-a-choice"]
    bad = ["text", math.nan]
    if h.low is not None:
        bad.append(h.low if h.low_open else h.low - 1)
    if h.high is not None:
        bad.append(h.high + 1)
    if h.integer:
        bad.append((h.low or 0) + 1.5)
    return bad


@pytest.mark.parametrize("name", CHECKED)
def test_bad_configs_are_refused_naming_the_key(name, data):
    method = get_method(name)
    good = configs_of(name, data)[0]
    cases = [({**good, "no_such_key": 1.0}, "config.no_such_key")]
    for h in method.hyperparams:
        if h.default is None:  # an optional one left out trains at its default (HyperParam.default)
            cases.append(({k: v for k, v in good.items() if k != h.name}, f"config.{h.name}"))
        cases += [({**good, h.name: v}, f"config.{h.name}") for v in _bad_values(h)]
    for config, key in cases:
        with pytest.raises(InputError) as err:
            method.train_pack(data, [config], seed=0, settings=SETTINGS)
        message = str(err.value)
        assert message.startswith(key + ":") and "\n" not in message, (config, message)


@pytest.mark.parametrize("name", CHECKED)
def test_a_private_method_says_what_its_eps_protects(name, data, packs):
    """One (eps, delta) per config; a finite eps is local (pure eps-LDP, delta 0) or central, so
    that figures never mix the two unlabelled."""
    method = get_method(name)
    result = packs(name)
    assert len(result.privacy) == len(result.configs)
    private = any(math.isfinite(eps) for eps, _ in result.privacy)
    assert (method.privacy_scope in ("local", "central")) if private else method.privacy_scope is None
    if method.privacy_scope == "local":
        assert all(delta == 0.0 for _, delta in result.privacy)
