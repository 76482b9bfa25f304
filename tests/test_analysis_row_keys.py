"""Per-row labels computed once per distinct value, held to their row-by-row definitions:
each row's guarantee kind and each row's config key."""

from __future__ import annotations

import math

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from fairdp.analysis._rows import config_keys, kind_of, method_guarantee, row_guarantees

row = st.fixed_dictionaries({
    "dataset": st.sampled_from(["adult", "compas"]),
    "method": st.sampled_from(["dpsgd", "pfld", "unconstrained", "federate", "plugin_not_loaded"]),
    "seed": st.integers(0, 3),
    "config_id": st.sampled_from(["a1", "b2", "c3"]),
    "eps_formal": st.sampled_from([1.0, math.inf, math.nan]),
    "guarantee": st.sampled_from([None, math.nan, "central, add/remove one record", "not private", 3.0]),
})


def _kinds_row_by_row(df: pd.DataFrame) -> list:
    out = []
    for stored, method, eps in zip(df["guarantee"], df["method"].astype(str), df["eps_formal"]):
        private = not (isinstance(eps, float) and math.isinf(eps))
        out.append(kind_of(stored) if isinstance(stored, str) else method_guarantee(method) if private else None)
    return out


@settings(max_examples=80, deadline=None)
@given(st.lists(row, max_size=30), st.booleans())
def test_each_rows_guarantee_is_its_row_by_row_kind(rows, categorical):
    df = pd.DataFrame(rows, columns=["dataset", "method", "seed", "config_id", "eps_formal", "guarantee"])
    if categorical:
        df["method"] = df["method"].astype("category")
    got = row_guarantees(df)
    assert list(got.index) == list(df.index)
    assert got.tolist() == _kinds_row_by_row(df)


@settings(max_examples=80, deadline=None)
@given(st.lists(row, min_size=1, max_size=30), st.booleans())
def test_each_rows_config_key_is_its_own_values_as_labels(rows, categorical):
    df = pd.DataFrame(rows)
    if categorical:
        df["dataset"] = df["dataset"].astype("category")
    base = df["method"].str.upper()
    for method in (None, base):
        labels = df["method"] if method is None else method
        expected = [(str(d), str(m), int(s), c) for d, m, s, c in
                    zip(df["dataset"], labels, df["seed"], df["config_id"])]
        keys = config_keys(df, method)
        assert keys == expected
        assert all(type(k[2]) is int and type(k[0]) is str for k in keys)


@settings(max_examples=80, deadline=None)
@given(st.lists(row, min_size=0, max_size=40), st.booleans())
def test_each_methods_kinds_are_the_set_of_its_rows_kinds(rows, categorical):
    """``guarantees_by_method`` (each distinct method and kind once) is, per method label, its
    rows' kinds joined in order, None where none of its rows is private."""
    from fairdp.analysis._rows import guarantees_by_method

    df = pd.DataFrame(rows, columns=["dataset", "method", "seed", "config_id", "eps_formal", "guarantee"])
    if categorical:
        df["method"] = df["method"].astype("category")
    kinds = _kinds_row_by_row(df)
    expected = {}
    for method in sorted(set(df["method"].astype(str))):
        found = sorted({str(k) for k, m in zip(kinds, df["method"].astype(str))
                        if m == method and k is not None and not (isinstance(k, float) and math.isnan(k))})
        expected[method] = "; ".join(found) if found else None
    got = guarantees_by_method(df)
    assert got == expected and list(got) == list(expected)
