"""The release's scopes and their composition stats, computed in arrays for tens of thousands
of selections, held to their definition one selection at a time: the rows of the selection's
run, split by each ``by`` key in turn where the part being split holds some value of it."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from fairdp.analysis._release import _scope_ids, _ScopeStats

EVENTS = ['{"e": 1}', '{"e": 2}', '{"e": 3}']
BY_KEYS = ["eps", "notion", "absent"]  # "absent": a column the selections have and the rows lack

row = st.fixed_dictionaries({
    "dataset": st.sampled_from(["adult", "compas"]),
    "method": st.sampled_from(["dpsgd", "pfld"]),
    "seed": st.integers(0, 2),
    "eps": st.sampled_from([0.5, 1.0, math.nan]),
    "notion": st.sampled_from(["dp", "eo", None]),
    "privacy_event": st.sampled_from([*EVENTS, None]),
    "eps_formal": st.sampled_from([0.3, 1.0, math.inf, math.nan]),
    "delta": st.sampled_from([0.0, 1e-5, 1e-6, math.nan]),
    "accountant": st.sampled_from(["rdp", "pld", None]),
    "tuning": st.sampled_from([None, "t1", "t2"]),
})
selection = st.fixed_dictionaries({
    "dataset": st.sampled_from(["adult", "compas"]),
    "method": st.sampled_from(["dpsgd", "pfld"]),
    "seed": st.integers(0, 3),
    "eps": st.sampled_from([0.5, 1.0, 2.0, math.nan]),
    "notion": st.sampled_from(["dp", "eo", "fp", None]),
    "absent": st.sampled_from([1, 2]),
})


def _scope_by_definition(rows: pd.DataFrame, sel: dict, by: list[str]) -> set:
    part = rows[(rows["dataset"] == sel["dataset"]) & (rows["method"] == sel["method"]) & (rows["seed"] == sel["seed"])]
    for key in by:
        if key not in part.columns or not part[key].notna().any():
            continue  # the part holds no value of the key: one group at this level
        value = sel[key]
        part = part[part[key] == value] if pd.notna(value) else part.iloc[:0]
    return set(part.index)


@settings(max_examples=80, deadline=None)
@given(st.lists(row, min_size=1, max_size=40), st.lists(selection, min_size=1, max_size=12),
       st.permutations(BY_KEYS), st.integers(0, 3))
def test_each_selection_chooses_from_the_rows_the_definition_gives(rows, extra, order, depth):
    rows = pd.DataFrame(rows)
    by = list(order[:depth])
    # selections made from rows (their own values) and arbitrary ones
    picked = rows.sample(n=min(len(rows), 8), random_state=0)[["dataset", "method", "seed", "eps", "notion"]]
    selected = pd.concat([picked.assign(absent=1), pd.DataFrame(extra)], ignore_index=True)
    row_scope, sel_scope, n = _scope_ids(rows, selected, by)
    assert row_scope.max(initial=-1) < n and set(row_scope[row_scope >= 0]) == set(range(n))
    for k, sel in enumerate(selected.to_dict("records")):
        expected = _scope_by_definition(rows, sel, by)
        got = set(rows.index[row_scope == sel_scope[k]]) if sel_scope[k] >= 0 else set()
        assert got == expected, (sel, by)


def _stats_by_definition(part: pd.DataFrame) -> dict:
    with_event = part[part["privacy_event"].notna()]
    deltas = part["delta"].dropna()
    tunings = part["tuning"].dropna()
    return {"rows": len(part), "events": len(with_event),
            "counter": Counter(with_event["privacy_event"]),
            "delta_max": float(deltas.max()) if len(deltas) else math.nan,
            "eps_sum": float(with_event["eps_formal"].sum()), "delta_sum": float(with_event["delta"].sum()),
            "pld": bool(len(with_event)) and bool((with_event["accountant"] == "pld").all()),
            "first_event": with_event["privacy_event"].iloc[0] if len(with_event) else None,
            "tuning": tunings.iloc[0] if len(tunings) else None}


def _stats_at(stats: _ScopeStats, i: int) -> dict:
    code = stats.first_event[i]
    return {"rows": int(stats.rows[i]), "events": int(stats.events[i]), "counter": stats.counter(i),
            "delta_max": float(stats.delta_max[i]), "eps_sum": float(stats.eps_sum[i]),
            "delta_sum": float(stats.delta_sum[i]), "pld": bool(stats.pld[i]),
            "first_event": None if code < 0 else stats.event_text[code], "tuning": stats.tuning[i]}


def _differing(got: dict, expected: dict) -> dict:
    """The entries where ``got`` is not ``expected`` (NaN equal to NaN), as (got, expected)."""
    def same(key, a, b):
        if isinstance(b, float) and math.isnan(b):
            return math.isnan(a)
        if key in ("eps_sum", "delta_sum"):  # sums in another order: equal up to rounding
            return a == b or math.isclose(a, b, rel_tol=1e-12)
        return a == b
    return {k: (got[k], expected[k]) for k in expected if not same(k, got[k], expected[k])}


@settings(max_examples=80, deadline=None)
@given(st.lists(row, min_size=1, max_size=40), st.data())
def test_scope_stats_and_their_unions_are_those_of_the_rows_themselves(rows, data):
    rows = pd.DataFrame(rows)
    n = data.draw(st.integers(1, 5))
    row_scope = np.asarray(data.draw(st.lists(st.integers(-1, n - 1), min_size=len(rows), max_size=len(rows))))
    stats = _ScopeStats.of(rows, row_scope, n)
    parts = [rows[row_scope == i] for i in range(n)]
    for i in range(n):
        assert not _differing(_stats_at(stats, i), _stats_by_definition(parts[i]))
    # a union names scopes in order, some twice (two seeds' rows), some in no union
    members = data.draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, n - 1)), max_size=8))
    group = np.asarray([g for g, _ in members], np.int64)
    member = np.asarray([m for _, m in members], np.int64)
    union = stats.union(group, member, 3)
    for g in range(3):
        concat = pd.concat([parts[m] for gg, m in members if gg == g] or [rows.iloc[:0]])
        assert not _differing(_stats_at(union, g) | {"tuning": None}, _stats_by_definition(concat) | {"tuning": None})
    # equal signatures exactly where the event multisets are equal
    sig = union.signatures()
    for a in range(3):
        for b in range(3):
            assert (sig[a] == sig[b]) == (union.counter(a) == union.counter(b))
