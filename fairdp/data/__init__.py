"""Datasets: one :class:`Dataset` type, fetched tabular data, user-supplied encodings, synthetic data."""

from fairdp.data import _census, _digits, _encoded, _synthetic, _tabular, _text  # noqa: F401  (registers loaders)
from fairdp.data._dataset import SPLITS, Dataset, Split
from fairdp.data._registry import dataset_names, load_dataset
from fairdp.data._registry import register as register_dataset
from fairdp.data._splits import stratified_split

__all__ = [
    # user API (docs/api/data.md); register_dataset, SPLITS and stratified_split make a loader
    "Dataset", "dataset_names", "load_dataset", "register_dataset", "SPLITS", "stratified_split",
    # method-author API: what ``Dataset.split`` gives a method's ``fit``
    "Split",
]
