"""Resume planning: packs cut from the backlog (the store itself: test_store_contract.py)."""


import pandas as pd
import pytest

from fairdp.study import parse_spec, read_results
from fairdp.study.ray._tune import slots_for
from fairdp.study.run._plan import auto_pack_size, plan_packs, run_configs
from fairdp.study.store._store import pack_id

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


def test_pack_ids_ignore_config_order():
    assert pack_id("m", 0, ["b", "a"]) == pack_id("m", 0, ["a", "b"]) != pack_id("m", 1, ["a", "b"])


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
    # the URI is the store's to resolve, whoever runs the packs: the local executor
    summary = run_study(spec, uri, executor="local", progress_stream=io.StringIO())
    assert summary.configs == 3 and summary.failed_packs == 0
    df = read_results(uri)
    assert len(df) == 3 and (df["status"] == "ok").all()
    assert list(cwd.iterdir()) == []


def test_every_row_a_study_writes_stores_its_methods_guarantee_kind(tmp_path):
    """The kind of each row's guarantee (what its eps protects) is stored with the row, equal
    to its method's ``guarantee_kind``, on ok and error rows alike."""
    from fairdp import schema
    from fairdp.engine import TrainSettings
    from fairdp.methods import get_method
    from fairdp.metrics import ProbeSettings
    from fairdp.study import study_columns
    from fairdp.study.executors import Pack, StudyContext, run_pack
    from fairdp.study.store._rows import write_error_rows

    methods = {"unconstrained": [{}], "noise": [{"eps": 1.0}], "dpsgd": [{"eps": 1.0, "clip_primal": 1.0}],
               "pfld": [{"fairness_notion": "dp", "eps": 1.0, "clip_primal": 1.0, "clip_dual": 5.0}],
               "private_reductions": [{"fairness_notion": "dp", "bound": 0.05, "eps": 1.0}]}
    assert schema.GUARANTEE in dict(study_columns(list(methods)))
    ctx = StudyContext(study="kinds", dataset="synthetic", dataset_options={"rows": 400, "features": 6, "seed": 0},
                       train=TrainSettings(epochs=1, batch_size=100), leakage=False, mdl=False,
                       probe=ProbeSettings(), results=str(tmp_path), cpus_per_trial=1,
                       columns=tuple(study_columns(list(methods))))
    for name, configs in methods.items():
        m = get_method(name)
        run_pack(ctx, Pack(name, 0, tuple(configs), tuple(m.config_id(c) for c in configs)))
    failed = Pack("dpsgd", 1, tuple(methods["dpsgd"]), ("broken",))
    write_error_rows(ctx.store(), ctx, failed, "RuntimeError: boom")
    rows = read_results(tmp_path)
    assert len(rows) == len(methods) + 1 and (rows["status"] == "error").sum() == 1
    for _, row in rows.iterrows():
        want = get_method(row["method"]).guarantee_kind
        assert (row[schema.GUARANTEE] if pd.notna(row[schema.GUARANTEE]) else None) == want, row["method"]
    kinds = dict(zip(rows["method"], rows[schema.GUARANTEE]))
    assert kinds["dpsgd"] == "central, add/remove one record"
    assert kinds["pfld"] == "central, replace one record's attribute"
    assert kinds["noise"] == "local, replace one record's representation"
    assert kinds["private_reductions"] == "local, replace one record's attribute"
    assert pd.isna(kinds["unconstrained"])
