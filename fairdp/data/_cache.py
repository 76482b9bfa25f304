"""Where data lives on disk, checksums, and writes that never leave half a file."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from fairdp._atomic import atomic_path  # noqa: F401  (the loaders' writer; re-exported)


def data_dir() -> Path:
    """The cache root: ``$FAIRDP_DATA_DIR``, else ``$XDG_CACHE_HOME/fairdp``, else ``~/.cache/fairdp``."""
    if os.environ.get("FAIRDP_DATA_DIR"):
        return Path(os.environ["FAIRDP_DATA_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "fairdp"


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
