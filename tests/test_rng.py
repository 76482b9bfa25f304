"""The engine's counter-based per-config streams (fairdp._rng.PackStream, fairdp._philox).

Pinned: Random123's known-answer vectors for Philox4x64-10. Checked against an independent
implementation: NumPy's C Philox (the CPU path) against fairdp's tensor Philox (the CUDA path,
run here on CPU tensors). Properties packed training relies on: a config's numbers do not
depend on its pack, its position, a subset, the thread count or a checkpoint. Quality: the
streams, interleaved as a pack draws them, through dieharder's tests (a standard battery),
with a broken stream as the control that the battery catches what it guards against.
"""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy import stats

from fairdp import _philox, _rng

M64 = (1 << 64) - 1
# Random123 1.09, examples/kat_vectors: philox4x64 10 <counter> <key> <output>
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0),
     (0x16554D9ECA36314C, 0xDB20FE9D672D0FDC, 0xD7E772CEE186176B, 0x7E68B68AEC7BA23B)),
    ((M64, M64, M64, M64), (M64, M64),
     (0x87B092C3013FE90B, 0x438C3C67BE8D0224, 0x9CC7D7C69CD777B6, 0xA09CAEBF594F0BA0)),
    ((0x243F6A8885A308D3, 0x13198A2E03707344, 0xA4093822299F31D0, 0x082EFA98EC4E6C89),
     (0x452821E638D01377, 0xBE5466CF34E90C6C),
     (0xA528F45403E61D95, 0x38C72DBD566E9788, 0xA5A1610E72FD18B5, 0x57BD43B5E52B7FE6)),
]


def stream(names, device="cpu") -> _rng.PackStream:
    return _rng.PackStream.from_names([f"0/{n}/dropout" for n in names], device)


@pytest.fixture
def tensor_path(monkeypatch):
    """Draw as a CUDA device does (fairdp's tensor Philox), on CPU tensors."""
    monkeypatch.setattr(_rng, "_numpy_path", lambda device: False)


@pytest.mark.parametrize("counter, key, expected", KNOWN_ANSWERS)
def test_tensor_philox_gives_random123s_known_answers(counter, key, expected):
    word = lambda v: torch.tensor([_philox.as_signed(v)])  # noqa: E731
    out = _philox.philox4x64(tuple(map(word, counter)), tuple(map(word, key)))
    assert [int(w) & M64 for w in out] == list(expected)


@pytest.mark.parametrize("counter, key, expected", KNOWN_ANSWERS)
def test_numpys_philox_gives_the_same_known_answers(counter, key, expected):
    """NumPy increments its counter before a block: start one below to get block ``counter``."""
    start = (sum(c << (64 * i) for i, c in enumerate(counter)) - 1) % (1 << 256)
    bits = np.random.Philox(key=np.array(key, dtype=np.uint64), counter=start)
    assert [int(w) for w in bits.random_raw(4)] == list(expected)


@pytest.mark.parametrize("draws", [(0, 1, 2), (7, 2**40, M64)])
def test_tensor_words_equal_numpys_c_philox(draws):
    keys = np.array([[0, 0], [M64, 1], [0x452821E638D01377, 0xBE5466CF34E90C6C]], dtype=np.uint64)
    words = _philox.words(keys, np.array(draws, dtype=np.uint64), 11, "cpu").numpy().view(np.uint64)
    for k, d in enumerate(draws):
        counter = np.array([0, d, 0, 0], dtype=np.uint64)
        np.testing.assert_array_equal(words[k], np.random.Philox(key=keys[k], counter=counter).random_raw(11))


DRAWS = [
    ("uniform float32", lambda s: _rng.uniform((301, 7), s)),
    ("uniform float64", lambda s: _rng.uniform((99,), s, dtype=torch.float64)),
    ("uniform bounds", lambda s: _rng.uniform((3, 5), s, low=-0.25, high=0.25)),
    ("normal", lambda s: _rng.normal((1001,), s)),
    ("coins", lambda s: _rng.coins((50, 3), 0.3, s)),
    ("dropout", lambda s: _rng.dropout(torch.ones(len(s), 40, 30), 0.9, s)),
    ("bernoulli", lambda s: _rng.bernoulli_mask((77,), 0.3, s)),
    ("words", lambda s: s.words(13)),
]


@pytest.mark.parametrize("name, draw", DRAWS, ids=[n for n, _ in DRAWS])
def test_the_tensor_path_draws_the_cpu_paths_numbers(name, draw, monkeypatch):
    on_cpu = [draw(s) for s in [stream("abc")] * 3]
    monkeypatch.setattr(_rng, "_numpy_path", lambda device: False)
    as_on_cuda = [draw(s) for s in [stream("abc")] * 3]
    for a, b in zip(on_cpu, as_on_cuda):
        assert a.dtype == b.dtype and torch.equal(a, b)


def _sequence(s: _rng.PackStream) -> list[torch.Tensor]:
    return [draw(s) for _, draw in DRAWS] + [s.uniform((PARALLEL_ROWS, 300))]


PARALLEL_ROWS = -(-_rng.PARALLEL_MIN_VALUES // 300) + 1  # a draw large enough to be filled by threads


def test_a_configs_numbers_do_not_depend_on_its_pack_or_position():
    alone = _sequence(stream(["a"]))
    for pack, at in [(["a", "b", "c"], 0), (["c", "b", "a"], 2), (["x", "a"], 1)]:
        for solo, packed in zip(alone, _sequence(stream(pack))):
            assert torch.equal(solo[0], packed[at])


def test_configs_of_one_pack_draw_different_numbers():
    u = stream(["a", "b"]).uniform((1000,))
    assert not torch.equal(u[0], u[1]) and abs(float(torch.corrcoef(u)[0, 1])) < 0.1


def test_each_draw_is_new():
    s = stream(["a"])
    first, second = s.uniform((1000,)), s.uniform((1000,))
    assert not torch.equal(first, second)
    assert s.draws.tolist() == [2]


def test_a_subset_continues_its_configs_streams_and_shares_their_counters():
    whole, ref = stream(["a", "b", "c"]), stream(["a", "b", "c"])
    whole.uniform((5,))
    ref.uniform((5,))
    sub = whole[[2, 0]]
    assert torch.equal(sub.uniform((6,)), ref.uniform((6,))[[2, 0]])
    assert whole.draws.tolist() == [2, 1, 2]  # the subset's draws advanced the configs it holds


def test_on_a_device_subsets_share_counters_too(tensor_path):
    whole, ref = stream(["a", "b", "c"]), stream(["a", "b", "c"])
    whole.uniform((5,))
    ref.uniform((5,))
    sub = whole[[2, 0]]
    assert torch.equal(sub.uniform((6,)), ref.uniform((6,))[[2, 0]])
    assert torch.equal(whole.uniform((4,))[[0, 2]], ref.uniform((4,))[[0, 2]])  # a and c went on from draw 2
    assert whole.draws.tolist() == [3, 2, 3]


def test_draws_continue_across_host_and_device(monkeypatch):
    """A stream drawn on the host, then on a device, then on the host again draws what one
    drawn on the host throughout does: the counters follow it."""
    mixed, host = stream(["a", "b"]), stream(["a", "b"])
    out = []
    for on_device in (False, True, True, False, True):
        monkeypatch.setattr(_rng, "_numpy_path", lambda device, d=on_device: not d)
        out.append(mixed.uniform((9,)))
    monkeypatch.undo()
    assert all(torch.equal(a, host.uniform((9,))) for a in out)


def test_the_thread_count_does_not_change_a_draw():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _sequence(stream(["a", "b"]))
        torch.set_num_threads(4)
        four = _sequence(stream(["a", "b"]))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(one, four))


def test_a_pickled_stream_resumes_where_it_was_with_its_subsets():
    s = stream(["a", "b", "c"])
    s.uniform((4,))
    sub = s[[1]]
    s2, sub2 = pickle.loads(pickle.dumps((s, sub)))
    sub2.uniform((3,))
    sub.uniform((3,))
    assert torch.equal(s2.uniform((8,)), s.uniform((8,)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_uniforms_are_uniform_on_the_unit_interval(dtype):
    u = stream(["a", "b"]).uniform((200_000,), dtype).double()
    assert 0 <= float(u.min()) and float(u.max()) < 1
    for row in u:
        assert stats.kstest(row.numpy(), "uniform").pvalue > 1e-3


def test_normal_draws_have_their_distribution():
    s = stream(["a"])
    z = _rng.normal((200_000,), s, dtype=torch.float64)[0].numpy()
    assert stats.kstest(z, "norm").pvalue > 1e-3


def test_float32_normals_come_from_53_bit_uniforms():
    """Box-Muller on float32 uniforms could not exceed |z| = 5.8: privacy noise would be cut."""
    a = _rng.normal((5000,), stream(["a"]), dtype=torch.float32)
    b = _rng.normal((5000,), stream(["a"]), dtype=torch.float64)
    assert torch.equal(a, b.float())


@pytest.mark.parametrize("prob", [0.1, 0.5, 0.9])
def test_below_is_true_with_the_probability_rounded_to_16_bits(prob):
    n = 400_000
    hits = float(stream(["a"]).below((n,), prob).double().mean())
    rounded = round(prob * 65536) / 65536
    assert abs(hits - rounded) < 5 * np.sqrt(rounded * (1 - rounded) / n)


@pytest.mark.parametrize("generators", [stream(["a", "b"]), _rng.make_generators([1, 2], "cpu")],
                         ids=["PackStream", "torch generators"])
def test_dropout_zeroes_units_and_scales_the_kept_ones_by_the_inverse_keep_probability(generators):
    x = torch.rand(2, 300, 300) + 1
    out = _rng.dropout(x, 0.8, generators)
    kept = out != 0
    torch.testing.assert_close(out[kept], x[kept] * 1.25)
    assert abs(float(kept.double().mean()) - 0.8) < 0.01


@pytest.mark.parametrize("shape", [(300, 300), (7, 5), (2000, 300)])  # 2000 x 300 is filled by threads
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cpu_dropout_masks_made_in_the_drawing_threads_equal_the_device_paths(monkeypatch, shape, dtype):
    """The CPU path multiplies by a scaled mask its drawing threads make from the words'
    16-bit lanes; the device path selects with ``below``'s lanes and then scales. Both must
    give the same output, bit for bit, draw after draw, and the same gradient."""
    x = torch.randn(3, *shape, dtype=dtype).relu_()
    cpu, device = stream(["a", "b", "c"]), stream(["a", "b", "c"])
    for _ in range(3):
        a = x.clone().requires_grad_()
        out_cpu = _rng.dropout(a, 0.9, cpu)
        with monkeypatch.context() as m:
            m.setattr(_rng, "_numpy_path", lambda device: False)
            b = x.clone().requires_grad_()
            out_device = _rng.dropout(b, 0.9, device)
        assert torch.equal(out_cpu, out_device)
        (out_cpu * x).sum().backward()
        (out_device * x).sum().backward()
        assert torch.equal(a.grad, b.grad)


# --- quality: dieharder over the streams as a pack draws them -------------------------------

DIEHARDER = shutil.which("dieharder")
# A pack of 4 configs drawing 1,024-word draws, written as drawn: config 0's draw d, config
# 1's draw d, ..., then draw d + 1. "repeat" is the control: a stream whose draws all reuse
# one counter, the failure a counter-based generator must not have.
WRITER = """
import sys
from fairdp import _rng
s = _rng.PackStream.from_names([f"0/config-{k}/dropout" for k in range(4)])
repeat = sys.argv[1] == "repeat"
try:
    while True:
        w = s.words(1024)
        if repeat:
            s._counters.host[:] = 0
        sys.stdout.buffer.write(w.numpy().tobytes())
except BrokenPipeError:
    pass
"""
# dieharder's overlapping 5-permutations, 32x32 binary ranks, bitstream, STS runs, STS serial
# over 1..16-bit patterns, RGB 8-bit distribution and minimum distance, 30 p-samples each in
# the slow set (about 30 s in all unloaded); the default set runs the two whose control below
# fails a repeating stream, at 10 p-samples (a third of the cost: dieharder's own arithmetic,
# not the writer, is the time)
DIEHARDER_TESTS = [["-d", "1"], ["-d", "2"], ["-d", "4"], ["-d", "101"], ["-d", "102"], ["-d", "200", "-n", "8"],
                   ["-d", "203"]]
CONTROLLED = DIEHARDER_TESTS[2:4]
needs_dieharder = pytest.mark.skipif(
    DIEHARDER is None, reason="dieharder is not installed: make test installs Debian's package where it can "
                              "(apt-get install dieharder)")


def _dieharder(kind: str, test: list[str], p_samples: int = 10) -> list[str]:
    """dieharder's verdicts (PASSED, WEAK, FAILED) on the writer's output, ``p_samples`` p-samples."""
    writer = subprocess.Popen([sys.executable, "-c", WRITER, kind], stdout=subprocess.PIPE)
    try:
        out = subprocess.run([DIEHARDER, "-g", "200", *test, "-p", str(p_samples)], stdin=writer.stdout,
                             capture_output=True, text=True, timeout=300)
    finally:
        writer.stdout.close()
        writer.kill()
        writer.wait()
    verdicts = [line.rsplit("|", 1)[-1].strip() for line in out.stdout.splitlines()
                if line.count("|") >= 5 and not line.lstrip().startswith("test_name")]
    assert verdicts, out.stdout + out.stderr
    return verdicts


@needs_dieharder
@pytest.mark.parametrize("test", CONTROLLED, ids=[" ".join(t) for t in CONTROLLED])
def test_pack_streams_pass_dieharder(test):
    assert "FAILED" not in _dieharder("streams", test)


@pytest.mark.slow
@needs_dieharder
@pytest.mark.parametrize("test", DIEHARDER_TESTS, ids=[" ".join(t) for t in DIEHARDER_TESTS])
def test_pack_streams_pass_dieharder_on_30_p_samples(test):
    assert "FAILED" not in _dieharder("streams", test, p_samples=30)


@needs_dieharder
@pytest.mark.parametrize("test", CONTROLLED, ids=[" ".join(t) for t in CONTROLLED])
def test_dieharder_fails_a_stream_whose_draws_repeat(test):
    """The control, at the default set's 10 p-samples: what the battery guards against is caught."""
    assert "FAILED" in _dieharder("repeat", test)


def test_draws_on_one_device_named_two_ways_continue_one_stream(monkeypatch):
    """A pack's streams drawn on "cuda" and then on "cuda:0" (the stream's device, then a
    tensor's) are one device: each draw continues the same counters. Emulated on the CPU's
    tensor path with "cpu" and "cpu:0", which torch also names apart. The H200 run of the CUDA
    set found the stale mirror: the draw after one on the other name repeated a draw number."""
    monkeypatch.setattr(_rng, "_numpy_path", lambda device: False)
    names = [f"0/config-{k}/noise" for k in range(3)]
    mixed, plain = stream(names), stream(names)
    for device in ("cpu", torch.device("cpu", 0), "cpu", torch.device("cpu", 0), "cpu"):
        assert torch.equal(mixed.words(9, device), plain.words(9, "cpu"))
