"""The discrete Laplace mechanism on a grid, and the privacy loss of the tables it samples.

Why not the textbook mechanism: a floating-point Laplace draw from a finite uniform cannot
exceed a bound (about 16.6 * scale from 24-bit uniforms), so outputs near the bound under
one neighbour are impossible under the other (pure eps-DP fails outright at large eps), and
which floating-point values ``x + noise`` can take depends on ``x`` (Mironov 2012, "On
significance of the least significant bits for differential privacy").

The mechanism here releases only points of a grid, drawn from distributions whose every
probability is an integer count over 2^64 that the guarantee is computed from:

1. m = x / gamma rounded toward zero, gamma = 2^-g (a power of two: x / gamma is exact), each
   entry clamped to [-L, L], L the largest |m| an input row can give (a no-op on valid input);
   toward zero, so that a row's integer L1 norm never exceeds its own (rounding to nearest
   would add up to one step per entry to the distance of two rows);
2. o = clamp(m + Z, -N, N), Z i.i.d. per entry (below);
3. o * gamma is released: a function of o alone, so any rounding after it is post-processing.

Z = 0 with probability P0, else sign * (1 + t V + U) with a fair sign, V in {0, ..., VMAX}
and U in {0, ..., t - 1} independent. With P0 = (1 - a) / (1 + a), P(V = v) proportional
to e^-v and P(U = u) to a^u, a = e^(-1/t), Z is exactly the discrete Laplace distribution
P(Z = z) proportional to a^|z| (Canonne, Kamath & Steinke 2020 sample V and U the same way).
V = VMAX stands for every V >= VMAX: those magnitudes all exceed N + L, so the clamped output
is +-N whatever U and m are, and the clamped mechanism needs no more of the tail. Each of
P0, V and U is drawn from one 64-bit word with integer arithmetic (a threshold; V's inverse
CDF over its cumulative counts; Walker's alias table with integer thresholds for U), so the
probabilities sampled are exactly the stored counts: nothing is left to floating point.

The guarantee is computed from those counts (``step_loss``): the largest |log ratio| of the
output's probabilities under inputs m and m + 1 at one entry, over every output (adjacent
values of Z's pmf, and the clamped ends' tail sums). Entry i moving by k_i costs at most
k_i * step_loss (a chain of unit moves), so rows whose integer vectors are at L1 distance at
most S are (S * step_loss)-DP: pure, with no delta and no support gap.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from fairdp.errors import InputError

VMAX = 28
"""V's collapsed tail value: its counts stay >= 2^24, so their rounding moves the loss by < 1e-7 of a step."""
WORD_BITS = 64
# the clamp at 1 + t VMAX - L must lie 4 scales beyond the inputs' L = range / gamma = t range / b:
# L1 rows (range 1, b = 2 / eps) up to eps = VMAX - 4, [0, 1] rows (b = 1 / eps) up to (VMAX - 4) / 2
LARGEST_L1_EPS = VMAX - 4
LARGEST_SCALE_EPS = (VMAX - 4) / 2
GRID_STEPS = 1 << 14
"""The grid is chosen so that the noise scale is between GRID_STEPS / 2 and GRID_STEPS grid steps."""


def _alias(counts: list[int], bits: int) -> np.ndarray:
    """Walker's alias table of ``counts`` (integers summing to 2^64) over 2^``bits`` buckets of
    2^(64 - bits) each, built in exact integer arithmetic (Vose's order), packed one uint64 per
    bucket: threshold << bits | alias. A word's top ``bits`` bits pick bucket i, its low bits r;
    the value is i if r < threshold[i], else alias[i]. A full bucket (threshold 2^(64 - bits),
    which would not fit) is stored as threshold 0 with itself for alias: the same value."""
    n, cap = 1 << bits, 1 << (WORD_BITS - bits)
    if len(counts) > n or sum(counts) != n * cap or min(counts) < 0:
        raise ValueError("alias: counts must be non-negative, at most 2^bits of them, summing to 2^64")
    left = list(counts) + [0] * (n - len(counts))
    threshold, alias = [0] * n, list(range(n))
    small = [i for i in range(n) if left[i] < cap]
    large = [i for i in range(n) if left[i] > cap]
    while small and large:
        s, g = small.pop(), large.pop()
        threshold[s], alias[s] = left[s], g
        left[g] -= cap - left[s]
        if left[g] < cap:
            small.append(g)
        elif left[g] > cap:
            large.append(g)
    # what is left in either list holds exactly cap (integer arithmetic: no rounding residue):
    # threshold 0 and alias itself, as every bucket never touched
    return np.array([(t << bits) | a for t, a in zip(threshold, alias)], dtype=np.uint64)


def alias_counts(packed: np.ndarray, bits: int) -> list[int]:
    """The exact count (over 2^64) of each value a packed alias table gives: what it samples."""
    cap = 1 << (WORD_BITS - bits)
    out = [0] * len(packed)
    for i, entry in enumerate(packed.tolist()):
        thr, a = entry >> bits, entry & ((1 << bits) - 1)
        out[i] += thr
        out[a] += cap - thr
    return out


def _quantise(weights: np.ndarray) -> list[int]:
    """Integer counts summing to 2^64 proportional to decreasing ``weights``: each rounded down,
    and what the float sum's error leaves over or under put on the largest, the first (there it
    moves a ratio by about 2^-40, where elsewhere it could be a fair share of a small count)."""
    total = 1 << WORD_BITS
    counts = [int(float(v) * total) for v in weights / weights.sum()]
    counts[0] += total - sum(counts)
    return counts


def _ratio_bound(a: int, b: int) -> float:
    """An upper bound on a / b for positive integers (float conversion and division each round
    by at most 2^-53 relative; 2^-50 covers the three)."""
    return float(a) / float(b) * (1.0 + 2.0 ** -50)


@dataclass(frozen=True)
class GridLaplace:
    """One discrete Laplace mechanism's grid and tables (see the module docstring)."""

    grid_exponent: int        # gamma = 2^-grid_exponent
    t: int                    # Z's scale in grid steps: P(Z = z) proportional to e^(-|z| / t)
    bound: int                # L: entries of m are clamped to [-L, L]
    u_bits: int
    u_table: np.ndarray       # (2^u_bits,) uint64: U's packed alias table (``_alias``)
    zero_threshold: int       # Z = 0 iff a word's top 63 bits are below it

    @property
    def gamma(self) -> float:
        return math.ldexp(1.0, -self.grid_exponent)

    @property
    def clamp(self) -> int:
        """N: outputs lie in [-N, N] grid steps. 1 + t VMAX - L, so that a collapsed V clamps."""
        return 1 + self.t * VMAX - self.bound

    @property
    def scale(self) -> float:
        """The noise scale b = t * gamma (the continuous Laplace it stands for)."""
        return self.t * self.gamma

    @functools.cached_property
    def counts(self) -> tuple[int, list[int], list[int]]:
        """(P0's count over 2^63, V's counts, U's counts over 2^64), read back from the tables."""
        return (self.zero_threshold, V_COUNTS, alias_counts(self.u_table, self.u_bits)[:self.t])

    def step_loss(self) -> float:
        """An upper bound on max |log P(o | m) / P(o | m + 1)| over every output o and input m
        in [-L, L - 1], from the tables' exact counts."""
        zero, cv, cu = self.counts
        # the pmf of Z at +-(1 + t v + u), in units of 2^-(63 + 64 + 64): sign, V, U
        nonzero = (1 << 63) - zero  # split evenly between the signs
        ratios = []
        # Z = 0 against Z = +-1
        one = nonzero * cv[0] * cu[0]
        ratios += [_ratio_bound(2 * zero << 128, one), _ratio_bound(one, 2 * zero << 128)]
        # adjacent U within one V, and the last U of v against the first of v + 1
        cu_arr = np.array(cu, dtype=np.float64)
        within = cu_arr[:-1] / cu_arr[1:]
        ratios += [float(within.max()) * (1 + 2.0 ** -50), float((1 / within).max()) * (1 + 2.0 ** -50)]
        for v in range(VMAX - 1):
            a, b = cv[v] * cu[-1], cv[v + 1] * cu[0]
            ratios += [_ratio_bound(a, b), _ratio_bound(b, a)]
        # the clamped end: P(Z >= T) over P(Z >= T + 1) is at most the largest adjacent ratio
        # above T (mediant) or, at T + 1 = 1 + t VMAX, (p(t VMAX) + tail) / tail
        tail = cv[VMAX] << 64
        last = cv[VMAX - 1] * cu[-1]
        ratios.append(_ratio_bound(last + tail, tail))
        return math.log(max(ratios)) * (1 + 2.0 ** -50) + 2.0 ** -60

    def epsilon(self, distance: int) -> float:
        """The pure-DP eps of inputs whose clamped integer vectors are at L1 distance ``distance``."""
        return distance * self.step_loss()


def _build(t: int, grid_exponent: int, bound: int) -> GridLaplace:
    a = math.exp(-1.0 / t)
    u_bits = max(1, (t - 1).bit_length())
    u_table = _alias(_quantise(_exp_each(-np.arange(t, dtype=np.float64) / t)), u_bits)
    zero = round((1 - a) / (1 + a) * 2.0 ** 63)
    return GridLaplace(grid_exponent, t, bound, u_bits, u_table, zero)


def _exp_each(x: np.ndarray) -> np.ndarray:
    """exp of each entry by the C library's exp, the same on every x86 CPU: NumPy's own vector exp
    (taken on CPUs with AVX-512) differs from it in the last bit of about one value in twenty, so
    the tables, and the loss computed from them, would depend on the machine that built them."""
    return np.fromiter((math.exp(v) for v in x.tolist()), dtype=np.float64, count=len(x))


def _v_counts() -> list[int]:
    weights = _exp_each(-np.arange(VMAX + 1, dtype=np.float64))
    weights[:VMAX] *= 1 - math.exp(-1.0)  # P(V = v) = (1 - 1/e) e^-v; P(V >= VMAX) = e^-VMAX
    return _quantise(weights)


V_COUNTS = _v_counts()
"""V's counts over 2^64, v = 0 .. VMAX (the last for every V >= VMAX): one table for every
mechanism, V's law does not depend on t."""
V_CUMULATIVE = np.cumsum(np.array(V_COUNTS[:VMAX], dtype=object)).astype(np.uint64)
"""V is the number of these a word (unsigned) is at or above: its inverse CDF, exact in integers."""


def _bound(grid_exponent: int, magnitude: float) -> int:
    """L: the largest |x / gamma| rounded toward zero of an entry with |x| <= magnitude."""
    return math.floor(math.ldexp(magnitude, grid_exponent))


def _check_clamp(mech: GridLaplace, what: str, largest: float) -> GridLaplace:
    # the clamp must leave room for the noise: at least 4 scales beyond every input
    if mech.clamp < mech.bound + 4 * mech.t:
        raise InputError(f"eps: {what} is beyond the discrete Laplace mechanism's tables, which reach "
                         f"{VMAX} noise scales: eps up to about {largest:g} for these rows")
    return mech


def _unit_roundoff(float_bits: int) -> float:
    return 2.0 ** -float_bits


def l1_row_distance(grid_exponent: int, dim: int, mantissa_bits: int) -> int:
    """The largest L1 distance between the integer vectors of two L1-normalised rows computed in
    a float format with ``mantissa_bits`` (24: float32, 53: float64), each entry's x / gamma
    rounded toward zero.

    A computed row's sum of |x_i| is at most 1 + rho, rho = (dim + 1) u / (1 - (dim + 1) u)
    (the norm's sum and the divisions, u the unit roundoff); rounding toward zero never increases |x_i / gamma|, so one row's integer
    L1 norm is at most floor((1 + rho) / gamma), and two rows are at most twice that apart,
    whatever the number of entries (rounding to nearest would add up to one step per entry).
    """
    return 2 * math.floor(math.ldexp(1 + _norm_rounding(dim, mantissa_bits), grid_exponent))


def _norm_rounding(dim: int, mantissa_bits: int) -> float:
    """rho: how far above 1 a computed L1-normalised row's sum of |x_i| can be."""
    u = _unit_roundoff(mantissa_bits)
    return (dim + 1) * u / (1 - (dim + 1) * u)


def _grid_exponent(scale: float) -> int:
    """g such that the noise scale is in (GRID_STEPS / 2, GRID_STEPS] grid steps of 2^-g."""
    return math.floor(math.log2(GRID_STEPS / scale))


@functools.lru_cache(maxsize=256)
def laplace_l1(eps: float, dim: int, mantissa_bits: int = 24) -> GridLaplace:
    """FEDERATE's mechanism (eq. 3) made exact: L1-normalised rows of ``dim`` entries, noise calibrated so that the tables' own loss gives eps-LDP per row, eps
    exactly; the noise scale is 2 / eps within the float format's rounding of the rows' norm
    and the counts' (a few parts in 10^4)."""
    g = _grid_exponent(2.0 / eps)
    distance = l1_row_distance(g, dim, mantissa_bits)
    t = math.ceil(distance / eps)
    bound = _bound(g, 1 + _norm_rounding(dim, mantissa_bits))
    while True:
        mech = _check_clamp(_build(t, g, bound), f"{eps:g}", LARGEST_L1_EPS)
        if mech.epsilon(distance) <= eps:
            return mech
        t += 1  # the counts' rounding cost a little: one grid step more of noise scale


@functools.lru_cache(maxsize=256)
def laplace_minmax(eps: float) -> GridLaplace:
    """DPNR/CAPE's published mechanism made exact: entries in [0, 1] (min-max rows), noise of
    scale 1/eps calibrated so that one entry's whole range costs at most eps by the tables' own
    loss. The published analysis takes that for the row's guarantee; a row of D entries moves
    by up to D entries' ranges, so its true guarantee is D * eps (``minmax_true_epsilon``)."""
    g = _grid_exponent(1.0 / eps)
    bound = _bound(g, 1.0)
    t = max(1, math.ceil(bound / eps))
    while True:
        mech = _check_clamp(_build(t, g, bound), f"{eps:g}", LARGEST_SCALE_EPS)
        if mech.epsilon(bound) <= eps:
            return mech
        t += 1
