"""Metrics: fairness gaps (percent), Leakage and MDL probes, and a pack's result columns."""

import typing

from fairdp._lazy import lazy_names as _lazy_names
from fairdp.fairness import (
    accuracy,
    ap_gap,
    dp_gap,
    eo_gap,
    grms,
    group_rates,
    macro_f1,
    small_groups,
    tpr_gap,
)
from fairdp.metrics._probe_settings import FEDERATE_PROBE, ProbeSettings

if typing.TYPE_CHECKING:  # what the lazy names are, for type checkers and the API pages' generator
    from fairdp.metrics._evaluate import evaluate_pack
    from fairdp.metrics._probes import leakage, mdl

__all__ = [
    # user API (docs/api/metrics.md)
    "accuracy", "ap_gap", "dp_gap", "eo_gap", "grms", "group_rates", "macro_f1", "small_groups", "tpr_gap",
    "FEDERATE_PROBE", "ProbeSettings", "leakage", "mdl", "evaluate_pack",
]

# The probes and a pack's evaluation are torch code: imported on first use, so that describing
# stored rows' probes (``ProbeSettings``) loads without torch.
_TORCH = {"evaluate_pack": "fairdp.metrics._evaluate", "leakage": "fairdp.metrics._probes", "mdl": "fairdp.metrics._probes"}
__getattr__, __dir__ = _lazy_names(__name__, _TORCH)
