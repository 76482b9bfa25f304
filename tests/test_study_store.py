"""The Parquet store and resume planning: whole files, one copy per pack, corrupt files named."""

import os

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fairdp.errors import InputError
from fairdp.study import ResultStore, parse_spec, plan_packs, read_results, study_columns
from fairdp.study._plan import auto_pack_size, run_configs
from fairdp.study._store import pack_id
from fairdp.study._tune import slots_for

SPEC = parse_spec({
    "name": "store-test", "dataset": {"name": "synthetic", "rows": 400}, "seeds": [0, 1],
    "train": {"epochs": 2}, "pack_size": 3,
    "methods": {"federate": {"grid": {"eps": [1, 2], "lam": [0.5, 1.0, 1.5]}}, "unconstrained": {}},
})


def _rows(pack, status="ok", acc=80.0):
    return [{"study": SPEC.name, "dataset": "synthetic", "method": pack.method, "seed": pack.seed,
             "config_id": cid, "pack_id": pack.id, "epochs": 2, "status": status,
             "valid_accuracy": acc, **{k: v for k, v in cfg.items() if k != "fairness_notion"}}
            for cfg, cid in zip(pack.configs, pack.config_ids)]


def _store_all(store, packs, status="ok"):
    for p in packs:
        store.write_pack(_rows(p, status), "synthetic", p.method, p.seed, p.id)


def test_plan_covers_every_config_once_in_packs_of_the_spec_size():
    packs, done = plan_packs(SPEC, pd.DataFrame(), slots=2)
    assert done == 0
    keys = [(p.method, p.seed, c) for p in packs for c in p.config_ids]
    assert len(keys) == len(set(keys)) == SPEC.n_configs == 14
    assert max(len(p.configs) for p in packs) == 3


def test_every_method_starts_in_the_first_round_largest_packs_first():
    packs, _ = plan_packs(SPEC, pd.DataFrame(), slots=2)
    # federate: 2 seeds x 6 configs in packs of 3; unconstrained: 2 seeds x 1
    order = [(p.method, len(p.configs)) for p in packs]
    assert order[:2] == [("federate", 3), ("unconstrained", 1)]  # round 1: each method's largest
    assert order[2:4] == [("federate", 3), ("unconstrained", 1)]
    assert order[4:] == [("federate", 3)] * 2


def test_a_rewritten_pack_replaces_its_file_and_readers_skip_hidden_files(tmp_path):
    store = ResultStore(tmp_path / "r")
    packs, _ = plan_packs(SPEC, pd.DataFrame())
    _store_all(store, packs)
    (tmp_path / "r/synthetic/federate/.tmp-killed-part-x.parquet").write_bytes(b"PAR1 half a file")
    store.write_pack(_rows(packs[0], acc=90.0), "synthetic", packs[0].method, packs[0].seed, packs[0].id)
    df, corrupt = store.read()
    assert corrupt == [] and len(df) == SPEC.n_configs
    assert not df.duplicated(["method", "seed", "config_id"]).any()
    mine = df["config_id"].isin(packs[0].config_ids) & (df["seed"] == packs[0].seed) & (df["method"] == packs[0].method)
    assert (df.loc[mine, "valid_accuracy"] == 90.0).all() and (df.loc[~mine, "valid_accuracy"] == 80.0).all()
    assert list(df.columns) == [name for name, _ in study_columns()]
    assert store.remove_temporaries() == 1


def test_resume_skips_stored_configs_and_retries_error_packs_with_their_own_file(tmp_path):
    store = ResultStore(tmp_path / "r")
    packs, _ = plan_packs(SPEC, pd.DataFrame())
    _store_all(store, packs[:2])
    _store_all(store, packs[2:3], status="error")
    stored, _ = store.read()
    again, done = plan_packs(SPEC, stored)
    assert done == sum(len(p.configs) for p in packs[:2])
    assert packs[2] in again  # same configs, so the same file name: the retry replaces it
    keys = [(p.method, p.seed, c) for p in again for c in p.config_ids]
    assert len(keys) == len(set(keys)) == SPEC.n_configs - done
    _store_all(store, again)
    final, _ = store.read()
    assert len(final) == SPEC.n_configs and (final["status"] == "ok").all()


def test_pack_ids_ignore_config_order():
    assert pack_id("m", 0, ["b", "a"]) == pack_id("m", 0, ["a", "b"]) != pack_id("m", 1, ["a", "b"])


def test_schemas_are_unified_across_files(tmp_path):
    store = ResultStore(tmp_path / "r")
    packs, _ = plan_packs(SPEC, pd.DataFrame())
    _store_all(store, packs[1:])
    old = pa.table({"study": [SPEC.name], "dataset": ["synthetic"], "method": ["federate"], "seed": [0],
                    "config_id": [packs[0].config_ids[0]], "status": ["ok"], "valid_accuracy": [70.0]})
    path = store.pack_path("synthetic", "federate", 0, "oldformat")
    pq.write_table(old, path)
    df, _ = store.read()
    assert len(df) == SPEC.n_configs - len(packs[0].configs) + 1
    assert df["test_accuracy"].isna().sum() >= 1


def test_a_truncated_file_is_named_and_repair_moves_it_aside(tmp_path):
    store = ResultStore(tmp_path / "r")
    packs, _ = plan_packs(SPEC, pd.DataFrame())
    _store_all(store, packs)
    victim = store.pack_path("synthetic", packs[0].method, packs[0].seed, packs[0].id)
    data = open(victim, "rb").read()
    with open(victim, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(InputError, match=os.path.basename(victim)):
        store.read()
    _, corrupt = store.read(on_corrupt="collect")
    assert [c.path for c in corrupt] == [victim]
    moved = store.move_aside(victim)
    assert os.path.basename(moved).startswith(".corrupt-") and not os.path.exists(victim)
    df, corrupt = store.read()
    assert corrupt == [] and len(df) == SPEC.n_configs - len(packs[0].configs)
    again, _ = plan_packs(SPEC, df)
    assert [set(p.config_ids) for p in again] == [set(packs[0].config_ids)]


def test_file_uri_and_several_locations_read_together(tmp_path):
    a, b = ResultStore(f"file://{tmp_path}/a"), ResultStore(str(tmp_path / "b"))
    packs, _ = plan_packs(SPEC, pd.DataFrame())
    _store_all(a, packs[:2])
    _store_all(b, packs[2:])
    assert os.path.isdir(tmp_path / "a/synthetic/federate")
    df = read_results(f"file://{tmp_path}/a", tmp_path / "b")
    assert len(df) == SPEC.n_configs
    with pytest.raises(InputError, match="no such results"):
        read_results(tmp_path / "missing")


@pytest.mark.parametrize("configs,groups,slots,expected", [
    (150, 1, 2, 25),   # capped at 32, and 6 packs rather than 5 so no slot idles in the last round
    (150, 5, 2, 25),
    (9, 2, 2, 9),      # enough groups to fill the slots: whole grids
    (9, 1, 4, 3),      # one grid, four slots: split it
    (1, 4, 8, 1),
])
def test_auto_pack_size(configs, groups, slots, expected):
    assert auto_pack_size(configs, groups, slots) == expected


GRID_150 = {"name": "gpu-plan", "dataset": "adult", "seeds": [0, 1],
            "methods": {"federate": {"grid": {"eps": list(range(8, 18)), "lam": {"start": 0.1, "stop": 3.0, "step": 0.2}}},
                        "unconstrained": {}}}


@pytest.mark.parametrize("gpu,packs_per_seed", [(False, 5), (True, 1)])
def test_on_a_gpu_each_methods_seed_is_one_pack(gpu, packs_per_seed):
    """A 150-config grid: five packs of 30 per seed on CPUs (the cap bounds a kill's loss),
    one pack of 150 on a GPU, where one batched model fills the device; one slot either way."""
    spec = parse_spec(GRID_150)
    packs, _ = plan_packs(spec, pd.DataFrame(), slots=1, gpu=gpu)
    federate = [p for p in packs if p.method == "federate"]
    assert len(federate) == 2 * packs_per_seed
    assert sorted(c for p in federate for c in p.config_ids) == sorted(
        c for seed in (0, 1) for c in run_configs(spec, spec.methods[0], seed)[1])


@pytest.mark.parametrize("cpus,gpus,cpus_per_trial,gpus_per_trial,slots", [
    (16, 1, 1, 0, 16),     # CPU trials: the CPUs decide
    (16, 1, 1, 1, 1),      # one GPU, whole-GPU trials: one at a time however many CPUs
    (16, 1, 1, 0.25, 4),   # fractions share it
    (16, 1, 1, 0.1, 10),   # 1 / 0.1 is 10 despite floating point
    (16, 4, 4, 0.5, 4),    # the CPUs bound it first
    (16, 0, 1, 1, 1),      # no GPU: check_trial_fits refuses the study; never 0 slots
])
def test_slots_count_gpus_for_gpu_trials(cpus, gpus, cpus_per_trial, gpus_per_trial, slots):
    spec = parse_spec({**GRID_150, "resources": {"cpus_per_trial": cpus_per_trial, "gpus_per_trial": gpus_per_trial}})
    assert slots_for(spec, cpus, gpus) == slots


def test_an_object_store_gets_whole_files_resume_and_repair_too(tmp_path):
    """The non-local path (what s3:// and gs:// take), on an in-process object store:
    fsspec's memory filesystem behind pyarrow's PyFileSystem."""
    fsspec = pytest.importorskip("fsspec")
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    memory = fsspec.filesystem("memory")
    memory.store.clear()
    store = ResultStore("bucket/study", filesystem=PyFileSystem(FSSpecHandler(memory)))
    assert not store.is_local and not store.exists()
    packs, _ = plan_packs(SPEC, pd.DataFrame())
    _store_all(store, packs[:3])
    _store_all(store, packs[:1])  # a retried pack overwrites its object
    df, _ = store.read()
    assert len(df) == sum(len(p.configs) for p in packs[:3]) and not df.duplicated(["method", "seed", "config_id"]).any()
    assert not [k for k in memory.store if "/." in k]  # no temporaries on an object store
    again, done = plan_packs(SPEC, df)
    assert done == len(df) and sum(len(p.configs) for p in again) == SPEC.n_configs - done
    victim = store.pack_files()[0]
    memory.pipe_file(victim, b"not parquet")
    with pytest.raises(InputError, match="corrupt"):
        store.read()
    store.move_aside(store.read(on_corrupt="collect")[1][0].path)
    assert len(store.read()[0]) == len(df) - len(packs[0].configs)
    memory.store.clear()


def test_a_study_runs_into_a_file_uri(tmp_path, monkeypatch):
    import io

    from fairdp.study import run_study

    spec = parse_spec({"name": "uri", "dataset": {"name": "synthetic", "rows": 400}, "seeds": [0],
                       "train": {"epochs": 1, "batch_size": 200}, "evaluate": {"leakage": False, "mdl": False},
                       "methods": {"unconstrained": {}, "noise": {"grid": {"eps": [1, 5]}}}})
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)  # a URI taken for a relative path would leave 'file:' directories here
    uri = f"file://{tmp_path}/r"
    summary = run_study(spec, uri, num_cpus=1, progress_stream=io.StringIO())
    assert summary.configs == 3 and summary.failed_packs == 0
    df = read_results(uri)
    assert len(df) == 3 and (df["status"] == "ok").all()
    assert list(cwd.iterdir()) == []


def test_a_column_the_study_does_not_declare_is_refused_not_dropped(tmp_path):
    """A value with no column (e.g. a hyperparameter of a method the study's columns were not
    built from) must not vanish from the row silently."""
    store = ResultStore(tmp_path / "r")
    packs, _ = plan_packs(SPEC, pd.DataFrame())
    rows = _rows(packs[0])
    rows[0]["lam_undeclared"] = 0.5
    with pytest.raises(ValueError, match="lam_undeclared"):
        store.write_pack(rows, "synthetic", packs[0].method, packs[0].seed, packs[0].id)
    assert store.pack_files() == []
    extended = ResultStore(tmp_path / "r", columns=[*study_columns(), ("lam_undeclared", "float64")])
    extended.write_pack(rows, "synthetic", packs[0].method, packs[0].seed, packs[0].id)
    df, _ = extended.read()
    assert df["lam_undeclared"].tolist()[0] == 0.5
