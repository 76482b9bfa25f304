"""A real two-host Ray cluster on this machine: each host in its own network namespace.

Ray rewrites ``--node-ip-address=127.0.0.1`` to the machine's interface address on Linux
and refuses a second node forced onto loopback, so each "host" gets a network namespace
joined to the other by a veth pair. The test starts ``ray start --block`` in each (its own
process group), runs a small study from the head's namespace with ``fairdp run
--address``, checks that packs ran on both nodes and that the results are complete, and
tears down exactly what it created: the processes inside its namespaces, then the
namespaces (which removes the veth pair).
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest
import yaml

from fairdp.study import ResultStore
from tests.conftest import REPO

HEAD_IP, WORKER_IP, PORT = "10.213.7.1", "10.213.7.2", 6390
RAY = os.path.join(os.path.dirname(sys.executable), "ray")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _netns_usable() -> bool:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    probe = f"fdp-probe-{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", probe)
    except (subprocess.CalledProcessError, OSError):
        return False
    _ip("netns", "del", probe)
    return True


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not _netns_usable(), reason="needs root and `ip netns` (network namespaces)"),
]


def _ns_pids(ns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _stop(ns: str, leaders: list[subprocess.Popen]) -> None:
    """End the process groups we started, then anything left in our namespace (all ours)."""
    for proc in leaders:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (_ns_pids(ns) or any(p.poll() is None for p in leaders)):
        time.sleep(0.5)
    for pid in _ns_pids(ns):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for proc in leaders:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


@pytest.fixture
def two_hosts(tmp_path):
    tag = uuid.uuid4().hex[:6]
    head_ns, worker_ns = f"fdp-head-{tag}", f"fdp-work-{tag}"
    veth_h, veth_w = f"fdh{tag}", f"fdw{tag}"
    env = dict(os.environ, RAY_AUTH_MODE="disabled", PYTHONUNBUFFERED="1")
    env.pop("RAY_ADDRESS", None)
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    procs: dict[str, list[subprocess.Popen]] = {head_ns: [], worker_ns: []}
    created, temp_dirs = [], []
    try:
        for ns in (head_ns, worker_ns):
            _ip("netns", "add", ns)
            created.append(ns)
        _ip("link", "add", veth_h, "type", "veth", "peer", "name", veth_w)
        _ip("link", "set", veth_h, "netns", head_ns)
        _ip("link", "set", veth_w, "netns", worker_ns)
        for ns, dev, addr in ((head_ns, veth_h, HEAD_IP), (worker_ns, veth_w, WORKER_IP)):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        logs = tmp_path / "ray-logs"
        logs.mkdir()
        # Ray's AF_UNIX socket paths must stay under 108 bytes: short temp dirs, not tmp_path
        temp_dirs = [tempfile.mkdtemp(prefix="fdp-ray-", dir="/tmp") for _ in range(2)]
        head = subprocess.Popen(
            ["ip", "netns", "exec", head_ns, RAY, "start", "--block", "--head", f"--node-ip-address={HEAD_IP}",
             f"--port={PORT}", "--num-cpus=1", "--include-dashboard=false", f"--temp-dir={temp_dirs[0]}"],
            env=env, cwd=REPO, stdout=open(logs / "head.out", "w"), stderr=subprocess.STDOUT, start_new_session=True)
        head.log_path = logs / "head.out"
        procs[head_ns].append(head)
        _wait_for_nodes(head_ns, env, 1, head)
        worker = subprocess.Popen(
            ["ip", "netns", "exec", worker_ns, RAY, "start", "--block", f"--address={HEAD_IP}:{PORT}",
             f"--node-ip-address={WORKER_IP}", "--num-cpus=1", f"--temp-dir={temp_dirs[1]}"],
            env=env, cwd=REPO, stdout=open(logs / "worker.out", "w"), stderr=subprocess.STDOUT, start_new_session=True)
        worker.log_path = logs / "worker.out"
        procs[worker_ns].append(worker)
        _wait_for_nodes(head_ns, env, 2, worker)
        yield head_ns, env
    finally:
        for ns in created:
            _stop(ns, procs[ns])
        for ns in created:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for d in temp_dirs:
            shutil.rmtree(d, ignore_errors=True)


def _tail(proc: subprocess.Popen) -> str:
    log = getattr(proc, "log_path", None)
    return open(log).read()[-1500:] if log else ""


def _wait_for_nodes(ns: str, env: dict, n: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    code = (f"import ray; ray.init(address='{HEAD_IP}:{PORT}', logging_level='ERROR'); "
            "print(sum(1 for x in ray.nodes() if x['Alive']))")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"ray start exited with {proc.returncode}: {_tail(proc)}"
        out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code], env=env,
                             capture_output=True, text=True, timeout=60)
        if out.returncode == 0 and out.stdout.strip().splitlines()[-1:] == [str(n)]:
            return
        time.sleep(1)
    raise AssertionError(f"the cluster did not reach {n} nodes")


def test_a_study_runs_on_both_hosts_of_a_two_node_cluster(two_hosts, tmp_path):
    head_ns, env = two_hosts
    study = tmp_path / "two.yaml"
    study.write_text(yaml.safe_dump({
        "name": "two-hosts",
        "dataset": {"name": "synthetic", "rows": 800, "features": 8},
        "seeds": [0, 1, 2, 3],
        "train": {"epochs": 2, "batch_size": 200},
        "evaluate": {"leakage": False, "mdl": False},
        "methods": {"unconstrained": {}, "federate": {"grid": {"eps": [1, 10], "lam": [0.5, 1.0]}}},
        "pack_size": 2,
    }))
    results = tmp_path / "results"
    run = subprocess.run(["ip", "netns", "exec", head_ns, sys.executable, "-m", "fairdp", "run", str(study),
                          "--results", str(results), "--address", f"{HEAD_IP}:{PORT}"],
                         env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    df, corrupt = ResultStore(results).read()
    assert corrupt == [] and len(df) == 4 * 5
    assert not df.duplicated(["method", "seed", "config_id"]).any() and (df["status"] == "ok").all()
    assert set(df["node"]) == {HEAD_IP, WORKER_IP}, df["node"].value_counts()
