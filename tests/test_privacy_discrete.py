"""The grid discrete Laplace mechanism behind laplace_privatize and minmax_privatize, held to
its claims from outside: the pmf of its outputs is rebuilt here from the alias tables it
samples (this file's own enumeration), the worst-case privacy loss is computed on that pmf
and compared with the claimed eps, the support is checked for holes on the worst-case
neighbours, the injected noise is measured, and the exact-rate coins and the Gaussian's tail
are checked against their words."""

from __future__ import annotations

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
from fairdp.privacy._discrete import V_CUMULATIVE, VMAX, l1_row_distance, laplace_l1, laplace_minmax

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
