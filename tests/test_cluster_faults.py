"""A sweep that survives losing a machine: a three-host Ray cluster (head + 2 workers, each
a network namespace, token authentication on), results on a real S3-protocol server (moto's
server mode on the head's address, reached through pyarrow's S3FileSystem), and a test per
fault: a worker host killed, a worker host cut off the network; and, on one study's runs
(each cluster run costs minutes here), a second driver refused, the driver killed and rerun,
and the S3 server stopped for 20 s during the rerun. Each ends the same way: the rows are
the plan, none twice by (method, seed, config_id), and every metric equals an uninterrupted
run's bit for bit (same CPU, one thread per trial). The uninterrupted runs train in the
background from the module's first test on, on what the clusters leave idle. Each test
prints what it measured (``pytest -s`` shows it): the time to detect the fault, the packs
trained again, the run's wall time.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest
import yaml

from fairdp import schema
from fairdp.study import ResultStore
from tests.conftest import REPO
from tests.netns import NETNS_REASON, Cluster, netns_usable, stop_group
from tests.s3server import CREDENTIALS, S3Server, available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("netns"),  # the namespace clusters run on one xdist worker, one at a time
    pytest.mark.skipif(not netns_usable(), reason=NETNS_REASON),
    pytest.mark.skipif(available() is not None, reason=str(available())),
]

STUDY = {
    "name": "faults",
    "dataset": {"name": "synthetic", "rows": 6000, "features": 10},
    "seeds": [0, 1],
    "train": {"epochs": 12, "batch_size": 100},
    "evaluate": {"leakage": False, "mdl": False},
    "methods": {"unconstrained": {}, "federate": {"grid": {"eps": [1, 10], "lam": [0.5, 1.0, 1.5]}}},
    "pack_size": 1,  # 14 packs, a few seconds each on one core
    "resources": {"max_failures": 3},
}
KEY = list(schema.ROW_KEY)
S3_PORT = 9000


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    path = tmp_path_factory.mktemp("study") / "faults.yaml"
    path.write_text(yaml.safe_dump(STUDY))
    return path


# ``python -m fairdp ARGS`` under SCHED_IDLE (set before any thread starts; its threads inherit it).
# The reference starts a session of its own, and where the kernel groups each session
# (sched_autogroup_enabled, as here) a policy ranks a process only within its session: the
# reference then takes an equal share of a core, not what the clusters leave idle (a SCHED_IDLE
# busy loop in a session of its own took half a core from a normal one here). Niced in its
# autogroup too it was starved by the slow set's other workers, and the killed-host test waited
# 1,092 s for it instead of 213 s: an equal share is what lets the references finish in time.
IDLE_FAIRDP = ("import os, sys; os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0)); "
               "os.execv(sys.executable, [sys.executable, '-m', 'fairdp', *sys.argv[1:]])")


class Reference:
    """An uninterrupted run of a study, trained in this process's namespace with the local
    executor: the same packs, the same one thread per pack, the same CPU. Started in the
    background (:class:`References`); :meth:`rows` waits for it."""

    def __init__(self, study, results):
        self.study, self.results = study, results
        self.done = threading.Event()
        self.proc: subprocess.Popen | None = None
        self.error: str | None = None
        self.seconds: float | None = None  # its wall time, from its start in the background
        self.waited_s = 0.0  # how long the last test that compared with it waited for it

    def run(self, lock: threading.Lock, stop: threading.Event) -> None:
        t0 = time.monotonic()
        log = self.results.parent / "run.log"
        try:
            with open(log, "w") as out:
                with lock:  # References.stop kills what runs, and nothing starts after it
                    if stop.is_set():
                        raise RuntimeError("stopped before it started")
                    # SCHED_IDLE: it trains on what the clusters leave idle, and any other
                    # process takes its core at once (a fault test's timing is the cluster's);
                    # the scheduler changes no bit of what it trains
                    self.proc = subprocess.Popen([sys.executable, "-c", IDLE_FAIRDP, "run", str(self.study),
                                                  "--results", str(self.results), "--executor", "local"], cwd=REPO,
                                                 env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT,
                                                 start_new_session=True)
                rc = self.proc.wait()
            if rc != 0:
                self.error = f"the reference run exited with {rc}:\n{log.read_text()[-2000:]}"
        except BaseException as e:  # noqa: BLE001 - said by rows()
            self.error = f"the reference run did not run: {e!r}"
        finally:
            self.seconds = time.monotonic() - t0
            self.done.set()

    def rows(self, timeout: float = 900) -> pd.DataFrame:
        t0 = time.monotonic()
        assert self.done.wait(timeout), f"the reference run of {self.study} did not end within {timeout} s"
        self.waited_s = time.monotonic() - t0
        assert self.error is None, self.error
        df, _ = ResultStore(self.results).read()
        return df


class References:
    """The reference runs this module's selected tests compare with, one after another in one
    background thread (each trains on one core: two at once would share the one the clusters
    leave idle), in the order the tests need them, from the module's first test on: they train
    while the clusters start and while a fault leaves a core idle (a killed host's, a cut-off
    host's), instead of before the first test that needs each (~90 s and ~110 s alone on 2
    cores, a quarter of the module's time). A test that compares before its reference has
    finished waits for it, which then has the CPU to itself. Measured on 2 cores: both done
    before they were needed, the fault runs beside them a few seconds slower."""

    def __init__(self, runs: list[Reference]):
        self.runs = runs
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._thread = threading.Thread(target=self._run, name="references", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for ref in self.runs:
            ref.run(self._lock, self._stop)

    def stop(self) -> None:
        with self._lock:
            self._stop.set()
            for ref in self.runs:
                if ref.proc is not None and ref.proc.poll() is None:
                    stop_group(ref.proc, signal.SIGKILL)
        self._thread.join(timeout=30)


@pytest.fixture(scope="module")
def references(request, study, long_study, tmp_path_factory):
    studies = {"reference": study, "long_reference": long_study}
    order = []
    for item in request.session.items:  # the selected tests of this module, in the order they run
        if item.module is request.module:
            order += [name for name in studies if name in getattr(item, "fixturenames", ()) and name not in order]
    runs = {name: Reference(studies[name], tmp_path_factory.mktemp(name) / "results") for name in order}
    background = References(list(runs.values()))
    try:
        yield runs
    finally:
        background.stop()


@pytest.fixture(scope="module")
def reference(references) -> Reference:
    return references["reference"]


@pytest.fixture(scope="module")
def long_study(tmp_path_factory):
    """STUDY's first seed with packs of ~15 s: a driver's death kills its trials within a second
    or two (Ray's fate sharing), and a 3 s pack killed mid-way could still finish and drop its
    checkpoint in that time. One seed's 7 packs: a kill after 3 leaves 2 in training and 2 to
    start (what the test needs), and the uninterrupted reference, trained one pack after
    another, takes half as long as both seeds' would. 50 epochs: ~15 s a pack with the compiled
    Laplace kernel (36 took 15 s on the NumPy path, 10-12 s with the kernel, and the test's
    window for a pack's first checkpoint closed before the watcher started)."""
    path = tmp_path_factory.mktemp("study") / "long.yaml"
    path.write_text(yaml.safe_dump({**STUDY, "seeds": [0], "train": {**STUDY["train"], "epochs": 50}}))
    return path


@pytest.fixture(scope="module")
def long_reference(references) -> Reference:
    return references["long_reference"]


def _start_s3(c: Cluster) -> None:
    """The S3 server on the head's address, started as soon as the network is up: it comes up
    while Ray does (a process of the cluster's, so that its teardown ends it too)."""
    c.s3 = S3Server(host=c.head_ip, port=S3_PORT, netns=c.head, log_path=str(c.logs / "s3.out"), wait=False)
    c.procs[c.head].append(c.s3.proc)


@pytest.fixture
def cluster(tmp_path):
    with Cluster(tmp_path, workers=2, on_network=_start_s3) as c:
        try:
            c.s3.wait()
            c.env.update(CREDENTIALS)
            yield c
        finally:
            c.s3.stop()


class Driver:
    """``fairdp run`` on the head host against the cluster; its stderr lines timestamped."""

    def __init__(self, cluster: Cluster, study, uri: str, name: str, env: dict | None = None):
        self.cluster, self.lines, self.t0 = cluster, [], time.monotonic()
        self.proc = cluster.popen(cluster.head, [sys.executable, "-m", "fairdp", "run", str(study), "--results", uri,
                                                 "--address", cluster.address, "--checkpoint-every", "1"],
                                  log="", env={**cluster.env, **(env or {})}, cwd=REPO,
                                  stdout=open(cluster.logs / f"{name}.out", "w"), stderr=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def wait_for(self, pattern: str, timeout: float = 300) -> float:
        """The time (monotonic) of the first stderr line matching ``pattern``."""
        return self.wait_for_line(pattern, timeout)[0]

    def wait_for_line(self, pattern: str, timeout: float = 300) -> tuple[float, str]:
        """The first stderr line matching ``pattern`` and its time (monotonic)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, line in list(self.lines):
                if re.search(pattern, line):
                    return t, line
            assert self.proc.poll() is None or self._reader.is_alive(), \
                f"driver exited ({self.proc.returncode}) before {pattern!r}:\n{self.text()[-3000:]}"
            time.sleep(0.1)
        raise AssertionError(f"no line matching {pattern!r} within {timeout} s:\n{self.text()[-3000:]}")

    def finish(self, timeout: float = 600) -> tuple[int, float]:
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return rc, time.monotonic() - self.t0

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def retried(self) -> int:
        found = [int(m.group(1)) for _, ln in self.lines if (m := re.search(r"(\d+) retried", ln))]
        return max(found, default=0)


def _packs_done(n: int, packs: int = 14) -> str:
    return rf"packs ({'|'.join(str(k) for k in range(n, packs + 1))})/{packs} done"


def _stored(cluster: Cluster, uri: str):
    """The rows stored under ``uri``, read on the head host (the store is only reachable there)."""
    import pandas as pd

    code = (f"import json; from fairdp.study import ResultStore; df, bad = ResultStore({uri!r}).read(); "
            f"ck = ResultStore({uri!r}).checkpoint_ids(); "
            f"print(json.dumps({{'rows': df.to_dict('records'), 'bad': [c.path for c in bad], 'ckpt': ck}}, "
            f"default=str))")
    out = cluster.python(code, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return pd.DataFrame(got["rows"]), got["bad"], got["ckpt"]


def _wait_for_checkpoints(cluster: Cluster, uri: str, n: int, timeout: float = 120, new: bool = False,
                          freeze: str | None = None) -> list[str]:
    """Return as soon as ``n`` packs have a checkpoint in the store at once (with ``new``, one
    of them a pack that saved its first checkpoint after this started: a pack just begun),
    listed every 0.1 s by one process on the head host (the store is only reachable there).

    With ``freeze`` (a host), that process then SIGSTOPs every process of the host at once and
    returns the checkpoints listed after that: the frozen host can neither finish its pack
    (deleting its checkpoint) nor start another, so the list holds its checkpoint as it is when
    it dies (a kill from the test after a separate listing raced the host's pack finishing in
    between)."""
    code = (f"import os, signal, subprocess, time; from fairdp.study import ResultStore\n"
            f"store = ResultStore({uri!r})\n"
            f"before = set(store.checkpoint_ids()) if {new!r} else None\n"
            f"while len(ids := store.checkpoint_ids()) < {n} or (before is not None and not set(ids) - before):\n"
            f"    time.sleep(0.1)\n")
    if freeze is not None:
        code += (f"for pid in subprocess.run(['ip', 'netns', 'pids', {freeze!r}], capture_output=True, "
                 f"text=True).stdout.split():\n"
                 f"    try:\n"
                 f"        os.kill(int(pid), signal.SIGSTOP)\n"
                 f"    except ProcessLookupError:\n"
                 f"        pass\n"
                 f"ids = store.checkpoint_ids()\n")
    code += "print(' '.join(ids))"
    out = cluster.python(code, timeout=timeout)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def _assert_complete_and_equal(cluster: Cluster, uri: str, reference: Reference) -> object:
    df, bad, checkpoints = _stored(cluster, uri)
    reference = reference.rows()
    assert bad == [] and checkpoints == []
    assert len(df) == len(reference) and not df.duplicated(KEY).any(), df[KEY].value_counts().head()
    assert set(map(tuple, df[KEY].values)) == set(map(tuple, reference[KEY].values))
    assert (df["status"] == "ok").all(), df.loc[df["status"] != "ok", "error"].tolist()
    a = df.set_index(KEY).sort_index()
    b = reference.set_index(KEY).sort_index()
    for col in [c for c in schema.METRIC_COLUMNS if c in b.columns] + [schema.TEST_CONFUSION]:
        mine, theirs = a[col].tolist(), b[col].tolist()
        same = [x == y or (x != x and y != y) or (x is None and y is None) for x, y in zip(mine, theirs)]
        assert all(same), f"{col} differs from the uninterrupted run: {mine} vs {theirs}"
    return df


def _report(name: str, **figures) -> None:
    print(f"\nFAULT {name}: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                         for k, v in figures.items()), flush=True)


def test_a_worker_host_killed_mid_pack_has_its_packs_retried_on_the_survivor(cluster, study, reference):
    uri = cluster.s3.uri(cluster.s3.bucket(), "results")
    trace = cluster.logs / "progress-trace.json"
    driver = Driver(cluster, study, uri, "driver", {"FAIRDP_PROGRESS_TRACE": str(trace)})
    driver.wait_for(_packs_done(2))
    # freeze, then kill, once both hosts are mid-pack with a checkpoint in S3 (saved every
    # second): a fixed sleep raced a slower machine's pack start-up and killed a host before
    # its first save; `left` is what S3 holds from the frozen host when it dies
    left = _wait_for_checkpoints(cluster, uri, 2, freeze=cluster.workers[0])
    killed = cluster.kill_host(cluster.workers[0])
    # every process of the host has had its SIGKILL: no row made after this is the dead host's
    t_kill, killed_at = time.monotonic(), pd.Timestamp(time.time(), unit="s", tz="UTC")
    t_detect = driver.wait_for(r"[1-9]\d* retried", timeout=180)
    t_resize = driver.wait_for(r"1 pack\(s\) at a time from now on", timeout=60)
    rc, wall = driver.finish()
    assert killed and rc == 0, driver.text()[-3000:]
    df = _assert_complete_and_equal(cluster, uri, reference)
    survivor = cluster.worker_ips[1]
    # each pack's host and finish time against the kill's: however many packs finished before
    # it (a loaded machine finishes fewer), every pack finished after it ran on the survivor
    finished = pd.to_datetime(df["finished_at"], utc=True)
    after = df[finished > killed_at]
    assert len(after) and set(after["node"]) == {survivor}, \
        (killed_at, df.assign(finished_at=finished)[["pack_id", "node", "finished_at"]].sort_values("finished_at"))
    # the dead host's pack (the one the driver restarted) had its checkpoint in S3 when the
    # host died, and the survivor finished that pack
    events = json.loads(trace.read_text())["events"]
    restarted = {e["key"] for e in events if e["kind"] == "restart"}
    orphaned = restarted & set(left)
    assert orphaned and orphaned <= set(df.loc[df["node"] == survivor, "pack_id"]), \
        (restarted, left, df[["pack_id", "node"]])
    # the progress saw the cluster shrink to one slot (its ETA spreads the rest over it; the
    # trace is replayed in tests/test_study_progress.py)
    shrink = [e for e in events if e["kind"] == "slots"]
    assert shrink and shrink[0]["slots"] == 1, shrink
    _report("worker killed", detect_s=t_detect - t_kill, slots_seen_s=t_resize - t_kill,
            retried_packs=driver.retried(), checkpoints_in_s3_at_kill=len(left), wall_s=wall,
            nodes=dict(df["node"].value_counts()), finished_after_kill=len(after), reference_s=reference.seconds,
            waited_for_reference_s=reference.waited_s)


def test_a_worker_host_cut_off_the_network_then_restored(cluster, study, reference):
    uri = cluster.s3.uri(cluster.s3.bucket(), "results")
    driver = Driver(cluster, study, uri, "driver")
    driver.wait_for(_packs_done(2))
    cluster.cut(cluster.workers[0])
    t_cut = time.monotonic()
    try:
        t_detect = driver.wait_for(r"[1-9]\d* retried", timeout=180)
    finally:
        cluster.restore(cluster.workers[0])
    t_restore = time.monotonic()
    rc, wall = driver.finish()
    assert rc == 0, driver.text()[-3000:]
    # the cut-off host's trial, if it finished, may store its pack after the restore: read the
    # rows once no trial runs there (its workers watch the driver, which has ended)
    quiet_s = cluster.wait_for_no_trials([cluster.workers[0]])
    _assert_complete_and_equal(cluster, uri, reference)
    _report("network cut", detect_s=t_detect - t_cut, cut_for_s=t_restore - t_cut, retried_packs=driver.retried(),
            wall_s=wall, trials_gone_after_s=quiet_s, waited_for_reference_s=reference.waited_s)


# a progress line of packs that train: config-epochs done, packs still running
TRAINING = r"\| [1-9][\d,]*/[\d,]+ config-epochs \| packs (\d+)/(\d+) done[^|]*, ([1-9]\d*) running"


def test_a_second_driver_is_refused_a_killed_driver_rerun_resumes_from_s3_and_survives_a_20_s_s3_stop(
        cluster, long_study, long_reference):
    """Three faults on one study (each cluster run costs minutes here): a second driver on the
    same results, started once the first holds their lease, is refused; the first is killed
    mid-pack, and its rerun resumes from the packs and checkpoints in S3; while the rerun's
    packs train, the S3 server stops for 20 s."""
    study, reference = long_study, long_reference
    uri = cluster.s3.uri(cluster.s3.bucket(), "results")
    env = {"FAIRDP_LEASE_TTL_S": "15"}
    first = Driver(cluster, study, uri, "first", env)
    first.wait_for(_packs_done(1, packs=7))  # it holds the results' lease: the second starts with the run ahead
    refused = Driver(cluster, study, uri, "refused")
    rc2, _ = refused.finish(timeout=120)
    errors = [ln for _, ln in refused.lines if ln.startswith("fairdp: error:")]
    assert rc2 == 2 and len(errors) == 1 and "in use by fairdp run" in errors[0], refused.text()
    assert first.proc.poll() is None, "the refused driver stopped the first: " + first.text()[-3000:]
    first.wait_for(_packs_done(3, packs=7))
    # kill when a pack has just saved its first checkpoint: it is ~1 s into ~15 s of training
    _wait_for_checkpoints(cluster, uri, 1, new=True)
    first.proc.send_signal(signal.SIGKILL)
    t_kill = time.monotonic()
    first.finish()
    # what the rerun finds stored is what the first run left once none of its trials runs
    cluster.wait_for_no_trials(cluster.workers)
    stored_before, _, checkpoints = _stored(cluster, uri)
    assert len(stored_before) >= 3 and checkpoints, "the kill should leave stored packs and checkpoints"
    # the rerun's own lease has the default time to live (60 s), as any run's that loses its S3
    # server for 20 s: one of 15 s would be lost if a renewal failed during the stop
    second = Driver(cluster, study, uri, "second")
    # the dead driver's lease (15 s): waited out, or taken over when it expired while the kill's
    # trials were stopping (a loaded machine takes longer than the 15 s TTL for that)
    second.wait_for(r"no longer runs, expires in|took over the lease of")
    second.wait_for(rf"\d+ of the packs resume from checkpoints in {re.escape(uri.split('?')[0].split('//')[1])}")
    # stop the S3 server once the rerun's packs train (a pack has reported epochs): their
    # checkpoints and rows meet a server that does not answer
    _, line = second.wait_for_line(TRAINING, timeout=180)
    done_at_pause, packs_left, running_at_pause = map(int, re.search(TRAINING, line).groups())
    assert second.proc.poll() is None and done_at_pause < packs_left, line
    cluster.s3.pause()
    t_pause = time.monotonic()
    time.sleep(20)
    cluster.s3.resume()
    rc, wall = second.finish()
    assert rc == 0, second.text()[-3000:]
    done = re.search(r"(\d+) configs already stored", second.text())
    assert done and int(done.group(1)) == len(stored_before)
    _assert_complete_and_equal(cluster, uri, reference)
    _report("second driver refused, driver killed, then s3 stopped 20 s", first_until_kill_s=t_kill - first.t0,
            stored_before=len(stored_before), resumed_checkpoints=len(checkpoints), rerun_wall_s=wall,
            from_kill_s=time.monotonic() - t_kill, s3_paused_at_s=t_pause - second.t0,
            packs_done_at_pause=f"{done_at_pause}/{packs_left}", running_at_pause=running_at_pause,
            retried_packs=second.retried(), reference_s=reference.seconds, waited_for_reference_s=reference.waited_s)
