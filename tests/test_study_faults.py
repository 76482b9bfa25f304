"""Nothing silent, nothing half-written (issue 28): a resume that would mix protocols, files in
the results that are not fairdp's, and bad inputs each refused with one line and exit 2 before
anything is written."""

import dataclasses
import os
import shutil
import time

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from fairdp.errors import InputError
from fairdp.study import parse_spec, read_results, run_study
from fairdp.study._context import study_protocol, study_store
from fairdp.study.executors import StudyContext
from tests.conftest import assert_input_error, run_cli, run_main

STUDY = {
    "name": "faults",
    "dataset": {"name": "synthetic", "rows": 300, "features": 4},
    "seeds": [0],
    "train": {"epochs": 1, "batch_size": 100},
    "evaluate": {"leakage": False, "mdl": False},
    "methods": {"unconstrained": {}},
}


def _run(raw: dict, results) -> None:
    with open(os.devnull, "w") as devnull:
        run_study(parse_spec(raw), str(results), executor="local", progress_stream=devnull)


def _with(raw: dict, path: str, value) -> dict:
    raw = yaml.safe_load(yaml.safe_dump(raw))
    *parents, last = path.split(".")
    node = raw
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return raw


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A results directory holding the base study's seed-0 rows (and one with bf16 rows)."""
    root = tmp_path_factory.mktemp("stored")
    _run(_with(STUDY, "train.precision", "float32"), root / "base")
    _run(_with(STUDY, "train.precision", "bf16"), root / "bf16")
    return root


@pytest.mark.parametrize("path, value, named", [
    ("train.batch_size", 50, "batch_size 100"),
    ("train.gamma", 7.0, "train.gamma 10.0"),
    ("train.dtype", "float64", 'train.dtype "float32"'),
    ("dataset.rows", 400, "dataset.rows 300"),
    ("dataset.leakage", 0.9, "dataset.leakage null"),
    ("evaluate.leakage", True, "evaluate.leakage false"),
])
def test_resuming_with_a_setting_that_changes_what_a_row_means_is_refused_naming_it(stored, tmp_path, path, value,
                                                                                     named):
    results = tmp_path / "r"
    shutil.copytree(stored / "base", results)
    raw = _with(_with(STUDY, path, value), "seeds", [0, 1])
    with pytest.raises(InputError, match=named.replace("(", r"\(")) as info:
        _run(raw, results)
    assert "pass another --results" in str(info.value)
    assert len(read_results(str(results))) == 1  # nothing trained into the table


def test_adding_pruning_alone_is_refused(stored, tmp_path):
    raw = _with(_with(STUDY, "train.epochs", 2), "seeds", [0])
    _run(raw, tmp_path / "r")
    raw["prune"] = {"rungs": [1], "keep": 0.5}
    raw["seeds"] = [0, 1]
    with pytest.raises(InputError, match="prune null"):
        _run(raw, tmp_path / "r")


@pytest.fixture
def cpu_bf16(monkeypatch):
    """Set whether the driver sees native bf16 matmuls on the workers' CPUs."""
    import fairdp.study.executors._executors as executors

    return lambda native: monkeypatch.setattr(executors, "native_bf16", lambda device: native)


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("stored_as", ["float32", "bf16"])
def test_a_resume_without_a_precision_keeps_the_stored_rows_precision_whatever_the_cpu(stored, tmp_path, cpu_bf16,
                                                                                      stored_as, native):
    """float32 results stored before bf16 became a CPU's default resume in float32, and bf16
    results in bf16: one table, one protocol."""
    cpu_bf16(native)
    shutil.copytree(stored / ("base" if stored_as == "float32" else "bf16"), tmp_path / "r")
    _run(_with(STUDY, "seeds", [0, 1]), tmp_path / "r")
    df = read_results(str(tmp_path / "r"))
    assert len(df) == 2 and (df["precision"] == stored_as).all()


@pytest.mark.parametrize("native, train, want", [
    (True, {}, "bf16"),                            # a new study on a CPU with bf16 matmuls
    (False, {}, "float32"),                        # emulated bf16 is slower than float32
    (True, {"precision": "float32"}, "float32"),   # asked for
    (False, {"precision": "bf16"}, "bf16"),
    (True, {"dtype": "float64"}, "float64"),
])
def test_a_new_study_trains_in_the_fastest_precision_the_workers_cpus_have_unless_asked(tmp_path, cpu_bf16, native,
                                                                                        train, want, caplog):
    cpu_bf16(native)
    raw = _with(STUDY, "train", {**STUDY["train"], **train})
    caplog.set_level("INFO", logger="fairdp")  # the run's settings line, logged as it starts
    run_study(parse_spec(raw), str(tmp_path / "r"), executor="local")
    assert (read_results(str(tmp_path / "r"))["precision"] == want).all()
    said = next(line for line in caplog.messages if ", precision " in line)
    assert ("precision bf16 (" in said) == (want == "bf16"), said  # and the run says which, and why


@pytest.mark.parametrize("stored_as, asked", [("bf16", "float32"), ("bf16", "tf32"), ("float32", "bf16")])
def test_asking_for_a_precision_over_rows_of_the_other_kind_is_refused(stored, tmp_path, stored_as, asked):
    shutil.copytree(stored / ("base" if stored_as == "float32" else "bf16"), tmp_path / "r")
    with pytest.raises(InputError, match=f"computed in {stored_as}, this run's train.precision is {asked}"):
        _run(_with(_with(STUDY, "seeds", [0, 1]), "train.precision", asked), tmp_path / "r")
    assert len(read_results(str(tmp_path / "r"))) == 1


def test_the_protocol_is_every_field_not_marked_otherwise():
    """Derived from the settings' dataclass fields, not a hand list: a field is compared unless
    its ``protocol`` metadata says it is a column of its own or does not change a row."""
    from fairdp.engine import TrainSettings
    from fairdp.study import StudySpec

    spec = parse_spec(STUDY)
    proto = study_protocol(spec)
    for f in dataclasses.fields(StudySpec):
        assert (f.name in proto) == (f.metadata.get("protocol", True) is True), f.name
        assert f.metadata.get("protocol", True) in (True, False, "column"), f.name
    for f in dataclasses.fields(TrainSettings):
        assert (f.name in proto["train"]) == (f.metadata.get("protocol", True) is True), f.name
    # each row stores it, with the data's fingerprint
    ctx = StudyContext.from_spec(spec, study_store(spec, "r"))
    assert '"train"' in ctx.protocol and '"data"' not in ctx.protocol


# -- files in the results that are not fairdp's ------------------------------------------------

def _foreign_pack(results):
    folder = results / "synthetic" / "unconstrained"
    pq.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), folder / "part-s0-foreign.parquet")
    return folder / "part-s0-foreign.parquet"


def _string_seed(results):
    path = next((results / "synthetic" / "unconstrained").glob("part-*.parquet"))
    table = pq.read_table(path)
    table = table.set_column(table.schema.get_field_index("seed"), "seed", table["seed"].cast(pa.string()))
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize("make, reason", [(_foreign_pack, "no column 'study'"),
                                          (_string_seed, "column 'seed' holds string")])
def test_a_foreign_or_retyped_pack_file_is_named_and_repair_moves_it_aside(stored, tmp_path, make, reason):
    results = tmp_path / "r"
    shutil.copytree(stored / "base", results)
    bad = make(results)
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(STUDY))
    for cmd in (["run", str(study), "--results", str(results), "--executor", "local"], ["analyze", str(results)]):
        line = assert_input_error(run_main(*cmd), str(bad), reason)
        assert "--repair" in line
    repaired = run_main("run", str(study), "--results", str(results), "--executor", "local", "--repair")
    assert repaired.returncode == 0, repaired.stderr[-2000:]
    assert list(bad.parent.glob(f".corrupt-*-{bad.name}"))  # moved aside beside it
    rows = read_results(str(results))
    assert len(rows) == 1 and rows["seed"].dtype == "int64"  # its config trained again


def test_a_foreign_plan_file_is_named_and_repair_moves_it_aside(stored, tmp_path):
    results = tmp_path / "r"
    shutil.copytree(stored / "base", results)
    plan = tmp_path / "r.plan.parquet"
    shutil.copy(stored / "base.plan.parquet", tmp_path / "kept.plan.parquet")
    pd.DataFrame({"x": [1]}).to_parquet(plan)
    assert_input_error(run_main("analyze", str(results)), str(plan), "no column 'study'")
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(STUDY))
    assert_input_error(run_main("run", str(study), "--results", str(results), "--executor", "local"), str(plan))
    repaired = run_main("run", str(study), "--results", str(results), "--executor", "local", "--repair")
    assert repaired.returncode == 0 and "moved aside" in repaired.stderr
    assert list(pd.read_parquet(plan).columns)[:3] == ["study", "dataset", "method"]  # a new plan


# -- bad inputs, refused before anything is written ---------------------------------------------

def _cli_run(tmp_path, raw=None, *extra, text=None):
    study = tmp_path / "study.yaml"
    study.write_text(text if text is not None else yaml.safe_dump(raw or STUDY))
    return run_main("run", str(study), "--results", str(tmp_path / "out"), *extra), study


def test_a_seed_beyond_int64_is_refused_and_nothing_written(tmp_path):
    proc, _ = _cli_run(tmp_path, _with(STUDY, "seeds", [2**70]))
    assert_input_error(proc, "seeds[0]", "2**63 - 1")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("address, env, named", [
    ("not an address", None, "--address: expected host:port"),
    ("127.0.0.1:1", None, "--address 127.0.0.1:1: no Ray cluster answers"),
    (None, {"RAY_ADDRESS": "127.0.0.1:9"}, "RAY_ADDRESS 127.0.0.1:9: no Ray cluster answers"),
])
def test_a_bad_cluster_address_is_one_line_before_anything_is_written(tmp_path, monkeypatch, address, env, named):
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    proc, _ = _cli_run(tmp_path, None, *(["--address", address] if address else []))
    assert_input_error(proc, named)
    assert proc.stderr.count("\n") == 1 and not (tmp_path / "out").exists()


def test_a_huge_range_is_counted_not_expanded(tmp_path):
    raw = {**STUDY, "methods": {"federate": {"grid": {"eps": {"start": 1, "stop": 1e12, "step": 1}, "lam": [1]}}}}
    t = time.monotonic()
    proc, _ = _cli_run(tmp_path, raw)
    assert_input_error(proc, "methods.federate.grid.eps", "1,000,000,000,000 values")
    assert time.monotonic() - t < 30


def test_an_object_store_that_does_not_answer_is_one_line_within_the_probe_time(tmp_path):
    t = time.monotonic()
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(STUDY))
    # in a process of its own: the client left retrying in its thread ends with it
    proc = run_cli("run", str(study), "--results", "gs://nonexistent-bucket/r",
                   env={"FAIRDP_STORE_PROBE_TIMEOUT_S": "2"})
    assert_input_error(proc, "gs://nonexistent-bucket/r")
    assert time.monotonic() - t < 40


def test_a_plugin_that_exits_on_import_is_an_error_not_a_silent_success(tmp_path):
    plugin = tmp_path / "bye.py"
    plugin.write_text("import sys\nsys.exit(0)\n")
    proc, _ = _cli_run(tmp_path, {**STUDY, "plugins": [str(plugin)]})
    assert_input_error(proc, "plugins[0]", "sys.exit(0)")


@pytest.mark.parametrize("command", ["analyze", "report"])
def test_a_negative_rt_names_the_flag(stored, tmp_path, command):
    extra = ["-o", str(tmp_path / "rep")] if command == "report" else []
    run = run_cli if command == "report" else run_main  # the one real CLI start of `report` in the fast set
    assert_input_error(run(command, str(stored / "base"), "--rt", "-1", *extra), "--rt")


@pytest.mark.parametrize("text, named", [("", "empty"), ("[1, 2]\n", "got list")])
def test_an_empty_or_listed_study_file_is_named(tmp_path, text, named):
    proc, study = _cli_run(tmp_path, text=text)
    assert_input_error(proc, str(study), named)


# -- faults ----------------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 48 KB tmpfs (root only): room for the plan and about two pack files."""
    import subprocess

    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


DISK_STUDY = {**STUDY, "seeds": [0, 1, 2], "pack_size": 1}


def _disk_full_then_resume(tmp_path, small_disk, *executor):
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(DISK_STUDY))
    results = small_disk / "r"
    cli = run_main if executor else run_cli  # embedded Ray (no executor named): a process of its own
    proc = cli("run", str(study), "--results", str(results), *executor)
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("fairdp: error: ")]
    assert len(errors) == 1 and proc.stderr.rstrip().splitlines()[-1] == errors[0], proc.stderr  # one error, last
    assert "no space left on the device" in errors[-1] and " KB, " in errors[-1] and str(results) in errors[-1]
    kept = read_results(str(results))
    assert 0 < len(kept) < 3
    moved = tmp_path / "kept"
    shutil.copytree(results, moved)  # room: the results move to a larger disk
    # the rerun in this process on the local executor either way: the error above is what Ray
    # changes, and the executor contract proves both store the same rows
    again = run_main("run", str(study), "--results", str(moved), "--executor", "local")
    assert again.returncode == 0, again.stderr[-2000:]
    rows = read_results(str(moved))
    assert len(rows) == 3 and not rows.duplicated(["seed", "config_id"]).any()


def test_a_full_disk_is_one_line_naming_the_file_and_the_space_and_a_rerun_completes(tmp_path, small_disk):
    _disk_full_then_resume(tmp_path, small_disk, "--executor", "local")


@pytest.mark.slow
def test_a_full_disk_under_ray_is_one_line_too(tmp_path, small_disk):
    _disk_full_then_resume(tmp_path, small_disk)


