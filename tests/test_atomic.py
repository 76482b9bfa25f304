"""``write_files``: a batch of files written as ``atomic_path`` writes one, its syncs together."""

from __future__ import annotations

import os

import pytest

import fairdp._atomic as atomic
from fairdp._atomic import write_files


def test_every_file_is_on_disk_before_any_appears_and_each_gets_the_umasks_mode(tmp_path, monkeypatch):
    files = [(tmp_path / "a" / f"page-{i}.md", f"page {i}".encode()) for i in range(20)]
    files.append((tmp_path / "report.md", b"first page"))
    synced = []

    def fsync(path):
        assert not any(target.exists() for target, _ in files)  # nothing visible before every sync
        synced.append(path)
        real_fsync(path)

    real_fsync = atomic._fsync
    monkeypatch.setattr(atomic, "_fsync", fsync)
    old = os.umask(0o027)
    try:
        assert write_files(files) == [path for path, _ in files]
    finally:
        os.umask(old)
    assert len(synced) == len(files)
    for path, data in files:
        assert path.read_bytes() == data and path.stat().st_mode & 0o777 == 0o640
    assert not [p for p in tmp_path.rglob(".*.part")]


def test_a_failed_sync_renames_nothing_and_leaves_no_temporary(tmp_path, monkeypatch):
    (tmp_path / "old.md").write_bytes(b"previous report")
    files = [(tmp_path / "old.md", b"new"), (tmp_path / "new.md", b"new")]

    def fsync(path):
        raise OSError("disk full")

    monkeypatch.setattr(atomic, "_fsync", fsync)
    with pytest.raises(OSError, match="disk full"):
        write_files(files)
    assert (tmp_path / "old.md").read_bytes() == b"previous report"
    assert not (tmp_path / "new.md").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.md"]
