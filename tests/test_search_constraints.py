"""Constrained searches: spec refusals, Optuna's constraint values, feasible-only fronts, the
hypervolume history per generation, and a search's hypervolume against a grid's."""

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from fairdp.analysis import search_vs_grid
from fairdp.analysis._search_progress import (
    EPS_FORMAL_WORST,
    hypervolume_bounds,
    hypervolume_history,
    normalised_hypervolume,
)
from fairdp.constraints import Constraint, feasible, parse_constraints, violations
from fairdp.errors import InputError
from fairdp.study import ResultStore, parse_spec
from tests.conftest import assert_input_error, run_cli, run_main

from .conftest import whole_report

BOUND = 4.0  # eps_formal <= BOUND: noise's eps_formal is its eps, searched over [1, 20]


def _study(sampler: str = "nsga2", constraints=(f"eps_formal <= {BOUND:g}",), **search) -> dict:
    return {
        "name": "constrained",
        "dataset": {"name": "synthetic", "rows": 600, "features": 6},
        "seeds": [0],
        "train": {"epochs": 1, "batch_size": 200},
        "evaluate": {"leakage": False, "mdl": False, "min_group_count": 1},
        "methods": {"noise": {}},
        "search": {"method": "noise", "sampler": sampler, "population": 4, "trials": 8, "seed": 0,
                   "objectives": {"valid_accuracy": "max", "valid_tpr_gap": "min"},
                   "space": {"eps": {"low": 1, "high": 20, "log": True}},
                   "constraints": list(constraints), **search},
    }


# -- the spec -----------------------------------------------------------------------------------

def test_constraints_parse_into_optuna_violations():
    spec = parse_spec(_study(constraints=["valid_accuracy >= 80", "eps_formal<=1.5"]))
    assert spec.search.constraints == (Constraint("valid_accuracy", ">=", 80.0), Constraint("eps_formal", "<=", 1.5))
    # Optuna's convention: <= 0 is feasible; a metric a row lacks is infinitely violated
    assert violations({"valid_accuracy": 85.0, "eps_formal": 2.0}, spec.search.constraints) == [-5.0, 0.5]
    assert violations({"valid_accuracy": float("nan")}, spec.search.constraints) == [float("inf")] * 2
    assert parse_spec(_study(constraints=())).search.constraints == ()


@pytest.mark.parametrize("constraints,message", [
    (["speed <= 3"], "search.constraints[0]: unknown metric 'speed'"),
    (["valid_accuracy >= 80", "eps_formal < 1"], "search.constraints[1]: operator must be <= or >="),
    (["eps_formal == 1"], "search.constraints[0]: operator must be <= or >="),
    (["valid_accuracy >= high"], "search.constraints[0]: bound must be a finite number"),
    (["valid_accuracy >= inf"], "search.constraints[0]: bound must be a finite number"),
    (["valid_accuracy"], "search.constraints[0]: expected '<metric> <= <number>'"),
    ([80], "search.constraints[0]: must be a string"),
    (["leakage <= 60"], "search.constraints[0]: evaluate.leakage is false"),
])
def test_bad_constraints_are_refused_naming_the_field(constraints, message):
    with pytest.raises(InputError) as e:
        parse_spec(_study(constraints=constraints))
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_constraints_mapping_is_refused():
    with pytest.raises(InputError, match=r"^search\.constraints: must be a list"):
        parse_spec({**_study(), "search": {**_study()["search"], "constraints": {"eps_formal": 1}}})


def test_the_cli_refuses_a_bad_constraint_with_status_2_and_writes_nothing(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump(_study(constraints=["valid_acc >= 80"])))
    proc = run_main("search", str(study), "--results", str(tmp_path / "r"))  # fairdp's main, in this process
    assert_input_error(proc, "search.constraints[0]", "valid_acc")
    assert not (tmp_path / "r").exists() and not list(tmp_path.glob("r.*"))


# -- pure functions ---------------------------------------------------------------------------

def test_feasible_treats_nan_and_missing_columns_as_infeasible():
    df = pd.DataFrame({"valid_accuracy": [90.0, 70.0, np.nan], "eps_formal": [1.0, 1.0, 1.0]})
    assert feasible(df, parse_constraints(["valid_accuracy >= 80"])).tolist() == [True, False, False]
    assert feasible(df, ["eps_formal <= 1", "valid_accuracy >= 60"]).tolist() == [True, True, False]
    assert feasible(df, ["leakage <= 50"]).tolist() == [False] * 3
    assert feasible(df, []).tolist() == [True] * 3


def test_the_reference_point_is_each_objectives_worst_value():
    worst, ideal = hypervolume_bounds({"valid_accuracy": "max", "valid_tpr_gap": "min", "eps_formal": "min"})
    assert worst == [0.0, 100.0, EPS_FORMAL_WORST] and ideal == [100.0, 0.0, 0.0]


OBJ = {"valid_accuracy": "max", "valid_tpr_gap": "min"}


def _hv2(points):
    """Hand-computed 2-D hypervolume (accuracy max from 0, gap min from 100), normalised by 100 x 100."""
    pts = sorted(points, key=lambda p: -p[0])  # best accuracy first
    area, best_gap = 0.0, 100.0
    for acc, gap in pts:
        if gap < best_gap:
            area += acc * (best_gap - gap)
            best_gap = gap
    return area / 1e4


def test_hypervolume_history_has_one_entry_per_generation_and_never_decreases():
    trials = pd.DataFrame({
        "valid_accuracy": [60.0, 70.0, 80.0, 50.0, 90.0, 85.0, 95.0, 40.0, 75.0],
        "valid_tpr_gap": [30.0, 20.0, 40.0, 10.0, 5.0, 50.0, 60.0, 1.0, 2.0],
        "feasible": [True, True, True, True, False, True, True, True, True],
    })
    history = hypervolume_history(trials, OBJ, every=4)
    assert history["trials"].tolist() == [4, 8, 9]
    assert history["feasible_trials"].tolist() == [4, 7, 8]
    assert (history["hypervolume"].diff().dropna() >= 0).all()
    # the infeasible (90, 5) never counts: it would dominate most of the front
    first = [(60, 30), (70, 20), (80, 40), (50, 10)]
    second = first + [(85, 50), (95, 60), (40, 1)]
    assert history["hypervolume"].tolist() == pytest.approx([_hv2(first), _hv2(second), _hv2(second + [(75, 2)])])
    assert history["front_size"].iloc[0] == 3  # (60, 30) is dominated by (70, 20)
    assert normalised_hypervolume(trials[trials["feasible"]].head(4), OBJ) == pytest.approx(_hv2(first))


def test_search_vs_grid_is_the_ratio_of_the_normalised_hypervolumes():
    history = pd.DataFrame({"trials": [2, 4], "hypervolume": [_hv2([(70, 20)]), _hv2([(70, 20), (80, 30)])]})
    grid = pd.DataFrame({
        "valid_accuracy": [70.0, 80.0, 90.0, 95.0, 60.0],
        "valid_tpr_gap": [20.0, 30.0, 40.0, 5.0, 50.0],
        "eps_formal": [1.0, 1.0, 1.0, 9.0, 1.0],  # the best grid point is infeasible
        "status": ["ok", "ok", "ok", "ok", "error"],
    })
    out = search_vs_grid(history, grid, OBJ, ["eps_formal <= 2"])
    # by hand, slicing along the gap: [40, 100) under accuracy 90, [30, 40) under 80, [20, 30) under 70
    grid_hv = (90 * 60 + 80 * 10 + 70 * 10) / 1e4
    assert _hv2([(70, 20), (80, 30), (90, 40)]) == pytest.approx(grid_hv)
    assert out["grid_configs"].tolist() == [4, 4]
    assert out["grid_hypervolume"].tolist() == pytest.approx([grid_hv] * 2)
    assert out["ratio"].tolist() == pytest.approx([(70 * 80) / 1e4 / grid_hv, (80 * 70 + 70 * 10) / 1e4 / grid_hv])
    assert out["ratio"].iloc[1] < 1
    assert search_vs_grid(history, grid, OBJ, ["eps_formal <= 0.5"])["ratio"].isna().all()


# -- a real search ----------------------------------------------------------------------------

def _journal_study(results):
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(results / "_optuna.journal")))
    return optuna.load_study(study_name="constrained-noise-seed0", storage=storage)


@pytest.fixture(scope="module", params=[("nsga2", "packed"), pytest.param(("tpe", "per-config"), marks=pytest.mark.slow)],
                ids=lambda p: p[1])
def searched(request, tmp_path_factory):
    """A constrained search of 8 trials: (its results dir, the process). The packed one runs
    locally through fairdp's main in this process (constraints are Optuna's and the store's, the
    same under either executor; packed searches on Ray: test_study_run.py), the per-config one
    on embedded Ray."""
    sampler, mode = request.param
    tmp_path = tmp_path_factory.mktemp(f"search-{sampler}")
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump(_study(sampler)))
    results = tmp_path / "r"
    if mode == "packed":
        return results, run_main("search", str(study), "--results", str(results), "--mode", mode, "--executor", "local")
    return results, run_cli("search", str(study), "--results", str(results), "--mode", mode)


def test_a_constrained_search_stores_infeasible_rows_and_fronts_only_feasible_ones(searched):
    results, proc = searched
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows, _ = ResultStore(results).read()
    # infeasible trials train and are stored like any other
    assert (rows["eps_formal"] > BOUND).any() and (rows["eps_formal"] <= BOUND).any(), rows["eps_formal"]
    # Optuna got each trial's violation (the trial's 'constraints' system attr, a list: what
    # both samplers, best_trials and optuna-dashboard read); <= 0 is feasible
    searched = _journal_study(results)
    complete = [t for t in searched.trials if t.state.name == "COMPLETE"]
    assert len(complete) == 8
    by_id = rows.set_index("config_id")
    for t in complete:
        eps = by_id.loc[t.user_attrs["config_id"], "eps_formal"]
        assert list(t.constraints.values()) == pytest.approx([eps - BOUND])
        assert t.system_attrs["constraints"] == pytest.approx([eps - BOUND])
        assert t.user_attrs["constraint_names"] == [f"eps_formal <= {BOUND:g}"]
    # the front: feasible rows only, the same trials as Optuna's best_trials (feasible by its rule)
    front = pd.read_parquet(f"{results}.pareto-noise-seed0.parquet")
    assert len(front) and front["feasible"].all() and (front["eps_formal"] <= BOUND).all()
    assert set(front["config_id"]) == {t.user_attrs["config_id"] for t in searched.best_trials}
    # one hypervolume per generation of 4 trials, never decreasing, self-describing
    history = pd.read_parquet(f"{results}.hypervolume-noise-seed0.parquet")
    assert history["trials"].tolist() == [4, 8]
    assert (history["hypervolume"].diff().dropna() >= 0).all() and history["hypervolume"].iloc[-1] > 0
    assert json.loads(history["constraints"].iloc[0]) == [f"eps_formal <= {BOUND:g}"]
    assert history["feasible_trials"].iloc[-1] == sum(max(t.constraints.values()) <= 0 for t in complete)
    assert "feasible" in proc.stdout and "hypervolume" in proc.stdout


def test_the_report_draws_the_history_against_a_grid_of_the_same_method(searched, tmp_path):
    from fairdp.cli import main

    results, proc = searched
    assert proc.returncode == 0, proc.stderr[-3000:]
    grid_study = tmp_path / "grid.yaml"
    grid_study.write_text(yaml.safe_dump({**_study(), "methods": {"noise": {"grid": {"eps": [1, 2, 3, 8, 16]}}}}))
    grid = tmp_path / "grid"
    assert run_main("run", str(grid_study), "--results", str(grid), "--executor", "local").returncode == 0
    out = tmp_path / "report"
    assert main(["report", str(results), "-o", str(out), "--compare-grid", str(grid), "--no-ci"]) == 0
    md = whole_report(out)
    assert "## Search progress" in md and "figures/hypervolume_history.png" in md
    assert (out / "figures" / "hypervolume_history.png").stat().st_size > 0
    # the ratio in the report is search_vs_grid over the files
    history = pd.read_parquet(f"{results}.hypervolume-noise-seed0.parquet")
    grid_rows, _ = ResultStore(grid).read()
    expected = search_vs_grid(history, grid_rows, OBJ, [f"eps_formal <= {BOUND:g}"])
    assert expected["grid_configs"].iloc[0] == 5 and expected["ratio"].notna().all()
    last = [ln for ln in md.splitlines() if ln.startswith("| synthetic") and "eps_formal <= 4" in ln][-1]
    assert f"| {expected['ratio'].iloc[-1]:.3f} |" in last
    assert "(dashed: the grid's front)" in md
    # without a grid nothing is dashed, and the caption says nothing of it; a search has no plan,
    # and the report does not advise writing one
    alone = tmp_path / "alone"
    assert main(["report", str(results), "-o", str(alone), "--no-ci"]) == 0
    md = whole_report(alone)
    assert "## Search progress" in md and "dashed" not in md.split("## Search progress")[1].split("\n## ")[0]
    assert "fairdp run writes" not in md and "a search's trials" in md
    # a report without a search history refuses --compare-grid
    assert main(["report", str(grid), "-o", str(tmp_path / "r2"), "--compare-grid", str(grid)]) == 2
