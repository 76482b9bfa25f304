"""A pack's training checkpoint as a file of the results store (``ResultStore.checkpoint``):
apart from the store, because the engine's checkpoint type loads torch and a reader of rows
does not."""

from __future__ import annotations

import pyarrow.fs as pafs

from fairdp.engine._shared import CheckpointFile
from fairdp.study.store._store import ResultStore


class StoredCheckpoint(CheckpointFile):
    """A pack's training checkpoint as a file of the results store, replaced all at once."""

    def __init__(self, store: ResultStore, path: str):
        self.store, self.path, self.name = store, path, path

    def read(self) -> bytes | None:
        def read() -> bytes | None:
            if self.store.fs.get_file_info(self.path).type != pafs.FileType.File:
                return None
            with self.store.fs.open_input_stream(self.path) as f:
                return f.read()

        return self.store.retrying(self.path, read)

    def write(self, blob: bytes) -> None:
        def write(path: str) -> None:
            with self.store.fs.open_output_stream(path) as f:
                f.write(blob)

        self.store.retrying(self.path, lambda: self.store.fs.create_dir(self.path.rsplit("/", 1)[0], recursive=True))
        self.store.put(self.path, write, size=len(blob))

    def drop(self) -> None:
        def drop() -> None:
            if self.store.fs.get_file_info(self.path).type == pafs.FileType.File:
                self.store.fs.delete_file(self.path)

        self.store.retrying(self.path, drop)

