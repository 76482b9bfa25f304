"""Local DP mechanisms on encoded representations (FEDERATE, DPNR, CAPE).

Every mechanism works on rows: the last dimension holds the D features of one example,
and any leading dimensions are batch or config axes. Normalisation is per row, and the
noise is i.i.d. per entry: the grid discrete Laplace mechanism (``fairdp.privacy._discrete``),
whose eps is computed from the integer tables it samples, drawn from 64-bit words of
:mod:`fairdp._rng` so that a packed (K, B, D) call with K generators equals K separate
(B, D) calls.

Three defects of the public reference code are deliberately not repeated:
FEDERATE's code divides by the L2 norm (the proof of its eq. 3 needs L1; the variant is
kept as :func:`l2_privatize_like_federate_code`, an audit target only); DPNR's code draws
one scalar noise per example and broadcasts it over the row; CAPE's code min-max
normalises over the whole batch and shares one noise vector across the batch.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from fairdp import _rng
from fairdp.errors import InputError
from fairdp.privacy import _grid_kernel
from fairdp.privacy._discrete import V_CUMULATIVE, GridLaplace, laplace_l1, laplace_minmax

Eps = float | Sequence[float] | torch.Tensor


def _check_positive(name: str, value: float | torch.Tensor) -> None:
    """InputError unless ``value`` (a number or every entry of a tensor) is finite and > 0."""
    if isinstance(value, torch.Tensor):
        bad = value[~(torch.isfinite(value) & (value > 0))]
        if bad.numel():
            _check_positive(name, bad[0].item())
        return
    if isinstance(value, (list, tuple)) and value:
        for v in value:
            _check_positive(name, v)
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{name} must be a number, a sequence of numbers or a tensor, got {type(value).__name__}")
    if not math.isfinite(value):
        raise InputError(f"{name} must be finite, got {value}")
    if value <= 0:
        raise InputError(f"{name} must be > 0, got {value}")


def _check_unit_interval(name: str, value: float | torch.Tensor) -> None:
    """InputError unless 0 <= value < 1 (every entry of a tensor)."""
    if isinstance(value, torch.Tensor):
        bad = value[~((value >= 0) & (value < 1))]
        if bad.numel():
            _check_unit_interval(name, bad[0].item())
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{name} must be a number or a tensor, got {type(value).__name__}")
    if not 0 <= value < 1:
        raise InputError(f"{name} must be in [0, 1), got {value}")


def _noise_shape(x: torch.Tensor, generator: _rng.Generators) -> tuple[int, ...]:
    """Shape of one generator's draw: all of ``x``, or ``x`` less its leading K axis."""
    if not _rng.per_config(generator):
        return tuple(x.shape)
    if x.dim() == 0 or x.shape[0] != len(generator):
        raise InputError(
            f"generator: {len(generator)} per-config streams need a leading axis of that "
            f"size, got input of shape {tuple(x.shape)}"
        )
    return tuple(x.shape[1:])


# -- the grid discrete Laplace mechanism on tensors (tables: fairdp.privacy._discrete) -----------

@dataclass(frozen=True)
class _DeviceTables:
    """M mechanisms' tables stacked on one device, and which of them each leading slice uses."""

    which: torch.Tensor         # (K,) index of each slice's mechanism
    u_table: torch.Tensor       # (M * W,) int64 bits: mechanism j's packed alias bucket i at j * W + i
    u_bits: torch.Tensor        # (M,)
    v_cumulative: torch.Tensor  # (VMAX,) V's cumulative counts, sign bit flipped (signed order)
    zero: torch.Tensor          # (M,)
    t: torch.Tensor             # (M,)
    bound: torch.Tensor         # (M,)
    clamp: torch.Tensor         # (M,)
    scale_up: torch.Tensor      # (M,) 2^g, float64: x * 2^g is exact
    gamma: torch.Tensor         # (M,) 2^-g, float64


def _stack(mechs: list[GridLaplace], which: list[int], device: torch.device) -> _DeviceTables:
    width = 1 << max(m.u_bits for m in mechs)
    table = np.zeros((len(mechs), width), dtype=np.uint64)
    for j, m in enumerate(mechs):
        table[j, :len(m.u_table)] = m.u_table

    def per(values, dtype=torch.int64):
        return torch.tensor(values, device=device, dtype=dtype)

    return _DeviceTables(
        per(which), torch.as_tensor(table.reshape(-1).view(np.int64), device=device),
        per([m.u_bits for m in mechs]),
        torch.as_tensor(V_CUMULATIVE.view(np.int64) ^ np.int64(_rng.SIGN_BIT), device=device),
        per([m.zero_threshold for m in mechs]), per([m.t for m in mechs]), per([m.bound for m in mechs]),
        per([m.clamp for m in mechs]), per([math.ldexp(1.0, m.grid_exponent) for m in mechs], torch.float64),
        per([m.gamma for m in mechs], torch.float64))


def _grid_laplace(x: torch.Tensor, tables: _DeviceTables, generator: _rng.Generators) -> torch.Tensor:
    """The mechanism of ``fairdp.privacy._discrete`` on ``x`` viewed as (K, n): slice k rounded to
    its mechanism's grid, plus its exact discrete Laplace noise, clamped, released as grid points.
    Three words per entry, interleaved (zero and sign, V, U). The value is the grid point
    exactly; the gradient is the identity (the noise is additive, as in the continuous mechanism)."""
    k = len(tables.which)
    flat = x.detach().reshape(k, -1)
    if isinstance(generator, _rng.PackStream) and x.device.type == "cpu":
        released = _released_on_host(flat, tables, generator)
    else:
        released = _released(flat, tables, generator)
    released = released.view_as(x)
    if not x.requires_grad:
        return released
    # the value is exactly the released grid point (x - x is +0 for finite x); d out / d x = I
    return released + (x - x.detach())


def _released(flat: torch.Tensor, tables: _DeviceTables, generator: _rng.Generators) -> torch.Tensor:
    """(K, n) released values computed as tensor operations (any device, any generator); on
    CUDA one compiled kernel where torch.compile works (some twenty elementwise passes else)."""
    k, n = flat.shape
    if _rng.per_config(generator):
        w = _rng.words(3 * n, generator, device=flat.device).view(k, n, 3)
    else:
        w = _rng.words(3 * k * n, generator, device=flat.device).view(k, n, 3)
    args = (w, flat, tables.which.view(k, 1), tables.u_table, tables.u_bits, tables.v_cumulative, tables.t,
            tables.zero, tables.bound, tables.clamp, tables.scale_up, tables.gamma)
    global _compiled_release
    if flat.device.type == "cuda" and _compiled_release is not False:
        try:
            if _compiled_release is None:
                _compiled_release = torch.compile(_release_from_words, dynamic=True, fullgraph=True)
            return _compiled_release(*args)
        except Exception as err:  # noqa: BLE001 - any compiler failure: the eager result is the same
            warnings.warn(f"fairdp: the compiled Laplace mechanism is off ({type(err).__name__}: {err}); "
                          "computing it eagerly", stacklevel=2)
            _compiled_release = False
    return _release_from_words(*args)


# None: not compiled yet; False: compiling failed once, the mechanism runs eagerly
_compiled_release = None


def _release_from_words(w, flat, which, u_table, u_bits, v_cumulative, t, zero, bound, clamp, scale_up,
                        gamma) -> torch.Tensor:
    wz, wv, wu = w[..., 0], w[..., 1], w[..., 2]
    # V: how many of its cumulative counts the word reaches (unsigned, as signed with flipped sign bits)
    v = torch.searchsorted(v_cumulative, (wv ^ _rng.SIGN_BIT).contiguous(), right=True)
    # U: a packed alias table, threshold << bits | alias
    bits = u_bits[which]
    one = torch.ones_like(bits)
    low = 64 - bits
    bucket = (wu >> low) & ((one << bits) - 1)
    entry = u_table[which * (u_table.shape[0] // t.shape[0]) + bucket]
    keep = (wu & ((one << low) - 1)) < ((entry >> bits) & ((one << low) - 1))
    u = torch.where(keep, bucket, entry & ((one << bits) - 1))
    magnitude = 1 + t[which] * v + u
    is_zero = ((wz >> 1) & ((1 << 63) - 1)) < zero[which]
    noise = torch.where(is_zero, 0, torch.where((wz & 1) == 1, magnitude, -magnitude))
    lo, hi = bound[which], clamp[which]
    # x * 2^g and o * 2^-g are exact in float32 as in float64 (powers of two; |o| < 2^24): the
    # release is computed in the input's dtype, with the same values in either
    m = torch.trunc(flat * scale_up[which].to(flat.dtype)).to(torch.int64)
    o = torch.clamp(torch.clamp(m, -lo, lo) + noise, -hi, hi)
    return o.to(flat.dtype) * gamma[which].to(flat.dtype)


def _released_on_host(flat: torch.Tensor, tables: _DeviceTables, stream: _rng.PackStream) -> torch.Tensor:
    """``_released`` for a CPU pack, bit for bit: the compiled kernel (``_grid_kernel``), which
    computes each value's words and release in one pass, where it is built; else NumPy."""
    compiled = _grid_kernel.kernel()
    if compiled is None:
        return _released_by_numpy(flat, tables, stream)
    return _released_by_kernel(flat, tables, stream, compiled)


def _released_by_kernel(flat: torch.Tensor, tables: _DeviceTables, stream: _rng.PackStream,
                        compiled: _grid_kernel.GridKernel) -> torch.Tensor:
    """``_released`` on the CPU by the fused C kernel, in the threads of ``PackStream.map_counters``."""
    k, n = flat.shape
    x = np.ascontiguousarray(flat.numpy())
    out = np.empty((k, n), dtype=x.dtype)
    release = compiled.release(x.dtype)
    which = tables.which.numpy()
    u_table = np.ascontiguousarray(tables.u_table.numpy().view(np.uint64))
    width = len(u_table) // len(tables.t)
    u_bits, zero, t = tables.u_bits.numpy(), tables.zero.numpy().view(np.uint64), tables.t.numpy()
    bound, clamp = tables.bound.numpy(), tables.clamp.numpy()
    scale_up, gamma = tables.scale_up.numpy(), tables.gamma.numpy()
    v_cumulative = np.ascontiguousarray(V_CUMULATIVE)
    row_bytes, item = x.strides[0], x.itemsize

    def fill(c: int, key: np.ndarray, draw: int, first: int, part: np.ndarray) -> None:
        j = int(which[c])
        release(int(key[0]), int(key[1]), draw, first, len(part), x.ctypes.data + c * row_bytes + first * item,
                part.ctypes.data, v_cumulative.ctypes.data, len(v_cumulative),
                u_table.ctypes.data + j * width * 8, int(u_bits[j]), int(zero[j]), int(t[j]), int(bound[j]),
                int(clamp[j]), float(scale_up[j]), float(gamma[j]))

    stream.map_counters(out, 3, fill)
    return torch.from_numpy(out)


def _released_by_numpy(flat: torch.Tensor, tables: _DeviceTables, stream: _rng.PackStream) -> torch.Tensor:
    """``_released`` for a CPU pack without the kernel, bit for bit: NumPy on cache-sized pieces of
    the draw in the threads that draw its words (``PackStream.map_words``)."""
    k, n = flat.shape
    x = flat.contiguous().numpy()
    out = np.empty((k, n), dtype=x.dtype)
    which = tables.which.numpy()
    u_table = tables.u_table.numpy().view(np.uint64)
    width = len(u_table) // len(tables.t)
    u_bits, zero, t = tables.u_bits.numpy(), tables.zero.numpy(), tables.t.numpy()
    bound, clamp = tables.bound.numpy(), tables.clamp.numpy()
    scale_up, gamma = tables.scale_up.numpy().astype(x.dtype), tables.gamma.numpy().astype(x.dtype)

    def fill(c: int, start: int, words: np.ndarray, part: np.ndarray) -> None:
        j = int(which[c])
        bits = int(u_bits[j])
        wz, wv, wu = words[:, 0], words[:, 1], words[:, 2]
        # V by its inverse CDF: the first thresholds by comparison (V < 3 for 95% of words),
        # the rest by binary search; np.searchsorted over every word costs more
        noise = (wv >= V_CUMULATIVE[0]).view(np.int8).astype(np.int64)
        noise += wv >= V_CUMULATIVE[1]
        far = wv >= V_CUMULATIVE[2]
        if far.any():
            noise[far] = np.searchsorted(V_CUMULATIVE, wv[far], side="right")
        noise *= int(t[j])
        table = u_table[j * width:(j + 1) * width]
        bucket = wu >> np.uint64(64 - bits)
        entry = table[bucket]
        low = np.uint64((1 << (64 - bits)) - 1)
        u = np.where((wu & low) < (entry >> np.uint64(bits)), bucket, entry & np.uint64((1 << bits) - 1))
        noise += u.view(np.int64)
        noise += 1
        np.negative(noise, out=noise, where=(wz & np.uint64(1)) == 0)
        noise[(wz >> np.uint64(1)) < np.uint64(zero[j])] = 0
        m = np.trunc(x[c, start:start + len(part)] * scale_up[j]).astype(np.int64)
        np.clip(m, -int(bound[j]), int(bound[j]), out=m)
        m += noise
        np.clip(m, -int(clamp[j]), int(clamp[j]), out=m)
        np.multiply(m, gamma[j], out=part)

    stream.map_words(out, 3, fill)
    return torch.from_numpy(out)


def _eps_values(eps: Eps, x: torch.Tensor, generator: _rng.Generators) -> tuple[float, ...]:
    """One eps per slice the noise is drawn for: per config with K streams (``x``'s leading
    axis), else the whole of ``x``, or its leading slices when ``eps`` has one value per slice."""
    if isinstance(eps, torch.Tensor):
        values = tuple(float(v) for v in eps.detach().reshape(-1).cpu().tolist())
    elif isinstance(eps, (list, tuple)):
        values = tuple(float(v) for v in eps)
    else:
        values = (float(eps),)
    if _rng.per_config(generator):
        _noise_shape(x, generator)  # the leading axis is the streams'
        slices = len(generator)
    else:
        slices = len(values) if len(values) > 1 else 1
    if len(values) not in (1, slices) or (slices > 1 and (x.dim() == 0 or x.shape[0] != slices)):
        raise InputError(f"eps: one value, or one per leading slice of the input (shape {tuple(x.shape)}), "
                         f"got {len(values)}")
    return values * slices if len(values) == 1 else values


def _mantissa_bits(dtype: torch.dtype) -> int:
    return 53 if dtype == torch.float64 else 24


@functools.lru_cache(maxsize=64)
def _l1_tables(values: tuple[float, ...], dim: int, bits: int, device: torch.device) -> _DeviceTables:
    distinct = sorted(set(values))
    mechs = [laplace_l1(e, dim, bits) for e in distinct]
    return _stack(mechs, [distinct.index(e) for e in values], device)


@functools.lru_cache(maxsize=64)
def _minmax_tables(values: tuple[float, ...], device: torch.device) -> _DeviceTables:
    distinct = sorted(set(values))
    mechs = [laplace_minmax(e) for e in distinct]
    return _stack(mechs, [distinct.index(e) for e in values], device)


def _full_precision_rows(h: torch.Tensor) -> torch.Tensor:
    """float32 for half-precision input: the guarantee is computed for float32's rounding or float64's."""
    return h if h.dtype in (torch.float32, torch.float64) else h.float()


def l1_normalize(h: torch.Tensor) -> torch.Tensor:
    """Each row divided by its L1 norm (FEDERATE eq. 3, the deterministic part).

    Every output row has L1 norm 1, so two rows are at L1 distance at most 2: the
    sensitivity the Laplace(2/eps) noise is calibrated to. A row without a finite, nonzero
    norm has no direction: a zero row, a row holding an inf, -inf or NaN, or one whose norm
    overflows. It is mapped to the uniform row 1/D, which also has L1 norm 1, so the bound of
    2 holds for every input (a NaN left in would be clamped to the grid's edge by the
    mechanism, outside the unit ball its eps is computed for). Other rows are divided by their
    exact norm, and the gradient flows through the normalisation.
    """
    norm = torch.linalg.vector_norm(h, ord=1, dim=-1, keepdim=True)  # inf or NaN if any entry is
    no_direction = ~torch.isfinite(norm) | (norm == 0)
    out = h / torch.where(no_direction, 1.0, norm)
    # Such rows are rare: on a CPU they are looked for on the (..., 1) norms so the common case
    # costs no extra pass; on a GPU looking would make the host wait for the device at every
    # training step, and the pass costs less than that.
    if h.device.type != "cpu" or no_direction.any():
        out = torch.where(no_direction, 1.0 / h.shape[-1], out)
    return out


def check_eps(eps: Eps) -> None:
    """InputError unless eps (a number, or every entry of a tensor) is finite and > 0. For a
    tensor on a GPU this waits for the device: the engine checks a pack's eps once, then
    privatises with ``eps_checked=True``."""
    _check_positive("eps", eps)


def laplace_privatize(h: torch.Tensor, eps: Eps, generator: _rng.Generators = None, *,
                      eps_checked: bool = False) -> torch.Tensor:
    """FEDERATE eq. 3: ``l1_normalize(h)`` plus i.i.d. Laplace(2/eps) noise per entry.

    eps-LDP per row, exactly: an L1-normalised row has L1 sensitivity 2 (see
    :func:`l1_normalize` for the zero row), and the noise is the grid discrete Laplace
    mechanism of ``fairdp.privacy._discrete`` (``laplace_l1``): the row is rounded to a grid
    of 2^-g, noise of scale about 2/eps in exact integer arithmetic is added, the result is
    clamped far out in the tails and released as grid points. Its eps is computed from the
    tables it samples, rounding included, so there is no support gap and no floating-point
    hole (Mironov 2012). ``h`` is (B, D) or (K, B, D), any float dtype and device, which the
    output keeps (half precision is normalised in float32). ``eps`` is a positive float, one
    float per leading slice of ``h`` (a (K, 1, 1) tensor or a sequence of K floats: pass
    floats to keep a GPU from waiting on the host). ``generator`` is None, one generator, or
    K per-config streams. Differentiable in ``h`` (the gradient of the additive mechanism, the
    identity). ``eps_checked``: the caller has passed ``eps`` through :func:`check_eps` already.
    """
    if not eps_checked:
        check_eps(eps)
    x = l1_normalize(_full_precision_rows(h))
    tables = _l1_tables(_eps_values(eps, x, generator), x.shape[-1], _mantissa_bits(x.dtype), x.device)
    return _grid_laplace(x, tables, generator).to(h.dtype)


def minmax_normalize(h: torch.Tensor) -> torch.Tensor:
    """Per-row (x - min) / (max - min) into [0, 1] (DPNR Algorithm 2, step 3).

    Per row, not over the batch as CAPE's code does. A constant row has no range; it is
    mapped to zeros (its x - min), which stays in [0, 1] and is never NaN. So is a row holding
    an inf, -inf or NaN, or one whose range overflows: a NaN left in would be clamped to the
    grid's edge by the mechanism, outside the [0, 1] its tables are computed for.
    """
    low = h.amin(dim=-1, keepdim=True)
    span = h.amax(dim=-1, keepdim=True) - low  # inf or NaN if any entry is, or if it overflows
    has_range = torch.isfinite(span) & (span > 0)
    out = (h - low) / torch.where(has_range, span, 1)
    if h.device.type != "cpu" or not has_range.all():  # as in l1_normalize: no host wait on a GPU
        out = torch.where(has_range, out, 0.0)
    return out


def minmax_privatize(h: torch.Tensor, eps: Eps, generator: _rng.Generators = None, *,
                     eps_checked: bool = False) -> torch.Tensor:
    """DPNR/CAPE as published: ``minmax_normalize(h)`` plus i.i.d. Laplace(1/eps) per entry.

    The noise is the grid discrete Laplace of scale 1/eps (``laplace_minmax``), whose tables
    give one entry's range [0, 1] a loss of at most eps. The published analysis is wrong: it takes the L1 sensitivity of a min-max-normalised
    row to be 1, but it is D, the row dimension (FEDERATE appendix C: x = [0, 1, ..., 1]
    and x' = [1, 0, ..., 0] are both normalised and lie at L1 distance D). With noise
    Laplace(1/eps) the true guarantee is therefore D * eps-LDP per row, as
    :func:`minmax_true_epsilon` reports. Kept to reproduce the papers, never to claim eps.
    Arguments and shapes as in :func:`laplace_privatize`; the noise is per entry, not one
    scalar per example as in DPNR's code.
    """
    if not eps_checked:
        check_eps(eps)
    x = minmax_normalize(_full_precision_rows(h))
    return _grid_laplace(x, _minmax_tables(_eps_values(eps, x, generator), x.device), generator).to(h.dtype)


def minmax_true_epsilon(eps: float, dim: int) -> float:
    """The real budget of :func:`minmax_privatize` at claimed ``eps`` on D = ``dim`` features:
    D * eps. Its tables (``laplace_minmax``) give one entry's whole range [0, 1] a loss of at
    most eps, and a row's entries can all move across theirs (FEDERATE appendix C)."""
    _check_positive("eps", eps)
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise InputError(f"dim must be an integer >= 1, got {dim}")
    return float(dim * eps)


def word_dropout(
    tokens: torch.Tensor,
    mu: float | torch.Tensor,
    generator: _rng.Generators = None,
    pad_id: int = 0,
) -> torch.Tensor:
    """DPNR section 3.3.2: each token independently replaced by ``pad_id`` with probability mu.

    DPNR multiplies the token sequence word-wise by a 0/1 dropout vector (a zero makes the
    word the null token, ``pad_id`` here) before extraction, normalisation and noise.
    The paper draws a fixed number of zeros at uniform positions; independent Bernoulli
    drops are used here so that every word is dropped with probability exactly mu, which
    is the quantity Theorem 2 (:func:`word_dropout_epsilon`) uses. ``tokens`` is an integer
    tensor of token ids, (B, L) or (K, B, L) with a list of K generators; ``mu`` a float or
    a tensor broadcastable to it (per-config rates). Returns a new tensor, same dtype.
    """
    _check_unit_interval("mu", mu)
    # kept with probability floor((1 - mu) 2^64) / 2^64 <= 1 - mu: dropped with at least mu
    keep = _rng.coins(_noise_shape(tokens, generator), 1 - mu, generator, device=tokens.device)
    return tokens.masked_fill(~keep, pad_id)


def word_dropout_epsilon(eps: float, mu: float) -> float:
    """DPNR Theorem 2: an eps-DP mechanism after word dropout at rate mu is ln((1-mu)e^eps + mu)-DP.

    The guarantee is word-level (inputs differing in one word). Conditioning on whether
    the differing word is dropped (probability mu) mixes an output common to both inputs
    with the two eps-close ones; because the word-dropped input is itself one word away
    from each, the ratio is at most mu + (1 - mu)e^eps: the paper's formula. It needs each
    word dropped with probability at least mu; a fixed count c of zeros in a sequence of
    length L drops a given word with probability c/L, which can fall short of mu, hence
    the independent drops of :func:`word_dropout`.
    ``eps`` must be the mechanism's true budget: for :func:`minmax_privatize` that is
    :func:`minmax_true_epsilon`, not the claimed eps.
    """
    _check_positive("eps", eps)
    _check_unit_interval("mu", mu)
    return math.log((1 - mu) * math.exp(eps) + mu)


def l2_privatize_like_federate_code(
    h: torch.Tensor, eps: Eps, generator: _rng.Generators = None
) -> torch.Tensor:
    """FEDERATE's public code: rows divided by their L2 norm, plus Laplace(2/eps) per entry.

    NOT eps-DP, kept only as a target for the empirical DP audit. The Laplace mechanism
    needs the L1 sensitivity, and two unit-L2 rows can be at L1 distance up to 2*sqrt(D)
    (x = [1, ..., 1]/sqrt(D) and x' = -x), so the guarantee is only sqrt(D) * eps. A zero
    row is mapped to the unit-L2 row 1/sqrt(D). Arguments as in :func:`laplace_privatize`.
    """
    _check_positive("eps", eps)
    norm = torch.linalg.vector_norm(h, dim=-1, keepdim=True)
    nonzero = norm > 0
    unit = torch.where(nonzero, h / torch.where(nonzero, norm, 1), h.shape[-1] ** -0.5)
    # the L1 mechanism's noise at eps, on rows it was not built for (|entries| <= 1 still holds)
    tables = _l1_tables(_eps_values(eps, unit, generator), unit.shape[-1], _mantissa_bits(unit.dtype), unit.device)
    return _grid_laplace(unit, tables, generator)
