"""Input refused before anything trains, one writer per results directory, and results files
others can read: each class of issue 15's faults that is fixed, with a test."""

import functools
import json
import os
import re
import subprocess
import sys
import time

import pandas as pd
import pytest
import yaml

from fairdp._atomic import atomic_path
from fairdp.errors import InputError
from fairdp.study import ResultStore, load_spec
from fairdp.study.ray._ray import connect_error, quiet_loggers
from fairdp.study.ray._tune import (
    TUNE_DIR_PREFIX,
    TUNE_NOISE,
    check_trial_fits,
    remove_stale_tune_dirs,
)
from fairdp.study.store._lock import LOCK_NAME, results_lock
from tests.conftest import REPO, assert_input_error, run_cli, run_main

STUDY = {
    "name": "guards",
    "dataset": {"name": "synthetic", "rows": 600, "features": 6},
    "seeds": [0],
    "train": {"epochs": 2, "batch_size": 200},
    "evaluate": {"leakage": False, "mdl": False},
    "methods": {"unconstrained": {}, "federate": {"grid": {"eps": [1, 10], "lam": [0.5]}}},
}


def _study(tmp_path, text: str | None = None, **overrides):
    path = tmp_path / "study.yaml"
    path.write_text(text if text is not None else yaml.safe_dump({**STUDY, **overrides}))
    return path


def test_a_key_given_twice_is_refused_naming_it(tmp_path):
    text = ("name: guards\ndataset: {name: synthetic, rows: 600, features: 6}\nseeds: [0]\n"
            "train: {epochs: 2, batch_size: 200, epochs: 200}\nevaluate: {leakage: false, mdl: false}\n"
            "methods: {unconstrained: {}}\n")
    proc = run_main("run", str(_study(tmp_path, text)), "--results", str(tmp_path / "r"))
    line = assert_input_error(proc, "study.yaml", "'epochs'", "twice")
    assert "line 4" in line and not (tmp_path / "r").exists()


def test_scientific_notation_is_a_number(tmp_path):
    text = ("name: guards\ndataset: synthetic\nmethods: {unconstrained: {train: {lr: 1e-3}}}\n"
            "train: {epochs: 1}\n")
    spec = load_spec(_study(tmp_path, text))
    assert spec.method_settings["unconstrained"].lr == 0.001


@pytest.mark.parametrize("where", ["file", "under_file"])
def test_results_that_cannot_be_written_are_refused_before_training(tmp_path, where):
    blocker = tmp_path / "taken"
    blocker.write_text("not a directory")
    results = blocker if where == "file" else blocker / "r"
    t = time.monotonic()
    proc = run_main("run", str(_study(tmp_path)), "--results", str(results))
    assert_input_error(proc, str(blocker))
    assert time.monotonic() - t < 30 and "packs" not in proc.stderr  # nothing trained
    assert blocker.read_text() == "not a directory"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_results_directory_is_refused(tmp_path):
    results = tmp_path / "ro"
    results.mkdir()
    results.chmod(0o555)
    try:
        assert_input_error(run_cli("run", str(_study(tmp_path)), "--results", str(results)), str(results))
    finally:
        results.chmod(0o755)


def test_a_live_lock_refuses_a_second_writer_and_a_stale_one_is_taken_over(tmp_path):
    study = _study(tmp_path)
    results = tmp_path / "r"
    with results_lock(str(results), "search"):  # this test process holds it, alive
        proc = run_cli("run", str(study), "--results", str(results), "--executor", "local")
        assert_input_error(proc, str(results), "in use", f"pid {os.getpid()}")
        assert not list(results.rglob("*.parquet"))
    assert not (results / LOCK_NAME).exists()  # released
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (results / LOCK_NAME).write_text(json.dumps({"pid": dead.pid, "host": os.uname().nodename, "command": "run"}))
    proc = run_main("run", str(study), "--results", str(results), "--executor", "local")  # a process of its own above
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "taking over the lock" in proc.stderr and not (results / LOCK_NAME).exists()
    assert len(ResultStore(results).read()[0]) == 3


@pytest.mark.parametrize("command", ["run", "search"])
def test_a_file_uri_takes_the_lock_of_the_directory_it_names(tmp_path, monkeypatch, command):
    """``file:///x`` and ``/x`` are one results directory, so one lock; none is taken in the cwd."""
    import io

    from fairdp.study import parse_spec, run_study, search_study

    spec = parse_spec({**STUDY, "search": {"method": "noise", "sampler": "tpe", "trials": 2, "seed": 0,
                                           "objectives": {"valid_accuracy": "max"},
                                           "space": {"eps": {"low": 1, "high": 20}}}})
    monkeypatch.chdir(tmp_path)
    start = {"run": functools.partial(run_study, executor="local"), "search": search_study}[command]
    with results_lock(str(tmp_path / "r"), "run"):
        with pytest.raises(InputError, match="in use"):
            start(spec, f"file://{tmp_path}/r", progress_stream=io.StringIO())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no 'file:' directory beside it
    assert list((tmp_path / "r").iterdir()) == []  # refused before anything was written


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_honour_the_umask_and_results_files_are_private(tmp_path, umask, mode):
    """Reports and figures get the umask's mode; result rows, side tables and checkpoints, which
    hold the seed every noise draw follows from (the guarantees assume it secret), are 0600."""
    old = os.umask(umask)
    try:
        with atomic_path(tmp_path / "f.png") as tmp:
            tmp.write_bytes(b"x")
        store = ResultStore(tmp_path / "r")
        rows = [{"study": "s", "dataset": "d", "method": "unconstrained", "seed": 0, "config_id": "c", "status": "ok"}]
        pack = store.write_pack(rows, "d", "unconstrained", 0, "p")
        side = store.write_side_table(pd.DataFrame({"a": [1]}), "plan.parquet")
        checkpoint = store.checkpoint("p")
        checkpoint.write(b"state")
    finally:
        os.umask(old)
    assert (tmp_path / "f.png").stat().st_mode & 0o777 == mode
    for path in (pack, side, checkpoint.path):
        assert os.stat(path).st_mode & 0o777 == 0o600, path


def test_a_packs_last_check_runs_after_its_rows_are_on_disk_and_can_stop_them_appearing(tmp_path):
    """A worker's last check that its driver lives (``before_commit``) runs once the rows are
    written, just before they appear: a driver killed while the rows were written stores
    nothing, and the check is not made before time the write itself takes."""
    store = ResultStore(tmp_path / "r")
    rows = [{"study": "s", "dataset": "d", "method": "unconstrained", "seed": 0, "config_id": "c", "status": "ok"}]
    final = store.pack_path("d", "unconstrained", 0, "p")
    seen = []

    def check() -> None:
        hidden = [p for p in os.listdir(os.path.dirname(final)) if p.startswith(".tmp-")]
        seen.append((os.path.exists(final), [pd.read_parquet(os.path.join(os.path.dirname(final), p))["config_id"]
                                             .tolist() for p in hidden]))
        raise SystemExit(70)  # as a worker whose driver is gone ends

    with pytest.raises(SystemExit):
        store.write_pack(rows, "d", "unconstrained", 0, "p", before_commit=check)
    assert seen == [(False, [["c"]])]  # the whole file written, not yet in place
    assert store.pack_files() == [] and not [p for p in os.listdir(os.path.dirname(final)) if p.startswith(".tmp-")]
    assert store.write_pack(rows, "d", "unconstrained", 0, "p", before_commit=lambda: None) == final
    assert store.pack_files() == [final]


@pytest.mark.parametrize("error", [PermissionError(13, "Permission denied"),
                                   OSError("Failed to open local file 'x'. Detail: [errno 13] Permission denied")])
def test_an_unreadable_results_file_is_not_called_corrupt(tmp_path, monkeypatch, error):
    """A file this user may not read is healthy: the error says so, does not advise --repair
    (which would move it aside), and the file stays where it is."""
    import fairdp.study.store._store as store_module
    from fairdp.errors import InputError

    store = ResultStore(tmp_path / "r")
    rows = [{"study": "s", "dataset": "d", "method": "unconstrained", "seed": 0, "config_id": "c", "status": "ok"}]
    path = store.write_pack(rows, "d", "unconstrained", 0, "p")

    def denied(*args, **kwargs):
        raise error

    monkeypatch.setattr(store_module.pq, "read_schema", denied)  # the footer: what a read opens first
    with pytest.raises(InputError, match="permission denied") as info:
        store.read(on_corrupt="collect")
    assert "--repair" not in str(info.value) and os.path.exists(path)


def test_a_file_whose_footer_reads_but_whose_data_does_not_is_left_out_and_named(tmp_path):
    """The store reads footers first and then every file in one columnar scan; a file whose
    footer is whole but whose pages are not fails that scan, so it is found file by file: the
    other files' rows are read, and it alone is named corrupt."""
    store = ResultStore(tmp_path / "r")
    rows = [{"study": "s", "dataset": "d", "method": "unconstrained", "seed": 0, "config_id": c, "status": "ok"}
            for c in ("a", "b")]
    kept = store.write_pack(rows[:1], "d", "unconstrained", 0, "pa")
    broken = store.write_pack(rows[1:], "d", "unconstrained", 0, "pb")
    with open(broken, "rb") as f:
        data = bytearray(f.read())
    footer = int.from_bytes(data[-8:-4], "little")
    data[4:len(data) - footer - 8] = b"\xff" * (len(data) - footer - 12)  # the pages, not the footer
    with open(broken, "wb") as f:
        f.write(bytes(data))
    df, corrupt = store.read(on_corrupt="collect")
    assert list(df["config_id"]) == ["a"] and [c.path for c in corrupt] == [broken] and os.path.exists(kept)
    assert corrupt[0].kind == "corrupt"
    with pytest.raises(InputError, match="part-s0-pb.parquet"):
        store.read()


def test_tune_directories_of_killed_runs_are_removed_and_live_ones_kept(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f"{TUNE_DIR_PREFIX}{dead.pid}-abc" / "trial").mkdir(parents=True)
    (tmp_path / f"{TUNE_DIR_PREFIX}{os.getpid()}-def").mkdir()
    (tmp_path / "something-else").mkdir()
    assert remove_stale_tune_dirs() == [f"{TUNE_DIR_PREFIX}{dead.pid}-abc"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{TUNE_DIR_PREFIX}{os.getpid()}-def", "something-else"])


def test_a_killed_search_journal_is_repaired_and_its_running_trials_are_asked_again(tmp_path, caplog):
    """A kill mid-search leaves trials RUNNING and possibly half a record at the journal's end.
    On resume the half record is cut (Optuna would append after it and make the journal
    unreadable); in a study whose asks record no sampler state (Ray's per-config search, an
    older journal: ``retry_orphans``; test_search_resume.py has the planner's resume) the
    RUNNING trials become FAIL and do not count, and their parameters are asked again first."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from fairdp.study import parse_spec
    from fairdp.study.search._optuna import complete_trials, open_study, retry_orphans

    spec = parse_spec({**STUDY, "search": {"method": "noise", "sampler": "tpe", "trials": 4, "seed": 0,
                                           "objectives": {"valid_accuracy": "max"},
                                           "space": {"eps": {"low": 1, "high": 20}}}})
    journal = str(tmp_path / "optuna.journal")
    study, _ = open_study(spec.search, "s", journal)
    done = study.ask({"eps": optuna.distributions.FloatDistribution(1, 20)})
    study.tell(done, [80.0])
    killed = study.ask({"eps": optuna.distributions.FloatDistribution(1, 20)})
    with open(journal, "ab") as f:
        f.write(b'{"op_code": 6, "worker_id": "x", "trial_id": 1, "sta')  # half a record
    study, _ = open_study(spec.search, "s", journal)
    assert "dropped a partial last record" in caplog.text  # a warning of fairdp's logger
    assert retry_orphans(study) == 1
    assert study.metric_names == ["valid_accuracy"]  # optuna-dashboard's axis names
    assert complete_trials(study) == 1
    states = [t.state for t in study.trials]
    assert states[:2] == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL]
    again = study.ask({"eps": optuna.distributions.FloatDistribution(1, 20)})
    assert again.params == killed.params
    study.tell(again, [81.0])
    reread = optuna.load_study(study_name="s", storage=JournalStorage(JournalFileBackend(journal)))
    assert complete_trials(reread) == 2  # the journal stays readable after appending


def test_report_arguments_are_checked_before_anything_is_written(tmp_path, capsys):
    from fairdp.cli import main

    rows = str(REPO / "results" / "demo-reference")
    assert main(["report", rows, "-o", str(tmp_path / "rep"), "--rts", "a,b"]) == 2
    assert "--rts" in capsys.readouterr().err
    assert main(["report", rows, "-o", str(tmp_path / "rep"), "--rts", "1,-2"]) == 2
    assert "--rts" in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")
    assert main(["report", rows, "-o", str(tmp_path / "afile" / "rep")]) == 2
    assert "afile" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_a_negative_checkpoint_interval_is_refused_before_anything_runs(tmp_path, capsys, value):
    from fairdp.cli import main

    assert main(["run", str(_study(tmp_path)), "--results", str(tmp_path / "r"), "--executor", "local",
                 "--checkpoint-every", value]) == 2
    assert "--checkpoint-every" in capsys.readouterr().err and not (tmp_path / "r").exists()


def test_an_unreadable_study_file_is_one_line(tmp_path, monkeypatch):
    from pathlib import Path

    from fairdp.errors import InputError

    study = _study(tmp_path)

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_text", denied)
    with pytest.raises(InputError, match="study.yaml: cannot be read \\(Permission denied\\)"):
        load_spec(study)


def test_a_huge_grid_is_refused_with_its_count_before_it_is_expanded(tmp_path):
    lams = [x / 10 for x in range(1, 101)]
    # eps within the exact Laplace tables' range (at most 24): 1,100 and 100 distinct values
    study = _study(tmp_path, methods={"federate": {"grid": {"eps": [1 + i / 50 for i in range(1100)], "lam": lams}},
                                      "noise": {"grid": {"eps": [1 + i / 10 for i in range(100)]}}})
    t = time.monotonic()
    proc = run_main("run", str(study), "--results", str(tmp_path / "r"))
    assert time.monotonic() - t < 60
    assert_input_error(proc, "methods.federate.grid", "110,000", "100,000")  # 1,100 x 100


def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path):
    results = tmp_path / "r"
    proc = run_main("run", str(_study(tmp_path)), "--results", str(results), "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "3 configs to train in" in proc.stderr and "Nothing was run or written" in proc.stderr
    assert "unconstrained: 1 configs" in proc.stderr and "federate: 2 configs" in proc.stderr
    # the time from the reference figures, saying where they were measured (none on a GPU)
    assert re.search(r"estimate: (about \d+m\d\ds of training in (bf16|float32) and probes on \d slot\(s\) at the "
                     r"reference speed \(cpu|none for a GPU run)", proc.stderr), proc.stderr[-1000:]
    assert not results.exists()


def test_the_estimate_costs_the_packs_in_the_studys_precision_and_says_which():
    from fairdp.study import parse_spec
    from fairdp.study.executors import Pack
    from fairdp.study.run._estimate import reference
    from fairdp.study.run._runner import estimate_line
    from fairdp.study.spec._precision import PrecisionChoice

    # a method whose reference figures hold a bf16 figure (those re-measured on a CPU without
    # native bf16 hold float32's only)
    spec = parse_spec({**STUDY, "methods": {"adversarial": {"grid": {"lam": [0.1]}}},
                       "train": {"epochs": 10, "device": "cpu"}})
    packs = [Pack("adversarial", 0, ({"lam": 0.1},) * 8, tuple(map(str, range(8))))]

    def seconds(line):
        m = re.search(r"about (\d+)m(\d\d)s", line)
        return 60 * int(m[1]) + int(m[2])

    fp32 = estimate_line(spec, packs, 1, 27133, choice=PrecisionChoice(None, "a worker's CPU has no native bf16"))
    bf16 = estimate_line(spec, packs, 1, 27133, choice=PrecisionChoice("bf16", "native bf16"))
    assert "training in float32" in fp32 and "training in bf16" in bf16 and "figure" not in bf16
    fig = reference()["methods"]["adversarial"]
    # one pack of 8 configs x 10 epochs on one slot, no probes: the ratio of the two precisions'
    # figures (to the estimate's whole seconds)
    assert not (spec.leakage or spec.mdl)
    assert seconds(bf16) / seconds(fp32) == pytest.approx(
        (fig["bf16"]["per_config_epoch"] * 80 + fig["bf16"]["per_pack"]) /
        (fig["per_config_epoch"] * 80 + fig["per_pack"]), abs=0.02)
    waiting = estimate_line(spec, packs, 1, 27133, remote=True,
                            choice=PrecisionChoice(None, "asked of the nodes when the run connects", decided=False))
    assert "training in float32 (in bf16, faster, if every node has native bf16 matmuls)" in waiting
    assert seconds(waiting) == seconds(fp32)


def test_a_local_dry_run_on_a_gpu_plans_one_pack_per_methods_seed_and_says_why(tmp_path, monkeypatch):
    import torch

    from fairdp.study import parse_spec, run_study

    grid = {"eps": [8, 9, 10, 11, 12, 13], "lam": [0.1, 0.3, 0.5, 0.7, 0.9, 1.1, 1.3, 1.5]}  # 48 configs
    spec = parse_spec({**STUDY, "seeds": [0, 1], "methods": {"federate": {"grid": grid}}})
    plans = {}
    for gpu in (False, True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda gpu=gpu: gpu)
        summary = run_study(spec, str(tmp_path / "r"), executor="local", dry_run=True)
        plans[gpu] = "\n".join(summary.plan_lines)
    assert "96 configs to train in 4 packs" in plans[False] and "one big pack per GPU" not in plans[False]
    assert "96 configs to train in 2 packs" in plans[True] and "one big pack per GPU fills it" in plans[True]
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("resources,named", [({"gpus_per_trial": 1}, "1 GPUs"), ({"cpus_per_trial": 64}, "64 CPUs")])
def test_a_trial_no_node_can_hold_is_refused_instead_of_waiting_forever(tmp_path, resources, named):
    if "gpus_per_trial" in resources:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    t = time.monotonic()
    proc = run_main("run", str(_study(tmp_path, resources=resources)), "--results", str(tmp_path / "r"))
    assert time.monotonic() - t < 60
    assert_input_error(proc, "resources", named, "this machine")
    assert not (tmp_path / "r").exists()


def test_the_cluster_check_reads_every_nodes_resources():
    from fairdp.errors import InputError
    from fairdp.study import parse_spec

    spec = parse_spec({**STUDY, "resources": {"cpus_per_trial": 4, "gpus_per_trial": 1}})
    check_trial_fits(spec, [{"CPU": 2}, {"CPU": 8, "GPU": 1}], "c")  # the second node fits
    with pytest.raises(InputError, match="2 CPUs, 1 GPUs; 8 CPUs, 0 GPUs"):
        check_trial_fits(spec, [{"CPU": 2, "GPU": 1}, {"CPU": 8}], "c")  # CPUs and GPU on different nodes


def test_an_address_where_nothing_answers_is_one_line_within_seconds(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t = time.monotonic()
    proc = run_cli("run", str(_study(tmp_path)), "--results", str(tmp_path / "r"), "--address", f"127.0.0.1:{port}")
    assert time.monotonic() - t < 30
    assert_input_error(proc, f"--address 127.0.0.1:{port}", "no Ray cluster answers")


def test_a_token_refusal_names_the_variables_to_set():
    err = connect_error("head:6379", RuntimeError("Traceback...\nUnauthenticated: invalid authentication token"))
    assert "RAY_AUTH_TOKEN" in str(err) and "\n" not in str(err) and "Traceback" not in str(err)


def test_tunes_advice_that_fairdp_replaces_is_dropped_and_the_rest_kept():
    import logging

    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Keep()
    for name in ("ray.tune.tune", "ray.tune.analysis.experiment_analysis"):
        logging.getLogger(name).addHandler(handler)
    try:
        with quiet_loggers(TUNE_NOISE):
            logging.getLogger("ray.tune.tune").warning('Experiment has been interrupted.\\nResume experiment with: '
                                                        'Tuner.restore(path="/tmp/fairdp-tune-1")')
            logging.getLogger("ray.tune.analysis.experiment_analysis").warning("Failed to fetch metrics for 1 trial(s)")
            logging.getLogger("ray.tune.tune").warning("a trial failed: out of memory")
        logging.getLogger("ray.tune.analysis.experiment_analysis").warning("Failed to fetch metrics, outside a run")
    finally:
        for name in ("ray.tune.tune", "ray.tune.analysis.experiment_analysis"):
            logging.getLogger(name).removeHandler(handler)
    assert seen == ["a trial failed: out of memory", "Failed to fetch metrics, outside a run"]


def test_the_estimate_names_the_machine_not_the_build_the_figures_were_measured_at():
    from fairdp.study.run._estimate import describe_reference

    figures = {"measured": {"device": "cpu", "machine": "AMD EPYC, 2 cores", "threads": 1, "torch": "2.13.0",
                            "commit": "47ce347-dirty"},
               "updated": {"noise": {"commit": "85dfc47-dirty", "machine": "AMD EPYC, 2 cores"}}}
    line = describe_reference(figures)
    assert "47ce347" not in line and "85dfc47" not in line and "dirty" not in line
    assert line == "cpu (AMD EPYC, 2 cores), 1 thread per trial, torch 2.13.0; noise re-measured on AMD EPYC, 2 cores"


def test_a_method_timed_on_the_users_module_replaces_its_reference_figure_scaled_by_batch():
    """unit_costs with ``timed``: the seconds measured here per config-epoch per 1,000 rows,
    scaled to another batch size as the method's reference figure scales, plus the probes."""
    from fairdp.study.run._estimate import config_epoch_figure, unit_costs

    figures = {"methods": {"dpsgd": {"per_config_epoch": 1.0, "by_batch": {"100": 2.0, "400": 0.5}}},
               "probes": {"early_stopping": {"leakage": {"per_config": 3.0}}}}
    plain = unit_costs(["dpsgd"], 10, 2000, False, False, figures=figures, batch_size=100)
    assert plain["dpsgd"] == pytest.approx(2.0 * 2)
    timed = unit_costs(["dpsgd"], 10, 2000, False, False, figures=figures, batch_size=100, timed={"dpsgd": (7.0, 100)})
    assert timed["dpsgd"] == pytest.approx(7.0 * 2)
    other = unit_costs(["dpsgd"], 10, 2000, True, False, figures=figures, batch_size=400, timed={"dpsgd": (7.0, 100)})
    scale = config_epoch_figure(figures["methods"]["dpsgd"], 400) / config_epoch_figure(figures["methods"]["dpsgd"], 100)
    assert other["dpsgd"] == pytest.approx((7.0 * scale * 10 + 3.0) * 2 / 10)
    plugin = unit_costs(["mine"], 10, 1000, False, False, figures=figures, batch_size=100, timed={"mine": (5.0, 100)})
    assert plugin == {"mine": pytest.approx(5.0)}


def test_the_dry_run_times_a_module_of_the_users_and_says_so(tmp_path):
    import shutil

    shutil.copy(REPO / "examples" / "models.py", tmp_path / "models.py")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({
        "name": "timed", "dataset": {"name": "synthetic", "rows": 600, "features": 6}, "seeds": [0],
        "train": {"epochs": 2, "batch_size": 100}, "evaluate": {"leakage": False, "mdl": False},
        "architecture": {"models": {"encoder": {"factory": "models.py:residual_mlp", "width": 8, "blocks": 1}}},
        "methods": {"unconstrained": {}, "reductions": {"grid": {"fairness_notion": ["dp"], "bound": [0.05]}}}}))
    dry = run_main("run", "s.yaml", "--results", "r", "--dry-run", "--executor", "local", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr[-2000:]
    line = next(ln for ln in dry.stderr.splitlines() if "estimate:" in ln)
    assert "unconstrained at what its module of yours cost here" in line and "reductions at" not in line
    assert not (tmp_path / "r").exists()
