"""The names fairdp.tracking shares with the rest of fairdp: not public API (that is
``fairdp.tracking.__all__``). fairdp.study imports them from here, the one private module of
fairdp.tracking that other parts of fairdp may import (tests/test_layers.py)."""

from fairdp.tracking._base import TrackingSpec, parse_tracking
from fairdp.tracking._sync import TrackingSync

__all__ = ["parse_tracking", "TrackingSpec", "TrackingSync"]
