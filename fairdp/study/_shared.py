"""The names fairdp.study shares with the rest of fairdp: not public API (that is
``fairdp.study.__all__``). The CLI imports them from here, the one private module of fairdp.study
that other parts of fairdp may import (tests/test_layers.py)."""

from fairdp.study._context import load_study_data
from fairdp.study.executors._executors import DEFAULT_EXECUTOR
from fairdp.study.run._runner import with_overrides
from fairdp.study.spec._spec import check_models, study_modules
from fairdp.study.store._selection import selection_text

__all__ = [
    "check_models", "DEFAULT_EXECUTOR", "load_study_data", "selection_text", "study_modules",
    "with_overrides",
]
