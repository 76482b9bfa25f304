"""Analysis of result rows: RT selection, seed aggregation, binning, Pareto fronts; tables, plots, report.

Pure functions over pandas DataFrames of result rows (docs/results-schema.md); only rows
with status "ok" count. The plot and report writers are the only functions that write
files, and only into the path or folder they are given.
"""

from fairdp.analysis._compare import (
    compare_picks,
    detectable_difference,
    device_differences,
    paired_tests,
    protocol_differences,
)
from fairdp.analysis._completeness import Completeness, completeness, summarise
from fairdp.analysis._curves import selected_curves
from fairdp.analysis._error_bars import ERROR_BARS, bootstrap_over_seeds, error_bars_text, per_seed
from fairdp.analysis._groups import aggregate_group_rates, groups_too_small, per_group_rates
from fairdp.analysis._intervals import bootstrap_intervals, seed_intervals, supported_differences
from fairdp.analysis._papers import get_paper
from fairdp.analysis._pareto import (
    constrained_select,
    dto_minmax_select,
    dto_select,
    hypervolume,
    pareto_front,
    select_per_run,
)
from fairdp.analysis._predictions import constant_models, mark_constant_picks, with_constant_picks
from fairdp.analysis._private import PrivateSelection, private_pick_cost, private_valid_metrics
from fairdp.analysis._release import released_guarantees, whole_table_release
from fairdp.analysis._rows import default_direction
from fairdp.analysis._search_progress import search_progress, search_vs_grid
from fairdp.analysis._select import (
    aggregate_seeds,
    fairness_accuracy_bins,
    per_notion,
    privacy_accuracy_by_eps,
    rt_sweep,
    select_by_rt,
    selected_configs,
    violation_accuracy_by_eps,
)
from fairdp.analysis._tables import format_table, sweep_tables

__all__ = [
    # user API (docs/api/index.md, docs/api/analysis.md)
    # selection and aggregation
    "select_by_rt", "aggregate_seeds", "per_notion", "selected_configs", "rt_sweep", "fairness_accuracy_bins",
    "privacy_accuracy_by_eps", "violation_accuracy_by_eps", "selected_curves",
    "pareto_front", "hypervolume", "constrained_select", "dto_select", "dto_minmax_select",
    "select_per_run",
    "aggregate_group_rates", "groups_too_small", "per_group_rates", "constant_models", "mark_constant_picks", "with_constant_picks",
    "bootstrap_intervals", "seed_intervals", "supported_differences", "compare_picks", "paired_tests", "protocol_differences", "device_differences",
    "detectable_difference",
    "completeness", "summarise", "Completeness", "released_guarantees", "whole_table_release",
    "PrivateSelection", "private_valid_metrics", "private_pick_cost",
    "search_progress", "search_vs_grid",
    "get_paper", "format_table", "sweep_tables",
    # figures (matplotlib, imported on first use) and their error bars
    "default_direction", "legend_labels",
    "figure_fairness_accuracy_bins", "figure_hypervolume_history", "figure_leakage_vs_eps",
    "figure_learning_curves", "figure_pareto_fronts", "figure_privacy_accuracy", "figure_rt_sweep",
    "figure_violation_accuracy_by_eps", "save_figure",
    "ERROR_BARS", "bootstrap_over_seeds", "error_bars_text", "per_seed",
    # the report
    "write_report", "report_figures", "ReportOptions",
]


# Figures are matplotlib's: imported on first use, so that selecting and aggregating rows
# loads without it.
_PLOTS = ("figure_fairness_accuracy_bins", "figure_hypervolume_history", "figure_leakage_vs_eps", "figure_learning_curves", "figure_pareto_fronts", "figure_privacy_accuracy", "figure_rt_sweep", "figure_violation_accuracy_by_eps", "legend_labels", "save_figure")


def __getattr__(name: str):
    if name in _PLOTS:
        from fairdp.analysis import _plots  # matplotlib: only when a figure is drawn

        return getattr(_plots, name)
    if name in ("write_report", "report_figures", "ReportOptions"):
        from fairdp.analysis import _report  # draws figures: matplotlib

        return getattr(_report, name)
    raise AttributeError(f"module 'fairdp.analysis' has no attribute {name!r}")
