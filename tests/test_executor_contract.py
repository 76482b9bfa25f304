"""The executor contract, run over every registered executor (``fairdp.study.executors.EXECUTORS``): the
same rows whoever runs the packs, resume without loss or duplicates, a failing pack retried
then stored as error rows that the next run replaces, Ctrl-C keeping what finished, and
progress events in order. A new executor is one class registered by name; this suite is what
it must pass. The Ray cases share one embedded Ray (``run_study`` uses a Ray this process
started)."""

from __future__ import annotations

import io
import os
import signal

import pandas as pd
import pytest

from fairdp.study import ResultStore, parse_spec, run_study
from fairdp.study.executors import EXECUTORS
from fairdp.study.run import _runner as runner
from tests.conftest import cpu_has_native_bf16, default_cpu_precision

pytestmark = pytest.mark.xdist_group("executor_contract")  # one xdist worker computes the module's shared runs once

KEY = ["method", "seed", "config_id"]
METRICS = ["best_epoch", "valid_accuracy", "test_accuracy", "test_tpr_gap", "valid_dp_gap", "eps_formal"]


def _spec(**overrides):
    spec = {
        "name": "contract", "dataset": {"name": "synthetic", "rows": 1000, "features": 8}, "seeds": [0, 1],
        "train": {"epochs": 2, "batch_size": 250}, "evaluate": {"leakage": False, "mdl": False},
        "methods": {"unconstrained": {}, "federate": {"grid": {"eps": [1, 10], "lam": [0.5, 1.0]}}}, "pack_size": 2,
    }
    spec.update(overrides)
    return parse_spec(spec)


@pytest.fixture(scope="module")
def embedded_ray():
    from fairdp.study.ray._ray import keep_ray_on_loopback

    keep_ray_on_loopback()
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


# Executors whose cases run in the slow set: each Ray run costs Tune's seconds of set-up, and
# the fast set's embedded-Ray run is the tiny study's CLI run (tests/test_study_run.py, which
# also checks that the local executor stores what Ray stores); every clause runs on the local
# executor in the fast set
SLOW_TO_START = {"ray"}


@pytest.fixture(params=[pytest.param(name, marks=pytest.mark.slow) if name in SLOW_TO_START else name
                        for name in EXECUTORS])
def executor(request):
    if request.param == "ray":
        request.getfixturevalue("embedded_ray")
    return request.param


def _run(spec, results, executor, **kw):
    return run_study(spec, str(results), executor=executor, progress_stream=io.StringIO(), **kw)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The study's rows as the local executor stores them."""
    results = tmp_path_factory.mktemp("reference") / "r"
    _run(_spec(), results, "local")
    return ResultStore(results).read()[0]


class RecordedProgress(runner.Progress):
    """A Progress that keeps every event it hears."""

    events: list[tuple[str, str]] = []

    def start_pack(self, key, method, configs):
        RecordedProgress.events.append(("start", key))
        super().start_pack(key, method, configs)

    def advance(self, key, units):
        RecordedProgress.events.append(("advance", key))
        super().advance(key, units)

    def finish_pack(self, key):
        RecordedProgress.events.append(("finish", key))
        super().finish_pack(key)

    def fail_pack(self, key):
        RecordedProgress.events.append(("fail", key))
        super().fail_pack(key)


def test_every_config_once_with_the_same_numbers_as_any_other_executor(executor, reference, tmp_path, monkeypatch):
    """Also: progress hears each pack start, advance, then finish (the same run: each Ray run
    costs seconds of Tune's set-up)."""
    monkeypatch.setattr(runner, "Progress", RecordedProgress)
    monkeypatch.setenv("FAIRDP_UNITS_EVERY_S", "0")  # every epoch reports, as long packs do every 2 s
    RecordedProgress.events = []
    summary = _run(_spec(), tmp_path / "r", executor)
    by_pack: dict[str, list[str]] = {}
    for kind, key in RecordedProgress.events:
        by_pack.setdefault(key, []).append(kind)
    assert len(by_pack) == summary.packs
    for kinds in by_pack.values():
        assert kinds[0] == "start" and kinds[-1] == "finish" and kinds.count("finish") == 1
        assert set(kinds[1:-1]) <= {"advance"}
    df, corrupt = ResultStore(tmp_path / "r").read()
    assert corrupt == [] and summary.failed_packs == 0 and summary.configs == len(df) == 10
    assert not df.duplicated(KEY).any() and (df["status"] == "ok").all()
    assert (df["precision"] == default_cpu_precision()).all()  # no train.precision: the CPU's fastest
    pd.testing.assert_frame_equal(df.sort_values(KEY)[KEY + METRICS].reset_index(drop=True),
                                  reference.sort_values(KEY)[KEY + METRICS].reset_index(drop=True))


@pytest.mark.slow  # on embedded Ray, with the Ray cases
def test_a_cluster_asks_each_node_whether_its_cpu_multiplies_bf16_matrices(embedded_ray):
    """The task pinned to each node that can run a trial reads that node's CPU flags (here the
    one node is this machine); a cluster picks bf16 only if every such node answers yes."""
    from fairdp.study.ray._tune import nodes_native_bf16

    assert nodes_native_bf16(_spec()) == cpu_has_native_bf16()
    bigger = _spec(resources={"cpus_per_trial": 64})  # no node can run such a trial: none to ask
    assert nodes_native_bf16(bigger) is False


def test_a_resumed_study_trains_only_what_is_missing(executor, tmp_path):
    first = _run(_spec(seeds=[1]), tmp_path / "r", executor)
    whole = _run(_spec(), tmp_path / "r", executor)
    again = _run(_spec(), tmp_path / "r", executor)
    assert (first.configs, whole.already_stored, whole.configs) == (5, 5, 5)
    assert (again.packs, again.already_stored) == (0, 10)
    df, _ = ResultStore(tmp_path / "r").read()
    assert len(df) == 10 and not df.duplicated(KEY).any()


def test_a_pack_that_keeps_failing_is_retried_then_stored_as_error_rows_the_next_run_replaces(executor, tmp_path,
                                                                                              monkeypatch):
    """A worker-side failure (a CUDA device on a machine without one, with the driver's check of
    the device switched off, as where a cluster's workers lack the GPU the driver was told of)."""
    monkeypatch.setattr("fairdp.study.executors._executors.check_device_here", lambda device: None)
    spec = _spec(seeds=[0], methods={"unconstrained": {}}, train={"epochs": 1, "device": "cuda:0"},
                 resources={"max_failures": 1})
    out = io.StringIO()
    first = run_study(spec, str(tmp_path / "r"), executor=executor, progress_stream=out)
    assert first.failed_packs == 1 and "1 retried" in out.getvalue()
    df, _ = ResultStore(tmp_path / "r").read()
    assert len(df) == 1 and df["status"].iloc[0] == "error" and "cuda" in df["error"].iloc[0].lower()
    second = _run(spec, tmp_path / "r", executor)
    assert second.failed_packs == 1 and second.already_stored == 0
    assert len(ResultStore(tmp_path / "r").pack_files()) == 1  # replaced, not added


class CtrlCAfterFirstPack(runner.Progress):
    """A Progress that presses Ctrl-C (SIGINT to this process) when it hears the first pack
    finish: on the event, not after a sleep, so a busy machine cannot let every pack finish first
    (5 tiny packs train in a fraction of a second in-process)."""

    def finish_pack(self, key):
        super().finish_pack(key)
        if self.packs == 1:
            os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_keeps_the_finished_packs_and_the_rerun_completes(executor, tmp_path, monkeypatch):
    # one seed: 5 packs of one config; the Ctrl-C after the first leaves packs under either executor
    spec = _spec(seeds=[0], pack_size=1, train={"epochs": 4, "batch_size": 250})
    store = ResultStore(tmp_path / "r")
    # Python's own SIGINT handler, which a user's shell leaves in place: a pytest-xdist worker ignores SIGINT
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with monkeypatch.context() as m:
            m.setattr(runner, "Progress", CtrlCAfterFirstPack)
            try:
                summary = _run(spec, tmp_path / "r", executor)
            except KeyboardInterrupt:  # a Ctrl-C between packs is the caller's to report
                summary = None
    finally:
        signal.signal(signal.SIGINT, previous)
    stored, _ = store.read()
    assert 0 < len(stored) < 5 and set(stored["status"]) == {"ok"}
    if summary is not None:
        assert summary.unfinished_packs > 0
    rerun = _run(spec, tmp_path / "r", executor)
    after, _ = store.read()
    assert rerun.already_stored == len(stored) and len(after) == 5 and not after.duplicated(KEY).any()
