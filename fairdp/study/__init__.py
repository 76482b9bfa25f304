"""Studies: spec files, grids into packs, the pack trial, Ray Tune execution, Optuna search,
the Parquet store.

Each name is imported on first use, so that reading stored rows (``read_results``, what the
analysis commands do) loads neither torch nor Ray.
"""

from __future__ import annotations

import typing

from fairdp._lazy import lazy_names as _lazy_names

if typing.TYPE_CHECKING:  # what the lazy names are, for type checkers and the API pages' generator
    from fairdp.study.run._plan import plan_table
    from fairdp.study.run._runner import RunSummary, run_study
    from fairdp.study.search._search import SearchSummary, search_study
    from fairdp.study.spec._spec import StudySpec, load_spec, parse_spec
    from fairdp.study.store._compact import Compaction, compact
    from fairdp.study.store._plans import read_plans
    from fairdp.study.store._predictions import read_predictions, stored_predictions
    from fairdp.study.store._selection import (
        StoredSelection,
        choose_selection,
        read_selection,
        read_selections,
    )
    from fairdp.study.store._store import (
        ResultStore,
        read_history,
        read_hypervolume_histories,
        read_results,
        study_columns,
    )

# name -> the module that defines it
_EXPORTS = {
    "plan_table": "fairdp.study.run._plan", "read_plans": "fairdp.study.store._plans",
    "RunSummary": "fairdp.study.run._runner", "run_study": "fairdp.study.run._runner",
    "SearchSummary": "fairdp.study.search._search", "read_hypervolume_histories": "fairdp.study.store._store",
    "search_study": "fairdp.study.search._search",
    "StudySpec": "fairdp.study.spec._spec", "load_spec": "fairdp.study.spec._spec",
    "parse_spec": "fairdp.study.spec._spec",
    "read_predictions": "fairdp.study.store._predictions", "stored_predictions": "fairdp.study.store._predictions",
    "StoredSelection": "fairdp.study.store._selection", "choose_selection": "fairdp.study.store._selection",
    "read_selection": "fairdp.study.store._selection", "read_selections": "fairdp.study.store._selection",
    "ResultStore": "fairdp.study.store._store", "read_history": "fairdp.study.store._store",
    "read_results": "fairdp.study.store._store", "study_columns": "fairdp.study.store._store",
    "Compaction": "fairdp.study.store._compact", "compact": "fairdp.study.store._compact",
}

__all__ = [
    # user API (docs/api/index.md, docs/api/study.md); the executor author's is the module
    # fairdp.study.executors (docs/api/executors.md)
    "load_spec", "parse_spec", "StudySpec", "run_study", "RunSummary", "search_study", "SearchSummary",
    "read_results", "read_history", "read_plans", "plan_table", "read_hypervolume_histories",
    "ResultStore", "study_columns", "StoredSelection", "choose_selection", "read_selection", "read_selections",
    "read_predictions", "stored_predictions", "compact", "Compaction",
]


__getattr__, __dir__ = _lazy_names(__name__, _EXPORTS)
