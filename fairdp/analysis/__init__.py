"""Analysis of result rows: RT selection, seed aggregation, binning, Pareto fronts; tables, plots, report.

Pure functions over pandas DataFrames of result rows (docs/results-schema.md); only rows
with status "ok" count. The plot and report writers are the only functions that write
files, and only into the path or folder they are given.
"""

from fairdp.analysis._compare import compare_picks, identical_configs, paired_tests, precisions
from fairdp.analysis._completeness import Completeness, completeness, summarise
from fairdp.analysis._curves import selected_curves
from fairdp.analysis._error_bars import ERROR_BARS, bootstrap_over_seeds, per_seed
from fairdp.analysis._groups import aggregate_group_rates, per_group_rates
from fairdp.analysis._intervals import (
    bootstrap_intervals,
    check_level,
    seed_intervals,
    selected_with_intervals,
    supported_differences,
)
from fairdp.analysis._papers import get_paper
from fairdp.analysis._pareto import (
    constrained_select,
    dto_minmax_select,
    dto_select,
    hypervolume,
    pareto_front,
    select_per_run,
)
from fairdp.analysis._predictions import (
    constant_models,
    mark_constant_picks,
    positive_rates,
    with_constant_picks,
)
from fairdp.analysis._release import has_release_events, released_guarantees
from fairdp.analysis._rows import FAIRNESS_METRICS, check_rt
from fairdp.analysis._search_progress import (
    hypervolume_history,
    normalised_hypervolume,
    search_progress,
    search_vs_grid,
)
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
from fairdp.analysis._tables import format_table, render_table, sweep_tables

__all__ = [
    "compare_picks",
    "identical_configs",
    "paired_tests",
    "precisions",
    "Completeness",
    "completeness",
    "summarise",
    "aggregate_group_rates",
    "bootstrap_intervals",
    "constant_models",
    "mark_constant_picks",
    "per_group_rates",
    "with_constant_picks",
    "check_level",
    "check_rt",
    "get_paper",
    "has_release_events",
    "released_guarantees",
    "selected_with_intervals",
    "seed_intervals",
    "supported_differences",
    "FAIRNESS_METRICS",
    "aggregate_seeds",
    "constrained_select",
    "default_direction",
    "dto_minmax_select",
    "dto_select",
    "fairness_accuracy_bins",
    "figure_fairness_accuracy_bins",
    "figure_hypervolume_history",
    "hypervolume_history",
    "normalised_hypervolume",
    "plot_hypervolume_history",
    "search_progress",
    "search_vs_grid",
    "figure_leakage_vs_eps",
    "figure_pareto_fronts",
    "figure_privacy_accuracy",
    "figure_rt_sweep",
    "format_table",
    "hypervolume",
    "legend_labels",
    "pareto_front",
    "plot_fairness_accuracy_bins",
    "plot_leakage_vs_eps",
    "plot_pareto_fronts",
    "plot_privacy_accuracy",
    "plot_violation_accuracy_by_eps",
    "figure_violation_accuracy_by_eps",
    "plot_rt_sweep",
    "per_notion",
    "positive_rates",
    "privacy_accuracy_by_eps",
    "render_table",
    "rt_sweep",
    "sweep_tables",
    "select_by_rt",
    "select_per_run",
    "selected_configs",
    "selected_curves",
    "figure_learning_curves",
    "plot_learning_curves",
    "violation_accuracy_by_eps",
    "write_report",
    "report_figures",
    "ERROR_BARS",
    "bootstrap_over_seeds",
    "per_seed",
]

# Figures are matplotlib's: imported on first use, so that selecting and aggregating rows
# loads without it.
_PLOTS = ("default_direction", "figure_fairness_accuracy_bins", "figure_hypervolume_history", "figure_leakage_vs_eps", "figure_learning_curves", "figure_pareto_fronts", "figure_privacy_accuracy", "figure_rt_sweep", "figure_violation_accuracy_by_eps", "legend_labels", "plot_fairness_accuracy_bins", "plot_hypervolume_history", "plot_leakage_vs_eps", "plot_learning_curves", "plot_pareto_fronts", "plot_privacy_accuracy", "plot_rt_sweep", "plot_violation_accuracy_by_eps")


def __getattr__(name: str):
    if name in _PLOTS:
        from fairdp.analysis import _plots  # matplotlib: only when a figure is drawn

        return getattr(_plots, name)
    if name in ("write_report", "report_figures"):
        from fairdp.analysis import _report  # draws figures: matplotlib

        return getattr(_report, name)
    raise AttributeError(f"module 'fairdp.analysis' has no attribute {name!r}")
