"""Leakage and MDL probes: the batched torch probes against scikit-learn, and what they must show."""

from dataclasses import replace

import numpy as np
import pytest

from fairdp.data import load_dataset
from fairdp.engine import Architecture, TrainSettings
from fairdp.methods import get_method
from fairdp.metrics import FEDERATE_PROBE, ProbeSettings, _probes, leakage, mdl
from fairdp.metrics._probes import mdl_block_ends, online_code, uniform_codelength


@pytest.fixture(scope="module")
def pack():
    """Representations of three configs: leaky (unconstrained, no noise), partly private and
    nearly private (FEDERATE at eps 20 and 2), stacked as one pack's."""
    data = load_dataset("synthetic", rows=10_000, features=20, label_correlation=0.0, leakage=1.0, seed=0)
    settings = TrainSettings(epochs=5, batch_size=200)
    arch = Architecture(encoder=(64, 64), adversary=(64,))
    leaky = get_method("unconstrained").train_pack(data, [{}], seed=0, settings=settings, arch=arch)
    private = get_method("federate").train_pack(data, [{"lam": 0.5, "eps": 20.0}, {"lam": 0.5, "eps": 2.0}],
                                                seed=0, settings=settings, arch=arch)
    return data, {split: np.concatenate([leaky.representations[split], private.representations[split]])
                  for split in private.representations}


# FEDERATE's protocol fits scikit-learn's MLP up to 200 epochs per probe (tens of seconds
# here): the fast set checks the default protocol, the slow set both
PROTOCOLS = pytest.mark.parametrize("settings", [ProbeSettings(), pytest.param(FEDERATE_PROBE, marks=pytest.mark.slow)],
                                    ids=["default", "federate"])


@PROTOCOLS
def test_batched_leakage_matches_sklearn(pack, settings):
    data, reps = pack
    s_test = data.split("test").s
    args = (reps["valid"], data.split("valid").s, reps["test"], s_test)
    # one probe's accuracy moves about 1 point with its seed: compare means over 3 seeds
    runs = [(leakage(*args, settings=replace(settings, seed=seed)),
             leakage(*args, settings=replace(settings, seed=seed, backend="sklearn"))) for seed in range(3)]
    ours, ref = (np.mean([run[i] for run in runs], axis=0) for i in (0, 1))
    assert ours.shape == (3,)
    # Where there is something to learn, the two probes agree within 2 points; on the
    # nearly private representation both sit at chance, where two probes differ by noise: a
    # probe fit to 2,000 rows of 64 noise dimensions lands a few points off the majority rate
    # by its own overfitting (4.1 below it for scikit-learn's with one of the noise streams)
    np.testing.assert_array_less(np.abs(ours[:2] - ref[:2]), 2.0)
    majority = np.bincount(s_test).max() / len(s_test) * 100
    assert abs(ours[2] - majority) < 5 and abs(ref[2] - majority) < 5
    assert ours[0] > ours[2] + 5  # the leaky representation leaks more


@PROTOCOLS
def test_batched_mdl_matches_sklearn_on_an_informative_representation(pack, settings):
    data, reps = pack
    ours = mdl(reps["test"][0], data.split("test").s, settings=settings)
    ref = mdl(reps["test"][0], data.split("test").s, settings=replace(settings, backend="sklearn"))
    assert abs(ours - ref) / ref < 0.05


def test_a_pack_gives_each_representation_what_it_gets_alone(pack):
    data, reps = pack
    s_valid, s_test = data.split("valid").s, data.split("test").s
    packed = leakage(reps["valid"], s_valid, reps["test"], s_test)
    alone = leakage(reps["valid"][1], s_valid, reps["test"][1], s_test)
    assert packed[1] == pytest.approx(alone, abs=1e-9)
    assert mdl(reps["test"][:2], s_test)[1] == pytest.approx(mdl(reps["test"][1], s_test), rel=1e-6)


def test_random_representation_is_near_chance_and_the_uniform_bound():
    rng = np.random.default_rng(0)
    s_train, s_test = (rng.random(3000) < 0.3).astype(int), (rng.random(3000) < 0.3).astype(int)
    train, test = rng.normal(size=(3000, 50)), rng.normal(size=(3000, 50))
    majority = np.bincount(s_test).max() / len(s_test) * 100
    assert abs(leakage(train, s_train, test, s_test) - majority) < 3
    balanced = rng.integers(0, 2, 3000)
    bound = uniform_codelength(len(balanced), 2)
    assert 0.98 * bound <= mdl(test, balanced) < 1.2 * bound


def test_informative_representation_leaks_and_compresses():
    rng = np.random.default_rng(1)
    s = rng.integers(0, 3, 4000)
    X = rng.normal(size=(4000, 20)) + 3 * np.eye(20)[s]
    assert leakage(X[:2000], s[:2000], X[2000:], s[2000:]) > 95
    assert mdl(X, s) < 0.35 * uniform_codelength(4000, 3)


def test_online_code_codes_every_row_once_and_the_first_block_uniformly():
    assert mdl_block_ends(1000) == [1, 2, 4, 8, 16, 32, 62, 125, 250, 500, 1000]
    rng = np.random.default_rng(2)
    s = rng.integers(0, 4, 2000)
    X = rng.normal(size=(2000, 8)) + np.eye(8)[s]
    ends, bits = online_code(X, s)
    assert ends[-1] == 2000 and np.all(np.diff(ends) > 0)  # blocks partition the rows
    assert bits[0, 0] == pytest.approx(ends[0] * np.log2(4))
    assert bits.sum() / 1000 == pytest.approx(mdl(X, s))


def test_linear_probe_option():
    rng = np.random.default_rng(3)
    s = rng.integers(0, 2, 2000)
    X = rng.normal(size=(2000, 5)) + 2.0 * s[:, None]
    acc = leakage(X[:1000], s[:1000], X[1000:], s[1000:], settings=ProbeSettings(kind="linear"))
    assert acc > 90


def test_no_block_is_scored_by_a_probe_that_saw_its_rows(monkeypatch):
    """Voita & Titov's online code: block i is coded by a probe trained on the rows before it
    only. Every probe the code trains is spied on: the rows it scores must be disjoint from
    the rows it was fitted on, and with the first (uniformly coded) block they must cover
    every row exactly once. FEDERATE's public code, which scores the whole next prefix,
    fails this."""
    real = _probes._fit_torch
    scored = []

    def spy(fit, y, c, settings):
        probe = real(fit, y, c, settings)

        def scoring(block):
            scored.append((fit[0].cpu().numpy(), block[0].cpu().numpy()))
            return probe(block)

        return scoring

    monkeypatch.setattr(_probes, "_fit_torch", spy)
    rng = np.random.default_rng(4)
    s = rng.integers(0, 2, 1500)
    X = rng.normal(size=(1500, 6)) + s[:, None]  # every row distinct
    ends, _ = online_code(X, s, ProbeSettings(max_epochs=5))
    # the first blocks may be coded by the prefix's label frequencies (one class seen so far)
    assert len(ends) - 3 <= len(scored) <= len(ends) - 1
    seen = []
    for fit, block in scored:
        fitted = {r.tobytes() for r in fit}
        assert not any(r.tobytes() in fitted for r in block)
        seen += [r.tobytes() for r in block]
    assert len(seen) == len(set(seen)) == 1500 - ends[-len(scored) - 1]


def test_probes_train_with_denormals_flushed_and_it_changes_no_number(monkeypatch):
    """L2 decay drives unused probe weights into float32's denormal range, where a CPU computes
    several times slower (FEDERATE's alpha-1 probe: 6x on Adult). Probes train with denormals
    flushed, the mode is off again afterwards, and leakage and MDL are those of an unflushed probe."""
    import contextlib

    import torch

    rng = np.random.default_rng(0)
    s = rng.integers(0, 2, 1200)
    X = (rng.normal(size=(1200, 16)) + 0.5 * s[:, None]).astype(np.float32)
    settings = replace(FEDERATE_PROBE, max_epochs=30)
    flushing = []
    real_loss = _probes.per_config_cross_entropy

    def spy(*args):
        flushing.append((torch.tensor([1e-39]) * 1.0).item() == 0.0)  # a denormal reads as zero
        return real_loss(*args)

    monkeypatch.setattr(_probes, "per_config_cross_entropy", spy)
    flushed = (leakage(X[:600], s[:600], X[600:], s[600:], settings), mdl(X[600:], s[600:], settings))
    assert flushing and all(flushing)
    assert (torch.tensor([1e-39]) * 1.0).item() != 0.0
    monkeypatch.setattr(_probes, "_flush_denormals", contextlib.nullcontext)
    flushing.clear()
    plain = (leakage(X[:600], s[:600], X[600:], s[600:], settings), mdl(X[600:], s[600:], settings))
    assert flushing and not any(flushing)
    assert plain == flushed
