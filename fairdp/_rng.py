"""Per-configuration random streams for packed training.

The engine trains K configurations at once, as tensors with a leading config axis K.
Slice k of a packed draw comes from configuration k's own stream alone, so training
configuration k inside a pack consumes the same random numbers, and gives the same result,
as training it alone: packing is an execution detail, never a change of run.

The engine's streams are ``PackStream``s: counter-based (Philox4x64-10, ``fairdp._philox``),
config k's draw d being a pure function of (its key, d), where the key is hashed from
(seed, config id, stream name). A (K, ...) draw is therefore one computation for the whole
pack: one vectorised pass per config in NumPy's C Philox on a CPU, one batched tensor
computation on a GPU, with the same numbers on both.

``generators`` is accepted in four forms throughout: ``None`` (the global generator), one
``torch.Generator`` (one draw of ``shape``), a ``PackStream`` of K configs, or a list/tuple
of K ``torch.Generator`` (each a draw of ``(K, *shape)`` whose slice k comes from config k).
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import numpy as np
import torch

from fairdp import _philox


class _Counters:
    """The draw counters a stream and its subsets share: on the host, and mirrored on each
    device that draws, so that a device's draws read and advance them there (no copy to the
    device, no wait for it). A host-side draw makes the mirrors stale; a device draw advances
    the host's copy too."""

    def __init__(self, n: int):
        self.host = np.zeros(n, dtype=np.uint64)
        self.mirrors: dict[torch.device, torch.Tensor] = {}

    def __getstate__(self):
        return {"host": self.host, "mirrors": {}}

    def next_on_host(self, rows: np.ndarray) -> np.ndarray:
        draws = self.host[rows]
        self.host[rows] = draws + np.uint64(1)
        self.mirrors.clear()
        return draws

    def next_on(self, device: torch.device, rows: torch.Tensor, host_rows: np.ndarray) -> torch.Tensor:
        # a draw on one device makes every other device's mirror stale (the host's copy is
        # advanced here): one device named two ways ("cuda", "cuda:0") once kept two mirrors,
        # and the stale one drew a number already used
        for other in [d for d in self.mirrors if d != device]:
            del self.mirrors[other]
        if device not in self.mirrors:
            self.mirrors[device] = _philox.as_words(self.host, device)
        mirror = self.mirrors[device]
        draws = mirror[rows]
        mirror[rows] = draws + 1
        self.host[host_rows] += np.uint64(1)
        return draws


class PackStream:
    """K configs' streams of one name, counter-based: config k's draw number d is the
    Philox4x64-10 blocks (1, d, 0, 0), (2, d, 0, 0), ... under key k.

    Each draw advances every config's draw counter by one. ``stream[index]`` is the stream
    of configs ``index`` sharing these counters, so a subset draws what the whole pack would
    have drawn for its configs. Pickles with its counters (checkpoints).
    """

    def __init__(self, keys: np.ndarray, device: torch.device | str = "cpu", *,
                 _counters: _Counters | None = None, _rows: np.ndarray | None = None):
        self.keys = np.array(keys, dtype=np.uint64).reshape(-1, 2)  # a writable copy
        self.device = torch.device(device)
        self._counters = _Counters(len(self.keys)) if _counters is None else _counters
        self._rows = np.arange(len(self.keys)) if _rows is None else _rows
        self._on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}  # (keys, rows) uploaded once

    def __getstate__(self):
        return {**self.__dict__, "_on_device": {}}

    @classmethod
    def from_names(cls, names: Sequence[str], device: torch.device | str = "cpu") -> PackStream:
        """Keys hashed from one name per config (fairdp: "seed/config id/stream")."""
        keys = np.frombuffer(b"".join(hashlib.sha256(n.encode()).digest()[:16] for n in names),
                             dtype="<u8").reshape(-1, 2)
        return cls(keys, device)

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, index) -> PackStream:
        index = np.atleast_1d(np.arange(len(self))[index])
        return PackStream(self.keys[index], self.device, _counters=self._counters, _rows=self._rows[index])

    @property
    def draws(self) -> np.ndarray:
        """How many draws each config has made."""
        return self._counters.host[self._rows].copy()

    def _next(self) -> np.ndarray:
        """The draw numbers of a host-side draw, advancing them."""
        return self._counters.next_on_host(self._rows)

    def _next_on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(keys, draw numbers) on ``device`` for a draw there, advancing the draw numbers."""
        if device.type == "cuda" and device.index is None:  # one name per device: one mirror
            device = torch.device("cuda", torch.cuda.current_device())
        if device not in self._on_device:
            self._on_device[device] = (_philox.as_words(self.keys, device),
                                       torch.as_tensor(self._rows, dtype=torch.long, device=device))
        keys, rows = self._on_device[device]
        return keys, self._counters.next_on(device, rows, self._rows)

    def _bits(self, k: int, block: int, draws: np.ndarray) -> np.random.Philox:
        """NumPy's Philox for config k's draw ``draws[k]``, starting after block ``block``."""
        return np.random.Philox(key=self.keys[k], counter=[block, int(draws[k]), 0, 0])

    def _device_words(self, device: torch.device, n_words: int) -> torch.Tensor:
        """The next draw's words on a device: on CUDA replayed from a captured graph (see
        ``_WordGraphs``), elsewhere (and inside another capture) computed as tensor ops."""
        keys, draws = self._next_on(device)
        if device.type == "cuda" and CUDA_GRAPHS and not torch.cuda.is_current_stream_capturing():
            return _word_graphs(device).words(keys, draws, n_words)
        return _philox.words(keys, draws, n_words, device)

    def uniform(self, shape: Sequence[int], dtype: torch.dtype = torch.float32,
                device: torch.device | str | None = None) -> torch.Tensor:
        """(K, *shape) U[0, 1) values in float32 or float64 (24 or 53 random bits), as NumPy's
        ``Generator.random`` makes them from the draw's words."""
        shape, device = tuple(shape), torch.device(device) if device is not None else self.device
        draw_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        n = _size(shape)
        if _numpy_path(device):  # Generator.random converts in C as it draws: one pass
            draws = self._next()
            out = torch.empty((len(self), *shape), dtype=draw_dtype)
            np_dtype = np.float64 if draw_dtype == torch.float64 else np.float32

            def fill(k: int, block: int, part: np.ndarray) -> None:
                np.random.Generator(self._bits(k, block, draws)).random(out=part, dtype=np_dtype)

            _fill_cpu(out.numpy().reshape(len(self), n), 4 if draw_dtype == torch.float64 else 8, fill)
        else:
            n_words = n if draw_dtype == torch.float64 else -(-n // 2)
            w = self._device_words(device, n_words)
            out = _philox.words_to_uniform(w, n, draw_dtype).reshape(len(self), *shape)
        return out if out.dtype == dtype else out.to(dtype)

    def words(self, n_words: int, device: torch.device | str | None = None) -> torch.Tensor:
        """(K, n_words) int64 tensor: the next draw's first ``n_words`` 64-bit words (bit
        patterns) of every config."""
        device = torch.device(device) if device is not None else self.device
        if not _numpy_path(device):
            return self._device_words(device, n_words)
        draws = self._next()
        out = np.empty((len(self), 4 * -(-n_words // 4)), dtype=np.uint64)

        def fill(k: int, block: int, part: np.ndarray) -> None:
            part[:] = self._bits(k, block, draws).random_raw(len(part))

        _fill_cpu(out, 4, fill)
        return torch.from_numpy(out[:, :n_words].view(np.int64))

    def map_words(self, out: np.ndarray, words_per_value: int, fn) -> None:
        """Fill ``out`` (K, n) on the CPU from the next draw: ``fn(k, start, words, part)`` sets
        ``part`` = out[k, start:start + len(part)] from ``words``, the draw's words of those
        values ((len(part), words_per_value) uint64, value i's words at i * words_per_value
        onwards). The parts are computed in the drawing threads while their words are in
        cache: one pass over memory, where tensor operations on a whole draw make one a step."""

        def fill(k: int, key: np.ndarray, draw: int, first: int, part: np.ndarray) -> None:
            bits = np.random.Philox(key=key, counter=[first * words_per_value // 4, draw, 0, 0])
            # cache-sized pieces, drawn in order from one generator: the same words as one piece
            for lo in range(0, len(part), MAP_WORDS_VALUES):
                piece = part[lo:lo + MAP_WORDS_VALUES]
                raw = bits.random_raw(len(piece) * words_per_value)
                fn(k, first + lo, raw.reshape(len(piece), words_per_value), piece)

        self.map_counters(out, words_per_value, fill)

    def map_counters(self, out: np.ndarray, words_per_value: int, fn) -> None:
        """Fill ``out`` (K, n) on the CPU from the next draw, for a kernel that computes the draw's
        words itself: ``fn(k, key, draw, first, part)`` sets ``part`` = out[k, first:first + len(part)]
        from the words of values ``first`` onwards (``first`` a multiple of the values a whole
        number of Philox blocks holds) of draw number ``draw`` under ``key`` (two uint64), that is
        blocks (first * words_per_value // 4 + j + 1, draw, 0, 0), j = 0, 1, ... Spread over
        torch's CPU threads as ``map_words``; the same words."""
        draws = self._next()
        per_block = 4 // math.gcd(4, words_per_value)  # values per part boundary: whole Philox blocks

        def fill(k: int, block: int, part: np.ndarray) -> None:
            fn(k, self.keys[k], int(draws[k]), block * per_block, part)

        _fill_cpu(out, per_block, fill)

    def below(self, shape: Sequence[int], prob: float, device: torch.device | str | None = None) -> torch.Tensor:
        """(K, *shape) booleans, True with probability ``prob`` rounded to a multiple of 2^-16:
        each value is one 16-bit lane of the draw's words (a quarter of a word, lowest lane
        first) compared with round(prob * 2^16). A quarter of ``uniform``'s random bits, for
        dropout; never for a privacy mechanism, whose probabilities must be exact."""
        shape = tuple(shape)
        n, threshold = _size(shape), round(float(prob) * 65536)
        w = self.words(-(-n // 4), device)
        if w.device.type == "cpu":  # NumPy has unsigned 16-bit lanes: one comparison pass
            lanes = w.numpy().view(np.uint16)[:, :n]
            return torch.from_numpy(lanes < threshold).reshape(len(self), *shape)
        lanes = torch.stack([(w >> (16 * i)) & 0xFFFF for i in range(4)], dim=-1).reshape(len(self), -1)[:, :n]
        return (lanes < threshold).reshape(len(self), *shape)

    def scaled_below(self, shape: Sequence[int], prob: float, dtype: torch.dtype) -> torch.Tensor:
        """(K, *shape) CPU tensor of ``dtype`` (float32 or float64): 1/``prob`` where ``below`` (the same draw,
        the same lanes) is True, else 0. The mask and its scale are made in the threads that
        draw the words, block by block while they are in cache, so inverted dropout is one
        multiplication forward and one backward instead of a select and a scaling each."""
        shape = tuple(shape)
        n, threshold = _size(shape), round(float(prob) * 65536)
        draws = self._next()
        out = np.empty((len(self), 16 * -(-n // 16)), dtype=np.float64 if dtype == torch.float64 else np.float32)
        scale = out.dtype.type(1.0 / prob)

        def fill(k: int, block: int, part: np.ndarray) -> None:
            lanes = self._bits(k, block, draws).random_raw(len(part) // 4).view(np.uint16)
            np.multiply(lanes < threshold, scale, out=part)

        _fill_cpu(out, 16, fill)
        return torch.from_numpy(out[:, :n]).reshape(len(self), *shape)


# Replay a CUDA draw's ~570 elementwise kernels as one captured graph (``_WordGraphs``);
# False: eager kernels.
CUDA_GRAPHS = True


class _WordGraphs:
    """Philox words on one CUDA device replayed from captured graphs, one per (keys, length).

    Eagerly, a draw's Philox rounds are ~570 small kernels whatever K, each a launch the host
    pays for. Here each (pack keys, words per config) is captured once, after an eager
    warm-up on a side stream (kernels load outside the capture), into one memory pool shared
    by the device's draw graphs; a draw copies its draw numbers into the graph's input,
    replays it and clones the output before anything else can run in that pool. A capture
    that fails turns graphs off for the process, with a warning: eager draws give the same
    numbers."""

    def __init__(self, device: torch.device):
        self.device, self.pool = device, torch.cuda.graph_pool_handle()
        # (graph, its draw-number input, its output, the keys it reads: held so their memory
        # is never reused while the graph may replay)
        self.graphs: dict[tuple[int, int, int], tuple] = {}

    def words(self, keys: torch.Tensor, draws: torch.Tensor, n_words: int) -> torch.Tensor:
        global CUDA_GRAPHS
        key = (keys.data_ptr(), len(keys), n_words)
        if key not in self.graphs:
            try:
                self.graphs[key] = self._capture(keys, draws, n_words)
            except RuntimeError as err:
                warnings.warn(f"fairdp: CUDA graphs of random draws are off ({err}); drawing eagerly", stacklevel=3)
                CUDA_GRAPHS = False
                return _philox.words(keys, draws, n_words, self.device)
        graph, static_draws, out, _ = self.graphs[key]
        static_draws.copy_(draws)
        graph.replay()
        return out.clone()

    def _capture(self, keys, draws, n_words):
        static_draws = draws.clone()
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            _philox.words(keys, static_draws, n_words, self.device)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = _philox.words(keys, static_draws, n_words, self.device)
        return graph, static_draws, out, keys


_graphs_by_device: dict[torch.device, _WordGraphs] = {}


def _word_graphs(device: torch.device) -> _WordGraphs:
    if device not in _graphs_by_device:
        _graphs_by_device[device] = _WordGraphs(device)
    return _graphs_by_device[device]


def _numpy_path(device: torch.device) -> bool:
    """CPU draws run NumPy's Philox in C; other devices compute the same words as tensors."""
    return device.type == "cpu"


def _size(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


# ``map_words`` computes at most this many values at once, so that their words and temporaries
# stay in a core's cache (the pieces continue one generator: the same words as one piece).
MAP_WORDS_VALUES = 1 << 13
# Below this many values a draw is filled in the calling thread: a thread hand-off costs more.
PARALLEL_MIN_VALUES = 1 << 15
_pool: ThreadPoolExecutor | None = None


def _fill_cpu(out: np.ndarray, per_block: int, fill) -> None:
    """Fill ``out`` (K, n) by ``fill(k, first block, out[k, part])`` over parts that start on a
    Philox block (``per_block`` values each), spread over torch's CPU threads. A counter-based
    stream can be cut anywhere on a block: the parts together are exactly the one fill."""
    global _pool
    k, n = out.shape
    threads = torch.get_num_threads()
    if threads == 1 or k * n < PARALLEL_MIN_VALUES:
        for i in range(k):
            fill(i, 0, out[i])
        return
    cuts = max(1, -(-threads // k))  # split each config's row so every thread has work
    step = -(-n // cuts // per_block) * per_block
    parts = [(i, lo, out[i, lo:lo + step]) for i in range(k) for lo in range(0, n, step)]
    if _pool is None or _pool._max_workers != threads:
        _pool = ThreadPoolExecutor(threads, thread_name_prefix="fairdp-rng")
    for done in _pool.map(lambda part: fill(part[0], part[1] // per_block, part[2]), parts):
        del done


Generators = torch.Generator | Sequence[torch.Generator] | PackStream | None


def make_generators(seeds: Sequence[int], device: torch.device | str) -> list[torch.Generator]:
    """One generator per seed, seeded with it, living on ``device``."""
    gens = []
    for seed in seeds:
        gen = torch.Generator(device=device)
        gen.manual_seed(int(seed))
        gens.append(gen)
    return gens


def per_config(generators: Generators) -> bool:
    """Whether ``generators`` gives one stream per config (a draw with a leading K axis)."""
    return isinstance(generators, (list, tuple, PackStream))


def _device_of(generators: Generators, device: torch.device | str | None) -> torch.device:
    if device is not None:
        return torch.device(device)
    if isinstance(generators, PackStream):
        return generators.device
    if per_config(generators):
        return generators[0].device if generators else torch.device("cpu")
    if isinstance(generators, torch.Generator):
        return generators.device
    return torch.device("cpu")


def uniform(
    shape: Sequence[int],
    generators: Generators,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    low: float = 0.0,
    high: float = 1.0,
) -> torch.Tensor:
    """U[low, high) draws of ``shape``, or ``(K, *shape)`` for K generators.

    With K generators, ``out[k]`` is filled in place from generator k, so it equals what
    ``uniform(shape, generators[k])`` returns: the property packed training relies on.
    ``device`` defaults to the generators' device.
    """
    shape = tuple(shape)
    dev = _device_of(generators, device)
    if isinstance(generators, PackStream):
        u = generators.uniform(shape, dtype, dev)
        if high - low != 1.0:
            u.mul_(high - low)
        return u if low == 0.0 else u.add_(low)
    if not per_config(generators):
        return torch.empty(shape, device=dev, dtype=dtype).uniform_(low, high, generator=generators)
    out = torch.empty((len(generators), *shape), device=dev, dtype=dtype)
    for k, gen in enumerate(generators):
        out[k].uniform_(low, high, generator=gen)
    return out


def words(n_words: int, generators: Generators, *, device: torch.device | str | None = None) -> torch.Tensor:
    """Uniform 64-bit words (int64 bit patterns): (K, n_words) for K per-config streams, else
    (n_words,). From a ``PackStream`` one draw of its words; from torch generators each word is
    two 32-bit draws (``randint``'s range is exact there), so every bit pattern is equally likely.
    The source of every privacy mechanism's randomness: integer arithmetic on words samples
    exactly the probabilities the guarantee is computed from."""
    dev = _device_of(generators, device)
    if isinstance(generators, PackStream):
        return generators.words(n_words, dev)

    def of(gen):
        halves = torch.randint(0, 1 << 32, (2, n_words), device=dev, dtype=torch.int64, generator=gen)
        return (halves[0] << 32) | halves[1]

    if per_config(generators):
        return torch.stack([of(gen) for gen in generators])
    return of(generators)


SIGN_BIT = -(1 << 63)
"""XOR with it flips a word's sign bit: the unsigned order of 64-bit words as the signed order."""


def coins(
    shape: Sequence[int],
    prob: float | torch.Tensor,
    generators: Generators,
    *,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Booleans (K, *shape) (or ``shape`` for one generator), each True with probability
    exactly floor(prob * 2^64) / 2^64: never more than ``prob`` (a Poisson sample's rate must
    not exceed the q its accountant charges for), and less by under 2^-64. ``prob`` is a
    float, or a tensor of them broadcastable to the (K, *shape) draw (per-config rates as
    (K, 1, ...); its values are read on the host).

    A coin compares a 64-bit unsigned word U with the threshold T = floor(prob * 2^64), digit
    by digit in base 256: its first byte (one draw's byte lanes, lowest lane first) decides
    it unless the byte equals T's top byte t (probability 1/256); only those coins take a
    word of a second draw, whose upper 56 bits are compared with T's lower 56. So
    P(True) = t / 2^8 + 2^-8 (T mod 2^56) / 2^56 = T / 2^64 exactly, from an eighth of the
    words a word per coin would take. Every coin takes its byte whatever is asked of it,
    and a config's second-draw words are the first of its own draw (counter-based streams):
    a config's coins do not depend on its pack, and the second draw is made (one block at
    least) even when no coin needs it, so the draw counters advance alike everywhere."""
    shape = tuple(shape)
    values = prob.detach().cpu().double() if isinstance(prob, torch.Tensor) else torch.tensor(float(prob), dtype=torch.float64)
    if not bool(((values >= 0) & (values <= 1)).all()):
        raise ValueError(f"coins: prob must be in [0, 1], got {prob}")
    exact = [math.floor(Fraction(float(v)) * (1 << 64)) for v in values.reshape(-1).tolist()]
    n = _size(shape)
    w = words(-(-n // 8), generators, device=device)
    lead = w.shape[:-1]
    w = w.reshape(-1, w.shape[-1])  # (R, words): R streams, one without a config axis
    # T's top byte and the rest, broadcast (R, *shape); T = 2^64 (prob 1) as 255 * 2^56 + 2^56,
    # so that every lane up to 255 holds: below 255 by its byte, 255 by any 56 upper bits
    tops = [min(t >> 56, 255) for t in exact]
    rest = torch.tensor([t - (top << 56) for t, top in zip(exact, tops)], dtype=torch.int64)
    rest = rest.reshape(values.shape if lead else (1, *values.shape))
    top = torch.tensor(tops, dtype=torch.uint8).reshape(rest.shape)
    if w.device.type == "cpu":  # NumPy's byte comparisons and nonzero: one pass each, several times torch's
        lanes = w.numpy().view(np.uint8)[:, :n].reshape(len(w), *shape)
        tied_np = np.equal(lanes, top.numpy())
        out, tied = torch.from_numpy(np.less(lanes, top.numpy())), torch.from_numpy(tied_np)
        ties = torch.from_numpy(np.count_nonzero(tied_np.reshape(len(w), n), axis=1))
        at = tuple(torch.from_numpy(i) for i in np.nonzero(tied_np))
    else:  # the same lanes by shifts
        lanes = torch.stack([(w >> (8 * i)) & 0xFF for i in range(8)], dim=-1).reshape(len(w), -1)[:, :n]
        lanes, top = lanes.reshape(len(w), *shape), top.to(w.device, torch.int64)
        out, tied = lanes < top, lanes == top
        ties, at = tied.reshape(len(w), n).sum(dim=1), tied.nonzero(as_tuple=True)
    extra = words(max(int(ties.max()), 1), generators, device=device).reshape(len(w), -1)
    # a stream's i-th tie (in coin order) takes its i-th word of the second draw
    stream = at[0]
    rank = torch.arange(len(stream), device=w.device) - (torch.cumsum(ties, 0) - ties)[stream]
    upper = (extra[stream, rank] >> 8) & ((1 << 56) - 1)  # the word's upper 56 bits, non-negative
    out[at] = upper < rest.to(w.device).expand(tied.shape)[at]
    return out.reshape(*lead, *shape)


def bernoulli_mask(
    shape: Sequence[int],
    keep_prob: float | torch.Tensor,
    generators: Generators,
    *,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Boolean mask, True with probability ``keep_prob``: ``uniform < keep_prob``.

    Same per-generator layout as :func:`uniform`; ``keep_prob`` is a float or a tensor
    broadcastable to the output (per-config rates as shape (K, 1, ...)).
    """
    u = uniform(shape, generators, device=device)
    if isinstance(keep_prob, torch.Tensor):
        keep_prob = keep_prob.to(device=u.device)
    return u < keep_prob


def dropout(x: torch.Tensor, keep_prob: float, generators: Generators) -> torch.Tensor:
    """Inverted dropout of ``x`` (K, *shape) with config k's mask from its own stream: units
    kept with probability ``keep_prob`` and scaled by 1/keep_prob, the rest zero.

    From a ``PackStream`` the mask is ``PackStream.below``'s 16-bit lanes (keep_prob rounded
    to a multiple of 2^-16: 0.9 becomes 0.899994) applied with ``torch.where`` (two passes
    over x, and backward keeps a boolean mask). With torch generators the mask is a float
    draw in x's dtype (float32 under bf16 autocast, so the stream is the same at every
    precision)."""
    if isinstance(generators, PackStream):
        if _numpy_path(x.device) and x.dtype in (torch.float32, torch.float64):
            # x * (keep / keep_prob) equals where(keep, x, 0) * (1 / keep_prob) bit for bit
            return x * generators.scaled_below(x.shape[1:], keep_prob, x.dtype)
        keep = generators.below(x.shape[1:], keep_prob, x.device)
        return torch.where(keep, x, 0.0).mul_(1.0 / keep_prob)
    draw = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    mask = uniform(x.shape[1:], generators, device=x.device, dtype=draw).lt_(keep_prob).mul_(1.0 / keep_prob)
    return x * mask.to(x.dtype)


NORMAL_TAIL_MASS = 2.0**-106
"""Per pair of ``normal`` draws from a ``PackStream``: the standard normal radius' mass beyond
the largest radius the draw can give, its distance from the ideal Gaussian's tails."""


def normal(
    shape: Sequence[int],
    generators: Generators,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Standard normal draws with the per-generator layout of :func:`uniform`.

    From a ``PackStream`` by Box-Muller in float64 whatever ``dtype``, the radius
    sqrt(-2 ln u) from a uniform u on (0, 1] resolved to 2^-106 (two words): the largest |z| is
    about 12.1, and the normal's mass beyond the largest radius is 2^-106 per pair
    (``NORMAL_TAIL_MASS``), where 53-bit uniforms cut it at 8.6 (mass 2^-53).
    """
    shape = tuple(shape)
    dev = _device_of(generators, device)
    if isinstance(generators, PackStream):
        n = _size(shape)
        half = -(-n // 2)
        w = generators.words(3 * half, dev)
        mask = (1 << 53) - 1
        # u uniform on (0, 1] to 2^-106: a's 53 bits, and b's inside a's lowest cell (0, 2^-53]
        a = (w[:, :half] >> 11).bitwise_and_(mask)
        if dev.type == "cpu":  # b only where a is 0 (probability 2^-53), and no temporaries: a third of the time
            zero = a == 0
            u = a.add_(1).to(torch.float64).mul_(2.0**-53)
            if bool(zero.any()):
                u[zero] = (((w[:, half:2 * half] >> 11) & mask)[zero] + 1).to(torch.float64) * 2.0**-106
        else:  # the same values without a host sync
            b = (w[:, half:2 * half] >> 11) & mask
            u = torch.where(a == 0, (b + 1).to(torch.float64) * 2.0**-106, (a + 1).to(torch.float64) * 2.0**-53)
        radius = u.log_().mul_(-2.0).sqrt_()
        angle = (w[:, 2 * half:] >> 11).bitwise_and_(mask).to(torch.float64).mul_(2.0**-53 * 2.0 * np.pi)
        z = torch.empty(len(generators), 2 * half, dtype=torch.float64, device=dev)
        torch.cos(angle, out=z[:, :half]).mul_(radius)
        torch.sin(angle, out=z[:, half:]).mul_(radius)
        return z[:, :n].reshape(len(generators), *shape).to(dtype)
    if not per_config(generators):
        return torch.empty(shape, device=dev, dtype=dtype).normal_(generator=generators)
    out = torch.empty((len(generators), *shape), device=dev, dtype=dtype)
    for k, gen in enumerate(generators):
        out[k].normal_(generator=gen)
    return out


# -- Poisson samples by geometric gaps ----------------------------------------------------------

POISSON_SAMPLERS = ("gaps", "coins")
"""How DP-SGD and PF-LD draw a Poisson sample of the training rows (``train.sampler``): the gaps
between sampled rows (``gap_sample``, the default since it exists) or a coin per row (``coins``,
what rows without a ``sampler`` column were drawn by). The same law, other samples."""

GAP_TOLERANCE = 1e-12
"""Relative error the float64 part of ``gap_sample`` allows its logarithms (their bound is
about 2^-50): a gap whose floor the error could move is decided in exact integers instead."""


def exact_threshold(prob: float) -> int:
    """T = floor(prob * 2^64): ``coins``' threshold, the numerator of the exact rate T / 2^64."""
    return math.floor(Fraction(float(prob)) * (1 << 64))


def _log_rate(skip: int) -> float:
    """ln r for r = skip / 2^64 in (0, 1), to about 2^-51 relative: through log1p near r = 1,
    where log(r) would lose digits."""
    p = 1.0 - skip * 2.0**-64
    return math.log1p(-((1 << 64) - skip) * 2.0**-64) if p < 0.5 else math.log(skip * 2.0**-64)


def _below_power(u: int, tail: list[int], skip: int, g: int, more) -> bool:
    """Whether V < r^g exactly, for V = (u + W) / 2^64 with W in [0, 1) the uniform whose 64-bit
    words are ``tail`` and, as the comparison needs them (at most g in all), ``more()``'s, which
    are appended to ``tail``: V is one number for every comparison of its gap. r = skip / 2^64,
    and r^g = skip^g / 2^(64 g) has 64 g bits, so V's first 64 (g + 1) bits decide; V = r^g
    exactly has probability 0 and counts as not below."""
    if g == 0:
        return True  # V < 1
    power, bits = skip ** g, 64 * g
    v, m, used = u, 64, 0
    while True:
        if m >= bits:  # r^g is a multiple of 2^-m: V's m-bit prefix decides
            return v + 1 <= power << (m - bits)
        head = power >> (bits - m)
        if v + 1 <= head:
            return True
        if v > head or (v == head and power & ((1 << (bits - m)) - 1) == 0):
            return False
        if used == len(tail):
            tail.append(more())
        v, m, used = (v << 64) | tail[used], m + 64, used + 1


def _exact_gap(u: int, skip: int, low: int, high: int, more) -> int:
    """The gap G = max{g : V < r^g} (``_below_power``), known to lie in [low, high]: ``high`` a
    cap (a gap of the training set's size or more ends the sample whatever it is)."""
    g, tail = low, []
    while g < high and _below_power(u, tail, skip, g + 1, more):
        g += 1
    return g


def gap_sample(n: int, prob: float, stream: PackStream, *, tolerance: float = GAP_TOLERANCE) -> list[np.ndarray]:
    """Each config's Poisson sample of rows 0..n-1 (sorted int64 indices), every row included
    independently with probability exactly T / 2^64, T = floor(prob * 2^64) (``coins``' rate),
    drawn as the gaps between included rows: O(prob n) words, where ``coins`` takes n bytes.

    The gaps are i.i.d. geometric, P(G >= g) = r^g with r = 1 - T / 2^64, so that rows are
    included independently at the rate: G = max{g : V < r^g} for V uniform on (0, 1), whose
    first 64 bits are a word u of config k's first draw (one word a gap, in order). Where
    float64 logarithms put the floor of ln(V) / ln(r) over all V of u's cell beyond doubt (their
    error is bounded by ``tolerance`` relative, a margin about 10^4 times the bound), that is G;
    elsewhere (about one gap in 10^11, and the cells that straddle an r^g) G is decided
    exactly, in integers, with V's further bits from words of the second draw, in the order
    such gaps occur. Two draws a call whatever is needed (counter-based streams: each config's
    words are its own, and its sample does not depend on its pack)."""
    if not 0 <= prob <= 1:
        raise ValueError(f"gap_sample: prob must be in [0, 1], got {prob}")
    first, second = stream._next(), stream._next()
    threshold = exact_threshold(prob)
    k = len(stream)
    if threshold == 0 or n == 0:
        return [np.empty(0, dtype=np.int64) for _ in range(k)]
    if threshold >= 1 << 64:
        return [np.arange(n, dtype=np.int64) for _ in range(k)]
    skip = (1 << 64) - threshold
    log_r = _log_rate(skip)
    expected = n * threshold * 2.0**-64
    batch = int(expected + 6 * math.sqrt(expected) + 16)  # words a round: the sample's size, rarely short
    words_of = [stream._bits(c, 0, first) for c in range(k)]
    extra_of: dict[int, np.random.Philox] = {}  # made when a gap first needs it: rarely

    def more(c: int) -> int:
        if c not in extra_of:
            extra_of[c] = stream._bits(c, 0, second)
        return int(extra_of[c].random_raw())

    picked: list[list[np.ndarray]] = [[] for _ in range(k)]
    at = np.zeros(k, dtype=np.int64)  # each config's first row not yet passed
    live = np.arange(k)
    while len(live):
        u = np.stack([words_of[c].random_raw(batch) for c in live])  # one word a gap, in order
        gaps = _gaps(u, skip, log_r, n, tolerance, live, more)
        rows = at[live, None] + np.cumsum(gaps + 1, axis=1) - 1
        for row, c in enumerate(live):
            picked[c].append(rows[row][rows[row] < n])
        at[live] = np.where(rows[:, -1] < n, rows[:, -1] + 1, n)
        live = live[at[live] < n]
    return [np.concatenate(p) for p in picked]


def _gaps(u: np.ndarray, skip: int, log_r: float, n: int, tolerance: float, configs: np.ndarray,
          more) -> np.ndarray:
    """The gaps (capped at n) of the words ``u`` (R, m), row r config ``configs[r]``'s words in
    order: ``gap_sample``'s float64 decision, and the exact one where it is in doubt, with further
    words from ``more(config)``."""
    # V in [u, u + 1) / 2^64: ln(V) / ln(r) in (x_low, x_high]
    with np.errstate(divide="ignore"):
        x_high = np.log(u.astype(np.float64) * 2.0**-64) / log_r  # inf for u = 0
    x_low = np.maximum(np.log((u.astype(np.float64) + 1.0) * 2.0**-64) / log_r, 0.0)
    scale = 1.0 / -log_r + 1.0
    g_low = np.floor(x_low - tolerance * (x_low + scale))
    g_high = np.floor(x_high + tolerance * (x_high + scale))
    gaps = np.clip(g_low, 0, n).astype(np.int64)
    for row, i in zip(*np.nonzero((g_low != g_high) & (g_low < n))):  # row-major: each row's gap order
        high = int(min(g_high[row, i], n)) if np.isfinite(g_high[row, i]) else n
        gaps[row, i] = _exact_gap(int(u[row, i]), skip, max(int(g_low[row, i]), 0), high,
                                  lambda c=int(configs[row]): more(c))
    return gaps
