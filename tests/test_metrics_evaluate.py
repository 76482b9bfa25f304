"""A pack's result columns: every method through evaluate_pack, and the formal-privacy columns."""

import math

import numpy as np
import pytest

from fairdp.data import load_dataset
from fairdp.engine import Architecture, TrainSettings
from fairdp.methods import get_method
from fairdp.metrics import ProbeSettings, accuracy, evaluate_pack, tpr_gap

COLUMNS = {"valid_accuracy", "test_accuracy", "valid_tpr_gap", "test_tpr_gap", "valid_grms", "test_grms",
           "valid_dp_gap", "test_dp_gap", "valid_eo_gap", "test_eo_gap", "valid_ap_gap", "test_ap_gap",
           "leakage", "mdl", "eps_formal", "delta", "best_epoch"}


@pytest.fixture(scope="module")
def data():
    return load_dataset("synthetic", rows=1500, features=10, seed=4)


@pytest.mark.parametrize("name, config, eps_formal", [
    ("unconstrained", {}, math.inf),
    ("random", {}, math.inf),
    ("federate", {"lam": 1.0, "eps": 8.0}, 8.0),
    ("noise", {"eps": 4.0}, 4.0),
    ("dpnr", {"eps": 0.5}, 0.5 * 32),  # D = 32: DPNR's claimed eps times the representation size
])
def test_rows_carry_every_metric_and_the_formal_guarantee(name, config, eps_formal, data):
    method = get_method(name)
    arch = Architecture(encoder=(32, 32), adversary=(32,))
    result = method.train_pack(data, [config], seed=0, settings=TrainSettings(epochs=2, batch_size=250), arch=arch)
    (row,) = evaluate_pack(data, result, probe=ProbeSettings(max_epochs=20))
    assert COLUMNS <= set(row)
    assert row["eps_formal"] == eps_formal and row["delta"] == 0.0
    y = data.split("test").y
    assert row["test_accuracy"] == pytest.approx(accuracy(y, result.predictions["test"][0]))
    assert row["test_tpr_gap"] == pytest.approx(tpr_gap(y, result.predictions["test"][0], data.split("test").s))
    for key in COLUMNS - {"eps_formal"}:
        assert np.isfinite(row[key]), key
    assert 0 <= row["leakage"] <= 100 and row["mdl"] > 0


def test_probes_can_be_switched_off(data):
    method = get_method("unconstrained")
    result = method.train_pack(data, [{}], seed=0, settings=TrainSettings(epochs=1, batch_size=500))
    (row,) = evaluate_pack(data, result, with_leakage=False, with_mdl=False)
    assert math.isnan(row["leakage"]) and math.isnan(row["mdl"])


def test_every_fairness_metric_of_the_vocabulary_is_computed():
    from fairdp.fairness import SCORES  # what evaluate_pack scores each split with
    from fairdp.schema import FAIRNESS_COLUMNS, FAIRNESS_METRICS

    assert tuple(SCORES) == ("accuracy", *FAIRNESS_METRICS)
    assert set(FAIRNESS_COLUMNS) <= COLUMNS
