"""Experiment tracking: every stored config logged once to a real MLflow store (sqlite), with its
params, metrics and per-epoch curves; a tracker that fails loses no row; a wrong address is
refused before anything runs."""

import importlib.util
import logging
import threading
import time

import pandas as pd
import pytest
import yaml

from fairdp.errors import InputError
from fairdp.study import ResultStore, parse_spec, read_history, run_study
from fairdp.tracking._base import Tracker, register_tracker
from fairdp.tracking._shared import parse_tracking
from tests.conftest import assert_input_error, run_cli, run_main

# skipped without MLflow, which is imported where used: importing it costs each xdist worker's
# collection seconds
pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlflow") is None,
                                reason="the MLflow client: pip install 'fairdp[tracking]'")

EPOCHS = 2
KEY = ["method", "seed", "config_id"]


def _raw(tracking=None, seeds=(0, 1)):
    raw = {"name": "tracked", "dataset": {"name": "synthetic", "rows": 600, "features": 6}, "seeds": list(seeds),
           "train": {"epochs": EPOCHS, "batch_size": 200}, "evaluate": {"leakage": True, "mdl": False, "min_group_count": 1},
           "methods": {"unconstrained": {}, "federate": {"grid": {"eps": [1, 10], "lam": [0.5]}}}, "pack_size": 2}
    if tracking is not None:
        raw["tracking"] = tracking
    return raw


def _runs(uri: str, experiment: str = "tracked") -> pd.DataFrame:
    import mlflow

    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    return [r for r in client.search_runs([exp.experiment_id], max_results=1000)], client


def test_every_stored_config_is_logged_once_with_its_numbers_and_curves(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    results = tmp_path / "r"
    # a first run without tracking: the tracked rerun logs what is stored (catch-up)
    run_study(parse_spec(_raw(seeds=(0,))), str(results), executor="local", checkpoint_every_s=0)
    run_study(parse_spec(_raw({"mlflow": {"uri": uri}})), str(results), executor="local", checkpoint_every_s=0)
    rows, _ = ResultStore(results).read()
    assert len(rows) == 6
    runs, client = _runs(uri)
    assert len(runs) == len(rows)
    by_key = {(r.data.tags["fairdp.method"], int(r.data.tags["fairdp.seed"]), r.data.tags["fairdp.config_id"]): r
              for r in runs}
    assert set(by_key) == set(zip(rows["method"], rows["seed"], rows["config_id"]))
    curves = read_history(results)
    for _, row in rows.iterrows():
        run = by_key[(row["method"], row["seed"], row["config_id"])]
        assert run.info.status == "FINISHED"
        assert run.data.tags["fairdp.results"] == str(results)
        for metric in ("test_accuracy", "valid_tpr_gap", "leakage", "best_epoch"):
            assert run.data.metrics[metric] == pytest.approx(row[metric], abs=1e-12)
        if row["method"] == "federate":
            assert float(run.data.params["eps"]) == row["eps"] and float(run.data.params["lam"]) == row["lam"]
            assert run.data.metrics["eps_formal"] == row["eps_formal"]
        else:
            assert run.data.tags["fairdp.eps_formal"] == "inf"
        assert run.data.params["epochs"] == str(EPOCHS) and run.data.params["optimizer"] == "adam"
        history = client.get_metric_history(run.info.run_id, "history/valid_accuracy")
        mine = curves[(curves["method"] == row["method"]) & (curves["seed"] == row["seed"])
                      & (curves["config_id"] == row["config_id"])].sort_values("epoch")
        assert [m.step for m in sorted(history, key=lambda m: m.step)] == list(range(1, EPOCHS + 1))
        assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx(mine["valid_accuracy"].tolist())
        assert len(client.get_metric_history(run.info.run_id, "history/valid_loss")) == EPOCHS
    # a rerun with everything stored logs nothing twice
    run_study(parse_spec(_raw({"mlflow": {"uri": uri}})), str(results), executor="local", checkpoint_every_s=0)
    assert len(_runs(uri)[0]) == len(rows)


def test_a_wrong_tracking_address_is_refused_before_anything_runs(tmp_path):
    study = tmp_path / "s.yaml"
    (tmp_path / "a-file").write_text("")  # a database under a file cannot be made
    study.write_text(yaml.safe_dump(_raw({"mlflow": {"uri": f"sqlite:///{tmp_path}/a-file/mlflow.db"}})))
    proc = run_main("run", str(study), "--results", str(tmp_path / "r"), "--executor", "local")
    assert_input_error(proc, "tracking.mlflow.uri")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("value, key", [
    ({"nope": {}}, "tracking"),
    ({"mlflow": {"url": "x"}}, "tracking.mlflow.url"),
    ({"mlflow": {"uri": 3}}, "tracking.mlflow.uri"),
    ({"mlflow": {}, "wandb": {}}, "tracking"),
    ("mlflow", "tracking"),
])
def test_bad_tracking_blocks_name_their_key(value, key):
    with pytest.raises(InputError, match=rf"^{key}"):
        parse_tracking(value)


@register_tracker
class FlakyTracker(Tracker):
    """An in-memory tracker that fails on its ``fail_after``-th config, the way a tracking
    server that goes away mid-run would."""

    name = "flaky"
    options = ("fail_after",)
    logged_keys: set = set()
    lock = threading.Lock()

    def open(self):
        self.left = int(self.options_given.get("fail_after", "1000000"))

    def logged(self):
        return set(self.logged_keys)

    def log(self, record):
        with self.lock:
            if self.left <= 0:
                raise ConnectionError("tracking server went away")
            self.left -= 1
            assert record.key not in self.logged_keys, "logged twice"
            self.logged_keys.add(record.key)


def test_a_failing_tracker_loses_no_row_and_the_next_run_logs_the_rest(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("FAIRDP_TRACKING_POLL_S", "0.05")
    caplog.set_level(logging.INFO, logger="fairdp")  # the count of configs logged is news, not a warning
    FlakyTracker.logged_keys = set()
    results = tmp_path / "r"
    summary = run_study(parse_spec(_raw({"flaky": {"fail_after": "2"}})), str(results), executor="local",
                        checkpoint_every_s=0)
    rows, _ = ResultStore(results).read()
    assert summary.failed_packs == 0 and len(rows) == 6 and not rows.duplicated(KEY).any()
    assert (rows["status"] == "ok").all()
    assert caplog.text.count("fairdp: tracking: flaky failed (ConnectionError: tracking server went away)") == 1
    caplog.clear()
    assert len(FlakyTracker.logged_keys) == 2
    run_study(parse_spec(_raw({"flaky": {}})), str(results), executor="local", checkpoint_every_s=0)
    assert FlakyTracker.logged_keys == set(zip(rows["method"], rows["seed"], rows["config_id"]))
    assert "fairdp: tracking: 4 configs logged to flaky" in caplog.text


@pytest.mark.slow
def test_a_study_on_embedded_ray_is_tracked_from_its_driver(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump(_raw({"mlflow": {"uri": uri, "experiment": "on-ray"}}, seeds=(0,))))
    proc = run_cli("run", str(study), "--results", str(tmp_path / "r"), env={"FAIRDP_TRACKING_POLL_S": "0.5"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows, _ = ResultStore(tmp_path / "r").read()
    runs, _ = _runs(uri, "on-ray")
    assert len(rows) == 3 and len(runs) == 3
    assert "fairdp: tracking: 3 configs logged to MLflow at " in proc.stderr


def _flushed_offline_runs(where, count: int, timeout_s: float = 60.0) -> list[dict]:
    """W&B's offline runs once ``count`` of them end with their exit record. Twice under a full
    suite's load a read right after ``run_study`` found a run without its config records
    (KeyError 'fairdp_method'); W&B's service process writing a run's file behind
    ``run.finish()`` is the likely cause, so the read waits for the records, up to a minute."""
    from tests.wandb_log import offline_runs

    deadline = time.monotonic() + timeout_s
    while True:
        runs = offline_runs(where)
        if (len(runs) >= count and all(r["exit_code"] is not None and "fairdp_method" in r["config"] for r in runs)) \
                or time.monotonic() > deadline:
            return runs
        time.sleep(0.5)


def test_wandb_offline_runs_hold_each_configs_numbers_and_curves(tmp_path):
    pytest.importorskip("wandb", reason="W&B's client: pip install 'fairdp[wandb]'")
    from tests.wandb_log import offline_runs

    results, where = tmp_path / "r", tmp_path / "wb"
    spec = _raw({"wandb": {"dir": str(where), "project": "p"}}, seeds=(0,))
    run_study(parse_spec(spec), str(results), executor="local", checkpoint_every_s=0)
    rows, _ = ResultStore(results).read()
    runs = _flushed_offline_runs(where, len(rows))  # read from W&B's own files, with a reader of their format
    assert len(runs) == len(rows) == 3
    by_key = {(r["config"]["fairdp_method"], r["config"]["fairdp_seed"], r["config"]["fairdp_config_id"]): r
              for r in runs}
    curves = read_history(results)
    for _, row in rows.iterrows():
        run = by_key[(row["method"], row["seed"], row["config_id"])]
        assert run["name"] == f"{row['method']}/seed{row['seed']}/{row['config_id']}" and run["exit_code"] == 0
        assert run["summary"]["test_accuracy"] == pytest.approx(row["test_accuracy"], abs=1e-12)
        assert run["summary"]["leakage"] == pytest.approx(row["leakage"], abs=1e-12)
        if row["method"] == "federate":
            assert run["config"]["eps"] == row["eps"] and run["summary"]["eps_formal"] == row["eps_formal"]
        mine = curves[(curves["method"] == row["method"]) & (curves["config_id"] == row["config_id"])]
        assert sorted(run["history"]) == list(range(1, EPOCHS + 1))
        assert [run["history"][e]["history/valid_accuracy"] for e in range(1, EPOCHS + 1)] == \
            pytest.approx(mine.sort_values("epoch")["valid_accuracy"].tolist())
    run_study(parse_spec(spec), str(results), executor="local", checkpoint_every_s=0)
    assert len(offline_runs(where)) == 3  # the ledger: nothing logged twice


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # a web server's start-up: about 30 s, in make test-slow
def test_mlflow_ui_from_the_tracking_extra_serves_a_logged_run(tmp_path):
    """`pip install "fairdp[tracking]"` gives a working `mlflow ui`: its server starts on
    127.0.0.1, serves the web app (page and its script bundle) and the run fairdp logged."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    raw = _raw({"mlflow": {"uri": uri}}, seeds=(0,))
    raw["methods"] = {"unconstrained": {}}
    run_study(parse_spec(raw), str(tmp_path / "r"), executor="local", checkpoint_every_s=0)
    (run,), _ = _runs(uri)
    port = _free_port()
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    server = subprocess.Popen([str(mlflow_cli), "ui", "--backend-store-uri", uri, "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"

    def get(path: str) -> bytes:
        with urllib.request.urlopen(base + path, timeout=10) as reply:
            return reply.read()

    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                get("/health")
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    out = server.stdout.read().decode(errors="replace") if server.poll() is not None else ""
                    pytest.fail(f"mlflow ui did not start (exit {server.poll()}): {out[-2000:]}")
                time.sleep(0.5)
        page = get(f"/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}").decode()
        scripts = [s for s in __import__("re").findall(r'src="([^"]+\.js)"', page)]
        assert scripts, page[:500]  # the web app's bundle is installed, not only the API
        assert len(get("/" + scripts[0].lstrip("./"))) > 10_000
        served = json.loads(get(f"/ajax-api/2.0/mlflow/runs/get?run_id={run.info.run_id}"))["run"]
        tags = {t["key"]: t["value"] for t in served["data"]["tags"]}
        assert tags["fairdp.method"] == "unconstrained" and tags["fairdp.seed"] == "0"
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server's own process group: gunicorn/uvicorn workers too
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
