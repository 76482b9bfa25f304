"""Writes that never leave half a file: a hidden temporary beside the target, then a rename."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, prefix: str | None = None) -> Iterator[Path]:
    """Yield a hidden temporary path beside ``target``; on success it replaces ``target``.

    Readers never see a partial file: the temporary name starts with a dot (``prefix``,
    default ``.<name>.``) and is synced to disk and moved into place with ``os.replace``
    only after the block completes; on error it is removed.
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
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()
