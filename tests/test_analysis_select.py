"""RT selection, seed aggregation, accuracy binning and privacy-by-eps on hand-built tables."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairdp.analysis import (
    aggregate_seeds,
    fairness_accuracy_bins,
    privacy_accuracy_by_eps,
    rt_sweep,
    select_by_rt,
)
from fairdp.errors import InputError
from tests.conftest import counts_text


def table(records, dataset="adult"):
    """Result rows from (method, seed, config_id, valid_accuracy, valid_tpr_gap[, extra]) tuples."""
    rows = []
    for rec in records:
        method, seed, cid, acc, gap = rec[:5]
        extra = rec[5] if len(rec) > 5 else {}
        row = {
            "study": "s", "dataset": dataset, "method": method, "seed": seed, "config_id": cid,
            "eps": np.nan, "lam": np.nan, "valid_accuracy": acc, "valid_tpr_gap": gap,
            "test_accuracy": acc - 1.0, "test_tpr_gap": gap + 1.0,
            "leakage": 60.0 + seed, "mdl": 20.0, "eps_formal": math.inf, "status": "ok",
        }
        row.update(extra)
        rows.append(row)
    return pd.DataFrame(rows)


def chosen(df, **kw):
    sel = select_by_rt(df, **kw)
    return dict(zip(zip(sel["method"], sel["seed"]), sel["config_id"]))


WINDOW = table([
    ("federate", 0, "c1", 80.0, 20.0),
    ("federate", 0, "c2", 79.5, 10.0),
    ("federate", 0, "c3", 78.9, 1.0),   # 1.1 points below the best
    ("federate", 0, "c4", 79.0, 5.0),   # exactly on the RT = 1 edge: a candidate
])


@pytest.mark.parametrize("rt, expected", [(0.0, "c1"), (0.5, "c2"), (1.0, "c4"), (1.2, "c3"), (math.inf, "c3")])
def test_rt_window_picks_fairest_candidate(rt, expected):
    assert chosen(WINDOW, rt=rt) == {("federate", 0): expected}


def test_rt_edge_survives_float_noise():
    # 64.4 - 1.0 > 63.4 in binary floating point; the edge config still counts.
    assert 64.4 - 1.0 > 63.4
    df = table([("noise", 0, "a", 64.4, 9.0), ("noise", 0, "b", 63.4, 2.0)])
    assert chosen(df, rt=1.0) == {("noise", 0): "b"}


def test_equal_fairness_goes_to_higher_accuracy_then_smaller_config_id():
    df = table([
        ("adversarial", 0, "a", 80.0, 9.0),
        ("adversarial", 0, "b", 79.2, 3.0),
        ("adversarial", 0, "c", 79.6, 3.0),    # same gap as b, more accurate -> wins
        ("adversarial", 1, "c9", 70.0, 4.0),
        ("adversarial", 1, "c10", 70.0, 4.0),  # identical: "c10" < "c9" as strings
        ("adversarial", 1, "c2", 69.5, 4.0),
    ])
    assert chosen(df, rt=1.0) == {("adversarial", 0): "c", ("adversarial", 1): "c10"}
    # rt = 0: only the most accurate configs are candidates, the fairer of them wins.
    assert chosen(df, rt=0.0) == {("adversarial", 0): "a", ("adversarial", 1): "c10"}


def test_single_config_is_always_chosen():
    df = table([("unconstrained", 3, "only", 71.0, 25.0)])
    for rt in (0.0, 1.0, 10.0):
        sel = select_by_rt(df, rt=rt)
        assert len(sel) == 1 and sel.loc[0, "config_id"] == "only" and sel.loc[0, "rt"] == rt


def test_one_row_per_run_with_all_columns_and_rt():
    df = pd.concat([
        WINDOW,
        table([("federate", 1, "c1", 70.0, 3.0), ("unconstrained", 0, "u", 72.0, 20.0)]),
        table([("federate", 0, "c1", 60.0, 3.0)], dataset="compas"),
    ], ignore_index=True)
    sel = select_by_rt(df, rt=1.0)
    assert list(sel.columns) == [*df.columns, "rt"]
    assert len(sel) == 4
    assert not sel.duplicated(["dataset", "method", "seed"]).any()
    row = sel[(sel["dataset"] == "adult") & (sel["method"] == "federate") & (sel["seed"] == 0)].iloc[0]
    assert row["config_id"] == "c4" and row["test_accuracy"] == 78.0 and row["test_tpr_gap"] == 6.0


def test_nan_metrics_are_excluded_with_a_warning_naming_them():
    df = table([
        ("federate", 0, "good", 75.0, 5.0),
        ("federate", 0, "nan_gap", 76.0, np.nan),    # would win on accuracy
        ("federate", 2, "nan_acc", np.nan, 0.0),
        ("federate", 2, "ok2", 70.0, 3.0),
    ])
    with pytest.warns(UserWarning, match="NaN") as record:
        sel = select_by_rt(df, rt=0.0)
    message = str(record[0].message)
    for part in ("method=federate", "seed=0", "config_id=nan_gap", "seed=2", "config_id=nan_acc"):
        assert part in message
    assert "config_id=good" not in message
    assert chosen(df.iloc[[0, 3]], rt=0.0) == {("federate", 0): "good", ("federate", 2): "ok2"}
    assert list(sel["config_id"]) == ["good", "ok2"]


def test_rows_that_did_not_finish_ok_do_not_count():
    df = table([("federate", 0, "ok", 75.0, 5.0), ("federate", 0, "failed", 90.0, 0.0, {"status": "error"})])
    assert chosen(df, rt=0.0) == {("federate", 0): "ok"}
    # No status column at all: every row counts.
    assert chosen(df.drop(columns="status"), rt=0.0) == {("federate", 0): "failed"}


def test_other_fairness_metric_is_used_for_selection():
    df = table([
        ("pfld", 0, "a", 80.0, 1.0, {"valid_dp_gap": 9.0}),
        ("pfld", 0, "b", 79.5, 9.0, {"valid_dp_gap": 1.0}),
    ])
    assert chosen(df, rt=1.0) == {("pfld", 0): "a"}
    assert chosen(df, rt=1.0, fairness="dp_gap") == {("pfld", 0): "b"}


@pytest.mark.parametrize("kw, names", [
    ({"rt": -0.5}, ["rt"]),
    ({"rt": float("nan")}, ["rt"]),
    ({"fairness": "accuracy"}, ["fairness", "accuracy"]),
    ({"fairness": "grms"}, ["valid_grms"]),  # the column is missing from the table
])
def test_bad_arguments_raise_input_error(kw, names):
    with pytest.raises(InputError) as err:
        select_by_rt(WINDOW, **kw)
    msg = str(err.value)
    assert "\n" not in msg
    for name in names:
        assert name in msg


def test_missing_column_names_the_column():
    with pytest.raises(InputError, match="config_id"):
        select_by_rt(WINDOW.drop(columns="config_id"))
    with pytest.raises(InputError, match="df"):
        select_by_rt([1, 2, 3])


def test_aggregate_mean_and_sample_std_over_seeds():
    sel = table([
        ("federate", 0, "a", 71.0, 1.0, {"leakage": 50.0, "mdl": 10.0}),
        ("federate", 1, "a", 73.0, 2.0, {"leakage": 54.0, "mdl": np.nan}),
        ("federate", 2, "b", 78.0, 6.0, {"leakage": 58.0, "mdl": 14.0}),
        ("unconstrained", 0, "u", 80.0, 20.0),
    ])
    sel.loc[sel["method"] == "federate", "eps_formal"] = 4.0
    agg = aggregate_seeds(sel)
    assert list(agg.columns) == [
        "dataset", "method", "n_seeds",
        "test_accuracy_mean", "test_accuracy_std", "test_tpr_gap_mean", "test_tpr_gap_std",
        "leakage_mean", "leakage_std", "mdl_mean", "mdl_std", "guarantee",
    ]
    fed = agg[agg["method"] == "federate"].iloc[0]
    # what each method's eps protects, from the method where the rows do not store it
    assert fed["guarantee"] == "local, replace one record's representation"
    assert agg.loc[agg["method"] == "unconstrained", "guarantee"].iloc[0] == "not private"  # as the CLI prints it
    assert fed["n_seeds"] == 3
    # test accuracy 70, 72, 77: mean 73, squared deviations 9 + 1 + 16 = 26, ddof=1 -> 26 / 2.
    assert fed["test_accuracy_mean"] == pytest.approx(73.0)
    assert fed["test_accuracy_std"] == pytest.approx(math.sqrt(13.0))
    assert fed["leakage_std"] == pytest.approx(4.0)
    assert fed["mdl_mean"] == pytest.approx(12.0)  # NaN skipped
    unc = agg[agg["method"] == "unconstrained"].iloc[0]
    assert unc["n_seeds"] == 1 and unc["test_accuracy_mean"] == 79.0 and math.isnan(unc["test_accuracy_std"])


def test_aggregate_custom_metrics_and_fairness():
    sel = table([("pfld", 0, "a", 80.0, 1.0, {"test_eo_gap": 2.0}), ("pfld", 1, "a", 82.0, 1.0, {"test_eo_gap": 4.0})])
    agg = aggregate_seeds(sel, fairness="eo_gap")
    assert agg.loc[0, "test_eo_gap_mean"] == 3.0
    agg = aggregate_seeds(sel, metrics=["valid_accuracy"])
    assert list(agg.columns) == ["dataset", "method", "n_seeds", "valid_accuracy_mean", "valid_accuracy_std",
                                 "guarantee"]
    with pytest.raises(InputError, match="test_grms"):
        aggregate_seeds(sel, fairness="grms")


def test_aggregate_refuses_unselected_rows():
    with pytest.raises(InputError, match="select"):
        aggregate_seeds(WINDOW)


def test_rt_sweep_stacks_selections():
    df = pd.concat([WINDOW, table([("federate", 1, "x", 70.0, 8.0), ("federate", 1, "y", 69.5, 2.0)])],
                   ignore_index=True)
    sweep = rt_sweep(df, [0, 1, 3])
    assert list(sweep.columns[:4]) == ["dataset", "method", "rt", "n_seeds"]
    assert list(sweep["rt"]) == [0.0, 1.0, 3.0]
    assert (sweep["n_seeds"] == 2).all()
    for rt in (0, 1, 3):
        expected = aggregate_seeds(select_by_rt(df, rt))
        got = sweep[sweep["rt"] == rt].iloc[0]
        assert got["test_tpr_gap_mean"] == pytest.approx(expected.loc[0, "test_tpr_gap_mean"])
    # RT = 1: seed 0 -> c4 (valid gap 5), seed 1 -> y (valid gap 2).
    assert sweep.loc[1, "valid_tpr_gap_mean"] == pytest.approx(3.5)
    with pytest.raises(InputError, match="rts"):
        rt_sweep(df, [1, -1])


def test_accuracy_bins_edges_and_best_fairness():
    df = table([
        ("federate", 0, "a", 71.5, 9.0),   # -> 72
        ("federate", 0, "b", 72.49, 4.0),  # -> 72, fairer
        ("federate", 0, "c", 72.5, 7.0),   # -> 73
        ("federate", 0, "d", 71.49, 1.0),  # -> 71
        ("federate", 1, "a", 72.0, 6.0),   # -> 72
        ("federate", 1, "e", 76.2, 3.0),   # -> 76; 74 and 75 were never reached
    ])
    bins = fairness_accuracy_bins(df)
    assert list(bins.columns) == ["dataset", "method", "accuracy_bin", "n_seeds",
                                  "valid_tpr_gap_mean", "valid_tpr_gap_std", "seeds_run"]
    assert set(bins["seeds_run"]) == {df["seed"].nunique()}
    got = {int(r.accuracy_bin): (r.n_seeds, r.valid_tpr_gap_mean) for r in bins.itertuples()}
    assert got == {71: (1, 1.0), 72: (2, 5.0), 73: (1, 7.0), 76: (1, 3.0)}
    b72 = bins[bins["accuracy_bin"] == 72].iloc[0]
    assert b72["valid_tpr_gap_std"] == pytest.approx(math.sqrt(2.0))  # gaps 4 and 6, ddof=1
    assert not bins["accuracy_bin"].isin([74, 75]).any()


def test_privacy_accuracy_by_eps():
    df = table([
        ("federate", 0, "e1a", 70.0, 5.0, {"eps": 1.0, "leakage": 55.0, "eps_formal": 1.0}),
        ("federate", 0, "e1b", 72.0, 9.0, {"eps": 1.0, "leakage": 57.0, "eps_formal": 1.0}),
        ("federate", 1, "e1a", 74.0, 5.0, {"eps": 1.0, "leakage": 61.0, "eps_formal": 1.0}),
        ("federate", 0, "e8", 80.0, 9.0, {"eps": 8.0, "leakage": 70.0, "eps_formal": 8.0}),
        ("unconstrained", 0, "u", 85.0, 20.0),
    ])
    out = privacy_accuracy_by_eps(df)
    assert set(out["method"]) == {"federate"}
    assert list(out["eps"]) == [1.0, 8.0]
    e1 = out.iloc[0]
    assert e1["n_seeds"] == 2
    assert e1["test_accuracy_mean"] == pytest.approx(72.0)  # (71 + 73) / 2: e1b on seed 0
    assert e1["leakage_mean"] == pytest.approx(59.0)
    assert e1["leakage_std"] == pytest.approx(math.sqrt(8.0))
    assert e1["eps_formal_max"] == 1.0
    assert out.iloc[1]["n_seeds"] == 1 and math.isnan(out.iloc[1]["leakage_std"])
    assert privacy_accuracy_by_eps(df[df["method"] == "unconstrained"]).empty


def _pfld_table():
    """Two seeds of: unconstrained (no notion, no eps); pfld for notions dp and eo at eps 1 and
    10, two clip bounds each (configs c1, c2)."""
    rows = []
    for seed in (0, 1):
        rows.append(dict(method="unconstrained", seed=seed, config_id="u", fairness_notion=None, eps=np.nan,
                         valid_accuracy=85.0, test_accuracy=85.0 + seed, valid_dp_gap=20.0, test_dp_gap=19.0,
                         valid_eo_gap=10.0, test_eo_gap=9.0 + seed, valid_ap_gap=2.0, test_ap_gap=2.0))
        for notion in ("dp", "eo"):
            for eps in (1.0, 10.0):
                for cid, acc, gap in (("c1", 80.0, 8.0 - eps / 10), ("c2", 80.5, 12.0)):
                    rows.append(dict(method="pfld", seed=seed, config_id=f"{notion}{eps:g}{cid}", fairness_notion=notion,
                                     eps=eps, valid_accuracy=acc, test_accuracy=acc - 1,
                                     valid_dp_gap=gap if notion == "dp" else 30.0, test_dp_gap=gap + seed,
                                     valid_eo_gap=gap if notion == "eo" else 30.0, test_eo_gap=gap + 2 * seed,
                                     valid_ap_gap=1.0, test_ap_gap=1.0))
    df = pd.DataFrame(rows)
    df["dataset"], df["status"], df["leakage"], df["mdl"] = "bank", "ok", np.nan, np.nan
    return df


@pytest.mark.parametrize("by", [("fairness_notion", "eps"), ("fairness_notion",)])
def test_a_notion_selection_from_the_narrow_copy_is_the_selection_from_every_column(by):
    """``select_by_rt`` and ``select_at_each_rt`` under notion_gap expand a copy of only the
    columns a selection reads and take each pick's whole row back by position: the picks are
    those of the rows expanded with every column, column for column and in that order, a
    hyperparameter, an object column of numbers, an error row and the valid counts included."""
    from fairdp.analysis import per_notion
    from fairdp.analysis._select import select_at_each_rt

    df = _pfld_table()
    df["lr"] = np.linspace(0.01, 0.1, len(df))  # a column the narrow copy leaves out
    df["valid_confusion"] = pd.array([f'{{"v": {i}}}' for i in range(len(df))], dtype="str")
    df["valid_accuracy"] = df["valid_accuracy"].astype(object)  # read as numbers by the selection
    df.loc[1, "status"] = "error"
    want = select_by_rt(per_notion(df), 1.0, "notion_gap", list(by))
    pd.testing.assert_frame_equal(select_by_rt(df, 1.0, "notion_gap", list(by)), want)
    for got, expected in zip(select_at_each_rt(df, [0.0, 1.0], "notion_gap", list(by)),
                             select_at_each_rt(per_notion(df), [0.0, 1.0], "notion_gap", list(by))):
        pd.testing.assert_frame_equal(got, expected)


def test_per_notion_reads_each_rows_own_violation_and_repeats_baselines():
    from fairdp.analysis import per_notion

    out = per_notion(_pfld_table())
    base = out[out["method"] == "unconstrained"]
    assert sorted(base["fairness_notion"]) == ["dp", "dp", "eo", "eo"]  # one copy per notion and seed
    assert set(base.loc[base["fairness_notion"] == "dp", "valid_notion_gap"]) == {20.0}
    assert set(base.loc[base["fairness_notion"] == "eo", "valid_notion_gap"]) == {10.0}
    eo = out[(out["method"] == "pfld") & (out["fairness_notion"] == "eo")]
    assert (eo["valid_notion_gap"] == eo["valid_eo_gap"]).all() and (eo["test_notion_gap"] == eo["test_eo_gap"]).all()
    with pytest.raises(InputError, match="fairness_notion"):
        per_notion(_pfld_table().assign(fairness_notion=None))


def test_selection_and_aggregation_per_notion_and_eps():
    """RT = 1 per (method, notion, eps, seed): c1 (80.0) and c2 (80.5) are both in the window,
    c1's own violation (8 - eps/10 < 12) wins; unconstrained is one row per notion, eps NaN."""
    df = _pfld_table()
    by = ["fairness_notion", "eps"]
    selected = select_by_rt(df, 1.0, "notion_gap", by=by)
    pf = selected[selected["method"] == "pfld"]
    assert len(pf) == 2 * 2 * 2 and set(pf["config_id"].str[-2:]) == {"c1"}
    agg = aggregate_seeds(selected, fairness="notion_gap", by=by)
    assert list(agg.columns[:4]) == ["dataset", "method", "fairness_notion", "eps"]
    row = agg[(agg["method"] == "pfld") & (agg["fairness_notion"] == "eo") & (agg["eps"] == 10.0)].iloc[0]
    assert row["n_seeds"] == 2 and row["test_notion_gap_mean"] == pytest.approx(7.0 + 1.0)  # 7 + 2 * seed
    base = agg[agg["method"] == "unconstrained"]
    assert len(base) == 2 and base["eps"].isna().all()
    assert base.set_index("fairness_notion").loc["eo", "test_notion_gap_mean"] == pytest.approx(9.5)
    # without by, notion_gap is refused: a table would mix the notions
    with pytest.raises(InputError, match="fairness_notion"):
        select_by_rt(df, 1.0, "notion_gap")
    with pytest.raises(InputError, match="no column 'clip'"):
        select_by_rt(df, 1.0, "dp_gap", by=["clip"])
    # the table shows the by columns after Method
    from fairdp.analysis import format_table

    text = format_table(agg, "md", "notion_gap", by=by)
    assert text.splitlines()[0].startswith(
        "| Dataset | Method | Guarantee | Notion | ε | Seeds | Accuracy ↑ | Violation ↓")
    assert "| bank | unconstrained | not private | eo | - | 2 |" in text


def test_violation_accuracy_by_eps_is_tran_et_als_figure_table():
    from fairdp.analysis import violation_accuracy_by_eps

    table = violation_accuracy_by_eps(_pfld_table(), rt=1.0)
    pf = table[(table["method"] == "pfld") & (table["fairness_notion"] == "dp")].sort_values("eps")
    assert list(pf["eps"]) == [1.0, 10.0]
    assert list(pf["test_notion_gap_mean"]) == pytest.approx([7.9 + 0.5, 7.0 + 0.5])



def _confusion(constant: bool) -> str:
    """A test split's counts as rows store them: a model predicting class 0 for every row when
    ``constant``, else 80% right."""
    rng = np.random.default_rng(0)
    y, s = rng.integers(0, 2, 200), rng.integers(0, 2, 200)
    return counts_text(np.zeros(200, int) if constant else np.where(rng.random(200) < 0.8, y, 1 - y), y, s)


@pytest.mark.parametrize("by", [("fairness_notion", "eps"), ("fairness_notion",)])
def test_a_reports_violation_table_is_violation_accuracy_by_eps(by):
    """Under notion_gap by notion and eps the report takes that table from its own selection,
    else from its once-expanded rows: either way it is ``violation_accuracy_by_eps``, and the
    sweep is ``rt_sweep``'s."""
    from fairdp.analysis import violation_accuracy_by_eps
    from fairdp.analysis._report import ReportOptions, _checked, _tables_of

    df = _pfld_table()
    df.loc[3, "valid_accuracy"] = np.nan  # a row each table leaves out, with a note
    # columns the per-notion copy leaves out, which a pick still carries
    df["valid_confusion"] = pd.array([f'{{"v": {i}}}' for i in range(len(df))], dtype="str")
    df["device"], df["error"] = pd.Categorical(["cpu"] * len(df)), None
    # every third row's model predicts one class for every test row (a constant model)
    df["test_confusion"] = [_confusion(constant=i % 3 == 0) for i in range(len(df))]
    df.loc[0, "status"] = "error"
    o, df = _checked(df, ReportOptions(rt=1.0, fairness="notion_gap", by=by, rts=(0.0, 1.0)))
    notes, apart = [], []
    tables = _tables_of(df, o, notes)
    pd.testing.assert_frame_equal(tables.selected, select_by_rt(df, 1.0, "notion_gap", list(by), notes=apart))
    assert "_row" not in tables.view.columns
    # the fronts leave the constant models out, each notion's copy by its row's own counts
    from fairdp.analysis import per_notion
    from fairdp.analysis._predictions import constant_models
    from fairdp.analysis._report import _per_notion_view

    view = _per_notion_view(per_notion(df))
    fronts = view[~constant_models(view).fillna(False).to_numpy(bool)]
    front_rows = tables.front_rows()
    assert 0 < len(front_rows) < len(tables.view)
    pd.testing.assert_frame_equal(front_rows.reset_index(drop=True),
                                  fronts[list(front_rows.columns)].reset_index(drop=True))
    # the summary reads its own narrow copy of the same rows
    from fairdp.analysis._report import _pareto_summary
    from fairdp.analysis._rows import guarantees_by_method

    pd.testing.assert_frame_equal(tables.pareto, _pareto_summary(fronts, "notion_gap", guarantees_by_method(df)))
    assert tables.constant_off == int(constant_models(df[df["status"] == "ok"]).fillna(False).sum()) > 0
    pd.testing.assert_frame_equal(tables.notions, violation_accuracy_by_eps(df, 1.0, notes=apart))
    swept = rt_sweep(df, [0.0, 1.0], "notion_gap", by=list(by), notes=apart)
    pd.testing.assert_frame_equal(tables.sweep.drop(columns="n_constant", errors="ignore"), swept)
    assert set(apart) <= set(notes)

# --- rules a user relies on, each pinned where the wrong rule gives another answer (issue 40) ---


def test_privacy_by_eps_takes_the_most_accurate_config_not_the_fairest_within_a_point():
    """Figure 4 / Table 7 select by accuracy alone (RT = 0): configs 0.5 points apart, the less
    accurate one far fairer, so any RT window (or a fairness-first rule) picks the other one."""
    df = table([
        ("federate", 0, "acc", 80.0, 30.0, {"eps": 2.0, "test_accuracy": 79.0}),
        ("federate", 0, "fair", 79.5, 1.0, {"eps": 2.0, "test_accuracy": 70.0}),
    ])
    out = privacy_accuracy_by_eps(df)
    assert out.loc[0, "test_accuracy_mean"] == 79.0


def test_privacy_by_eps_ties_go_to_the_fairer_config_and_a_nan_gap_never_wins_a_tie():
    df = table([
        ("federate", 0, "a", 80.0, np.nan, {"eps": 1.0, "test_accuracy": 60.0}),
        ("federate", 0, "b", 80.0, 9.0, {"eps": 1.0, "test_accuracy": 70.0}),
        ("federate", 0, "c", 80.0, 3.0, {"eps": 1.0, "test_accuracy": 75.0}),
        ("federate", 0, "d", 79.0, 0.0, {"eps": 1.0, "test_accuracy": 50.0}),
    ])
    assert privacy_accuracy_by_eps(df).loc[0, "test_accuracy_mean"] == 75.0  # c
    # NaN fairness is kept (only NaN accuracy is dropped) but sorts after every value
    assert privacy_accuracy_by_eps(df[df["config_id"].isin(["a", "b"])]).loc[0, "test_accuracy_mean"] == 70.0


def test_privacy_by_eps_reports_the_largest_formal_eps_over_seeds():
    """eps_formal_max bounds every seed's guarantee: seeds that spent 0.9, 1.3 and 1.1 report 1.3."""
    df = table([
        ("federate", s, "c", 80.0 + s, 5.0, {"eps": 1.0, "eps_formal": e}) for s, e in enumerate([0.9, 1.3, 1.1])
    ])
    assert privacy_accuracy_by_eps(df).loc[0, "eps_formal_max"] == 1.3


def test_privacy_by_eps_needs_neither_a_fairness_column_nor_eps_formal():
    df = table([("federate", 0, "a", 80.0, 1.0, {"eps": 1.0}), ("federate", 0, "b", 79.0, 0.0, {"eps": 1.0})])
    out = privacy_accuracy_by_eps(df.drop(columns=["valid_tpr_gap", "eps_formal"]))
    assert "eps_formal_max" not in out.columns
    assert out.loc[0, "test_accuracy_mean"] == 79.0  # a, the more accurate
    # metrics read from text (a CSV round trip) are numbers again
    text = df.astype({"valid_tpr_gap": str, "eps_formal": str})
    assert privacy_accuracy_by_eps(text).loc[0, "eps_formal_max"] == math.inf


def test_aggregate_refuses_a_single_duplicated_run():
    """One run with two rows among runs with one each is refused: its mean would weigh that
    seed twice. (Refusing only when every run is duplicated would let this through.)"""
    sel = table([
        ("federate", 0, "a", 71.0, 1.0), ("federate", 0, "b", 75.0, 1.0),
        ("federate", 1, "a", 73.0, 2.0), ("federate", 2, "a", 74.0, 2.0),
    ])
    with pytest.raises(InputError, match=r"several rows .*seed=0"):
        aggregate_seeds(sel)
    assert aggregate_seeds(sel.iloc[1:]).loc[0, "n_seeds"] == 3


def test_metrics_must_be_a_non_empty_list():
    """A single name is refused as such, not read as a list of one-letter columns."""
    sel = table([("federate", 0, "a", 71.0, 1.0)])
    for bad in ("test_accuracy", []):
        with pytest.raises(InputError, match="metrics: expected a non-empty list"):
            aggregate_seeds(sel, metrics=bad)
        with pytest.raises(InputError, match="metrics: expected a non-empty list"):
            rt_sweep(sel, metrics=bad)
    assert list(aggregate_seeds(sel, metrics=("test_accuracy",)).columns[3:5]) == ["test_accuracy_mean",
                                                                                  "test_accuracy_std"]


def test_tables_do_not_depend_on_row_order():
    """Rows arrive in whatever order parallel trials stored them: the tables come out sorted
    by dataset, method (and bin), the same for any order."""
    sel = table([("zeta", 0, "z", 70.0, 1.0), ("alpha", 0, "a", 80.0, 2.0), ("mid", 0, "m", 75.0, 3.0)])
    assert list(aggregate_seeds(sel)["method"]) == ["alpha", "mid", "zeta"]
    assert list(aggregate_seeds(sel.iloc[::-1])["method"]) == ["alpha", "mid", "zeta"]
    bins = fairness_accuracy_bins(table([("f", 0, "a", 76.0, 1.0), ("f", 0, "b", 72.0, 2.0), ("f", 0, "c", 74.0, 3.0)]))
    assert list(bins["accuracy_bin"]) == [72, 74, 76]


def test_empty_selection_keeps_the_columns_and_their_types():
    failed = WINDOW.assign(status="error")
    sel = select_by_rt(failed)
    assert sel.empty and list(sel.columns) == [*WINDOW.columns, "rt"]
    agg = aggregate_seeds(failed)
    assert agg.empty and agg["method"].dtype == WINDOW["method"].dtype != float  # not float columns


def test_rt_window_edge_is_closed():
    """The window is valid_accuracy >= alpha* - RT (widened by 1e-9 for float noise): a config
    at exactly its computed lower edge is a candidate."""
    edge = 80.0 - 1.0 - 1e-9
    df = table([("federate", 0, "top", 80.0, 9.0), ("federate", 0, "edge", edge, 1.0)])
    assert chosen(df, rt=1.0) == {("federate", 0): "edge"}
    assert chosen(table([("federate", 0, "top", 80.0, 9.0), ("federate", 0, "out", 78.99, 1.0)]), rt=1.0) == {
        ("federate", 0): "top"}


def test_rt_sweep_puts_rt_after_the_by_columns():
    df = _pfld_table()
    sweep = rt_sweep(df, [0, 1], fairness="notion_gap", by=["fairness_notion", "eps"])
    assert list(sweep.columns[:6]) == ["dataset", "method", "fairness_notion", "eps", "rt", "n_seeds"]


def test_per_notion_needs_only_the_columns_of_the_notions_present():
    from fairdp.analysis import per_notion

    dp_only = _pfld_table().query("fairness_notion != 'eo'").drop(columns=["valid_eo_gap", "test_eo_gap",
                                                                            "valid_ap_gap", "test_ap_gap"])
    out = per_notion(dp_only)
    assert set(out["fairness_notion"]) == {"dp"}
    assert out.index.equals(pd.RangeIndex(len(out)))  # baselines' copies get their own labels
    with pytest.raises(InputError, match="valid_dp_gap"):
        per_notion(dp_only.drop(columns="valid_dp_gap"))


def test_selected_configs_lists_the_pick_with_its_hyperparameters():
    from fairdp.analysis import selected_configs

    df = table([
        ("federate", 1, "b", 80.0, 5.0, {"eps": 8.0, "lam": 0.5}),
        ("federate", 0, "a", 79.0, 2.0, {"eps": 4.0, "lam": 1.5}),
        ("unconstrained", 0, "u", 85.0, 20.0),
    ])
    out = selected_configs(select_by_rt(df))
    assert list(out.columns) == ["dataset", "method", "seed", "config_id", "eps", "lam", "valid_accuracy",
                                 "valid_tpr_gap", "test_accuracy", "test_tpr_gap", "guarantee"]
    assert list(zip(out["method"], out["seed"], out["config_id"])) == [
        ("federate", 0, "a"), ("federate", 1, "b"), ("unconstrained", 0, "u")]
    released = select_by_rt(df).assign(eps_released=1.0, delta_released=1e-5, released_under="x")
    assert list(selected_configs(released).columns[-5:]) == [
        "guarantee", "eps_formal", "eps_released", "delta_released", "released_under"]


def _rt_pick_by_hand(rows: pd.DataFrame, rt: float, by: list) -> list[tuple]:
    """FEDERATE 5.1 one group at a time, over the rows with a gap (the others are left out with a
    note): the best valid accuracy alpha*, the configs within rt of it, the lowest gap, then the
    higher accuracy, then config_id."""
    picks = []
    rows = rows[rows["valid_tpr_gap"].notna()]
    for _, g in rows.groupby(["dataset", "method", "seed", *by], dropna=False, sort=True):
        alpha = g["valid_accuracy"].max()
        window = [r for r in g.to_dict("records") if r["valid_accuracy"] >= alpha - rt - 1e-9]
        window.sort(key=lambda r: (r["valid_tpr_gap"], -r["valid_accuracy"], str(r["config_id"])))
        best = window[0]
        picks.append((best["dataset"], best["method"], best["seed"], best["config_id"]))
    return picks


_pick_row = st.fixed_dictionaries({
    "dataset": st.sampled_from(["adult", "compas"]), "method": st.sampled_from(["dpsgd", "pfld"]),
    "seed": st.integers(0, 2), "config_id": st.sampled_from(["c1", "c2", "c10", "c3", "b"]),
    "eps": st.sampled_from([0.5, 1.0, math.nan]),
    "valid_accuracy": st.sampled_from([70.0, 70.5, 71.0, 72.0, 80.0]),
    "valid_tpr_gap": st.sampled_from([0.0, -0.0, 1.0, 1.0, 3.5, math.nan]),
    "test_accuracy": st.just(70.0), "test_tpr_gap": st.just(1.0),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(st.lists(_pick_row, min_size=1, max_size=30), st.sampled_from([0.0, 0.5, 1.0, 5.0]), st.booleans())
def test_the_rt_pick_of_every_group_is_the_rule_applied_group_by_group(rows, rt, by_eps):
    df = pd.DataFrame(rows)
    by = ["eps"] if by_eps else []
    picked = select_by_rt(df, rt, "tpr_gap", by, notes=[])
    got = list(zip(picked["dataset"], picked["method"], picked["seed"], picked["config_id"]))
    assert sorted(got) == sorted(_rt_pick_by_hand(df, rt, by))


@settings(max_examples=40, deadline=None)
@given(st.lists(_pick_row, min_size=1, max_size=30), st.booleans())
def test_the_picks_at_every_rt_of_a_sweep_are_each_rts_own_selection(rows, by_eps):
    """One ordering of the rows serves every threshold: each is the selection made alone."""
    from fairdp.analysis._select import select_at_each_rt

    df = pd.DataFrame(rows)
    by = ["eps"] if by_eps else []
    rts = [0.0, 0.5, 1.0, 5.0]
    for rt, picked in zip(rts, select_at_each_rt(df, rts, "tpr_gap", by, notes=[])):
        alone = select_by_rt(df, rt, "tpr_gap", by, notes=[])
        pd.testing.assert_frame_equal(picked, alone)
        assert sorted(zip(picked["seed"], picked["config_id"])) == sorted(
            (s, c) for _, _, s, c in _rt_pick_by_hand(df, rt, by))


_sweep_row = st.fixed_dictionaries({
    "dataset": st.just("adult"), "method": st.sampled_from(["dpsgd", "pfld"]),
    "seed": st.integers(0, 1), "config_id": st.sampled_from(["c1", "c2", "c10", "c3", "b"]),
    "eps": st.sampled_from([0.5, 1.0, math.nan]), "status": st.sampled_from(["ok", "ok", "ok", "error"]),
    "valid_accuracy": st.sampled_from([70.0, 70.5, 71.0, 72.0, 74.0, math.nan]),
    "valid_tpr_gap": st.sampled_from([0.0, 1.0, 3.5, math.nan]),
    "test_accuracy": st.sampled_from([69.0, 70.0]), "test_tpr_gap": st.sampled_from([1.0, 2.0]),
    "leakage": st.sampled_from([55.0, 60.0, math.nan]), "mdl": st.just(20.0), "lam": st.just(0.5),
})


@settings(max_examples=100, deadline=None)
@given(st.lists(_sweep_row, min_size=1, max_size=30), st.booleans(), st.sampled_from([0, 1, 1, 1]))
def test_a_selection_and_its_sweep_from_one_ordering_are_the_separate_calls(rows, by_eps, with_rts):
    """What a report computes at once is each function called alone: the RT pick with every
    column, the sweep's table, the stacked picks of each threshold (their keys), and the notes."""
    from fairdp.analysis._predictions import selections_at
    from fairdp.analysis._select import selection_and_sweep

    df = pd.DataFrame(rows)
    if not (df["status"] == "ok").any():
        return
    by = ["eps"] if by_eps else []
    rts = [0.0, 1.0, 5.0] if with_rts else []
    together, apart = [], []
    selected, sweep, each = selection_and_sweep(df, 1.0, rts, "tpr_gap", by, keep=["lam"], notes=together)
    pd.testing.assert_frame_equal(selected, select_by_rt(df, 1.0, "tpr_gap", by, notes=apart))
    if not rts:
        assert sweep is None and each is None and together == apart
        return
    pd.testing.assert_frame_equal(sweep, rt_sweep(df, rts, "tpr_gap", by=by, notes=apart))
    alone = selections_at(df, rts, "tpr_gap", by)
    pd.testing.assert_frame_equal(each, alone[list(each.columns)])
    assert list(each.columns) == ["dataset", "method", "seed", *by, "config_id", "status", "lam", "rt"]
    assert together == apart
