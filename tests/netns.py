"""Ray clusters of several "hosts" on this machine, each host a network namespace.

Ray rewrites ``--node-ip-address=127.0.0.1`` to the machine's interface address on Linux
and refuses a second node forced onto loopback, so each host gets its own namespace. The
head's namespace holds a bridge; each worker's namespace is joined to it by a veth pair
whose head end can be set down to cut that host off the network. Processes are started
each in its own process group, and teardown ends exactly what this module created: those
groups, then anything left inside its namespaces (all started here), then the namespaces,
which removes their links.

A node is up once its ``ray start`` says "Ray runtime started.": Ray prints it only after the
node has registered with the cluster's GCS (``ray._private.node.Node`` waits for that), so
the wait reads the logs, and asks the GCS once, at the end, that every node is alive.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

RAY = os.path.join(os.path.dirname(sys.executable), "ray")
STARTED = "Ray runtime started."  # what `ray start` says once its node is registered with the GCS


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def netns_usable() -> bool:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    probe = f"fdp-probe-{uuid.uuid4().hex[:6]}"
    try:
        ip("netns", "add", probe)
    except (subprocess.CalledProcessError, OSError):
        return False
    ip("netns", "del", probe)
    return True


NETNS_REASON = "needs root and `ip netns` (network namespaces)"


def ns_pids(ns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def kill_namespace(ns: str) -> list[int]:
    """SIGKILL every process inside ``ns`` (a host losing power): returns their pids."""
    pids = ns_pids(ns)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


TRIAL_PROCESS = b"ray::ImplicitFunc"  # how Ray titles the worker process of a Tune trial (a pack)


def trial_pids(ns: str) -> list[int]:
    """Pids in ``ns`` of processes that run (or ran, and wait for) a Tune trial."""
    found = []
    for pid in ns_pids(ns):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().startswith(TRIAL_PROCESS):
                    found.append(pid)
        except OSError:
            continue
    return found


def packs_at_once(events: list[dict]) -> int:
    """The most packs running at once in a progress trace (``FAIRDP_PROGRESS_TRACE``), as its
    driver saw them: from a pack's start (its trial holds its CPUs) to its finish (stored)."""
    running, most = set(), 0
    for ev in sorted(events, key=lambda e: e["t"]):
        if ev["kind"] == "start":
            running.add(ev["key"])
        elif ev["kind"] == "finish":
            running.discard(ev["key"])
        most = max(most, len(running))
    return most


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass


class Cluster:
    """A head host and ``workers`` worker hosts on one bridge (10.<net>.0.0/24), Ray with
    token authentication on every node. Use as a context manager. ``on_network``, if given, is
    called with the cluster once the hosts' network is up, before Ray starts on them: a service
    started there (a process of :meth:`popen`) comes up while Ray does."""

    def __init__(self, root: Path, workers: int = 2, head_cpus: int = 0, worker_cpus: int = 1, port: int = 6391,
                 net: int = 214, on_network: Callable[[Cluster], None] | None = None):
        self.root, self.n_workers, self.head_cpus, self.worker_cpus, self.port = root, workers, head_cpus, \
            worker_cpus, port
        tag = uuid.uuid4().hex[:6]
        self.tag = tag
        self.head = f"fdp-h-{tag}"
        self.workers = [f"fdp-w{i}-{tag}" for i in range(workers)]
        self.head_ip = f"10.{net}.0.1"
        self.worker_ips = [f"10.{net}.0.{i + 2}" for i in range(workers)]
        self.bridge = f"fdb{tag}"
        self.links = {ns: f"fdv{i}{tag}" for i, ns in enumerate(self.workers)}  # head-side end of each veth
        self.address = f"{self.head_ip}:{port}"
        self.env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32), PYTHONUNBUFFERED="1")
        for key in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_AUTH_TOKEN_PATH"):
            self.env.pop(key, None)
        self.on_network = on_network
        self.procs: dict[str, list[subprocess.Popen]] = {}
        self.ray: dict[str, subprocess.Popen] = {}  # each host's latest `ray start`
        self.created: list[str] = []
        self.temp_dirs: list[str] = []
        self.logs = root / "cluster-logs"

    # -- set-up and teardown ---------------------------------------------------------------
    def __enter__(self) -> Cluster:
        try:
            self._network()
            self.logs.mkdir(exist_ok=True)
            if self.on_network is not None:
                self.on_network(self)
            self.start_ray(self.head)
            self.wait_for_nodes(1, confirm=False)  # the workers join the head's GCS: up once the head is
            for ns in self.workers:
                self.start_ray(ns)
            self.wait_for_nodes(1 + self.n_workers)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _network(self) -> None:
        for ns in (self.head, *self.workers):
            ip("netns", "add", ns)
            self.created.append(ns)
            self.procs[ns] = []
            ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", self.head, "link", "add", self.bridge, "type", "bridge")
        ip("-n", self.head, "addr", "add", f"{self.head_ip}/24", "dev", self.bridge)
        ip("-n", self.head, "link", "set", self.bridge, "up")
        for ns, addr in zip(self.workers, self.worker_ips):
            link, peer = self.links[ns], f"fdp{self.links[ns][3:]}"
            ip("link", "add", link, "type", "veth", "peer", "name", peer)
            ip("link", "set", link, "netns", self.head)
            ip("link", "set", peer, "netns", ns)
            ip("-n", self.head, "link", "set", link, "master", self.bridge)
            ip("-n", self.head, "link", "set", link, "up")
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", peer)
            ip("-n", ns, "link", "set", peer, "up")

    def __exit__(self, *exc) -> None:
        for ns in self.created:
            for proc in self.procs.get(ns, []):
                stop_group(proc)
        # a few seconds' grace for what this module started besides Ray (a driver's last
        # words), then SIGKILL for all: `ray start` answers SIGTERM by draining its node for up
        # to 30 s (every teardown waited out the grace it had: 20 s, then 3 s), and nothing
        # outlives the namespaces and temp dirs removed below
        ray = set(map(id, self.ray.values()))
        others = [p for ns in self.created for p in self.procs.get(ns, []) if id(p) not in ray]
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and any(p.poll() is None for p in others):
            time.sleep(0.1)
        for ns in self.created:
            kill_namespace(ns)
            for proc in self.procs.get(ns, []):
                stop_group(proc, signal.SIGKILL)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        for ns in self.created:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.created = []
        for d in self.temp_dirs:
            shutil.rmtree(d, ignore_errors=True)

    # -- processes ---------------------------------------------------------------------------
    def popen(self, ns: str, args: list[str], log: str, env: dict | None = None, **kw) -> subprocess.Popen:
        """Start ``args`` inside host ``ns`` in its own process group, output to ``log``."""
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *args], env=env or self.env, cwd=kw.pop("cwd", None),
                                stdout=open(self.logs / log, "w") if log else kw.pop("stdout"),
                                stderr=subprocess.STDOUT if log else kw.pop("stderr"), start_new_session=True, **kw)
        proc.log_path = self.logs / log if log else None
        self.procs.setdefault(ns, []).append(proc)
        return proc

    def start_ray(self, ns: str) -> subprocess.Popen:
        # Ray's AF_UNIX socket paths must stay under 108 bytes: short temp dirs
        temp = tempfile.mkdtemp(prefix="fdp-ray-", dir="/tmp")
        self.temp_dirs.append(temp)
        if ns == self.head:
            args = [RAY, "start", "--block", "--head", f"--node-ip-address={self.head_ip}", f"--port={self.port}",
                    f"--num-cpus={self.head_cpus}", "--include-dashboard=false", f"--temp-dir={temp}"]
        else:
            addr = self.worker_ips[self.workers.index(ns)]
            args = [RAY, "start", "--block", f"--address={self.address}", f"--node-ip-address={addr}",
                    f"--num-cpus={self.worker_cpus}", f"--temp-dir={temp}"]
        self.ray[ns] = self.popen(ns, args, f"ray-{ns}-{len(self.procs.get(ns, []))}.out")
        return self.ray[ns]

    def python(self, code: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run Python ``code`` on the head host."""
        return subprocess.run(["ip", "netns", "exec", self.head, sys.executable, "-c", code], env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def alive_nodes(self) -> int | None:
        out = self.python(f"import ray; ray.init(address='{self.address}', logging_level='ERROR'); "
                          "print(sum(1 for x in ray.nodes() if x['Alive']))")
        lines = out.stdout.strip().splitlines()
        return int(lines[-1]) if out.returncode == 0 and lines and lines[-1].isdigit() else None

    def started_nodes(self) -> int:
        """Hosts whose latest ``ray start`` runs and has said its node is registered."""
        return sum(1 for proc in self.ray.values() if proc.poll() is None and STARTED in tail(proc, None))

    def wait_for_nodes(self, n: int, timeout: float = 120, confirm: bool = True) -> None:
        """Wait until ``n`` hosts' ``ray start`` have said their node is registered, then (with
        ``confirm``) until the GCS counts ``n`` live nodes: one Python with Ray on the head
        where polling that count alone took one per second, each seconds of CPU."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ns, proc in self.ray.items():
                assert proc.poll() is None, f"{ns}: ray start exited with {proc.returncode}: {tail(proc)}"
            if self.started_nodes() >= n and (not confirm or self.alive_nodes() == n):
                return
            time.sleep(0.2)
        raise AssertionError(f"the cluster did not reach {n} live nodes: {self.started_nodes()} started")

    def wait_for_no_trials(self, hosts: list[str], timeout: float = 120) -> float:
        """Wait until no trial process runs on ``hosts`` (nothing there can store a pack any
        more): the seconds it took. A worker exits within a second of its driver's end."""
        t0 = time.monotonic()
        while left := {ns: trial_pids(ns) for ns in hosts if trial_pids(ns)}:
            assert time.monotonic() - t0 < timeout, f"trial processes still run after {timeout} s: {left}"
            time.sleep(0.2)
        return time.monotonic() - t0

    # -- faults ------------------------------------------------------------------------------
    def kill_host(self, ns: str) -> list[int]:
        return kill_namespace(ns)

    def cut(self, ns: str) -> None:
        ip("-n", self.head, "link", "set", self.links[ns], "down")

    def restore(self, ns: str) -> None:
        ip("-n", self.head, "link", "set", self.links[ns], "up")


def tail(proc: subprocess.Popen, n: int | None = 1500) -> str:
    """The last ``n`` characters (None: all) of ``proc``'s log."""
    log = getattr(proc, "log_path", None)
    if not log:
        return ""
    with open(log) as f:
        text = f.read()
    return text if n is None else text[-n:]
