"""The selected models' positive rate, from the counts each row stores, against the predictions."""

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairdp.analysis._predictions import (
    majority_share,
    majority_shares,
    positive_rate,
    positive_rates,
    positive_rates_of,
)
from fairdp.fairness import confusion
from tests.conftest import confusion_text


@pytest.mark.parametrize("p", [0.0, 0.004, 0.3, 0.999, 1.0])
def test_positive_rate_from_counts_is_the_rate_of_the_predictions(p):
    rng = np.random.default_rng(0)
    y, s = rng.integers(0, 2, 5000), rng.integers(0, 3, 5000)
    y_pred = (rng.random(5000) < p).astype(int)
    rate, label = positive_rate(json.dumps(confusion(y, y_pred, s, n_classes=2, n_groups=3).tolist()))
    assert rate == pytest.approx(100 * y_pred.mean()) and label == pytest.approx(100 * y.mean())


def test_positive_rates_counts_constant_models_per_group_of_seeds():
    rng = np.random.default_rng(1)
    y, s = rng.integers(0, 2, 1000), rng.integers(0, 2, 1000)
    rows = []
    for seed, y_pred in enumerate((np.zeros(1000, int), y.copy(), (rng.random(1000) < 0.995).astype(int))):
        rows.append({"dataset": "d", "method": "m", "seed": seed, "status": "ok", "eps": 1.0,
                     "test_confusion": json.dumps(confusion(y, y_pred, s, n_classes=2, n_groups=2).tolist())})
    rows.append({"dataset": "d", "method": "m", "seed": 3, "status": "ok", "eps": 1.0, "test_confusion": None})
    out = positive_rates(pd.DataFrame(rows), by=["eps"])
    assert len(out) == 1
    r = out.iloc[0]
    assert r["n_seeds"] == 3 and r["constant"] == 2  # all negative; 99.5% positive
    assert r["label_rate"] == pytest.approx(100 * y.mean())


def test_a_task_of_more_than_two_classes_has_no_positive_rate():
    conf = np.ones((2, 3, 3), dtype=int).tolist()
    assert all(np.isnan(positive_rate(json.dumps(conf))))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_majority_shares_all_at_once_equal_each_texts_majority_share(data):
    """The shortcut that parses every text at once gives, text by text, what the one-text
    definition gives (NaN where it gives NaN), whatever the texts hold."""
    texts = [confusion_text(data.draw) for _ in range(data.draw(st.integers(0, 12)))]
    texts += texts[: data.draw(st.integers(0, len(texts)))]  # repeated texts
    try:
        wants = [majority_share(text) for text in texts]
    except ValueError:  # not JSON, or ragged: the definition refuses the texts, so must the shortcut
        with pytest.raises(ValueError):
            majority_shares(pd.Series(texts, dtype=object))
        return
    got = majority_shares(pd.Series(texts, dtype=object))
    for text, want, share in zip(texts, wants, got):
        assert (np.isnan(want) and np.isnan(share)) or share == pytest.approx(want, abs=1e-12), text


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_positive_rates_all_at_once_equal_each_texts_positive_rate(data):
    """As for the majority shares: the texts parsed at once give, text by text, what
    ``positive_rate`` gives (NaN where it does, and for tasks of more than two classes)."""
    texts = [confusion_text(data.draw) for _ in range(data.draw(st.integers(0, 12)))]
    texts += texts[: data.draw(st.integers(0, len(texts)))]
    try:
        wants = [positive_rate(text) for text in texts]
    except ValueError:
        with pytest.raises(ValueError):
            positive_rates_of(pd.Series(texts, dtype=object))
        return
    got = positive_rates_of(pd.Series(texts, dtype=object))
    assert got.shape == (len(texts), 2)
    for text, want, rates in zip(texts, wants, got):
        for w, r in zip(want, rates):
            assert (np.isnan(w) and np.isnan(r)) or r == pytest.approx(w, abs=1e-12), text
