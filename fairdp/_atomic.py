"""Writes that never leave half a file: a hidden temporary beside the target, then a rename."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def unwritable_reason(path: str | os.PathLike) -> str | None:
    """Why a directory cannot be created or written at ``path``, naming the path at fault, or
    None if it can: checked before long work, which would otherwise fail at its end."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        return f"{path}: is a file, not a directory"
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing}: is a file, so {path} cannot be created under it"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing}: not writable, so {path} cannot be written"
    return None


def current_umask() -> int:
    """The process umask, read without changing it where /proc says it (Linux); elsewhere by
    setting it and back."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, prefix: str | None = None, private: bool = False) -> Iterator[Path]:
    """Yield a hidden temporary path beside ``target``; on success it replaces ``target``.

    Readers never see a partial file: the temporary name starts with a dot (``prefix``,
    default ``.<name>.``) and is synced to disk and moved into place with ``os.replace``
    only after the block completes; on error it is removed. A ``private`` file is readable
    by its owner only (0600), whatever the umask; others get the umask's mode.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix or f".{target.name}.", suffix=".part", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as f:  # on disk before the rename makes it visible
            os.fsync(f.fileno())
        # mkstemp creates 0600; another file gets the mode any new file would get
        if not private:
            os.chmod(tmp_path, 0o666 & ~current_umask())
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()
