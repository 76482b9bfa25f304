"""Pareto fronts against brute force, hypervolume against closed forms, DTO and constrained picks."""

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairdp.analysis import (
    constrained_select,
    dto_minmax_select,
    dto_select,
    hypervolume,
    pareto_front,
    select_per_run,
)
from fairdp.analysis._pareto import _nondominated_mask, fronts_per_run
from fairdp.errors import InputError


def brute_force_front(values, directions):
    """Indices of non-dominated rows by the definition, one pair at a time."""
    sign = np.array([-1.0 if d == "max" else 1.0 for d in directions])
    y = values * sign
    keep = []
    for i in range(len(y)):
        dominated = any(
            all(y[j] <= y[i]) and any(y[j] < y[i]) for j in range(len(y)) if j != i
        )
        if not dominated:
            keep.append(i)
    return keep


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("directions", [("min", "min"), ("max", "min"), ("max", "min", "min"), ("min", "max", "max", "min")])
def test_pareto_front_matches_brute_force(seed, directions):
    rng = np.random.default_rng(seed)
    n, d = 60, len(directions)
    values = rng.integers(0, 6, size=(n, d)).astype(float)  # coarse grid: many ties
    values[n // 2 :] = values[: n - n // 2] if seed % 2 else values[n // 2 :]  # duplicated points
    cols = [f"o{k}" for k in range(d)]
    df = pd.DataFrame(values, columns=cols).assign(config_id=[f"c{i}" for i in range(n)])
    front = pareto_front(df, dict(zip(cols, directions)))
    assert list(front.index) == brute_force_front(values, directions)
    # duplicates of a front point are all kept
    dup_counts = df[cols].value_counts()
    for _, row in front[cols].drop_duplicates().iterrows():
        key = tuple(row)
        assert (front[cols] == row.to_numpy()).all(axis=1).sum() == dup_counts[key]


def test_pareto_front_drops_nan_and_failed_rows():
    df = pd.DataFrame({
        "acc": [80.0, 70.0, np.nan, 90.0, 75.0],
        "gap": [5.0, 1.0, 0.0, 10.0, 0.5],
        "status": ["ok", "ok", "ok", "error", "ok"],
    })
    front = pareto_front(df, {"acc": "max", "gap": "min"})
    assert list(front.index) == [0, 4]
    with pytest.raises(InputError, match="leakage"):
        pareto_front(df, {"acc": "max", "leakage": "min"})
    with pytest.raises(InputError, match="gap"):
        pareto_front(df, {"acc": "max", "gap": "lower"})


def test_hypervolume_single_point_is_a_box():
    assert hypervolume([[1.0, 2.0]], [4.0, 5.0]) == pytest.approx(9.0)
    assert hypervolume([[1.0, 2.0, 3.0]], [2.0, 4.0, 7.0]) == pytest.approx(1 * 2 * 4)
    assert hypervolume([[0.5, 0.5, 0.5, 0.5]], [1, 1, 1, 1]) == pytest.approx(0.5**4)
    # max objectives: (accuracy 80 above reference 50) x (gap 10 below reference 30)
    assert hypervolume([[80.0, 10.0]], [50.0, 30.0], ["max", "min"]) == pytest.approx(30 * 20)


def test_hypervolume_two_points_2d_union_of_rectangles():
    # boxes [1,4]x[3,5] (area 6) and [2,4]x[1,5] (area 8) overlap in [2,4]x[3,5] (area 4)
    assert hypervolume([[1, 3], [2, 1]], [4, 5]) == pytest.approx(6 + 8 - 4)
    # a dominated point and a duplicate add nothing
    assert hypervolume([[1, 3], [2, 1], [3, 4], [2, 1]], [4, 5]) == pytest.approx(10)


def test_hypervolume_3d_closed_forms():
    # two boxes against r = (1, 1, 1): [0,1]^2 x [0.5,1] and [0.5,1] x [0,1]^2 overlap in 0.5^2 x 0.5
    a, b = [0.0, 0.0, 0.5], [0.5, 0.0, 0.0]
    assert hypervolume([a, b], [1, 1, 1]) == pytest.approx(0.5 + 0.5 - 0.25)
    # three "staircase" points on the unit simplex corners
    pts = [[0, 0.5, 0.5], [0.5, 0, 0.5], [0.5, 0.5, 0]]
    # each box volume 0.25, pairwise overlaps 0.125, triple overlap 0.125
    assert hypervolume(pts, [1, 1, 1]) == pytest.approx(3 * 0.25 - 3 * 0.125 + 0.125)


def test_points_beyond_the_reference_contribute_nothing():
    assert hypervolume([[5.0, 1.0]], [4.0, 5.0]) == 0.0
    assert hypervolume([[4.0, 1.0]], [4.0, 5.0]) == 0.0  # on the reference plane: zero width
    assert hypervolume([[1.0, 2.0], [0.0, 9.0]], [4.0, 5.0]) == pytest.approx(9.0)
    assert hypervolume([[40.0, 10.0]], [50.0, 30.0], ["max", "min"]) == 0.0
    assert hypervolume(np.empty((0, 3)), [1, 1, 1]) == 0.0


def inclusion_exclusion(points, ref):
    """Volume of the union of boxes [p, ref] by inclusion-exclusion (minimisation)."""
    total = 0.0
    for k in range(1, len(points) + 1):
        for subset in itertools.combinations(points, k):
            corner = np.max(subset, axis=0)
            total += (-1) ** (k + 1) * np.prod(np.clip(ref - corner, 0, None))
    return total


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("d", [2, 3, 4])
def test_hypervolume_matches_inclusion_exclusion(seed, d):
    rng = np.random.default_rng(100 + seed)
    pts = rng.random((7, d))
    pts[3] = pts[1]  # a duplicate
    ref = np.full(d, 0.9)  # some points lie beyond the reference
    assert hypervolume(pts, ref) == pytest.approx(inclusion_exclusion(pts, ref), abs=1e-12)
    # the same problem with every objective flipped to "max"
    assert hypervolume(-pts, -ref, ["max"] * d) == pytest.approx(inclusion_exclusion(pts, ref), abs=1e-12)


def test_hypervolume_input_checks():
    with pytest.raises(InputError, match="points"):
        hypervolume([[1, 2, 3]], [4, 5])
    with pytest.raises(InputError, match="directions"):
        hypervolume([[1, 2]], [4, 5], ["min", "up"])
    with pytest.raises(InputError, match="NaN"):
        hypervolume([[np.nan, 2]], [4, 5])


def runs_table():
    return pd.DataFrame({
        "dataset": "adult",
        "method": "federate",
        "seed": [0, 0, 0, 0, 1, 1],
        "config_id": ["a", "b", "c", "d", "a", "b"],
        "valid_accuracy": [80.0, 78.0, 70.0, 79.0, 60.0, 65.0],
        "valid_tpr_gap": [10.0, 2.0, 0.0, 4.0, 1.0, 3.0],
        "leakage": [70.0, 70.0, 50.0, 60.0, 50.0, 50.0],
    })


def test_dto_select_is_fairlibs_distance_to_optimum_on_a_hand_table():
    seed0 = runs_table().query("seed == 0")
    # fairlib: accuracy / 80 -> a 1, b .975, c .875, d .9875; (100 - gap) / 100 -> .90, .98, 1, .96
    # distances to (1, 1): a .1000, b .0320, c .1250, d .0419
    pick = dto_select(seed0, {"valid_accuracy": "max", "valid_tpr_gap": "min"})
    assert pick["config_id"] == "b"
    # with leakage, (100 - leakage) / 50 -> .6, .6, 1, .8: a .412, b .401, c .125, d .204 -> c,
    # where the min-max variant picks d (below)
    pick = dto_select(seed0, {"valid_accuracy": "max", "valid_tpr_gap": "min", "leakage": "min"})
    assert pick["config_id"] == "c"
    with pytest.raises(InputError, match="outside"):
        dto_select(seed0.assign(eps_formal=[1.0, 8.0, 500.0, 2.0]), {"valid_accuracy": "max", "eps_formal": "min"})


def test_dto_minmax_select_hand_table():
    seed0 = runs_table().query("seed == 0")
    # normalised (acc: 80 -> 0, 70 -> 1; gap: 0 -> 0, 10 -> 1):
    # a (0, 1) -> 1; b (0.2, 0.2) -> 0.283; c (1, 0) -> 1; d (0.1, 0.4) -> 0.412
    pick = dto_minmax_select(seed0, {"valid_accuracy": "max", "valid_tpr_gap": "min"})
    assert pick["config_id"] == "b"
    # with leakage too: b (0.2, 0.2, 1) -> 1.04; d (0.1, 0.4, 0.5) -> 0.648; c (1, 0, 0) -> 1
    pick = dto_minmax_select(seed0, {"valid_accuracy": "max", "valid_tpr_gap": "min", "leakage": "min"})
    assert pick["config_id"] == "d"


@pytest.mark.parametrize("rule", [dto_select, dto_minmax_select], ids=["fairlib", "minmax"])
def test_both_dto_rules_choose_a_single_candidate_and_nothing_of_no_rows(rule):
    seed0 = runs_table().query("seed == 0")
    # a constant objective does not matter; a single candidate is chosen
    assert rule(seed0.iloc[[2]], {"valid_accuracy": "max", "valid_tpr_gap": "min"})["config_id"] == "c"
    assert rule(seed0.iloc[0:0], {"valid_accuracy": "max"}) is None


def test_constrained_select_hand_table():
    seed0 = runs_table().query("seed == 0")
    assert constrained_select(seed0, "valid_tpr_gap", 5.0)["config_id"] == "d"
    assert constrained_select(seed0, "valid_tpr_gap", 2.0)["config_id"] == "b"   # <= is inclusive
    assert constrained_select(seed0, "valid_tpr_gap", 100.0)["config_id"] == "a"
    assert constrained_select(seed0, "valid_tpr_gap", -1.0) is None
    tie = pd.DataFrame({"config_id": ["z", "y", "x"], "valid_accuracy": [70.0, 70.0, 70.0],
                        "valid_tpr_gap": [1.0, 0.5, 0.5]})
    assert constrained_select(tie, "valid_tpr_gap", 2.0)["config_id"] == "x"
    with pytest.raises(InputError, match="threshold"):
        constrained_select(seed0, "valid_tpr_gap", "low")
    with pytest.raises(InputError, match="valid_grms"):
        constrained_select(seed0, "valid_grms", 1.0)


def test_select_per_run_applies_a_rule_per_seed():
    df = runs_table()
    picks = select_per_run(df, "constrained", fairness_col="valid_tpr_gap", threshold=2.0)
    assert list(zip(picks["seed"], picks["config_id"])) == [(0, "b"), (1, "a")]
    assert picks["valid_accuracy"].dtype == float
    picks = select_per_run(df, "dto_minmax", objectives={"valid_accuracy": "max", "valid_tpr_gap": "min"})
    # seed 1: a (1, 0) and b (0, 1) are both at distance 1: the tie goes to the smaller config_id
    assert list(picks["config_id"]) == ["b", "a"]
    # fairlib's DTO, seed 1: a (60/65, 99/99) is .077 from (1, 1), b (1, 97/99) .020
    picks = select_per_run(df, "dto", objectives={"valid_accuracy": "max", "valid_tpr_gap": "min"})
    assert list(picks["config_id"]) == ["b", "b"]
    none = select_per_run(df, "constrained", fairness_col="valid_tpr_gap", threshold=0.5)
    assert list(zip(none["seed"], none["config_id"])) == [(0, "c")]
    with pytest.raises(InputError, match="rule"):
        select_per_run(df, "best")


# --- rules pinned where the wrong rule gives another answer (issue 40) ----------------------------


def test_objectives_must_be_a_non_empty_mapping():
    df = runs_table()
    for bad in ({}, ["valid_accuracy"], None):
        with pytest.raises(InputError, match="objectives: expected a non-empty dict"):
            pareto_front(df, bad)


def test_hypervolume_of_one_objective_is_the_best_points_distance_to_the_reference():
    assert hypervolume([[3.0], [1.0], [2.0]], [5.0]) == 4.0
    assert hypervolume([[1.0]], [3.0]) == 2.0
    assert hypervolume([[70.0], [80.0]], [50.0], ["max"]) == 30.0


def test_hypervolume_reference_must_be_a_1d_sequence_without_nan():
    for bad in ([], [[4.0, 5.0]]):
        with pytest.raises(InputError, match="^reference: expected a 1-D sequence"):
            hypervolume([[1.0, 2.0]], bad)
    with pytest.raises(InputError, match="NaN"):
        hypervolume([[1.0, 2.0]], [np.nan, 5.0])


def fairlib_rows(acc, gap):
    return pd.DataFrame({"config_id": [f"c{i}" for i in range(len(acc))], "valid_accuracy": acc, "valid_tpr_gap": gap})


ACC_GAP = {"valid_accuracy": "max", "valid_tpr_gap": "min"}


def test_dto_is_the_euclidean_distance_to_the_utopia_point():
    """Distances (1 - ratio) per objective: c0 (0, .5), c1 (.3, .3), c2 (.9, 0). Euclidean: c1
    (.42 < .5); the L1 distance would pick c0 (.5 < .6), so would the distance to (2, 2)."""
    rows = fairlib_rows([80.0, 56.0, 8.0], [50.0, 30.0, 0.0])
    assert dto_select(rows, ACC_GAP)["config_id"] == "c1"
    # c0 (0, .5) against c1 (.36, .36): Euclidean c0 (.5 < .509), where an L3 norm picks c1
    rows = fairlib_rows([80.0, 51.2, 8.0], [50.0, 36.0, 0.0])
    assert dto_select(rows, ACC_GAP)["config_id"] == "c0"


def test_dto_reads_a_gap_as_100_minus_it_over_the_best():
    """fairlib's 1 - GAP in percent: c0 is 10 / 100 = .1 from utopia, c1 1 - 72.04 / 80 = .0995:
    c1; with 101 - GAP c0 would be 10 / 101 = .099 and win."""
    assert dto_select(fairlib_rows([80.0, 72.04], [10.0, 0.0]), ACC_GAP)["config_id"] == "c1"


def test_dto_divides_by_the_best_value_however_small():
    """Gaps 99.8 and 99.5 leave 0.2 and 0.5 points: ratios .4 and 1 to the best. c0 (0, .6) .6 from
    utopia, c1 (.61, 0) .61: c0. (Not dividing a best below 1 would give c0 .8, c1 .79.)"""
    assert dto_select(fairlib_rows([80.0, 31.2], [99.8, 99.5]), ACC_GAP)["config_id"] == "c0"


def test_dto_an_objective_at_zero_everywhere_does_not_decide():
    rows = fairlib_rows([70.0, 80.0], [0.0, 0.0]).assign(leakage=100.0)  # 100 - leakage = 0 for both
    assert dto_select(rows, {**ACC_GAP, "leakage": "min"})["config_id"] == "c1"


def test_dto_accepts_percentages_up_to_100_inclusive():
    rows = fairlib_rows([100.0, 90.0], [0.0, 5.0])
    assert dto_select(rows, ACC_GAP)["config_id"] == "c0"
    with pytest.raises(InputError, match="outside"):
        dto_select(fairlib_rows([100.5, 90.0], [0.0, 5.0]), ACC_GAP)


def test_dto_minmax_is_euclidean_and_a_constant_objective_does_not_decide():
    # normalised: c0 (0, .5), c1 (.36, .36), c2 (1, 0), c3 (.9, 1): Euclidean c0, an L3 norm c1
    rows = fairlib_rows([80.0, 76.4, 70.0, 71.0], [5.0, 3.6, 0.0, 10.0])
    assert dto_minmax_select(rows, ACC_GAP)["config_id"] == "c0"
    same_gap = fairlib_rows([70.0, 80.0], [5.0, 5.0])
    assert dto_minmax_select(same_gap, ACC_GAP)["config_id"] == "c1"


@pytest.mark.parametrize("rule", [dto_select, dto_minmax_select], ids=["fairlib", "minmax"])
def test_dto_ties_go_to_the_smaller_config_id_whatever_the_row_order(rule):
    rows = fairlib_rows([80.0, 72.0], [10.0, 0.0]).assign(config_id=["b", "a"])  # equidistant: (0, .1), (.1, 0)
    pick = rule(rows, ACC_GAP)
    assert pick["config_id"] == "a"
    assert list(pick.index) == list(rows.columns)  # no helper column left behind
    assert rule(rows.drop(columns="config_id"), ACC_GAP)["valid_accuracy"] == 80.0  # the first


def test_constrained_select_returns_the_row_as_it_is():
    pick = constrained_select(runs_table(), "valid_tpr_gap", 5.0)
    assert list(pick.index) == list(runs_table().columns)


def test_select_per_run_keeps_columns_dtypes_and_sorts_by_run():
    df = runs_table().assign(valid_accuracy=lambda d: d["valid_accuracy"].astype("float32"),
                             batch_size=pd.array([64, None, 64, 128, None, 32], dtype="Int64"))
    df = df.iloc[::-1]  # seed 1's rows first
    picks = select_per_run(df, "constrained", fairness_col="valid_tpr_gap", threshold=2.0)
    assert list(zip(picks["seed"], picks["config_id"])) == [(0, "b"), (1, "a")]
    assert picks.dtypes.equals(df.dtypes) and list(picks.index) == [0, 1]
    none = select_per_run(df, "constrained", fairness_col="valid_tpr_gap", threshold=-1.0)
    assert none.empty and list(none.columns) == list(df.columns)


def test_select_per_run_stacks_rows_a_callable_builds():
    """A rule may return a new row (here, seed 1's mean) next to rows of the table."""
    def rule(group):
        if group["seed"].iloc[0] == 0:
            return group.loc[group["valid_accuracy"].idxmax()]
        return group.mean(numeric_only=True).rename("mean")

    picks = select_per_run(runs_table(), rule)
    assert list(picks.index) == [0, 1] and "index" not in picks.columns
    assert picks.loc[0, "config_id"] == "a" and picks.loc[1, "valid_accuracy"] == 62.5


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(*[st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.7, 0.9, 1.2])] * 3), min_size=1, max_size=9))
def test_hypervolume_3d_matches_inclusion_exclusion_with_ties(points):
    """The 3-D slicing with every z-prefix's 2-D sweep in one array pass, on tied coordinates,
    duplicates and points beyond the reference."""
    pts = np.asarray(points, dtype=float)
    ref = np.full(3, 0.8)
    inside = pts[(pts < ref).all(axis=1)]
    assert hypervolume(pts, ref) == pytest.approx(inclusion_exclusion(inside, ref) if len(inside) else 0.0, abs=1e-12)


_run_row = st.fixed_dictionaries({
    "dataset": st.sampled_from(["adult", "compas"]), "method": st.sampled_from(["a", "b"]), "seed": st.integers(0, 2),
    "valid_accuracy": st.sampled_from([50.0, 60.0, 70.0, 80.0, math.nan]),
    "valid_tpr_gap": st.sampled_from([0.0, 5.0, 10.0, 30.0, 120.0]),
    "leakage": st.sampled_from([5.0, 20.0, 60.0, math.nan]),
    "status": st.sampled_from(["ok", "ok", "ok", "failed"]),
})


@settings(max_examples=50, deadline=None)
@given(st.lists(_run_row, min_size=1, max_size=30), st.booleans())
def test_fronts_per_run_are_each_runs_front_and_hypervolume(rows, three):
    """``fronts_per_run`` (every run in one pass) against ``pareto_front`` and ``hypervolume``
    applied to each run's rows alone."""
    df = pd.DataFrame(rows)
    objectives = {"valid_accuracy": "max", "valid_tpr_gap": "min", **({"leakage": "min"} if three else {})}
    reference = [0.0, 100.0, 100.0][: len(objectives)]
    got = fronts_per_run(df, objectives, reference)
    expected = []
    for key, group in df.groupby(["dataset", "method", "seed"], sort=True):
        front = pareto_front(group, objectives)
        if len(front):
            expected.append((*key, len(front), hypervolume(front[list(objectives)], reference, list(objectives.values()))))
    assert [tuple(r[:4]) for r in got.itertuples(index=False)] == [e[:4] for e in expected]
    assert got["hypervolume"].tolist() == pytest.approx([e[4] for e in expected], abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), min_size=3, max_size=3), min_size=0, max_size=60),
       st.integers(1, 3), st.integers(1, 8))
def test_the_blocked_front_is_every_row_no_other_row_dominates(points, d, block):
    """The front found block by block in lexicographic order, against the pairwise definition,
    on tied and duplicate rows and blocks smaller than the rows."""
    y = np.asarray(points, dtype=float).reshape(-1, 3)[:, :d]
    expected = [not any((q <= p).all() and (q < p).any() for q in y) for p in y]
    assert _nondominated_mask(y, block=block).tolist() == expected
