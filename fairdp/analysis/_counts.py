"""Stored per-group confusion counts (``test_confusion``, ``valid_confusion``: JSON of a
(G, C, C) nested list) parsed in pyarrow, many texts at once, for the functions that compute
one value per text over a whole table (``analysis._predictions``)."""

from __future__ import annotations

import numpy as np


def counts_by_shape(texts) -> tuple[dict[tuple[int, int], tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """The texts of ``texts`` (an object array) that are (G, C, C) nested lists of numbers,
    grouped by (G, C): each its positions (increasing) and counts (N, G, C, C) as floats; and
    the positions of every other value (not a string, another shape or content), which the
    caller decides one by one as its own definition does."""
    import pyarrow as pa
    import pyarrow.compute as pc

    texts = np.asarray(texts, dtype=object)
    if not len(texts):
        return {}, np.zeros(0, np.int64)
    text = pa.array([t if isinstance(t, str) else None for t in texts], type=pa.string())
    numbers = pc.split_pattern(pc.replace_substring_regex(text, r"[\[\]\s]+", ""), ",")
    n = pc.list_value_length(numbers).to_numpy(zero_copy_only=False).astype(float)
    brackets = pc.count_substring(text, "[").to_numpy(zero_copy_only=False).astype(float)
    skeleton = pc.replace_substring_regex(text, r"[^\[\],]+", "")
    # (G, C, C) nested lists hold n = G C^2 numbers in 1 + G + G C brackets: solve for C, then G,
    # and keep the texts whose brackets and commas are exactly those of that shape
    with np.errstate(invalid="ignore"):
        ratio = n / np.maximum(brackets - 1, 1)
        classes = np.maximum(np.rint((ratio + np.sqrt(ratio ** 2 + 4 * ratio)) / 2), 1)
        groups = np.maximum(np.rint(n / classes ** 2), 1)
    shape_of = np.stack([np.nan_to_num(groups, nan=1), np.nan_to_num(classes, nan=1)], axis=1)
    shapes, which = np.unique(shape_of, axis=0, return_inverse=True)
    expected = pa.array([_skeleton(int(g), int(c)) for g, c in shapes], type=pa.string()).take(pa.array(which.ravel()))
    fast = pc.fill_null(pc.equal(skeleton, expected), False).to_numpy(zero_copy_only=False)
    parsed = {}
    for g, c in sorted({(int(g), int(c)) for g, c in shape_of[fast]}):
        mine = np.flatnonzero(fast & (shape_of[:, 0] == g) & (shape_of[:, 1] == c))
        try:
            values = pc.list_flatten(pc.cast(pc.take(numbers, pa.array(mine)), pa.list_(pa.float64())))
        except pa.ArrowInvalid:  # a text that is not numbers: the caller's own definition says what it is
            fast[mine] = False
            continue
        parsed[(g, c)] = (mine, values.to_numpy().reshape(len(mine), g, c, c))
    return parsed, np.flatnonzero(~fast)


def _skeleton(groups: int, classes: int) -> str:
    """The brackets and commas of a (groups, classes, classes) nested JSON list."""
    row = "[" + "," * (classes - 1) + "]"
    matrix = "[" + ",".join([row] * classes) + "]"
    return "[" + ",".join([matrix] * groups) + "]"
