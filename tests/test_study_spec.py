"""Study specs: the shipped studies load, grids expand as written, bad specs are refused by key path."""

from pathlib import Path

import pytest
import yaml

from fairdp.cli import main
from fairdp.errors import InputError
from fairdp.methods import get_method
from fairdp.metrics import FEDERATE_PROBE
from fairdp.study import load_spec, parse_spec
from fairdp.study.run._prepare import settings_lines
from fairdp.study.spec._precision import choose_precision, stored_precision
from tests.conftest import REPO

GOOD = {
    "name": "ok",
    "dataset": {"name": "synthetic", "rows": 400},
    "seeds": [0, 1],
    "train": {"epochs": 2, "batch_size": 100},
    "methods": {"federate": {"grid": {"eps": [1, 2, 3], "lam": {"start": 0.1, "stop": 0.5, "step": 0.2}}},
                "unconstrained": {}},
}


def _with(path: str, value):
    """GOOD with the value at dotted ``path`` replaced (or deleted when value is ...)."""
    spec = yaml.safe_load(yaml.safe_dump(GOOD))
    *parents, last = path.split(".")
    node = spec
    for key in parents:
        node = node.setdefault(key, {})
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return spec


@pytest.mark.parametrize("study", sorted([*(REPO / "studies").glob("*.yaml"), *(REPO / "examples").glob("*.yaml")]),
                         ids=lambda p: p.name)
def test_every_shipped_study_loads(study):
    spec = load_spec(study)
    assert spec.n_configs > 0
    assert spec.name.replace("-", "_") == study.stem


def test_federate_adult_has_the_papers_grids():
    spec = load_spec(REPO / "studies/federate_adult.yaml")
    sizes = {m.name: len(m.configs) for m in spec.methods}
    assert sizes["federate"] == 150 and sizes["multi_adversarial"] == 150 and sizes["adversarial"] == 15
    assert spec.seeds == (0, 1, 2, 3, 4)
    fed = next(m for m in spec.methods if m.name == "federate")
    assert fed.configs == tuple(get_method("federate").expand(get_method("federate").paper_grid("adult")))


def test_ranges_expand_inclusively_and_missing_keys_take_the_paper_grid():
    spec = parse_spec(GOOD)
    fed = next(m for m in spec.methods if m.name == "federate")
    assert sorted({c["lam"] for c in fed.configs}) == [0.1, 0.3, 0.5]
    assert len(fed.configs) == 9
    one = parse_spec(_with("methods", {"noise": {}}))
    assert len(one.methods[0].configs) == len(get_method("noise").paper_grid("synthetic")["eps"])


MALFORMED = [
    ("methods.federate.grid.eps", [1, 2, -1], "methods.federate.grid.eps[2]"),
    ("methods.federate.grid.eps", [1, "big"], "methods.federate.grid.eps[1]"),
    ("methods.federate.grid.lam", [0.5, -0.1], "methods.federate.grid.lam[1]"),
    ("methods.pfld", {"grid": {"clip_primal": [0], "eps": [1], "clip_dual": [5], "fairness_notion": ["dp"]}},
     "methods.pfld.grid.clip_primal[0]"),
    ("methods.pfld", {"grid": {"fairness_notion": ["dp", "xx"]}}, "methods.pfld.grid.fairness_notion[1]"),
    ("methods.federate.grid.tau", [1], "methods.federate.grid.tau"),
    ("methods.nosuch", {}, "methods.nosuch"),
    ("methods.federate.grid.lam", {"start": 0.1, "stop": 1.0}, "methods.federate.grid.lam.step"),
    ("train.epochs", 0, "train.epochs"),
    ("train.epochs", 2.5, "train.epochs"),
    ("train.optimizer", "sgd", "train.optimizer"),
    ("seeds", [0, -1], "seeds[1]"),
    ("seeds", [], "seeds"),
    ("dataset.rows", "many", "dataset.rows"),
    ("dataset.colour", "red", "dataset.colour"),
    ("dataset", "nosuch", "dataset"),
    ("name", "a/b", "name"),
    ("name", ..., "name"),
    ("selection.fairness", "accuracy", "selection.fairness"),
    ("evaluate.leakage", "yes", "evaluate.leakage"),
    ("resources.gpus_per_trial", -0.5, "resources.gpus_per_trial"),
    ("resources.cpus_per_trial", 0, "resources.cpus_per_trial"),
    ("extra", 1, "extra"),
    ("search", {"method": "federate", "objectives": {"valid_accuracy": "max", "speed": "min"},
                "space": {"eps": {"low": 1, "high": 5}, "lam": {"low": 0.1, "high": 1}}}, "search.objectives.speed"),
    ("search", {"method": "federate", "objectives": {"valid_accuracy": "up"},
                "space": {"eps": {"low": 1, "high": 5}, "lam": {"low": 0.1, "high": 1}}}, "search.objectives.valid_accuracy"),
    ("search", {"method": "federate", "objectives": {"mdl": "max"}, "space": {"eps": {"low": 1, "high": 5},
                "lam": {"low": 0.1, "high": 1}}}, "search.objectives.mdl"),
    ("search", {"method": "federate", "objectives": {"valid_accuracy": "max"},
                "space": {"eps": {"low": 0, "high": 5}, "lam": {"low": 0.1, "high": 1}}}, "search.space.eps.low"),
    ("search", {"method": "federate", "objectives": {"valid_accuracy": "max"},
                "space": {"eps": {"low": 1, "high": 5}}}, "search.space.lam"),
    # item by item, what a study may set about training, probing and selection
    ("train.lr", "fast", "train.lr"),
    ("train.precision", "half", "train.precision"),
    ("train.device", "gpu", "train.device"),
    ("train", {"dtype": "float64", "precision": "bf16"}, "train.precision"),
    ("train.clipping", "per_row", "train.clipping"),
    ("train.packing", "hand", "train.packing"),
    ("train.accountant", "prv", "train.accountant"),
    ("methods.reductions", {"train": {"lr": 0.1}}, "methods.reductions.train.lr"),
    ("methods.reductions", {"architecture": {"dropout": 0.2}}, "methods.reductions.architecture"),
    ("methods.federate.architecture", {"encoder": [64, 0]}, "methods.federate.architecture.encoder"),
    ("methods.federate.architecture", {"width": 3}, "methods.federate.architecture.width"),
    ("methods.federate.architecture", {"preset": "huge"}, "methods.federate.architecture.preset"),
    ("methods.federate.train", {"lr": -1}, "methods.federate.train.lr"),
    ("methods.federate.train", {"epochs": 3}, "methods.federate.train.epochs"),
    ("architecture", {"dropout": 1.0}, "architecture.dropout"),
    ("evaluate.probe", {"standardize": "no"}, "evaluate.probe.standardize"),
    ("evaluate.probe", {"early_stopping": 1}, "evaluate.probe.early_stopping"),
    ("selection.by", ["clip_primal"], "selection.by[0]"),
    ("selection.by", "eps", "selection.by"),
    ("selection.fairness", "notion_gap", "selection.fairness"),
]


@pytest.mark.parametrize("path,value,named", MALFORMED, ids=[m[2] for m in MALFORMED])
def test_malformed_spec_exits_2_naming_the_key_path_and_writes_nothing(tmp_path, capsys, path, value, named):
    spec = _with(path, value)
    if path == "search":  # mdl is off: the objective that no run reports
        spec["evaluate"] = {"mdl": False}
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(spec))
    results = tmp_path / "results"
    code = main(["run", str(study), "--results", str(results)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("fairdp: error:"), err
    assert named in err[0], err[0]
    assert not results.exists()


@pytest.mark.parametrize("text,named", [
    ("name: x\nmethods: [unclosed\n", "line"),
    ("- just\n- a list\n", "study"),
    ("", "study"),
])
def test_unparseable_files_name_the_file(tmp_path, capsys, text, named):
    study = tmp_path / "bad.yaml"
    study.write_text(text)
    assert main(["run", str(study), "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert named in err and not (tmp_path / "r").exists()
    if named == "line":
        assert "bad.yaml" in err


def test_missing_study_file_and_bad_overrides(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml" in capsys.readouterr().err
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump(GOOD))
    assert main(["run", str(study), "--seeds", "0,x", "--results", str(tmp_path / "r")]) == 2
    assert "--seeds" in capsys.readouterr().err
    assert main(["run", str(study), "--epochs", "0", "--results", str(tmp_path / "r")]) == 2
    assert "--epochs" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_user_supplied_data_missing_is_named_before_ray_starts(tmp_path, capsys):
    spec = _with("dataset", {"name": "twitter", "path": str(tmp_path / "no-such-dir")})
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump(spec))
    assert main(["run", str(study), "--results", str(tmp_path / "r")]) == 2
    assert "no-such-dir" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_parse_spec_raises_input_error_not_crash():
    with pytest.raises(InputError, match=r"^methods: must be a non-empty mapping"):
        parse_spec(_with("methods", {}))
    assert Path(REPO / "studies/demo.yaml").exists()


def test_learning_rates_and_architectures_resolve_per_method():
    """Each method trains at its paper's learning rate unless the study or the method says
    otherwise; a study-level value no method can use is refused, never ignored."""
    spec = parse_spec(_with("methods", {
        "federate": {}, "cape": {}, "pfld": {"train": {"lr": 0.05}}, "reductions": {},
        "fld": {"architecture": {"encoder": [32]}}}))
    ms = spec.method_settings
    assert (ms["federate"].optimizer, ms["federate"].lr) == ("adam", 1e-3)  # FEDERATE D.4
    assert ms["cape"].lr == 1e-4  # CAPE Table 2
    assert (ms["pfld"].optimizer, ms["pfld"].lr) == ("sgd", 0.05)
    assert ms["fld"].lr == 0.1 and ms["fld"].architecture.encoder == (32,) and ms["fld"].architecture.dropout == 0.0
    assert ms["reductions"].optimizer is ms["reductions"].lr is ms["reductions"].architecture is None
    study_lr = parse_spec(_with("train.lr", 0.01)).method_settings
    assert study_lr["federate"].lr == study_lr["unconstrained"].lr == 0.01
    arch = parse_spec(_with("architecture", {"encoder": [100, 50, 50], "dropout": 0.5})).method_settings
    assert arch["federate"].architecture.encoder == (100, 50, 50) and arch["federate"].architecture.adversary == (300, 300)
    with pytest.raises(InputError, match="^train.lr: no method of the study trains by gradient"):
        parse_spec(_with("methods", {"reductions": {}}) | {"train": {"lr": 0.1}})
    for key, value in (("accountant", "pld"), ("clipping", "per_layer")):  # what no method of the study uses
        with pytest.raises(InputError, match=f"^train.{key}: no method of the study"):
            parse_spec(_with("methods", {"federate": {}}) | {"train": {key: value}})
    with pytest.raises(InputError, match="^architecture: no method of the study trains a network"):
        parse_spec(_with("methods", {"reductions": {}}) | {"architecture": {"dropout": 0.2}})


def test_the_federate_studies_use_federates_probe_protocol():
    """FEDERATE's public code: make_pipeline(StandardScaler(), MLPClassifier(alpha=1, max_iter=1000))."""
    assert (FEDERATE_PROBE.standardize, FEDERATE_PROBE.early_stopping, FEDERATE_PROBE.alpha,
            FEDERATE_PROBE.max_epochs, FEDERATE_PROBE.hidden) == (True, False, 1.0, 1000, 100)
    for path in sorted((REPO / "studies").glob("federate_*.yaml")):
        assert load_spec(path).probe == FEDERATE_PROBE, path.name
    pfld = load_spec(REPO / "studies/pfld_adult.yaml")
    assert pfld.fairness == "notion_gap" and pfld.by == ("fairness_notion", "eps")
    grid = {(c["eps"], c["clip_primal"], c["clip_dual"]) for c in pfld.methods[2].configs}
    assert (1.0, 10.0, 5.0) in grid  # Tran et al.'s fixed point


@pytest.mark.parametrize("train, stored, on_gpu, native, want, decided", [
    ({}, None, False, True, "bf16", True),                    # a new study, CPUs with bf16 matmuls
    ({}, None, False, False, None, True),                     # emulated bf16 is slower than float32
    ({}, None, False, None, None, False),                     # a cluster not yet connected: asked later
    ({}, None, True, True, None, True),                       # GPUs: TF32
    ({}, "float32", False, True, None, True),                 # stored float32 rows are followed
    ({}, "bf16", False, False, "bf16", True),                 # and stored bf16 rows
    ({"precision": "float32"}, None, False, True, "float32", True),
    ({"precision": "bf16"}, "float32", False, False, "bf16", True),  # asked: the guard judges the rows
    ({"dtype": "float64"}, None, False, True, None, True),
])
def test_the_default_precision_follows_the_stored_rows_then_the_workers_cpus(train, stored, on_gpu, native, want,
                                                                            decided):
    spec = parse_spec({**GOOD, "train": {**GOOD["train"], **train}})
    asked = []
    choice = choose_precision(spec.train, stored, on_gpu, lambda: asked.append(1) or native)
    assert (choice.precision, choice.decided) == (want, decided)
    # the workers are asked only when the answer depends on them (a cluster's nodes run a task)
    assert bool(asked) == (not train and stored is None and not on_gpu)
    line = settings_lines(spec, choice)[0]
    assert f"precision {want or 'tf32 on CUDA, float32 on a CPU'} (" in line if decided else "bf16 if" in line


def test_stored_precision_reads_the_run_methods_rows_first():
    import pandas as pd

    rows = pd.DataFrame({"method": ["a", "b", "c", "d"], "status": ["ok", "ok", "ok", "error"],
                         "precision": ["float32", "bf16", None, "bf16"]})
    assert stored_precision(rows, ["a"]) == "float32"
    assert stored_precision(rows, ["b"]) == "bf16"
    assert stored_precision(rows, ["c"]) == "bf16"       # no network rows of its own: the study's
    assert stored_precision(rows.iloc[[0, 2, 3]], ["d"]) == "float32"  # error rows say nothing
    assert stored_precision(rows.iloc[:0], ["a"]) is None
