"""The names fairdp.privacy shares with the rest of fairdp: not public API (that is
``fairdp.privacy.__all__``). fairdp's methods, analysis and study import them from here, the one
private module of fairdp.privacy that other parts of fairdp may import (tests/test_layers.py)."""

from fairdp.privacy._accounting import ACCOUNTANTS, PFLD_DELTA
from fairdp.privacy._discrete import LARGEST_L1_EPS, LARGEST_SCALE_EPS
from fairdp.privacy._guarantee import (
    ADD_REMOVE_RECORD,
    KIND_CAVEATS,
    LOCAL_ATTRIBUTE,
    LOCAL_REPRESENTATION,
    REPLACE_ATTRIBUTE,
    REPLACE_RECORD,
    conversion_reasons,
    guarantee_kind,
)
from fairdp.privacy._release import (
    COUNTS,
    TrialCount,
    epsilon_of_rdp,
    event_to_json,
    rdp_curve,
    repeat_and_select_rdp,
    trial_count_from_dict,
)
from fairdp.privacy._selection import (
    PrivateSelection,
    count_cells,
    count_release_event,
    count_sigma,
    discrete_gaussian,
)

__all__ = [
    "ACCOUNTANTS", "ADD_REMOVE_RECORD", "conversion_reasons", "count_cells", "count_release_event", "count_sigma",
    "COUNTS", "discrete_gaussian", "epsilon_of_rdp", "event_to_json", "rdp_curve",
    "guarantee_kind", "KIND_CAVEATS", "LARGEST_L1_EPS", "LARGEST_SCALE_EPS", "LOCAL_ATTRIBUTE",
    "LOCAL_REPRESENTATION", "PFLD_DELTA", "PrivateSelection", "repeat_and_select_rdp", "REPLACE_ATTRIBUTE", "REPLACE_RECORD",
    "trial_count_from_dict", "TrialCount",
]
