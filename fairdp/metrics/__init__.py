"""Metrics: fairness gaps (percent), Leakage and MDL probes, and a pack's result columns."""

from fairdp.fairness import (
    accuracy,
    ap_gap,
    dp_gap,
    eo_gap,
    grms,
    group_rates,
    macro_f1,
    tpr_gap,
)
from fairdp.metrics._evaluate import evaluate_pack
from fairdp.metrics._probes import FEDERATE_PROBE, ProbeSettings, leakage, mdl

__all__ = [
    # user API (docs/api/metrics.md)
    "accuracy", "ap_gap", "dp_gap", "eo_gap", "grms", "group_rates", "macro_f1", "tpr_gap",
    "FEDERATE_PROBE", "ProbeSettings", "leakage", "mdl", "evaluate_pack",
]
