"""Datasets: one :class:`Dataset` type, fetched tabular data, user-supplied encodings, synthetic data."""

from fairdp.data import _encoded, _synthetic, _tabular, _text  # noqa: F401  (registers loaders)
from fairdp.data._cache import data_dir
from fairdp.data._dataset import SPLITS, Dataset, Split, check_fits_memory
from fairdp.data._fetch import fetch
from fairdp.data._registry import dataset_names, get_entry, load_dataset
from fairdp.data._registry import register as register_dataset
from fairdp.data._splits import stratified_split

__all__ = [
    "SPLITS",
    "Dataset",
    "Split",
    "check_fits_memory",
    "data_dir",
    "dataset_names",
    "fetch",
    "get_entry",
    "load_dataset",
    "register_dataset",
    "stratified_split",
]
