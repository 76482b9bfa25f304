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
from fairdp.study._ray_reaper import LIST_EVERY_S
from tests.conftest import REPO, run_cli, start_driver

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
from fairdp.study._ray import marked_environment, reaped_when_driver_ends
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
    "seeds": list(range(6)),
    "train": {"epochs": 6, "batch_size": 50},
    "evaluate": {"leakage": False, "mdl": False},
    "methods": {"unconstrained": {}},
    "pack_size": 1,  # packs of about a second: at the kill (after the first), workers are mid-pack
}


@pytest.mark.slow
def test_nothing_an_embedded_ray_started_outlives_a_sigkilled_driver_and_a_rerun_is_bit_equal(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(STUDY))
    results = tmp_path / "r"
    driver = start_driver("run", str(study), "--results", str(results))
    store, procs = ResultStore(results), {}
    try:
        # kill once a pack is stored (Ray's processes are up, its agents among them) and the
        # workers train the next ones
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (results.exists() and store.pack_files()):
            assert driver.poll() is None, "the run ended before storing a pack"
            time.sleep(0.05)
        procs = descendants(driver.pid)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        names = sorted(name for _, name in procs.values())
        assert {"raylet", "gcs_server"} <= set(names), names  # the embedded node was up
        left, took = wait_gone(procs)
        assert left == {}, f"still running {took:.1f} s after the driver's SIGKILL: {left}"
        print(f"\nORPHANS: {len(procs)} processes ({', '.join(names)}) gone {took:.2f} s after the kill")
    finally:
        kill_left(procs)
        if driver.poll() is None:
            driver.kill()
            driver.wait()
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
