"""A search behaves like a run (issue 28): the local executor, a dry run, --epochs and --seeds, a
refused resume with other search settings, infeasible searches that say why, and repeats of
stored configs answered from their rows instead of retrained."""

import json
import shutil

import optuna
import pandas as pd
import pytest
import yaml
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from fairdp.study import ResultStore
from tests.conftest import assert_input_error, env_without_ray, run_cli, run_main

SEARCH = {
    "name": "like-run",
    "dataset": {"name": "synthetic", "rows": 600, "features": 6},
    "seeds": [0],
    "train": {"epochs": 1, "batch_size": 200},
    "evaluate": {"leakage": False, "mdl": False, "min_group_count": 1},
    "methods": {"noise": {}},
    "search": {"method": "noise", "sampler": "nsga2", "population": 4, "trials": 8, "seed": 0,
               "objectives": {"valid_accuracy": "max", "valid_tpr_gap": "min"},
               "space": {"eps": {"low": 1, "high": 20, "log": True}}},
}


def _study(tmp_path, **search):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SEARCH, "search": {**SEARCH["search"], **search}}))
    return path


def _trials(results, name):
    storage = JournalStorage(JournalFileBackend(str(results / "_optuna.journal")))
    return optuna.load_study(study_name=name, storage=storage).trials


def test_a_local_search_runs_without_ray_and_a_dry_run_writes_nothing(tmp_path):
    study, results = _study(tmp_path), tmp_path / "r"
    dry = run_cli("search", str(study), "--results", str(results), "--executor", "local", "--dry-run",
                  env=env_without_ray(tmp_path, ("ray",)))
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "8 of 8 trials to run" in dry.stderr and "Nothing was run or written" in dry.stderr
    assert not results.exists()
    proc = run_cli("search", str(study), "--results", str(results), "--executor", "local", "--epochs", "2",
                   "--seeds", "0,1", env=env_without_ray(tmp_path, ("ray",)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows, _ = ResultStore(results).read()
    assert sorted(set(rows["seed"])) == [0, 1] and (rows["epochs"] == 2).all()
    assert not rows.duplicated(["seed", "config_id"]).any()
    for seed in (0, 1):  # one Optuna study per seed, each complete
        trials = _trials(results, f"like-run-noise-seed{seed}")
        assert sum(t.state.name == "COMPLETE" for t in trials) == 8
        assert (tmp_path / f"r.pareto-noise-seed{seed}.parquet").exists()
    assert "(seed 1)" in proc.stdout
    # a dry run of the finished search has nothing left (Ray's absence is proven above)
    again = run_main("search", str(study), "--results", str(results), "--executor", "local", "--dry-run",
                    "--epochs", "2")
    assert "0 of 8 trials to run (8 complete" in again.stderr


@pytest.fixture(scope="module")
def searched_four(tmp_path_factory):
    """A folder with the study and its results after a local search of 4 trials (the CLI's own
    run of a search: test_a_local_search_runs_without_ray_and_a_dry_run_writes_nothing)."""
    folder = tmp_path_factory.mktemp("searched")
    first = run_main("search", str(_study(folder)), "--results", str(folder / "r"), "--executor", "local",
                     "--trials", "4")
    assert first.returncode == 0, first.stderr[-2000:]
    return folder


@pytest.mark.parametrize("change, named", [
    ({"constraints": ["valid_accuracy >= 60"]}, "search.constraints []"),
    ({"population": 2}, "search.population 4"),
    ({"space": {"eps": {"low": 1, "high": 24, "log": True}}}, "search.space.eps.high 20"),
    ({"sampler": "tpe"}, 'search.sampler "nsga2"'),
    ({"objectives": {"valid_accuracy": "max", "valid_dp_gap": "min"}}, "search.objectives.valid_dp_gap null"),
])
def test_resuming_a_search_with_other_settings_is_refused_naming_them_and_writes_nothing(
        searched_four, tmp_path, change, named):
    tmp_path = tmp_path / "w"
    shutil.copytree(searched_four, tmp_path)  # modes too: the refusal must not touch a byte of it
    results = tmp_path / "r"
    journal = results / "_optuna.journal"
    assert journal.stat().st_mode & 0o777 == 0o600  # every trial's hyperparameters: the rows' mode
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    line = assert_input_error(run_main("search", str(_study(tmp_path, **change)), "--results", str(results),
                                      "--executor", "local"), named, "pass another --results")
    assert "_optuna.journal" in line
    assert len(ResultStore(results).read()[0]) == 4
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != "s.yaml"}
    assert after == {p: b for p, b in before.items() if p.name != "s.yaml"}  # a refusal writes nothing


def test_an_infeasible_search_says_which_constraint_excluded_how_many_rows(tmp_path):
    study = _study(tmp_path, constraints=["valid_accuracy >= 99.5", "eps_formal <= 100"], trials=4)
    proc = run_main("search", str(study), "--results", str(tmp_path / "r"), "--executor", "local")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ": 0 configs" in proc.stdout
    assert "valid_accuracy >= 99.5: 4; eps_formal <= 100: 0" in proc.stdout and "no row meets them all" in proc.stdout


def test_repeats_of_stored_configs_are_answered_from_their_rows_and_generations_refilled(tmp_path):
    """A space of five configs searched for twelve trials: the sampler proposes configs already
    trained (by the grid run beside it, or by itself); those are told from their rows, never
    trained again, the progress counts them, and once every config is stored the search says
    the space is exhausted."""
    study = _study(tmp_path, space={"eps": {"choices": [1.0, 2.0, 4.0, 8.0, 16.0]}}, trials=12, population=2)
    results = tmp_path / "r"
    grid = {**SEARCH, "methods": {"noise": {"grid": {"eps": [1.0, 2.0]}}}}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(grid))
    assert run_main("run", str(tmp_path / "grid.yaml"), "--results", str(results), "--executor", "local").returncode == 0
    proc = run_main("search", str(study), "--results", str(results), "--executor", "local")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows, _ = ResultStore(results).read()
    assert len(rows) == 5 and not rows.duplicated(["seed", "config_id"]).any()  # each config trained once
    trials = _trials(results, "like-run-noise-seed0")
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    by_id = rows.set_index("config_id")
    for t in complete:  # every trial told its config's stored values
        assert t.values == pytest.approx([by_id.loc[t.user_attrs["config_id"], "valid_accuracy"],
                                          by_id.loc[t.user_attrs["config_id"], "valid_tpr_gap"]])
    last = [ln for ln in proc.stderr.splitlines() if ln.startswith("fairdp search like-run:")][-1]
    assert "100% | 12/12 config-epochs" in last and "configs answered from stored rows" in last
    assert "answered from stored rows" in proc.stdout
    assert len(complete) == 12


@pytest.mark.slow
def test_a_search_on_ray_says_nothing_of_searcher_saves(tmp_path):
    proc = run_cli("search", str(_study(tmp_path, trials=4)), "--results", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "save not implemented" not in proc.stderr and "Traceback" not in proc.stderr
    assert json.loads(json.dumps(_trials(tmp_path / "r", "like-run-noise-seed0")[0].params)) != {}
    assert isinstance(pd.read_parquet(f"{tmp_path / 'r'}.pareto-noise-seed0.parquet"), pd.DataFrame)


@pytest.mark.parametrize("damage", ["garbage", "directory"])
def test_a_journal_fairdp_cannot_read_is_refused_before_anything_is_changed(tmp_path, damage):
    """Binary garbage (with newlines) in place of the journal was cut as a partial record, then
    failed in a UnicodeDecodeError; a directory raised IsADirectoryError. Both: one line, exit
    2, the file as it was, for the search and its dry run."""
    study, results = _study(tmp_path), tmp_path / "r"
    results.mkdir()
    journal = results / "_optuna.journal"
    if damage == "garbage":
        journal.write_bytes(bytes(range(256)) * 3 + b"\x00\xff")
    else:
        journal.mkdir()
    before = journal.read_bytes() if damage == "garbage" else None
    for dry in ([], ["--dry-run"]):
        proc = run_main("search", str(study), "--results", str(results), "--executor", "local", *dry)
        assert_input_error(proc, str(journal), "not a file" if damage == "directory" else "line 1 is not an Optuna")
        assert "dropped a partial last record" not in proc.stderr
        if damage == "garbage":
            assert journal.read_bytes() == before
        else:
            assert journal.is_dir() and not any(journal.iterdir())
