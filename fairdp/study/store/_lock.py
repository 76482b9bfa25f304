"""One writer per results directory: a lock file naming its owner, with stale-lock detection.

Two ``fairdp run`` (or ``search``) of one study into one directory would both plan the same
packs and train them twice. The first takes ``<results>/.fairdp.lock`` (a hidden name, so
Parquet readers skip it) by an exclusive create and writes its pid, host and start time;
the second is refused with one line naming the owner. A lock whose owner is a process of
this host that no longer runs (a SIGKILL) is stale: it is taken over with a notice. A lock
from another host cannot be checked from here; the message says how to remove it.
Object-store results have their own lease instead (``_lease.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from pathlib import Path

from fairdp.errors import InputError

logger = logging.getLogger(__name__)

LOCK_NAME = ".fairdp.lock"
WORKERS_DIR = ".fairdp-workers"  # <host>-<pid> of each process training a pack of the lock's run
WORKER_WAIT_S = 120.0


def alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _owner(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def results_lock(location: str, command: str):
    """Hold the lock of the local results directory ``location`` for the block; taking over a
    stale one is a warning of the ``fairdp`` logger."""
    root = Path(location)
    root.mkdir(parents=True, exist_ok=True)
    path = root / LOCK_NAME
    me = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
          "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            owner = _owner(path)
            if owner is None:  # being written this instant, or garbage: look once more
                time.sleep(0.2)
                owner = _owner(path) or {}
            host, pid = owner.get("host"), owner.get("pid")
            if host == me["host"] and isinstance(pid, int) and not alive(pid):
                logger.warning("fairdp: %s: taking over the lock of fairdp %s (pid %s), which no longer runs",
                               location, owner.get("command", ""), pid)
                wait_for_workers(root)  # its workers could still store a pack
                path.unlink(missing_ok=True)
                continue
            if host == me["host"]:
                raise InputError(f"{location}: in use by fairdp {owner.get('command', '?')} (pid {pid}, since "
                                 f"{owner.get('since', '?')}); wait for it to finish or pass another --results") from None
            raise InputError(f"{location}: in use by fairdp {owner.get('command', '?')} on {host} (pid {pid}, since "
                             f"{owner.get('since', '?')}); if that run is gone, delete {path}") from None
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        break
    else:
        raise InputError(f"{location}: could not take the lock {path}")
    try:
        yield
    finally:
        if (_owner(path) or {}).get("pid") == me["pid"]:
            path.unlink(missing_ok=True)


def _worker_files(root: Path) -> list[Path]:
    folder = root / WORKERS_DIR
    return sorted(folder.iterdir()) if folder.is_dir() else []


@contextlib.contextmanager
def registered_worker(location: str):
    """Mark this process, for the block, as training a pack into the local results
    ``location``: a run that takes over the lock of a killed run waits for such processes."""
    folder = Path(location) / WORKERS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    mark = folder / f"{socket.gethostname()}-{os.getpid()}"
    mark.touch()
    try:
        yield
    finally:
        mark.unlink(missing_ok=True)


def wait_for_workers(root: Path, timeout_s: float = WORKER_WAIT_S) -> None:
    """Wait until no process of this host registered as a worker of ``root`` runs (a killed
    run's Ray workers stop within a second of their driver, ``exits_with_driver``); marks of
    processes that are gone are removed. InputError if some still run after ``timeout_s``."""
    host = socket.gethostname()
    deadline, said = time.monotonic() + timeout_s, False
    while True:
        running = []
        for mark in _worker_files(root):
            mark_host, _, pid = mark.name.rpartition("-")
            if mark_host != host or not pid.isdigit():
                continue  # another host's worker cannot be checked from here
            if alive(int(pid)):
                running.append(int(pid))
            else:
                mark.unlink(missing_ok=True)
        if not running:
            return
        if time.monotonic() > deadline:
            raise InputError(f"{root}: processes {', '.join(map(str, running))} of a killed fairdp run still train "
                             f"into it after {timeout_s:g} s; wait for them to stop, or pass another --results")
        if not said:
            logger.info("fairdp: %s: waiting for %d worker process(es) of the killed run to stop", root, len(running))
            said = True
        time.sleep(0.2)


DRIVER_GONE_EXIT = 70


def exit_if_driver_gone(host: str, pid: int) -> None:
    """In a worker process of this ``host``: exit at once if the driver ``pid`` is gone."""
    if host == socket.gethostname() and not alive(pid):
        os._exit(DRIVER_GONE_EXIT)


@contextlib.contextmanager
def exits_with_driver(driver: tuple[str, int] | None, every_s: float = 0.25):
    """For the block (a pack in training, in a worker process): end this process at once, with
    ``os._exit`` and no cleanup, when the ``driver`` (host, pid) is gone, so that a killed run
    stores nothing after its kill (Ray's workers outlive a SIGKILLed driver by seconds). On
    leaving, one last check closes the gap between the watch's polls and the rows' store. A
    driver of another host, or none (a pack run in the driver's own process), is not watched."""
    if driver is None or driver[0] != socket.gethostname():
        yield
        return
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(every_s):
            exit_if_driver_gone(*driver)

    thread = threading.Thread(target=watch, name=f"fairdp-watch-driver-{driver[1]}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    exit_if_driver_gone(*driver)
