"""Privacy: local DP mechanisms for encoded representations, RDP accounting, guarantees.

``laplace_privatize`` is the sound mechanism (FEDERATE eq. 3, eps-LDP per row, its noise the
exact grid discrete Laplace of ``_discrete``, whose eps is computed from the tables it samples);
``minmax_privatize`` reproduces DPNR/CAPE as published, whose true budget is
``minmax_true_epsilon`` = D * eps; ``word_dropout`` and ``word_dropout_epsilon`` are DPNR's
word-level amplification. ``composed_epsilon`` and ``repeat_and_select_epsilon`` bound what
releasing a study's selection costs, tuning included (``_release``). ``convert_guarantee`` and
``comparison_groups`` put guarantees of different kinds in one neighbouring relation before
they are compared, or apart where none is sound (``_guarantee``).
"""

from fairdp.privacy._accounting import (
    adaptive_clipping_epsilon,
    adaptive_clipping_event,
    calibrate_adaptive_clipping_sigmas,
    calibrate_dp_fermi_sigmas,
    calibrate_dpsgd_sigma,
    calibrate_pfld_sigmas,
    dp_fermi_epsilon,
    dp_fermi_event,
    dpsgd_epsilon,
    dpsgd_event,
    gaussian_epsilon,
    joint_noise_multiplier,
    pfld_epsilon,
    pfld_event,
)
from fairdp.privacy._guarantee import NOT_PRIVATE, Guarantee, comparison_groups, convert_guarantee
from fairdp.privacy._release import composed_epsilon, event_from_json, repeat_and_select_epsilon

__all__ = [
    # user API (docs/api/privacy.md): what releasing a study's selection costs
    "composed_epsilon", "event_from_json", "repeat_and_select_epsilon",
    # user API (docs/api/privacy.md): guarantees of different kinds in one relation, or apart
    "convert_guarantee", "comparison_groups",
    # method-author API (docs/api/privacy.md): guarantees, mechanisms and accountants
    "Guarantee", "NOT_PRIVATE",
    "check_eps", "l1_normalize", "laplace_privatize", "minmax_normalize", "minmax_privatize",
    "minmax_true_epsilon", "word_dropout", "word_dropout_epsilon",
    "calibrate_dpsgd_sigma", "calibrate_pfld_sigmas", "dpsgd_epsilon", "dpsgd_event", "gaussian_epsilon",
    "pfld_epsilon", "pfld_event",
    "adaptive_clipping_epsilon", "adaptive_clipping_event", "calibrate_adaptive_clipping_sigmas",
    "joint_noise_multiplier",
    "calibrate_dp_fermi_sigmas", "dp_fermi_epsilon", "dp_fermi_event",
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
