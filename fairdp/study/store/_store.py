"""The results store: one Parquet file per pack under ``<root>/<dataset>/<method>/``.

Each pack file is written whole under a hidden temporary name in its own directory and
then moved into place, so a reader (which ignores names starting with '.') sees a pack's
rows all at once or not at all, even if the writer is killed mid-write. A pack's file name
is a hash of (method, seed, its config ids): a retried pack replaces its own file instead
of adding a copy. ``root`` is a local path or a URI that pyarrow's filesystems understand
(``file://``, ``s3://``, ``gs://``); on object stores a single PUT is already atomic, so the
file is written directly, and every object-store operation a pack makes (its rows, its
checkpoint) is retried with bounded back-off while the store does not answer.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import shutil
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from fairdp import schema
from fairdp._atomic import atomic_path, unwritable_reason
from fairdp.errors import DiskFull, InputError, StoreUnavailable, is_disk_full, last_line

if TYPE_CHECKING:
    from fairdp.study.store._checkpoint import StoredCheckpoint

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 30.0
PROBE_TIMEOUT_ENV = "FAIRDP_STORE_PROBE_TIMEOUT_S"
RETRY_S = 300.0  # how long an object-store operation is retried before the run stops
RETRY_ENV = "FAIRDP_STORE_RETRY_S"
RETRY_MAX_DELAY_S = 10.0
# how much longer than the results folder's own name a file beside it may be named: a side
# table's hidden temporary, ".tmp-<name>.hypervolume-<method>-seed<seed>.parquet.<8 random
# characters from mkstemp>.part", with a method name of up to 40 characters and a 19-digit seed
SIDE_NAME_ROOM = 104
HISTORY = "history"  # <root>.history: each pack's per-epoch valid curves, named as its rows
LEGACY_JOURNAL = "optuna.journal"  # a search's journal as fairdp once named it; the next search renames it
# what pyarrow's S3 client (the AWS SDK) says when the store does not answer, is overloaded
# or restarting: worth retrying. Anything else (no such bucket, access denied) is not.
_TRANSIENT = ("network_connection", "curlcode", "couldn't connect", "connection refused", "connection reset",
              "timed out", "timeout", "service_unavailable", "serviceunavailable", "slow_down", "slowdown",
              "internal_failure", "internalerror", "broken pipe", "503")


def transient(error: BaseException) -> bool:
    """Whether an object-store error is one a retry can cure (the store unreachable or busy)."""
    text = str(error).lower()
    return isinstance(error, OSError) and any(t in text for t in _TRANSIENT)

_ARROW_TYPES = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(),
                "timestamp[ms, UTC]": pa.timestamp("ms", tz="UTC")}


S3_CONNECT_TIMEOUT_S = 10.0
S3_REQUEST_TIMEOUT_S = 30.0  # a request that moves no byte for this long fails (and is retried)


def _s3_with_timeouts(location: str, fs: pafs.S3FileSystem) -> pafs.S3FileSystem:
    """``fs`` (opened from the URI ``location``) with connect and request timeouts: without
    them a request to a store that stopped answering waits forever, and no retry or error
    ever comes. The client's own retries are off: ``ResultStore.retrying`` bounds them in
    time instead (three attempts of a stalled request would take minutes). The URI's options (``region``, ``scheme``, ``endpoint_override``, bucket
    creation and deletion) are kept."""
    query = {k: v[0] for k, v in urllib.parse.parse_qs(urllib.parse.urlsplit(location).query).items()}
    flags = {k: query[k].lower() in ("1", "true", "yes") for k in ("allow_bucket_creation", "allow_bucket_deletion")
             if k in query}
    return pafs.S3FileSystem(region=fs.region, scheme=query.get("scheme", "https"),
                             endpoint_override=query.get("endpoint_override"), connect_timeout=S3_CONNECT_TIMEOUT_S,
                             request_timeout=S3_REQUEST_TIMEOUT_S,
                             retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1), **flags)


def study_columns(methods=()) -> list[tuple[str, str]]:
    """(name, type) of every column of a study's rows: the fixed columns of ``fairdp.schema``
    and one column per hyperparameter of fairdp's own methods (``schema.BUILTIN_HYPERPARAMETERS``)
    and of ``methods`` (the study's, plugins included). Every file of a study has exactly these
    columns."""
    hyperparams = [schema.Hyperparameter(name, kind) for name, kind in schema.BUILTIN_HYPERPARAMETERS.items()]
    if methods:
        # the registry (its methods import torch): only for a study's methods, never to read rows
        from fairdp.methods import builtin_method_names, get_method

        builtin = set(builtin_method_names())
        hyperparams += [h for n in dict.fromkeys(methods) if n not in builtin for h in get_method(n).hyperparams]
    return schema.result_columns(hyperparams)


def arrow_schema(columns) -> pa.Schema:
    return pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in columns])


def pack_id(method: str, seed: int, config_ids) -> str:
    blob = f"{method}/{seed}/" + ",".join(sorted(config_ids))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class CorruptSideTable(InputError):
    """A side table beside the results (a plan, a front) that cannot be read or is not fairdp's."""

    def __init__(self, path: str, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"{path}: corrupt or foreign ({reason}); `fairdp run --repair` moves it aside (or delete "
                         f"it and rerun the fairdp command that wrote it)")


def read_or_move_aside(store: ResultStore, read, repair: bool, who: str = "fairdp"):
    """``read(store)``, a side table; when it is corrupt or foreign (``CorruptSideTable``) that
    is the error, unless ``repair``: then the file is moved aside (a warning of the ``fairdp``
    logger, said as ``who``) and None returned, as for a table never written."""
    try:
        return read(store)
    except CorruptSideTable as e:
        if not repair:
            raise
        moved = store.move_aside(e.path)
        logger.warning("%s: moved aside %s (%s) to %s", who, e.path, e.reason, moved)
        return None


@dataclass(frozen=True)
class CorruptFile:
    """A file among the rows that ``ResultStore.read`` leaves out, and why: ``kind`` "corrupt"
    (unreadable, truncated), "foreign" (not a pack file of fairdp's: its name, a column missing
    or of another type) or "duplicate" (configs another pack file holds too)."""

    path: str
    reason: str
    kind: str = ""

    @property
    def what(self) -> str:
        kind = self.kind or ("foreign" if self.reason.startswith("not a fairdp file") else "corrupt")
        return {"foreign": "foreign file in the results", "duplicate": "duplicate rows in the results"}.get(
            kind, "corrupt or truncated results file")


class ResultStore:
    """Pack files of one results location (a directory or a filesystem URI)."""

    def __init__(self, location: str | os.PathLike, filesystem: pafs.FileSystem | None = None,
                 columns=None):
        """``filesystem`` (optional) is used with ``location`` as its path, e.g. an fsspec
        filesystem wrapped in ``pyarrow.fs.PyFileSystem``; otherwise the URI picks it.
        ``columns``: the (name, type) of every row written (default ``study_columns()``)."""
        self.columns = tuple(columns) if columns else tuple(study_columns())
        self.schema = arrow_schema(self.columns)
        location = str(location)
        if filesystem is not None:
            self.fs, self.root = filesystem, location
        else:
            if "://" not in location:
                location = os.path.abspath(location)
            try:
                self.fs, self.root = pafs.FileSystem.from_uri(location)
            except (pa.ArrowInvalid, ValueError, OSError) as e:
                raise InputError(f"--results {location}: cannot open ({e})") from None
            if self.fs.type_name == "s3":
                self.fs = _s3_with_timeouts(location, self.fs)
        self.root = self.root.rstrip("/")
        self.location = location
        self.is_local = isinstance(self.fs, pafs.LocalFileSystem)

    @property
    def endpoint(self) -> str:
        """The object store's address as errors name it: an S3 URI's ``endpoint_override``,
        else ``AWS_ENDPOINT_URL(_S3)``, else the filesystem's kind."""
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.location).query)
        if "endpoint_override" in query:
            host = query["endpoint_override"][0]
            return host if "://" in host else f"{query.get('scheme', ['https'])[0]}://{host}"
        kind = self.fs.type_name
        if kind == "s3":
            return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or \
                f"AWS S3 ({getattr(self.fs, 'region', '') or 'default region'})"
        return kind

    def retrying(self, what: str, op):
        """``op()``, retried on an object store while it fails with a transient error, with
        back-off doubling to ``RETRY_MAX_DELAY_S``, for at most ``FAIRDP_STORE_RETRY_S``
        (default ``RETRY_S``) seconds; then ``StoreUnavailable`` naming the endpoint. Every
        operation retried is idempotent (a whole object put, read or deleted)."""
        if self.is_local:
            return op()
        budget = float(os.environ.get(RETRY_ENV, RETRY_S))
        t0, delay, said = time.monotonic(), 0.5, False
        while True:
            try:
                return op()
            except OSError as e:
                if not transient(e):
                    raise
                waited = time.monotonic() - t0
                cause = last_line(" ".join(str(e).split()), type(e).__name__, 200)
                if waited + delay > budget:
                    raise StoreUnavailable(self.location, self.endpoint, waited, cause) from None
                if not said:
                    logger.warning("fairdp: %s: the object store at %s did not answer (%s); retrying for up to %s s",
                                   what, self.endpoint, cause, f"{budget:g}")
                    said = True
                time.sleep(delay)
                delay = min(2 * delay, RETRY_MAX_DELAY_S)

    # -- writing ---------------------------------------------------------------------------
    def pack_path(self, dataset: str, method: str, seed: int, pid: str) -> str:
        return f"{self.root}/{dataset}/{method}/part-s{seed}-{pid}.parquet"

    def write_pack(self, rows: list[dict], dataset: str, method: str, seed: int, pid: str,
                   before_commit: Callable[[], None] | None = None) -> str:
        """Write a pack's rows as one file, atomically; returns its path. ``before_commit`` runs
        just before the file appears (``put``)."""
        unknown = sorted({k for r in rows for k in r} - set(self.schema.names))
        if unknown:  # a column the store does not know would be silently dropped
            raise ValueError(f"write_pack: columns {unknown} are not in the study's columns")
        table = pa.Table.from_pylist([{c: r.get(c) for c in self.schema.names} for r in rows], schema=self.schema)
        return self._write_in_dir(table, self.pack_path(dataset, method, seed, pid), before_commit)

    def has_pack(self, dataset: str, method: str, seed: int, pid: str) -> bool:
        """Whether pack ``pid``'s rows are stored as its own file (``write_pack`` makes it whole or
        not at all); a compacted pack's rows are in its seed's merged file instead."""
        path = self.pack_path(dataset, method, seed, pid)
        return self.retrying(path, lambda: self.fs.get_file_info(path).type == pafs.FileType.File)

    def history_of(self, pack_path: str) -> str:
        """Where the pack whose rows are at ``pack_path`` keeps its per-epoch valid curves: the
        same path under ``<root>.history`` (beside the rows, not among them: a glob over the
        rows must not read them)."""
        return self.side_table_path(HISTORY) + pack_path[len(self.root):]

    def write_history(self, frame: pd.DataFrame, dataset: str, method: str, seed: int, pid: str) -> str:
        """Write a pack's per-epoch curves as one file, atomically, named as its rows are: a
        pack trained twice replaces its curves, as it does its rows."""
        return self._write_in_dir(pa.Table.from_pandas(frame, preserve_index=False),
                                  self.history_of(self.pack_path(dataset, method, seed, pid)))

    def _write_in_dir(self, table: pa.Table, final: str, before_commit: Callable[[], None] | None = None) -> str:
        """``table`` written atomically at ``final``, its folder made first."""
        self.retrying(final, lambda: self.fs.create_dir(final.rsplit("/", 1)[0], recursive=True))
        return self._write(table, final, before_commit)

    def read_history(self) -> pd.DataFrame:
        """Every pack's per-epoch valid curves as one DataFrame (empty when none were written);
        InputError naming a file that cannot be read."""
        tables = {}
        for path in self._part_files(self.side_table_path(HISTORY)):
            try:
                tables[path] = pq.read_table(path, filesystem=self.fs)
            except (pa.ArrowException, OSError) as e:
                raise InputError(f"{path}: corrupt per-epoch curves ({str(e).splitlines()[0]}); delete it (the "
                                 f"pack's rows do not depend on it)") from None
        for path in superseded({p: merged_names(t.schema) for p, t in tables.items()}):  # a killed compaction's
            del tables[path]
        tables = list(tables.values())
        if not tables:
            return pd.DataFrame(columns=["study", "dataset", "method", "seed", "config_id", "epoch", "kept"])
        return pa.concat_tables(tables, promote_options="permissive").to_pandas()

    def write_side_table(self, df: pd.DataFrame, name: str) -> str:
        """A side table (e.g. a Pareto front) beside the results, at ``<root>.<name>``, written
        atomically. Not inside: a ``DIR/**/*.parquet`` glob (duckdb, polars) would read it as
        rows, and pandas or pyarrow would fail on its other schema."""
        parent = self.root.rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        return self._write(pa.Table.from_pandas(df, preserve_index=False), self.side_table_path(name))

    def side_table_path(self, name: str) -> str:
        return f"{self.root}.{name}"

    def read_side_table(self, name: str) -> pd.DataFrame | None:
        """The side table ``name`` beside the results, or None when none was written;
        InputError naming it when it cannot be read."""
        path = self.side_table_path(name)
        if self.fs.get_file_info(path).type != pafs.FileType.File:
            return None
        try:
            return pq.read_table(path, filesystem=self.fs).to_pandas()
        except (pa.ArrowException, OSError) as e:
            raise CorruptSideTable(path, str(e).splitlines()[0]) from None

    def _write(self, table: pa.Table, final: str, before_commit: Callable[[], None] | None = None) -> str:
        return self.put(final, lambda path: pq.write_table(table, path, filesystem=self.fs), size=table.nbytes,
                        before_commit=before_commit)

    def put(self, final: str, write, size: int | None = None, before_commit: Callable[[], None] | None = None) -> str:
        """``write(path)`` a file that appears at ``final`` all at once: on an object store its
        single PUT already is; locally it is written under a hidden ``.tmp-`` name (which
        ``remove_temporaries`` deletes if the writer is killed) and renamed. A full disk is
        ``DiskFull``, naming the file, about the space it needs (``size``, its expected bytes,
        else twice what was written) and the space free. ``before_commit`` runs once the file is
        written and synced, just before its rename; on an object store, before the PUT."""
        if not self.is_local:
            if before_commit is not None:
                before_commit()
            self.retrying(final, lambda: write(final))
            return final
        try:
            # private: rows and checkpoints hold the seed, from which every noise draw follows
            with atomic_path(final, prefix=f".tmp-{final.rsplit('/', 1)[1]}.", private=True,
                             before_replace=before_commit) as tmp:
                try:
                    write(str(tmp))
                finally:
                    written = tmp.stat().st_size if tmp.exists() else None
        except (OSError, pa.ArrowException) as e:
            if not is_disk_full(e):
                raise
            directory, name = final.rsplit("/", 1)
            free = shutil.disk_usage(directory).free if os.path.isdir(directory) else None
            # what a file like it took: the largest sibling of its kind (a Parquet footer alone is
            # ~15 KB, far above its rows' bytes), else what was asked or written
            siblings = [e.stat().st_size for e in os.scandir(directory) if e.is_file()
                        and not e.name.startswith(".") and e.name.rsplit(".", 1)[-1] == name.rsplit(".", 1)[-1]] \
                if os.path.isdir(directory) else []
            raise DiskFull(final, max([size or 0, written or 0, *siblings]) or None, free) from None
        return final

    def check_writable(self, named_by: str = "--results") -> None:
        """InputError naming the path unless rows, and the side tables beside them, can be
        written at this local location (tried: ``unwritable_reason``): checked before anything
        trains or is written (a file, an unwritable directory or a name too long would otherwise
        fail every pack after its training). ``named_by``: what chose the location, for the
        error ("name" for the default ``results/<name>``). An object store answers ``probe``."""
        if not self.is_local:
            return
        reason = unwritable_reason(self.root, sibling_room=SIDE_NAME_ROOM)
        if reason and named_by == "--results":
            raise InputError(f"--results: {reason}; pass another --results")
        if reason:
            raise InputError(f"{named_by}: {reason}; the study's {named_by} makes the default results folder: pass "
                             f"--results or a shorter {named_by}")

    def probe(self, timeout_s: float | None = None) -> None:
        """InputError naming the location unless an object store answers within ``timeout_s``
        (default ``PROBE_TIMEOUT_S``, or ``FAIRDP_STORE_PROBE_TIMEOUT_S``): without credentials
        or network a client may retry for many minutes, saying nothing. Local paths answer at once."""
        if self.is_local:
            return
        timeout_s = float(os.environ.get(PROBE_TIMEOUT_ENV, PROBE_TIMEOUT_S)) if timeout_s is None else timeout_s
        outcome: dict = {}

        def ask() -> None:
            try:
                outcome["info"] = self.fs.get_file_info(self.root)
            except Exception as e:  # noqa: BLE001 - any client error is the user's one line
                outcome["error"] = e

        worker = threading.Thread(target=ask, daemon=True)  # a client stuck retrying is left behind
        worker.start()
        worker.join(timeout_s)
        if worker.is_alive():
            raise InputError(f"--results {self.location}: the object store did not answer within {timeout_s:g} s "
                             f"(no credentials, no network, or no such bucket?)")
        if "error" in outcome:
            e = outcome["error"]
            raise InputError(f"--results {self.location}: cannot be reached ({type(e).__name__}: "
                             f"{' '.join(str(e).split())[:300]})")

    # -- reading ---------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.fs.get_file_info(self.root).type == pafs.FileType.Directory

    def pack_files(self) -> list[str]:
        """Pack files (names ``part-*.parquet``, no hidden path component), sorted."""
        return self._part_files(self.root)

    def _part_files(self, root: str, others: list[str] | None = None) -> list[str]:
        """The files ``<root>/<dataset>/<method>/part-*.parquet`` with no hidden path component,
        sorted: a pack's rows under the root, its curves under ``<root>.history``. Every other
        file with no hidden path component is appended to ``others``, when given."""
        if self.fs.get_file_info(root).type != pafs.FileType.Directory:
            return []
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(root, recursive=True))
        except FileNotFoundError:  # removed since: a starting run's writability probe removes what it made
            return []
        out = []
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            # some filesystems (fsspec's) report '/bucket/...' for a root given as 'bucket/...'
            rel = info.path.lstrip("/")[len(root.lstrip("/")) + 1:]
            parts = rel.split("/")
            if any(p.startswith((".", "_")) for p in parts):
                continue
            if parts[-1].startswith("part-") and parts[-1].endswith(".parquet") and len(parts) == 3:
                out.append(f"{root}/{rel}")  # named as pack_path names it, whatever the filesystem says
            elif others is not None and rel != LEGACY_JOURNAL:
                others.append(f"{root}/{rel}")
        if others is not None:
            others.sort()
        return sorted(out)

    def read(self, *, on_corrupt: str = "raise", columns=None,
             without: Sequence[str] = ()) -> tuple[pd.DataFrame, list[CorruptFile]]:
        """All rows as one DataFrame (schemas unified) and the files left out of it
        (``CorruptFile``): unreadable or truncated ones, files that are not fairdp's (named or
        placed otherwise, a key column missing, a column of another type than fairdp writes, or
        than most files hold, for a column fairdp does not know) and pack files holding configs
        another file holds too (each config counts once; the file named as its rows' pack is kept).

        ``on_corrupt="raise"`` makes any of them an ``InputError`` naming it; "collect" leaves
        them out of the rows (``--repair`` then moves them aside). ``columns``: only these are
        read and returned (those the files hold), beside what the checks read (the keys, the
        status, the pack id); all by default. ``without``: columns neither read nor returned
        (a command that needs neither split's confusion counts leaves out their text).
        """
        others: list[str] = []
        paths = self._part_files(self.root, others)
        corrupt = [CorruptFile(path, MISPLACED, "foreign") for path in others]
        # each file's footer first (its schema, no data): what is not fairdp's is left out unread
        schemas: dict[str, pa.Schema] = {}
        kinds = DistinctSchemas()  # files share a handful of schemas: each is checked once
        kind_of: dict[str, int] = {}  # a file's schema, as a number of ``kinds``
        reasons: dict[int, str | None] = {}
        for path in paths:
            try:
                file_schema = pq.read_schema(path, filesystem=self.fs)
            except (pa.ArrowException, OSError) as e:
                corrupt.append(self._unreadable(path, e))
                continue
            kind = kinds.of(file_schema)
            if kind not in reasons:
                reasons[kind] = foreign_reason(kinds[kind]) or self._retyped(kinds[kind])
            foreign = reasons[kind]
            if foreign:
                corrupt.append(CorruptFile(path, foreign, "foreign"))
                continue
            schemas[path], kind_of[path] = file_schema, kind
        names = {p: merged_names(s) for p, s in schemas.items()}
        for path in superseded(names):  # merged by a killed compaction
            del schemas[path]
        for bad in _odd_types(schemas, set(self.schema.names), kinds, kind_of):
            corrupt.append(bad)
            del schemas[bad.path]
        table, unreadable = self._scan(schemas, columns, [kinds[i] for i in dict.fromkeys(kind_of[p] for p in schemas)],
                                       without)
        corrupt += unreadable
        merged = {path for path in schemas if names[path]}
        files = list(schemas)  # a row's FILE is its file's place here
        bad = _duplicated_packs(table, files, merged) if table is not None else []
        if bad:
            corrupt += bad
            gone = pa.array([files.index(b.path) for b in bad], pa.int32())
            table = table.filter(pc.invert(pc.is_in(table.column(FILE), gone)))
        if corrupt and on_corrupt == "raise":
            raise corrupt_error(corrupt)
        wanted = [c for c in (self.schema.names if columns is None else columns) if c not in set(without)]
        if table is None or not table.num_rows:
            return pd.DataFrame({c: pd.Series(dtype=object) for c in wanted}), corrupt
        if columns is not None:
            table = table.select([c for c in table.column_names if c in set(columns) and c not in set(without)])
        else:
            table = table.drop_columns([FILE, *(c for c in without if c in table.column_names)])
        dictionaries = [f.name for f in table.schema if pa.types.is_dictionary(f.type)]
        # each column's Arrow buffers freed as it converts: the peak is about the frame, not twice it
        df = table.to_pandas(split_blocks=True, self_destruct=True)
        del table
        # the conversion's freed buffers back to the system: Arrow's allocator keeps them
        # otherwise (a third of a gigabyte at a million rows), and pandas never reuses them
        pa.default_memory_pool().release_unused()
        for name in dictionaries:  # read as a dictionary (``_scan_files``)
            df[name] = df[name].astype(object)
        return df, corrupt

    def _unreadable(self, path: str, e: BaseException) -> CorruptFile:
        """The corrupt file ``path`` that could not be read (``e``); a file this user may not
        read is an InputError instead: it is healthy, and ``--repair`` would move it aside."""
        # pyarrow words EACCES its own way
        if isinstance(e, PermissionError) or "permission denied" in str(e).lower():
            raise InputError(f"{path}: cannot be read (permission denied); ask its owner, or pass "
                             f"another --results") from None
        return CorruptFile(path, _first_line(e), "corrupt")

    def _scan(self, schemas: dict[str, pa.Schema], columns,
              distinct: list[pa.Schema], without: Sequence[str] = ()) -> tuple[pa.Table | None, list[CorruptFile]]:
        """The rows of the files of ``schemas`` as one table, read in one columnar scan (their
        schemas, ``distinct`` the different ones, unified, a column a file lacks null there; of
        ``columns`` and the checks' own, when given; never of ``without`` unless a check reads
        it) with the file of each row (``FILE``), and
        the files whose data could not be read although their footer could (a truncated page):
        those are found file by file, and left out."""
        if not schemas:
            return None, []
        try:
            unified = pa.unify_schemas(distinct, promote_options="permissive")
        except (pa.ArrowException, ValueError) as e:  # checked file by file above: a case those checks miss
            raise InputError(f"{self.location}: its pack files do not combine into one table "
                             f"({_first_line(e)})") from None
        if columns is not None or without:
            keep = {*(unified.names if columns is None else columns), *_CHECKED}
            skip = set(without) - set(_CHECKED)
            unified = pa.schema([f for f in unified if f.name in keep and f.name not in skip], metadata=unified.metadata)
        try:
            return self._scan_files(list(schemas), unified), []
        except (pa.ArrowException, OSError):
            pass
        readable, unreadable = [], []
        for path in schemas:  # the scan failed on a file's data: find which, read the others
            try:
                pq.read_table(path, filesystem=self.fs)
                readable.append(path)
            except (pa.ArrowException, OSError) as e:
                unreadable.append(self._unreadable(path, e))
        return (self._scan_files(readable, unified) if readable else None), unreadable

    def _scan_files(self, paths: list[str], unified: pa.Schema) -> pa.Table:
        """The rows of ``paths`` in one scan, with each row's file as its place in ``paths``
        (``FILE``). Text columns that repeat from row to row (every one but ``PER_ROW_TEXT``)
        are read as Parquet stores them, as dictionaries: a million rows of a study's protocol
        text are then one text and a million indices, not a million copies (``read`` hands
        them to pandas as one Python object per distinct text)."""
        repeated = [f.name for f in unified if f.type == pa.string() and f.name not in PER_ROW_TEXT]
        unified = pa.schema([pa.field(f.name, pa.dictionary(pa.int32(), pa.string())) if f.name in repeated else f
                             for f in unified], metadata=unified.metadata)
        parquet = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=repeated))
        place = {path: i for i, path in enumerate(paths)}
        batches, files = [], []
        # a dataset keeps each file's footer once it has read it (~100 KB at fairdp's width):
        # scanned a thousand files at a time, 50,000 files take a fifth of the memory
        for start in range(0, len(paths), SCAN_FILES):
            dataset = ds.dataset(paths[start:start + SCAN_FILES], schema=unified, format=parquet, filesystem=self.fs)
            for tagged in dataset.scanner().scan_batches():
                batches.append(tagged.record_batch)
                files.append(pa.array(np.full(tagged.record_batch.num_rows, place[tagged.fragment.path], np.int32)))
        table = pa.Table.from_batches(batches, schema=unified)
        return table.append_column(FILE, pa.chunked_array(files, pa.int32()))

    def _retyped(self, file_schema: pa.Schema) -> str | None:
        """Why a pack file's column is not of the type fairdp writes it in (the store's
        ``columns``), or None."""
        for field in file_schema:
            if field.name in self.schema.names and not pa.types.is_null(field.type):  # nulls join any type
                want = self.schema.field(field.name).type
                if not _same_kind(field.type, want):
                    return f"not a fairdp file: column '{field.name}' holds {field.type}, not {want}"
        return None

    def move_aside(self, path: str) -> str:
        """Rename a bad file to a hidden name beside it: readers skip it, its configs run again."""
        directory, name = path.rsplit("/", 1)
        target = f"{directory}/.corrupt-{uuid.uuid4().hex[:8]}-{name}"
        self.fs.move(path, target)
        return target

    # -- checkpoints of packs in training -------------------------------------------------
    def checkpoint(self, pid: str) -> StoredCheckpoint:
        """Where pack ``pid`` keeps its training checkpoint (hidden: readers skip it)."""
        # the engine's checkpoint type: torch, which a reader of rows never loads
        from fairdp.study.store._checkpoint import StoredCheckpoint

        return StoredCheckpoint(self, f"{self.root}/{CHECKPOINTS}/{pid}.ckpt")

    def checkpoint_ids(self) -> list[str]:
        """The packs that have a checkpoint here, sorted."""
        directory = f"{self.root}/{CHECKPOINTS}"
        if self.fs.get_file_info(directory).type != pafs.FileType.Directory:
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(directory))
        return sorted(i.base_name[:-len(".ckpt")] for i in infos
                      if i.type == pafs.FileType.File and i.base_name.endswith(".ckpt")
                      and not i.base_name.startswith("."))

    def remove_temporaries(self) -> int:
        """Delete ``.tmp-*`` files left by writers that were killed mid-write, among the rows and
        the per-epoch curves."""
        n = 0
        for root in (self.root, self.side_table_path(HISTORY)):
            if self.fs.get_file_info(root).type != pafs.FileType.Directory:
                continue
            for info in self.fs.get_file_info(pafs.FileSelector(root, recursive=True)):
                if info.type == pafs.FileType.File and info.base_name.startswith(".tmp-"):
                    self.fs.delete_file(info.path)
                    n += 1
        return n


CHECKPOINTS = ".checkpoints"  # under the root; its name starts with '.', so readers skip it


# What makes a Parquet file a pack file of fairdp's: its identity columns, with these types.
PACK_KEY_TYPES = {"study": pa.string(), "dataset": pa.string(), "method": pa.string(), "seed": pa.int64(),
                  "config_id": pa.string(), "status": pa.string()}


def foreign_reason(table_schema: pa.Schema, required: dict | None = None) -> str | None:
    """Why a Parquet file is not one of fairdp's (a column missing or of another type), or None."""
    for name, kind in (required or PACK_KEY_TYPES).items():
        if name not in table_schema.names:
            return f"not a fairdp file: no column '{name}'"
        have = table_schema.field(name).type
        # a key names rows: an integer one stays integer (0.5 is no seed)
        exact = not pa.types.is_integer(kind) or pa.types.is_integer(have)
        if not ((_same_kind(have, kind) and exact) or pa.types.is_null(have)):
            return f"not a fairdp file: column '{name}' holds {have}, not {kind}"
    return None


def _same_kind(have: pa.DataType, want: pa.DataType) -> bool:
    """Strings of any width for a string column, numbers of any width for a number one (rows
    round-tripped through pandas hold an integer column with nulls as floats, which combine
    with integers losslessly), a timestamp of any unit or zone for a timestamp one; otherwise
    the same type."""
    return _kind(have) == _kind(want)


def _kind(t: pa.DataType) -> str:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return "number"
    if pa.types.is_timestamp(t):
        return "timestamp"
    return str(t)


def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0][:300] if lines else type(e).__name__


class DistinctSchemas:
    """The few distinct schemas (metadata aside) of many files, each a number: a file's is
    found by comparing it with the one found last (most files share one: a comparison is a
    third of hashing a schema), else by its hash."""

    def __init__(self):
        self._schemas: list[pa.Schema] = []
        self._numbers: dict[pa.Schema, int] = {}
        self._last = -1

    def of(self, file_schema: pa.Schema) -> int:
        if self._last >= 0 and file_schema.equals(self._schemas[self._last]):  # metadata is not compared
            return self._last
        bare = file_schema.remove_metadata()
        if bare not in self._numbers:
            self._numbers[bare] = len(self._schemas)
            self._schemas.append(bare)
        self._last = self._numbers[bare]
        return self._last

    def __getitem__(self, i: int) -> pa.Schema:
        return self._schemas[i]


def _odd_types(schemas: dict[str, pa.Schema], known: set[str], distinct: DistinctSchemas,
               kind_of: dict[str, int]) -> list[CorruptFile]:
    """The files whose column fairdp does not know (a plugin's hyperparameter, not among
    ``known``) holds another kind of value than most files' (the first file's, on a tie):
    one column, one type, or the files could not be read as one table. ``distinct`` and
    ``kind_of``: the files' schemas, as ``read`` numbered them."""
    kinds: dict[str, dict[str, list[str]]] = {}  # column -> kind -> files
    unknown: dict[int, list[tuple[str, str]]] = {}  # per distinct schema: its (column, kind) fairdp does not know
    for path in schemas:
        i = kind_of[path]
        if i not in unknown:
            unknown[i] = [(f.name, _kind(f.type)) for f in distinct[i]
                          if f.name not in known and not pa.types.is_null(f.type)]
        for name, kind in unknown[i]:
            kinds.setdefault(name, {}).setdefault(kind, []).append(path)
    odd: dict[str, CorruptFile] = {}
    for column, by_kind in kinds.items():
        if len(by_kind) < 2:
            continue
        usual = max(by_kind, key=lambda k: len(by_kind[k]))  # dicts keep order: the first on a tie
        example = by_kind[usual][0]
        want = schemas[example].field(column).type
        for kind, paths in by_kind.items():
            for path in paths:
                if kind != usual and path not in odd:
                    have = schemas[path].field(column).type
                    odd[path] = CorruptFile(path, f"not a fairdp file: column '{column}' holds {have}, {example} "
                                                  f"holds {want}", "foreign")
    return list(odd.values())


MISPLACED = "not a fairdp file: not named or placed as a pack file (<dataset>/<method>/part-*.parquet)"
ROW_KEYS = ["dataset", "method", "seed", "config_id"]  # a config's row, once in a study's results
SCAN_FILES = 1000  # files per dataset in one scan (``ResultStore._scan_files``)
# text columns whose every row differs (ids, counts): read as plain text, not as dictionaries
PER_ROW_TEXT = {"config_id", "pack_id", schema.TEST_CONFUSION, schema.VALID_CONFUSION}
_CHECKED = {*ROW_KEYS, "status", "pack_id"}  # what the duplicate check reads, whatever a caller asks


COMPACTED_FROM = b"fairdp.compacted_from"  # a merged file's footer key: the names of the files it merged


def merged_names(file_schema: pa.Schema) -> list[str]:
    """The names of the files a merged file merged (its footer's ``COMPACTED_FROM``); [] for a
    pack file."""
    metadata = file_schema.metadata or {}
    return json.loads(metadata[COMPACTED_FROM]) if COMPACTED_FROM in metadata else []


def superseded(merged: dict[str, list[str]]) -> set[str]:
    """Among the files of ``merged`` (path -> the names that file merged, ``merged_names``),
    those a merged file beside them lists: a compaction killed before it deleted them. Their
    rows are the merged file's too."""
    out: set[str] = set()
    for path, names in merged.items():
        directory = path.rsplit("/", 1)[0]
        out.update(f"{directory}/{name}" for name in names)
    return out & set(merged)


FILE = "_file"  # the column of a scanned row's file (``ResultStore._scan``)


def _duplicated_packs(table: pa.Table, files: list[str], merged: set[str] = frozenset()) -> list[CorruptFile]:
    """The pack files holding an ok row of a config that another file (or a row before it in
    the same file) holds too: a copy of a pack file under another name would count its configs
    twice. A merged file (``merged``: a compaction's) is kept, then the file named as its rows'
    pack (``part-s<seed>-<pack_id>.parquet``), then the first in order; each other file sharing a config with a kept one is named, with the
    kept file. Error rows are left alone: a config may fail in one pack and succeed in another
    (its error pack retried without a config the grid no longer has), and only ok rows count.
    ``table``: the scanned rows with their files (``FILE``: a place in ``files``); only its key
    columns are read."""
    keys = table.select([*ROW_KEYS, "status", FILE]).to_pandas()
    keys = keys[keys["status"].astype(object) == schema.STATUS_OK]
    if not keys.duplicated(ROW_KEYS).any():  # the common case: one vectorised check
        return []
    keys[FILE] = np.asarray(files, dtype=object)[keys[FILE].to_numpy()]
    paths = list(dict.fromkeys(keys[FILE]))
    packs = table.select(["seed", "pack_id", FILE]).to_pandas() if "pack_id" in table.column_names else None
    if packs is not None:
        packs[FILE] = np.asarray(files, dtype=object)[packs[FILE].to_numpy()]

    def named_as_its_pack(path: str) -> bool:
        if packs is None:
            return False
        mine = packs[packs[FILE] == path]
        ids, seeds = mine["pack_id"].dropna().unique(), mine["seed"].unique()
        return len(ids) == 1 and len(seeds) == 1 and path.rsplit("/", 1)[1] == f"part-s{seeds[0]}-{ids[0]}.parquet"

    owner: dict[tuple, str] = {}
    out = []
    for path in sorted(paths, key=lambda p: (p not in merged, not named_as_its_pack(p), p)):
        rows = list(keys.loc[keys[FILE] == path, ROW_KEYS].itertuples(index=False, name=None))
        clash = next((k for k in rows if k in owner), None)
        if clash is None and len(set(rows)) < len(rows):
            clash = next(k for k in rows if rows.count(k) > 1)
            out.append(CorruptFile(path, f"holds config {_describe_key(clash)} twice", "duplicate"))
            continue
        if clash is not None:
            out.append(CorruptFile(path, f"configs also stored in {owner[clash]}, e.g. "
                                         f"{_describe_key(clash)}: their rows would count twice", "duplicate"))
            continue
        owner.update((k, path) for k in rows)
    return out


def _describe_key(key: tuple) -> str:
    return " ".join(f"{name} {value}" for name, value in zip(ROW_KEYS, key))


def corrupt_error(corrupt: list[CorruptFile]) -> InputError:
    """The one-line error naming the first unreadable, foreign or duplicated file (and how
    many more there are), and what ``--repair`` does with it."""
    c = corrupt[0]
    more = f" (and {len(corrupt) - 1} more)" if len(corrupt) > 1 else ""
    if c.kind == "duplicate":
        does = "moves it aside (its configs stay stored in the other file)"
    elif c.reason.startswith(MISPLACED):
        does = "moves it aside (or move it out of the results folder yourself)"
    else:
        does = "moves it aside and reruns its configs"
    return InputError(f"{c.path}: {c.what}{more} ({c.reason}); `fairdp run STUDY.yaml --results DIR --repair` {does}")


def read_results(*locations, without: Sequence[str] = ()) -> pd.DataFrame:
    """Rows of several results locations (studies, seeds, hosts) as one DataFrame. A location
    may also be one Parquet file of rows (e.g. rows exported or filtered elsewhere). ``without``:
    columns left unread (``ResultStore.read``)."""
    frames = []
    for loc in locations:
        if not str(loc).strip():  # Path("") is the current folder: never what an empty variable meant
            raise InputError("results location: empty; give a results directory or a Parquet file of rows")
        if Path(str(loc)).is_file():
            frames.append(_read_rows_file(Path(str(loc))).drop(columns=list(without), errors="ignore"))
            continue
        store = existing_store(loc)
        df, _ = store.read(without=without)
        if len(df):
            frames.append(df)
    if not frames:
        raise InputError(f"{', '.join(map(str, locations))}: no result rows found")
    return with_module_keywords(frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True))


def with_module_keywords(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a column per keyword of the user's modules (``encoder.width``), read from each
    row's ``architecture``: what a grid or a search sweeps, grouped on like any hyperparameter
    (``selection.by``, ``--by``). A row without that module's keyword has NaN there. Stored
    files keep their fixed columns; these are derived as the rows are read."""
    if "architecture" not in df.columns:
        return df
    values: dict[str, dict[str, object]] = {}
    for text in df["architecture"].dropna().unique():
        try:
            models = json.loads(text).get("models", [])
        except (TypeError, ValueError, AttributeError):
            continue
        for role, ref in models:
            for key, value in ref.get("kwargs", []):
                values.setdefault(f"{role}.{key}", {})[text] = \
                    json.dumps(value) if isinstance(value, (list, dict)) else value
    for column, by_text in values.items():
        if column not in df.columns:
            df[column] = df["architecture"].map(by_text)
    return df


HISTORY_KEYS = ["dataset", "method", "seed", "config_id"]


def existing_store(location) -> ResultStore:
    """The store of a results location that exists; InputError naming it otherwise."""
    if not str(location).strip():
        raise InputError("results location: empty; give a results directory")
    store = ResultStore(location)
    store.probe()
    if not store.exists():
        raise InputError(f"{location}: no such results directory")
    return store


def read_history(*locations, rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per-epoch valid curves (one row per config and epoch: ``epoch``, ``valid_accuracy``,
    ``valid_loss``, ``valid_<gap>``, ``kept``) of the configs whose rows are stored in
    ``locations``; the same files are ``<results>.history/**/*.parquet`` for pandas, polars
    or duckdb. Curves of a pack whose rows were never stored (its run was killed in between)
    are left out. ``rows``: the locations' rows when the caller has read them already
    (``read_results``), so that they are not read again."""
    frames = []
    for loc in locations:
        store = existing_store(loc)
        curves = store.read_history()
        if not len(curves):
            continue
        stored = rows if rows is not None else store.read()[0]
        stored = stored.loc[stored["status"] == "ok", HISTORY_KEYS].drop_duplicates()
        frames.append(curves.merge(stored, on=HISTORY_KEYS, how="inner"))
    if not frames:
        return pd.DataFrame(columns=["study", *HISTORY_KEYS, "epoch", "kept"])
    return pd.concat(frames, ignore_index=True).sort_values([*HISTORY_KEYS, "epoch"], ignore_index=True)


def read_hypervolume_histories(*locations: str) -> pd.DataFrame | None:
    """Every ``<results>.hypervolume-<method>-seed<s>.parquet`` beside the given results locations,
    stacked; None when there is none."""
    frames = []
    for loc in locations:
        store = ResultStore(loc)
        if store.is_local:
            frames += [pd.read_parquet(p) for p in sorted(glob.glob(f"{glob.escape(store.root)}.hypervolume-*.parquet"))]
    return pd.concat(frames, ignore_index=True) if frames else None


def _read_rows_file(path: Path) -> pd.DataFrame:
    """One Parquet file of result rows; InputError naming it if it is not one."""
    try:
        df = pd.read_parquet(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a non-Parquet file
        raise InputError(f"{path}: not a readable Parquet file ({type(e).__name__})") from None
    missing = [c for c in (*schema.RUN_KEYS, "config_id", "status") if c not in df.columns]
    if missing:
        raise InputError(f"{path}: not a file of result rows (no column {missing[0]})")
    return df
