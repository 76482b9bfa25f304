"""Nothing an embedded Ray started outlives its run (issue 41, class 8): after a SIGKILL of the
driver, Ray's own ties killed gcs_server, the raylet and the workers, but the DashboardAgent
and the RuntimeEnvAgent (the raylet's children) lived on for minutes. ``_ray_reaper`` kills
the node's processes when the driver ends; these tests list the processes by pid and start
time, independently of the reaper, and wait for them with a deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from fairdp import schema
from fairdp.study import ResultStore
from fairdp.study.ray._ray_reaper import LIST_EVERY_S
from tests.conftest import REPO, group_alive, run_cli, start_driver

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="lists processes through /proc")

GONE_WITHIN_S = 10.0


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, start time) of a live process, None once it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    return None if fields[0] in (b"Z", b"X") else (int(fields[1]), float(fields[19]))


def _read(pid: int, what: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{what}").read_bytes()
    except OSError:
        return b""


def _name(pid: int) -> str:
    """The program's name (Ray's agents and workers put theirs, ray::..., in their command line)."""
    program = _read(pid, "cmdline").split(b"\0")[0].decode(errors="replace").strip()
    return os.path.basename(program) or _read(pid, "comm").decode().strip()


def descendants(root: int) -> dict[int, tuple[float, str]]:
    """pid -> (start time, name) of every live process below ``root``."""
    table = {int(e): s for e in os.listdir("/proc") if e.isdigit() and (s := _stat(int(e)))}
    found, stack = {}, [root]
    while stack:
        parent = stack.pop()
        for pid, (ppid, start) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = (start, _name(pid))
                stack.append(pid)
    return found


def alive(procs: dict[int, tuple[float, str]]) -> dict[int, str]:
    """Those of ``procs`` still running (the same pid with the same start time)."""
    return {pid: name for pid, (start, name) in procs.items() if (s := _stat(pid)) and s[1] == start}


def wait_gone(procs: dict[int, tuple[float, str]], within_s: float = GONE_WITHIN_S) -> tuple[dict[int, str], float]:
    """Poll until none of ``procs`` runs or ``within_s`` has passed: (those left, seconds taken)."""
    t0 = time.monotonic()
    while (left := alive(procs)) and time.monotonic() - t0 < within_s:
        time.sleep(0.05)
    return left, time.monotonic() - t0


def kill_left(procs) -> None:
    for pid in alive(procs):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# -- the reaper alone, with stand-ins for Ray's processes (fast) -----------------------------

# A stand-in for a node process started inside ``ray.init`` (marked), whose child drops the
# mark from its environment as Ray's agents do (their process title overwrites it).
NODE = """import os, subprocess, sys, time
env = {k: v for k, v in os.environ.items() if k != "FAIRDP_EMBEDDED_RAY"}
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)
time.sleep(120)
"""
DRIVER = """import subprocess, sys, time
from fairdp.study.ray._ray import marked_environment, reaped_when_driver_ends
sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
with reaped_when_driver_ends() as token:
    with marked_environment(token):
        subprocess.Popen([sys.executable, "-c", {node!r}])
    subprocess.Popen(sleeper)  # started outside ray.init: a tracking service, say; it is not the node's
    print("up", flush=True)
    sys.stdin.readline()  # the test says when to leave the block
print("left", flush=True)
time.sleep(120)
"""


def _start_driver():
    proc = subprocess.Popen([sys.executable, "-c", DRIVER.format(node=NODE)], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.readline().strip() == "up"
    deadline = time.monotonic() + 30
    while len(procs := descendants(proc.pid)) < 4 and time.monotonic() < deadline:  # reaper, node, agent, service
        time.sleep(0.05)
    assert len(procs) == 4, procs
    # the reaper lists the node's processes every LIST_EVERY_S[0] while it starts; an unmarked
    # process (the agent's stand-in) is known to it only once listed: ten periods, for a busy machine
    time.sleep(10 * LIST_EVERY_S[0])
    reaper = next(pid for pid in procs if b"_ray_reaper.py" in _read(pid, "cmdline"))
    service = next(pid for pid in procs if pid != reaper and _stat(pid)[0] == proc.pid
                   and b"FAIRDP_EMBEDDED_RAY=" not in _read(pid, "environ"))
    node = {pid: v for pid, v in procs.items() if pid not in (reaper, service)}
    return proc, node, {service: procs[service]}, {reaper: procs[reaper]}


@pytest.mark.parametrize("end", ["sigkill", "block left"])
def test_the_reaper_kills_the_embedded_nodes_processes_and_nothing_else(end):
    # another run's embedded Ray: marked with another token
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                             env={**os.environ, "FAIRDP_EMBEDDED_RAY": "another-runs-token"})
    proc, node, service, reaper = _start_driver()
    try:
        if end == "sigkill":
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        else:
            proc.stdin.write("\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "left"  # the block waits for the reaper's sweep
        left, took = wait_gone({**node, **reaper})
        assert left == {}, f"{left} still run {took:.1f} s after the driver's end"
        assert alive(service), "a process started outside ray.init was killed"
        assert other.poll() is None, "another run's process was killed"
        if end != "sigkill":
            assert proc.poll() is None  # and the driver itself runs on
    finally:
        other.kill()
        other.wait()
        kill_left({**node, **service, **reaper})
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# -- a real run ----------------------------------------------------------------------------------

STUDY = {
    "name": "orphans",
    "dataset": {"name": "synthetic", "rows": 2000, "features": 8},
    # packs of about a second each: at the kill, a worker is always close to storing one (a
    # dozen left at the kill after the fourth; the rerun trains what the kill left)
    "seeds": list(range(16)),
    "train": {"epochs": 8, "batch_size": 50},
    "evaluate": {"leakage": False, "mdl": False},
    "methods": {"unconstrained": {}},
    "pack_size": 1,
}


@pytest.mark.slow
def test_nothing_a_sigkilled_drivers_embedded_ray_started_outlives_it_or_stores_after_it_and_a_rerun_is_bit_equal(
        tmp_path):
    """SIGKILL to the driver alone while a worker trains: every process the run started is gone
    within seconds (the workers watch the driver; the embedded Ray's reaper kills the rest), no
    pack file appears after the kill (a worker checks its driver between its rows' sync and their
    rename; without the watch, two were stored 0.2 and 0.6 s after it, and with one check before
    the pack's writes, one 0.195 s after it), and the rerun completes the study with
    the rows of a run never killed, bit for bit."""
    from fairdp.study.store._lock import WORKERS_DIR

    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(STUDY))
    results = tmp_path / "r"
    driver = start_driver("run", str(study), "--results", str(results))
    store, procs = ResultStore(results), {}
    try:
        # kill once some packs are stored and a worker is training one: a worker's mark exists
        # only while it trains, so the instant the fourth pack lands may fall between packs
        deadline, training = time.monotonic() + 240, []
        while time.monotonic() < deadline:
            assert driver.poll() is None, "the run ended before the kill"
            training = list((results / WORKERS_DIR).glob("*")) if len(store.pack_files()) >= 4 else []
            if training:
                break
            time.sleep(0.02)
        assert training, "no worker training at the kill"
        procs = descendants(driver.pid)  # Ray's processes, the workers among them
        os.kill(driver.pid, signal.SIGKILL)  # the driver alone
        killed = time.time()
        driver.wait()
        names = sorted(name for _, name in procs.values())
        assert {"raylet", "gcs_server"} <= set(names), names  # the embedded node was up
        left, took = wait_gone(procs)
        gone_at = time.time()  # every process of the node had ended by now (polled every 0.05 s)
        assert left == {}, f"still running {took:.1f} s after the driver's SIGKILL: {left}"
        print(f"\nORPHANS: {len(procs)} processes ({', '.join(names)}) gone {took:.2f} s after the kill")
    finally:
        kill_left(procs)
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        if group_alive(driver.pid):  # anything of its session that was not a descendant at the kill
            os.killpg(driver.pid, signal.SIGKILL)
    # a store can only overlap the kill: the pack a training worker was writing, until the reaper
    # had killed it (0.1 s on an idle machine, 0.12 s seen on a loaded CI runner), never a later
    # one (a pack takes about a second), and nothing once the node's processes were gone
    late = sorted(os.path.getmtime(p) for p in store.pack_files() if os.path.getmtime(p) > killed + 0.1)
    assert len(late) <= len(training) and all(t <= gone_at for t in late), \
        ([round(t - killed, 3) for t in late], len(training), round(gone_at - killed, 3))
    # the rerun and the uninterrupted run (local executor, one pack after another) at once: the
    # run never killed shares nothing with the rerun's Ray but the CPUs
    reference = tmp_path / "reference"
    with ThreadPoolExecutor(1) as pool:
        clean = pool.submit(run_cli, "run", str(study), "--results", str(reference), "--executor", "local")
        rerun = run_cli("run", str(study), "--results", str(results))
        clean = clean.result()
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert clean.returncode == 0, clean.stderr[-2000:]
    key = list(schema.ROW_KEY)
    got, bad = ResultStore(results).read()
    want, _ = ResultStore(reference).read()
    assert bad == [] and len(got) == len(want) == len(STUDY["seeds"]) and not got.duplicated(key).any()
    got, want = got.set_index(key).sort_index(), want.set_index(key).sort_index()
    for col in [c for c in schema.METRIC_COLUMNS if c in want.columns] + [schema.TEST_CONFUSION]:
        mine, theirs = got[col].tolist(), want[col].tolist()
        same = [x == y or (x != x and y != y) for x, y in zip(mine, theirs)]
        assert all(same), f"{col} differs from the uninterrupted run: {mine} vs {theirs}"
