"""Writes that never leave half a file: a hidden temporary beside the target, then a rename."""

from __future__ import annotations

import contextlib
import os
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fairdp.errors import InputError


def unwritable_reason(path: str | os.PathLike, sibling_room: int = 0) -> str | None:
    """Why a directory cannot be created and written at ``path``, naming the path at fault, or
    None if it can: checked before long work, which would otherwise fail at its end.

    Tried, not read from modes: root passes ``os.access`` where the kernel refuses (``/proc``,
    a read-only mount), and a name too long shows only when it is made. The missing folders
    are made, a hidden file is written in the directory and, with ``sibling_room``, one beside
    it whose name is that many characters longer than the directory's (where files named
    after it go); everything made is removed again, so a refused or dry run leaves nothing."""
    path = Path(os.path.abspath(path))
    made: list[Path] = []
    at, what = path, "cannot be created or written"
    try:
        if path.exists() and not path.is_dir():
            return f"{path}: is a file, not a directory"
        existing, missing = path, []
        while not existing.exists():
            missing.append(existing)
            existing = existing.parent
        if not existing.is_dir():
            return f"{existing}: is a file, so {path} cannot be created under it"
        for folder in reversed(missing):
            at = folder
            folder.mkdir()
            made.append(folder)
        at = path
        _touch(path / ".fairdp-write-check")
        if sibling_room:
            at, what = path, f"no room beside it for the files named after it ({sibling_room} characters more)"
            _touch(path.parent / f".{path.name}{'x' * sibling_room}")
    except OSError as e:
        return f"{shown(at)}: {what} ({e.strerror or type(e).__name__})"
    finally:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
    return None


def output_dir(location: str | os.PathLike, flag: str) -> Path:
    """The local folder a command writes its output into (a report), given as a path or a
    ``file://`` URI, checked before anything is read or drawn; InputError naming ``flag`` when
    it is empty, on another filesystem, or cannot be created or written (``unwritable_reason``)."""
    text = os.fspath(location)
    if not str(text).strip():  # Path("") is the current folder: never what an empty variable meant
        raise InputError(f"{flag}: empty; give the folder to write into")
    if "://" in str(text):
        scheme, _, rest = str(text).partition("://")
        if scheme.lower() != "file":
            raise InputError(f"{flag}: {text}: a local folder or file:// URI is needed, not {scheme}://")
        text = urllib.parse.unquote(urllib.parse.urlsplit(str(text)).path)
    reason = unwritable_reason(text)
    if reason:
        raise InputError(f"{flag}: {reason}")
    return Path(text)


def shown(path: str | os.PathLike, limit: int = 60) -> str:
    """``path`` for an error line: a name longer than ``limit`` cut, with its length."""
    path = Path(path)
    if len(path.name) <= limit:
        return str(path)
    return f"{path.parent / path.name[:limit]}... ({len(path.name)} characters)"


def _touch(path: Path) -> None:
    """Create ``path`` (refused if it exists: another's file is never removed) and remove it."""
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    os.unlink(path)


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


def write_files(files: Sequence[tuple[Path, bytes]], threads: int = 16) -> list[Path]:
    """Write each (path, data) of ``files`` as ``atomic_path`` writes one, a hidden temporary
    synced to disk and then renamed over its target, with the syncs run together: each sync
    one after another waits on the file system's journal (a report's hundred pages took 0.4 s
    here), sixteen at once share its commits. Readers never see part of a file; the files
    appear in their order once all are on disk; on an error none of them is renamed and every
    temporary is removed. Returns the paths."""
    temps: list[Path] = []
    try:
        for path, data in files:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
            temps.append(Path(tmp))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        with ThreadPoolExecutor(max_workers=max(1, min(threads, len(temps)))) as pool:
            list(pool.map(_fsync, temps))
        mode = 0o666 & ~current_umask()  # mkstemp creates 0600; the mode any new file would get
        for (path, _), tmp in zip(files, temps):
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        return [path for path, _ in files]
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike, prefix: str | None = None, private: bool = False,
                before_replace: Callable[[], None] | None = None) -> Iterator[Path]:
    """Yield a hidden temporary path beside ``target``; on success it replaces ``target``.

    Readers never see a partial file: the temporary name starts with a dot (``prefix``,
    default ``.<name>.``) and is synced to disk and moved into place with ``os.replace``
    only after the block completes; on error it is removed. A ``private`` file is readable
    by its owner only (0600), whatever the umask; others get the umask's mode.
    ``before_replace`` runs once the file is on disk, just before the rename (a worker's last
    check that its driver lives: nothing it stores can then appear after the driver's kill).
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix or f".{target.name}.", suffix=".part", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        _fsync(tmp_path)  # on disk before the rename makes it visible
        # mkstemp creates 0600; another file gets the mode any new file would get
        if not private:
            os.chmod(tmp_path, 0o666 & ~current_umask())
        if before_replace is not None:
            before_replace()
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()
