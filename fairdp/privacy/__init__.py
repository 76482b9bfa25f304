"""Privacy: local DP mechanisms for encoded representations, RDP accounting, guarantees.

``laplace_privatize`` is the sound mechanism (FEDERATE eq. 3, eps-LDP per row, its noise the
exact grid discrete Laplace of ``_discrete``, whose eps is computed from the tables it samples);
``minmax_privatize`` reproduces DPNR/CAPE as published, whose true budget is
``minmax_true_epsilon`` = D * eps; ``word_dropout`` and ``word_dropout_epsilon`` are DPNR's
word-level amplification. ``composed_epsilon`` and ``repeat_and_select_epsilon`` bound what
releasing a study's selection costs, tuning included (``_release``).
"""

from fairdp.privacy._accounting import (
    PFLD_CLIP_DUAL,
    PFLD_CLIP_PRIMAL,
    PFLD_DELTA,
    PFLD_EPSILON,
    calibrate_dpsgd_sigma,
    calibrate_pfld_sigmas,
    dpsgd_epsilon,
    dpsgd_event,
    gaussian_epsilon,
    pfld_epsilon,
    pfld_event,
)
from fairdp.privacy._discrete import LARGEST_L1_EPS, LARGEST_SCALE_EPS
from fairdp.privacy._guarantee import NOT_PRIVATE, Guarantee, guarantee_kind
from fairdp.privacy._release import (
    COUNTS,
    TrialCount,
    composed_epsilon,
    epsilon_of_rdp,
    event_from_json,
    event_to_json,
    repeat_and_select_epsilon,
    repeat_and_select_rdp,
    trial_count_from_dict,
)

__all__ = [
    "LARGEST_L1_EPS",
    "LARGEST_SCALE_EPS",
    "NOT_PRIVATE",
    "Guarantee",
    "guarantee_kind",
    "PFLD_CLIP_DUAL",
    "PFLD_CLIP_PRIMAL",
    "PFLD_DELTA",
    "PFLD_EPSILON",
    "calibrate_dpsgd_sigma",
    "calibrate_pfld_sigmas",
    "dpsgd_epsilon",
    "dpsgd_event",
    "gaussian_epsilon",
    "pfld_epsilon",
    "pfld_event",
    "COUNTS",
    "TrialCount",
    "composed_epsilon",
    "epsilon_of_rdp",
    "event_from_json",
    "event_to_json",
    "repeat_and_select_epsilon",
    "repeat_and_select_rdp",
    "trial_count_from_dict",
    "check_eps",
    "l1_normalize",
    "laplace_privatize",
    "minmax_normalize",
    "minmax_privatize",
    "minmax_true_epsilon",
    "word_dropout",
    "word_dropout_epsilon",
]

# The mechanisms are torch code: imported on first use, so that accounting (what the analysis
# of stored rows needs) loads without torch.
_MECHANISMS = ("check_eps", "l1_normalize", "laplace_privatize", "minmax_normalize", "minmax_privatize",
               "minmax_true_epsilon", "word_dropout", "word_dropout_epsilon")


def __getattr__(name: str):
    if name in _MECHANISMS:
        from fairdp.privacy import _mechanisms  # torch: only when a mechanism is used

        return getattr(_mechanisms, name)
    raise AttributeError(f"module 'fairdp.privacy' has no attribute {name!r}")
