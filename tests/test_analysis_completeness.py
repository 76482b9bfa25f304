"""Whether result rows are the whole study: the plan a run stores, and the analysis that
sets rows against it (a multi-sitting protocol analysed half-way must say so)."""

import math

import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fairdp.analysis import Completeness, ReportOptions, completeness, summarise, write_report
from fairdp.study import ResultStore, parse_spec, plan_table, read_plans
from fairdp.study.run._plan import record_plan, run_configs
from tests.test_analysis_report import synthetic_results

from .conftest import whole_report


def _plan(methods=("a", "b"), seeds=(0, 1), configs=("c0", "c1", "c2"), dataset="adult"):
    return pd.DataFrame([(dataset, m, s, c) for m in methods for s in seeds for c in configs],
                        columns=["dataset", "method", "seed", "config_id"])


def _rows(entries, dataset="adult"):
    """(method, seed, config_id, status) tuples as result rows."""
    return pd.DataFrame([(dataset, m, s, c, st) for m, s, c, st in entries],
                        columns=["dataset", "method", "seed", "config_id", "status"])


FULL_A = [("a", s, c, "ok") for s in (0, 1) for c in ("c0", "c1", "c2")]


def _completeness_by_sets(rows: pd.DataFrame, plan: pd.DataFrame | None) -> list[tuple]:
    """The definition, config by config: a config is finished with an ok row, failed with rows
    but none ok, missing with none; only planned configs count where a group has a plan."""
    ok = {(d, m, int(s), c) for d, m, s, c, st in rows.itertuples(index=False) if st == "ok"}
    tried = {(d, m, int(s), c) for d, m, s, c, _ in rows.itertuples(index=False)}
    planned: dict[tuple, set] = {}
    for d, m, s, c in (plan.itertuples(index=False) if plan is not None else []):
        planned.setdefault((d, m, int(s)), set()).add(c)
    out = []
    for g in sorted(planned.keys() | {k[:3] for k in tried}):
        done = {k[3] for k in ok if k[:3] == g}
        failed = {k[3] for k in tried if k[:3] == g} - done
        if g in planned:
            ids = planned[g]
            out.append((*g, len(ids), len(done & ids), len(failed & ids), len(ids - done - failed)))
        else:
            out.append((*g, math.nan, len(done), len(failed), math.nan))
    return out


_ENTRY = st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2), st.sampled_from(["c0", "c1", "c2", "c3"]),
                   st.sampled_from(["ok", "error"]))


@settings(max_examples=150, deadline=None)
@given(entries=st.lists(_ENTRY, max_size=25),
       planned=st.none() | st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2),
                                              st.sampled_from(["c0", "c1", "c2", "c3"])), max_size=15))
def test_completeness_counts_every_config_as_the_definition_does(entries, planned):
    """The vectorised counts equal the config-by-config definition, for any rows (repeated
    configs, retried failures) and any plan (none, partial, covering groups without rows)."""
    rows = _rows(entries)
    plan = None if planned is None else pd.DataFrame([("adult", *p) for p in planned],
                                                    columns=["dataset", "method", "seed", "config_id"])
    got = completeness(rows, plan)
    assert list(got.columns) == ["dataset", "method", "seed", "planned", "finished", "failed", "missing"]
    want = _completeness_by_sets(rows, plan)
    assert len(got) == len(want)
    for have, expect in zip(got.itertuples(index=False), want):
        assert have[:3] == expect[:3]
        for h, e in zip(have[3:], expect[3:]):
            assert (math.isnan(h) and math.isnan(e)) if isinstance(e, float) and math.isnan(e) else h == e


def test_every_planned_config_is_finished_failed_or_missing():
    rows = _rows(FULL_A + [
        ("b", 0, "c0", "ok"), ("b", 0, "c1", "ok"), ("b", 0, "c2", "error"),
        ("b", 1, "c0", "error"), ("b", 1, "c0", "ok"),  # retried: its ok row counts
        ("b", 1, "zz", "ok"),  # not in the plan (another grid's leftover): not counted
    ])
    table = completeness(rows, _plan()).set_index(["method", "seed"])
    assert table[["planned", "finished", "failed", "missing"]].loc[("b", 0)].tolist() == [3, 2, 1, 0]
    assert table[["planned", "finished", "failed", "missing"]].loc[("b", 1)].tolist() == [3, 1, 0, 2]
    assert (table.loc["a", "finished"] == 3).all() and (table.loc["a", "missing"] == 0).all()
    whole = summarise(completeness(rows, _plan()))
    assert whole.state == "partial" and whole.is_partial
    assert whole.text.startswith("partial: 9 of 12 planned configs finished, 1 failed; unfinished: "
                                 "b seeds 0, 1 (3 of 6 configs unfinished)")


def test_a_planned_run_without_any_row_is_missing_whole():
    table = completeness(_rows(FULL_A), _plan())
    b = table[table["method"] == "b"]
    assert b["planned"].tolist() == [3, 3] and b["finished"].tolist() == [0, 0] and b["missing"].tolist() == [3, 3]
    assert "b seeds 0, 1 (6 of 6 configs unfinished)" in summarise(table).text


def test_all_planned_configs_finished_is_complete():
    rows = _rows(FULL_A + [("b", s, c, "ok") for s in (0, 1) for c in ("c0", "c1", "c2")])
    whole = summarise(completeness(rows, _plan()))
    assert whole == Completeness("complete", "complete: all 12 planned configs finished (2 methods, seeds 0, 1)")
    assert not whole.is_partial


@pytest.mark.parametrize("entries, state, words", [
    (FULL_A + [("b", 0, "c0", "ok"), ("b", 1, "c0", "ok")], "unknown", "not recorded"),
    (FULL_A + [("b", 0, "c0", "ok"), ("b", 0, "c1", "ok"), ("b", 1, "c0", "ok")], "uneven",
     "b has 2 configs in some seeds but 1 in seed 1"),
    (FULL_A + [("b", 0, "c0", "ok")], "uneven", "b has 1 config in some seeds but none in seed 1"),
])
def test_without_a_plan_only_uneven_seeds_can_be_told(entries, state, words):
    whole = summarise(completeness(_rows(entries)))
    assert whole.state == state and words in whole.text


@pytest.mark.parametrize("entries, state", [
    (FULL_A + [("b", 0, "c0", "ok"), ("b", 1, "c0", "ok")], "unknown"),
    (FULL_A + [("b", 0, "c0", "ok")], "uneven"),
])
def test_a_search_is_not_told_to_write_a_plan_it_cannot_have(entries, state):
    """A search draws its trials as it runs: its report said "no plan (fairdp run writes
    <results>.plan.parquet)", advice a search cannot follow."""
    whole = summarise(completeness(_rows(entries)), searched=True)
    assert whole.state == state and "fairdp run writes" not in whole.text
    assert whole.text.startswith("a search's trials") and "trials finished: a: 3, 3 in seeds 0, 1" in whole.text


def _spec(tmp_path, **overrides):
    spec = {"name": "plan", "dataset": {"name": "synthetic", "rows": 500, "features": 4}, "seeds": [0, 1],
            "train": {"epochs": 2}, "methods": {"unconstrained": {}, "federate": {"grid": {"eps": [1, 2], "lam": [0.5]}}}}
    spec.update(overrides)
    return parse_spec(yaml.safe_load(yaml.safe_dump(spec)))


def test_the_plan_is_every_config_of_every_seed_as_the_run_names_it(tmp_path):
    spec = _spec(tmp_path, tuning={"count": "poisson", "mean": 3})
    plan = plan_table(spec)
    for method in spec.methods:
        for seed in spec.seeds:
            ids = plan[(plan["method"] == method.name) & (plan["seed"] == seed)]["config_id"].tolist()
            assert ids == run_configs(spec, method, seed)[1]  # tuning draws included, by their row ids
    assert set(plan["study"]) == {"plan"} and set(plan["epochs"]) == {2}


def test_runs_into_one_results_location_add_their_seeds_to_its_plan(tmp_path):
    store = ResultStore(tmp_path / "r")
    record_plan(store, _spec(tmp_path, seeds=[1]))
    assert sorted(set(read_plans(tmp_path / "r")["seed"])) == [1]
    record_plan(store, _spec(tmp_path, seeds=[0]))
    plan = read_plans(tmp_path / "r")
    assert sorted(set(plan["seed"])) == [0, 1] and len(plan) == 2 * 3 and not plan.duplicated().any()
    # a plan left by another study whose rows are gone is replaced, not merged
    record_plan(store, _spec(tmp_path, name="other", seeds=[3]))
    assert read_plans(tmp_path / "r")[["study", "seed"]].drop_duplicates().values.tolist() == [["other", 3]]
    assert (tmp_path / "r.plan.parquet").is_file() and not (tmp_path / "r").exists()  # beside, not inside
    assert read_plans(tmp_path / "nothing") is None


def test_a_partial_study_says_so_above_every_table_of_its_report(tmp_path):
    rows = synthetic_results(datasets=("adult",), configs=3)
    plan = rows[["dataset", "method", "seed", "config_id"]].drop_duplicates()
    partial = rows[~((rows["method"] == "federate") & (rows["seed"] == 2))]
    whole = summarise(completeness(partial, plan))
    assert whole.state == "partial" and "federate seed 2 (3 of 3 configs unfinished)" in whole.text
    write_report(partial, tmp_path / "rep", ReportOptions(rts=(1,), ci=None, completeness=whole))
    md = whole_report(tmp_path / "rep")
    assert md.index("**Not the whole study.** Partial: ") < md.index("## Test results")
    assert "<strong>Not the whole study.</strong> Partial: " in whole_report(tmp_path / "rep", "html")
    # the two failed configs are unfinished too; with their ok reruns the study is whole
    assert summarise(completeness(rows, plan)).text.startswith(f"partial: {len(plan) - 2} of {len(plan)} planned "
                                                               f"configs finished, 2 failed")
    rows = pd.concat([rows, rows[rows["status"] == "error"].assign(status="ok", valid_accuracy=80.0,
                                                                 valid_tpr_gap=10.0, leakage=80.0)])
    complete = summarise(completeness(rows, plan))
    write_report(rows, tmp_path / "rep", ReportOptions(rts=(1,), ci=None, completeness=complete))
    md = whole_report(tmp_path / "rep")
    assert "| completeness | complete: all " in md and "Not the whole study" not in md
