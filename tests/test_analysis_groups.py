"""Per-group rates from the counts each row stores equal fairlearn's MetricFrame on the
predictions, through the real evaluation path too; rows without the counts stay readable."""

import json
import warnings

import numpy as np
import pandas as pd
import pytest
from fairlearn.metrics import (
    MetricFrame,
    count,
    false_positive_rate,
    selection_rate,
    true_positive_rate,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score

from fairdp import schema
from fairdp.analysis import (
    ReportOptions,
    aggregate_group_rates,
    per_group_rates,
    select_by_rt,
    write_report,
)
from fairdp.analysis._groups import _counts_arrays, rates_from_confusion
from fairdp.errors import InputError
from fairdp.fairness import confusion, group_rates
from fairdp.study import ResultStore
from tests.conftest import confusion_text

from .conftest import whole_report

# fairlearn's metric -> (our column, our unit per theirs: rates are percent)
METRICS = {
    "count": (count, "count", 1.0),
    "selection_rate": (selection_rate, "selection_rate", 100.0),
    "true_positive_rate": (true_positive_rate, "tpr", 100.0),
    "false_positive_rate": (false_positive_rate, "fpr", 100.0),
    "accuracy": (accuracy_score, "accuracy", 100.0),
}
N_GROUPS = 3


def metric_frame(y, y_pred, s, name: str) -> pd.Series:
    """fairlearn's by-group values of metric ``name``, in our units, indexed by group code."""
    fn, _, unit = METRICS[name]
    frame = MetricFrame(metrics=fn, y_true=y, y_pred=y_pred, sensitive_features=pd.Series(s, name="group"))
    return frame.by_group.astype(float) * unit


def row(y, y_pred, s, seed=0, method="m", split="test") -> dict:
    return {"dataset": "d", "method": method, "seed": seed, "config_id": f"c{seed}", "status": "ok",
            schema.CONFUSION_COLUMNS[split]: json.dumps(confusion(y, y_pred, s, n_classes=2, n_groups=N_GROUPS).tolist())}


@pytest.fixture(scope="module")
def fitted():
    """A logistic regression's test predictions on data whose label depends on the group."""
    rng = np.random.default_rng(0)
    n = 3000
    s = rng.integers(0, N_GROUPS, n)
    x = rng.normal(size=(n, 4)) + s[:, None] * 0.5
    y = (x[:, 0] + 0.8 * s + rng.normal(size=n) > 1.0).astype(int)
    model = LogisticRegression().fit(x[:2000], y[:2000])
    return y[2000:], model.predict(x[2000:]), s[2000:]


@pytest.mark.parametrize("name", list(METRICS))
def test_per_group_rates_from_stored_counts_equal_fairlearns_metric_frame(fitted, name):
    y, y_pred, s = fitted
    table = per_group_rates(pd.DataFrame([row(y, y_pred, s)]))
    assert list(table["group"]) == list(range(N_GROUPS)) and (table["class"] == 1).all()
    expected = metric_frame(y, y_pred, s, name)
    np.testing.assert_allclose(table.set_index("group")[METRICS[name][1]].to_numpy(float),
                               expected.loc[list(range(N_GROUPS))].to_numpy(), rtol=1e-12)


@pytest.mark.parametrize("name", list(METRICS))
def test_the_mean_over_seeds_is_the_mean_of_each_seeds_metric_frame(fitted, name):
    y, _, s = fitted
    rng = np.random.default_rng(1)
    preds = [np.where(rng.random(len(y)) < p, y, 1 - y) for p in (0.6, 0.75, 0.9)]
    selected = pd.DataFrame([row(y, p, s, seed) for seed, p in enumerate(preds)])
    table = aggregate_group_rates(selected).set_index("group")
    frames = pd.concat([metric_frame(y, p, s, name) for p in preds], axis=1)
    column = METRICS[name][1]
    assert (table["n_seeds"] == 3).all()
    if column == "count":
        np.testing.assert_allclose(table["count_mean"], frames.mean(axis=1))
    else:
        np.testing.assert_allclose(table[f"{column}_mean"], frames.mean(axis=1), rtol=1e-12)
        np.testing.assert_allclose(table[f"{column}_std"], frames.std(axis=1, ddof=1), rtol=1e-9)


def test_tasks_of_more_classes_have_a_row_per_class_as_the_gaps_see_them():
    rng = np.random.default_rng(2)
    y, s = rng.integers(0, 3, 900), rng.integers(0, 2, 900)
    y_pred = np.where(rng.random(900) < 0.7, y, rng.integers(0, 3, 900))
    stored = pd.DataFrame([{"dataset": "d", "method": "m", "seed": 0, "config_id": "c",
                            "test_confusion": json.dumps(confusion(y, y_pred, s).tolist())}])
    ours = per_group_rates(stored).sort_values(["group", "class"]).reset_index(drop=True)
    theirs = group_rates(y, y_pred, s).sort_values(["group", "class"]).reset_index(drop=True)
    for column in ("count", "tpr", "fpr", "selection_rate", "accuracy"):
        np.testing.assert_allclose(ours[column].astype(float), theirs[column].astype(float), rtol=1e-12)
    assert ours["label_positives"].tolist() == theirs["positives"].tolist()


def test_an_empty_conditioning_set_is_nan_not_zero():
    y = np.array([0, 0, 1, 1])
    s = np.array([0, 0, 1, 1])  # group 0 has no positive label, group 1 no negative one
    table = per_group_rates(pd.DataFrame([{"dataset": "d", "method": "m", "seed": 0, "config_id": "c",
                                           "test_confusion": json.dumps(confusion(y, y, s).tolist())}]))
    assert np.isnan(table.loc[0, "tpr"]) and table.loc[0, "fpr"] == 0.0
    assert table.loc[1, "tpr"] == 100.0 and np.isnan(table.loc[1, "fpr"])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One real pack through the engine and evaluate_pack, its rows stored and read back."""
    from fairdp.data import load_dataset
    from fairdp.engine import TrainSettings
    from fairdp.methods import get_method
    from fairdp.metrics import evaluate_pack

    data = load_dataset("synthetic", rows=1500, features=10, groups=N_GROUPS, seed=4)
    method = get_method("adversarial")
    configs = [{"lam": 0.1}, {"lam": 1.0}]
    result = method.train_pack(data, configs, seed=0, settings=TrainSettings(epochs=2, batch_size=250))
    metrics = evaluate_pack(data, result, with_leakage=False, with_mdl=False)
    store = ResultStore(tmp_path_factory.mktemp("results"))
    rows = [{"study": "t", "dataset": data.name, "method": "adversarial", "seed": k, "config_id": f"c{k}",
             "status": "ok", **m} for k, m in enumerate(metrics)]  # one config per "seed": two selected rows
    store.write_pack(rows, data.name, "adversarial", 0, "p0")
    return data, result, store, rows


@pytest.mark.parametrize("split", ["valid", "test"])
@pytest.mark.parametrize("name", list(METRICS))
def test_rows_of_a_real_evaluation_carry_each_splits_per_group_counts(trained, split, name):
    data, result, store, _ = trained
    stored, _ = store.read()
    table = per_group_rates(stored, split)
    part = data.split(split)
    for k in range(len(result.configs)):
        ours = table[table["seed"] == k].set_index("group")[METRICS[name][1]]
        theirs = metric_frame(part.y, result.predictions[split][k], part.s, name)
        np.testing.assert_allclose(ours.to_numpy(float), theirs.loc[ours.index].to_numpy(), rtol=1e-12)
        assert list(ours.index) == list(range(N_GROUPS))


def test_rows_written_before_valid_counts_existed_stay_readable(trained, tmp_path):
    data, _, store, rows = trained
    old_columns = [c for c in store.columns if c[0] != schema.VALID_CONFUSION]
    old = [{k: v for k, v in r.items() if k != schema.VALID_CONFUSION} | {"seed": 5 + i} for i, r in enumerate(rows)]
    ResultStore(tmp_path / "r", columns=old_columns).write_pack(old, data.name, "adversarial", 5, "old")
    ResultStore(tmp_path / "r").write_pack(rows, data.name, "adversarial", 0, "new")
    both, _ = ResultStore(tmp_path / "r").read()
    assert len(both) == 4 and both[schema.VALID_CONFUSION].isna().sum() == 2
    assert sorted(per_group_rates(both, "valid")["seed"].unique()) == [0, 1]  # the old rows have none
    assert sorted(per_group_rates(both, "test")["seed"].unique()) == [0, 1, 5, 6]
    assert aggregate_group_rates(both.drop(columns=[schema.VALID_CONFUSION, schema.TEST_CONFUSION])).empty


def test_the_report_has_a_per_group_section_with_the_aggregate(tmp_path):
    from tests.test_analysis_constant import rows_with_counts

    rows = rows_with_counts(configs=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_report(rows, tmp_path, ReportOptions(rts=(), ci=None))
        selected = select_by_rt(rows, 1.0)
    md = whole_report(tmp_path)
    section = md.split("## Per-group rates of the selected models", 1)[1].split("\n## ", 1)[0]
    assert "| Dataset | Method | Guarantee | Group | Seeds | Rows | Selection rate | TPR | FPR | Accuracy |" in section
    expected = aggregate_group_rates(selected).set_index(["dataset", "method", "group"]).loc[("adult", "federate", 1)]
    cell = f"{expected['tpr_mean']:.1f} ± {expected['tpr_std']:.1f}"
    line = next(ln for ln in section.splitlines() if ln.startswith("| adult | federate |") and "| 1 | 3 |" in ln)
    assert cell in line


_COUNTS = st.integers(1, 3).flatmap(lambda g: st.integers(2, 3).flatmap(lambda c: st.lists(
    st.lists(st.lists(st.integers(0, 6), min_size=c, max_size=c), min_size=c, max_size=c), min_size=g, max_size=g)))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.just(""), _COUNTS), min_size=1, max_size=12), st.data())
def test_per_group_rates_are_each_rows_rates_from_its_counts(counts, data):
    """The whole-table computation (rows of each counts shape at once) gives, row by row and in
    order, what ``rates_from_confusion`` gives each row alone, with its keys; rows of several
    shapes interleaved, rows without counts and rows not ok left out."""
    status = data.draw(st.lists(st.sampled_from(["ok", "ok", "error"]), min_size=len(counts), max_size=len(counts)))
    rows = pd.DataFrame({"dataset": "d", "method": [f"m{i % 2}" for i in range(len(counts))],
                         "seed": range(len(counts)), "config_id": [f"c{i}" for i in range(len(counts))],
                         "eps": [float(i % 3) for i in range(len(counts))], "status": status,
                         "test_confusion": [json.dumps(c) if isinstance(c, list) else c for c in counts]})
    got = per_group_rates(rows, "test", ["eps"])
    parts = [rates_from_confusion(r["test_confusion"]).assign(dataset=r["dataset"], method=r["method"], eps=r["eps"],
                                                             seed=r["seed"], config_id=r["config_id"])
             for _, r in rows[rows["status"] == "ok"].iterrows()]
    parts = [p for p in parts if len(p)]
    if not parts:
        assert got.empty
        return
    want = pd.concat(parts, ignore_index=True)[list(got.columns)]
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want, check_dtype=False)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_counts_parsed_at_once_are_each_texts_json(data):
    """The texts parsed in pyarrow all at once give, text by text and shape by shape, the counts
    json.loads gives each (ints, floats, spaced or not, other shapes, words, NaN, nothing), and
    refuse what it refuses."""
    texts = [confusion_text(data.draw) for _ in range(data.draw(st.integers(0, 12)))]
    texts += texts[: data.draw(st.integers(0, len(texts)))]  # repeated texts
    want: dict = {}
    try:
        for i, text in enumerate(texts):
            if isinstance(text, str) and text:
                conf = np.asarray(json.loads(text), dtype=np.int64)
                if conf.ndim != 3 or conf.shape[1] != conf.shape[2] or conf.shape[1] < 2:
                    raise InputError(f"confusion: expected counts (G, C, C) with C >= 2, got shape {conf.shape}")
                want.setdefault(conf.shape, ([], []))[0].append(i)
                want[conf.shape][1].append(conf)
    except (ValueError, InputError) as refused:  # not JSON, ragged, NaN, another shape
        with pytest.raises(type(refused)) as got:
            _counts_arrays(np.asarray(texts, dtype=object))
        assert str(got.value) == str(refused)  # the first text refused, as the loop refuses it
        return
    got = _counts_arrays(np.asarray(texts, dtype=object))
    assert sorted(got) == sorted(want)
    for shape, (positions, counts) in got.items():
        assert positions.tolist() == want[shape][0]
        assert counts.dtype == np.int64 and (counts == np.stack(want[shape][1])).all()
