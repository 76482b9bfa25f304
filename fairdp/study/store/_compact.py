"""Compaction: a finished seed's pack files merged into one file.

A study stores one file per pack (tens of rows each). A cluster sweep leaves tens of thousands,
and opening them is most of what reading the results costs (about 2 ms a file here). Once every
config a (dataset, method, seed) planned is stored with status ok, nothing will write to it
again, so ``compact`` merges its files into one, ``part-s<seed>-c<digest>.parquet`` (the digest
of the merged files' names). The merged file's footer lists the files it merged
(``COMPACTED_FROM``). A kill at any step loses and duplicates nothing:

1. the merged file is written under a hidden temporary name, which readers skip and
   ``remove_temporaries`` deletes;
2. it is renamed into place. From then on a reader skips every file it lists
   (``superseded``), so each row counts once;
3. the listed files are deleted, one by one.

A rerun of ``compact`` finishes what a killed one left: it deletes the listed files that remain.
A seed with error rows, or with configs its plan lists that are not stored, is left as it is:
the next run writes to it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from fairdp import schema
from fairdp.study.store._lease import object_store_lease
from fairdp.study.store._lock import results_lock
from fairdp.study.store._plans import read_plan
from fairdp.study.store._store import (
    COMPACTED_FROM,
    ResultStore,
    corrupt_error,
    existing_store,
    merged_names,
    superseded,
)

_FILE_NAME = re.compile(r"part-s(\d+)-.+\.parquet")


def compacted_name(seed: int, sources) -> str:
    """The merged file's name: its seed and the digest of the names of the files it merges."""
    digest = hashlib.sha256("\n".join(sorted(sources)).encode()).hexdigest()[:16]
    return f"part-s{seed}-c{digest}.parquet"


@dataclass(frozen=True)
class Compaction:
    """What ``compact`` did: the (dataset, method, seed) groups merged, the files they were
    and the rows they hold; leftovers of a killed compaction deleted; groups left as they are
    (error rows, or configs still to train)."""

    groups: int = 0
    files: int = 0
    rows: int = 0
    leftovers: int = 0
    unfinished: int = 0

    def describe(self) -> str:
        said = (f"merged {self.files} pack files of {self.groups} finished seeds into {self.groups} "
                f"({self.rows:,} rows)" if self.groups else "no finished seed has more than one file to merge")
        if self.leftovers:
            said += f"; deleted {self.leftovers} files a killed compaction had merged"
        if self.unfinished:
            said += f"; {self.unfinished} seeds left as they are (error rows or configs still to train)"
        return said


def compact_store(store: ResultStore, seeds=None) -> Compaction:
    """Merge the pack files of each finished (dataset, method, seed) of ``store`` (of ``seeds``
    only, when given) into one file, as the module says. The caller holds the results' lock.
    InputError naming a corrupt or foreign file (``fairdp run --repair`` first)."""
    paths = store.pack_files()
    schemas, groups = {}, {}
    for path in paths:
        schemas[path] = pq.read_schema(path, filesystem=store.fs)
        dataset, method, name = path[len(store.root) + 1:].split("/")
        match = _FILE_NAME.fullmatch(name)
        if match is None:  # a foreign name: the read below refuses it
            continue
        groups.setdefault((dataset, method, int(match[1])), []).append(path)
    rows, corrupt = store.read(on_corrupt="collect")
    if corrupt:
        raise corrupt_error(corrupt)
    gone = superseded(schemas)
    finished = _finished(store, rows)
    merged = files = rows_merged = leftovers = unfinished = 0
    for key in sorted(groups):
        if seeds is not None and key[2] not in seeds:
            continue
        for path in sorted(set(groups[key]) & gone):  # step 3 of a killed compaction, finished
            _delete(store, path)
            leftovers += 1
        sources = sorted(set(groups[key]) - gone)
        if key not in finished:
            unfinished += 1
        elif len(sources) > 1:
            rows_merged += _merge(store, key, sources, schemas)
            merged, files = merged + 1, files + len(sources)
    return Compaction(merged, files, rows_merged, leftovers, unfinished)


def _finished(store: ResultStore, rows) -> set[tuple]:
    """The (dataset, method, seed) whose rows are all ok and hold every config the plan lists
    for them (the plan beside the results; without one, every group of ok rows)."""
    if not len(rows):
        return set()
    keys = ["dataset", "method", "seed"]
    status = rows.groupby(keys)["status"].agg(lambda s: bool((s.astype(object) == schema.STATUS_OK).all()))
    finished = {tuple(k) for k, ok in status.items() if ok}
    plan = read_plan(store)
    if plan is not None:
        stored = set(map(tuple, rows[[*keys, "config_id"]].astype({"seed": "int64"}).itertuples(index=False)))
        for r in plan.itertuples(index=False):
            if (r.dataset, r.method, int(r.seed), r.config_id) not in stored:
                finished.discard((r.dataset, r.method, int(r.seed)))
    return {(d, m, int(s)) for d, m, s in finished}


def _merge(store: ResultStore, key: tuple, sources: list[str], schemas: dict[str, pa.Schema]) -> int:
    """Steps 1-3 for one group: the merged file written and renamed into place, then its
    sources deleted. Returns its row count."""
    dataset, method, seed = key
    table = pa.concat_tables([pq.read_table(p, filesystem=store.fs) for p in sources], promote_options="permissive")
    names = [p.rsplit("/", 1)[1] for p in sources]
    # a merged file that is merged again hands on the names it merged: a killed compaction's
    # leftovers of either stay recognisable
    listed = sorted({*names, *(n for p in sources for n in merged_names(schemas[p]))})
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), COMPACTED_FROM: json.dumps(listed).encode()})
    final = f"{store.root}/{dataset}/{method}/{compacted_name(seed, names)}"
    store._write_in_dir(table, final)
    for path in sources:
        _delete(store, path)
    return table.num_rows


def _delete(store: ResultStore, path: str) -> None:
    """Step 3, for one merged file (a kill between two of these leaves the rest listed)."""
    store.retrying(path, lambda: store.fs.delete_file(path))


def compact(results, seeds=None) -> Compaction:
    """Merge each finished seed's pack files of the results at ``results`` (a directory or URI)
    into one file, under the results' lock (a run into them waits or is refused, as a second
    run is): what ``fairdp compact`` does. A seed is finished when all its rows are ok and it
    holds every config its plan lists; ``seeds``: only these. Reading the results gives the same
    rows before and after, and a compaction killed at any step loses and duplicates nothing
    (its rerun finishes it). InputError naming a location that holds no results, or a corrupt
    or foreign file in them (``fairdp run --repair`` first)."""
    store = existing_store(results)
    held = results_lock(store.root, "compact") if store.is_local else object_store_lease(store, "compact")
    with held:
        store.remove_temporaries()  # step 1 of a killed compaction (or a killed writer's file)
        return compact_store(store, seeds)
