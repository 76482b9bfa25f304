"""Where results and reports go is checked before anything runs or is written (issue 41, class 2):
a location that cannot be created or written, a name too long for the filesystem, an empty
path, each refused with exit 2 and one line naming the flag or key and the path."""

import io
import os

import pytest
import yaml

from fairdp.analysis import ReportOptions
from fairdp.errors import InputError
from fairdp.study import parse_spec, run_study
from tests.conftest import assert_input_error, run_cli, run_main

STUDY = {
    "name": "paths",
    "dataset": {"name": "synthetic", "rows": 300, "features": 4},
    "seeds": [0],
    "train": {"epochs": 1, "batch_size": 100},
    "evaluate": {"leakage": False, "mdl": False},
    "methods": {"unconstrained": {}},
}
SEARCH = {"method": "noise", "sampler": "tpe", "trials": 2, "seed": 0, "objectives": {"valid_accuracy": "max"},
          "space": {"eps": {"low": 1, "high": 20}}}
# /proc refuses new entries even to root, whose access checks (os.access) pass there
UNCREATABLE = "/proc/fairdp-results"


def _study(tmp_path, **overrides):
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({**STUDY, **overrides}))
    return path


def _tree(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A results directory of the tiny study, with its side tables beside it."""
    root = tmp_path_factory.mktemp("stored")
    run_study(parse_spec(STUDY), str(root / "r"), executor="local", progress_stream=io.StringIO())
    return root / "r"


@pytest.mark.parametrize("results", [UNCREATABLE, f"file://{UNCREATABLE}", f"{UNCREATABLE}/deeper"])
@pytest.mark.parametrize("command", ["run", "search"])
def test_results_that_cannot_be_created_are_refused_before_anything_runs(tmp_path, results, command):
    """One case through ``python -m fairdp``, the others through its ``main`` in this process
    (the same refusal, without a subprocess's seconds of imports)."""
    study = _study(tmp_path, search=SEARCH)
    cli = run_cli if (command, results) == ("run", UNCREATABLE) else run_main
    proc = cli(command, str(study), "--results", results, "--executor", "local", cwd=tmp_path)
    assert_input_error(proc, "/proc/fairdp-results", "--results")
    assert "Traceback" not in proc.stderr and _tree(tmp_path) == ["study.yaml"]


@pytest.mark.parametrize("length", [300, 200])
def test_a_study_name_too_long_for_the_default_results_folder_is_refused_naming_the_key(tmp_path, length):
    """300 characters cannot name the folder; 200 can, but not the side tables named after it
    (``<name>.selection.parquet``, their hidden temporaries): both refused before training."""
    study = _study(tmp_path, name="n" * length)
    for extra in ([], ["--dry-run"]):
        proc = run_main("run", str(study), "--executor", "local", *extra, cwd=tmp_path)
        line = assert_input_error(proc, "name", "--results")
        assert "Traceback" not in proc.stderr and "File name too long" in line
        assert _tree(tmp_path) == ["study.yaml"]  # no results/ folder left behind


@pytest.mark.parametrize("command", ["run", "search"])
@pytest.mark.parametrize("dry_run", [True, False])
def test_an_empty_results_path_is_refused_not_taken_as_the_default(tmp_path, command, dry_run):
    study = _study(tmp_path, search=SEARCH)
    proc = run_main(command, str(study), "--results", "", "--executor", "local", *(["--dry-run"] if dry_run else []),
                   cwd=tmp_path)
    assert_input_error(proc, "--results", "empty")
    assert _tree(tmp_path) == ["study.yaml"]


def test_run_study_refuses_an_empty_results_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="results: empty"):
        run_study(parse_spec(STUDY), "", executor="local", progress_stream=io.StringIO())
    assert _tree(tmp_path) == []


@pytest.mark.parametrize("output", [f"{UNCREATABLE}/report", f"file://{UNCREATABLE}/report", ""])
def test_a_report_location_that_cannot_be_written_is_refused_before_reading_or_writing(stored, tmp_path, output):
    before = _tree(stored.parent)
    proc = run_main("report", str(stored), "-o", output, "--no-ci", cwd=tmp_path)
    assert_input_error(proc, "-o")
    assert "Traceback" not in proc.stderr and _tree(tmp_path) == [] and _tree(stored.parent) == before


def test_a_report_in_another_filesystems_uri_is_refused_naming_it(stored, tmp_path):
    assert_input_error(run_main("report", str(stored), "-o", "s3://bucket/report", cwd=tmp_path), "-o", "s3://bucket")
    assert _tree(tmp_path) == []


def test_write_report_checks_its_folder_before_drawing(stored):
    from fairdp.analysis import write_report
    from fairdp.study import read_results

    with pytest.raises(InputError, match=f"out_dir: .*{UNCREATABLE}"):
        write_report(read_results(str(stored)), f"{UNCREATABLE}/report", ReportOptions(ci=None))


@pytest.mark.parametrize("command", ["analyze", "compare"])
def test_an_empty_results_directory_argument_is_refused_not_read_as_the_current_folder(stored, tmp_path, command):
    args = ["", str(stored)] if command == "compare" else [""]
    assert_input_error(run_main(command, *args, cwd=tmp_path), "empty")


@pytest.mark.skipif(os.geteuid() != 0, reason="the case is root's: os.access passes where the kernel refuses")
def test_the_check_tries_the_write_rather_than_reading_modes():
    from fairdp._atomic import unwritable_reason

    assert os.access("/proc", os.W_OK)  # what made the old check pass
    assert UNCREATABLE in unwritable_reason(UNCREATABLE)
