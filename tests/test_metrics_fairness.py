"""Fairness metrics: shortcuts vs fairlearn/sklearn, packs vs 1-D calls, hand cases, bad input."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from fairlearn.metrics import (
    MetricFrame,
    false_positive_rate,
    selection_rate,
    true_positive_rate,
)
from sklearn.metrics import accuracy_score, f1_score

from fairdp.errors import InputError
from fairdp.fairness import (
    accuracy,
    ap_gap,
    dp_gap,
    eo_gap,
    grms,
    group_rates,
    macro_f1,
    tpr_gap,
)

# Undefined rates must never reach a division: any warning fails the test.
pytestmark = pytest.mark.filterwarnings("error")

TASKS = [(2, 2), (2, 4), (5, 2), (5, 4)]  # (classes, groups)
SEEDS = [0, 1, 2]


def _random(n_classes: int, n_groups: int, seed: int, k: int | None = None):
    rng = np.random.default_rng(seed)
    n = 600
    shape = (n,) if k is None else (k, n)
    return rng.integers(0, n_classes, n), rng.integers(0, n_classes, shape), rng.integers(
        0, n_groups, n)


def _between_groups(y, y_pred, s, c: int) -> pd.Series:
    """fairlearn's max - min over groups of the one-vs-rest rates of class c, percent."""
    frame = MetricFrame(
        metrics={"tpr": true_positive_rate, "fpr": false_positive_rate, "sr": selection_rate},
        y_true=(y == c).astype(int), y_pred=(y_pred == c).astype(int), sensitive_features=s,
    )
    return 100 * frame.difference(method="between_groups")


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("n_classes", "n_groups"), TASKS)
def test_shortcuts_match_fairlearn(n_classes, n_groups, seed):
    y, y_pred, s = _random(n_classes, n_groups, seed)
    classes = [1] if n_classes == 2 else range(n_classes)
    per_class = pd.DataFrame([_between_groups(y, y_pred, s, c) for c in classes])
    acc = MetricFrame(metrics=accuracy_score, y_true=y, y_pred=y_pred, sensitive_features=s)

    assert tpr_gap(y, y_pred, s) == pytest.approx(per_class["tpr"].max())
    assert grms(y, y_pred, s) == pytest.approx(math.sqrt((per_class["tpr"] ** 2).mean()))
    assert dp_gap(y_pred, s) == pytest.approx(per_class["sr"].max())
    assert eo_gap(y, y_pred, s) == pytest.approx(per_class[["tpr", "fpr"]].to_numpy().max())
    assert ap_gap(y, y_pred, s) == pytest.approx(100 * acc.difference(method="between_groups"))
    assert accuracy(y, y_pred) == pytest.approx(100 * accuracy_score(y, y_pred))
    assert macro_f1(y, y_pred) == pytest.approx(100 * f1_score(y, y_pred, average="macro"))


@pytest.mark.parametrize(("n_classes", "n_groups"), TASKS)
def test_group_rates_match_fairlearn(n_classes, n_groups):
    y, y_pred, s = _random(n_classes, n_groups, seed=7)
    rates = group_rates(y, y_pred, s)
    classes = [1] if n_classes == 2 else list(range(n_classes))
    assert list(rates.columns) == ["group", "class", "count", "positives", "tpr", "fpr",
                                   "selection_rate", "accuracy"]
    assert len(rates) == n_groups * len(classes)
    acc = MetricFrame(metrics=accuracy_score, y_true=y, y_pred=y_pred, sensitive_features=s)
    for c in classes:
        frame = MetricFrame(
            metrics={"tpr": true_positive_rate, "fpr": false_positive_rate,
                     "selection_rate": selection_rate, "count": lambda t, p: len(t)},
            y_true=(y == c).astype(int), y_pred=(y_pred == c).astype(int), sensitive_features=s,
        )
        mine = rates[rates["class"] == c].set_index("group")
        for col in ["tpr", "fpr", "selection_rate"]:
            np.testing.assert_allclose(mine[col], 100 * frame.by_group[col].to_numpy(float))
        np.testing.assert_array_equal(mine["count"], frame.by_group["count"].to_numpy(int))
        np.testing.assert_allclose(mine["accuracy"], 100 * acc.by_group.to_numpy(float))
        np.testing.assert_array_equal(mine["positives"], np.bincount(s[y == c], minlength=n_groups))


@pytest.mark.parametrize(("n_classes", "n_groups"), TASKS)
def test_pack_equals_stacked_calls(n_classes, n_groups):
    y, pack, s = _random(n_classes, n_groups, seed=3, k=6)
    for metric in (tpr_gap, grms, eo_gap, ap_gap):
        got = metric(y, pack, s)
        assert got.shape == (6,)
        np.testing.assert_array_equal(got, [metric(y, p, s) for p in pack])
    np.testing.assert_array_equal(dp_gap(pack, s), [dp_gap(p, s) for p in pack])
    for metric in (accuracy, macro_f1):
        np.testing.assert_array_equal(metric(y, pack), [metric(y, p) for p in pack])
    rates = group_rates(y, pack, s)
    for k, p in enumerate(pack):
        one = rates[rates["config"] == k].drop(columns="config").reset_index(drop=True)
        pd.testing.assert_frame_equal(one, group_rates(y, p, s))


# Binary hand case, 8 rows: group 0 = rows 0-3, group 1 = rows 4-7.
Y = np.array([1, 1, 0, 0, 1, 0, 0, 0])
S = np.array([0, 0, 0, 0, 1, 1, 1, 1])
P = np.array([1, 0, 0, 1, 1, 0, 1, 0])


def test_binary_hand_case():
    # TPR 1/2 vs 1/1, FPR 1/2 vs 1/3, selection 2/4 vs 2/4, accuracy 2/4 vs 3/4.
    assert tpr_gap(Y, P, S) == pytest.approx(50.0)
    assert grms(Y, P, S) == tpr_gap(Y, P, S)
    assert dp_gap(P, S) == 0.0
    assert eo_gap(Y, P, S) == pytest.approx(50.0)
    assert ap_gap(Y, P, S) == pytest.approx(25.0)
    assert accuracy(Y, P) == pytest.approx(62.5)
    assert macro_f1(Y, P) == pytest.approx(100 * (4 / 7 + 6 / 9) / 2)


def test_constant_and_perfect_predictors():
    for const in (0, 1):
        P0 = np.full(8, const)
        assert dp_gap(P0, S) == 0.0
        assert tpr_gap(Y, P0, S) == 0.0
        assert eo_gap(Y, P0, S) == 0.0
    # Perfect: every gap 0 except dp_gap = base-rate difference 2/4 - 1/4.
    assert tpr_gap(Y, Y, S) == grms(Y, Y, S) == eo_gap(Y, Y, S) == ap_gap(Y, Y, S) == 0.0
    assert dp_gap(Y, S) == pytest.approx(25.0)


def test_group_without_positives_is_left_out():
    # Group 1 has no positive example: its TPR is undefined.
    y = np.array([1, 1, 0, 0, 0, 0, 0, 0])
    p = np.array([1, 0, 1, 0, 1, 0, 0, 0])
    assert math.isnan(tpr_gap(y, p, S))  # only one group left
    assert math.isnan(grms(y, p, S))
    assert eo_gap(y, p, S) == pytest.approx(25.0)  # the FPR gap alone: 1/2 vs 1/4
    rates = group_rates(y, p, S)
    assert math.isnan(rates["tpr"][1]) and rates["positives"][1] == 0
    # Three groups, group 1 without positives: the TPR gap is over groups 0 and 2.
    s3 = np.repeat([0, 1, 2], 4)
    y3 = np.array([1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0])
    p3 = np.array([1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1])
    assert tpr_gap(y3, p3, s3) == pytest.approx(50.0)  # TPR 50, -, 100
    assert eo_gap(y3, p3, s3) == pytest.approx(100.0)  # FPR 0, 50, 100
    assert dp_gap(p3, s3) == pytest.approx(75.0)  # selection 25, 50, 100
    assert ap_gap(y3, p3, s3) == pytest.approx(25.0)  # accuracy 75, 50, 75
    # A group absent altogether (n_groups larger than the codes) is left out of every gap.
    assert ap_gap(Y, P, S, n_groups=3) == ap_gap(Y, P, S)
    assert math.isnan(dp_gap(P, np.zeros(8, int), n_groups=2))


def test_single_group_is_nan():
    s = np.zeros(8, int)
    for value in (tpr_gap(Y, P, s), grms(Y, P, s), dp_gap(P, s), eo_gap(Y, P, s), ap_gap(Y, P, s)):
        assert math.isnan(value)


def test_three_class_grms():
    s = np.repeat([0, 1], 6)
    y = np.array([0, 0, 1, 1, 2, 2] * 2)
    p = np.array([0, 0, 1, 0, 2, 2, 0, 1, 1, 1, 2, 2])
    # Per-class TPR: group 0 (100, 50, 100), group 1 (50, 100, 100): gaps 50, 50, 0.
    assert grms(y, p, s) == pytest.approx(math.sqrt((50**2 + 50**2 + 0) / 3))
    assert tpr_gap(y, p, s) == pytest.approx(50.0)


def test_n_classes_makes_a_two_class_sample_multiclass():
    # Scored as 3 classes: class 0 TPR 1/2 vs 2/3 (gap 50/3), class 1 gap 50, class 2 undefined.
    assert tpr_gap(Y, P, S, n_classes=3) == pytest.approx(50.0)
    assert grms(Y, P, S, n_classes=3) == pytest.approx(math.sqrt((50**2 + (50 / 3) ** 2) / 2))
    assert eo_gap(Y, P, S, n_classes=3) == eo_gap(Y, P, S)
    assert dp_gap(P, S, n_classes=3) == dp_gap(P, S)


def test_accepts_bool_and_whole_float_codes():
    assert tpr_gap(Y.astype(bool), P.astype(float), S.astype(np.float32)) == tpr_gap(Y, P, S)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"y": Y[:7]}, "y"),
        ({"s": S[:7]}, "s"),
        ({"y_pred": P[:7]}, "y"),
        ({"y_pred": P + 0.5}, "y_pred"),
        ({"y": Y.astype(str)}, "y"),
        ({"s": S - 1}, "s"),
        ({"s": np.array([0, 0, 0, 0, 1, 1, 1, np.nan])}, "s"),
        ({"y_pred": np.zeros((2, 2, 8), int)}, "y_pred"),
        ({"y": np.zeros((1, 8), int)}, "y"),
        ({"y": Y[:0], "y_pred": P[:0], "s": S[:0]}, "y_pred"),
        ({"n_classes": 1}, "n_classes"),
        ({"n_groups": 0}, "n_groups"),
        ({"n_groups": 2.0}, "n_groups"),
    ],
)
def test_bad_input_names_the_argument(kwargs, name):
    args = {"y": Y, "y_pred": P, "s": S} | kwargs
    with pytest.raises(InputError, match=rf"\b{name}\b") as err:
        tpr_gap(**args)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["accuracy", "tpr_gap", "grms", "dp_gap", "eo_gap", "ap_gap"])
@pytest.mark.parametrize(("n_classes", "n_groups"), TASKS)
def test_scores_from_stored_confusion_counts_equal_the_metrics(name, n_classes, n_groups):
    """A row's stored confusion counts re-score to exactly its metrics (what bootstrap intervals rely on)."""
    from fairdp.fairness import confusion, scores_from_confusion

    y, y_pred, s = _random(n_classes, n_groups, 7, k=5)
    kw = {"n_classes": n_classes, "n_groups": n_groups}
    direct = {"accuracy": lambda: accuracy(y, y_pred), "dp_gap": lambda: dp_gap(y_pred, s, **kw)}.get(
        name, lambda: {"tpr_gap": tpr_gap, "grms": grms, "eo_gap": eo_gap, "ap_gap": ap_gap}[name](y, y_pred, s, **kw))()
    conf = confusion(y, y_pred, s, **kw)
    assert conf.shape == (5, n_groups, n_classes, n_classes) and conf.sum() == y_pred.size
    np.testing.assert_allclose(scores_from_confusion(conf)[name], direct)
    one = scores_from_confusion(confusion(y, y_pred[2], s, **kw))[name]
    assert one.shape == () and np.isclose(one, direct[2], equal_nan=True)


def test_codes_at_or_above_a_given_size_are_refused():
    """n_classes / n_groups bound every code: a code equal to the size is already one too many."""
    with pytest.raises(InputError, match=r"^s has code 1 but n_groups is 1$"):
        tpr_gap(Y, P, S, n_groups=1)
    with pytest.raises(InputError, match=r"^y_pred has code 2 but n_classes is 2$"):
        tpr_gap(Y, np.where(P == 1, 2, 0), S, n_classes=2)
    assert tpr_gap(Y, P, S, n_groups=2) == tpr_gap(Y, P, S)


def test_classes_are_inferred_from_the_largest_code_of_y_or_y_pred():
    """A prediction of class 2 makes the task 3-class even when y only has 0 and 1."""
    p = np.array([1, 0, 2, 1, 1, 0, 2, 0])
    assert tpr_gap(Y, p, S) == tpr_gap(Y, p, S, n_classes=3)
    assert grms(Y, p, S) == pytest.approx(grms(Y, p, S, n_classes=3))
    assert eo_gap(Y, p, S) == eo_gap(Y, p, S, n_classes=3) != eo_gap(Y, np.minimum(p, 1), S)


def test_a_single_group_is_one_group_row():
    rates = group_rates(Y, P, np.zeros(8, int))
    assert rates["group"].tolist() == [0]
    assert rates.loc[0, "tpr"] == pytest.approx(100 * 2 / 3)


def test_scores_from_confusion_checks_the_shape():
    from fairdp.fairness import scores_from_confusion

    for bad in (np.ones((2, 2)), np.ones((2, 2, 3)), np.ones((4, 2, 3, 2)), np.ones((2, 1, 1))):
        with pytest.raises(InputError, match=r"^conf: expected counts of shape \(\.\.\., G, C, C\) with C >= 2"):
            scores_from_confusion(bad)
    # one group is a valid table: accuracy defined, every gap undefined
    one = scores_from_confusion(np.ones((3, 1, 2, 2)))
    assert one["accuracy"].tolist() == [50.0] * 3 and np.isnan(one["tpr_gap"]).all()
