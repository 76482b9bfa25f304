"""Compaction: the pack files of finished seeds merged into a few large files.

A study stores one file per pack (tens of rows each). A cluster sweep leaves tens of thousands,
and opening them is most of what reading the results costs (1-2 ms a file here). Once every
config a (dataset, method, seed) planned is stored with status ok, nothing will write to it
again, so ``compact`` merges the pack files of a method's finished seeds, and the merged files
still small, into files of up to ``MERGE_ROWS`` rows, each ``part-c<digest>.parquet`` (the
digest of the names of the files it merges). A merged file's footer lists the files it merged
(``COMPACTED_FROM``). The per-epoch curves under ``<results>.history`` are merged the same
way, under the same name. A kill at any step loses and duplicates nothing:

1. the merged curves, then the merged rows, are written under a hidden temporary name, which
   readers skip and ``remove_temporaries`` deletes;
2. each is renamed into place. From then on a reader skips every file it lists
   (``superseded``), so each row, and each curve, counts once;
3. the listed files are deleted, one by one, rows first.

A rerun of ``compact`` finishes what a killed one left: it deletes the listed files that remain,
and keeps merged curves already in place. A seed with error rows, or with configs its plan lists
that are not stored, is left as it is: the next run writes to it. A run compacts the seeds it
finished (``fairdp run``), so a store is compacted as it grows; ``fairdp compact`` does it for
stores written before, or by a run that stopped early.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from fairdp import schema
from fairdp.study.store._lease import object_store_lease
from fairdp.study.store._lock import results_lock
from fairdp.study.store._plans import read_plan
from fairdp.study.store._store import (
    COMPACTED_FROM,
    HISTORY,
    SCAN_FILES,
    DistinctSchemas,
    ResultStore,
    corrupt_error,
    existing_store,
    merged_names,
    superseded,
)

logger = logging.getLogger("fairdp")

# A merged file holds up to about this many rows (~100 MB in memory at fairdp's row width): large
# enough that a million rows are a few dozen files, small enough that merging stays cheap, and a
# merged file is merged again only while it is smaller (each row is rewritten a bounded number
# of times however long a study grows).
MERGE_ROWS = 2 ** 18
_PACK_NAME = re.compile(r"part-s(\d+)-.+\.parquet")
_KEY_COLUMNS = ["dataset", "method", "seed", "config_id", "status"]


def compacted_name(sources) -> str:
    """The merged file's name: the digest of the names of the files it merges."""
    digest = hashlib.sha256("\n".join(sorted(sources)).encode()).hexdigest()[:16]
    return f"part-c{digest}.parquet"


@dataclass(frozen=True)
class Compaction:
    """What ``compact`` did: the finished (dataset, method, seed) whose pack files it merged,
    the files merged, the merged files written and the rows they hold; leftovers of a killed
    compaction deleted; seeds left as they are (error rows, or configs still to train)."""

    seeds: int = 0
    files: int = 0
    merged: int = 0
    rows: int = 0
    leftovers: int = 0
    unfinished: int = 0

    def describe(self) -> str:
        said = (f"merged {self.files:,} files ({self.seeds} finished seeds) into {self.merged} "
                f"({self.rows:,} rows)" if self.merged else "nothing to merge")
        if self.leftovers:
            said += f"; deleted {self.leftovers} files a killed compaction had merged"
        if self.unfinished:
            said += f"; {self.unfinished} seeds left as they are (error rows or configs still to train)"
        return said


@dataclass(frozen=True)
class _File:
    path: str
    rows: int
    merged: tuple[str, ...]  # the names it merged (its footer's COMPACTED_FROM); () for a pack file
    seed: int | None  # a pack file's seed (from its name); None for a merged file
    schema: pa.Schema  # its columns (metadata aside), shared with the files of the same columns


def compact_store(store: ResultStore, seeds=None, max_rows: int = MERGE_ROWS) -> Compaction:
    """Merge the pack files of the finished seeds of ``store`` (of ``seeds`` only, when given),
    with its merged files under ``max_rows`` rows, as the module says. The caller holds the
    results' lock. InputError naming a corrupt or foreign file (``fairdp run --repair`` first)."""
    rows, corrupt = store.read(on_corrupt="collect", columns=_KEY_COLUMNS)
    if corrupt:
        raise corrupt_error(corrupt)
    distinct = DistinctSchemas()
    files = _footers(store, store.pack_files(), distinct)
    gone = superseded({f.path: f.merged for f in files.values()})
    history = _footers(store, store._part_files(store.side_table_path(HISTORY)), distinct)
    gone_curves = superseded({f.path: f.merged for f in history.values()})
    _delete_each(store, sorted(gone))  # step 3 of a killed compaction, finished
    _delete_each(store, sorted(gone_curves))
    leftovers = len(gone) + len(gone_curves)
    history = {p: f for p, f in history.items() if p not in gone_curves}
    finished = _finished(store, rows)
    in_dir: dict[tuple[str, str], list[_File]] = {}
    for f in files.values():
        if f.path not in gone:
            in_dir.setdefault(tuple(f.path[len(store.root) + 1:].split("/")[:2]), []).append(f)
    unfinished = {(d, m, f.seed) for (d, m), fs in in_dir.items() for f in fs
                  if f.seed is not None and (d, m, f.seed) not in finished}
    seeds_merged: set[tuple] = set()
    n_files = n_merged = n_rows = 0
    for (dataset, method), dir_files in sorted(in_dir.items()):
        candidates = [f for f in dir_files
                      if (f.seed is None and f.rows < max_rows)
                      or (f.seed is not None and (dataset, method, f.seed) in finished
                          and (seeds is None or f.seed in seeds))]
        for chunk in _chunks(sorted(candidates, key=lambda f: f.path), max_rows):
            n_rows += _merge(store, chunk, history)
            n_files, n_merged = n_files + len(chunk), n_merged + 1
            seeds_merged.update((dataset, method, f.seed) for f in chunk if f.seed is not None)
    if seeds is not None:
        unfinished = {k for k in unfinished if k[2] in seeds}
    return Compaction(len(seeds_merged), n_files, n_merged, n_rows, leftovers, len(unfinished))


def _footers(store: ResultStore, paths, distinct: DistinctSchemas) -> dict[str, _File]:
    """Each file's row count, the names it merged and its columns, from its footer alone (read
    once: the merge unifies the columns it was told here)."""
    out = {}
    for path in paths:
        metadata = pq.read_metadata(path, filesystem=store.fs)
        file_schema = metadata.schema.to_arrow_schema()
        match = _PACK_NAME.fullmatch(path.rsplit("/", 1)[1])
        merged = tuple(merged_names(file_schema))
        out[path] = _File(path, metadata.num_rows, merged, int(match[1]) if match and not merged else None,
                          distinct[distinct.of(file_schema)])
    return out


def _chunks(files: list[_File], max_rows: int):
    """``files`` cut, in order, into runs of at least two files holding up to about
    ``max_rows`` rows (a run closes at the file that reaches it)."""
    run, rows = [], 0
    for f in files:
        run.append(f)
        rows += f.rows
        if rows >= max_rows:
            if len(run) > 1:
                yield run
            run, rows = [], 0
    if len(run) > 1:
        yield run


def _finished(store: ResultStore, rows) -> set[tuple]:
    """The (dataset, method, seed) whose rows are all ok and hold every config the plan lists
    for them (the plan beside the results; without one, every group of ok rows)."""
    if not len(rows):
        return set()
    keys = ["dataset", "method", "seed"]
    ok = rows["status"].astype(object) == schema.STATUS_OK
    status = ok.groupby([rows[k] for k in keys]).all()
    finished = {(d, m, int(s)) for (d, m, s), all_ok in status.items() if all_ok}
    plan = read_plan(store)
    if plan is not None:
        stored = rows[[*keys, "config_id"]].astype({"seed": "int64"})
        missing = plan[[*keys, "config_id"]].astype({"seed": "int64"}).merge(
            stored.drop_duplicates(), how="left", indicator=True)
        missing = missing[missing["_merge"] == "left_only"]
        finished -= {(d, m, int(s)) for d, m, s in missing[keys].drop_duplicates().itertuples(index=False)}
    return finished


def _merge(store: ResultStore, chunk: list[_File], history: dict[str, _File]) -> int:
    """Steps 1-3 for one merged file: its curves, then its rows written and renamed into place,
    then its sources deleted, rows first. Returns its row count."""
    names = [f.path.rsplit("/", 1)[1] for f in chunk]
    final = f"{chunk[0].path.rsplit('/', 1)[0]}/{compacted_name(names)}"
    curves = [history[c] for c in (store.history_of(f.path) for f in chunk) if c in history]
    merged_curves = store.history_of(final)
    if curves and store.fs.get_file_info(merged_curves).type != pafs.FileType.File:  # a rerun keeps its own
        _write_merged(store, curves, merged_curves)
    rows = _write_merged(store, chunk, final)
    _delete_each(store, [f.path for f in chunk])
    _delete_each(store, [f.path for f in curves])
    return rows


def _write_merged(store: ResultStore, sources: list[_File], final: str) -> int:
    # one scan of the sources, their schemas unified (a table per file would cost its own buffers
    # and overhead ten thousand times over), then one chunk per column for the writer
    paths = [f.path for f in sources]
    distinct = {id(f.schema): f.schema for f in sources}  # shared objects (``_footers``): no hashing
    unified = pa.unify_schemas(list(distinct.values()), promote_options="permissive")
    table = pa.concat_tables([ds.dataset(paths[i:i + SCAN_FILES], schema=unified, format="parquet",
                                         filesystem=store.fs).to_table() for i in range(0, len(paths), SCAN_FILES)])
    table = table.combine_chunks()
    # a merged file that is merged again hands on the names it merged: a killed compaction's
    # leftovers of either stay recognisable
    listed = sorted({*(p.rsplit("/", 1)[1] for p in paths), *(n for f in sources for n in f.merged)})
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), COMPACTED_FROM: json.dumps(listed).encode()})
    store._write_in_dir(table, final)
    return table.num_rows


def _delete(store: ResultStore, path: str) -> None:
    """Step 3, for one merged file (a kill between two of these leaves the rest listed)."""
    store.retrying(path, lambda: store.fs.delete_file(path))


DELETE_THREADS = 16
"""Deletes at once: each waits on the file system (its journal, after the fsync of every pack
written; an object store's round trip), not on a CPU. Here 3,000 freshly synced files took
0.48 ms a delete one by one, 0.055 ms sixteen at a time."""


def _delete_each(store: ResultStore, paths: list[str]) -> None:
    """Step 3 for the sources of one merged file, ``DELETE_THREADS`` at a time: a kill leaves any
    of them, each listed by the merged file and so deleted by the next compaction."""
    if len(paths) < 2:
        for path in paths:
            _delete(store, path)
        return
    with ThreadPoolExecutor(min(DELETE_THREADS, len(paths)), thread_name_prefix="fairdp-delete") as pool:
        for _ in pool.map(lambda path: _delete(store, path), paths):  # the first failure raises here
            pass


def compact(results, seeds=None) -> Compaction:
    """Merge the pack files of the finished seeds of the results at ``results`` (a directory or
    URI) into a few large files, under the results' lock (a run into them waits or is refused,
    as a second run is): what ``fairdp compact`` does. A seed is finished when all its rows are
    ok and it holds every config its plan lists; ``seeds``: only these. Reading the results
    gives the same rows (and curves) before and after, and a compaction killed at any step
    loses and duplicates nothing (its rerun finishes it). InputError naming a location that
    holds no results, or a corrupt or foreign file in them (``fairdp run --repair`` first)."""
    store = existing_store(results)
    held = results_lock(store.root, "compact") if store.is_local else object_store_lease(store, "compact")
    with held:
        store.remove_temporaries()  # step 1 of a killed compaction (or a killed writer's file)
        return compact_store(store, seeds)
