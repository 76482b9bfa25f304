"""Per-epoch valid curves: one file per pack beside the rows, what the rows report at the kept
epoch, not read as rows, replaced (not duplicated) when a pack is trained again."""

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest

from fairdp.engine.contract import VALID_CURVES
from fairdp.study import ResultStore, parse_spec, read_history, run_study

from .conftest import whole_report

KEY = ["method", "seed", "config_id"]
EPOCHS = 3


def _spec(**over):
    spec = {"name": "curves", "dataset": {"name": "synthetic", "rows": 800, "features": 6}, "seeds": [0, 1],
            "train": {"epochs": EPOCHS, "batch_size": 200}, "evaluate": {"leakage": False, "mdl": False, "min_group_count": 1},
            "methods": {"unconstrained": {}, "random": {},
                        "federate": {"grid": {"eps": [1, 10], "lam": [0.5, 1.5]}}},
            "pack_size": 2}
    spec.update(over)
    return parse_spec(spec)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    results = tmp_path_factory.mktemp("curves") / "r"
    # one file per pack, so that one pack can be taken away (compaction's curves: test_store_compaction.py)
    run_study(_spec(), str(results), executor="local", checkpoint_every_s=0, compact=False)
    return results


def test_every_trained_config_has_one_curve_point_per_epoch(run):
    rows, _ = ResultStore(run).read()
    curves = read_history(run)
    trained = rows[rows["method"] != "random"]
    assert len(curves) == len(trained) * EPOCHS
    assert not curves.duplicated([*KEY, "epoch"]).any()
    assert set(curves["epoch"]) == set(range(1, EPOCHS + 1))
    assert not (curves["method"] == "random").any()  # a baseline not trained by epochs has none
    assert {f"valid_{c}" for c in VALID_CURVES} <= set(curves.columns)
    assert curves["valid_loss"].gt(0).all()


@pytest.mark.parametrize("metric", ["accuracy", "tpr_gap", "dp_gap", "eo_gap", "grms"])
def test_the_kept_epoch_is_what_the_row_reports(run, metric):
    rows, _ = ResultStore(run).read()
    curves = read_history(run)
    kept = curves[curves["kept"]]
    assert not kept.duplicated(KEY).any() and len(kept) == (rows["method"] != "random").sum()
    both = kept.merge(rows, on=KEY, suffixes=("", "_row"))
    assert (both["epoch"] == both["best_epoch"]).all()
    # FEDERATE's representation is noised afresh at every evaluation: its row's valid scores
    # are another draw than the epoch's; a model evaluated without noise scores the same
    both = both[both["method"] == "unconstrained"]
    assert len(both) == 2
    pd.testing.assert_series_equal(both[f"valid_{metric}"], both[f"valid_{metric}_row"], check_names=False,
                                   atol=1e-9, rtol=0)


def test_curves_sit_beside_the_rows_and_any_parquet_reader_reads_them(run):
    rows, corrupt = ResultStore(run).read()  # the rows' own reader sees no curve file
    assert not corrupt and "valid_loss" not in rows.columns
    beside = run.parent / f"{run.name}.history"
    assert beside.is_dir()
    everything = ds.dataset(str(beside), format="parquet").to_table().to_pandas()
    assert len(everything) == len(read_history(run))
    assert len(pd.read_parquet(beside)) == len(everything)


def test_a_pack_trained_again_replaces_its_curves(run, tmp_path):
    import shutil
    results = tmp_path / "r"
    shutil.copytree(run, results)
    shutil.copytree(f"{run}.history", f"{results}.history")
    before = read_history(results)
    store = ResultStore(results)
    victim = next(p for p in store.pack_files() if "/federate/" in p)
    (tmp_path / "r").joinpath(victim[len(str(results)) + 1:]).unlink()  # as if its run died after the curves
    # the orphan curves are not reported: their rows are not stored
    orphan = read_history(results)
    assert len(orphan) == len(before) - 2 * EPOCHS
    run_study(_spec(), str(results), executor="local", checkpoint_every_s=0)
    after = read_history(results)
    assert not after.duplicated([*KEY, "epoch"]).any()
    pd.testing.assert_frame_equal(after.drop(columns="study"), before.drop(columns="study"))


def test_the_report_draws_the_selected_configs_curves(run, tmp_path):
    from fairdp.analysis import select_by_rt, selected_curves
    from tests.conftest import run_main

    rows, _ = ResultStore(run).read()
    picks = select_by_rt(rows, 1.0, "tpr_gap")
    curves = selected_curves(read_history(run), picks, "tpr_gap")
    trained = picks[picks["method"] != "random"]
    assert len(curves) == len(trained) * EPOCHS  # the picks' curves, every epoch, nothing else
    assert set(zip(curves["method"], curves["seed"], curves["config_id"])) == \
        set(zip(trained["method"], trained["seed"], trained["config_id"]))
    np.testing.assert_array_equal(curves["valid_gap"], read_history(run).merge(
        curves[KEY + ["epoch"]], on=KEY + ["epoch"])["valid_tpr_gap"])
    out = tmp_path / "report"
    proc = run_main("report", str(run), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "figures" / "learning_curves.png").stat().st_size > 0
    html = whole_report(out, "html")
    assert "Learning curves" in html and 'src="../figures/learning_curves.png"' in html
    assert "figures/learning_curves.png" in whole_report(out)


def test_notion_gap_curves_read_each_configs_own_notion():
    from fairdp.analysis import selected_curves

    history = pd.DataFrame({"dataset": "d", "method": "pfld", "seed": 0, "config_id": ["a", "a", "b", "b"],
                            "epoch": [1, 2, 1, 2], "valid_accuracy": 80.0, "valid_loss": 0.5,
                            "valid_dp_gap": [1.0, 2.0, 3.0, 4.0], "valid_eo_gap": [5.0, 6.0, 7.0, 8.0],
                            "kept": [False, True, True, False]})
    picks = pd.DataFrame({"dataset": "d", "method": "pfld", "seed": 0, "config_id": ["a", "b"],
                          "fairness_notion": ["eo", None], "status": "ok"})
    curves = selected_curves(history, picks, "notion_gap")
    assert curves["valid_gap"].tolist() == [5.0, 6.0, 3.0, 4.0]
