"""The synthetic generator: its two knobs do what the docstring says, and it is deterministic."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from fairdp.data import load_dataset
from fairdp.data._synthetic import make_synthetic
from fairdp.errors import InputError

from .conftest import assert_input_error, run_main


def probe_accuracy(d, target: str) -> float:
    """Test accuracy of a logistic regression predicting ``y`` or ``s`` from X, trained on train."""
    tr, te = d.split("train"), d.split("test")
    model = LogisticRegression(max_iter=1000).fit(tr.X, getattr(tr, target))
    return float((model.predict(te.X) == getattr(te, target)).mean())


def test_shapes_and_names():
    d = load_dataset("synthetic", rows=600, features=7, groups=3, classes=4)
    assert d.X.shape == (600, 7) and d.X.dtype == np.float32
    assert d.y.dtype == np.int64 and d.s.dtype == np.int64
    assert d.class_names == ("0", "1", "2", "3") and d.group_names == ("g0", "g1", "g2")
    assert d.feature_names == ("label_0", "label_1", "label_2", "label_3", "leak_0", "leak_1", "leak_2")
    assert set(np.unique(d.y)) == {0, 1, 2, 3} and set(np.unique(d.s)) == {0, 1, 2}
    assert sum(len(v) for v in d.splits.values()) == 600 and d.sha256 == {}
    assert "rows=600" in d.source


def test_leakage_controls_what_a_probe_recovers():
    silent = make_synthetic(rows=3000, label_correlation=0.0, leakage=0.0)
    leaky = make_synthetic(rows=3000, label_correlation=0.0, leakage=3.0)
    assert abs(probe_accuracy(silent, "s") - 0.5) < 0.05
    assert probe_accuracy(leaky, "s") > 0.9
    assert probe_accuracy(silent, "y") > 0.8  # the label stays learnable either way


@pytest.mark.parametrize(("classes", "groups"), [(2, 2), (3, 3)])
@pytest.mark.parametrize("rho", [0.0, 0.5, 1.0])
def test_label_correlation_sets_p_y_equals_s(rho, classes, groups):
    d = make_synthetic(rows=6000, classes=classes, groups=groups, label_correlation=rho, seed=5)
    expected = 1 / classes + rho * (1 - 1 / classes)
    assert abs(np.mean(d.y == d.s % classes) - expected) < 0.025


def test_deterministic_given_seed():
    a, b = make_synthetic(seed=7, split_seed=2), make_synthetic(seed=7, split_seed=2)
    for x, y in ((a.X, b.X), (a.y, b.y), (a.s, b.s)):
        np.testing.assert_array_equal(x, y)
    for k in a.splits:
        np.testing.assert_array_equal(a.splits[k], b.splits[k])
    assert not np.array_equal(a.X, make_synthetic(seed=8).X)
    other_split = make_synthetic(seed=7, split_seed=3)
    np.testing.assert_array_equal(a.X, other_split.X)
    assert not np.array_equal(a.splits["train"], other_split.splits["train"])


@pytest.mark.parametrize(
    ("option", "value"),
    [("label_correlation", 1.5), ("label_correlation", -0.1), ("leakage", -1.0),
     ("leakage", float("nan")), ("groups", 1), ("features", 1), ("rows", "many"), ("seed", 0.5)],
)
def test_bad_options_name_the_option(option, value):
    with pytest.raises(InputError, match=rf"^dataset\.{option}: "):
        load_dataset("synthetic", **{option: value})


def test_cli():
    base = ("data", "describe", "synthetic", "--json")
    proc = run_main(*base, "-o", "rows=500", "-o", "classes=3")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["rows"] == 500 and summary["classes"] == 3 and summary["sha256"] == {}

    proc = run_main(*base, "-o", "label_correlation=2")
    assert_input_error(proc, "dataset.label_correlation")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
