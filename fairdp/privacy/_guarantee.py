"""The (eps, delta) guarantee a method reports for each config it trains."""

from __future__ import annotations

import math
from typing import NamedTuple


class Guarantee(NamedTuple):
    """(eps, delta)-differential privacy; ``NOT_PRIVATE`` = (inf, 0) for methods without any."""

    eps: float
    delta: float


NOT_PRIVATE = Guarantee(math.inf, 0.0)
