"""``evaluate.predictions: selected``: the test predictions of the configs the stored selection
picks, stored beside the results (``<results>.predictions.parquet``), exactly those the rows'
test metrics were computed from; resumed runs neither lose nor duplicate them, and a study
without the setting writes nothing of them."""

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from fairdp.analysis import per_group_rates, select_by_rt
from fairdp.data import load_dataset
from fairdp.errors import InputError
from fairdp.fairness import ap_gap, dp_gap, eo_gap, tpr_gap
from fairdp.study import (
    ResultStore,
    load_spec,
    parse_spec,
    read_predictions,
    read_results,
    read_selection,
    run_study,
    stored_predictions,
)
from fairdp.study.executors._worker import PREDICTION_PARTS
from tests.conftest import run_cli, run_main

PICK = ["dataset", "method", "seed", "config_id"]
BASE = {"name": "tiny", "dataset": {"name": "synthetic", "rows": 1000, "features": 8}, "methods": {"unconstrained": {}}}


def _write_study(path: Path, predictions: str | None = "selected", **overrides) -> Path:
    spec = {
        "name": "tiny",
        "dataset": {"name": "synthetic", "rows": 1000, "features": 8},
        "seeds": [0, 1],
        "train": {"epochs": 2, "batch_size": 250},
        "evaluate": {"leakage": False, "mdl": False, "min_group_count": 1, **({"predictions": predictions} if predictions else {})},
        "selection": {"by": ["eps"]},
        "methods": {"unconstrained": {}, "federate": {"grid": {"eps": [1, 10], "lam": [0.5, 1.0]}}},
        "pack_size": 3,
    }
    spec.update(overrides)
    path.write_text(yaml.safe_dump(spec))
    return path


def _run(study: Path, results: Path, *more: str):
    proc = run_main("run", str(study), "--results", str(results), "--executor", "local", *more)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _leftovers(results: Path) -> list[str]:
    """Files a run keeps while it lasts, left under the results: the packs' predictions, temporaries."""
    return sorted(str(p) for p in results.rglob("*") if p.is_file() and (
        PREDICTION_PARTS in p.parts or p.name.startswith(".tmp-")))


# columns of a row that say when and where it ran, not what it is
VOLATILE = ["duration_s", "pack_duration_s", "finished_at", "node", "device"]


@pytest.fixture(scope="module")
def selected_run(tmp_path_factory):
    """The tiny study with ``evaluate.predictions: selected``, run once with the local executor
    through ``fairdp run``: (study file, results)."""
    base = tmp_path_factory.mktemp("predictions")
    study = _write_study(base / "tiny.yaml")
    _run(study, base / "r")
    return study, base / "r"


def _picks(results: Path) -> pd.DataFrame:
    """The configs the stored selection picks among the stored rows, as ``fairdp report`` picks them."""
    stored = read_selection(ResultStore(results))
    return select_by_rt(read_results(results), rt=stored.rt, fairness=stored.fairness, by=list(stored.by))


def _test_split(study: Path):
    spec = load_spec(study)
    return load_dataset(spec.dataset, **spec.dataset_options).split("test")


def _check_against_rows(study: Path, results: Path) -> pd.DataFrame:
    """The stored predictions hold each pick once per test example, with the test split's labels
    and groups, and give the pick's stored test accuracy, gaps and per-group rates (the rows')."""
    # here, not at the top: fairlearn and scikit-learn take seconds to import, paid only by the runs' tests
    from fairlearn.metrics import MetricFrame, selection_rate, true_positive_rate
    from sklearn.metrics import accuracy_score

    preds = read_predictions(results)
    picks = _picks(results)
    by = list(read_selection(ResultStore(results)).by)
    test = _test_split(study)
    n = len(test.y)
    keys = [*PICK, *by]
    assert list(preds.columns[:len(keys)]) == keys
    assert {"row", "y_true", "sensitive", "y_pred"} <= set(preds.columns)
    sizes = preds.groupby(keys, dropna=False).size()
    assert len(sizes) == len(picks) and (sizes == n).all()  # every pick, each once per test example
    assert not preds.duplicated([*keys, "row"]).any()
    rates = per_group_rates(picks, "test", by)
    for _, pick in picks.iterrows():
        mine = preds
        for k in keys:
            mine = mine[mine[k].isna()] if pd.isna(pick[k]) else mine[mine[k] == pick[k]]
        mine = mine.sort_values("row")
        assert (mine["pack_id"] == pick["pack_id"]).all()
        np.testing.assert_array_equal(mine["row"], np.arange(n))
        np.testing.assert_array_equal(mine["y_true"], test.y)
        np.testing.assert_array_equal(mine["sensitive"], test.s)
        y, y_pred, s = mine["y_true"].to_numpy(), mine["y_pred"].to_numpy(), mine["sensitive"].to_numpy()
        assert 100 * np.mean(y_pred == y) == pytest.approx(pick["test_accuracy"], abs=1e-9)
        frame = MetricFrame(metrics={"selection_rate": selection_rate, "accuracy": accuracy_score,
                                     "tpr": true_positive_rate}, y_true=y, y_pred=y_pred, sensitive_features=s)
        groups = frame.by_group
        # the gaps, from fairlearn's per-group rates: max - min over the groups, percent
        assert 100 * (groups["tpr"].max() - groups["tpr"].min()) == pytest.approx(pick["test_tpr_gap"], abs=1e-9)
        assert 100 * (groups["selection_rate"].max() - groups["selection_rate"].min()) == \
            pytest.approx(pick["test_dp_gap"], abs=1e-9)
        assert 100 * (groups["accuracy"].max() - groups["accuracy"].min()) == pytest.approx(pick["test_ap_gap"],
                                                                                           abs=1e-9)
        for gap, column in ((tpr_gap(y, y_pred, s), "test_tpr_gap"), (dp_gap(y_pred, s), "test_dp_gap"),
                            (eo_gap(y, y_pred, s), "test_eo_gap"), (ap_gap(y, y_pred, s), "test_ap_gap")):
            assert gap == pytest.approx(pick[column], abs=1e-9), column
        # fairlearn's per-group selection rate and accuracy, and fairdp's from the row's test counts
        mine_rates = rates[(rates["method"] == pick["method"]) & (rates["seed"] == pick["seed"])
                           & (rates["config_id"] == pick["config_id"])].set_index("group")
        for group, row in groups.iterrows():
            assert 100 * row["selection_rate"] == pytest.approx(mine_rates.loc[group, "selection_rate"], abs=1e-9)
            assert 100 * row["accuracy"] == pytest.approx(mine_rates.loc[group, "accuracy"], abs=1e-9)
    return preds


# -- the setting ---------------------------------------------------------------------------------

@pytest.mark.parametrize("value, want", [("selected", "selected"), ("none", None), (None, None)])
def test_the_setting_takes_selected_or_none(value, want):
    raw = {**BASE, "evaluate": {"predictions": value}} if value is not None else BASE
    assert parse_spec(raw).predictions == want


@pytest.mark.parametrize("value", ["all", True, 1, ["selected"]])
def test_any_other_value_is_one_line_naming_the_key(value):
    with pytest.raises(InputError, match=r"^evaluate\.predictions: must be selected or none, got") as e:
        parse_spec({**BASE, "evaluate": {"predictions": value}})
    assert "\n" not in str(e.value)


# -- what a run stores ---------------------------------------------------------------------------

def test_a_run_stores_each_picks_test_predictions_that_give_its_rows_metrics(selected_run):
    study, results = selected_run
    preds = _check_against_rows(study, results)
    assert stored_predictions(results) == f"{results}.predictions.parquet"
    assert set(preds["method"]) == {"unconstrained", "federate"} and set(preds["seed"]) == {0, 1}
    assert preds["eps"].isna().any() and set(preds["eps"].dropna()) == {1.0, 10.0}
    assert _leftovers(results) == []  # the packs' files are gathered and deleted
    assert len(read_results(results)) == 10  # the rows are the rows: nothing of the predictions among them


def test_a_rerun_with_nothing_to_train_keeps_the_table_as_it_is(selected_run, tmp_path):
    study, results = selected_run
    shutil.copytree(results.parent, tmp_path / "copy")
    copy = tmp_path / "copy" / results.name
    before = (tmp_path / "copy" / f"{results.name}.predictions.parquet").stat().st_mtime_ns
    proc = _run(study, copy)
    assert "packs again" not in proc.stderr and "stored the test predictions" not in proc.stderr
    assert (tmp_path / "copy" / f"{results.name}.predictions.parquet").stat().st_mtime_ns == before
    pd.testing.assert_frame_equal(read_predictions(copy), read_predictions(results))


def test_a_run_without_the_setting_stores_no_predictions_and_no_files(tmp_path):
    study = _write_study(tmp_path / "plain.yaml", predictions=None, seeds=[0])
    results = tmp_path / "r"
    _run(study, results)
    assert stored_predictions(results) is None
    assert not list(tmp_path.glob("*predictions*")) and _leftovers(results) == []
    with pytest.raises(InputError, match=r"r\.predictions\.parquet: no predictions stored"):
        read_predictions(results)
    # nor does `evaluate.predictions: none`, and its rows resume those of a study without the key
    _run(_write_study(tmp_path / "none.yaml", predictions="none", seeds=[0, 1]), results)
    assert stored_predictions(results) is None and _leftovers(results) == []
    # the setting is no protocol of the rows: turned on later, the new seed's packs keep their
    # predictions and the earlier picks' packs, which kept none, are trained again for theirs
    rows_before = read_results(results)
    asked = _write_study(tmp_path / "asked.yaml", seeds=[0, 1, 2])
    proc = _run(asked, results)
    assert "packs again" in proc.stderr
    after = read_results(results)
    assert len(after) == 15 and set(after["seed"]) == {0, 1, 2}
    pd.testing.assert_frame_equal(rows_before.drop(columns=VOLATILE, errors="ignore").reset_index(drop=True),
                                  after[after["seed"] < 2].drop(columns=VOLATILE, errors="ignore")
                                  .reset_index(drop=True), check_like=True)
    _check_against_rows(asked, results)


def test_a_run_stopped_between_a_packs_predictions_and_its_rows_resumes_without_loss_or_copies(
        selected_run, tmp_path, monkeypatch):
    """The third pack's predictions are written and its rows are not (a Ctrl-C there): the
    interrupted run stores no table and keeps the packs' files; the rerun trains what is left
    (packed afresh) and stores exactly the table of a run never stopped."""
    study, whole = selected_run
    results = tmp_path / "r"
    write_pack = ResultStore.write_pack
    calls = []

    def stopped_at_the_third(self, *args, **kwargs):
        calls.append(args)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return write_pack(self, *args, **kwargs)

    monkeypatch.setattr(ResultStore, "write_pack", stopped_at_the_third)
    summary = run_study(load_spec(study), str(results), executor="local")
    monkeypatch.undo()
    assert summary.unfinished_packs > 0
    parts = [p for p in _leftovers(results) if p.endswith(".pq")]
    assert len(parts) == 3 and len(read_results(results)) < 10  # one pack's file, no rows of it
    assert stored_predictions(results) is None
    _run(study, results)
    preds = _check_against_rows(study, results)
    assert _leftovers(results) == []
    want = read_predictions(whole)
    order = [*PICK, "eps", "row"]
    pd.testing.assert_frame_equal(preds.drop(columns="pack_id").sort_values(order, ignore_index=True),
                                  want.drop(columns="pack_id").sort_values(order, ignore_index=True))


def test_a_changed_selection_trains_the_new_picks_packs_again_as_they_were(selected_run, tmp_path):
    """Once the packs' files are gone, a selection that picks other configs has their packs
    trained again in the run's process, with the same predictions as their rows'."""
    study, results = selected_run
    shutil.copytree(results.parent, tmp_path / "copy")
    copy = tmp_path / "copy" / results.name
    changed = _write_study(tmp_path / "changed.yaml", selection={"rt": 100, "fairness": "dp_gap"})
    before = _picks(results)
    proc = _run(changed, copy)
    after = _picks(copy)
    assert not before[PICK].equals(after[PICK]), "the changed selection picks the same configs"
    assert "packs again for the test predictions" in proc.stderr
    _check_against_rows(changed, copy)
    assert len(read_results(copy)) == 10 and _leftovers(copy) == []


# -- the Ray executor ----------------------------------------------------------------------------

@pytest.mark.slow  # an embedded Ray's start-up: make test-slow
def test_a_ray_run_stores_the_same_predictions(selected_run, tmp_path):
    study, whole = selected_run
    results = tmp_path / "r"
    proc = run_cli("run", str(study), "--results", str(results), "--executor", "ray")
    assert proc.returncode == 0, proc.stderr[-3000:]
    preds = _check_against_rows(study, results)
    assert _leftovers(results) == []
    order = [*PICK, "eps", "row"]
    pd.testing.assert_frame_equal(preds.drop(columns="pack_id").sort_values(order, ignore_index=True),
                                  read_predictions(whole).drop(columns="pack_id").sort_values(order, ignore_index=True))
