"""Privacy: local DP mechanisms for encoded representations, RDP accounting, guarantees.

``laplace_privatize`` is the sound mechanism (FEDERATE eq. 3, eps-LDP per row);
``minmax_privatize`` reproduces DPNR/CAPE as published, whose true budget is
``minmax_true_epsilon`` = D * eps; ``word_dropout`` and ``word_dropout_epsilon`` are DPNR's
word-level amplification.
"""

from fairdp.privacy._accounting import (
    PFLD_CLIP_DUAL,
    PFLD_CLIP_PRIMAL,
    PFLD_DELTA,
    PFLD_EPSILON,
    calibrate_dpsgd_sigma,
    calibrate_pfld_sigmas,
    dpsgd_epsilon,
    gaussian_epsilon,
    pfld_epsilon,
)
from fairdp.privacy._guarantee import NOT_PRIVATE, Guarantee
from fairdp.privacy._mechanisms import (
    l1_normalize,
    laplace_privatize,
    minmax_normalize,
    minmax_privatize,
    minmax_true_epsilon,
    word_dropout,
    word_dropout_epsilon,
)

__all__ = [
    "NOT_PRIVATE",
    "Guarantee",
    "PFLD_CLIP_DUAL",
    "PFLD_CLIP_PRIMAL",
    "PFLD_DELTA",
    "PFLD_EPSILON",
    "calibrate_dpsgd_sigma",
    "calibrate_pfld_sigmas",
    "dpsgd_epsilon",
    "gaussian_epsilon",
    "pfld_epsilon",
    "l1_normalize",
    "laplace_privatize",
    "minmax_normalize",
    "minmax_privatize",
    "minmax_true_epsilon",
    "word_dropout",
    "word_dropout_epsilon",
]
