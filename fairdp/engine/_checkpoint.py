"""Checkpoints of a pack in training: a run killed mid-pack resumes it from its last saved
epoch, not from its first.

A checkpoint is ``fit_pack``'s whole training state (each chunk's step with its model and
random streams, optimiser, minibatch order and best-epoch record, and the outcomes of chunks
already finished) pickled as one object graph, so that what is shared stays shared when it
is loaded (a parameter is one object in the model, the optimiser's state and the best-epoch
record) and training goes on exactly as it would have: a resumed pack's outcomes are bit for
bit an uninterrupted one's. The dataset and the progress callback are not saved; they are
attached again on load.

Where a checkpoint lives is the caller's (``CheckpointFile``; a study keeps them in its
results directory). ``fit_pack`` takes one as its ``checkpoint`` argument (a ``Checkpointing``:
the file and how often to save to it).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import pickle
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch

from fairdp.errors import StoreFault

logger = logging.getLogger(__name__)

FORMAT = 3  # bump when what is pickled changes shape (2: counter-based PackStreams; 3: per-epoch valid curves)
# at the end of training a pack saves if it trained this long since its last save: a pack of
# seconds (on a GPU) is cheaper to retrain than to write
FINAL_SAVE_S = 60.0


class CheckpointFile(ABC):
    """Where one pack's checkpoint is kept."""

    name: str  # for messages

    @abstractmethod
    def read(self) -> bytes | None:
        """The saved bytes, None when there are none."""

    @abstractmethod
    def write(self, blob: bytes) -> None:
        """Replace the saved bytes, all or nothing."""

    @abstractmethod
    def drop(self) -> None:
        """Delete the checkpoint, if there is one."""


@dataclass(frozen=True)
class Checkpointing:
    """A ``fit_pack``'s checkpoints: saved to ``file`` every ``every_s`` seconds (and when training
    ends), resumed from when ``file`` holds one of the same pack."""

    file: CheckpointFile
    every_s: float  # save after the first epoch that ends this long after the last save


def identity(**parts) -> str:
    """What a checkpoint must have been saved by to be resumed: the pack's configs and their
    ids, seed, settings, architecture, data (``data_fingerprint``), device kind, and the torch
    that pickled its random streams."""
    text = json.dumps({**{k: repr(v) for k, v in parts.items()}, "format": FORMAT, "torch": torch.__version__},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def data_fingerprint(data) -> str:
    """A digest of a dataset's labels, groups, splits and a strided sample of its feature rows:
    a checkpoint trained on other data (another encoding, sensitive attribute or split seed
    of the same dataset) is not resumed, and hashing stays milliseconds for large datasets.
    Kept in local checkpoints only: rows publish ``published_data_fingerprint``."""
    h = hashlib.sha256(data.name.encode())
    stride = max(1, len(data.X) // 4096)
    for array in (data.X[::stride], data.y, data.s, *(data.splits[n] for n in sorted(data.splits))):
        h.update(str(array.shape).encode())
        h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()


def published_data_fingerprint(data) -> str:
    """The digest a result row publishes (its ``protocol``): the dataset's name, labels, splits
    and feature shape, never its protected attributes nor feature values (which hold the
    attribute when it is a feature). ``data_fingerprint`` hashes the groups too: anyone who
    knows the other records could try each single change of a record's attribute against a
    published hash of them and read it off, outside every mechanism's guarantee."""
    h = hashlib.sha256(data.name.encode())
    for array in (np.asarray(data.X.shape), data.y, *(data.splits[n] for n in sorted(data.splits))):
        h.update(str(array.shape).encode())
        h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()


class _Pickler(pickle.Pickler):
    """Pickles the state with ``external`` objects (the dataset, the callback) left out by name."""

    def __init__(self, f, external: dict[str, object]):
        super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)
        self._names = {id(obj): name for name, obj in external.items() if obj is not None}

    def persistent_id(self, obj):
        return self._names.get(id(obj))


class _Unpickler(pickle.Unpickler):
    def __init__(self, f, external: dict[str, object]):
        super().__init__(f)
        self._external = external

    def persistent_load(self, pid):
        return self._external[pid]


def dumps(key: str, state: dict, external: dict[str, object]) -> bytes:
    buf = io.BytesIO()
    buf.write(key.encode() + b"\n")
    _Pickler(buf, external).dump(state)
    return buf.getvalue()


def loads(blob: bytes, key: str, external: dict[str, object]) -> dict | None:
    """The state saved under ``key``, or None when ``blob`` was saved for something else."""
    head, _, body = blob.partition(b"\n")
    if head.decode(errors="replace") != key:
        return None
    # a checkpoint is read from the run's own results directory, written by fairdp
    return _Unpickler(io.BytesIO(body), external).load()


class Saver:
    """Saves a ``fit_pack``'s state when due; loads the saved one at its start."""

    def __init__(self, checkpointing: Checkpointing | None, key: str, external: dict[str, object]):
        self.checkpointing, self.key, self.external = checkpointing, key, external
        self.last = time.monotonic()

    def load(self) -> dict | None:
        if self.checkpointing is None:
            return None
        file = self.checkpointing.file
        blob = file.read()
        if blob is None:
            return None
        try:
            state = loads(blob, self.key, self.external)
        except Exception as e:  # noqa: BLE001 - a bad checkpoint costs its saved epochs, never the run
            logger.warning("fairdp: %s: unreadable checkpoint (%s: %s); training from the first epoch",
                           file.name, type(e).__name__, e)
            return None
        if state is None:
            logger.warning("fairdp: %s: checkpoint of another pack or setting; training from the first epoch",
                           file.name)
        return state

    def due(self, done: bool = False) -> bool:
        """Whether to save now: ``every_s`` has passed since the last save; or training is
        ``done`` and has gone on long enough since then to be worth a write (a kill while the
        pack is evaluated would otherwise lose it)."""
        if self.checkpointing is None:
            return False
        since = time.monotonic() - self.last
        return since >= self.checkpointing.every_s or (done and since >= min(self.checkpointing.every_s, FINAL_SAVE_S))

    def save(self, state: dict) -> None:
        """Save ``state``; if it cannot be (a plugin step holding a lambda, a full disk), say
        so once and train on without checkpoints: a checkpoint must never cost the pack."""
        file = self.checkpointing.file
        try:
            file.write(dumps(self.key, state, self.external))
        except StoreFault:
            raise  # the pack's rows could not be stored either: stop now
        except Exception as e:  # noqa: BLE001
            logger.warning("fairdp: %s: cannot save a checkpoint (%s: %s); this pack trains on without them",
                           file.name, type(e).__name__, e)
            self.checkpointing = None
            return
        self.last = time.monotonic()
