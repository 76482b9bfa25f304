"""Results that are not what fairdp wrote (issue 41, class 6): a copy of a pack file under
another name, a file that is not fairdp's, a truncated file, a retyped or deleted column.

Each is either harmless (a hidden file, a column deleted as in a file written before the
column existed: read as nulls) or refused with one line naming the file (and the column, the
other file), wherever the store is read; ``--repair`` moves the file aside and the rerun ends
with the rows of the untouched results, bit for bit. The concrete cases come first, then a
Hypothesis property over random changes to a results directory built once by a real run.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairdp.cli import main
from fairdp.errors import InputError
from fairdp.study import ResultStore, parse_spec, read_results, run_study
from fairdp.study.store._store import PACK_KEY_TYPES
from tests.conftest import assert_input_error, run_cli

STUDY = {
    "name": "fuzz-store",
    "dataset": {"name": "synthetic", "rows": 300, "features": 4},
    "seeds": [0, 1],
    "train": {"epochs": 1, "batch_size": 100, "precision": "float32"},
    "evaluate": {"leakage": False, "mdl": False},
    "pack_size": 2,
    "methods": {"unconstrained": {}, "adversarial": {"grid": {"lam": [0.1, 0.5, 1.0]}}},
}
KEYS = ["dataset", "method", "seed", "config_id"]
TIMING = ["duration_s", "pack_duration_s", "finished_at", "node", "device"]  # how long and where, not what was computed
SIDE = (".plan.parquet", ".selection.parquet", ".history")


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(KEYS, ignore_index=True)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A study's results (8 configs in 6 pack files), its side tables, rows and analysis."""
    root = tmp_path_factory.mktemp("pristine")
    # one file per pack, as a run leaves a seed it has not finished: the changes below pick packs
    run_study(parse_spec(STUDY), str(root / "r"), executor="local", progress_stream=io.StringIO(), compact=False)
    (root / "study.yaml").write_text(yaml.safe_dump(STUDY))
    rows = _sorted(read_results(str(root / "r")))
    rc, out, _ = _analyze(root / "r")
    assert rc == 0 and len(rows) == 8
    return root, rows, out


def _copy(pristine_root: Path, where: Path) -> Path:
    """The pristine results (and their side tables) copied to ``where/r``."""
    shutil.copytree(pristine_root / "r", where / "r")
    for suffix in SIDE:
        src = pristine_root / f"r{suffix}"
        (shutil.copytree if src.is_dir() else shutil.copy)(src, where / f"r{suffix}")
    shutil.copy(pristine_root / "study.yaml", where / "study.yaml")
    return where / "r"


def _cli(*args: str) -> tuple[int, str, str]:
    """``fairdp ARGS`` in this process (a subprocess would import torch each time): its status,
    stdout and stderr; another exception than InputError propagates, failing the test."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def _analyze(results: Path) -> tuple[int, str, str]:
    return _cli("analyze", results)


def _refused(*args: str) -> str:
    """The one error line of ``fairdp ARGS``, which must exit 2 (``assert_input_error``)."""
    rc, out, err = _cli(*args)
    return assert_input_error(subprocess.CompletedProcess(args, rc, out, err))


def _packs(results: Path) -> list[Path]:
    return sorted(results.glob("*/*/part-*.parquet"))


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _retype(path: Path, column: str) -> None:
    """The file with ``column`` turned into strings."""
    table = pq.read_table(path)
    i = table.schema.get_field_index(column)
    pq.write_table(table.set_column(i, column, table[column].cast(pa.string())), path)


def _same_rows(got: pd.DataFrame, want: pd.DataFrame, dtypes: bool = True) -> None:
    got, want = _sorted(got), _sorted(want)
    pd.testing.assert_frame_equal(got[list(want.columns)], want, check_exact=True, check_dtype=dtypes)
    assert set(got.columns) == set(want.columns)


# -- the cases ---------------------------------------------------------------------------

def test_a_copy_of_a_pack_file_under_another_name_is_refused_naming_both_and_repair_moves_the_copy(pristine,
                                                                                                   tmp_path):
    root, rows, _ = pristine
    results = _copy(root, tmp_path)
    original = next(p for p in _packs(results) if "adversarial" in str(p))
    copy = original.with_name("part-s0-copy.parquet")
    shutil.copy(original, copy)
    with pytest.raises(InputError) as info:
        read_results(str(results))
    assert str(copy) in str(info.value) and str(original) in str(info.value) and "\n" not in str(info.value)
    before = _tree(tmp_path)
    study = str(tmp_path / "study.yaml")
    for cmd in (["analyze", str(results)], ["report", str(results), "-o", str(tmp_path / "rep")],
                ["compare", str(results), str(root / "r")],
                ["run", study, "--results", str(results), "--executor", "local"],
                ["run", study, "--results", str(results), "--executor", "local", "--dry-run"]):
        line = _refused(*cmd)
        assert str(copy) in line and str(original) in line and "--repair" in line and "duplicate" in line
    assert_input_error(run_cli("analyze", str(results)), str(copy), str(original))  # as a user's shell sees it
    assert _tree(tmp_path) == before  # nothing written, no report begun
    rc, _, err = _cli("run", study, "--results", results, "--executor", "local", "--repair")
    assert rc == 0 and f"moved aside {copy}" in err and "all 8 configs already stored" in err, err[-2000:]
    assert list(copy.parent.glob(".corrupt-*-part-s0-copy.parquet")) and original.exists()
    _same_rows(read_results(str(results)), rows)


def test_a_search_resume_refuses_a_duplicated_pack_file_too(pristine, tmp_path):
    root, _, _ = pristine
    results = _copy(root, tmp_path)
    original = _packs(results)[0]
    shutil.copy(original, original.with_name("part-s0-copy.parquet"))
    study = tmp_path / "search.yaml"
    study.write_text(yaml.safe_dump({**STUDY, "search": {
        "method": "adversarial", "sampler": "tpe", "trials": 2, "seed": 0, "objectives": {"valid_accuracy": "max"},
        "space": {"lam": {"low": 0.1, "high": 1.0}}}}))
    before = _tree(tmp_path)
    line = _refused("search", study, "--results", results, "--executor", "local")
    assert str(original.with_name("part-s0-copy.parquet")) in line and str(original) in line
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("place", ["stray.parquet", "synthetic/adversarial/rows-by-hand.parquet",
                                   "synthetic/unconstrained/extra/part-s0-x.parquet", "notes.txt"])
def test_a_file_in_the_results_that_is_not_a_pack_file_is_named_and_repair_moves_it_aside(pristine, tmp_path,
                                                                                           place):
    """The docs promise a results directory holds only rows, so that pandas, pyarrow, polars and
    duckdb read exactly them: a file fairdp did not put there is named, not skipped silently."""
    root, rows, _ = pristine
    results = _copy(root, tmp_path)
    stray = results / place
    stray.parent.mkdir(parents=True, exist_ok=True)
    if place.endswith(".parquet"):
        pq.write_table(pa.table({"a": [1, 2]}), stray)
    else:
        stray.write_text("notes")
    with pytest.raises(InputError, match="foreign file"):
        read_results(str(results))
    before = _tree(tmp_path)
    study = str(tmp_path / "study.yaml")
    for cmd in (["analyze", str(results)], ["run", study, "--results", str(results), "--executor", "local"]):
        line = _refused(*cmd)
        assert str(stray) in line and "<dataset>/<method>/part-*.parquet" in line
    assert _tree(tmp_path) == before
    rc, _, err = _cli("run", study, "--results", results, "--executor", "local", "--repair")
    assert rc == 0 and f"moved aside {stray}" in err, err[-2000:]
    assert not stray.exists() and list(stray.parent.glob(f".corrupt-*-{stray.name}"))
    _same_rows(read_results(str(results)), rows)


@pytest.mark.parametrize("column, was", [("test_accuracy", "double"), ("best_epoch", "int64")])
def test_a_retyped_column_is_named_with_its_file_wherever_the_rows_are_read(pristine, tmp_path, column, was):
    root, rows, _ = pristine
    results = _copy(root, tmp_path)
    victim = _packs(results)[0]
    _retype(victim, column)
    with pytest.raises(InputError, match=f"column '{column}' holds string, not {was}"):
        read_results(str(results))
    before = _tree(tmp_path)
    study = str(tmp_path / "study.yaml")
    for cmd in (["analyze", str(results)], ["report", str(results), "-o", str(tmp_path / "rep")],
                ["compare", str(root / "r"), str(results)],
                ["run", study, "--results", str(results), "--executor", "local"]):
        line = _refused(*cmd)
        assert str(victim) in line and f"column '{column}'" in line
    assert _tree(tmp_path) == before
    rc, _, err = _cli("run", study, "--results", results, "--executor", "local", "--repair")
    assert rc == 0, err[-2000:]
    again = read_results(str(results))  # its configs trained again: the same numbers
    _same_rows(again.drop(columns=TIMING), rows.drop(columns=TIMING))


def test_a_plugin_column_of_two_types_in_two_files_is_named(tmp_path):
    """A column fairdp does not know (a plugin's hyperparameter) must hold one type in every file."""
    folder = tmp_path / "r" / "d" / "m"
    folder.mkdir(parents=True)
    base = {"study": ["s"], "dataset": ["d"], "method": ["m"], "status": ["ok"]}
    pq.write_table(pa.table({**base, "seed": [0], "config_id": ["a"], "width": [1.5]}), folder / "part-s0-a.parquet")
    pq.write_table(pa.table({**base, "seed": [0], "config_id": ["b"], "width": ["wide"]}), folder / "part-s0-b.parquet")
    with pytest.raises(InputError, match=r"part-s0-b.parquet: .*column 'width' holds string, .*part-s0-a.parquet "
                                         r"holds double"):
        read_results(str(tmp_path / "r"))


# -- the property ----------------------------------------------------------------------------------

NAME = st.text("abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=12).filter(
    lambda n: n not in (".", ".."))
FOLDERS = ["", "synthetic", "synthetic/adversarial", "synthetic/unconstrained", "other/dir", ".hidden",
           "_underscored", "synthetic/.hidden"]
CONTENT = st.one_of(st.binary(max_size=64).map(lambda b: ("bytes", b)),
                    st.just(("foreign parquet", b"")), st.just(("keys, string seed", b"")))

ADD = st.tuples(st.just("add"), st.sampled_from(FOLDERS), st.booleans(), NAME, CONTENT)
COPY = st.tuples(st.just("copy"), st.integers(0, 5), st.sampled_from(FOLDERS), st.booleans(), NAME)
TRUNCATE = st.tuples(st.just("truncate"), st.integers(0, 5), st.floats(0, 1, exclude_max=True))
RETYPE = st.tuples(st.just("retype"), st.integers(0, 5), st.integers(0, 100))
DROP = st.tuples(st.just("drop"), st.integers(0, 5), st.integers(0, 100))
DOUBLE = st.tuples(st.just("double"), st.integers(0, 5))  # a file's rows twice over
EMPTY = st.tuples(st.just("empty"), st.integers(0, 5), NAME)  # a pack file's columns, no rows
TEAR = st.tuples(st.just("tear"), st.integers(0, 5), st.binary(max_size=64))  # a torn checkpoint of its pack
CHANGES = st.lists(st.one_of(ADD, COPY, TRUNCATE, RETYPE, DROP, DOUBLE, EMPTY, TEAR), max_size=4)


def _hidden(rel: str) -> bool:
    return any(part.startswith((".", "_")) for part in rel.split("/"))


@dataclass
class Applied:
    """What a list of changes did: the files that must be refused, the (file, column) deleted."""

    bad: set[str] = field(default_factory=set)
    dropped: list[tuple[str, str]] = field(default_factory=list)
    retyped: dict[str, set[str]] = field(default_factory=dict)  # a file bad only for these columns' types


def _apply(results: Path, changes, packs: list[Path]) -> Applied:
    done = Applied()
    for change in changes:
        kind = change[0]
        if kind in ("add", "copy"):
            folder, as_pack, name = (change[1], change[2], change[3]) if kind == "add" else change[2:]
            name = f"part-{name}.parquet" if as_pack else name
            target = results / folder / name
            rel = str(target.relative_to(results))
            if target.is_dir() or any(p.is_file() for p in target.parents if p != results.parent):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if kind == "copy":
                src = packs[change[1]]
                if src == target:
                    continue
                shutil.copy(src, target)
            else:
                what, blob = change[4]
                if what == "bytes":
                    target.write_bytes(blob)
                elif what == "foreign parquet":
                    pq.write_table(pa.table({"x": [1.0, 2.0]}), target)
                else:
                    pq.write_table(pa.table({"study": ["s"], "dataset": ["synthetic"], "method": ["m"],
                                             "seed": ["0"], "config_id": ["c"], "status": ["ok"]}), target)
            if not _hidden(rel):
                done.bad.add(str(target))
            continue
        path = packs[change[1]]
        try:
            table = pq.read_table(path)
        except (pa.ArrowException, OSError):
            continue  # already truncated or overwritten: refused anyway
        if kind == "empty":
            target = path.with_name(f"part-{change[2]}.parquet")
            if target not in packs:  # fairdp's columns, as every pack file has them
                pq.write_table(ResultStore(results).schema.empty_table(), target)
                done.bad.discard(str(target))  # what an earlier change put there is replaced
        elif kind == "tear":
            folder = results / ".checkpoints"
            folder.mkdir(exist_ok=True)
            (folder / f"{path.stem.rsplit('-', 1)[1]}.ckpt").write_bytes(change[2])
        elif kind == "double":
            pq.write_table(pa.concat_tables([table, table]), path)
            done.bad.add(str(path))
            done.retyped.pop(str(path), None)  # bad whatever columns leave it
        elif kind == "truncate":
            blob = path.read_bytes()
            path.write_bytes(blob[:int(change[2] * len(blob))])
            done.bad.add(str(path))
            done.retyped.pop(str(path), None)
        elif kind == "retype":
            numeric = [f.name for f in table.schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)]
            column = numeric[change[2] % len(numeric)]
            _retype(path, column)
            if str(path) not in done.bad:  # bad for this column alone, until it is deleted
                done.retyped.setdefault(str(path), set()).add(column)
            elif str(path) in done.retyped:
                done.retyped[str(path)].add(column)
            done.bad.add(str(path))
        else:
            column = table.column_names[change[2] % len(table.column_names)]
            pq.write_table(table.drop_columns([column]), path)
            if column in PACK_KEY_TYPES:
                done.bad.add(str(path))
                done.retyped.pop(str(path), None)
            else:  # as a file written before the column existed: its rows read it as null
                done.dropped.append((str(path), column))
                retyped = done.retyped.get(str(path))
                if retyped and column in retyped:  # the retyped column is gone with it
                    retyped.discard(column)
                    if not retyped:
                        done.bad.discard(str(path))
                        del done.retyped[str(path)]
    return done


def _expected(rows: pd.DataFrame, results: Path, dropped) -> pd.DataFrame:
    """The pristine rows with each deleted column null on the rows of the file it left."""
    want = rows.copy()
    gone = {}
    for path, column in dropped:
        keys = pq.read_table(path, columns=KEYS).to_pandas()
        mask = want.set_index(KEYS).index.isin(keys.set_index(KEYS).index)
        want[column] = want[column].astype(object) if want[column].dtype.kind in "iub" else want[column]
        want.loc[mask, column] = None
        gone.setdefault(column, set()).add(path)
    for column, paths in gone.items():
        if paths == {str(p) for p in _packs(results)}:  # left every file: no such column at all
            want = want.drop(columns=column)
    return want


def _check(pristine, changes, repair: bool = False) -> None:
    root, rows, table = pristine
    with tempfile.TemporaryDirectory() as tmp:
        results = _copy(root, Path(tmp))
        packs = _packs(results)
        done = _apply(results, changes, packs)
        try:
            got = read_results(str(results))
        except InputError as e:
            message = str(e)
            assert "\n" not in message and any(p in message for p in done.bad), (message, done.bad)
        else:
            assert not done.bad, f"{sorted(done.bad)} not refused"
            _same_rows(got, _expected(rows, results, done.dropped), dtypes=not done.dropped)
        rc, out, err = _analyze(results)
        errors = [ln for ln in err.splitlines() if ln.startswith("fairdp: error:")]
        if done.bad:
            assert rc == 2 and len(errors) == 1 and any(p in errors[0] for p in done.bad), (err, done.bad)
        elif not done.dropped:
            assert rc == 0 and out == table, err
        else:
            assert rc in (0, 2) and len(errors) == rc // 2, err
        if repair:
            _repair_and_compare(results, rows, done)


def _repair_and_compare(results: Path, rows: pd.DataFrame, done: Applied) -> None:
    spec = parse_spec(STUDY)
    try:
        # pack files kept: the rows expected below are named by the files they were changed in
        run_study(spec, str(results), executor="local", repair=True, progress_stream=io.StringIO(), compact=False)
    except InputError as e:
        # only a deleted column a resume compares (a row's settings) may refuse it, naming it
        assert done.dropped and any(c in str(e) for _, c in done.dropped), str(e)
        return
    got = read_results(str(results))  # nothing bad left
    # a bad file was moved aside and its configs trained again: whatever it lacked is back
    want = _expected(rows, results, [(p, c) for p, c in done.dropped if p not in done.bad])
    _same_rows(got.drop(columns=[c for c in TIMING if c in got]), want.drop(columns=[c for c in TIMING if c in want]),
               dtypes=not done.dropped)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=CHANGES)
def test_random_changes_to_the_results_are_harmless_or_refused_naming_the_file(pristine, changes):
    _check(pristine, changes)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=CHANGES)
def test_random_changes_to_the_results_many_examples(pristine, changes):
    _check(pristine, changes)


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=CHANGES)
def test_after_random_changes_a_repair_run_ends_with_the_untouched_rows_bit_for_bit(pristine, changes):
    _check(pristine, changes, repair=True)


def test_an_error_row_beside_an_ok_row_of_the_same_config_is_not_a_duplicate(pristine, tmp_path):
    """A config that failed in one pack and trained in another (its error pack retried without a
    config the grid no longer has) keeps both rows: only ok rows count, once each."""
    root, rows, _ = pristine
    results = _copy(root, tmp_path)
    original = _packs(results)[0]
    failed = pq.read_table(original)
    status = failed.schema.get_field_index("status")
    failed = failed.set_column(status, "status", pa.array(["error"] * len(failed), pa.string()))
    pq.write_table(failed, original.with_name("part-s0-failed.parquet"))
    got = read_results(str(results))
    assert len(got) == len(rows) + len(failed) and (got["status"] == "ok").sum() == len(rows)
