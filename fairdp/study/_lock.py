"""One writer per results directory: a lock file naming its owner, with stale-lock detection.

Two ``fairdp run`` (or ``search``) of one study into one directory would both plan the same
packs and train them twice. The first takes ``<results>/.fairdp.lock`` (a hidden name, so
Parquet readers skip it) by an exclusive create and writes its pid, host and start time;
the second is refused with one line naming the owner. A lock whose owner is a process of
this host that no longer runs (a SIGKILL) is stale: it is taken over with a notice. A lock
from another host cannot be checked from here; the message says how to remove it.
Object-store results (s3://, gs://) have no such lock: run one writer at a time there.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path

from fairdp.errors import InputError

LOCK_NAME = ".fairdp.lock"


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
def results_lock(location: str, command: str, stream=None):
    """Hold the lock of the local results directory ``location`` for the block."""
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
                print(f"fairdp: {location}: taking over the lock of fairdp {owner.get('command', '')} "
                      f"(pid {pid}), which no longer runs", file=stream or sys.stderr, flush=True)
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
