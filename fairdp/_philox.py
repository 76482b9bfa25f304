"""Philox4x64-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011),
the counter-based generator behind each config's random streams.

A counter-based generator is a keyed bijection of a counter: block ``c`` under key ``k`` is
``philox(c, k)``, four 64-bit words, with no state between blocks. So any config's draw can
be computed anywhere, in any order, without the draws of the configs packed beside it.
The layout fairdp uses (``_rng.PackStream``): config k's draw number ``d`` of a stream is the
words of blocks ``(j + 1, d, 0, 0)``, j = 0, 1, ..., under the config's key; it is exactly what
NumPy's ``Philox(key=key_k, counter=[0, d, 0, 0])`` produces, which is the CPU path.

Here: the same function in torch integer operations, for a whole pack (K keys) in one
vectorised computation on any device (the CUDA path); the tests check it against NumPy's C
implementation and Random123's published known-answer vectors. torch has no unsigned 64-bit
arithmetic, so the words are int64 tensors holding the bit patterns, products wrap modulo
2^64, and 64 x 64 -> 128-bit products are assembled from 32-bit halves.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

ROUNDS = 10
MULTIPLIERS = (0xD2E7470EE14C6C93, 0xCA5A826395121157)
WEYL = (0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B)  # key schedule: golden ratio, sqrt(3) - 1
_LOW32 = 0xFFFFFFFF


def as_signed(word: int) -> int:
    """The int64 holding the bit pattern of the unsigned 64-bit ``word``."""
    word &= (1 << 64) - 1
    return word - (1 << 64) if word >= 1 << 63 else word


def _high32(x: torch.Tensor) -> torch.Tensor:
    """x >> 32 as an unsigned (logical) shift: torch shifts int64 arithmetically."""
    return (x >> 32) & _LOW32


def _mulhilo(a: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(high, low) 64-bit words of the 128-bit product of the words ``a`` and constant ``m``."""
    a_lo, a_hi = a & _LOW32, _high32(a)
    m_lo, m_hi = m & _LOW32, m >> 32
    ll, lh, hl, hh = a_lo * m_lo, a_lo * m_hi, a_hi * m_lo, a_hi * m_hi  # each < 2^64, wrapped
    mid = _high32(ll) + (lh & _LOW32) + (hl & _LOW32)                    # < 3 * 2^32: exact
    high = hh + _high32(lh) + _high32(hl) + _high32(mid)
    low = (mid << 32) | (ll & _LOW32)
    return high, low


def philox4x64(counter: tuple[torch.Tensor, ...], key: tuple[torch.Tensor, torch.Tensor],
               rounds: int = ROUNDS) -> tuple[torch.Tensor, ...]:
    """The four output words of Philox4x64-``rounds`` for broadcastable int64 tensors holding
    the counter words (c0, c1, c2, c3) and key words (k0, k1)."""
    x0, x1, x2, x3 = counter
    k0, k1 = key
    for r in range(rounds):
        if r:
            k0 = k0 + as_signed(WEYL[0])
            k1 = k1 + as_signed(WEYL[1])
        hi0, lo0 = _mulhilo(x0, MULTIPLIERS[0])
        hi1, lo1 = _mulhilo(x2, MULTIPLIERS[1])
        x0, x1, x2, x3 = hi1 ^ x1 ^ k0, lo1, hi0 ^ x3 ^ k1, lo0
    return x0, x1, x2, x3


def as_words(values, device: torch.device | str) -> torch.Tensor:
    """An int64 tensor on ``device`` holding the bit patterns of unsigned 64-bit ``values``."""
    if isinstance(values, torch.Tensor):
        return values.to(device)
    return torch.as_tensor(np.array(values, dtype=np.uint64).view(np.int64), device=device)


def _blocks(keys: torch.Tensor, draw: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """(K, 4 * len(blocks)) words of blocks (j, draw_k, 0, 0), j in ``blocks``, under keys (K, 2)."""
    c0 = blocks.expand(len(keys), len(blocks))
    c1 = draw[:, None].expand_as(c0)
    zero = torch.zeros((), device=keys.device, dtype=torch.int64)
    out = philox4x64((c0, c1, zero, zero), (keys[:, :1], keys[:, 1:]))
    return torch.stack(out, dim=-1).reshape(len(keys), 4 * len(blocks))


# On CUDA the ten rounds are some 570 elementwise operations, each a pass through memory when run
# one kernel at a time: compiled, they are one kernel (Triton), and a draw's cost is its output.
# None: not tried yet; False: compiling failed once (a warning) and words are computed eagerly.
_compiled_blocks = None


def _fused_blocks():
    global _compiled_blocks
    if _compiled_blocks is None:
        _compiled_blocks = torch.compile(_blocks, dynamic=True, fullgraph=True)
    return _compiled_blocks


def words(keys, draws, n_words: int, device: torch.device | str) -> torch.Tensor:
    """(K, n_words) int64 tensor: config k's first ``n_words`` 64-bit words of draw
    ``draws[k]`` under key ``keys[k]`` ((K, 2) and (K,) unsigned 64-bit values, as NumPy
    arrays or int64 tensors of their bits), computed on ``device`` (on CUDA by one compiled
    kernel where torch.compile works, else eagerly: the same words)."""
    global _compiled_blocks
    device = torch.device(device)
    keys, draw = as_words(keys, device), as_words(draws, device)
    blocks = torch.arange(1, -(-n_words // 4) + 1, device=device, dtype=torch.int64)
    if device.type == "cuda" and _compiled_blocks is not False:
        try:
            return _fused_blocks()(keys, draw, blocks)[:, :n_words]
        except Exception as err:  # noqa: BLE001 - any compiler failure: the eager words are the same
            warnings.warn(f"fairdp: compiled Philox words are off ({type(err).__name__}: {err}); "
                          "computing them eagerly", stacklevel=2)
            _compiled_blocks = False
    return _blocks(keys, draw, blocks)[:, :n_words]


def words_to_uniform(w: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """U[0, 1) values from 64-bit words as NumPy's ``Generator.random`` makes them: float64
    from a word's top 53 bits; float32 from each 32-bit half (low half first), top 24 bits."""
    if dtype == torch.float64:
        return ((w >> 11) & ((1 << 53) - 1)).to(torch.float64)[:, :n] * 2.0**-53
    halves = torch.stack((w & _LOW32, _high32(w)), dim=-1).reshape(len(w), -1)[:, :n]
    return (halves >> 8).to(torch.float32) * 2.0**-24
