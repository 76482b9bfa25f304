"""The executor is asked its capacity once per command (``Executor.capacity``), and that one
answer is what the plan, the precision and the packs use: a run, its dry run, a search and its
dry run each ask once. An embedded Ray is started with the resources its capacity planned for,
so the dry run's slots are the run's; the workers' CPUs are asked only when the study's
precision depends on them."""

from __future__ import annotations

import pytest

from fairdp.study import parse_spec, run_study, search_study
from fairdp.study.executors import EXECUTORS, Capacity, _executors, reads_workers
from fairdp.study.ray import _tune

STUDY = {
    "name": "capacity", "dataset": {"name": "synthetic", "rows": 300, "features": 4}, "seeds": [0],
    "train": {"epochs": 1, "batch_size": 100}, "evaluate": {"leakage": False, "mdl": False, "min_group_count": 1},
    "methods": {"noise": {"grid": {"eps": [4.0, 8.0]}}},
}
SEARCH = {"method": "noise", "sampler": "tpe", "trials": 2, "seed": 0,
          "objectives": {"valid_accuracy": "max", "valid_tpr_gap": "min"},
          "space": {"eps": {"low": 1, "high": 20, "log": True}}}


@pytest.fixture
def counted(monkeypatch):
    """A local executor that counts the times it is asked its capacity, registered as "counted"."""
    asked: list[Capacity] = []

    class Counted(_executors.LocalExecutor):
        name = "counted"

        def capacity(self, spec):
            asked.append(super().capacity(spec))
            return asked[-1]

    monkeypatch.setitem(EXECUTORS, Counted.name, Counted)
    return asked


@pytest.mark.parametrize("command", ["run", "run --dry-run", "search", "search --dry-run"])
def test_each_command_asks_the_executor_its_capacity_once(counted, command, tmp_path):
    spec = parse_spec({**STUDY, "search": SEARCH} if command.startswith("search") else STUDY)
    go = search_study if command.startswith("search") else run_study
    go(spec, str(tmp_path / "r"), executor="counted", dry_run=command.endswith("--dry-run"))
    assert len(counted) == 1, counted
    if command == "run":  # a rerun with nothing left to train asks once too
        run_study(spec, str(tmp_path / "r"), executor="counted")
        assert len(counted) == 2


def test_the_plan_cuts_packs_for_the_capacity_it_was_handed(monkeypatch, tmp_path):
    """Four slots: the two configs go to two packs (a worker each), where one slot packs them
    together; the dry run reports the plan of the same capacity."""
    class Wide(_executors.LocalExecutor):
        name = "wide"

        def capacity(self, spec):
            return Capacity(4, False, None)

    monkeypatch.setitem(EXECUTORS, Wide.name, Wide)
    spec = parse_spec({**STUDY, "train": {**STUDY["train"], "precision": "float32"}})
    wide = run_study(spec, str(tmp_path / "w"), executor="wide", dry_run=True)
    narrow = run_study(spec, str(tmp_path / "n"), executor="local", dry_run=True)
    assert (wide.packs, narrow.packs) == (2, 1)
    assert "in 2 packs, 4 at a time" in "\n".join(wide.plan_lines)
    run = run_study(spec, str(tmp_path / "w"), executor="wide")
    assert run.packs == wide.packs == 2 and run.configs == 2


@pytest.mark.parametrize("train, executor, asks", [
    ({}, "local", True),
    ({"precision": "bf16"}, "local", False),
    ({"dtype": "float64"}, "local", False),
    ({"device": "cuda"}, "local", False),  # on a GPU: full precision by default
    ({}, "ray", True),
])
def test_the_workers_cpus_are_asked_only_when_the_precision_depends_on_them(monkeypatch, train, executor, asks):
    monkeypatch.setattr(_executors, "resolve_device", lambda device: __import__("torch").device(device or "cpu"))
    called = []
    monkeypatch.setattr(_executors, "native_bf16", lambda device: called.append(device) or True)
    spec = parse_spec({**STUDY, "train": {**STUDY["train"], **train}})
    capacity = _executors.make_executor(executor).capacity(spec)
    assert reads_workers(spec.train, capacity.on_gpu) is asks
    assert (capacity.native_bf16 is True, called == ["cpu"]) == (asks, asks)


def test_an_embedded_ray_is_started_with_the_resources_its_capacity_planned(monkeypatch):
    """The dry run's slots are the run's: the embedded Ray gets exactly the CPUs and GPUs the
    capacity counted (it used to detect its own, which in a container with a CPU quota
    differed from the dry run's ``os.cpu_count``)."""
    started = {}

    def fake_session(address=None, num_cpus=None, num_gpus=None):
        started.update(address=address, num_cpus=num_cpus, num_gpus=num_gpus)
        return __import__("contextlib").nullcontext("embedded")

    monkeypatch.setattr(_executors, "ray_session", fake_session)
    spec = parse_spec({**STUDY, "resources": {"cpus_per_trial": 2}})
    executor = _executors.make_executor("ray", num_cpus=6)
    capacity = executor.capacity(spec)
    with executor.session(spec, lambda line: None):
        pass
    have = _tune.machine_resources(6)
    assert started == {"address": None, "num_cpus": 6, "num_gpus": have["GPU"]}
    assert capacity == Capacity(3, False, capacity.native_bf16) and not capacity.planned


@pytest.mark.parametrize("files, cpus, want", [
    ({}, 8, 8),                                                         # no cgroup files: every CPU
    ({"cpu.max": "max 100000"}, 8, 8),                                  # v2, no quota
    ({"cpu.max": "200000 100000"}, 8, 2),                               # v2: --cpus 2
    ({"cpu.max": "150000 100000"}, 8, 1),                               # fractions truncate, as Ray's
    ({"cpu.max": "50000 100000"}, 8, 1),                                # never below one
    ({"cpu.max": "1600000 100000"}, 8, 8),                              # a quota above the CPUs there are
    ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, 4, 4),       # v1, no quota
    ({"cpu/cpu.cfs_quota_us": "300000", "cpu/cpu.cfs_period_us": "100000"}, 4, 3),   # v1: --cpus 3
    ({"cpu.max": "garbage"}, 4, 4),                                     # unreadable: no quota
])
def test_available_cpus_bounds_the_cpus_by_a_cgroup_quota(monkeypatch, tmp_path, files, cpus, want):
    monkeypatch.setattr(_tune.os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text + "\n")
    assert _tune.available_cpus(str(tmp_path)) == want
