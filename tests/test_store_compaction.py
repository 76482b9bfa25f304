"""Compaction (``fairdp compact``, and each run for the seeds it finished): the pack files of a
method's finished seeds merged into a few files, their per-epoch curves likewise. Reading a
compacted store gives the rows (and curves) the uncompacted one gave; a seed still being written
is left as it is; and a compaction killed at any of its steps loses and duplicates nothing. Each
step is interrupted in turn here (a ``BaseException`` stands for the kill, which no ``except
Exception`` catches). After each interruption the rows and curves read are those before, a
resume sees exactly what is stored, and a rerun finishes the merge."""

from __future__ import annotations

import shutil
import threading

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from fairdp.study import ResultStore, compact
from fairdp.study.store import _compact as compaction
from fairdp.study.store._compact import compact_store
from fairdp.study.store._store import merged_names

from .conftest import run_main

KEYS = ["dataset", "method", "seed", "config_id"]


def _rows(method: str, seed: int, ids, status: str = "ok") -> list[dict]:
    return [{"study": "s", "dataset": "d", "method": method, "seed": seed, "config_id": c, "status": status,
             "pack_id": f"{method}{seed}{ids[0]}", "test_accuracy": float(len(c) + seed)} for c in ids]


def _curves(method: str, seed: int, ids) -> pd.DataFrame:
    return pd.DataFrame([{"study": "s", "dataset": "d", "method": method, "seed": seed, "config_id": c,
                          "epoch": e, "valid_accuracy": 0.5 + e / 10, "kept": e == 1} for c in ids for e in (0, 1)])


def _filled(s: ResultStore) -> ResultStore:
    """Two finished methods x two seeds of three packs each (with their curves), and a seed
    with an error row."""
    for method in ("noise", "federate"):
        for seed in (0, 1):
            for p in range(3):
                ids = [f"{method[0]}{seed}{p}{i}" for i in range(2)]
                pid = f"{method}{seed}{p}".ljust(16, "0")
                s.write_pack(_rows(method, seed, ids), "d", method, seed, pid)
                s.write_history(_curves(method, seed, ids), "d", method, seed, pid)
    s.write_pack(_rows("noise", 2, ["a", "b"]), "d", "noise", 2, "noise2a".ljust(16, "0"))
    s.write_history(_curves("noise", 2, ["a", "b"]), "d", "noise", 2, "noise2a".ljust(16, "0"))
    s.write_pack(_rows("noise", 2, ["c"], status="error"), "d", "noise", 2, "noise2c".ljust(16, "0"))
    return s


@pytest.fixture
def store(tmp_path) -> ResultStore:
    return _filled(ResultStore(tmp_path / "r"))


def _read(store: ResultStore) -> pd.DataFrame:
    df, corrupt = store.read()
    assert corrupt == []
    return df.sort_values(KEYS).reset_index(drop=True)


def _curves_read(store: ResultStore) -> pd.DataFrame:
    return store.read_history().sort_values([*KEYS, "epoch"]).reset_index(drop=True)


def _curve_files(store: ResultStore) -> list[str]:
    return store._part_files(store.side_table_path("history"))


def test_compaction_merges_each_methods_finished_seeds_and_the_rows_read_are_the_same(store):
    before, curves = _read(store), _curves_read(store)
    done = compact_store(store)
    assert (done.seeds, done.files, done.merged, done.rows, done.unfinished) == (4, 12, 2, 24, 1)
    assert _read(store).equals(before) and _curves_read(store).equals(curves)
    files = store.pack_files()
    assert len(files) == 2 + 2  # one per method; the seed with an error row keeps its two
    merged = [f for f in files if merged_names(pq.read_schema(f))]
    assert len(merged) == 2 and all(len(merged_names(pq.read_schema(f))) == 6 for f in merged)
    # the curves are merged under the rows' names; the unfinished seed's stay as they are
    assert sorted(p.rsplit("/", 1)[1] for p in _curve_files(store)) == sorted(
        [f.rsplit("/", 1)[1] for f in merged] + ["part-s2-noise2a000000000.parquet"])
    assert compact_store(store).merged == 0  # nothing more to merge: a rerun changes nothing
    assert _read(store).equals(before) and _curves_read(store).equals(curves)


def test_small_merged_files_are_merged_again_and_large_ones_are_left(store):
    """``max_rows`` caps a merged file: with a cap of 5 rows each method's six packs (2 rows
    each) become two files; a rerun at the default cap merges those again into one, which
    lists every name merged before it (a killed rerun's leftovers stay recognisable)."""
    before = _read(store)
    assert compact_store(store, max_rows=5).merged == 4
    assert len(store.pack_files()) == 4 + 2 and _read(store).equals(before)
    assert compact_store(store, max_rows=6).merged == 0  # each file holds 6 rows: none is small
    done = compact_store(store)
    assert (done.merged, done.files) == (2, 4) and _read(store).equals(before)
    merged = [f for f in store.pack_files() if merged_names(pq.read_schema(f))]
    assert len(merged) == 2 and all(len(merged_names(pq.read_schema(f))) == 6 + 2 for f in merged)


def test_only_the_seeds_asked_for_are_merged(store):
    before = _read(store)
    done = compact_store(store, seeds={1})
    assert (done.seeds, done.files, done.merged, done.unfinished) == (2, 6, 2, 0)
    assert len([f for f in store.pack_files() if "/part-s0-" in f]) == 6 and _read(store).equals(before)


def test_a_seed_whose_plan_lists_a_config_not_stored_is_left_as_it_is(store):
    plan = _read(store)[["study", "dataset", "method", "seed", "config_id"]].assign(epochs=1)
    missing = pd.DataFrame([{"study": "s", "dataset": "d", "method": "federate", "seed": 1, "config_id": "new",
                             "epochs": 1}])
    store.write_side_table(pd.concat([plan, missing], ignore_index=True), "plan.parquet")
    done = compact_store(store)
    assert (done.seeds, done.unfinished) == (3, 2)
    assert len([f for f in store.pack_files() if "/federate/part-s1-" in f]) == 3


class Killed(BaseException):
    """Stands for a SIGKILL: nothing below ``compact_store`` catches it."""


def _operations(store: ResultStore, kill_at: int, monkeypatch) -> list[str]:
    """Make the ``kill_at``-th step of a compaction raise ``Killed``: each merged file's write
    (killed before its rename: its hidden temporary is left, as a SIGKILL leaves it) and each
    delete of a merged source. Returns the steps taken, in order."""
    steps: list[str] = []
    write, delete = store._write_in_dir, compaction._delete
    killed = threading.Event()
    lock = threading.Lock()

    def step(name: str) -> None:
        with lock:  # deletes run on several threads: after the kill none of them does anything
            if killed.is_set():
                raise Killed(name)
            steps.append(name)
            if len(steps) == kill_at:
                killed.set()
                raise Killed(name)

    def write_in_dir(table, final):
        directory, name = final.rsplit("/", 1)
        if len(steps) + 1 == kill_at:  # killed mid-write: the temporary stays, nothing is renamed
            pq.write_table(table, f"{directory}/.tmp-{name}.killed")
        step(f"write {name}")
        return write(table, final)

    def delete_one(of, path):
        step(f"delete {path.rsplit('/', 1)[1]}")
        return delete(of, path)

    monkeypatch.setattr(store, "_write_in_dir", write_in_dir)
    monkeypatch.setattr(compaction, "_delete", delete_one)
    return steps


def test_a_compaction_killed_at_any_step_loses_and_duplicates_nothing(store, tmp_path, monkeypatch):
    before, curves = _read(store), _curves_read(store)
    steps = _operations(store, 0, monkeypatch)
    compact_store(store)
    monkeypatch.undo()
    total = len(steps)
    assert total == 2 * (2 + 6 + 6)  # per method: two writes (curves, rows), six deletes of each
    shutil.rmtree(store.root)
    for kill_at in range(1, total + 1):
        copy = _filled(ResultStore(tmp_path / f"k{kill_at}"))
        with monkeypatch.context() as patch:
            taken = _operations(copy, kill_at, patch)
            with pytest.raises(Killed):
                compact_store(copy)
        assert len(taken) == kill_at
        interrupted = _read(copy)
        assert interrupted.equals(before), f"killed at {taken[-1]}: the rows read changed"
        assert _curves_read(copy).equals(curves), f"killed at {taken[-1]}: the curves read changed"
        assert not interrupted.duplicated(KEYS).any()
        done = compact(copy.root)  # the rerun (under the lock): finishes what was left
        assert _read(copy).equals(before), f"after a kill at {taken[-1]} and a rerun"
        assert _curves_read(copy).equals(curves), f"after a kill at {taken[-1]} and a rerun"
        assert len(copy.pack_files()) == 4 and len(_curve_files(copy)) == 3 and done.unfinished == 1
        assert not list(tmp_path.glob(f"k{kill_at}*/**/.tmp-*")), "a killed write's temporary was left"


def test_a_run_compacts_the_seeds_it_finished_and_resumes_with_nothing_to_train(tmp_path):
    """A run merges the pack files of the seeds it finished; the store a run reads to resume
    (its backlog) is the same after that: a rerun of the study trains nothing and reads the
    same rows, and ``fairdp compact`` has nothing left to merge."""
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump({
        "name": "compact", "dataset": {"name": "synthetic", "rows": 300, "features": 4}, "seeds": [0, 1],
        "train": {"epochs": 1, "batch_size": 100}, "evaluate": {"leakage": False, "mdl": False},
        "methods": {"unconstrained": {}, "noise": {"grid": {"eps": [4.0, 8.0]}}}, "pack_size": 1}))
    results = tmp_path / "r"
    first = run_main("run", str(study), "--results", str(results), "--executor", "local")
    assert first.returncode == 0, first.stderr[-2000:]
    assert "compacted the finished seeds' rows: merged 6 files (4 finished seeds) into 2" in first.stderr
    store = ResultStore(results)
    before = _read(store)
    assert len(before) == 6 and not before.duplicated(KEYS).any() and (before["status"] == "ok").all()
    assert len(store.pack_files()) == 2  # one per method
    done = run_main("compact", str(results))
    assert done.returncode == 0 and "nothing to merge" in done.stderr, done.stderr[-2000:]
    assert _read(store).equals(before)
    again = run_main("run", str(study), "--results", str(results), "--executor", "local")
    assert again.returncode == 0 and "all 6 configs already stored" in again.stderr, again.stderr[-2000:]
    assert _read(store).equals(before)
