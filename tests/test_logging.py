"""One output channel: the library says what it does through the ``fairdp`` logger (a notebook
silences or redirects it like any Python logger), only the CLI prints. A library call writes
nothing to stdout or stderr of its own (no progress bar unless given a ``progress_stream``);
``fairdp run`` and ``search`` show the same lines on stderr as ever; a Ray worker's records reach
the driver's loggers."""

import ast
import io
import json
import logging
import os
import socket
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fairdp.cli import main
from fairdp.study import parse_spec, run_study
from fairdp.study.executors import Progress
from fairdp.study.run._plan import Backlog
from fairdp.study.store._lock import LOCK_NAME, results_lock
from fairdp.study.store._store import CHECKPOINTS
from tests.conftest import REPO, run_cli

STUDY = {
    "name": "logging",
    "dataset": {"name": "synthetic", "rows": 300, "features": 4},
    "seeds": [0],
    "train": {"epochs": 1, "batch_size": 100},
    "evaluate": {"leakage": False, "mdl": False},
    "methods": {"unconstrained": {}},
}
GONE_PID = 2**22 + 12345  # no such process


def _fairdp_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "fairdp" or r.name.startswith("fairdp.")]


def _stale_lock(results: Path) -> None:
    """A lock of this host's fairdp run that was killed (its pid runs no more)."""
    results.mkdir(parents=True, exist_ok=True)
    (results / LOCK_NAME).write_text(json.dumps({"pid": GONE_PID, "host": socket.gethostname(), "command": "run",
                                                 "since": "2020-01-01 00:00:00"}))


def test_a_library_run_says_what_it_does_as_info_records_and_writes_nothing_itself(tmp_path, caplog, capfd):
    caplog.set_level(logging.INFO, logger="fairdp")
    summary = run_study(parse_spec(STUDY), str(tmp_path / "r"), executor="local")
    assert summary.configs == 1 and summary.failed_packs == 0
    records = _fairdp_records(caplog)
    said = [r.getMessage() for r in records]
    assert "fairdp run logging: 1 configs to train in 1 packs, 1 at a time; 1 config-epochs" in said
    assert any(m.startswith("fairdp logging: 1 epochs, batch 100") for m in said)  # the settings line
    assert records and all(r.levelno == logging.INFO for r in records)  # routine news, nothing went wrong
    # no progress bar without a progress_stream, and no line printed: the caller's logging shows what it wants
    assert capfd.readouterr() == ("", "")


def test_at_level_error_a_library_call_is_silent_and_a_warning_is_a_record(tmp_path, caplog, capfd):
    caplog.set_level(logging.ERROR, logger="fairdp")  # what a notebook does to silence fairdp
    _stale_lock(tmp_path / "a")
    with results_lock(str(tmp_path / "a"), "run"):
        pass
    run_study(parse_spec(STUDY), str(tmp_path / "r"), executor="local")
    assert _fairdp_records(caplog) == [] and capfd.readouterr() == ("", "")
    caplog.set_level(logging.WARNING, logger="fairdp")
    _stale_lock(tmp_path / "b")
    with results_lock(str(tmp_path / "b"), "run"):
        pass
    [record] = _fairdp_records(caplog)
    assert record.name == "fairdp.study.store._lock" and record.levelno == logging.WARNING
    assert record.getMessage() == (f"fairdp: {tmp_path / 'b'}: taking over the lock of fairdp run (pid {GONE_PID}), "
                                   f"which no longer runs")
    assert capfd.readouterr() == ("", "")


def test_the_progress_bar_is_drawn_on_the_stream_given_and_its_news_are_logged(caplog):
    caplog.set_level(logging.INFO, logger="fairdp")
    out = io.StringIO()
    with Progress("run t", 2, 3, epochs=2, slots=1, stream=out) as progress:
        progress.start_pack("0", "a", 2)
        progress.resize(3)
        progress.finish_pack("0")
    assert "config-epochs" in out.getvalue() and "from now on" not in out.getvalue()
    assert [r.getMessage() for r in _fairdp_records(caplog)] == [
        "fairdp run t: 3 pack(s) at a time from now on (was 1): the cluster's resources changed"]
    quiet = Progress("run t", 1, 1)  # no stream: counted, never drawn
    with quiet:
        quiet.start_pack("0", "a", 1)
        quiet.finish_pack("0")
    assert quiet.packs == 1 and quiet.stream is None and quiet._bar is None


def test_a_dry_run_returns_its_plan_and_the_cli_prints_it_on_stderr(tmp_path, caplog, capsys):
    caplog.set_level(logging.INFO, logger="fairdp")
    summary = run_study(parse_spec(STUDY), str(tmp_path / "r"), executor="local", dry_run=True)
    plan = [line for line in summary.plan_lines if "--dry-run:" in line]
    assert len(plan) == 1 and plan[0].endswith("Nothing was run or written.")
    assert not any("Nothing was run" in m for m in caplog.messages)  # the report is the command's output, not a log
    assert capsys.readouterr() == ("", "") and not (tmp_path / "r").exists()
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump(STUDY))
    assert main(["run", str(study), "--results", str(tmp_path / "r"), "--executor", "local", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == list(summary.plan_lines)
    fairdp = logging.getLogger("fairdp")  # the command's logging ends with it
    # only the library's NullHandler: records go to the application's handlers, none to stderr by default
    assert [type(h) for h in fairdp.handlers] == [logging.NullHandler]
    assert fairdp.propagate and fairdp.level == logging.INFO  # caplog's level


def test_the_cli_shows_the_librarys_messages_and_its_progress_on_stderr(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump(STUDY))
    _stale_lock(tmp_path / "r")
    proc = run_cli("run", str(study), "--results", str(tmp_path / "r"), "--executor", "local")
    assert proc.returncode == 0, proc.stderr[-2000:]
    err = proc.stderr.splitlines()
    assert f"fairdp: {tmp_path / 'r'}: taking over the lock of fairdp run (pid {GONE_PID}), which no longer runs" in err
    assert any(line.startswith("fairdp logging: 1 epochs, batch 100") for line in err)
    assert "fairdp run logging: 1 configs to train in 1 packs, 1 at a time; 1 config-epochs" in err
    assert any(line.startswith("fairdp run logging: 100% | 1/1 config-epochs") for line in err)  # the bar's plain line
    assert "fairdp run logging:" not in proc.stdout and "1 configs in 1 packs run" in proc.stdout


def test_a_workers_records_go_with_its_results_to_the_drivers_loggers(monkeypatch, caplog):
    """A Ray worker configures no logging, and its stderr goes to Ray's log files: the trial logs
    at the driver's level, and its results carry its records to the driver, which logs them."""
    from ray import tune

    from fairdp.engine.contract import EpochReport
    from fairdp.study.executors import Pack, _worker
    from fairdp.study.ray import _ray_trainables, _tune

    sent = []
    monkeypatch.setattr(tune, "report", sent.append)

    def run_pack(ctx, pack, callback):
        logging.getLogger("fairdp.engine._loop").info("fairdp: x.ckpt: resuming after epoch 1")
        callback(EpochReport(2, 3, 1, None))
        logging.getLogger("fairdp.study.store._store").warning("fairdp: pack: the object store did not answer")
        return [{"pack_duration_s": 1.0, "valid_accuracy": 0.5}]

    monkeypatch.setattr(_worker, "run_pack", run_pack)  # the trial imports it when it runs
    pack = Pack("unconstrained", 0, ({},), ("c0",)).to_dict()
    fairdp = logging.getLogger("fairdp")
    caplog.set_level(logging.WARNING, logger="fairdp")  # this process's level; the driver's is info
    _ray_trainables.pack_trainable({"pack": pack}, None, log_level=logging.INFO)
    assert fairdp.level == logging.WARNING and not any(isinstance(h, _ray_trainables.TrialRecords) for h in fairdp.handlers)
    units, final = sent
    assert units["units"] == 1 and final["configs"] == 1
    caplog.clear()
    caplog.set_level(logging.INFO, logger="fairdp")
    for result in (units, final):
        result[_ray_trainables.LOG_RECORDS]["pid"] = -1  # as if from another process: a worker's
        _tune.relog(result)
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("fairdp.engine._loop", logging.INFO, "fairdp: x.ckpt: resuming after epoch 1"),
        ("fairdp.study.store._store", logging.WARNING, "fairdp: pack: the object store did not answer")]
    caplog.clear()
    _tune.relog({**final, _ray_trainables.LOG_RECORDS: {**final[_ray_trainables.LOG_RECORDS], "pid": os.getpid()}})
    assert caplog.records == []  # a trial in this very process logged here already


@pytest.mark.slow
def test_a_message_of_a_pack_on_embedded_ray_reaches_the_users_stderr(tmp_path):
    """Ray keeps a worker's stderr in its log files (``log_to_driver=False``): the records go
    with the trial's results, and the driver's CLI shows them."""
    study = tmp_path / "s.yaml"
    raw = {**STUDY, "train": {"epochs": 2, "batch_size": 100}}
    study.write_text(yaml.safe_dump(raw))
    checkpoints = tmp_path / "r" / CHECKPOINTS
    checkpoints.mkdir(parents=True)
    for slots in (1, 2, 4, 8, 16):  # the one pack, however many slots this machine has
        for pack in Backlog.from_stored(parse_spec(raw), pd.DataFrame()).packs(slots, False):
            (checkpoints / f"{pack.id}.ckpt").write_bytes(b"not a checkpoint")
    proc = run_cli("run", str(study), "--results", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = [line for line in proc.stderr.splitlines() if ".ckpt: " in line]  # logged in the worker, once
    assert len(said) == 1 and "training from the first epoch" in said[0], proc.stderr[-2000:]


def test_a_worker_without_logging_writes_its_records_to_its_stderr(monkeypatch, capsys):
    from fairdp.study.ray import _ray_trainables

    fairdp = logging.getLogger("fairdp")
    monkeypatch.setattr(fairdp, "propagate", False)  # no handler anywhere, as in a Ray worker process
    level = fairdp.level
    with _ray_trainables.worker_logging(logging.INFO):
        logging.getLogger("fairdp.engine._loop").info("fairdp: x.ckpt: resuming after epoch 1")
        logging.getLogger("fairdp.engine._loop").debug("below the driver's level")
    assert capsys.readouterr().err == "fairdp: x.ckpt: resuming after epoch 1\n"
    assert [type(h) for h in fairdp.handlers] == [logging.NullHandler] and fairdp.level == level  # as it was


def test_no_module_of_the_library_prints_only_the_cli_does():
    """Every message of the library is a log record; only ``fairdp/cli.py`` (the command's output)
    prints or writes to sys.stdout / sys.stderr itself (the progress bar writes to the stream its
    caller gives)."""
    found = []
    for path in sorted((REPO / "fairdp").rglob("*.py")):
        if path == REPO / "fairdp" / "cli.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Name) and f.id == "print":
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: print()")
            elif (isinstance(f, ast.Attribute) and f.attr in ("write", "writelines")
                  and isinstance(f.value, ast.Attribute) and f.value.attr in ("stdout", "stderr")
                  and isinstance(f.value.value, ast.Name) and f.value.value.id == "sys"):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: sys.{f.value.attr}.{f.attr}()")
    assert found == [], "log through logging.getLogger(__name__) instead:\n" + "\n".join(found)


def test_the_library_logs_to_a_null_handler_and_writes_nothing_unconfigured():
    """A library's logger has a NullHandler: without logging configured, a warning of fairdp's
    reaches no stream through Python's last-resort handler."""
    import subprocess
    import sys

    code = ("import logging, fairdp; logging.getLogger('fairdp.study').warning('unseen'); "
            "print([type(h).__name__ for h in logging.getLogger('fairdp').handlers])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "['NullHandler']" and proc.stderr == "", proc
