"""Checkpoints of packs in training: a killed pack resumes from its last save and computes what
it would have uninterrupted, through chunks trained one after another and through pruning;
a checkpoint that does not belong to the pack, or cannot be read, costs its epochs, never the
run. (Every registered method's resume is checked in test_methods_contract.)"""

import dataclasses

import numpy as np
import pytest

from fairdp.data import load_dataset
from fairdp.engine import Architecture, Checkpointing, Pruning, TrainSettings, _checkpoint
from fairdp.methods import get_method
from fairdp.testing.method_contract import Killed, MemoryCheckpoint, assert_same_pack

pytestmark = pytest.mark.xdist_group("engine_checkpoint")  # one xdist worker computes the module's shared runs once

SETTINGS = TrainSettings(epochs=4, batch_size=200, device="cpu", dtype="float64")
CONFIGS = [{"eps": e, "lam": lam} for e in (1.0, 8.0) for lam in (0.1, 1.0)]
# FEDERATE's layers at 32 units: what a checkpoint must restore does not depend on the width
ARCH = Architecture(encoder=(32, 32), classifier=(), adversary=(32, 32))


@pytest.fixture(scope="module")
def data():
    return load_dataset("synthetic", rows=1200, features=10, seed=5)


@pytest.fixture(scope="module")
def pruned_data():
    # seed 29: under PRUNED both chunks pass rung 1 and one config stops at each rung, the
    # report sequence the kill points below are placed in (asserted there)
    return load_dataset("synthetic", rows=1200, features=10, seed=29)


@pytest.fixture(scope="module")
def uninterrupted(data, pruned_data):
    """(the pack trained without checkpoints, how many epoch reports it made), per settings."""
    cache = {}

    def get(settings):
        if settings not in cache:
            seen = []
            cache[settings] = (_train(pruned_data if settings.prune else data, settings, seen=seen), len(seen))
        return cache[settings]

    return get


def _train(data, settings, file=None, kill_at=None, seen=None):
    """FEDERATE's pack; with ``kill_at`` = (chunk's first config, epoch) the run dies there."""

    def callback(report):
        if seen is not None:
            seen.append(report.epoch)
        if kill_at is not None and len(seen) >= kill_at:
            raise Killed

    method = get_method("federate")
    if file is None:
        return method.train_pack(data, CONFIGS, seed=0, settings=settings, callback=callback, arch=ARCH)
    return method.train_pack(data, CONFIGS, seed=0, settings=settings, callback=callback, arch=ARCH,
                             checkpoint=Checkpointing(file, every_s=0))


CHUNKS = dataclasses.replace(SETTINGS, config_chunk=1)  # four chunks, one after another: 16 epoch reports
# two chunks side by side, configs stopping at rungs 1 and 2: reports (epoch) 1 1 2 2 3 4
PRUNED = dataclasses.replace(SETTINGS, config_chunk=2, prune=Pruning((1, 2), keep=0.5, margin=0.0))


@pytest.mark.parametrize(("settings", "kill_after"), [
    (CHUNKS, 1), (CHUNKS, 6), (CHUNKS, 9),  # in chunk 1, 2 and 3
    (PRUNED, 2), (PRUNED, 3), (PRUNED, 5),  # after rung 1, inside epoch 2, after rung 2
], ids=["chunk1", "chunk2", "chunk3", "rung1", "epoch2", "rung2"])
def test_a_killed_pack_resumes_where_it_stopped(data, pruned_data, uninterrupted, settings, kill_after):
    want, total = uninterrupted(settings)
    if settings.prune is not None:
        data = pruned_data
        assert total == 6 and sorted(want.pruned_at) == [0, 0, 1, 2]  # reports 1 1 2 2 3 4
    file, seen = MemoryCheckpoint(), []
    with pytest.raises(Killed):
        _train(data, settings, file, kill_at=kill_after + 1, seen=seen)
    assert file.blob is not None
    again = []
    got = _train(data, settings, file, seen=again)
    if settings.prune is None:  # saved after every chunk's epoch: only the killed one trains again
        assert len(again) == total - kill_after
    else:  # saved after every epoch of the whole pack: the killed epoch's chunks train again
        assert total - kill_after <= len(again) < total
    assert_same_pack(got, want)
    if settings.prune is not None:
        np.testing.assert_array_equal(got.pruned_at, want.pruned_at)
        assert (want.pruned_at > 0).any()  # some configs did stop at a rung




@pytest.mark.parametrize("other", ["setting", "data"])
def test_a_checkpoint_of_another_setting_or_of_other_data_is_not_resumed(data, other, caplog):
    file = MemoryCheckpoint()
    with pytest.raises(Killed):
        _train(data, SETTINGS, file, kill_at=2, seen=[])
    if other == "setting":
        other_data, other_settings = data, dataclasses.replace(SETTINGS, lr=2e-3)
    else:  # of the same name and shapes
        other_data, other_settings = load_dataset("synthetic", rows=1200, features=10, seed=5,
                                                  label_correlation=1.0), SETTINGS
        assert {n: len(v) for n, v in other_data.splits.items()} == {n: len(v) for n, v in data.splits.items()}
    seen = []
    got = _train(other_data, other_settings, file, seen=seen)
    assert seen == [1, 2, 3, 4] and "another pack or setting" in caplog.text
    assert_same_pack(got, _train(other_data, other_settings))


def test_an_unreadable_checkpoint_costs_its_epochs_not_the_run(data, uninterrupted, caplog):
    file = MemoryCheckpoint()
    with pytest.raises(Killed):
        _train(data, SETTINGS, file, kill_at=3, seen=[])
    file.blob = file.blob[: len(file.blob) // 2]  # torn
    seen = []
    got = _train(data, SETTINGS, file, seen=seen)
    assert seen == [1, 2, 3, 4] and "unreadable checkpoint" in caplog.text
    assert_same_pack(got, uninterrupted(SETTINGS)[0])


def test_saves_follow_the_interval_and_the_end_of_training(data, monkeypatch):
    file = MemoryCheckpoint()
    get_method("federate").train_pack(data, CONFIGS, seed=0, settings=SETTINGS, arch=ARCH,
                                      checkpoint=Checkpointing(file, every_s=3600))
    assert file.writes == 0  # a pack of seconds: cheaper to retrain than to write
    monkeypatch.setattr(_checkpoint, "FINAL_SAVE_S", 0.0)  # as if it had trained for minutes
    get_method("federate").train_pack(data, CONFIGS, seed=0, settings=SETTINGS, arch=ARCH,
                                      checkpoint=Checkpointing(file, every_s=3600))
    assert file.writes == 1  # only when training ended: a kill while it is evaluated loses no training
    file = MemoryCheckpoint()
    get_method("federate").train_pack(data, CONFIGS, seed=0, settings=SETTINGS, arch=ARCH, checkpoint=Checkpointing(file, every_s=0))
    assert file.writes == SETTINGS.epochs
    file = MemoryCheckpoint()
    get_method("federate").train_pack(data, CONFIGS, seed=0, settings=SETTINGS, arch=ARCH)
    assert file.writes == 0  # no checkpoint given: nothing saved


def test_a_state_that_cannot_be_saved_trains_on_without_checkpoints(data, uninterrupted, monkeypatch, caplog):
    """A step holding what pickle refuses (a plugin's lambda), or a full disk: one line, same numbers."""
    original = get_method("federate").make_step

    def with_a_lambda(ctx):
        step = original(ctx)
        step.schedule = lambda epoch: epoch
        return step

    monkeypatch.setattr(get_method("federate"), "make_step", with_a_lambda)
    file = MemoryCheckpoint()
    got = _train(data, SETTINGS, file, seen=[])
    assert file.writes == 0 and caplog.text.count("cannot save a checkpoint") == 1
    monkeypatch.undo()
    assert_same_pack(got, uninterrupted(SETTINGS)[0])
