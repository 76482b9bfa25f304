"""Studies: spec files, grids into packs, the pack trial, Ray Tune execution, Optuna search,
the Parquet store."""

from fairdp.study._context import StudyContext
from fairdp.study._executors import (
    DEFAULT_EXECUTOR,
    EXECUTORS,
    Executor,
    make_executor,
    register_executor,
)
from fairdp.study._plan import Backlog, Pack, auto_pack_size, plan_packs, plan_table, read_plans
from fairdp.study._precision import PrecisionChoice, choose_precision, stored_precision
from fairdp.study._ray import keep_ray_on_loopback, ray_session
from fairdp.study._runner import RunSummary, default_results, run_study, with_overrides
from fairdp.study._search import SearchSummary, read_hypervolume_histories, search_study
from fairdp.study._selection import (
    ChosenSelection,
    SearchSelection,
    StoredSelection,
    choose_selection,
    read_selection,
    read_selections,
    selection_text,
    write_selection,
)
from fairdp.study._spec import SearchSpec, StudySpec, load_spec, parse_spec
from fairdp.study._store import ResultStore, read_history, read_results, study_columns
from fairdp.study._worker import pack_rows, run_pack

__all__ = [
    "DEFAULT_EXECUTOR", "EXECUTORS", "Backlog", "Executor", "make_executor", "register_executor",
    "Pack", "PrecisionChoice", "ResultStore", "RunSummary", "SearchSpec", "SearchSummary", "StudyContext", "StudySpec",
    "auto_pack_size", "choose_precision", "default_results", "keep_ray_on_loopback", "load_spec", "pack_rows", "parse_spec",
    "plan_packs", "plan_table", "ray_session", "read_history", "read_hypervolume_histories", "read_plans", "read_results", "run_pack", "run_study", "search_study", "stored_precision",
    "study_columns", "with_overrides",
    "ChosenSelection", "SearchSelection", "StoredSelection", "choose_selection", "read_selection", "read_selections",
    "selection_text", "write_selection",
]
