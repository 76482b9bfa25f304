"""Studies for real on embedded Ray: every row once, resume after SIGKILL, loopback only, search fronts."""

import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import pytest
import yaml

from fairdp.study import ResultStore, load_spec, read_history, run_study, study_columns
from fairdp.study.store._lock import LOCK_NAME
from tests.conftest import (
    REPO,
    assert_input_error,
    default_cpu_precision,
    env_without_ray,
    run_cli,
    run_main,
)

# the tests of the tiny study's Ray run, on one xdist worker that trains it once; the module's
# other tests (its slow set's Ray runs among them) spread over the workers
ON_TINY_RUN = pytest.mark.xdist_group("study_run")

DESIGN_COLUMNS = (
    "study", "dataset", "method", "seed", "config_id", "eps", "lam", "lam_ort", "iterations", "clip_primal",
    "clip_dual", "fairness_notion", "valid_accuracy", "test_accuracy", "valid_tpr_gap", "test_tpr_gap",
    "valid_grms", "test_grms", "valid_dp_gap", "test_dp_gap", "valid_eo_gap", "test_eo_gap", "valid_ap_gap",
    "test_ap_gap", "leakage", "mdl", "eps_formal", "delta", "epochs", "duration_s", "status", "error",
    "fairdp_version", "node",
)

KEY = ["method", "seed", "config_id"]


def _write_study(path: Path, **overrides) -> Path:
    spec = {
        "name": "tiny",
        "dataset": {"name": "synthetic", "rows": 1000, "features": 8},
        "seeds": [0, 1],
        "train": {"epochs": 2, "batch_size": 250},
        "evaluate": {"leakage": True, "mdl": False, "min_group_count": 1},
        "methods": {"unconstrained": {}, "federate": {"grid": {"eps": [1, 10], "lam": [0.5, 1.0, 1.5]}}},
        "pack_size": 3,
    }
    spec.update(overrides)
    path.write_text(yaml.safe_dump(spec))
    return path


class TinyRun(NamedTuple):
    study: Path
    proc: subprocess.CompletedProcess  # the first run's
    pid: int  # the first run's
    results: Path
    second: subprocess.CompletedProcess  # started while the first held the results' lock
    home: Path  # the first run's HOME


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The tiny study run once on embedded Ray, as a user would (``python -m fairdp``), with a
    second run into the same results started in this process once the first holds their lock."""
    tmp_path = tmp_path_factory.mktemp("tiny")
    study = _write_study(tmp_path / "tiny.yaml")
    home = tmp_path / "home"  # a fresh HOME: Ray generates its token file there
    # a relative --results is the user's working directory's, not a trial's
    # every epoch reports its config-epochs through Tune, as long trials do every 2 s, and
    # saves a checkpoint, as long packs do every 10 minutes
    args = [sys.executable, "-m", "fairdp", "run", str(study), "--results", "r", "--checkpoint-every", "0.001"]
    first = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "FAIRDP_UNITS_EVERY_S": "0", "HOME": str(home)})
    results = tmp_path / "r"
    deadline = time.monotonic() + 120
    while not (results / LOCK_NAME).exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    second = run_main("run", str(study), "--results", str(results))  # fairdp's main, in this process
    out, err = first.communicate(timeout=600)
    return TinyRun(study, subprocess.CompletedProcess(args, first.returncode, out, err), first.pid, results,
                   second, home)


@ON_TINY_RUN
def test_a_tiny_study_stores_every_row_once_and_a_rerun_adds_nothing(tiny_run, tmp_path):
    study, proc, results = tiny_run.study, tiny_run.proc, tiny_run.results
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "packs 6/6 done, 0 failed" in proc.stderr and "100% | " in proc.stderr  # progress lines
    # the effective settings, once, per method: each at its paper's learning rate
    assert re.search(r"^  federate +adam lr 0\.001; encoder 300-300, classifier linear, 1 adversary 300-300",
                     proc.stderr, re.M), proc.stderr[:2000]
    assert "unconstrained" in proc.stdout and "federate" in proc.stdout  # the results table
    df, corrupt = ResultStore(results).read()
    assert corrupt == [] and len(df) == 14
    assert set(DESIGN_COLUMNS) <= set(df.columns)
    assert set(df.columns) == {name for name, _ in study_columns(["unconstrained", "federate"])}
    assert not df.duplicated(KEY).any()
    assert (df["status"] == "ok").all() and df["error"].isna().all()
    assert df["valid_accuracy"].between(0, 100).all() and df["leakage"].notna().all()
    fed = df[df["method"] == "federate"]
    assert fed["eps"].notna().all() and df.loc[df["method"] == "unconstrained", "eps"].isna().all()
    assert np.isinf(df.loc[df["method"] == "unconstrained", "eps_formal"]).all()
    assert (fed["eps_formal"] == fed["eps"]).all()
    assert (df["node"] == "127.0.0.1").all()
    assert list((results / ".checkpoints").iterdir()) == []  # the trials' checkpoints, deleted once stored
    # the Ray trials stored each config's per-epoch curves beside the rows
    curves = read_history(results)
    assert len(curves) == 14 * 2 and not curves.duplicated([*KEY, "epoch"]).any()
    kept = curves[curves["kept"]].merge(df, on=KEY)
    assert len(kept) == 14 and (kept["epoch"] == kept["best_epoch"]).all()
    # how every row was trained and probed is stored with it
    assert (df["optimizer"] == "adam").all() and (df["lr"] == 1e-3).all()
    # no train.precision on a CPU: bf16 where it multiplies bf16 matrices in hardware, else float32
    assert (df["precision"] == default_cpu_precision()).all()
    # the plan says bf16, or full precision as a study without one computes it (float32 here)
    said = "bf16" if default_cpu_precision() == "bf16" else "tf32 on CUDA, float32 on a CPU"
    assert f"precision {said} (" in proc.stderr
    assert {tuple(json.loads(a)["encoder"]) for a in df["architecture"]} == {(300, 300)}
    probe = json.loads(df["probe"].iloc[0])
    assert probe["standardize"] and probe["early_stopping"] and probe["kind"] == "mlp"
    assert (probe["alpha"], probe["max_epochs"]) == (1e-4, 200)

    # nothing to run: no Ray is started (a Python that cannot import it)
    again = run_cli("run", str(study), "--results", str(results), env=env_without_ray(tmp_path))
    assert again.returncode == 0, again.stderr[-2000:]
    assert "14 configs already stored" in again.stderr
    df2, _ = ResultStore(results).read()
    pd.testing.assert_frame_equal(df.sort_values(KEY).reset_index(drop=True),
                                  df2.sort_values(KEY).reset_index(drop=True))


@ON_TINY_RUN
def test_a_second_run_into_the_same_results_is_refused_while_the_first_works(tiny_run):
    """The second of two runs into one directory is refused, naming the first's pid, while the
    first works; the first (checked above) stores every row once. The first also shows that
    Ray's token file is made private and its start-up notice does not reach the user."""
    assert tiny_run.proc.returncode == 0, tiny_run.proc.stderr[-2000:]
    assert_input_error(tiny_run.second, "in use", f"pid {tiny_run.pid}")
    assert (tiny_run.home / ".ray" / "auth_token").stat().st_mode & 0o777 == 0o600
    assert "Token authentication is enabled" not in tiny_run.proc.stderr


@ON_TINY_RUN
def test_the_local_executor_runs_without_ray_and_stores_what_ray_stores(tiny_run, tmp_path):
    """``--executor local`` on a Python that cannot import Ray (or Optuna): the same rows as
    the Ray run, byte for byte in every metric, and a study run seed by seed resumes without
    duplicates (retries, Ctrl-C and progress of every executor: test_executor_contract.py)."""
    study, ray_results = tiny_run.study, tiny_run.results
    env = env_without_ray(tmp_path)
    results = tmp_path / "local"
    # the first seed through fairdp's main in this process; the second, and the analysis of the
    # partial rows below, in a Python that cannot import Ray
    first = run_main("run", str(study), "--results", str(results), "--executor", "local", "--seeds", "1")
    assert first.returncode == 0, first.stderr[-2000:]
    assert "packs 3/3 done" in first.stderr
    whole = run_cli("run", str(study), "--results", str(results), "--executor", "local", "--no-compact", env=env)
    assert whole.returncode == 0, whole.stderr[-2000:]
    assert "7 configs already stored" in whole.stderr and "packs 3/3 done" in whole.stderr
    local, corrupt = ResultStore(results).read()
    ray, _ = ResultStore(ray_results).read()
    assert corrupt == [] and len(local) == 14 and not local.duplicated(KEY).any()
    metrics = ["best_epoch", "valid_accuracy", "test_accuracy", "test_tpr_gap", "valid_dp_gap", "leakage", "eps_formal"]
    pd.testing.assert_frame_equal(local.sort_values(KEY)[KEY + metrics].reset_index(drop=True),
                                  ray.sort_values(KEY)[KEY + metrics].reset_index(drop=True))
    # the two runs planned seeds 1 then 0: the plan beside the results holds both, and an
    # analysis of the rows with one pack gone names exactly what is missing
    plan = pd.read_parquet(tmp_path / "local.plan.parquet")
    assert sorted(plan[KEY].itertuples(index=False)) == sorted(local[KEY].itertuples(index=False))
    whole_analysis = run_main("analyze", str(results))  # the partial one below: a CLI without Ray
    assert whole_analysis.returncode == 0 and "warning" not in whole_analysis.stderr, whole_analysis.stderr
    os.remove(next(p for p in ResultStore(results).pack_files() if "/federate/part-s0-" in p))
    part = run_cli("analyze", str(results), env=env)
    assert part.returncode == 0 and "| federate |" in part.stdout
    assert "partial: 11 of 14 planned configs finished; unfinished: federate seed 0 (3 of 6 configs" in part.stderr


def test_rerun_into_results_of_another_length_is_refused(tmp_path):
    # the store's semantics, the same under both executors: the local one spares Ray's start-up
    study = _write_study(tmp_path / "tiny.yaml", methods={"unconstrained": {}}, seeds=[0])
    run_study(load_spec(study), str(tmp_path / "r"), executor="local", progress_stream=open(os.devnull, "w"))
    proc = run_main("run", str(study), "--results", str(tmp_path / "r"), "--epochs", "3")
    assert proc.returncode == 2 and "epochs" in proc.stderr and "--results" in proc.stderr
    # another learning rate for a stored method would mix two protocols in one table
    faster = _write_study(tmp_path / "faster.yaml", methods={"unconstrained": {"train": {"lr": 0.01}}}, seeds=[0])
    proc = run_main("run", str(faster), "--results", str(tmp_path / "r"))
    assert proc.returncode == 2 and "lr 0.001" in proc.stderr and "0.01" in proc.stderr
    # so would another probe: FEDERATE's L2 alpha of 1 against the default's 1e-4
    federates_probe = _write_study(tmp_path / "probe.yaml", methods={"unconstrained": {}}, seeds=[0, 1],
                                   evaluate={"leakage": True, "mdl": False, "probe": {"alpha": 1.0}})
    proc = run_main("run", str(federates_probe), "--results", str(tmp_path / "r"))
    assert proc.returncode == 2 and '"alpha": 0.0001' in proc.stderr and '"alpha": 1.0' in proc.stderr, proc.stderr
    # rows stored before the probe's alpha and epochs were recorded read as the defaults they
    # were probed with: the same study resumes into them
    (part,) = (tmp_path / "r").rglob("part-*.parquet")
    rows = pd.read_parquet(part)
    old = {k: v for k, v in json.loads(rows["probe"].iloc[0]).items()
           if k in ("kind", "standardize", "early_stopping", "backend", "hidden")}
    rows["probe"] = json.dumps(old)
    rows.to_parquet(part)
    more_seeds = _write_study(tmp_path / "more.yaml", methods={"unconstrained": {}}, seeds=[0, 1])
    proc = run_main("run", str(more_seeds), "--results", str(tmp_path / "r"), "--executor", "local")
    assert proc.returncode == 0 and "1 configs already stored" in proc.stderr, proc.stderr[-2000:]


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        out.add(p)
        todo.extend(children.get(p, []))
    return out


def _listening(pids: set[int]) -> list[str]:
    """Local addresses of TCP listening sockets owned by ``pids`` (from `ss -ltnpH`)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    addrs = []
    for line in out.splitlines():
        owners = {int(p) for p in __import__("re").findall(r"pid=(\d+)", line)}
        if owners & pids:
            addrs.append(line.split()[3])
    return addrs


def _is_loopback(address: str) -> bool:
    """'127.0.0.1:80', '[::1]:80', '[::ffff:127.0.0.1]:80' yes; '0.0.0.0:80', '*:80', '10.0.0.2:80' no."""
    host = address.rsplit(":", 1)[0].strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False  # '*' (every interface)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


@pytest.mark.slow
def test_embedded_ray_listens_only_on_loopback_and_a_sigkilled_run_resumes_exactly(tmp_path):
    # 14 configs in 8 packs: the kill after 2 stored leaves packs to train and to resume
    study = _write_study(tmp_path / "kill.yaml", seeds=[0, 1], pack_size=2,
                         train={"epochs": 4, "batch_size": 250})
    results = tmp_path / "r"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("RAY_ADDRESS", None)
    # a checkpoint after every epoch: the packs the kill interrupts resume from theirs on Ray
    proc = subprocess.Popen([sys.executable, "-m", "fairdp", "run", str(study), "--results", str(results),
                             "--checkpoint-every", "0.001"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    store = ResultStore(results)
    listening: list[str] = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            pids = _descendants(proc.pid)
            listening = sorted(set(listening) | set(_listening(pids)))
            if len(store.pack_files()) >= 2:
                break
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            time.sleep(0.2)
        assert len(store.pack_files()) >= 2, "no pack stored in time"
        listening = sorted(set(listening) | set(_listening(_descendants(proc.pid))))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # Ray's services listened, and only on loopback
    assert listening, "found no listening socket of the run"
    assert all(_is_loopback(a) for a in listening), listening

    before, _ = store.read()
    total = 2 * 7
    assert 0 < len(before) < total
    rerun = run_cli("run", str(study), "--results", str(results))
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    # (whether a pack resumes here depends on where the kill fell, and a Ray worker outside the
    # process group may finish its pack after it: test_a_run_killed_mid_pack_... pins resuming)
    assert list((results / ".checkpoints").glob("*.ckpt")) == []
    after, corrupt = store.read()
    assert corrupt == [] and len(after) == total and not after.duplicated(KEY).any()
    kept = after.merge(before[KEY], on=KEY).sort_values(KEY).reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, before.sort_values(KEY).reset_index(drop=True))
    assert not list(results.rglob(".tmp-*"))


def test_repair_moves_a_corrupt_file_aside_and_reruns_its_configs(tmp_path):
    study = _write_study(tmp_path / "tiny.yaml", seeds=[0], methods={"federate": {"grid": {"eps": [1, 10], "lam": [1.0]}}},
                         pack_size=1)
    results = tmp_path / "r"
    run_study(load_spec(study), str(results), executor="local", progress_stream=open(os.devnull, "w"))
    victim = sorted(results.rglob("part-*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[:100])
    refused = run_main("run", str(study), "--results", str(results))
    assert refused.returncode == 2 and victim.name in refused.stderr and "--repair" in refused.stderr
    fixed = run_main("run", str(study), "--results", str(results), "--repair", "--executor", "local")
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    df, corrupt = ResultStore(results).read()
    assert corrupt == [] and len(df) == 2 and not df.duplicated(KEY).any()
    assert len(list(results.rglob(".corrupt-*"))) == 1


def _dominates(a, b, directions):
    better_or_equal = all((x >= y) if d == "max" else (x <= y) for x, y, d in zip(a, b, directions))
    strictly = any((x > y) if d == "max" else (x < y) for x, y, d in zip(a, b, directions))
    return better_or_equal and strictly


@pytest.mark.parametrize("sampler,mode", [("nsga2", "packed"),
                                          pytest.param("tpe", "per-config", marks=pytest.mark.slow)])
def test_a_seeded_search_writes_a_nondominated_front(tmp_path, monkeypatch, sampler, mode):
    """The per-config search on embedded Ray (Tune's OptunaSearch: a Ray start, in the slow set),
    the packed one locally through fairdp's main in this process (packed searches on Ray:
    tests/test_search_like_a_run.py)."""
    objectives = {"valid_accuracy": "max", "valid_tpr_gap": "min"}
    study = _write_study(
        tmp_path / "search.yaml", name="tiny-search", seeds=[0], methods={"federate": {}},
        search={"method": "federate", "sampler": sampler, "population": 4, "trials": 8, "seed": 3,
                "objectives": objectives, "space": {"eps": {"low": 1, "high": 20, "log": True},
                                                    "lam": {"low": 0.1, "high": 3.0}}})
    results = tmp_path / "r"
    # every epoch reports its config-epochs to Tune (results without the searcher's metrics)
    if mode == "packed":
        monkeypatch.setenv("FAIRDP_UNITS_EVERY_S", "0")
        proc = run_main("search", str(study), "--results", str(results), "--mode", mode, "--executor", "local")
    else:
        proc = run_cli("search", str(study), "--results", str(results), "--mode", mode,
                       env={"FAIRDP_UNITS_EVERY_S": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    front = pd.read_parquet(f"{results}.pareto-federate-seed3.parquet")
    rows, _ = ResultStore(results).read()
    assert len(rows) == len(set(rows["config_id"])) <= 8 and len(rows) >= 6
    assert 1 <= len(front) <= len(rows)
    pts = front[list(objectives)].to_numpy()
    dirs = list(objectives.values())
    assert not any(_dominates(pts[i], pts[j], dirs) for i in range(len(pts)) for j in range(len(pts)) if i != j)
    # every stored row not on the front is dominated by a front point
    others = rows[~rows["config_id"].isin(front["config_id"])][list(objectives)].to_numpy()
    assert all(any(_dominates(p, q, dirs) or (p == q).all() for p in pts) for q in others)
    assert (results / "_optuna.journal").stat().st_size > 0
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    stored = optuna.load_study(study_name="tiny-search-federate-seed3",
                               storage=JournalStorage(JournalFileBackend(str(results / "_optuna.journal"))))
    assert len(stored.trials) == 8
    # optuna-dashboard: objective names, and each trial tagged with the row it trained
    assert stored.metric_names == list(objectives)
    complete = [t for t in stored.trials if t.state.name == "COMPLETE"]
    assert complete and {t.user_attrs.get("config_id") for t in complete} <= set(rows["config_id"])


def test_a_method_that_cannot_train_on_the_dataset_is_refused_before_ray(tmp_path, capsys):
    from fairdp.cli import main

    study = _write_study(tmp_path / "s.yaml", dataset={"name": "synthetic", "rows": 600, "classes": 3},
                         methods={"unconstrained": {}, "fld": {}})
    assert main(["run", str(study), "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "methods.fld" in err and "binary labels" in err and not (tmp_path / "r").exists()


def _signal_after_packs(study: Path, results: Path, sig: int, packs: int, env: dict, executor: str = "ray"):
    """Run the study into ``results``, send ``sig`` once ``packs`` pack files are stored there:
    (the process, its stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "fairdp", "run", str(study), "--results", str(results),
                             "--executor", executor], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    store = ResultStore(results)
    deadline = time.monotonic() + 240
    while len(store.pack_files()) < packs and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc, err


def test_sigterm_stops_a_local_run_like_ctrl_c_and_the_rerun_completes(tmp_path):
    """``kill PID`` on a background run (whose SIGINT the shell ignores): fairdp's own last
    line and status 130, the finished packs kept, the rest trained by the same command."""
    env = env_without_ray(tmp_path)
    # one seed: 7 configs in 7 packs of one, the signal after the first lands with 6 left (no
    # leakage probe: the signal's handling is the subject, and the rerun trains the other 6)
    study = _write_study(tmp_path / "int.yaml", seeds=[0], pack_size=1, train={"epochs": 4, "batch_size": 250},
                         evaluate={"leakage": False, "mdl": False})
    store = ResultStore(tmp_path / "r")
    proc, err = _signal_after_packs(study, tmp_path / "r", signal.SIGTERM, 1, env, executor="local")
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "resumes" in err and "Traceback" not in err
    stored, _ = store.read()
    assert 0 < len(stored) < 7 and set(stored["status"]) == {"ok"}
    rerun = run_main("run", str(study), "--results", store.location, "--executor", "local")
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    after, _ = store.read()
    assert len(after) == 7 and not after.duplicated(KEY).any()


def test_a_run_killed_mid_pack_resumes_the_pack_from_its_checkpoint_with_the_same_rows(tmp_path):
    """SIGKILL while a pack trains (after it saved a checkpoint): the rerun continues that pack
    from its checkpoint, says so, stores exactly the rows of a run never killed, and leaves no
    checkpoint behind. A checkpoint of a stored pack is deleted by the next run; one of a pack
    it does not plan (another seed's, say) is kept."""
    from fairdp.schema import METRIC_COLUMNS

    env = {**env_without_ray(tmp_path), "PYTHONUNBUFFERED": "1"}
    study = _write_study(tmp_path / "ckpt.yaml", seeds=[0], pack_size=4, evaluate={"leakage": False, "mdl": False},
                         dataset={"name": "synthetic", "rows": 2000, "features": 16},
                         train={"epochs": 12, "batch_size": 100},
                         methods={"federate": {"grid": {"eps": [1, 10], "lam": [0.5, 1.0]}}})
    results = tmp_path / "r"
    store = ResultStore(results)
    argv = [sys.executable, "-m", "fairdp", "run", str(study), "--results", str(results), "--executor", "local"]
    proc = subprocess.Popen([*argv, "--checkpoint-every", "0.001"], cwd=REPO, env={**os.environ, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    checkpoints = results / ".checkpoints"
    try:
        deadline = time.monotonic() + 240
        while not list(checkpoints.glob("*.ckpt")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert [p.name for p in checkpoints.glob("*.ckpt")] and store.pack_files() == [], "killed too late"
    unplanned = checkpoints / "0123456789abcdef.ckpt"
    unplanned.write_bytes(b"of a pack this run does not plan")
    plan = run_main(*argv[3:], "--dry-run")
    assert "1 packs, 1 of the packs from their checkpoints" in plan.stderr, plan.stderr[-2000:]
    rerun = run_main(*argv[3:], "--checkpoint-every", "0.001")
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "1 of the packs resume from checkpoints" in rerun.stderr
    assert re.search(r"resuming after epoch ([1-9]|1[01])\b", rerun.stderr)  # not from the first, nor retrained
    assert [p.name for p in checkpoints.iterdir()] == [unplanned.name]  # the stored pack's is gone
    (checkpoints / f"{store.read()[0]['pack_id'].iloc[0]}.ckpt").write_bytes(b"left by a kill after storing")
    assert run_main(*argv[3:]).returncode == 0  # nothing to train
    assert [p.name for p in checkpoints.iterdir()] == [unplanned.name]
    never_killed = run_main(*argv[3:-3], str(tmp_path / "whole"), "--executor", "local", "--checkpoint-every", "0")
    assert never_killed.returncode == 0, never_killed.stderr[-2000:]
    assert not (tmp_path / "whole" / ".checkpoints").exists()
    columns = [*KEY, *METRIC_COLUMNS, "best_epoch"]
    got = store.read()[0][columns].sort_values(KEY).reset_index(drop=True)
    want = ResultStore(tmp_path / "whole").read()[0][columns].sort_values(KEY).reset_index(drop=True)
    assert len(got) == 4
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@pytest.mark.slow
def test_ctrl_c_then_sigterm_stop_a_ray_run_with_status_130_and_the_third_run_completes(tmp_path):
    """Ctrl-C, then ``kill PID`` on the rerun (each once a pack more is stored; each Ray run
    costs seconds of set-up, so the two signals share the study): each time fairdp's own last
    line (not Ray's stack dump, not Tune's advice to restore a path fairdp deletes) and status
    130, the finished packs kept, and the same command completes the study."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)
    # three seeds, 21 configs in 11 packs (2 at a time): each signal lands with packs left
    study = _write_study(tmp_path / "int.yaml", seeds=[0, 1, 2], pack_size=2, train={"epochs": 4, "batch_size": 250})
    results = tmp_path / "r"
    store = ResultStore(results)
    stored = 0
    for sig in (signal.SIGINT, signal.SIGTERM):
        proc, err = _signal_after_packs(study, results, sig, len(store.pack_files()) + 1, env)
        assert proc.returncode == 130, (signal.Signals(sig).name, err[-2000:])
        assert "interrupted" in err and "resumes" in err and "SIGTERM received" not in err  # not Ray's stack dump
        assert "Tuner.restore" not in err  # Tune's advice names a path fairdp deletes; fairdp's own line says how
        rows, _ = store.read()
        assert stored < len(rows) < 21 and not rows.duplicated(KEY).any(), signal.Signals(sig).name
        stored = len(rows)
    analysis = run_main("analyze", str(results))
    assert f"partial: {stored} of 21 planned configs finished" in analysis.stderr, analysis.stderr
    rerun = run_cli("run", str(study), "--results", str(results))
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    after, _ = store.read()
    assert len(after) == 21 and not after.duplicated(KEY).any()


def test_a_search_resumes_from_its_journal_without_retraining(tmp_path):
    study = _write_study(
        tmp_path / "search.yaml", name="resume-search", seeds=[0], methods={"noise": {}},
        search={"method": "noise", "sampler": "nsga2", "population": 4, "trials": 4, "seed": 1,
                "objectives": {"valid_accuracy": "max", "leakage": "min"},
                "space": {"eps": {"low": 1, "high": 20, "log": True}}})
    results = tmp_path / "r"
    # both in this process with the local executor (a resume on embedded Ray, from the journal
    # the executors share: tests/test_search_resume.py, in the slow set)
    first = run_main("search", str(study), "--results", str(results), "--executor", "local")
    assert first.returncode == 0, first.stderr[-2000:]
    rows1, _ = ResultStore(results).read()
    second = run_main("search", str(study), "--results", str(results), "--trials", "8", "--executor", "local")
    assert second.returncode == 0, second.stderr[-2000:]
    assert "4 complete trials already in" in second.stderr
    rows2, _ = ResultStore(results).read()
    assert len(rows2) <= 8 and not rows2.duplicated(KEY).any()
    kept = rows2.merge(rows1[KEY], on=KEY).sort_values(KEY).reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, rows1.sort_values(KEY).reset_index(drop=True))  # not retrained
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    journal = JournalStorage(JournalFileBackend(str(results / "_optuna.journal")))
    trials = optuna.load_study(study_name="resume-search-noise-seed1", storage=journal).trials
    assert len(trials) == 8 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)


def test_four_parquet_readers_read_exactly_the_rows_of_a_directory_a_run_search_and_report_wrote(tmp_path):
    """pandas, pyarrow, polars and duckdb, with no options, on a results directory that a
    run, a search (journal, Pareto front) and a report (under `_report`) have written into."""
    import duckdb
    import polars as pl
    import pyarrow.dataset as ds

    from fairdp.cli import main

    study = _write_study(
        tmp_path / "s.yaml", name="readers", seeds=[0], methods={"unconstrained": {}},
        train={"epochs": 1, "batch_size": 250}, evaluate={"leakage": False, "mdl": False, "min_group_count": 1},
        search={"method": "noise", "sampler": "nsga2", "population": 2, "trials": 2, "seed": 0,
                "objectives": {"valid_accuracy": "max", "valid_tpr_gap": "min"},
                "space": {"eps": {"low": 1, "high": 20, "log": True}}})
    results = tmp_path / "r"
    # the readers' subject is the files, the same from either executor: both local, in this process
    assert run_main("run", str(study), "--results", str(results), "--executor", "local").returncode == 0
    proc = run_main("search", str(study), "--results", str(results), "--executor", "local")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert main(["report", str(results), "-o", str(results / "_report")]) == 0
    assert main(["report", str(results), "-o", str(results / "report")]) == 2  # readers would read it
    assert (results / "_optuna.journal").exists() and (tmp_path / "r.pareto-noise-seed0.parquet").exists()
    rows, _ = ResultStore(results).read()
    assert len(rows) == 3
    key = sorted(rows["config_id"])
    assert sorted(pd.read_parquet(results)["config_id"]) == key
    assert sorted(ds.dataset(results).to_table().column("config_id").to_pylist()) == key
    assert sorted(pl.scan_parquet(f"{results}/**/*.parquet").collect()["config_id"].to_list()) == key
    got = duckdb.sql(f"select config_id from read_parquet('{results}/**/*.parquet')").fetchall()
    assert sorted(r[0] for r in got) == key
    # optuna-dashboard shows each trial's row and the objectives by name
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    journal = JournalStorage(JournalFileBackend(str(results / "_optuna.journal")))
    searched = optuna.load_study(study_name="readers-noise-seed0", storage=journal)
    assert searched.metric_names == ["valid_accuracy", "valid_tpr_gap"]
    noise_ids = set(rows.loc[rows["method"] == "noise", "config_id"])
    assert {t.user_attrs["config_id"] for t in searched.trials} == noise_ids


OOM_TEXT = ("Caught unexpected exception: 1 worker(s) were killed due to the node running low on memory. Memory on "
            "the node (IP: 127.0.0.1, ID: 1f) was 22.23GB used / 23.54GB limit (0.944365)\nOOM kill reason: Memory "
            "usage exceeded threshold\nRefer to the documentation on how to address the out of memory issue: …")


def test_a_failure_tune_raises_outside_any_trial_is_one_line_with_status_1(monkeypatch, capsys):
    """What crashed a FEDERATE protocol run with a traceback: Tune's scheduler raising when the
    memory monitor killed a worker as its actor started. Now one line, status 1, and the
    results location named for the resume."""
    import fairdp.study
    from fairdp.cli import main
    from fairdp.errors import RunAborted
    from fairdp.study.ray._tune import aborted_by_ray

    with pytest.raises(RunAborted) as caught:
        with aborted_by_ray("/data/r"):
            raise RuntimeError(OOM_TEXT)
    text = str(caught.value)
    assert "memory monitor killed" in text and "22.23GB used / 23.54GB limit" in text
    assert "stored in /data/r" in text and "resumes" in text and "Refer to the documentation" not in text
    with pytest.raises(KeyboardInterrupt):  # a Ctrl-C is still a Ctrl-C
        with aborted_by_ray("/data/r"):
            raise KeyboardInterrupt

    def aborted(*args, **kwargs):
        raise caught.value

    monkeypatch.setattr(fairdp.study, "run_study", aborted)
    assert main(["run", str(REPO / "studies" / "demo.yaml")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fairdp: error: Ray Tune stopped the run: OutOfMemoryError")


@pytest.mark.slow
def test_a_pack_whose_worker_ray_kills_for_memory_is_stored_as_errors_and_rerun(tmp_path):
    """Ray's memory monitor set to kill at 2% of the node's memory kills every trial's worker
    before it reports: the pack is retried, then stored as error rows saying why (Tune hands
    such a trial back without its config, which fairdp read and crashed on), and a normal rerun
    trains it."""
    study = _write_study(tmp_path / "oom.yaml", seeds=[0], methods={"unconstrained": {}})
    results = tmp_path / "r"
    killed = run_cli("run", str(study), "--results", str(results), env={"RAY_memory_usage_threshold": "0.02"})
    assert killed.returncode == 1, killed.stderr[-3000:]
    assert "1 failed, 1 retried" in killed.stderr and "TypeError" not in killed.stderr
    rows, _ = ResultStore(results).read()
    assert rows["status"].tolist() == ["error"]
    assert rows["error"].iloc[0].startswith("OutOfMemoryError: Ray's memory monitor killed the trial's worker")
    rerun = run_cli("run", str(study), "--results", str(results))
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    rows, _ = ResultStore(results).read()
    assert rows["status"].tolist() == ["ok"]
