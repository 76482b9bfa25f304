"""INLP's projections: algebraic properties and removal of a linearly encoded attribute."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from fairdp.errors import InputError
from fairdp.methods._nullspace import inlp, nullspace_projection, rowspace_projection


def random_ws(D: int, rows: list[int], seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(r, D, generator=g, dtype=torch.float64) for r in rows]


def rank(A: torch.Tensor) -> int:
    """Numerical rank with an absolute tolerance: I - P_R is ~1e-16, not 0, at full rank."""
    return int(torch.linalg.matrix_rank(A, atol=1e-8, rtol=0.0))


def assert_projection(P: torch.Tensor) -> None:
    assert P.dtype == torch.float64
    assert torch.allclose(P, P.T, atol=1e-10)
    assert torch.allclose(P @ P, P, atol=1e-10)


@pytest.mark.parametrize("D", [5, 300])
@pytest.mark.parametrize("rows", [[1], [3], [1, 1, 2], [2, 3, 1, 1]])
def test_nullspace_projection_properties(D, rows):
    Ws = random_ws(D, rows, seed=D + len(rows))
    P = nullspace_projection(Ws)
    assert_projection(P)
    for W in Ws:
        assert torch.allclose(P @ W.T, torch.zeros(D, W.shape[0], dtype=torch.float64), atol=1e-10)
    rank_w = rank(torch.cat(Ws))
    assert rank_w == min(D, sum(rows))
    assert rank(P) == D - rank_w
    assert torch.trace(P).item() == pytest.approx(D - rank_w)


def test_rank_deficient_and_duplicate_rows():
    D = 6
    w1, w2 = random_ws(D, [1, 1], seed=1)
    W = torch.cat([w1, 2 * w1, w1 + 3 * w2, w2])  # rank 2 from 4 rows
    P = nullspace_projection([W, w1, -w2])
    assert_projection(P)
    assert rank(P) == D - 2
    assert torch.allclose(P @ W.T, torch.zeros(D, 4, dtype=torch.float64), atol=1e-10)


def test_rowspace_projection_of_full_rank_and_zero():
    D = 5
    (W,) = random_ws(D, [D], seed=2)
    assert torch.allclose(rowspace_projection(W), torch.eye(D, dtype=torch.float64), atol=1e-10)
    assert torch.equal(
        rowspace_projection(torch.zeros(2, D)), torch.zeros(D, D, dtype=torch.float64)
    )
    assert torch.equal(nullspace_projection([np.zeros(D)]), torch.eye(D, dtype=torch.float64))


def test_rowspace_projection_accepts_numpy_and_one_row():
    w = np.array([3.0, 4.0, 0.0])
    expected = torch.tensor(np.outer(w, w) / 25.0)
    assert torch.allclose(rowspace_projection(w), expected, atol=1e-12)
    assert torch.allclose(nullspace_projection([w]), torch.eye(3, dtype=torch.float64) - expected)


def test_nullspace_projection_needs_a_matrix():
    with pytest.raises(ValueError):
        nullspace_projection([])


def synthetic(n: int, D: int, classes: int, seed: int):
    """s encoded in e0..e2 (anisotropic noise, so one probe direction is not enough), y in e5."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, classes, n)
    y = rng.integers(0, 2, n)
    X = rng.normal(size=(n, D))
    X[:, :3] *= [0.5, 1.0, 2.0]
    X[:, :3] += rng.normal(size=(classes, 3))[s] * 2.0
    X[:, 5] += 3.0 * (2 * y - 1)
    return X, s, y


def probe_accuracy(X: np.ndarray, labels: np.ndarray) -> float:
    half = len(labels) // 2
    clf = LogisticRegression(max_iter=1000).fit(X[:half], labels[:half])
    return clf.score(X[half:], labels[half:])


@pytest.mark.parametrize("classes", [2, 3])
def test_inlp_removes_s_and_keeps_orthogonal_y(classes):
    """Three steps remove s; more would fit noise and start eating into y (Ravfogel et al.)."""
    X, s, y = synthetic(4000, 20, classes, seed=0)
    majority = np.bincount(s[2000:]).max() / 2000
    assert probe_accuracy(X, s) > majority + 0.2
    projections = inlp(X, s, 3, seed=0)
    assert len(projections) == 3
    for P in projections:
        assert_projection(P)
    ranks = [rank(P) for P in projections]
    assert 20 > ranks[0] > ranks[1] > ranks[2] >= 20 - 3 * classes
    cleaned = X @ projections[-1].numpy()
    assert probe_accuracy(cleaned, s) < majority + 0.03
    assert probe_accuracy(cleaned, y) > 0.95


def test_inlp_prefix_property_and_determinism():
    X, s, _ = synthetic(1000, 10, 2, seed=5)
    long = inlp(X, s, 4, seed=1)
    short = inlp(torch.as_tensor(X), torch.as_tensor(s), 2, seed=1)
    for a, b in zip(short, long[:2]):
        assert torch.allclose(a, b, atol=1e-12)


def test_inlp_svm_classifier():
    X, s, _ = synthetic(2000, 10, 2, seed=6)
    projections = inlp(X, s, 3, classifier="svm")
    assert probe_accuracy(X @ projections[-1].numpy(), s) < 0.6


def test_inlp_min_accuracy_freezes_the_projection():
    X, s, _ = synthetic(2000, 10, 2, seed=7)
    projections = inlp(X, s, 8, min_accuracy=0.6)
    frozen = [k for k in range(1, 8) if torch.equal(projections[k], projections[k - 1])]
    assert frozen and frozen == list(range(frozen[0], 8))
    assert rank(projections[-1]) > 10 - 8


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"iterations": 0}, "^iterations"),
        ({"iterations": 2, "classifier": "tree"}, "^classifier"),
    ],
)
def test_inlp_bad_arguments(kwargs, match):
    X, s, _ = synthetic(100, 8, 2, seed=0)
    with pytest.raises(InputError, match=match):
        inlp(X, s, **kwargs)


def test_inlp_needs_two_classes():
    with pytest.raises(InputError, match="^s "):
        inlp(np.ones((10, 3)), np.zeros(10), 1)


def test_inlp_projects_the_penultimate_layer_of_the_unconstrained_model():
    """INLP's representation is the penultimate activation of the very model ``unconstrained``
    trains for the seed (the input of its last classifier layer, here 8-d), times the
    projection that INLP's iterations on the training split's activations give."""
    from fairdp.data import load_dataset
    from fairdp.engine import Architecture, TrainSettings
    from fairdp.methods import get_method

    data = load_dataset("synthetic", rows=1200, features=10, leakage=1.0, seed=2)
    arch = Architecture(encoder=(16, 16), classifier=(8,), adversary=(), dropout=0.1)
    settings = TrainSettings(epochs=3, batch_size=200, dtype="float64")
    result = get_method("inlp").train_pack(data, [{"iterations": 3}], seed=1, settings=settings, arch=arch)
    base = get_method("unconstrained").train_pack(data, [{}], seed=1, settings=settings, arch=arch)

    def penultimate(split):
        x = torch.as_tensor(data.split(split).X, dtype=torch.float64)
        with torch.no_grad():
            return base.model.classifier(base.model.represent(x, None, None), return_hidden=True)[1][0]

    P = inlp(penultimate("train").numpy(), data.split("train").s, 3, seed=1)[-1]
    expected = (penultimate("test") @ P).numpy()
    assert result.representations["test"].shape == (1, len(data.splits["test"]), 8)
    np.testing.assert_allclose(result.representations["test"][0], expected, rtol=1e-10, atol=1e-12)
