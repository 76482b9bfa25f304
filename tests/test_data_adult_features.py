"""Adult's feature presets: FEDERATE's Appendix D.2 trains on Wu, Zhang & Wu (2019)'s Adult
(9 attributes), which ``features: wu2019`` and ``wu2019_binary`` rebuild from the same rows."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairdp.data import load_dataset
from fairdp.data._tabular import ADULT_COLUMNS, ADULT_FEATURES, ADULT_FILES, WU2019_ATTRIBUTES
from fairdp.errors import InputError

# Wu et al.'s adult_preprocessing.py (binary version): the side of each attribute they code 1
WU_RULES = {"age": lambda c: c > 37, "workclass": lambda c: c == "Private", "education-num": lambda c: c > 9,
            "marital-status": lambda c: c == "Married-civ-spouse", "occupation": lambda c: c == "Craft-repair",
            "relationship": lambda c: c == "Not-in-family", "race": lambda c: c == "White",
            "hours-per-week": lambda c: c > 40, "native-country": lambda c: c == "United-States"}


@pytest.fixture(scope="module")
def adult():
    return {f: load_dataset("adult", features=f) for f in ADULT_FEATURES}


@pytest.fixture(scope="module")
def raw(adult):
    """The loader's rows, read here on their own."""
    frames = [pd.read_csv(f.path, header=None, names=ADULT_COLUMNS, skipinitialspace=True, na_values="?",
                          skiprows=skip) for f, skip in zip(ADULT_FILES, (0, 1))]
    return pd.concat(frames, ignore_index=True).dropna().reset_index(drop=True)


def attribute(feature_name: str) -> str:
    return feature_name.split("=")[0]


def test_every_preset_keeps_the_rows_labels_groups_and_split(adult):
    base = adult["all"]
    for name in ("wu2019", "wu2019_binary"):
        d = adult[name]
        np.testing.assert_array_equal(d.y, base.y)
        np.testing.assert_array_equal(d.s, base.s)
        for split in base.splits:
            np.testing.assert_array_equal(d.splits[split], base.splits[split])


def test_wu2019_is_the_default_encoding_less_capital_gain_and_loss(adult):
    base, wu = adult["all"], adult["wu2019"]
    assert {attribute(n) for n in wu.feature_names} == set(WU2019_ATTRIBUTES)
    dropped = {attribute(n) for n in base.feature_names} - {attribute(n) for n in wu.feature_names}
    assert dropped == {"capital-gain", "capital-loss"}
    for j, name in enumerate(wu.feature_names):  # what both keep is the same numbers
        np.testing.assert_array_equal(wu.X[:, j], base.X[:, base.feature_names.index(name)])


def test_wu2019_binary_splits_each_attribute_in_two_as_their_binary_adult(adult, raw):
    d = adult["wu2019_binary"]
    assert len(d.feature_names) == 18 and set(np.unique(d.X)) == {0.0, 1.0}
    assert (d.X.sum(axis=1) == 9).all()  # one side of each of the 9 attributes
    for name, rule in WU_RULES.items():
        columns = [j for j, n in enumerate(d.feature_names) if attribute(n) == name]
        picked = rule(raw[name].to_numpy())
        assert len(columns) == 2 and 0 < picked.sum() < len(picked), name
        # exactly one of the two columns holds the rows Wu et al. code 1
        assert sum(bool((d.X[:, j] == picked).all()) for j in columns) == 1, name


def test_race_as_the_sensitive_attribute_keeps_its_five_groups_and_leaves_the_features(raw):
    d = load_dataset("adult", sensitive="race", features="wu2019_binary")
    assert d.group_names == tuple(sorted(raw["race"].unique())) and d.n_groups == 5
    assert [d.group_names[g] for g in d.s] == raw["race"].tolist()
    assert "race" not in {attribute(n) for n in d.feature_names}
    assert "sex" in {attribute(n) for n in d.feature_names}  # not sensitive here: a feature, one-hot


@settings(max_examples=40, deadline=None)
@given(st.one_of(st.text(max_size=12), st.integers(), st.none()).filter(lambda v: v not in ADULT_FEATURES))
def test_any_other_features_value_is_refused_naming_the_option(value):
    with pytest.raises(InputError, match=r"dataset\.features"):
        load_dataset("adult", features=value)
