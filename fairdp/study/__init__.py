"""Studies: spec files, grids into packs, the pack trial, Ray Tune execution, Optuna search,
the Parquet store."""

from fairdp.study.run._plan import plan_table, read_plans
from fairdp.study.run._runner import RunSummary, run_study
from fairdp.study.search._search import SearchSummary, read_hypervolume_histories, search_study
from fairdp.study.spec._spec import StudySpec, load_spec, parse_spec
from fairdp.study.store._predictions import read_predictions, stored_predictions
from fairdp.study.store._selection import (
    StoredSelection,
    choose_selection,
    read_selection,
    read_selections,
)
from fairdp.study.store._store import ResultStore, read_history, read_results, study_columns

__all__ = [
    # user API (docs/api/index.md, docs/api/study.md); the executor author's is the module
    # fairdp.study.executors (docs/api/executors.md)
    "load_spec", "parse_spec", "StudySpec", "run_study", "RunSummary", "search_study", "SearchSummary",
    "read_results", "read_history", "read_plans", "plan_table", "read_hypervolume_histories",
    "ResultStore", "study_columns", "StoredSelection", "choose_selection", "read_selection", "read_selections",
    "read_predictions", "stored_predictions",
]
