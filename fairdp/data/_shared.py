"""The names fairdp.data shares with the rest of fairdp: not public API (that is
``fairdp.data.__all__``). The CLI and fairdp.study import them from here, the one private module
of fairdp.data that other parts of fairdp may import (tests/test_layers.py)."""

from fairdp.data._cache import data_dir
from fairdp.data._dataset import check_fits_memory, subsample
from fairdp.data._fetch import fetch
from fairdp.data._registry import get_entry

__all__ = ["check_fits_memory", "data_dir", "fetch", "get_entry", "subsample"]
