"""The names fairdp.methods shares with the rest of fairdp: not public API (that is
``fairdp.methods.__all__``). fairdp.study and the CLI import them from here, the one private
module of fairdp.methods that other parts of fairdp may import (tests/test_layers.py)."""

from fairdp.methods._base import arange_grid, range_count
from fairdp.methods._describe import describe_method

__all__ = ["arange_grid", "describe_method", "range_count"]
