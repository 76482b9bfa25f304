"""The embedded Ray's reaper: run as a script (stdlib only, so it starts in milliseconds
without importing fairdp), it waits for the driver that started it to end, then SIGKILLs
every process that driver's embedded Ray started.

Ray ties its first processes to the driver (gcs_server, raylet, log monitor, dashboard die
with it by PR_SET_PDEATHSIG), but the raylet's children (DashboardAgent, RuntimeEnvAgent)
only notice the raylet's death and then block reporting it to the GCS, which is gone as
well: after a SIGKILLed driver they lived on for minutes. By then they are orphans (their
parent is init), so no process tree leads to them any more. Two records do:

- a mark, ``MARK_VARIABLE=<token>``, that the driver puts in its environment only while
  ``ray.init`` starts the node: each Ray process passes its environment on, so every process
  of the node carries it from its start, and nothing the driver starts later does;
- the node's processes, listed while the driver lives (pid and start time, so that a reused
  pid is never taken for one of them): the driver's marked children and all below them. The
  agents rewrite the memory that holds their environment for their process title, so the
  mark alone would miss them; they start with the node, and are listed then.

The processes to kill are those listed or marked, and their descendants. Nothing else is
touched: a user's own cluster, another run's embedded Ray, the processes the driver starts
outside ``ray.init`` (a tracking service that must outlive the session) and the user's
processes are in neither record. The driver's end is the end of the pipe on stdin (its only write end dies
with the driver, however it dies) or, should a fork of the driver still hold that end, this
process's parent changing. Linux is read from /proc; elsewhere psutil is used if importable.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

MARK_VARIABLE = "FAIRDP_EMBEDDED_RAY"
LIST_EVERY_S = (0.2, 1.0)  # while the node starts (its agents among the first), then once it runs
STARTING_S = 20.0
SWEEP_EVERY_S = 0.1
SWEEP_FOR_S = 10.0  # a process half-started at the driver's death shows up within this


def process_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, start time) of every live process of this machine (zombies are
    dead already, waiting for their parent to read their status)."""
    table = {}
    if os.path.isdir("/proc"):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            # after the command name (in parentheses, which may hold anything): state, ppid, ...
            fields = stat[stat.rfind(b")") + 2:].split()
            if fields[0] not in (b"Z", b"X"):
                table[int(entry)] = (int(fields[1]), float(fields[19]))
        return table
    try:
        import psutil
    except ImportError:
        return table
    for proc in psutil.process_iter(["ppid", "create_time", "status"]):
        if proc.info["status"] not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            table[proc.pid] = (proc.info["ppid"] or 0, proc.info["create_time"] or 0.0)
    return table


def has_mark(pid: int, mark: bytes) -> bool:
    if os.path.isdir("/proc"):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                return mark in f.read().split(b"\0")
        except OSError:  # gone, or another user's
            return False
    try:
        import psutil

        variable, _, value = mark.decode().partition("=")
        return psutil.Process(pid).environ().get(variable) == value
    except Exception:  # noqa: BLE001 - psutil missing, the process gone or not ours
        return False


def descendants(table: dict[int, tuple[int, float]], roots: set[int]) -> set[int]:
    """``roots`` and every process below them in ``table``."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = set(), [r for r in roots if r in table]
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, []))
    return found


def node_processes(driver_pid: int, table: dict[int, tuple[int, float]], mark: bytes,
                   marked: set[tuple[int, float]]) -> dict[int, float]:
    """pid -> start time of the driver's marked children and all below them; ``marked``
    remembers the children found marked. One not found marked is read again next time: until
    it has exec'd, a forked child shows the environment the driver was started with."""
    roots = set()
    for pid, (ppid, start) in table.items():
        if ppid == driver_pid and ((pid, start) in marked or has_mark(pid, mark)):
            marked.add((pid, start))
            roots.add(pid)
    return {pid: table[pid][1] for pid in descendants(table, roots)}


def wait_for_driver(driver_pid: int, mark: bytes, recorded: dict[int, float]) -> None:
    """List the node's processes into ``recorded`` until the pipe on stdin is closed or this
    process's parent is no longer the driver."""
    started, marked = time.monotonic(), set()
    while os.getppid() == driver_pid:
        recorded.update(node_processes(driver_pid, process_table(), mark, marked))
        every = LIST_EVERY_S[0] if time.monotonic() - started < STARTING_S else LIST_EVERY_S[1]
        readable, _, _ = select.select([sys.stdin.fileno()], [], [], every)
        if readable and not os.read(sys.stdin.fileno(), 4096):
            return


def kill_run(recorded: dict[int, float], mark: bytes, sweep_for_s: float = SWEEP_FOR_S) -> int:
    """SIGKILL the recorded and marked processes and their descendants until a sweep finds none
    twice running (one that was forking may show its child on the next): how many were killed."""
    killed, empty, deadline = 0, 0, time.monotonic() + sweep_for_s
    me = os.getpid()
    while empty < 2 and time.monotonic() < deadline:
        table = process_table()
        ours = {pid for pid, (_, start) in table.items()
                if pid != me and (recorded.get(pid) == start or has_mark(pid, mark))}
        doomed = descendants(table, ours) - {me}
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
            recorded[pid] = table[pid][1]  # its children, on the next sweep, through it
        empty = 0 if doomed else empty + 1
        time.sleep(SWEEP_EVERY_S)
    return killed


def main(argv: list[str]) -> int:
    driver_pid, mark = int(argv[1]), f"{MARK_VARIABLE}={argv[2]}".encode()
    recorded: dict[int, float] = {}
    wait_for_driver(driver_pid, mark, recorded)
    kill_run(recorded, mark)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
