"""scikit-learn's 8x8 handwritten digits as a fairness teaching set: a small image dataset that
ships with a package, so a study over a convolutional network runs anywhere, offline.

It is no benchmark of the papers: the protected attribute is derived from the images
themselves (whether a digit's ink sits right of centre), so it is a property of the writing,
correlated with which digit it is (the label's correlation with it is -0.33), and a probe
reads it from the pixels almost exactly. That makes the label-attribute dependence and the
leakage easy to see, which is what it is for.
"""

from __future__ import annotations

import numpy as np

from fairdp.data._dataset import INT64_MAX, Dataset
from fairdp.data._encoded import int_option
from fairdp.data._registry import register
from fairdp.data._splits import stratified_split
from fairdp.errors import InputError


@register(
    "digits",
    kind="packaged",
    description="scikit-learn's 1,797 8x8 handwritten digits: label even digit, attribute ink right of "
    "centre (a teaching set for image models)",
)
def load_digits(split_seed: int = 0) -> Dataset:
    """1,797 images of 8 x 8 pixels (``sklearn.datasets.load_digits``), as 64 features in [0, 1]
    (the 0-16 grey levels / 16), row-major: a module reshapes a row to (1, 8, 8).

    * label ``y``: 1 if the digit is even, else 0;
    * attribute ``s``: 1 ("right") if the horizontal centre of the image's ink (the column
      mean weighted by grey level) lies right of its median over all 1,797 images, else 0
      ("left").

    ``split_seed`` fixes the 60/20/20 split, stratified by label only.
    """
    # scikit-learn is a dependency, imported on use as the other loaders' libraries are
    from sklearn.datasets import load_digits as sklearn_digits

    split_seed = int_option("split_seed", split_seed, 0)
    if split_seed > INT64_MAX:
        raise InputError(f"dataset.split_seed: must be <= 2**63 - 1, got {split_seed:,}")
    raw = sklearn_digits()
    pixels = raw.data  # (1797, 64) grey levels 0..16, row-major
    centre = (raw.images.sum(axis=1) * np.arange(8)).sum(axis=1) / raw.images.sum(axis=(1, 2))
    y = (raw.target % 2 == 0).astype(np.int64)
    s = (centre > np.median(centre)).astype(np.int64)
    return Dataset(
        name="digits",
        X=(pixels / 16.0).astype(np.float32),
        y=y,
        s=s,
        splits=stratified_split(y, seed=split_seed),
        feature_names=tuple(f"pixel_{r}_{c}" for r in range(8) for c in range(8)),
        class_names=("odd", "even"),
        group_names=("left", "right"),
        label_name="even digit",
        sensitive_name="ink right of centre",
        source="sklearn.datasets.load_digits (UCI optical recognition of handwritten digits, test part)",
        preprocessing=(
            "Grey levels 0-16 scaled to [0, 1]; label: even digit; attribute: the ink's horizontal centre "
            f"right of its median over all images; 60/20/20 split stratified by label only, seed {split_seed}."
        ),
    )
