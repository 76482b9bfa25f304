"""The grid discrete Laplace mechanism behind laplace_privatize and minmax_privatize, held to
its claims from outside: the pmf of its outputs is rebuilt here from the alias tables it
samples (this file's own enumeration), the worst-case privacy loss is computed on that pmf
and compared with the claimed eps, the support is checked for holes on the worst-case
neighbours, the injected noise is measured, and the exact-rate coins and the Gaussian's tail
are checked against their words."""

from __future__ import annotations

import bisect
import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fairdp import _rng
from fairdp.privacy import l1_normalize, laplace_privatize, minmax_privatize, minmax_true_epsilon
from fairdp.privacy._discrete import (
    GRID_STEPS,
    V_COUNTS,
    V_CUMULATIVE,
    VMAX,
    alias_counts,
    l1_row_distance,
    laplace_l1,
    laplace_minmax,
)

# -- the pmf, rebuilt from the tables --------------------------------------------------------


def _alias_pmf(packed: np.ndarray, bits: int) -> np.ndarray:
    """Probability of each value of a packed alias table (threshold << bits | alias) over 64-bit
    words, by enumerating its buckets."""
    n = len(packed)
    cap = 2.0 ** 64 / n
    p = np.zeros(n)
    for i, entry in enumerate(packed.tolist()):
        threshold, alias = entry >> bits, entry & (n - 1)
        p[i] += threshold / 2.0 ** 64
        p[alias] += (cap - threshold) / 2.0 ** 64
    return p


def _inverse_cdf_pmf(cumulative: np.ndarray) -> np.ndarray:
    """Probability of each value of an inverse CDF over 64-bit words (value v: the words at or
    above v of the cumulative counts), the last value taking the words above them all."""
    edges = [0.0, *(float(c) for c in cumulative.tolist()), 2.0 ** 64]
    return np.diff(edges) / 2.0 ** 64


def _log_noise_pmf(mech) -> tuple[np.ndarray, np.ndarray, float]:
    """(log pmf of Z at magnitudes 1 .. t VMAX for one sign, log P(Z = 0), log P(collapsed tail, one sign))."""
    pv = _inverse_cdf_pmf(V_CUMULATIVE)
    pu = _alias_pmf(mech.u_table, mech.u_bits)[:mech.t]
    p0 = mech.zero_threshold / 2.0 ** 63
    side = (1 - p0) / 2
    mags = np.log(side) + np.log(pv[:VMAX, None]) + np.log(pu[None, :])  # magnitude 1 + t v + u
    return mags.reshape(-1), math.log(p0), math.log(side * pv[VMAX])


def _log_output_pmf(mech, m: int) -> np.ndarray:
    """log P(o = j | input m) for j in [-N, N]: Z's pmf shifted by m, tails clamped to +-N."""
    mags, log0, log_tail = _log_noise_pmf(mech)
    n_clamp = mech.clamp
    z = np.concatenate([mags[::-1], [log0], mags])  # Z from -t VMAX to t VMAX
    zmax = len(mags)
    out = np.full(2 * n_clamp + 1, -np.inf)
    # interior outputs j = m + z with |j| < N
    lo, hi = -n_clamp + 1, n_clamp - 1
    zs = np.arange(lo - m, hi - m + 1)
    inside = np.abs(zs) <= zmax
    out[1:-1][inside] = z[zs[inside] + zmax]
    # clamped ends: every z with m + z >= N (resp. <= -N), the collapsed tail included
    up = z[n_clamp - m + zmax:]
    down = z[:-n_clamp - m + zmax + 1]
    out[-1] = np.logaddexp.reduce(np.append(up, log_tail))
    out[0] = np.logaddexp.reduce(np.append(down, log_tail))
    return out


@pytest.mark.parametrize("eps", [1.0, 8.0, 16.0, 20.0])
def test_worst_case_neighbours_have_the_same_support_and_lose_at_most_the_claimed_eps(eps):
    """h = e1 and h' = -e1 (FEDERATE's worst case: L1 distance 2): every output of one is
    possible under the other (the float sampler's outputs stopped 16.6 scales out, so at eps 16
    ones near the edge were impossible under the neighbour), and the largest log ratio of the
    two output distributions, rebuilt from the tables, is at most eps, and not far below it."""
    dim = 8
    mech = laplace_l1(eps, dim)
    m = round(1.0 * 2 ** mech.grid_exponent)
    a, b = _log_output_pmf(mech, m), _log_output_pmf(mech, -m)
    assert np.isfinite(a).all() and np.isfinite(b).all(), "an output impossible under one neighbour"
    loss = float(np.max(np.abs(a - b)))
    assert loss <= eps * (1 + 1e-9)
    assert loss >= eps * 0.99  # the mechanism spends what it claims, no more noise than it needs
    # the clamp (where the tail is gathered, not cut) lies at least 4 noise scales beyond any input
    assert mech.clamp >= mech.bound + 4 * mech.t


def test_the_claimed_eps_covers_every_pair_of_rows_not_only_the_extremes():
    """Integer rows at the largest L1 distance the claim allows, spread over every entry as a
    rounding adversary would, lose at most eps, summed over entries from the per-entry pmfs."""
    eps, dim = 8.0, 4
    mech = laplace_l1(eps, dim)
    distance = l1_row_distance(mech.grid_exponent, dim, 24)
    # split the distance over entries as a rounding adversary would: +1 on each entry
    shifts = [distance // dim] * dim
    total = 0.0
    for s in shifts:
        total += float(np.max(np.abs(_log_output_pmf(mech, s // 2) - _log_output_pmf(mech, s // 2 - s))))
    assert total <= eps * (1 + 1e-9)


def test_outputs_are_grid_points_whatever_the_input():
    """Mironov's attack reads the input off which floating-point values x + noise can take; the
    released values here are multiples of the grid step for any input (the float mechanism's
    outputs were not)."""
    gen = torch.Generator().manual_seed(3)
    h = torch.randn(500, 16, generator=gen, dtype=torch.float32) / 3
    out = laplace_privatize(h, 8.0, gen)
    mech = laplace_l1(8.0, 16)
    steps = out.double() / mech.gamma
    assert torch.equal(steps, steps.round())
    assert steps.abs().max() <= mech.clamp


@pytest.mark.parametrize("eps", [1.0, 8.0, 16.0])
def test_the_injected_noise_has_the_scale_the_guarantee_assumes(eps):
    """Measured on 2M entries: the noise's variance is the discrete Laplace's at the tables' t,
    within 1%; it is at least Laplace(2/eps)'s (the guarantee is not bought with less noise)
    and larger only by the float rounding of the rows' norm and the counts' (under 0.1%); its
    distribution matches the discrete Laplace's CDF."""
    gen = torch.Generator().manual_seed(int(eps))
    h = torch.randn(6700, 300, generator=gen, dtype=torch.float64)
    out = laplace_privatize(h, eps, gen)
    mech = laplace_l1(eps, 300, 53)
    x = l1_normalize(h)
    m = torch.trunc(x * 2 ** mech.grid_exponent)
    noise = (out / mech.gamma - m).reshape(-1).numpy()
    a = math.exp(-1 / mech.t)
    var_dlap = 2 * a / (1 - a) ** 2
    assert noise.var() == pytest.approx(var_dlap, rel=0.01)
    assert 2 / eps <= mech.scale <= (2 / eps) * 1.001
    b_steps = (2 / eps) / mech.gamma
    assert 0.99 * 2 * b_steps ** 2 <= noise.var() <= 1.02 * 2 * b_steps ** 2
    # P(Z <= z) of the discrete Laplace at a few points, against the sample (binomial bands)
    for z in (-3 * mech.t, -mech.t, 0, mech.t // 2, 2 * mech.t):
        cdf = a ** (-z) / (1 + a) if z < 0 else 1 - a ** (z + 1) / (1 + a)
        assert stats.binomtest(int((noise <= z).sum()), len(noise), cdf).pvalue > 1e-4


def test_minmax_true_epsilon_is_the_tables_loss_over_the_true_sensitivity():
    """DPNR/CAPE as published: rows in [0, 1]^D, noise of scale 1/eps; the true guarantee is the
    loss of the largest move, every entry from 0 to 1, computed here from the output pmfs."""
    eps, dim = 0.5, 3
    mech = laplace_minmax(eps)
    top = 2 ** mech.grid_exponent
    per_entry = float(np.max(np.abs(_log_output_pmf(mech, 0) - _log_output_pmf(mech, top))))
    assert dim * per_entry <= minmax_true_epsilon(eps, dim) * (1 + 1e-9)
    assert minmax_true_epsilon(eps, dim) == dim * eps


def test_minmax_outputs_are_grid_points_and_noise_has_scale_one_over_eps():
    gen = torch.Generator().manual_seed(5)
    h = torch.randn(4000, 50, generator=gen)
    out = minmax_privatize(h, 2.0, gen)
    mech = laplace_minmax(2.0)
    steps = out.double() / mech.gamma
    assert torch.equal(steps, steps.round())
    from fairdp.privacy import minmax_normalize
    noise = (out.double() - minmax_normalize(h).double())
    assert noise.std().item() == pytest.approx(math.sqrt(2) * 0.5, rel=0.02)


def test_a_pack_draws_what_each_config_would_alone_and_the_host_path_equals_the_tensor_path():
    """Configs at different eps in one (K, B, D) call: slice k equals config k privatised alone
    from its own stream; the CPU's NumPy path equals the tensor (device) path bit for bit."""
    from fairdp.privacy import _mechanisms

    names = [f"s/{i}/noise" for i in range(3)]
    eps = (8.0, 12.0, 16.0)
    h = torch.randn(3, 37, 11, generator=torch.Generator().manual_seed(1))
    packed = laplace_privatize(h, eps, _rng.PackStream.from_names(names))
    for k in range(3):
        alone = laplace_privatize(h[k:k + 1], eps[k], _rng.PackStream.from_names(names[k:k + 1]))
        assert torch.equal(packed[k], alone[0])
    x = l1_normalize(h).reshape(3, -1)
    tables = _mechanisms._l1_tables(eps, 11, 24, torch.device("cpu"))
    host = _mechanisms._released_on_host(x, tables, _rng.PackStream.from_names(names))
    tensor = _mechanisms._released(x, tables, _rng.PackStream.from_names(names))
    assert torch.equal(host, tensor)


def test_gradient_is_the_identity_and_the_value_the_grid_point():
    h = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    gen = torch.Generator().manual_seed(0)
    out = laplace_privatize(h, 8.0, gen)
    mech = laplace_l1(8.0, 6, 53)
    assert torch.equal(out.detach() / mech.gamma, (out.detach() / mech.gamma).round())
    out.sum().backward()
    x = h.detach().clone().requires_grad_(True)
    l1_normalize(x).sum().backward()
    assert torch.allclose(h.grad, x.grad)


def test_eps_beyond_the_tables_is_refused_with_one_line():
    from fairdp.errors import InputError

    with pytest.raises(InputError, match="eps"):
        laplace_l1(200.0, 8)


# -- exact-rate coins and the Gaussian's tail ---------------------------------------------------

def _reference_coins(first: np.ndarray, second: np.ndarray, n: int, q: float) -> list[bool]:
    """One stream's coins by their definition, in Python integers: coin i's word U has lane i
    of the first draw (byte i % 8 of word i // 8, lowest byte first) as its top byte and, when
    that byte ties with T's, the upper 56 bits of the second draw's next word as the rest;
    the coin is U < T = floor(q 2^64)."""
    threshold = math.floor(Fraction(q) * 2 ** 64)
    out, tie = [], 0
    for i in range(n):
        byte = (int(first[i // 8]) >> (8 * (i % 8))) & 0xFF
        if byte != min(threshold >> 56, 255):
            out.append((byte << 56) < threshold)
            continue
        out.append((byte << 56) + (int(second[tie]) >> 8) < threshold)
        tie += 1
    return out


@settings(max_examples=40, deadline=None)
@given(st.floats(min_value=0.0, max_value=1.0, allow_nan=False), st.integers(0, 255))
def test_coins_compare_each_word_with_the_exact_threshold(q, top):
    """A coin is True exactly when its 64-bit word, as an unsigned integer, is below
    floor(q 2^64), the rate that over 2^64, never above q (the 24-bit float uniforms it
    replaced gave ceil(q 2^24) / 2^24, above q): checked against the words of the two draws,
    with q also put on a byte boundary's neighbourhood so that many coins tie on their byte."""
    for rate in (q, min(1.0, top / 256 + q / 256)):
        names = ["c/0/sample", "c/1/sample"]
        n = 3001
        coins = _rng.coins((n,), rate, _rng.PackStream.from_names(names))
        reference = _rng.PackStream.from_names(names)
        first = reference.words(-(-n // 8)).numpy().view(np.uint64)
        second = reference.words(n).numpy().view(np.uint64)  # a config's words do not depend on how many
        assert Fraction(math.floor(Fraction(rate) * 2 ** 64), 2 ** 64) <= Fraction(rate)
        for k in range(2):
            assert coins[k].tolist() == _reference_coins(first[k], second[k], n, rate)


class _TwoDraws(_rng.PackStream):
    """A one-config stream whose two next draws are the given words (the first repeated)."""

    def __init__(self, first: int, second: list[int]):
        super().__init__(np.zeros((1, 2), dtype=np.uint64))
        self.draws_left = [first, second]

    def words(self, n_words, device=None):
        value = self.draws_left.pop(0)
        row = [value] * n_words if isinstance(value, int) else (value * n_words)[:n_words]
        return torch.tensor(np.array(row, dtype=np.uint64).view(np.int64)).reshape(1, -1)


REST = 0x1234 << 11  # T = 2^63 + REST is a double: 53 significant bits


@pytest.mark.parametrize("lane, rest, holds", [
    (0x80, None, True), (0x81, None, False), (0x7F, None, True),    # decided by the byte (None: no tie)
    (0x80, REST - 1, True), (0x80, REST, False), (0x80, REST + 1, False),  # a tie: the rest decides
])
def test_a_coin_on_its_thresholds_byte_is_decided_by_the_next_56_bits(lane, rest, holds):
    """T = 0x80 << 56 | REST: a coin whose byte is below 0x80 holds, above fails, and on it
    holds exactly when the second draw's upper 56 bits are below REST."""
    q = float(Fraction((0x80 << 56) + REST, 2 ** 64))
    assert math.floor(Fraction(q) * 2 ** 64) == (0x80 << 56) + REST
    second = [((rest if rest is not None else 0) << 8) | 0xAB]  # the low byte is not read
    coin = _rng.coins((1,), q, _TwoDraws(int.from_bytes(bytes([lane] * 8), "little"), second))
    assert bool(coin[0, 0]) is holds


def test_coins_at_rate_one_and_zero_are_constant_whatever_the_words():
    for value in (0, 2 ** 64 - 1, 0xFF00FF00FF00FF00):
        assert bool(_rng.coins((16,), 1.0, _TwoDraws(value, [2 ** 64 - 1])).all())
        assert not bool(_rng.coins((16,), 0.0, _TwoDraws(value, [0])).any())


def test_pfld_poisson_sample_rate_is_never_above_q():
    """PF-LD's sample coins: frequency over many rows is consistent with q (and they are the
    exact-threshold coins: the test above)."""
    q = 256 / 27133
    coins = _rng.coins((2_000_000,), q, _rng.PackStream.from_names(["p/0/sample"]))
    assert stats.binomtest(int(coins.sum()), coins.numel(), q).pvalue > 1e-4


class _Words(_rng.PackStream):
    """A stream whose words are given: to reach the draws' extremes on purpose."""

    def __init__(self, value: int):
        super().__init__(np.zeros((1, 2), dtype=np.uint64))
        self.value = value

    def words(self, n_words, device=None):
        return torch.full((1, n_words), self.value, dtype=torch.int64)


def test_gaussian_radius_reaches_past_53_bit_uniforms():
    """The largest normal draw: words of zeros give u = 2^-106, radius sqrt(2 * 106 ln 2) = 12.1,
    where 53-bit uniforms stopped at 8.6 (mass 2^-53 cut off per pair)."""
    z = _rng.normal((2,), _Words(0), dtype=torch.float64)
    assert float(z.abs().max()) == pytest.approx(math.sqrt(2 * 106 * math.log(2)), rel=1e-12)
    assert _rng.NORMAL_TAIL_MASS == 2.0 ** -106


# -- the release, word by word ------------------------------------------------------------------

def _release_by_definition(x: np.ndarray, mech, words: np.ndarray) -> np.ndarray:
    """The mechanism of ``fairdp.privacy._discrete``'s docstring, value by value in Python
    integers, from each value's three words (zero and sign, V, U): m = x / gamma rounded toward
    zero and clamped to [-L, L]; Z = 0 when the first word's top 63 bits are below P0's count,
    else 1 + t V + U, positive when its low bit is 1; V = how many of V's cumulative counts
    are at or below the second word; U = the third word's bucket (its top u_bits bits) when the
    rest is below the bucket's threshold, else the bucket's alias; o = clamp(m + Z, -N, N) * gamma."""
    cumulative = [int(c) for c in V_CUMULATIVE]
    table = [int(e) for e in mech.u_table]
    bits, low = mech.u_bits, 64 - mech.u_bits
    out = []
    for value, (wz, wv, wu) in zip(x.tolist(), words.tolist()):
        m = max(-mech.bound, min(mech.bound, math.trunc(math.ldexp(value, mech.grid_exponent))))
        bucket, rest = wu >> low, wu & ((1 << low) - 1)
        entry = table[bucket]
        u = bucket if rest < entry >> bits else entry & ((1 << bits) - 1)
        v = bisect.bisect_right(cumulative, wv)
        z = 0 if wz >> 1 < mech.zero_threshold else (1 if wz & 1 else -1) * (1 + mech.t * v + u)
        out.append(math.ldexp(max(-mech.clamp, min(mech.clamp, m + z)), -mech.grid_exponent))
    return np.array(out)


class _GivenWords(_rng.PackStream):
    """K configs whose next draw is the given words ((K, 3 n) uint64), to both of the host
    paths' ways of reading a draw (``words`` and ``map_words``)."""

    def __init__(self, given: np.ndarray):
        super().__init__(np.zeros((len(given), 2), dtype=np.uint64))
        self.given = given

    def words(self, n_words, device=None):
        return torch.from_numpy(np.ascontiguousarray(self.given[:, :n_words]).view(np.int64))

    def map_words(self, out, words_per_value, fn):
        for k in range(len(out)):
            fn(k, 0, self.given[k, :out.shape[1] * words_per_value].reshape(-1, words_per_value), out[k])


def _edge_words(mech, n: int) -> np.ndarray:
    """(n, 3) words on every edge the mechanism compares a word with, and one either side: P0's
    count (both signs), each of V's cumulative counts, the alias thresholds of every 61st bucket."""
    low, zero, nonzero = 64 - mech.u_bits, mech.zero_threshold, (mech.zero_threshold << 1) | 1
    rows = [((top << 1) | sign, 0, 0) for top in (zero - 1, zero, zero + 1) for sign in (0, 1)]
    rows += [(nonzero, wv, 0) for c in V_CUMULATIVE.tolist() for wv in (c - 1, c, c + 1)]
    for bucket in range(0, len(mech.u_table), 61):
        threshold = int(mech.u_table[bucket]) >> mech.u_bits
        rows += [(nonzero, 0, (bucket << low) | rest) for rest in (threshold - 1, threshold, threshold + 1)
                 if 0 <= rest < 1 << low]
    rows += [(nonzero, 0, 0)] * (n - len(rows))
    return np.array(rows, dtype=np.uint64)


@pytest.mark.parametrize("path", ["tensor", "numpy"])
def test_words_on_the_tables_edges_release_what_the_definition_gives(path):
    """A word equal to a threshold, or one either side, is where a comparison written < instead
    of <= (or a mask one bit short) would sample another value: on such words the tensor
    (device) path and the CPU's NumPy path release the definition's value. The tables' odd and
    even counts are both met (a mask that drops the lowest bit differs only on one parity)."""
    from fairdp.privacy import _mechanisms

    eps = (8.0, 12.0)
    mechs = [laplace_l1(e, 8, 24) for e in eps]
    assert {m.zero_threshold % 2 for m in mechs} == {0, 1}
    assert {(int(e) >> m.u_bits) % 2 for m in mechs for e in m.u_table[::61]} == {0, 1}
    n = 1800
    words = np.stack([_edge_words(m, n).reshape(-1) for m in mechs])
    x = torch.rand(2, n, generator=torch.Generator().manual_seed(2)) * 2 - 1
    tables = _mechanisms._l1_tables(eps, 8, 24, torch.device("cpu"))
    release = _mechanisms._released if path == "tensor" else _mechanisms._released_by_numpy
    got = release(x, tables, _GivenWords(words))
    for k, mech in enumerate(mechs):
        np.testing.assert_array_equal(got[k].numpy(), _release_by_definition(x[k].numpy(), mech,
                                                                              words[k].reshape(-1, 3)))


def test_a_float32_release_is_the_24_bit_mechanism_of_its_rows_d_entries_word_by_word():
    """laplace_privatize on float32 rows of D entries releases, value for value from its stream's
    words, the mechanism whose eps is computed for float32's rounding of D-entry rows
    (laplace_l1(eps, D, 24)): at eps 20 and D = 400 float64's rounding, or a row of 3 entries
    (the rows per config), would give other tables, a noise scale one grid step off."""
    eps, d = 20.0, 400
    mech = laplace_l1(eps, d, 24)
    assert mech.t != laplace_l1(eps, d, 53).t and mech.t != laplace_l1(eps, d, 25).t
    assert mech.t != laplace_l1(eps, 3, 24).t
    h = torch.randn(2, 3, d, generator=torch.Generator().manual_seed(6))
    names = ["word/0/noise", "word/1/noise"]
    out = laplace_privatize(h, eps, _rng.PackStream.from_names(names)).reshape(2, -1).numpy()
    words = _rng.PackStream.from_names(names).words(3 * 3 * d).numpy().view(np.uint64)
    x = l1_normalize(h).reshape(2, -1).numpy()
    for k in range(2):
        np.testing.assert_array_equal(out[k], _release_by_definition(x[k], mech, words[k].reshape(-1, 3)))


def test_federates_l2_variant_draws_the_l1_mechanisms_noise_for_its_rows_d_entries():
    """The audit target (FEDERATE's code: unit-L2 rows) releases its rows through the same
    mechanism as laplace_privatize, laplace_l1(eps, D, 24) for float32 rows of D entries."""
    from fairdp.privacy._mechanisms import l2_privatize_like_federate_code

    eps, d = 20.0, 400
    h = torch.randn(1, 3, d, generator=torch.Generator().manual_seed(8))
    out = l2_privatize_like_federate_code(h, eps, _rng.PackStream.from_names(["l2/0/noise"])).reshape(-1).numpy()
    words = _rng.PackStream.from_names(["l2/0/noise"]).words(3 * 3 * d).numpy().view(np.uint64)
    unit = (h / torch.linalg.vector_norm(h, dim=-1, keepdim=True)).reshape(-1).numpy()
    np.testing.assert_array_equal(out, _release_by_definition(unit, laplace_l1(eps, d, 24), words[0].reshape(-1, 3)))


def test_one_generator_with_an_eps_per_leading_slice_releases_each_slice_at_its_own_eps():
    """eps with one value per leading slice and a single torch generator: one draw for the
    whole input (three words per value, in order), slice k released by laplace_l1(eps_k, D)."""
    eps, d = (1.0, 16.0), 5
    h = torch.randn(2, 4, d, generator=torch.Generator().manual_seed(9))
    out = laplace_privatize(h, eps, torch.Generator().manual_seed(10)).reshape(2, -1).numpy()
    words = _rng.words(3 * 2 * 4 * d, torch.Generator().manual_seed(10)).numpy().view(np.uint64).reshape(2, -1, 3)
    x = l1_normalize(h).reshape(2, -1).numpy()
    for k in range(2):
        np.testing.assert_array_equal(out[k], _release_by_definition(x[k], laplace_l1(eps[k], d, 24), words[k]))


# -- the tables, pinned and held to exact arithmetic ---------------------------------------------

CAP2 = 1 << 62  # one bucket's share of 2^64 in a table of 2^2 buckets


@pytest.mark.parametrize("counts, table", [
    # Vose's order by hand: small [0, 2], large [1, 3]; bucket 2 is topped up from 3, which is
    # then exactly full (in neither list); bucket 0 from 1, which is then exactly full
    ([CAP2 // 2, 3 * CAP2 // 2, CAP2 // 2, 3 * CAP2 // 2], [(CAP2 // 2, 1), (0, 1), (CAP2 // 2, 3), (0, 3)]),
    # full buckets (0 and 3) start in neither list, and keep threshold 0 with themselves for alias
    ([CAP2, CAP2 // 2, 3 * CAP2 // 2, CAP2], [(0, 0), (CAP2 // 2, 2), (0, 2), (0, 3)]),
])
def test_the_alias_table_is_voses_built_by_hand(counts, table):
    """The packed table (threshold << bits | alias) of counts where a bucket is exactly full, at
    the start or after a top-up: the same words sample the same values in every version."""
    from fairdp.privacy._discrete import _alias, alias_counts

    packed = _alias(counts, 2)
    assert [(int(e) >> 2, int(e) & 3) for e in packed] == table
    assert alias_counts(packed, 2) == counts


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6).flatmap(lambda bits: st.tuples(st.just(bits), st.lists(
    st.integers(0, 1 << 64), min_size=1, max_size=1 << bits))))
def test_an_alias_table_samples_exactly_the_counts_it_was_built_from(bits_and_cuts):
    """Any counts over 2^64 (cut points of [0, 2^64], zeros included), fewer than the buckets or
    as many: read back word by word from the packed table, in exact integers, they are the
    counts, and the buckets beyond them are never drawn."""
    from fairdp.privacy._discrete import _alias, alias_counts

    bits, cuts = bits_and_cuts
    edges = sorted(cuts[:-1]) if len(cuts) > 1 else []
    counts = np.diff([0, *edges, 1 << 64]).tolist()
    packed = _alias(counts, bits)
    low = 64 - bits
    read = [0] * (1 << bits)
    for bucket, entry in enumerate(packed.tolist()):  # a bucket's words below its threshold, then its alias's
        read[bucket] += entry >> bits
        read[entry & ((1 << bits) - 1)] += (1 << low) - (entry >> bits)
    assert read == counts + [0] * ((1 << bits) - len(counts))
    assert alias_counts(packed, bits) == read


def test_the_alias_builder_refuses_counts_that_are_not_a_distribution_over_2_64():
    from fairdp.privacy._discrete import _alias

    _alias([1 << 64, 0], 1)  # a value that is never drawn is a distribution
    for counts in ([CAP2] * 4 + [0, 0], [(1 << 64) - 1, 0], [(1 << 64) + 1, -1]):
        with pytest.raises(ValueError, match="alias"):
            _alias(counts, 1 if len(counts) == 2 else 2)


def test_the_rounding_residue_goes_to_the_first_count():
    """Equal weights: every count but the first is its share rounded down, the first takes what
    that leaves (the largest count, where it moves a ratio least)."""
    from fairdp.privacy._discrete import _quantise

    counts = _quantise(np.array([1.0, 1.0, 1.0]))
    assert counts[1] == counts[2] and counts[1] <= (1 << 64) // 3
    assert sum(counts) == 1 << 64 and counts[0] == (1 << 64) - 2 * counts[1]


STEP_LOSS_16387 = 6.1032909289600505e-05  # t = 16387: eps 1 over L1 rows (2^13 steps each)


def _exp_lower(s: float) -> Fraction:
    s = Fraction(s)
    return 1 + s + s * s / 2 + s ** 3 / 6  # exp(s) >= this for s > 0


def test_step_loss_is_pinned_and_bounds_the_tables_exact_loss():
    """The loss of one grid step, from the tables' exact counts in Fractions: the largest ratio of
    adjacent outputs' probabilities (Z = 0 against +-1, adjacent U within a V, the last U of v
    against the first of v + 1, the clamped tail's sums). step_loss must bound its log from above
    despite floating point (exp(step_loss) >= the exact ratio), within 1e-10 of it (the log of a
    ratio near 1 keeps only some 12 digits), and is pinned:
    a step's loss is what every eps is computed from. All four mechanisms have t = 16387; at the
    other end of the scales the tables use, [0, 1] rows at eps 0.9999 have t = 8194."""
    mechs = [laplace_l1(8.0, 8), laplace_minmax(2.0), laplace_l1(1.0, 8), laplace_minmax(1.0)]
    assert {m.t for m in mechs} == {16387}
    for mech in (mechs[0], laplace_minmax(0.9999)):
        _check_step_loss_bounds_the_exact_loss(mech)
    for m in mechs:
        assert abs(m.step_loss() - STEP_LOSS_16387) <= 2 * math.ulp(STEP_LOSS_16387)


def _check_step_loss_bounds_the_exact_loss(mech) -> None:
    zero, cv, cu = mech.zero_threshold, V_COUNTS, alias_counts(mech.u_table, mech.u_bits)[:mech.t]
    p_zero = Fraction(zero, 1 << 63)
    p_one = Fraction((1 << 63) - zero, 1 << 64) * Fraction(cv[0] * cu[0], 1 << 128)
    ratios = [p_zero / p_one, p_one / p_zero]
    ratios += [Fraction(max(a, b), min(a, b)) for a, b in zip(cu[:-1], cu[1:])]
    ratios += [Fraction(max(a, b), min(a, b)) for v in range(VMAX - 1)
               for a, b in [(cv[v] * cu[-1], cv[v + 1] * cu[0])]]
    tail, last = cv[VMAX] << 64, cv[VMAX - 1] * cu[-1]
    ratios.append(Fraction(last + tail, tail))
    exact = max(ratios)
    loss = mech.step_loss()
    assert _exp_lower(loss) >= exact
    assert loss <= math.log(exact) * (1 + 1e-10)


def test_t_is_the_smallest_noise_scale_whose_tables_meet_eps():
    """eps 1 over rows of 8 L1 entries: the rows' integer L1 distance is 2 * 2^13 = 16384 steps,
    and the V counts' rounding costs a little over 1/t: t = 16387, and 16386 would exceed eps.
    For [0, 1] rows the same: a whole range of 2^14 steps."""
    from fairdp.privacy._discrete import _build

    for mech, distance, eps in ((laplace_l1(1.0, 8), 16384, 1.0), (laplace_minmax(1.0), 16384, 1.0)):
        assert l1_row_distance(mech.grid_exponent, 8, 24) == 16384 or mech is not laplace_l1(1.0, 8)
        assert mech.t == 16387 and mech.epsilon(distance) <= eps
        assert _build(mech.t - 1, mech.grid_exponent, mech.bound).epsilon(distance) > eps


@pytest.mark.parametrize("eps", [0.05, 0.3, 1.0, 1.00015, 5.0, 12.0])  # 1.00015: [0, 1] rows' t is 16384
def test_the_noise_scale_is_between_half_and_all_of_grid_steps_grid_steps(eps):
    """The grid is chosen so that the noise scale is between GRID_STEPS / 2 and GRID_STEPS steps
    of 2^-g (g from the scale: floor(log2(GRID_STEPS * eps / 2)) for L1 rows, floor(log2(GRID_STEPS
    * eps)) for [0, 1] rows), and the alias table for U the smallest power of two that holds t."""
    for mech, scale in ((laplace_l1(eps, 8), 2 / eps), (laplace_minmax(eps), 1 / eps)):
        assert mech.grid_exponent == math.floor(math.log2(GRID_STEPS / scale))
        assert GRID_STEPS / 2 < mech.t <= GRID_STEPS + 8
        assert scale <= mech.scale <= scale * 1.001
        assert 1 << (mech.u_bits - 1) < mech.t <= 1 << mech.u_bits


@pytest.mark.parametrize("bits", [24, 53])
def test_the_l1_distance_and_bound_are_the_exact_rounding_bound(bits):
    """L, the largest |m| an L1-normalised row of D entries can give, is floor(2^g (1 + rho)) with
    rho = (D + 1) u / (1 - (D + 1) u), u = 2^-bits, in exact rational arithmetic (and two rows
    are 2 L apart at most), for every D up to 2000 at the grid exponents the tables reach."""
    from fairdp.privacy._discrete import _bound, _norm_rounding

    for g in (13, 16, 17):
        for dim in range(1, 2001):
            u = Fraction(dim + 1, 1 << bits)
            exact = math.floor((1 + u / (1 - u)) * (1 << g))
            assert l1_row_distance(g, dim, bits) == 2 * exact
            assert _bound(g, 1 + _norm_rounding(dim, bits)) == exact
    # rows wide enough that rho's denominator 1 - (D + 1) u moves the floor
    for g, dim in ((13, 65280), (16, 283386)):
        u = Fraction(dim + 1, 1 << 24)
        assert l1_row_distance(g, dim, 24) == 2 * math.floor((1 + u / (1 - u)) * (1 << g))
    assert laplace_l1(20.0, 400).bound == math.floor((1 + Fraction(401, 1 << 24) / (1 - Fraction(401, 1 << 24))) * 2 ** 17)
    assert laplace_l1(20.0, 400).t == laplace_l1(20.0, 400, 24).t != laplace_l1(20.0, 400, 25).t  # float32 by default


def test_the_largest_eps_the_tables_reach_is_vmax_minus_4_scales():
    """The clamp must lie 4 noise scales beyond every input: L1 rows up to eps 24, [0, 1] rows up
    to 12, and the refusal says so."""
    from fairdp.errors import InputError

    laplace_l1(24.0, 8)
    laplace_minmax(12.0)
    with pytest.raises(InputError, match="eps up to about 24 for these rows"):
        laplace_l1(24.1, 8)
    with pytest.raises(InputError, match="eps up to about 12 for these rows"):
        laplace_minmax(12.1)


def test_v_counts_are_the_geometric_law_over_2_64():
    """P(V = v) = (1 - 1/e) e^-v for v < VMAX and P(V >= VMAX) = e^-VMAX, over 2^64: every count
    but the first its share rounded down (within 1, and 1e-15 for the floats), the first what
    makes the sum 2^64; V's inverse CDF is their running sum."""
    shares = [(1 - math.exp(-1.0)) * math.exp(-v) for v in range(VMAX)] + [math.exp(-VMAX)]
    assert len(V_COUNTS) == VMAX + 1 and sum(V_COUNTS) == 1 << 64
    for count, share in zip(V_COUNTS[1:], shares[1:]):
        assert abs(count - share * 2.0**64) <= 1 + 1e-15 * share * 2.0**64
    assert V_CUMULATIVE.tolist() == np.cumsum(np.array(V_COUNTS[:VMAX], dtype=object)).tolist()


@pytest.mark.parametrize("build", ["l1", "minmax"])
def test_a_mechanism_meets_its_own_eps_exactly(build):
    """The tables' eps (eps over L1 rows, or one [0, 1] entry's) is a target they meet: asked for
    exactly that eps, the search returns the same noise scale, not one grid step more."""
    if build == "l1":
        mech = laplace_l1(6.0, 8)
        own = mech.epsilon(l1_row_distance(mech.grid_exponent, 8, 24))
        again = laplace_l1(own, 8)
    else:
        mech = laplace_minmax(3.0)
        own = mech.epsilon(mech.bound)
        again = laplace_minmax(own)
    assert own < [6.0, 3.0][build == "minmax"] and again.grid_exponent == mech.grid_exponent
    assert again.t == mech.t


def test_the_tables_are_the_same_on_every_cpu():
    """The tables come from the C library's exp, not NumPy's vector exp, which on CPUs with
    AVX-512 differs in the last bit of about one value in twenty (859 of laplace_l1(8, 8)'s 16,387,
    moving 144 of its counts): the noise, and the loss every eps is computed from, would depend on
    the machine. Pinned: the U table of t = 16387 and V's counts (their step loss is pinned above,
    as computed on a CPU without AVX-512)."""
    import hashlib

    from fairdp.privacy._discrete import V_COUNTS, _exp_each

    x = -np.arange(1000, dtype=np.float64) / 997
    assert _exp_each(x).tolist() == [math.exp(v) for v in x.tolist()]
    table = laplace_l1(8.0, 8).u_table
    assert hashlib.sha256(np.ascontiguousarray(table).tobytes()).hexdigest() == (
        "3e0e84e2edc5f282148e95fa27f2255bb04e6f6b7b658602c7c69d75038eb764")
    assert hashlib.sha256(repr(V_COUNTS).encode()).hexdigest() == (
        "a484d7352b1f7e3c45ea70b4063232f7d36a55367a1c36e2ef506604c403d452")
