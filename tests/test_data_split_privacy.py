"""The split and everything published from it never read the protected attribute.

PF-LD's Definition 1 (Tran et al. 2021) and the private reductions protect one record's
attribute: two datasets are neighbours when one record's attribute differs and its features
and label do not. Every result row publishes ``n_train`` (inside the privacy event's
sampling probability ``batch / n_train``, column ``privacy_event``) and models trained on the
train split's rows, standardised with its statistics. So for a neighbour (a copy of the raw
file with one record's attribute changed, loaded through the same loader) the split
indices, ``n_train``, the standardised feature matrix and the DP-SGD / PF-LD events must not
change. Splitting by (label, group), as fairdp once did, failed this for every record tried:
one changed sex in Adult moved thousands of rows between the splits.

The fetched datasets' modified copies are loaded by replacing the loader's ``fetch`` (which
would refuse them: their digest is not the pinned one) with one returning their paths;
everything after reading the files is the loader's own code. ``FAIRDP_TEST_FLIPS=N`` checks
N single-record neighbours per dataset instead of the quick defaults.
"""

from __future__ import annotations

import csv
import inspect
import io
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fairdp.data import SPLITS, _tabular, _text, load_dataset, stratified_split
from fairdp.data._tabular import (
    ADULT_COLUMNS,
    ADULT_FILES,
    COMPAS_FILES,
    GERMAN_COLUMNS,
    GERMAN_FILES,
)
from fairdp.engine._checkpoint import data_fingerprint
from fairdp.engine._shared import published_data_fingerprint
from fairdp.errors import InputError
from fairdp.privacy import dpsgd_event, pfld_event
from fairdp.privacy._shared import event_to_json

from .test_data_encoded import CELEBA_ATTRS, celeba_values, write_celeba_csv

pytestmark = pytest.mark.xdist_group("data_split_privacy")  # one xdist worker computes the module's shared runs once

EXTRA = int(os.environ.get("FAIRDP_TEST_FLIPS", "0"))
RNG_SEED = 20210  # which records are flipped: fixed, so a failure names the same record again


def flips(default: int) -> int:
    return EXTRA or default


# --- what a result row publishes from the loaded dataset --------------------------------------


def events(ds, batch_size: int = 256, epochs: int = 3) -> tuple[str, str]:
    """The ``privacy_event`` column of a DP-SGD and a PF-LD config trained on ``ds`` (fixed noise
    multipliers: the event reads the data only through ``n_train``, as ``RunInfo.of`` does)."""
    n = len(ds.splits["train"])
    b = min(batch_size, n)
    return (event_to_json(dpsgd_event(1.1, b, n, epochs), "add_or_remove_one"),
            event_to_json(pfld_event(1.1, 3.0, b, n, epochs), "replace_attribute"))


def assert_neighbour_publishes_the_same(base, other, rows, *, what: str, same_x: bool = True) -> None:
    """``other`` is ``base`` with the attribute of ``rows`` (loaded-row indices) changed: the
    change took effect there only, and the split, n_train, X and the events are unchanged."""
    changed = np.flatnonzero(base.s != other.s)
    assert changed.tolist() == sorted(np.atleast_1d(rows).tolist()), f"{what}: the flip did not land where meant"
    np.testing.assert_array_equal(base.y, other.y)
    for k in SPLITS:
        assert np.array_equal(base.splits[k], other.splits[k]), (
            f"{what}: the {k} split changed ({len(np.setxor1d(base.splits[k], other.splits[k]))} rows moved, "
            f"n_{k} {len(base.splits[k])} -> {len(other.splits[k])})")
    assert len(base.splits["train"]) == len(other.splits["train"])
    if same_x:
        assert np.array_equal(base.X, other.X), f"{what}: the standardised features changed"
    assert events(base) == events(other), f"{what}: the privacy event changed"
    # every row's protocol publishes the data's fingerprint: it must not hash the attribute
    assert published_data_fingerprint(base) == published_data_fingerprint(other), (
        f"{what}: the published data fingerprint changed")
    assert data_fingerprint(base) != data_fingerprint(other)  # the local checkpoint identity does see it


def load_from(monkeypatch, name: str, paths: dict[str, Path], **options):
    """``load_dataset(name)`` reading ``paths`` instead of the cached, checksummed files."""
    with monkeypatch.context() as m:
        m.setattr(_tabular, "fetch", lambda files: {k: Path(v) for k, v in paths.items()})
        return load_dataset(name, **options)


def edited(lines: list[str], indices, edit) -> str:
    """The file text with the body of each line in ``indices`` (its line ending kept) replaced
    by ``edit(body)``."""
    out = list(lines)
    for i in np.atleast_1d(indices):
        body = out[int(i)].rstrip("\r\n")
        out[int(i)] = edit(body) + out[int(i)][len(body):]
    return "".join(out)


def write(path: Path, text: str) -> Path:
    with open(path, "w", newline="") as f:
        f.write(text)
    return path


def lines_of(path: Path) -> list[str]:
    """The file's lines, each with its own ending (\\n or \\r\\n), untranslated."""
    with open(path, newline="") as f:
        text = f.read()
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def choose(rng, n: int, k: int) -> np.ndarray:
    return np.sort(rng.choice(n, size=min(k, n), replace=False))


# --- Adult: sex, one line of adult.data or adult.test -----------------------------------------


class AdultRaw:
    """The two raw files as lines, and which (file, line) each loaded row comes from."""

    SEX = ADULT_COLUMNS.index("sex")
    OTHER = {"Male": "Female", "Female": "Male"}

    def __init__(self):
        load_dataset("adult")  # fetched (and checked) once into the session's cache
        self.paths = {f.filename: f.path for f in ADULT_FILES}
        self.lines = {k: lines_of(p) for k, p in self.paths.items()}
        self.where: list[tuple[str, int]] = []
        for fname, skip in (("adult.data", 0), ("adult.test", 1)):  # as load_adult reads them
            records = [i for i, ln in enumerate(self.lines[fname]) if i >= skip and ln.strip()]
            frame = pd.read_csv(self.paths[fname], header=None, names=ADULT_COLUMNS, skipinitialspace=True,
                                na_values="?", skiprows=skip)
            assert len(frame) == len(records)
            self.where += [(fname, records[i]) for i in np.flatnonzero(frame.notna().all(axis=1).to_numpy())]

    def flipped(self, rows, folder: Path) -> dict[str, Path]:
        by_file: dict[str, list[int]] = {}
        for r in np.atleast_1d(rows):
            fname, i = self.where[int(r)]
            by_file.setdefault(fname, []).append(i)
        out = dict(self.paths)
        for fname, indices in by_file.items():
            out[fname] = write(folder / fname, edited(self.lines[fname], indices, self._flip))
        return out

    def _flip(self, body: str) -> str:
        fields = body.split(",")
        fields[self.SEX] = " " + self.OTHER[fields[self.SEX].strip()]
        return ",".join(fields)


# --- COMPAS: race (African-American <-> Caucasian), one CSV line -------------------------------


class CompasRaw:
    OTHER = {"African-American": "Caucasian", "Caucasian": "African-American"}

    def __init__(self):
        load_dataset("compas")
        self.path = COMPAS_FILES[0].path
        self.lines = lines_of(self.path)
        self.race = next(csv.reader([self.lines[0]])).index("race")
        df = pd.read_csv(self.path)
        keep = ((df.days_b_screening_arrest <= 30) & (df.days_b_screening_arrest >= -30)  # load_compas's filters
                & (df.is_recid != -1) & (df.c_charge_degree != "O") & (df.score_text != "N/A")
                & df.race.isin(list(self.OTHER)))
        assert len(df) == len(self.lines) - 1  # no field holds a line break
        self.line_of = np.flatnonzero(keep.to_numpy()) + 1  # loaded row -> file line (after the header)

    def flipped(self, rows, folder: Path) -> dict[str, Path]:
        text = edited(self.lines, self.line_of[np.atleast_1d(rows)], self._flip)
        return {COMPAS_FILES[0].filename: write(folder / COMPAS_FILES[0].filename, text)}

    def _flip(self, body: str) -> str:
        fields = next(csv.reader([body]))
        fields[self.race] = self.OTHER[fields[self.race]]
        out = io.StringIO()
        csv.writer(out, lineterminator="").writerow(fields)
        return out.getvalue()


@pytest.fixture(scope="module")
def adult_raw():
    return AdultRaw()


@pytest.fixture(scope="module")
def compas_raw():
    return CompasRaw()


@pytest.mark.parametrize("name, singles", [("adult", 30), ("compas", 120)])
def test_one_record_changed_attribute_changes_no_published_count(name, singles, adult_raw, compas_raw, tmp_path,
                                                                 monkeypatch):
    raw = adult_raw if name == "adult" else compas_raw
    base = load_dataset(name)
    rng = np.random.default_rng(RNG_SEED)
    for r in choose(rng, base.n_rows, flips(singles)):
        other = load_from(monkeypatch, name, raw.flipped(r, tmp_path))
        assert_neighbour_publishes_the_same(base, other, r, what=f"{name} row {r}")


@pytest.mark.parametrize("name", ["adult", "compas"])
def test_three_hundred_records_changed_together_change_nothing_published(name, adult_raw, compas_raw, tmp_path,
                                                                         monkeypatch):
    """A few hundred random records' attributes changed at once (a path of neighbours, each a
    step of the relation): still the same split, n_train, features and events."""
    raw = adult_raw if name == "adult" else compas_raw
    base = load_dataset(name)
    rows = choose(np.random.default_rng(RNG_SEED + 1), base.n_rows, 300)
    other = load_from(monkeypatch, name, raw.flipped(rows, tmp_path))
    assert_neighbour_publishes_the_same(base, other, rows, what=f"{name}, 300 rows")


# --- German credit with the attribute among the features: scaled by public constants ------------


@pytest.mark.parametrize("sensitive", ["age", "sex"])
def test_german_included_attribute_is_scaled_publicly(sensitive, tmp_path, monkeypatch):
    """``include_sensitive=True`` puts the attribute's own column among the features; changing
    one record's attribute then changes that record's entries of that column and nothing else:
    not the other rows' scaling (age is scaled by fixed constants, not train statistics)."""
    base = load_dataset("german", sensitive=sensitive, include_sensitive=True)
    path = GERMAN_FILES[0].path
    lines = lines_of(path)
    col = GERMAN_COLUMNS.index("age" if sensitive == "age" else "status_sex")
    if sensitive == "age":
        own = [base.feature_names.index("age")]
    else:
        own = [j for j, f in enumerate(base.feature_names) if f.startswith("status_sex=")]
    for r in choose(np.random.default_rng(RNG_SEED + 2), base.n_rows, flips(40)):
        fields = lines[r].split()
        if sensitive == "age":
            new = "24" if int(fields[col]) >= 25 else "25"
        else:
            new = "A93" if fields[col] in _tabular.GERMAN_FEMALE else "A92"

        def edit(body, new=new):
            f = body.split(" ")
            f[col] = new
            return " ".join(f)

        other = load_from(monkeypatch, "german", {"german.data": write(tmp_path / "german.data",
                                                                       edited(lines, r, edit))},
                          sensitive=sensitive, include_sensitive=True)
        what = f"german ({sensitive}) row {r}"
        assert_neighbour_publishes_the_same(base, other, r, what=what, same_x=False)
        differs = np.argwhere(base.X != other.X)
        assert set(differs[:, 0].tolist()) == {r} and set(differs[:, 1].tolist()) <= set(own), what
        if sensitive == "age":
            assert other.X[r, own[0]] == pytest.approx((int(new) - 25) / 10), what


def test_german_age_feature_scaling_is_public_and_documented():
    ds = load_dataset("german", sensitive="age", include_sensitive=True)
    age = pd.read_csv(GERMAN_FILES[0].path, sep=" ", header=None, names=GERMAN_COLUMNS)["age"].to_numpy(float)
    np.testing.assert_allclose(ds.X[:, ds.feature_names.index("age")], (age - 25) / 10, rtol=1e-6)
    assert "(age - 25) / 10" in ds.preprocessing and "stratified by label only" in ds.preprocessing
    # with the other attribute, age is an ordinary feature: standardised on the train rows
    by_sex = load_dataset("german", sensitive="sex")
    train = by_sex.splits["train"]
    j = by_sex.feature_names.index("age")
    np.testing.assert_allclose(by_sex.X[:, j], (age - age[train].mean()) / age[train].std(), rtol=1e-5, atol=1e-5)


# --- user files: generic, celeba, text ---------------------------------------------------------


def generic_table(n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    sex = np.where(rng.random(n) < 0.3, "F", "M")
    y = np.where(rng.random(n) < np.where(sex == "F", 0.2, 0.5), "yes", "no")
    return pd.DataFrame({"f1": rng.normal(size=n), "target": y, "f2": rng.normal(size=n) + (sex == "F"),
                         "sex": sex, "f3": rng.integers(0, 9, size=n).astype(float)})


def test_generic_csv_neighbours(tmp_path):
    table = generic_table()
    path = tmp_path / "people.csv"
    table.to_csv(path, index=False)
    options = {"label": "target", "sensitive": "sex", "seed": 3}
    base = load_dataset("generic", path=str(path), **options)
    assert base.feature_names == ("f1", "f2", "f3")
    for r in choose(np.random.default_rng(RNG_SEED + 3), len(table), flips(200)):
        other_table = table.copy()
        other_table.loc[r, "sex"] = {"F": "M", "M": "F"}[table.loc[r, "sex"]]
        other_table.to_csv(path, index=False)
        assert_neighbour_publishes_the_same(base, load_dataset("generic", path=str(path), **options), r,
                                            what=f"generic row {r}")


def test_celeba_neighbours(tmp_path):
    values = celeba_values(200)
    male = CELEBA_ATTRS.index("Male")
    path = tmp_path / "list_attr_celeba.csv"
    base = load_dataset("celeba", path=str(write_celeba_csv(path, values)), seed=1)
    for r in choose(np.random.default_rng(RNG_SEED + 4), len(values), flips(40)):
        other = values.copy()
        other[r, male] = -other[r, male]
        assert_neighbour_publishes_the_same(base, load_dataset("celeba", path=str(write_celeba_csv(path, other)),
                                                               seed=1), r, what=f"celeba row {r}")


def test_text_neighbours(tmp_path, monkeypatch):
    """The text loader's split, with a stand-in encoder (the encoding reads the text only)."""
    monkeypatch.setenv("FAIRDP_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(_text, "_encode", lambda texts, *a, **k: np.array(
        [[len(t), t.count("a"), t.count("e")] for t in texts], dtype=np.float32))
    n = 90
    rng = np.random.default_rng(5)
    table = pd.DataFrame({"text": [f"review {i} " + "ab" * int(rng.integers(1, 9)) for i in range(n)],
                          "label": rng.choice(["pos", "neg"], n), "sensitive": rng.choice(["a", "b"], n)})
    path = tmp_path / "reviews.csv"
    table.to_csv(path, index=False)
    base = load_dataset("text", path=str(path), model="stand-in")
    for r in choose(np.random.default_rng(RNG_SEED + 5), n, flips(15)):
        other = table.copy()
        other.loc[r, "sensitive"] = {"a": "b", "b": "a"}[table.loc[r, "sensitive"]]
        other.to_csv(path, index=False)
        assert_neighbour_publishes_the_same(base, load_dataset("text", path=str(path), model="stand-in"), r,
                                            what=f"text row {r}")


def test_synthetic_split_is_the_label_only_split():
    ds = load_dataset("synthetic", rows=600, split_seed=4)
    expected = stratified_split(ds.y, seed=4)
    for k in SPLITS:
        np.testing.assert_array_equal(ds.splits[k], expected[k])


# --- the split function itself -----------------------------------------------------------------


def test_split_takes_no_attribute():
    params = inspect.signature(stratified_split).parameters
    assert list(params) == ["y", "fractions", "seed"]
    assert params["fractions"].kind is params["seed"].kind is inspect.Parameter.KEYWORD_ONLY


@st.composite
def split_inputs(draw):
    classes = draw(st.integers(1, 4))
    n = draw(st.integers(1, 250))
    y = draw(hnp.arrays(np.int64, n, elements=st.integers(-2, classes - 3)))
    parts = draw(st.tuples(*[st.integers(0, 10)] * 3).filter(lambda t: sum(t) > 0))
    fractions = tuple(p / sum(parts) for p in parts)
    return y, fractions, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(split_inputs())
def test_split_properties(inputs):
    y, fractions, seed = inputs
    split = stratified_split(y, fractions=fractions, seed=seed)
    assert set(split) == set(SPLITS)
    # every row in exactly one split, each split's indices sorted int64
    every = np.concatenate([split[k] for k in SPLITS])
    assert np.array_equal(np.sort(every), np.arange(len(y)))
    for k in SPLITS:
        assert split[k].dtype == np.int64 and np.all(np.diff(split[k]) > 0)
    # label proportions kept within one row per class per split
    for label in np.unique(y):
        n_c = int((y == label).sum())
        for k, f in zip(SPLITS, fractions, strict=True):
            assert abs(int((y[split[k]] == label).sum()) - f * n_c) <= 1
    # deterministic in the seed
    again = stratified_split(y.copy(), fractions=fractions, seed=seed)
    assert all(np.array_equal(split[k], again[k]) for k in SPLITS)


@st.composite
def labelled_groups(draw):
    """Labels with two classes of >= 5 rows (so no split is empty) and two arbitrary group
    assignments of the same rows, each with both groups."""
    n = draw(st.integers(10, 120))
    y = draw(hnp.arrays(np.int64, n, elements=st.integers(0, 1)).filter(lambda a: np.bincount(a, minlength=2).min() >= 5))
    groups = hnp.arrays(np.int64, n, elements=st.integers(0, 2)).filter(lambda a: len(np.unique(a)) >= 2)
    return y, draw(groups), draw(groups), draw(st.integers(0, 1000))


@settings(max_examples=40, deadline=None, database=None, derandomize=True)
@given(labelled_groups())
def test_generic_split_is_blind_to_any_change_of_groups(data):
    """Through a loader: any reassignment of groups (not just one record's) leaves the split."""
    y, s1, s2, seed = data
    X = np.arange(len(y) * 2, dtype=np.float64).reshape(-1, 2)
    with tempfile.TemporaryDirectory() as tmp:
        loaded = []
        for i, s in enumerate((s1, s2)):
            path = Path(tmp) / f"d{i}.npz"
            np.savez(path, X=X, y=y, s=s)
            loaded.append(load_dataset("generic", path=str(path), label="y", sensitive="s", seed=seed))
    for k in SPLITS:
        np.testing.assert_array_equal(loaded[0].splits[k], loaded[1].splits[k])
    np.testing.assert_array_equal(loaded[0].splits["train"], stratified_split(y, seed=seed)["train"])


@pytest.mark.parametrize("args, kwargs, needle", [
    ((np.zeros(10),), {"fractions": (0.5, 0.2, 0.2)}, "fractions"),
    ((np.zeros(10),), {"fractions": (0.5, 0.5)}, "fractions"),
    ((np.zeros(10),), {"fractions": (1.2, -0.1, -0.1)}, "fractions"),
    ((np.zeros(10),), {"fractions": ("a", "b", "c")}, "fractions"),
    ((np.zeros(10),), {"seed": -1}, "seed"),
    ((np.zeros(10),), {"seed": 1.5}, "seed"),
    ((np.zeros((5, 2)),), {}, "labels"),
    ((np.zeros(0),), {}, "labels"),
])
def test_bad_split_input_is_one_line_input_error(args, kwargs, needle):
    with pytest.raises(InputError, match=needle) as err:
        stratified_split(*args, **kwargs)
    assert "\n" not in str(err.value)
