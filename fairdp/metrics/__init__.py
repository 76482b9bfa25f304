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
from fairdp.metrics._probes import (
    FEDERATE_PROBE,
    MDL_BLOCKS,
    ProbeSettings,
    leakage,
    mdl,
    online_code,
    uniform_codelength,
)

__all__ = [
    "FEDERATE_PROBE",
    "MDL_BLOCKS",
    "ProbeSettings",
    "accuracy",
    "ap_gap",
    "dp_gap",
    "eo_gap",
    "evaluate_pack",
    "grms",
    "group_rates",
    "leakage",
    "macro_f1",
    "mdl",
    "online_code",
    "tpr_gap",
    "uniform_codelength",
]
