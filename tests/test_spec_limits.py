"""Issue 41, classes 1, 3, 4 and 5: what a study asks for is checked against what the dtypes,
Arrow and this machine can hold, one type rule for every number, settings that would do
nothing refused, and what a run would find out in training (the device, a W&B login) found
before anything is written. Each refusal: exit 2, one line naming the key, nothing written."""

import io
import json
import os
from contextlib import redirect_stderr
from pathlib import Path

import pytest
import torch
import yaml

from fairdp.cli import main

BASE = {
    "name": "limits",
    "dataset": {"name": "synthetic", "rows": 200, "features": 4},
    "seeds": [0],
    "train": {"epochs": 1, "batch_size": 64},
    "evaluate": {"leakage": False, "mdl": False},
    "methods": {"unconstrained": {}, "federate": {"grid": {"eps": [8], "lam": [0.5]}}},
}
SEARCH = {"method": "federate", "objectives": {"valid_accuracy": "max"}, "trials": 2, "population": 2,
          "space": {"eps": {"low": 1, "high": 8}, "lam": {"choices": [0.5]}}}
HUGE = 2**70


def _set(spec: dict, path: str, value) -> dict:
    node = spec
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return spec


def _refused(tmp_path: Path, named: str, *argv: str, spec: dict | None = None, command: str = "run",
             env: dict | None = None) -> str:
    """Run ``fairdp COMMAND study.yaml ARGV`` in process: exit 2, one stderr line naming
    ``named``, and the results location never made."""
    study = tmp_path / "study.yaml"
    # JSON, a YAML subset, quotes every string: yaml.safe_dump would write "1e-3" bare (a
    # number to YAML 1.2, which the study loader follows)
    study.write_text(json.dumps(spec if spec is not None else BASE))
    results = tmp_path / "results"
    err = io.StringIO()
    with redirect_stderr(err):
        code = main([command, str(study), "--results", str(results), "--executor", "local", *argv])
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    assert code == 2, err.getvalue()[-2000:]
    assert len(lines) == 1 and lines[0].startswith("fairdp: error:"), lines
    assert named in lines[0], lines[0]
    assert not results.exists() and not list(tmp_path.glob("results.*")), sorted(os.listdir(tmp_path))
    return lines[0]


def _spec(**paths) -> dict:
    spec = yaml.safe_load(yaml.safe_dump(BASE))
    for path, value in paths.items():
        _set(spec, path.replace("__", "."), value)
    return spec


# -- class 1: sizes no dtype or machine can hold -------------------------------------------------

@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_synthetic_rows_beyond_this_machines_memory_are_refused_before_they_are_drawn(tmp_path, dry_run):
    line = _refused(tmp_path, "dataset.rows", *(["--dry-run"] if dry_run else []),
                    spec=_spec(dataset__rows=10**12))
    assert "memory" in line and "TiB" in line


@pytest.mark.parametrize("path,named", [
    ("train.epochs", "train.epochs"),
    ("train.batch_size", "train.batch_size"),
    ("train.config_chunk", "train.config_chunk"),
    ("pack_size", "pack_size"),
    ("evaluate.probe.max_epochs", "evaluate.probe.max_epochs"),
    ("resources.max_failures", "resources.max_failures"),
    ("dataset.seed", "dataset.seed"),
    ("methods.federate.grid.batch_size", "methods.federate.grid.batch_size[0]"),
])
def test_an_integer_beyond_int64_is_refused_naming_its_key(tmp_path, path, named):
    value = [HUGE] if path.endswith("grid.batch_size") else HUGE
    _refused(tmp_path, named, spec=_set(_spec(), path, value))


def test_epochs_no_run_can_keep_curves_for_are_refused_in_the_file_and_the_flag(tmp_path):
    from fairdp.study.spec._spec import MAX_EPOCHS

    _refused(tmp_path, "train.epochs", spec=_spec(train__epochs=MAX_EPOCHS + 1))
    _refused(tmp_path, "--epochs", "--epochs", str(HUGE))
    _refused(tmp_path, "--epochs", "--epochs", str(MAX_EPOCHS + 1), "--dry-run")


def test_search_sizes_are_bounded_in_the_file_and_the_flag(tmp_path):
    _refused(tmp_path, "--trials", "--trials", str(HUGE), "--dry-run", spec=_spec(search=SEARCH), command="search")
    _refused(tmp_path, "search.population", "--dry-run", spec=_spec(search={**SEARCH, "population": HUGE}),
             command="search")
    _refused(tmp_path, "--seeds", "--seeds", str(HUGE), "--dry-run", spec=_spec(search=SEARCH), command="search")
    # an empty --seeds is refused, never read as "the spec's seed"
    _refused(tmp_path, "--seeds", "--seeds", ",", "--dry-run", spec=_spec(search=SEARCH), command="search")


def test_a_grid_range_whose_count_overflows_a_float_is_refused_naming_it(tmp_path):
    lam = {"start": -1e308, "stop": 1e308, "step": 1e-300}
    _refused(tmp_path, "methods.federate.grid.lam", spec=_spec(methods={"federate": {"grid": {"eps": [8], "lam": lam}}}))


@pytest.mark.parametrize("path,value,named", [
    ("architecture", {"encoder": [10**6, 10**6]}, "architecture"),
    ("methods.federate.architecture", {"adversary": [10**7, 10**7]}, "methods.federate.architecture"),
    ("architecture", {"encoder": [10**12]}, "architecture"),
    ("evaluate", {"leakage": True, "mdl": False, "probe": {"hidden": 10**12}}, "evaluate.probe.hidden"),
])
def test_a_network_whose_parameters_exceed_this_machines_memory_is_refused(tmp_path, path, value, named):
    line = _refused(tmp_path, named, "--dry-run", spec=_set(_spec(), path, value))
    assert "memory" in line


# -- class 3: one type rule for every number -----------------------------------------------------

@pytest.mark.parametrize("path,value,named", [
    ("train.lr", "1e-3", "train.lr"),
    ("train.epochs", "10", "train.epochs"),
    ("train.epochs", True, "train.epochs"),
    ("train.batch_size", 64.0, "train.batch_size"),
    ("train.config_chunk", True, "train.config_chunk"),
    ("methods.federate.grid.eps", ["8"], "methods.federate.grid.eps[0]"),
    ("methods.federate.grid.lam", {"start": "0.1", "stop": 1, "step": 0.1}, "methods.federate.grid.lam.start"),
    ("selection.rt", "1", "selection.rt"),
    ("selection.rts", [0, "1"], "selection.rts[1]"),
    ("selection.by", [["eps"]], "selection.by[0]"),
    ("resources.cpus_per_trial", "1", "resources.cpus_per_trial"),
    ("resources.max_failures", False, "resources.max_failures"),
    ("dataset.rows", "1000", "dataset.rows"),
    ("dataset.leakage", "0.5", "dataset.leakage"),
    ("dataset.seed", True, "dataset.seed"),
    ("evaluate.probe.alpha", "1", "evaluate.probe.alpha"),
    ("architecture.dropout", "0.1", "architecture.dropout"),
    ("architecture.encoder", ["64"], "architecture.encoder"),
    ("tracking", {"mlflow": {"uri": 5}}, "tracking.mlflow.uri"),
])
def test_a_string_or_boolean_where_a_number_is_required_is_refused_naming_the_key(tmp_path, path, value, named):
    spec = _spec(evaluate={"leakage": True, "mdl": False}) if path.startswith("evaluate.") else _spec()
    _refused(tmp_path, named, "--dry-run", spec=_set(spec, path, value))


@pytest.mark.parametrize("search,named", [
    ({"trials": "2"}, "search.trials"),
    ({"seed": True}, "search.seed"),
    ({"space": {"eps": {"low": "1", "high": 8}, "lam": {"choices": [0.5]}}}, "search.space.eps.low"),
    ({"fixed": {"lam": "0.5"}, "space": {"eps": {"low": 1, "high": 8}}}, "search.fixed.lam"),
])
def test_search_numbers_follow_the_same_rule(tmp_path, search, named):
    _refused(tmp_path, named, "--dry-run", spec=_spec(search={**SEARCH, **search}), command="search")


# -- class 4: settings that would do nothing ----------------------------------------------------

@pytest.mark.parametrize("methods,arch,named", [
    ({"random": {"architecture": {"encoder": [8]}}}, None, "methods.random.architecture"),
    ({"random": {}}, {"encoder": [8]}, "architecture"),
    ({"reductions": {"architecture": {"preset": "bios"}}}, None, "methods.reductions.architecture"),
    ({"fld": {"architecture": {"dropout": 0.3}}}, None, "methods.fld.architecture.dropout"),
    ({"unconstrained": {"architecture": {"adversary": [16]}}}, None, "methods.unconstrained.architecture.adversary"),
    ({"unconstrained": {}, "fld": {}}, {"adversary": [16]}, "architecture.adversary"),
    ({"fld": {}, "dpsgd": {}}, {"dropout": 0.2}, "architecture.dropout"),
])
def test_an_architecture_field_no_network_of_the_study_has_is_refused(tmp_path, methods, arch, named):
    spec = _spec(methods=methods)
    if arch is not None:
        spec["architecture"] = arch
    _refused(tmp_path, named, "--dry-run", spec=spec)


def test_architecture_fields_a_network_has_are_still_taken():
    from fairdp.study import parse_spec

    spec = _spec(methods={"federate": {"architecture": {"adversary": [16]}}, "fld": {"architecture": {"encoder": [8]}},
                          "random": {}, "unconstrained": {}}, architecture={"dropout": 0.2, "encoder": [32]})
    ms = parse_spec(spec).method_settings
    assert ms["federate"].architecture.adversary == (16,) and ms["federate"].architecture.dropout == 0.2
    assert ms["fld"].architecture.encoder == (8,)
    assert ms["random"].architecture.representation_dim == 32  # its noise as wide as the others' representation


# -- class 5: what training would find, found before anything is written -------------------------

@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
@pytest.mark.parametrize("executor", ["local", "ray"])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_cuda_on_a_machine_without_a_gpu_is_refused_before_anything_is_written(tmp_path, executor, dry_run):
    # the embedded Ray is checked before it starts: this test starts no Ray
    _refused(tmp_path, "train.device", "--executor", executor, *(["--dry-run"] if dry_run else []),
             spec=_spec(train={"epochs": 1, "batch_size": 64, "device": "cuda"}))


def test_a_cuda_device_beyond_the_machines_count_is_refused(tmp_path):
    index = torch.cuda.device_count() if torch.cuda.is_available() else 0
    _refused(tmp_path, "train.device", spec=_spec(train={"epochs": 1, "batch_size": 64, "device": f"cuda:{index}"}))


def test_a_cluster_without_a_gpu_node_is_refused_for_cuda():
    from fairdp.errors import InputError
    from fairdp.study import parse_spec
    from fairdp.study.executors._executors import check_cluster_device

    spec = parse_spec(_spec(train={"epochs": 1, "batch_size": 64, "device": "cuda"}))
    with pytest.raises(InputError, match="^train.device: cuda asked for, but no node of the cluster"):
        check_cluster_device(spec, [{"CPU": 8.0}, {"CPU": 4.0, "GPU": 0.0}], "the cluster at x:6379")
    check_cluster_device(spec, [{"CPU": 8.0}, {"CPU": 4.0, "GPU": 1.0}], "the cluster at x:6379")  # one has


@pytest.mark.parametrize("command", ["run", "search"])
def test_a_cluster_refusal_found_once_connected_writes_nothing(tmp_path, monkeypatch, command):
    # a cluster answers only once connected (its nodes' GPUs): run and search connect before
    # they take the lock or write the plan, the selection or the journal
    from fairdp.study.executors import _executors

    class GpulessCluster(_executors.LocalExecutor):
        name, remote = "gpuless-cluster", True

        def session(self, spec, announce):
            _executors.check_cluster_device(spec, [{"CPU": 2.0}], "the cluster at test:6379")
            return super().session(spec, announce)

    monkeypatch.setitem(_executors.EXECUTORS, GpulessCluster.name, GpulessCluster)
    spec = _spec(train={"epochs": 1, "batch_size": 64, "device": "cuda"})
    if command == "search":
        spec["search"] = SEARCH
    monkeypatch.setattr(_executors, "check_device_here", lambda device: None)  # the driver is not asked
    _refused(tmp_path, "train.device", "--executor", GpulessCluster.name, spec=spec, command=command)


def test_wandb_online_without_a_login_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    for var in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    runs = tmp_path / "wandb-runs"
    line = _refused(tmp_path, "tracking.wandb.mode",
                    spec=_spec(tracking={"wandb": {"mode": "online", "dir": str(runs)}}))
    assert "wandb login" in line and not runs.exists()


def test_a_wandb_login_is_found_where_wandb_looks(tmp_path, monkeypatch):
    from fairdp.tracking._wandb import has_wandb_login

    for var in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    netrc = tmp_path / "netrc"
    monkeypatch.setenv("NETRC", str(netrc))
    assert not has_wandb_login()
    netrc.write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    netrc.chmod(0o600)
    assert has_wandb_login()
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org")
    assert not has_wandb_login()  # a key for another host
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert has_wandb_login()
