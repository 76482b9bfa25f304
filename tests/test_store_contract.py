"""The result store's contract, run over every kind of location a study writes to: a
directory, a ``file://`` URI, an ``s3://`` URI on a real S3-protocol server (moto's server
mode, over HTTP), and an fsspec filesystem behind pyarrow's ``PyFileSystem`` (what gs:// and
other fsspec stores take). A new kind of store is one more entry in ``STORES``."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fairdp.errors import InputError
from fairdp.study import ResultStore, parse_spec, read_results, study_columns
from fairdp.study.run._plan import plan_packs

SPEC = parse_spec({
    "name": "store-test", "dataset": {"name": "synthetic", "rows": 400}, "seeds": [0, 1],
    "train": {"epochs": 2}, "pack_size": 3,
    "methods": {"federate": {"grid": {"eps": [1, 2], "lam": [0.5, 1.0, 1.5]}}, "unconstrained": {}},
})
KEY = ["method", "seed", "config_id"]


class Location:
    """A store under test and raw access to its bytes (to break a file as a crash or a foreign
    writer would)."""

    def __init__(self, store: ResultStore, fs, uri: str):
        self.store, self.fs, self.uri = store, fs, uri

    def write_bytes(self, path: str, data: bytes) -> None:
        with self.fs.open_output_stream(path) as f:
            f.write(data)

    def read_bytes(self, path: str) -> bytes:
        with self.fs.open_input_stream(path) as f:
            return f.read()

    def names(self) -> list[str]:
        from pyarrow.fs import FileSelector, FileType

        infos = self.fs.get_file_info(FileSelector(self.store.root, recursive=True, allow_not_found=True))
        return [i.path for i in infos if i.type == FileType.File]


def _directory(tmp_path, request):
    store = ResultStore(tmp_path / "r")
    return Location(store, store.fs, str(tmp_path / "r"))


def _file_uri(tmp_path, request):
    store = ResultStore(f"file://{tmp_path}/r")
    return Location(store, store.fs, f"file://{tmp_path}/r")


def _s3(tmp_path, request):
    server = request.getfixturevalue("s3")
    uri = server.uri(server.bucket(), "study")
    store = ResultStore(uri)
    return Location(store, store.fs, uri)


def _object_store(tmp_path, request):
    fsspec = pytest.importorskip("fsspec")
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    memory = fsspec.filesystem("memory")
    memory.store.clear()
    fs = PyFileSystem(FSSpecHandler(memory))
    return Location(ResultStore("bucket/study", filesystem=fs), fs, "bucket/study")


STORES = {"directory": _directory, "file-uri": _file_uri, "s3": _s3, "fsspec": _object_store}


@pytest.fixture(params=list(STORES))
def location(request, tmp_path):
    loc = STORES[request.param](tmp_path, request)
    yield loc
    if request.param == "fsspec":
        import fsspec

        fsspec.filesystem("memory").store.clear()


def _rows(pack, status="ok", acc=80.0):
    return [{"study": SPEC.name, "dataset": "synthetic", "method": pack.method, "seed": pack.seed,
             "config_id": cid, "pack_id": pack.id, "epochs": 2, "status": status,
             "valid_accuracy": acc, **{k: v for k, v in cfg.items() if k != "fairness_notion"}}
            for cfg, cid in zip(pack.configs, pack.config_ids)]


def _store_all(store, packs, status="ok"):
    for p in packs:
        store.write_pack(_rows(p, status), "synthetic", p.method, p.seed, p.id)


def test_every_row_is_read_back_once_in_the_studys_columns(location):
    store = location.store
    assert not store.exists()
    packs, _ = plan_packs(SPEC, pd.DataFrame())
    _store_all(store, packs)
    df, corrupt = store.read()
    assert corrupt == [] and len(df) == SPEC.n_configs and not df.duplicated(KEY).any()
    assert list(df.columns) == [name for name, _ in study_columns()]
    assert len(store.pack_files()) == len(packs)


def test_columns_left_unread_are_absent_and_the_rest_equal_a_whole_read(location):
    """``read(without=...)``: those columns neither read nor returned, even a key column the
    checks read; every other column as a whole read gives it."""
    store = location.store
    packs, _ = plan_packs(SPEC, pd.DataFrame())
    _store_all(store, packs)
    whole, _ = store.read()
    without = ["valid_accuracy", "test_confusion", "pack_id"]
    part, corrupt = store.read(without=without)
    assert corrupt == [] and list(part.columns) == [c for c in whole.columns if c not in without]
    pd.testing.assert_frame_equal(part, whole.drop(columns=without))


def test_a_rewritten_pack_replaces_its_file_and_leaves_no_temporary(location):
    store = location.store
    packs, _ = plan_packs(SPEC, pd.DataFrame())
    _store_all(store, packs)
    store.write_pack(_rows(packs[0], acc=90.0), "synthetic", packs[0].method, packs[0].seed, packs[0].id)
    df, _ = store.read()
    assert len(df) == SPEC.n_configs and not df.duplicated(KEY).any()
    mine = df["config_id"].isin(packs[0].config_ids) & (df["seed"] == packs[0].seed) & (df["method"] == packs[0].method)
    assert (df.loc[mine, "valid_accuracy"] == 90.0).all() and (df.loc[~mine, "valid_accuracy"] == 80.0).all()
    assert not [n for n in location.names() if "/." in n]


def test_readers_skip_hidden_files_and_temporaries_are_removed(location):
    store = location.store
    packs, _ = plan_packs(SPEC, pd.DataFrame())
    _store_all(store, packs[:1])
    location.write_bytes(f"{store.root}/synthetic/federate/.tmp-killed-part-x.parquet", b"PAR1 half a file")
    df, corrupt = store.read()
    assert corrupt == [] and len(df) == len(packs[0].configs)
    assert store.remove_temporaries() == 1
    assert not [n for n in location.names() if ".tmp-" in n]


def test_resume_skips_stored_configs_and_retries_error_packs_with_their_own_file(location):
    store = location.store
    packs, _ = plan_packs(SPEC, pd.DataFrame())
    _store_all(store, packs[:2])
    _store_all(store, packs[2:3], status="error")
    stored, _ = store.read()
    again, done = plan_packs(SPEC, stored)
    assert done == sum(len(p.configs) for p in packs[:2])
    assert packs[2] in again  # same configs, so the same file name: the retry replaces it
    keys = [(p.method, p.seed, c) for p in again for c in p.config_ids]
    assert len(keys) == len(set(keys)) == SPEC.n_configs - done
    _store_all(store, again)
    final, _ = store.read()
    assert len(final) == SPEC.n_configs and (final["status"] == "ok").all()


def test_a_truncated_file_is_named_and_repair_moves_it_aside(location):
    store = location.store
    packs, _ = plan_packs(SPEC, pd.DataFrame())
    _store_all(store, packs)
    victim = store.pack_path("synthetic", packs[0].method, packs[0].seed, packs[0].id)
    data = location.read_bytes(victim)
    location.write_bytes(victim, data[: len(data) // 2])
    with pytest.raises(InputError, match=victim.rsplit("/", 1)[1]):
        store.read()
    _, corrupt = store.read(on_corrupt="collect")
    assert [c.path for c in corrupt] == [victim]
    moved = store.move_aside(victim)
    assert moved.rsplit("/", 1)[1].startswith(".corrupt-") and victim not in location.names()
    df, corrupt = store.read()
    assert corrupt == [] and len(df) == SPEC.n_configs - len(packs[0].configs)
    again, _ = plan_packs(SPEC, df)
    assert [set(p.config_ids) for p in again] == [set(packs[0].config_ids)]


def test_schemas_are_unified_across_files(location):
    store = location.store
    packs, _ = plan_packs(SPEC, pd.DataFrame())
    _store_all(store, packs[1:])
    old = pa.table({"study": [SPEC.name], "dataset": ["synthetic"], "method": ["federate"], "seed": [0],
                    "config_id": [packs[0].config_ids[0]], "status": ["ok"], "valid_accuracy": [70.0]})
    pq.write_table(old, store.pack_path("synthetic", "federate", 0, "oldformat"), filesystem=location.fs)
    df, _ = store.read()
    assert len(df) == SPEC.n_configs - len(packs[0].configs) + 1
    assert df["test_accuracy"].isna().sum() >= 1


def test_a_column_the_study_does_not_declare_is_refused_not_dropped(location):
    """A value with no column must not vanish from the row silently."""
    store = location.store
    packs, _ = plan_packs(SPEC, pd.DataFrame())
    rows = _rows(packs[0])
    rows[0]["lam_undeclared"] = 0.5
    with pytest.raises(ValueError, match="lam_undeclared"):
        store.write_pack(rows, "synthetic", packs[0].method, packs[0].seed, packs[0].id)
    assert store.pack_files() == []


def test_side_tables_and_checkpoints_round_trip(location):
    store = location.store
    table = pd.DataFrame({"method": ["federate"], "seed": [0]})
    store.write_side_table(table, "plan.parquet")
    pd.testing.assert_frame_equal(store.read_side_table("plan.parquet"), table)
    assert store.read_side_table("missing.parquet") is None
    ckpt = store.checkpoint("abc")
    assert ckpt.read() is None
    ckpt.write(b"state")
    assert ckpt.read() == b"state" and store.checkpoint_ids() == ["abc"]
    ckpt.drop()
    assert ckpt.read() is None and store.checkpoint_ids() == []


def test_read_results_reads_the_location_and_several_together(location, tmp_path):
    if not (location.store.is_local or location.uri.startswith("s3://")):
        pytest.skip("read_results takes a URI or path; an fsspec filesystem is read through its ResultStore")
    packs, _ = plan_packs(SPEC, pd.DataFrame())
    _store_all(location.store, packs[:2])
    other = ResultStore(tmp_path / "other")
    _store_all(other, packs[2:])
    df = read_results(location.uri, tmp_path / "other")
    assert len(df) == SPEC.n_configs
    with pytest.raises(InputError, match="no such results"):
        read_results(tmp_path / "missing")
