"""The names fairdp.analysis shares with the rest of fairdp: not public API (that is
``fairdp.analysis.__all__``). The CLI and fairdp.study import them from here, the one private
module of fairdp.analysis that other parts of fairdp may import (tests/test_layers.py)."""

from fairdp.analysis._compare import CODE_SETTING, describe_devices, identical_configs, precisions
from fairdp.analysis._dashboard import HOST, DashboardServer, prepare_dashboard
from fairdp.analysis._intervals import check_level, seed_advice_text
from fairdp.analysis._release import has_release_events
from fairdp.analysis._rows import check_rt
from fairdp.analysis._search_progress import hypervolume_history
from fairdp.analysis._tables import render_table, selected_with_intervals

# The report's names draw figures with matplotlib: imported on first use, as fairdp.analysis does.
_REPORT = ("FIGURES", "check_figure_formats", "figure_style_context")

__all__ = [
    "check_level", "check_rt", "CODE_SETTING", "DashboardServer", "describe_devices", "has_release_events",
    "HOST", "hypervolume_history", "identical_configs", "precisions", "prepare_dashboard", "render_table",
    "seed_advice_text", "selected_with_intervals",
    *_REPORT,
]


def __getattr__(name: str):
    if name in _REPORT:
        from fairdp.analysis import _report  # matplotlib: only when a report is written

        return getattr(_report, name)
    raise AttributeError(f"module 'fairdp.analysis._shared' has no attribute {name!r}")
