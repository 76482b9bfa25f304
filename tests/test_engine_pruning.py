"""Multi-objective pruning inside packs (issue 16): dominated configs stop at rungs, the others
continue exactly as they would have; opt-in, from a study YAML and the CLI, stored per row."""

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import fairdp.engine._loop as loop
from fairdp.data import load_dataset
from fairdp.engine import ModelSpec, Pruning, TrainSettings, fit_pack, layer_shapes
from fairdp.engine._prune import configs_to_stop, dominators
from fairdp.engine._shared import preset_for
from fairdp.errors import InputError
from fairdp.fairness import confusion, scores_from_confusion
from fairdp.methods import RepresentationStep, get_method, load_plugins, method_names
from fairdp.study import ResultStore, parse_spec, read_results
from fairdp.study._shared import with_overrides
from tests.conftest import REPO, assert_input_error, run_main

from .conftest import whole_report

pytestmark = pytest.mark.xdist_group("engine_pruning")  # one xdist worker computes the module's shared runs once

load_plugins([str(REPO / "examples" / "gap_reg.py")])  # the plugin's step is pruned like the built-ins

SETTINGS = TrainSettings(epochs=4, batch_size=200, device="cpu", dtype="float64")
# Laplace noise in training and evaluation: every random stream a survivor must keep
NOISE_CONFIGS = [{"eps": e} for e in (0.05, 0.2, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)]


@pytest.fixture(scope="module")
def data():
    return load_dataset("synthetic", rows=1500, features=12, seed=3)


@pytest.fixture(scope="module")
def unpruned(data):
    return get_method("noise").train_pack(data, NOISE_CONFIGS, seed=0, settings=SETTINGS)


def _pruned(data, **prune):
    settings = dataclasses.replace(SETTINGS, prune=Pruning(**prune))
    return get_method("noise").train_pack(data, NOISE_CONFIGS, seed=0, settings=settings)


# -- the rule --------------------------------------------------------------------------------

def test_a_config_is_dominated_only_when_beaten_by_the_margin_on_both_objectives():
    acc = np.array([80.0, 79.0, 79.8, 70.0])
    gap = np.array([2.0, 3.0, 2.3, np.nan])
    # config 2 is within the margin of config 0, and beats config 1 by it; a NaN gap is never compared
    assert dominators(acc, gap, 0.5).tolist() == [0, 2, 0, 0]
    assert dominators(acc, gap, 0.0).tolist() == [0, 2, 1, 0]
    assert dominators(np.array([5.0, 5.0]), np.array([1.0, 1.0]), 0.0).tolist() == [0, 0]  # equal: neither


def test_keep_bounds_how_many_stop_and_the_most_dominated_go_first():
    acc = np.array([90.0, 80.0, 70.0, 60.0, 50.0, 40.0])
    gap = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])  # a chain: config i is dominated by all before it
    assert configs_to_stop(acc, gap, Pruning((1,), keep=0.5, margin=0.0)) == [3, 4, 5]
    assert configs_to_stop(acc, gap, Pruning((1,), keep=0.01, margin=0.0)) == [1, 2, 3, 4, 5]  # never empties
    assert configs_to_stop(acc, gap, Pruning((1,), keep=1.0, margin=0.0)) == []
    assert configs_to_stop(acc, gap, Pruning((1,), keep=0.01, margin=4.5)) == [5]  # gaps 1 vs 6 only


# -- the engine --------------------------------------------------------------------------------

def test_pruning_is_off_by_default(data, unpruned):
    assert TrainSettings().prune is None and unpruned.pruned_at is None
    spec = parse_spec({"name": "p", "dataset": {"name": "synthetic", "rows": 300}, "methods": {"noise": {}}})
    assert spec.train.prune is None


def _constant_adversarial(data, epochs: int, pruning: Pruning | None = None):
    """Adversarial training at a constant lambda: no evaluation noise (a config's valid
    predictions are those of its kept epoch) and nothing that depends on the number of
    epochs, so a pack trained for ``rung`` epochs is the first ``rung`` epochs of a longer one."""
    spec = ModelSpec(adversaries=1, schedule="constant")
    arch = preset_for(data.name)
    configs = [{"lam": lam} for lam in (0.0, 0.2, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)]
    settings = dataclasses.replace(SETTINGS, epochs=epochs, lr=1e-3, prune=pruning)
    return fit_pack(lambda ctx: RepresentationStep(ctx, spec), data, configs, [str(c["lam"]) for c in configs], 0,
                    settings, arch, shapes=layer_shapes(spec, arch, data.n_features, data.n_classes, data.n_groups))


def test_the_dominated_configs_stop_at_the_rung_and_the_others_continue(data):
    rung, pruning = 2, Pruning((2,), keep=0.25, margin=0.0)
    at_rung = _constant_adversarial(data, rung)  # what each config would report if it stopped there
    accuracy = at_rung.valid_accuracy_history.max(axis=1)
    valid = data.split("valid")  # the gap as the rows compute it, from numpy counts of the predictions
    gap = scores_from_confusion(confusion(valid.y, at_rung.predictions["valid"], valid.s, n_classes=data.n_classes,
                                          n_groups=data.n_groups))["tpr_gap"]
    expected = configs_to_stop(accuracy, gap, pruning)
    assert expected, "the fixture should have dominated configs"
    result = _constant_adversarial(data, 4, pruning)
    assert np.flatnonzero(result.pruned_at == rung).tolist() == expected
    assert (np.delete(result.pruned_at, expected) == 0).all()
    stopped = result.pruned_at == rung
    # a stopped config reports its best epoch up to the rung, as the short run does
    np.testing.assert_array_equal(result.best_epoch[stopped], at_rung.best_epoch[stopped])
    np.testing.assert_array_equal(result.predictions["test"][stopped], at_rung.predictions["test"][stopped])
    assert np.isnan(result.valid_accuracy_history[stopped, rung:]).all()


def test_survivors_train_bit_for_bit_as_without_pruning(data, unpruned):
    for keep in (0.25, 0.5):  # two different sets stopped: survivors never depend on which
        result = _pruned(data, rungs=(1, 2), keep=keep, margin=0.0)
        alive = result.pruned_at == 0
        assert 0 < alive.sum() < len(NOISE_CONFIGS)
        assert alive.sum() >= np.ceil(keep * np.ceil(keep * len(NOISE_CONFIGS)))  # keep at each of two rungs
        np.testing.assert_array_equal(result.best_epoch[alive], unpruned.best_epoch[alive])
        np.testing.assert_array_equal(result.valid_accuracy_history[alive], unpruned.valid_accuracy_history[alive])
        for split in ("valid", "test"):
            np.testing.assert_array_equal(result.predictions[split][alive], unpruned.predictions[split][alive])
            np.testing.assert_array_equal(result.representations[split][alive],
                                          unpruned.representations[split][alive])


def test_a_margin_nobody_beats_stops_nothing(data, unpruned):
    result = _pruned(data, rungs=(1, 2), keep=0.1, margin=100.0)
    assert (result.pruned_at == 0).all()
    np.testing.assert_array_equal(result.predictions["test"], unpruned.predictions["test"])


NEURAL = [n for n in method_names() if get_method(n).optimizer is not None]


@pytest.mark.parametrize("name", NEURAL)
def test_every_neural_method_keeps_its_survivors_state_when_a_config_is_cut_out(name, data, monkeypatch):
    """Whatever the rule decides, taking a config out of a chunk (model, optimiser, per-config
    state, random streams) leaves the others' runs unchanged; one chunk of three, then three
    chunks of one, so whole chunks stop too. Layers of 32 units (the method's own depths and
    dropout): a mis-sliced state shows at any width."""
    method = get_method(name)
    grid = method.expand(method.paper_grid(data.name))
    configs = [grid[i] for i in sorted({0, len(grid) // 2, len(grid) - 1})]
    arch = method.default_architecture(data.name)
    arch = dataclasses.replace(arch, **{part: (32,) * len(getattr(arch, part))
                                        for part in ("encoder", "classifier", "adversary")})
    base = TrainSettings(epochs=3, batch_size=256, device="cpu", dtype="float64")
    monkeypatch.setattr(loop, "configs_to_stop", lambda acc, gap, pruning: [1] if len(acc) == len(configs) else [])
    for chunk in (len(configs), 1):
        settings = dataclasses.replace(base, config_chunk=chunk)
        full = method.train_pack(data, configs, seed=0, settings=settings, arch=arch)
        pruned = method.train_pack(data, configs, seed=0, arch=arch,
                                   settings=dataclasses.replace(settings, prune=Pruning((1,), fairness="notion_gap")))
        if len(configs) == 1:
            assert (pruned.pruned_at == 0).all()
            continue
        assert pruned.pruned_at.tolist() == [0, 1, 0][:len(configs)] + [0] * (len(configs) - 3)
        alive = pruned.pruned_at == 0
        for split in ("valid", "test"):
            np.testing.assert_array_equal(pruned.predictions[split][alive], full.predictions[split][alive])
            # equal up to the last bit of float64: a batched per-sample gradient (pfld, dpsgd) may
            # sum in another order for 2 configs than for 3; a mis-sliced state differs by far more
            np.testing.assert_allclose(pruned.representations[split][alive], full.representations[split][alive],
                                       rtol=1e-12, atol=1e-14)
        for key, values in full.diagnostics.items():
            np.testing.assert_array_equal(pruned.diagnostics[key][alive], values[alive])


def test_a_step_with_undeclared_per_config_state_is_refused_before_training(data):
    class Undeclared(RepresentationStep):
        def __init__(self, ctx, spec):
            super().__init__(ctx, spec)
            self.weight = ctx.per_config("eps")

    method = get_method("noise")
    settings = dataclasses.replace(SETTINGS, prune=Pruning((1,)))
    with pytest.raises(ValueError, match="Undeclared.*per_config_attributes"):
        fit_pack(lambda ctx: Undeclared(ctx, method.spec), data, NOISE_CONFIGS[:2], ["a", "b"], 0,
                      method.effective_settings(settings), method.default_architecture(data.name),
                      shapes=method.layer_shapes(data, method.default_architecture(data.name)))


# -- the study spec and the CLI -------------------------------------------------------------------

def _spec(**prune):
    return {"name": "prune-spec", "dataset": {"name": "synthetic", "rows": 300}, "train": {"epochs": 6},
            "methods": {"noise": {}}, "prune": prune}


@pytest.mark.parametrize("prune, field", [
    ({"rungs": [2], "keep": 0.5, "every": 1}, "prune.every"),
    ({"keep": 0.5}, "prune.rungs"),
    ({"rungs": []}, "prune.rungs"),
    ({"rungs": [3, 2]}, "prune.rungs[1]"),
    ({"rungs": [0]}, "prune.rungs[0]"),
    ({"rungs": [2, 6]}, "prune.rungs"),  # not below train.epochs
    ({"rungs": [2], "keep": 0}, "prune.keep"),
    ({"rungs": [2], "keep": 1.5}, "prune.keep"),
    ({"rungs": [2], "margin": -1}, "prune.margin"),
])
def test_bad_prune_blocks_are_one_line_errors_naming_the_field(prune, field):
    with pytest.raises(InputError) as e:
        parse_spec(_spec(**prune))
    assert str(e.value).startswith(field + ":") and "\n" not in str(e.value)


def test_a_study_of_methods_without_epochs_cannot_ask_for_pruning():
    spec = {**_spec(rungs=[2]), "methods": {"reductions": {}}}
    with pytest.raises(InputError, match="^prune: no method of the study trains by epochs"):
        parse_spec(spec)


def test_the_spec_sets_the_pruning_the_engine_reads_and_epochs_overrides_are_checked():
    spec = parse_spec({**_spec(rungs=[2, 4], keep=0.5), "selection": {"fairness": "dp_gap"}})
    assert spec.train.prune == Pruning((2, 4), keep=0.5, margin=0.5, fairness="dp_gap")
    with pytest.raises(InputError, match=r"^prune.rungs: every rung must be below train.epochs \(4\)"):
        with_overrides(spec, epochs=4)


def test_a_cli_run_stores_pruned_at_and_the_report_says_so(tmp_path):
    study = tmp_path / "pruned.yaml"
    study.write_text(yaml.safe_dump({
        "name": "pruned", "dataset": {"name": "synthetic", "rows": 1500, "features": 12, "seed": 3},
        "train": {"epochs": 4, "batch_size": 200}, "evaluate": {"leakage": False, "mdl": False},
        # one reductions config (its paper grid is 12 expgrad fits): a method not trained by epochs
        "methods": {"noise": {"grid": {"eps": [e["eps"] for e in NOISE_CONFIGS]}},
                    "reductions": {"grid": {"fairness_notion": ["dp"], "bound": [0.05]}}},
        "pack_size": len(NOISE_CONFIGS), "prune": {"rungs": [1, 2], "keep": 0.25, "margin": 0.0},
    }))
    results = tmp_path / "r"
    proc = run_main("run", str(study), "--results", str(results), "--executor", "local")
    assert proc.returncode == 0, proc.stderr
    rows = read_results(results)
    noise = rows[rows["method"] == "noise"]
    stopped = noise["pruned_at"].dropna()
    assert len(stopped) and set(stopped) <= {1, 2} and noise["pruned_at"].isna().any()
    assert (noise.loc[stopped.index, "best_epoch"] <= stopped).all()
    assert rows.loc[rows["method"] == "reductions", "pruned_at"].isna().all()  # not trained by epochs
    report = run_main("report", str(results), "-o", str(tmp_path / "report"))  # fairdp's main, in this process
    assert report.returncode == 0, report.stderr
    text = whole_report(tmp_path / "report")
    assert "Pruned inside packs" in text and "synthetic/noise:" in text
    again = run_main("run", str(study), "--results", str(results), "--executor", "local")  # resume: nothing to do
    assert again.returncode == 0, again.stderr
    assert len(read_results(results)) == len(rows)


def test_a_bad_prune_block_exits_2_before_anything_is_written(tmp_path):
    study = tmp_path / "bad.yaml"
    study.write_text(yaml.safe_dump(_spec(rungs=[4, 2])))
    proc = run_main("run", str(study), "--results", str(tmp_path / "r"), "--executor", "local")
    assert_input_error(proc, "prune.rungs[1]")
    assert not (tmp_path / "r").exists()


def test_rows_written_before_pruning_existed_still_load(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fairdp.analysis._report import _pruning_sentence

    path = ResultStore(tmp_path / "r").pack_path("synthetic", "noise", 0, "oldformat")
    Path(path).parent.mkdir(parents=True)
    pq.write_table(pa.table({"study": ["old"], "dataset": ["synthetic"], "method": ["noise"], "seed": [0],
                             "config_id": ["c"], "status": ["ok"], "valid_accuracy": [70.0]}), path)
    rows = read_results(tmp_path / "r")
    assert "pruned_at" not in rows.columns and _pruning_sentence(rows) == ""
    assert _pruning_sentence(pd.DataFrame({"dataset": ["d"] * 2, "method": ["m"] * 2,
                                           "pruned_at": [2, None]})) != ""
