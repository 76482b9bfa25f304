"""The CUDA set: the engine, every method, the probes, the precision settings and the memory
rule on a GPU. Skipped without one; on a machine with CUDA, ``make test-cuda`` runs it.

The rest of the suite pins ``device="cpu"`` where it means the CPU; these tests pin CUDA.
"""

import dataclasses

import numpy as np
import pytest
import torch

from fairdp.data import load_dataset
from fairdp.engine import EVAL_CHUNK, TrainSettings
from fairdp.engine._memory import bytes_per_config
from fairdp.engine._shared import architecture_from
from fairdp.methods import get_method, method_names
from fairdp.metrics import ProbeSettings, leakage, mdl

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

CUDA = TrainSettings(epochs=2, batch_size=256, device="cuda")


@pytest.fixture(scope="module")
def data():
    return load_dataset("synthetic", rows=1500, features=12, seed=1)


@pytest.mark.parametrize("name", method_names())
def test_every_method_trains_on_cuda_with_the_cpus_guarantee(name, data):
    method = get_method(name)
    grid = method.expand(method.paper_grid(data.name))
    configs = [grid[0], grid[-1]]
    gpu = method.train_pack(data, configs, seed=0, settings=CUDA)
    cpu = method.train_pack(data, configs, seed=0, settings=dataclasses.replace(CUDA, device="cpu"))
    assert gpu.privacy == cpu.privacy
    for split in ("valid", "test"):
        assert gpu.predictions[split].shape == cpu.predictions[split].shape
        assert np.isfinite(gpu.representations[split]).all()
    # The device changes rounding and the random streams, not what a config learns: without
    # privacy noise accuracies agree within ~3 standard errors of a 300-row test split. A
    # private config's accuracy depends on its noise draw (PF-LD's most private config: 65%
    # on CUDA, 83% on the CPU), and at eps 0.01 it is at chance on either device.
    y = data.split("test").y
    acc_gpu, acc_cpu = (gpu.predictions["test"] == y).mean(1), (cpu.predictions["test"] == y).mean(1)
    public = ~np.isfinite([eps for eps, _ in cpu.privacy])
    assert np.abs(acc_gpu - acc_cpu)[public].max(initial=0) < 0.12, (acc_gpu, acc_cpu)


def test_a_cuda_pack_is_bitwise_reproducible_and_agrees_with_alone_after_one_epoch(data):
    method = get_method("federate")
    configs = method.expand(method.paper_grid(data.name))[:4]
    one = dataclasses.replace(CUDA, epochs=1, dtype="float64")
    a = method.train_pack(data, configs, seed=2, settings=CUDA)
    b = method.train_pack(data, configs, seed=2, settings=CUDA)
    np.testing.assert_array_equal(a.representations["test"], b.representations["test"])
    packed = method.train_pack(data, configs, seed=2, settings=one)
    for i, cfg in enumerate(configs):
        alone = method.train_pack(data, [cfg], seed=2, settings=one)
        np.testing.assert_allclose(packed.representations["test"][i], alone.representations["test"][0],
                                   rtol=1e-9, atol=1e-9)


def test_precision_on_cuda_defaults_to_tf32_and_bf16_trains(data):
    method = get_method("federate")
    configs = method.expand(method.paper_grid(data.name))[:2]
    assert method.train_pack(data, configs, seed=0, settings=CUDA).precision == "tf32"
    assert torch.backends.cuda.matmul.allow_tf32 is False  # restored after the pack (torch's default)
    bf16 = method.train_pack(data, configs, seed=0, settings=dataclasses.replace(CUDA, precision="bf16"))
    assert bf16.precision == "bf16" and bf16.representations["test"].dtype == np.float32


def test_probes_on_cuda_match_the_cpu(data):
    rng = np.random.default_rng(0)
    s = rng.integers(0, 2, 3000)
    z = rng.normal(size=(3000, 16)).astype(np.float32) + s[:, None] * 0.8
    gpu, cpu = ProbeSettings(device="cuda"), ProbeSettings(device="cpu")
    assert abs(leakage(z[:2000], s[:2000], z[2000:], s[2000:], gpu)
               - leakage(z[:2000], s[:2000], z[2000:], s[2000:], cpu)) < 2.0
    assert abs(mdl(z, s, gpu) - mdl(z, s, cpu)) < 0.05 * mdl(z, s, cpu)


def test_privatising_a_cuda_batch_never_waits_for_the_device():
    """FEDERATE's and DPNR's mechanisms run at every training step: a host sync there (a
    data-dependent branch, a tensor eps checked with a mask) stalls the GPU's queue each step.
    The engine checks eps once per pack (check_eps) and privatises with eps_checked and the
    configs' eps as host floats (a tensor eps would be read back for the mechanism's tables)."""
    from fairdp.engine.contract import PackStream
    from fairdp.privacy import (
        check_eps,
        l1_normalize,
        laplace_privatize,
        minmax_normalize,
        minmax_privatize,
    )

    h = torch.randn(4, 256, 32, device="cuda")
    h[0, 0] = 0  # a zero row: the uniform row without looking for it
    h[1, 0, 3], h[1, 1, 0], h[2, 0, 5] = float("nan"), float("inf"), -float("inf")  # so are non-finite rows
    eps = (1.0, 2.0, 4.0, 8.0)
    check_eps(eps)
    gens = PackStream.from_names([f"s/{i}/noise" for i in range(4)], "cuda")
    laplace_privatize(h, eps, gens, eps_checked=True)  # tables uploaded, graphs captured
    minmax_privatize(h, eps, gens, eps_checked=True)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        normalised = l1_normalize(h)
        laplace_privatize(h, eps, gens, eps_checked=True)
        minmax_privatize(h, eps, gens, eps_checked=True)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    for row in (normalised[0, 0], normalised[1, 0], normalised[1, 1], normalised[2, 0]):
        assert torch.equal(row, torch.full((32,), 1 / 32, device="cuda"))
    assert torch.allclose(normalised.abs().sum(-1), torch.ones(4, 256, device="cuda"))
    assert torch.equal(minmax_normalize(h)[1, 0], torch.zeros(32, device="cuda"))


def test_the_grid_laplace_mechanism_releases_on_the_gpu_what_it_releases_on_the_cpu():
    """The discrete mechanism's tensor path on CUDA (words from the graph-replayed Philox) and
    the CPU's NumPy path give the same grid points bit for bit, for configs at different eps."""
    from fairdp.engine.contract import PackStream
    from fairdp.privacy import _mechanisms

    names = [f"s/{i}/noise" for i in range(3)]
    eps = (8.0, 12.0, 20.0)
    x = torch.randint(-512, 512, (3, 4000), generator=torch.Generator().manual_seed(0)).double() / 1024
    cpu = _mechanisms._released_on_host(x, _mechanisms._l1_tables(eps, 16, 24, torch.device("cpu")),
                                        PackStream.from_names(names))
    gpu = _mechanisms._released(x.cuda(), _mechanisms._l1_tables(eps, 16, 24, torch.device("cuda", 0)),
                                PackStream.from_names(names, "cuda"))
    assert torch.equal(cpu, gpu.cpu())


def test_graph_replayed_probes_give_what_eager_probes_give(monkeypatch):
    """On CUDA a probe's minibatch steps are replayed from a captured graph; the eager steps
    are the reference. A replay that read a stale minibatch, skipped the optimiser or
    double-counted the loss would move the probe far more than the tolerance."""
    from fairdp.metrics import FEDERATE_PROBE
    from fairdp.metrics import _probes as probes

    rng = np.random.default_rng(3)
    s = (rng.random(3000) < 0.4).astype(np.int64)
    z = rng.normal(size=(6, 3000, 24)).astype(np.float32)
    z[:, s == 1, :4] += np.linspace(0.1, 0.8, 6)[:, None, None].astype(np.float32)
    settings = dataclasses.replace(FEDERATE_PROBE, max_epochs=40, device="cuda")

    def both():
        return (leakage(z[:, :1000], s[:1000], z[:, 1000:], s[1000:], settings), mdl(z, s, settings))

    graphed = both()
    monkeypatch.setattr(probes, "CUDA_GRAPHS", False)
    eager = both()
    np.testing.assert_allclose(graphed[0], eager[0], atol=0.3)
    np.testing.assert_allclose(graphed[1], eager[1], rtol=2e-3)


def test_the_memory_estimate_bounds_what_a_pack_allocates():
    """bytes_per_config x K against torch.cuda.max_memory_allocated of a real pack: an upper
    bound (so a chunk never runs out of memory) that is not wildly loose (so packs are not
    split needlessly: the rule once split multi_adversarial's 150 configs although all fit)."""
    adult = load_dataset("synthetic", rows=20_000, features=85, seed=0)
    for name in ("federate", "multi_adversarial"):
        method = get_method(name)
        configs = method.expand(method.paper_grid("adult"))[:32]
        shapes = method.layer_shapes(adult, architecture_from(None, "adult"))
        settings = TrainSettings(epochs=1, batch_size=2000, device="cuda", config_chunk=len(configs))
        method.train_pack(adult, configs[:1], seed=0, settings=dataclasses.replace(settings, config_chunk=1))
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        method.train_pack(adult, configs, seed=0, settings=settings)
        used = torch.cuda.max_memory_allocated() - base
        kept = sum(len(adult.splits[n]) for n in ("valid", "test"))
        estimate = len(configs) * bytes_per_config(shapes, 2000, EVAL_CHUNK, kept, max(b for _, b in shapes))
        assert used <= estimate <= 4 * used, (name, used, estimate)


@pytest.mark.parametrize("name", ["federate", "pfld"])
def test_a_cuda_pack_resumes_from_its_checkpoint_bit_for_bit_and_a_cpu_one_is_not_resumed_on_cuda(
        name, data, monkeypatch, caplog):
    """CUDA tensors and CUDA random streams survive the pickle; a checkpoint saved where the
    device resolved to the CPU (a CPU node of a mixed cluster) is not resumed on a GPU."""
    from fairdp.engine import Checkpointing
    from fairdp.testing.method_contract import Killed, MemoryCheckpoint, assert_same_pack

    method = get_method(name)
    grid = method.expand(method.paper_grid(data.name))
    configs = [grid[0], grid[-1]]
    auto = TrainSettings(epochs=2, batch_size=256)  # device: CUDA when there is one

    def kill_at_2(report):
        if report.epoch == 2:
            raise Killed

    want = method.train_pack(data, configs, seed=0, settings=auto)
    file = MemoryCheckpoint()
    with pytest.raises(Killed):
        method.train_pack(data, configs, seed=0, settings=auto, callback=kill_at_2, checkpoint=Checkpointing(file, 0))
    epochs = []
    got = method.train_pack(data, configs, seed=0, settings=auto, callback=lambda r: epochs.append(r.epoch),
                            checkpoint=Checkpointing(file, 0))
    assert epochs == [2]
    assert_same_pack(got, want)

    on_cpu = MemoryCheckpoint()
    with monkeypatch.context() as m:
        m.setattr(torch.cuda, "is_available", lambda: False)
        with pytest.raises(Killed):
            method.train_pack(data, configs, seed=0, settings=auto, callback=kill_at_2,
                              checkpoint=Checkpointing(on_cpu, 0))
    epochs = []
    got = method.train_pack(data, configs, seed=0, settings=auto, callback=lambda r: epochs.append(r.epoch),
                            checkpoint=Checkpointing(on_cpu, 0))
    assert epochs == [1, 2] and "another pack or setting" in caplog.text
    assert_same_pack(got, want)


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
def test_pack_streams_draw_on_the_gpu_what_they_draw_on_the_cpu_without_host_syncs(graphs, monkeypatch):
    """The counter-based streams: the same words on both devices, one batched computation for
    the pack on the GPU (replayed from a captured graph, or eager), counters advanced there
    without the host waiting once each draw's shape has been seen."""
    from fairdp import _rng

    monkeypatch.setattr(_rng, "CUDA_GRAPHS", graphs)
    names = [f"0/config-{k}/noise" for k in range(4)]
    cpu, gpu = _rng.PackStream.from_names(names), _rng.PackStream.from_names(names, "cuda")

    def draws(stream, device):
        return [stream.uniform((513, 7)), stream.uniform((99,), torch.float64), stream.words(100),
                _rng.dropout(torch.ones(4, 64, 32, device=device), 0.9, stream)]

    first_gpu, first_cpu = draws(gpu, "cuda"), draws(cpu, "cpu")  # the first draws capture and upload
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        again_gpu = draws(gpu, "cuda")
    finally:
        torch.cuda.set_sync_debug_mode(0)
    for a, b in zip(first_gpu + again_gpu, first_cpu + draws(cpu, "cpu")):
        assert torch.equal(a.cpu(), b)
    assert _rng.CUDA_GRAPHS == graphs  # no capture failed
