"""Studies: spec files, grids into packs, Ray Tune execution, Optuna search, the Parquet store."""

from fairdp.study._plan import Pack, auto_pack_size, plan_packs
from fairdp.study._ray import keep_ray_on_loopback, ray_session
from fairdp.study._runner import RunSummary, default_results, run_study, with_overrides
from fairdp.study._spec import OBJECTIVES, SearchSpec, StudySpec, load_spec, parse_spec
from fairdp.study._store import COLUMNS, ResultStore, read_results

__all__ = [
    "COLUMNS", "OBJECTIVES", "Pack", "ResultStore", "RunSummary", "SearchSpec", "StudySpec", "auto_pack_size",
    "default_results", "keep_ray_on_loopback", "load_spec", "parse_spec", "plan_packs", "ray_session",
    "read_results", "run_study", "with_overrides",
]
