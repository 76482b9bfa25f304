"""Training settings as grid keys: a study may sweep ``lr`` and ``batch_size`` per config, for
every method trained by gradient. Each layer once: the spec, the planner (one setting per
pack), training (a config trains as it would alone at its setting; its guarantee is for its
batch size), the rows (each row's own lr and batch size), resuming, and the analysis."""

import math
import os

import dp_accounting
import numpy as np
import pandas as pd
import pytest

from fairdp.analysis._rows import hyperparameter_columns
from fairdp.data import load_dataset
from fairdp.engine import TrainSettings
from fairdp.errors import InputError
from fairdp.methods import get_method
from fairdp.privacy import event_from_json
from fairdp.study import parse_spec, read_results, run_study
from fairdp.study.run._plan import plan_packs

SPEC = {
    "name": "settings",
    "dataset": {"name": "synthetic", "rows": 600, "features": 6},
    "seeds": [0],
    "train": {"epochs": 2, "batch_size": 100},
    "evaluate": {"leakage": False, "mdl": False},  # what rows store of the settings needs no probe
    "methods": {
        "dpsgd": {"grid": {"eps": [1.0], "clip_primal": [1.0], "lr": [0.05, 0.2], "batch_size": [50, 100]}},
        "unconstrained": {},
    },
}


def test_a_grid_sweeps_lr_and_batch_size_and_configs_that_name_none_keep_their_ids():
    spec = parse_spec(SPEC)
    dpsgd = next(m for m in spec.methods if m.name == "dpsgd")
    assert sorted((c["lr"], c["batch_size"]) for c in dpsgd.configs) == [(0.05, 50), (0.05, 100), (0.2, 50), (0.2, 100)]
    assert all(isinstance(c["batch_size"], int) for c in dpsgd.configs)
    assert dpsgd.settings.swept == ("lr", "batch_size")
    plain = next(m for m in spec.methods if m.name == "unconstrained")
    assert plain.configs == ({},) and plain.settings.swept == ()
    # a grid without them expands as before: the same configs, hence the same ids
    method = get_method("dpsgd")
    assert method.expand({"eps": [1.0], "clip_primal": [1.0]}) == [{"eps": 1.0, "clip_primal": 1.0}]


@pytest.mark.parametrize("methods, named", [
    ({"dpsgd": {"grid": {"lr": [0.1]}, "train": {"lr": 0.1}}}, "methods.dpsgd.train.lr"),
    ({"dpsgd": {"grid": {"batch_size": [0]}}}, r"methods.dpsgd.grid.batch_size\[0\]: must be >= 1"),
    ({"dpsgd": {"grid": {"batch_size": [2.5]}}}, r"methods.dpsgd.grid.batch_size\[0\]: must be an integer"),
    ({"dpsgd": {"grid": {"lr": [-1]}}}, r"methods.dpsgd.grid.lr\[0\]: must be > 0"),
    ({"reductions": {"grid": {"lr": [0.1]}}}, "methods.reductions.grid.lr: 'reductions' has no hyperparameter"),
])
def test_bad_setting_grids_are_refused_naming_the_key(methods, named):
    with pytest.raises(InputError, match=named):
        parse_spec({**SPEC, "methods": methods})


def test_the_planner_gives_each_pack_one_setting():
    spec = parse_spec({**SPEC, "pack_size": 8})
    packs, done = plan_packs(spec, pd.DataFrame())
    assert done == 0
    dpsgd = [p for p in packs if p.method == "dpsgd"]
    assert len(dpsgd) == 4 and sum(len(p.configs) for p in dpsgd) == 4
    for p in dpsgd:
        assert len({(c["lr"], c["batch_size"]) for c in p.configs}) == 1


def test_configs_of_several_settings_in_one_pack_train_as_they_would_apart():
    """``train_pack`` splits a pack by setting; each config's outcome and guarantee are those of
    training it alone at its own lr and batch size (the accountant's sampling rate is its
    batch size over n)."""
    data = load_dataset("synthetic", rows=600, features=6, seed=0)
    method = get_method("dpsgd")
    settings = TrainSettings(epochs=2, batch_size=100, dtype="float64")
    configs = [{"eps": 1.0, "clip_primal": 1.0, "lr": lr, "batch_size": b} for lr, b in ((0.05, 50), (0.2, 100))]
    ids = ["a", "b"]
    mixed = method.train_pack(data, configs, seed=0, settings=settings, config_ids=ids)
    n = len(data.splits["train"])
    for i, cfg in enumerate(configs):
        alone = method.train_pack(data, [cfg], seed=0, settings=settings, config_ids=[ids[i]])
        np.testing.assert_array_equal(mixed.predictions["test"][i], alone.predictions["test"][0])
        assert mixed.privacy[i] == alone.privacy[0]
        event, _ = event_from_json(mixed.privacy_events[i])
        assert isinstance(event, dp_accounting.SelfComposedDpEvent)
        assert event.event.sampling_probability == pytest.approx(cfg["batch_size"] / n)
        assert event.count == 2 * math.ceil(n / cfg["batch_size"])


def test_rows_store_each_configs_setting_and_a_resume_accepts_the_sweep(tmp_path):
    results = str(tmp_path / "r")
    devnull = open(os.devnull, "w")
    run_study(parse_spec(SPEC), results, executor="local", progress_stream=devnull)
    rows = read_results(results)
    dpsgd = rows[rows["method"] == "dpsgd"]
    assert sorted(zip(dpsgd["lr"], dpsgd["batch_size"])) == [(0.05, 50), (0.05, 100), (0.2, 50), (0.2, 100)]
    plain = rows[rows["method"] == "unconstrained"].iloc[0]
    assert plain["batch_size"] == 100 and plain["lr"] == get_method("unconstrained").default_lr
    # resuming with another seed: the swept values differ row to row by design, not refused
    summary = run_study(parse_spec({**SPEC, "seeds": [0, 1]}), results, executor="local", progress_stream=devnull)
    assert summary is not None
    assert len(read_results(results)) == 10
    # changing the study's batch size is another protocol for the method that does not sweep it
    with pytest.raises(InputError, match="unconstrained runs with batch_size 100"):
        run_study(parse_spec({**SPEC, "seeds": [0, 1, 2], "train": {"epochs": 2, "batch_size": 64}}), results,
                  executor="local", progress_stream=devnull)
    # the analysis shows the swept settings as hyperparameters
    assert {"lr", "batch_size"} <= set(hyperparameter_columns(read_results(results)))
