"""The method contract over the functional path (torch.func packing of any module): FEDERATE,
adversarial, DP-SGD and PF-LD on (a) the built-in MLP through the functional path, which
computes what the hand-packed path computes to float64 rounding and reproduces bit for bit,
(b) a user's module loaded from a file and (c) a small CNN on the digits teaching set, each of
which: a pack reproduces bit for bit and gives each config what it gives alone, a killed pack
resumes from its checkpoint bit for bit, and cutting a config out of a pack (pruning) leaves
the others' runs as they were."""

import dataclasses

import numpy as np
import pytest

import fairdp.engine._loop as loop
from fairdp.data import load_dataset
from fairdp.engine import Pruning, TrainSettings
from fairdp.engine._shared import architecture_from
from fairdp.methods import get_method
from fairdp.testing.method_contract import check_pack_and_alone, check_resume, configs_of
from tests.conftest import REPO

pytestmark = pytest.mark.xdist_group("methods_contract_functional")  # the packs below, trained once

METHODS = ("federate", "adversarial", "dpsgd", "pfld", "dp_fermi")
SETTINGS = TrainSettings(epochs=2, batch_size=256, dtype="float64")
EXAMPLES = REPO / "examples" / "models.py"
NARROW = {"encoder": [32, 32], "classifier": [], "adversary": [32]}


def _variant(name: str):
    """(data, settings, architecture, the path the pack must take)."""
    if name == "mlp":
        data = load_dataset("synthetic", rows=1200, features=12, seed=1)
        return data, dataclasses.replace(SETTINGS, packing="functional"), architecture_from(NARROW, data.name), \
            "functional"
    if name == "file":
        data = load_dataset("synthetic", rows=1200, features=12, seed=1)
        models = {"encoder": {"factory": "models.py:residual_mlp", "width": 16, "blocks": 1}}
        arch = architecture_from({**NARROW, "models": models}, data.name, base_dir=EXAMPLES.parent)
        return data, SETTINGS, arch, None
    data = load_dataset("digits")
    models = {"encoder": {"factory": "models.py:digits_cnn", "channels": 4}}
    arch = architecture_from({**NARROW, "encoder": [16], "models": models}, data.name, base_dir=EXAMPLES.parent)
    return data, SETTINGS, arch, None


# The built-in MLP through the functional path ("mlp") is checked by being the hand-packed
# path's computation (test_the_built_in_mlp_computes_the_same_on_either_path), whose packs the
# method contract checks; pack = alone, resume and pruning on the functional path itself run on
# the module from a file and on the CNN, whose per-sample gradients (DP-SGD, PF-LD) cost ~25 s
# here: with the slow set (the fast set trains the CNN in a study, tests/test_data_digits.py)
CONTRACT_CASES = [pytest.param(m, v, marks=[pytest.mark.slow] if v == "cnn" else [])
                  for v in ("file", "cnn") for m in METHODS]


@pytest.fixture(scope="module")
def variants():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = _variant(name)
        return cache[name]

    return get


@pytest.fixture(scope="module")
def packs(variants):
    """Each case's pack of ``configs_of``, trained once as one chunk in float64."""
    cache = {}

    def get(method, variant):
        if (method, variant) not in cache:
            data, settings, arch, _ = variants(variant)
            configs = configs_of(method, data)
            cache[method, variant] = get_method(method).train_pack(
                data, configs, seed=0, settings=dataclasses.replace(settings, config_chunk=len(configs)), arch=arch)
        return cache[method, variant]

    return get


@pytest.mark.parametrize("method, variant", CONTRACT_CASES)
def test_a_pack_gives_each_config_what_it_gives_alone(method, variant, variants, packs):
    data, settings, arch, path = variants(variant)
    packed = packs(method, variant)
    # a user's encoder makes DP-SGD's and PF-LD's encoder-classifier chain one functional pack;
    # beside a privatiser or adversaries it is packed alone, next to hand-packed parts
    want = path or ("functional" if method in ("dpsgd", "pfld", "dp_fermi") else "mixed")
    assert packed.packing == want
    check_pack_and_alone(get_method(method), data, configs_of(method, data), settings, packed, arch)


@pytest.mark.parametrize("method, variant", CONTRACT_CASES)
def test_a_pack_killed_mid_training_resumes_from_its_checkpoint_bit_for_bit(method, variant, variants, packs):
    data, settings, arch, _ = variants(variant)
    assert check_resume(get_method(method), data, configs_of(method, data), settings, packs(method, variant), arch)


@pytest.mark.parametrize("method, variant", CONTRACT_CASES)
def test_cutting_a_config_out_leaves_the_others_runs_unchanged(method, variant, variants, packs, monkeypatch):
    """The pruning path slices the pack's stacked parameters, optimiser state and streams:
    the middle config stops after epoch 1, the others end where the unpruned pack ended."""
    data, settings, arch, _ = variants(variant)
    configs = configs_of(method, data)
    full = packs(method, variant)
    monkeypatch.setattr(loop, "configs_to_stop", lambda acc, gap, pruning: [1] if len(acc) == len(configs) else [])
    settings = dataclasses.replace(settings, config_chunk=len(configs), prune=Pruning((1,), fairness="notion_gap"))
    pruned = get_method(method).train_pack(data, configs, seed=0, settings=settings, arch=arch)
    assert pruned.pruned_at.tolist() == [0, 1, 0]
    alive = pruned.pruned_at == 0
    for split in ("valid", "test"):
        np.testing.assert_array_equal(pruned.predictions[split][alive], full.predictions[split][alive])
        # to the last bits of float64: vmap may sum a batched gradient in another order for 2
        # configs than for 3; a mis-sliced state differs by far more
        np.testing.assert_allclose(pruned.representations[split][alive], full.representations[split][alive],
                                   rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("method", METHODS)
def test_the_built_in_mlp_computes_the_same_on_either_path(method, variants, packs):
    """Same initial weights, dropout masks and noise draws (a linear layer's noise laid out as
    the hand-packed layers lay theirs): the functional path's pack is the hand-packed one's to
    float64 rounding after two epochs, and says which path it took."""
    data, settings, arch, _ = variants("mlp")
    configs = configs_of(method, data)
    hand = get_method(method).train_pack(data, configs, seed=0, arch=arch,
                                         settings=dataclasses.replace(SETTINGS, config_chunk=len(configs)))
    functional = packs(method, "mlp")
    assert (hand.packing, functional.packing) == ("hand-packed", "functional")
    again = get_method(method).train_pack(data, configs, seed=0, arch=arch,
                                          settings=dataclasses.replace(settings, config_chunk=len(configs)))
    for split in ("valid", "test"):  # the functional pack reproduces bit for bit
        np.testing.assert_array_equal(again.representations[split], functional.representations[split])
    np.testing.assert_array_equal(functional.best_epoch, hand.best_epoch)
    for split in ("valid", "test"):
        np.testing.assert_array_equal(functional.predictions[split], hand.predictions[split])
        np.testing.assert_allclose(functional.representations[split], hand.representations[split],
                                   rtol=1e-9, atol=1e-12)
    for key in hand.diagnostics:
        np.testing.assert_array_equal(functional.diagnostics[key], hand.diagnostics[key])


def _neural_methods() -> list[str]:
    from fairdp.methods import NeuralMethod, method_names

    return [m for m in method_names() if isinstance(get_method(m), NeuralMethod) and m not in METHODS]


@pytest.mark.parametrize("method", _neural_methods())
def test_every_other_built_in_method_trains_on_the_functional_path_as_it_does_hand_packed(method):
    """``train.packing: functional`` for every built-in network (INLP's base network included:
    its penultimate features come from the functional pack's last_linear_input), one small
    epoch: the predictions the hand-packed path gives."""
    data = load_dataset("synthetic", rows=400, features=8, seed=1)
    arch = architecture_from({"encoder": [16, 16], "classifier": [], "adversary": [16]}, data.name)
    configs = configs_of(method, data)[:2]
    settings = TrainSettings(epochs=1, batch_size=100, dtype="float64", config_chunk=len(configs))
    hand = get_method(method).train_pack(data, configs, seed=0, arch=arch, settings=settings)
    functional = get_method(method).train_pack(data, configs, seed=0, arch=arch,
                                               settings=dataclasses.replace(settings, packing="functional"))
    for split in ("valid", "test"):
        np.testing.assert_array_equal(functional.predictions[split], hand.predictions[split])
