"""The dry run is the run without training: it plans with the run's own plan (``plan_run``) and
refuses what the run refuses before it trains. It used to read the stored rows on a second
path that skipped the resume checks: after a run at lr 0.001, a dry run at lr 0.01 said "0
configs to train, 1 already stored" and exited 0, while the run itself exited 2."""

from __future__ import annotations

import copy

import pytest
import yaml

from .conftest import run_main

STUDY = {
    "name": "dry",
    "dataset": {"name": "synthetic", "rows": 300, "features": 4},
    "seeds": [0],
    "train": {"epochs": 1, "batch_size": 100, "lr": 0.001},
    "evaluate": {"leakage": False, "mdl": False, "min_group_count": 1},
    "methods": {"unconstrained": {}, "noise": {"grid": {"eps": [8.0]}}},
}


def _changed(raw: dict, change: str) -> dict:
    """The study with one setting changed the way a user would, after its first run."""
    raw = copy.deepcopy(raw)
    if change == "lr":
        raw["train"]["lr"] = 0.01
    elif change == "epochs-kept":  # no refusal: the same protocol, one more seed
        raw["seeds"] = [0, 1]
    elif change == "architecture":
        raw["architecture"] = {"hidden": 16}
    elif change == "dataset":
        raw["dataset"]["features"] = 6
    elif change == "batch":
        raw["train"]["batch_size"] = 50
    elif change == "name":
        raw["name"] = "another"
    return raw


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """The tiny study run once with the local executor: (its folder, the results)."""
    base = tmp_path_factory.mktemp("dry")
    study = base / "s.yaml"
    study.write_text(yaml.safe_dump(STUDY))
    proc = run_main("run", str(study), "--results", str(base / "r"), "--executor", "local")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return base, base / "r"


def _both(base, results, raw: dict, *extra: str):
    study = base / "changed.yaml"
    study.write_text(yaml.safe_dump(raw))
    before = sorted(p.relative_to(results) for p in results.rglob("*"))
    dry = run_main("run", str(study), "--results", str(results), "--executor", "local", "--dry-run", *extra)
    assert sorted(p.relative_to(results) for p in results.rglob("*")) == before  # the dry run wrote nothing
    # the run, on a copy: the stored results stay as the other cases need them
    return dry, study


@pytest.mark.parametrize("change", ["lr", "architecture", "dataset", "batch", "name"])
def test_a_dry_run_refuses_what_the_run_refuses_with_the_same_line(stored, change, tmp_path):
    import shutil

    base, results = stored
    dry, study = _both(base, results, _changed(STUDY, change))
    copy_of = tmp_path / "r"
    shutil.copytree(results, copy_of)
    for side in results.parent.glob(f"{results.name}.*"):  # the plan, selection, history beside the rows
        (shutil.copytree if side.is_dir() else shutil.copy)(side, tmp_path / side.name)
    run = run_main("run", str(study), "--results", str(copy_of), "--executor", "local")
    assert run.returncode == 2, (change, run.stderr[-2000:])
    assert dry.returncode == 2, (change, dry.stderr[-2000:])
    refusal = run.stderr.strip().splitlines()[-1].replace(str(copy_of), "RESULTS")
    assert dry.stderr.strip().splitlines()[-1].replace(str(results), "RESULTS") == refusal


def test_a_dry_run_refuses_a_corrupt_file_as_the_run_does_and_plans_its_repair(stored, tmp_path):
    import shutil

    base, results = stored
    copy_of = tmp_path / "r"
    shutil.copytree(results, copy_of)
    part = next(copy_of.rglob("part-*.parquet"))
    part.write_bytes(b"not parquet")
    study = base / "s.yaml"
    dry = run_main("run", str(study), "--results", str(copy_of), "--executor", "local", "--dry-run")
    assert dry.returncode == 2 and part.name in dry.stderr
    repair = run_main("run", str(study), "--results", str(copy_of), "--executor", "local", "--dry-run", "--repair")
    assert repair.returncode == 0 and f"--repair would move aside {part}" in repair.stderr
    assert part.read_bytes() == b"not parquet"  # planned, not done
    run = run_main("run", str(study), "--results", str(copy_of), "--executor", "local")
    assert run.returncode == 2 and part.name in run.stderr


def test_a_dry_run_plans_what_the_run_then_trains(stored, tmp_path):
    import shutil

    base, results = stored
    copy_of = tmp_path / "r"
    shutil.copytree(results, copy_of)
    raw = _changed(STUDY, "epochs-kept")
    dry, study = _both(base, copy_of, raw)
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "2 configs to train in" in dry.stderr and "2 already stored" in dry.stderr
    run = run_main("run", str(study), "--results", str(copy_of), "--executor", "local")
    assert run.returncode == 0 and "2 configs to train in" in run.stderr and "2 configs already stored" in run.stderr


SEARCH = {
    "name": "dry-search",
    "dataset": {"name": "synthetic", "rows": 300, "features": 4},
    "seeds": [0],
    "train": {"epochs": 1, "batch_size": 100},
    "evaluate": {"leakage": False, "mdl": False, "min_group_count": 1},
    "methods": {"noise": {}},
    "search": {"method": "noise", "sampler": "tpe", "trials": 2, "seed": 0,
               "objectives": {"valid_accuracy": "max", "valid_tpr_gap": "min"},
               "space": {"eps": {"low": 1, "high": 20, "log": True}}},
}


@pytest.mark.parametrize("change", ["search", "lr"])
def test_a_search_dry_run_refuses_what_the_search_refuses(tmp_path, change):
    """A search's journal started with other settings, or rows of another protocol: the dry run
    refuses them as the search does, and writes nothing."""
    study, results = tmp_path / "s.yaml", tmp_path / "r"
    study.write_text(yaml.safe_dump(SEARCH))
    first = run_main("search", str(study), "--results", str(results), "--executor", "local")
    assert first.returncode == 0, first.stderr[-2000:]
    raw = copy.deepcopy(SEARCH)
    if change == "search":
        raw["search"]["space"]["eps"]["high"] = 40
    else:
        raw["train"]["lr"] = 0.05
    study.write_text(yaml.safe_dump(raw))
    journal = results / "_optuna.journal"
    before = journal.read_bytes()
    dry = run_main("search", str(study), "--results", str(results), "--executor", "local", "--dry-run")
    assert journal.read_bytes() == before
    run = run_main("search", str(study), "--results", str(results), "--executor", "local")
    assert run.returncode == 2 and dry.returncode == 2, (run.stderr[-1000:], dry.stderr[-1000:])
    assert dry.stderr.strip().splitlines()[-1] == run.stderr.strip().splitlines()[-1]
