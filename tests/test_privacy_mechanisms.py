"""Mechanisms of fairdp.privacy: noise laws, normalisation, packing, validation, defects."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from fairdp import _rng
from fairdp.errors import InputError
from fairdp.privacy import (
    _mechanisms,
    l1_normalize,
    laplace_privatize,
    minmax_normalize,
    minmax_privatize,
    minmax_true_epsilon,
    word_dropout,
    word_dropout_epsilon,
)
from fairdp.privacy._discrete import laplace_l1, laplace_minmax
from fairdp.privacy._mechanisms import l2_privatize_like_federate_code

PRIVATIZERS = [laplace_privatize, minmax_privatize, l2_privatize_like_federate_code]
NORMALIZERS = {laplace_privatize: l1_normalize, minmax_privatize: minmax_normalize}


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def assert_laplace(noise: torch.Tensor, scale: float, rel_var: float = 0.01) -> None:
    """Mean within 5 standard errors of 0, variance 2b^2 within rel_var, KS p > 1e-3."""
    x = noise.double().flatten()
    sd = math.sqrt(2) * scale
    assert abs(x.mean().item()) < 5 * sd / math.sqrt(x.numel())
    assert x.var().item() == pytest.approx(2 * scale**2, rel=rel_var)
    assert stats.kstest(x.numpy(), stats.laplace(scale=scale).cdf).pvalue > 1e-3


# --- noise laws --------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [0.5, 8.0])
def test_laplace_privatize_noise_is_laplace_2_over_eps(eps):
    """Laplace at the grid mechanism's scale: 2/eps within the rounding of the rows' norm and of
    the tables' counts (tests/test_privacy_discrete.py)."""
    h = torch.ones(1000, 1000, dtype=torch.float64)  # normalises to 1/D exactly
    noise = laplace_privatize(h, eps, gen(0)) - 1e-3
    scale = laplace_l1(eps, 1000, 53).scale
    assert 2 / eps <= scale <= 2 / eps * 1.001
    assert_laplace(noise, scale)


def test_minmax_privatize_noise_is_laplace_1_over_eps():
    h = torch.arange(1000, dtype=torch.float64).repeat(1000, 1)
    eps = 2.0
    noise = minmax_privatize(h, eps, gen(1)) - minmax_normalize(h)
    assert laplace_minmax(eps).scale == pytest.approx(1 / eps, rel=1e-3)
    assert_laplace(noise, 1 / eps)


# --- normalisation -----------------------------------------------------------------------


def test_l1_rows_have_unit_l1_norm_and_keep_sign():
    h = torch.randn(64, 17, generator=gen(3)) * 5 - 1
    z = l1_normalize(h)
    assert torch.allclose(z.abs().sum(-1), torch.ones(64))
    assert torch.equal(z.sign(), h.sign())


def test_l1_zero_row_maps_to_uniform_row():
    h = torch.zeros(3, 4)
    h[1] = torch.tensor([1.0, -1.0, 2.0, 0.0])
    z = l1_normalize(h)
    assert torch.equal(z[0], torch.full((4,), 0.25))
    assert torch.equal(z[2], torch.full((4,), 0.25))
    out = laplace_privatize(h, 1.0, gen(0))
    assert torch.isfinite(out).all()


NON_FINITE = [float("inf"), -float("inf"), float("nan")]


def _paths(monkeypatch, path: str, names: list[str]):
    """The generator for one of the mechanism's three computations of the same release: the host
    kernel and the host NumPy path (per-config streams on the CPU), the tensor path (a generator)."""
    if path == "numpy":
        monkeypatch.setattr(_mechanisms._grid_kernel, "kernel", lambda: None)
    return torch.Generator().manual_seed(7) if path == "tensor" else _rng.PackStream.from_names(names)


@pytest.mark.parametrize("path", ["kernel", "numpy", "tensor"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dim=st.sampled_from([1, 4, 9]), bad=st.lists(st.tuples(st.integers(0, 8), st.sampled_from(NON_FINITE)), min_size=1,
                                             max_size=4), eps=st.sampled_from([0.5, 2.0, 8.0]))
def test_non_finite_rows_are_released_as_the_directionless_row(monkeypatch, path, dtype, dim, bad, eps):
    """A row holding inf, -inf or NaN (row 1) has no direction: l1_normalize gives the uniform row
    and minmax_normalize the zero row, and the release is that row's under the same stream, so
    the L1 bound the noise is calibrated to holds (a NaN left in is clamped to the grid's edge)."""
    h = torch.randn(3, dim, dtype=dtype, generator=gen(dim))
    for index, value in bad:
        h[1, index % dim] = value
    for privatize, directionless in ((laplace_privatize, torch.full((dim,), 1.0 / dim, dtype=dtype)),
                                     (minmax_privatize, torch.zeros(dim, dtype=dtype))):
        normalize = NORMALIZERS[privatize]
        assert torch.equal(normalize(h)[1], directionless)
        assert torch.isfinite(normalize(h)).all()
        clean = h.clone()
        clean[1] = 1.0  # a constant row: uniform under L1, zero under min-max
        got = privatize(h.unsqueeze(0), eps, _paths(monkeypatch, path, ["r"]))
        want = privatize(clean.unsqueeze(0), eps, _paths(monkeypatch, path, ["r"]))
        assert torch.equal(got, want)


def test_rows_whose_norm_overflows_have_no_direction():
    h = torch.tensor([[3e38, 3e38, -1.0], [1.0, 2.0, 1.0]], dtype=torch.float32)
    assert torch.equal(l1_normalize(h)[0], torch.full((3,), 1 / 3))
    assert torch.equal(minmax_normalize(torch.tensor([[3e38, -3e38, 0.0]]))[0], torch.zeros(3))
    assert torch.equal(l1_normalize(h)[1], torch.tensor([0.25, 0.5, 0.25]))


def test_l1_normalize_divides_nonzero_rows_exactly():
    h = torch.tensor([[1e-30, 3e-30], [3.0, -4.0]], dtype=torch.float64)
    assert torch.equal(l1_normalize(h), h / h.abs().sum(-1, keepdim=True))


def test_minmax_rows_span_zero_to_one_and_constant_row_is_zero():
    h = torch.randn(50, 9, generator=gen(4)) * 3 - 2
    h[7] = 5.0
    z = minmax_normalize(h)
    others = torch.cat([z[:7], z[8:]])
    assert (others >= 0).all() and (others <= 1).all()
    assert torch.equal(others.amin(-1), torch.zeros(49))
    assert torch.equal(others.amax(-1), torch.ones(49))
    assert torch.equal(z[7], torch.zeros(9))


def test_gradients_flow_through_normalisation():
    h = torch.randn(4, 6, dtype=torch.float64, generator=gen(5), requires_grad=True)
    assert torch.autograd.gradcheck(l1_normalize, (h,))
    assert torch.autograd.gradcheck(minmax_normalize, (h,))
    out = laplace_privatize(h, 1.0, gen(0))
    (out * torch.arange(6.0, dtype=torch.float64)).sum().backward()
    assert torch.isfinite(h.grad).all() and h.grad.abs().sum() > 0
    zero = torch.zeros(2, 3, requires_grad=True)
    laplace_privatize(zero, 1.0, gen(0)).sum().backward()
    assert torch.equal(zero.grad, torch.zeros(2, 3))


# --- dtype, device, determinism, packing ----------------------------------------------------


@pytest.mark.parametrize("mechanism", PRIVATIZERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtype_and_device_kept(mechanism, dtype):
    h = torch.randn(8, 5, dtype=dtype)
    out = mechanism(h, 1.0, gen(0))
    assert out.dtype == dtype and out.device == h.device and out.shape == h.shape


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mechanism", PRIVATIZERS)
def test_cuda_device_kept_and_packing_holds(mechanism):
    h = torch.randn(3, 8, 5, device="cuda")
    out = mechanism(h, 1.0, _rng.make_generators([0, 1, 2], "cuda"))
    assert out.device == h.device
    alone = mechanism(h[1], 1.0, _rng.make_generators([1], "cuda")[0])
    assert torch.equal(out[1], alone)


@pytest.mark.parametrize("mechanism", PRIVATIZERS)
def test_same_seed_same_output_different_seed_differs(mechanism):
    h = torch.randn(8, 5, generator=gen(6))
    assert torch.equal(mechanism(h, 1.0, gen(7)), mechanism(h, 1.0, gen(7)))
    assert not torch.equal(mechanism(h, 1.0, gen(7)), mechanism(h, 1.0, gen(8)))


@pytest.mark.parametrize("mechanism", PRIVATIZERS)
def test_packed_slice_equals_single_call(mechanism):
    seeds = [11, 12, 13]
    h = torch.randn(3, 16, 7, generator=gen(9))
    eps = torch.tensor([1.0, 2.0, 5.0]).view(3, 1, 1)
    packed = mechanism(h, eps, _rng.make_generators(seeds, "cpu"))
    for k, seed in enumerate(seeds):
        assert torch.equal(packed[k], mechanism(h[k], eps[k].item(), gen(seed)))


def test_word_dropout_packed_slice_equals_single_call():
    tokens = torch.randint(1, 100, (3, 20, 30), generator=gen(10))
    packed = word_dropout(tokens, 0.3, _rng.make_generators([1, 2, 3], "cpu"))
    for k in range(3):
        assert torch.equal(packed[k], word_dropout(tokens[k], 0.3, gen(k + 1)))


def test_rng_uniform_packed_slices_equal_single_draws():
    packed = _rng.uniform((4, 5), _rng.make_generators([3, 4], "cpu"), dtype=torch.float64)
    assert packed.shape == (2, 4, 5)
    assert torch.equal(packed[1], _rng.uniform((4, 5), gen(4), dtype=torch.float64))


def test_per_config_eps_gives_per_slice_noise_scale():
    eps = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64).view(3, 1, 1)
    h = torch.ones(3, 500, 200, dtype=torch.float64)
    noise = laplace_privatize(h, eps, _rng.make_generators([0, 1, 2], "cpu")) - 1 / 200
    for k in range(3):
        b = 2 / eps[k].item()
        assert noise[k].var().item() == pytest.approx(2 * b**2, rel=0.03)


def test_generator_list_length_must_match_leading_axis():
    with pytest.raises(InputError, match="generator"):
        laplace_privatize(torch.randn(2, 4, 3), 1.0, _rng.make_generators([0, 1, 2], "cpu"))


# --- validation -----------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", PRIVATIZERS)
@pytest.mark.parametrize(
    "eps",
    [
        0,
        -1,
        0.0,
        float("nan"),
        float("inf"),
        torch.tensor([1.0, 0.0, 2.0]).view(3, 1, 1),
        torch.tensor([1.0, float("nan"), 2.0]).view(3, 1, 1),
        "1",
    ],
)
def test_bad_eps_is_input_error_naming_eps(mechanism, eps):
    with pytest.raises(InputError, match="^eps"):
        mechanism(torch.randn(3, 4, 5), eps)


def test_eps_message_names_value():
    with pytest.raises(InputError, match=r"eps must be > 0, got -1"):
        laplace_privatize(torch.randn(2, 3), -1)


# --- reference-code defects not repeated ------------------------------------------------------


@pytest.mark.parametrize("mechanism", [laplace_privatize, minmax_privatize])
def test_noise_is_per_entry_not_one_scalar_per_row(mechanism):
    """DPNR's code draws one scalar per example and broadcasts it over the row."""
    h = torch.randn(200, 300, generator=gen(14), dtype=torch.float64)
    noise = mechanism(h, 1.0, gen(15)) - NORMALIZERS[mechanism](h)
    b = 2.0 if mechanism is laplace_privatize else 1.0
    row_var = noise.var(dim=-1)
    assert (row_var > 0).all()
    assert row_var.mean().item() == pytest.approx(2 * b**2, rel=0.05)


@pytest.mark.parametrize("mechanism", [laplace_privatize, minmax_privatize])
def test_rows_are_normalised_and_noised_independently_of_the_batch(mechanism):
    """CAPE's code min-max normalises over the batch and shares one noise vector."""
    h = torch.randn(4, 500, generator=gen(16), dtype=torch.float64)
    changed = h.clone()
    changed[2] = changed[2] * 100 + 7
    normalize = NORMALIZERS[mechanism]
    assert torch.equal(normalize(h)[[0, 1, 3]], normalize(changed)[[0, 1, 3]])
    assert torch.equal(mechanism(h, 1.0, gen(17))[0], mechanism(changed, 1.0, gen(17))[0])
    noise = mechanism(h, 1.0, gen(18)) - normalize(h)
    corr = torch.corrcoef(noise)
    off_diagonal = corr[~torch.eye(4, dtype=torch.bool)]
    assert off_diagonal.abs().max().item() < 5 / math.sqrt(500)


def test_l1_not_l2_normalisation():
    """FEDERATE's code divides by the L2 norm; eq. 3 and its proof need L1."""
    h = torch.tensor([[3.0, 4.0]])
    assert torch.allclose(l1_normalize(h), torch.tensor([[3 / 7, 4 / 7]]))
    # the same stream draws the same noise: the difference to e1's output is the normalised part's
    shifted = laplace_privatize(h, 8.0, gen(0)) - laplace_privatize(torch.tensor([[1.0, 0.0]]), 8.0, gen(0))
    assert torch.allclose(shifted, torch.tensor([[3 / 7 - 1, 4 / 7]]), atol=1e-4)


def test_l2_variant_exceeds_the_l1_sensitivity_it_is_calibrated_to():
    D = 64
    x, x_prime = torch.ones(1, D), -torch.ones(1, D)
    big = 8.0  # the same stream's noise cancels: only the (grid-rounded) normalised part is left
    dist_l2 = (
        (
            l2_privatize_like_federate_code(x, big, gen(0))
            - l2_privatize_like_federate_code(x_prime, big, gen(0))
        )
        .abs()
        .sum()
    )
    assert dist_l2.item() == pytest.approx(2 * math.sqrt(D), rel=1e-3)
    assert (l1_normalize(x) - l1_normalize(x_prime)).abs().sum().item() == pytest.approx(2)


# --- min-max true budget ---------------------------------------------------------------


def test_minmax_true_epsilon_is_d_times_eps():
    # D * eps, as the tables of the grid mechanism give it (the scale is t grid steps, t an integer)
    assert minmax_true_epsilon(1.5, 768) == 1152.0
    with pytest.raises(InputError, match="^eps"):
        minmax_true_epsilon(0.0, 3)
    with pytest.raises(InputError, match="^dim"):
        minmax_true_epsilon(1.0, 0)


@pytest.mark.parametrize("D", [2, 10, 768])
def test_federate_appendix_c_inputs_are_at_l1_distance_d(D):
    x = torch.ones(1, D)
    x[0, 0] = 0
    x_prime = torch.zeros(1, D)
    x_prime[0, 0] = 1
    distance = (minmax_normalize(x) - minmax_normalize(x_prime)).abs().sum().item()
    assert distance == D
    assert minmax_true_epsilon(1.0, D) == distance * 1.0


# --- word dropout --------------------------------------------------------------------------


@pytest.mark.parametrize("mu", [0.0, 0.1, 0.5, 0.8])
def test_word_dropout_rate_is_mu(mu):
    tokens = torch.randint(1, 30000, (500, 400), generator=gen(19))
    dropped = word_dropout(tokens, mu, gen(20), pad_id=0)
    assert dropped.dtype == tokens.dtype
    rate = (dropped == 0).double().mean().item()
    assert abs(rate - mu) < 5 * math.sqrt(mu * (1 - mu) / tokens.numel()) + 1e-12
    kept = dropped != 0
    assert torch.equal(dropped[kept], tokens[kept])


def test_word_dropout_uses_pad_id_and_per_config_rates():
    tokens = torch.randint(1, 50, (2, 300, 300), generator=gen(21))
    mu = torch.tensor([0.2, 0.6]).view(2, 1, 1)
    dropped = word_dropout(tokens, mu, _rng.make_generators([0, 1], "cpu"), pad_id=-1)
    rates = (dropped == -1).double().mean(dim=(1, 2))
    assert rates.tolist() == pytest.approx([0.2, 0.6], abs=0.01)


@pytest.mark.parametrize("mu", [-0.1, 1.0, 1.5, float("nan")])
def test_word_dropout_bad_mu(mu):
    with pytest.raises(InputError, match="^mu"):
        word_dropout(torch.ones(2, 3, dtype=torch.long), mu)
    with pytest.raises(InputError, match="^mu"):
        word_dropout_epsilon(1.0, mu)


def test_word_dropout_epsilon_values():
    assert word_dropout_epsilon(3.0, 0.0) == pytest.approx(3.0)
    assert word_dropout_epsilon(1.0, 0.5) == pytest.approx(0.6201145069582775)
    assert word_dropout_epsilon(1.0, 0.5) == pytest.approx(math.log((math.e + 1) / 2))
    assert word_dropout_epsilon(2.0, 0.9) < word_dropout_epsilon(2.0, 0.1) < 2.0
    with pytest.raises(InputError, match="^eps"):
        word_dropout_epsilon(0.0, 0.5)


# --- what the checks refuse and accept --------------------------------------------------------


@pytest.mark.parametrize("mu, bad", [
    (torch.tensor([0.0, 0.5, 1.5]), "1.5"),         # valid entries first: the first bad one is named
    (torch.tensor([0.3, 0.0, 1.0]), "1.0"),         # 1 itself is out: every word dropped
    (torch.tensor([0.5, -0.25]), "-0.25"),
    (torch.tensor([0.2, float("nan")]), "nan"),
])
def test_word_dropout_refuses_a_rate_tensor_with_one_entry_outside_0_1(mu, bad):
    with pytest.raises(InputError, match=rf"^mu must be in \[0, 1\), got {bad}"):
        word_dropout(torch.ones(len(mu), 4, 3, dtype=torch.long), mu.view(-1, 1, 1), _rng.make_generators(
            range(len(mu)), "cpu"))


def test_word_dropout_accepts_rates_from_0_to_just_below_1_and_pads_with_0_by_default():
    tokens = torch.randint(1, 50, (2, 40, 40), generator=gen(22))
    dropped = word_dropout(tokens, torch.tensor([0.0, 0.999]).view(2, 1, 1), _rng.make_generators([0, 1], "cpu"))
    assert torch.equal(dropped[0], tokens[0])
    assert (dropped[1] == 0).float().mean() > 0.99


@pytest.mark.parametrize("mu", ["0.5", None])
def test_word_dropout_refuses_a_rate_that_is_not_a_number(mu):
    with pytest.raises(InputError, match="^mu must be a number"):
        word_dropout(torch.ones(2, 3, dtype=torch.long), mu)


def test_a_scalar_input_is_refused_naming_what_its_shape_lacks():
    """K per-config streams need a leading axis of K; one eps per leading slice needs slices."""
    with pytest.raises(InputError, match="^generator"):
        word_dropout(torch.tensor(5), 0.1, _rng.make_generators([0, 1], "cpu"))
    with pytest.raises(InputError, match="^eps"):
        laplace_privatize(torch.tensor(2.0), (1.0, 2.0), gen(0))


def test_an_eps_per_slice_must_match_the_slices():
    with pytest.raises(InputError, match="^eps"):  # three values for a pack of two
        laplace_privatize(torch.randn(2, 4, 3), (1.0, 2.0, 4.0), _rng.PackStream.from_names(["a", "b"]))
    with pytest.raises(InputError, match="^eps"):  # two values for three leading slices
        laplace_privatize(torch.randn(3, 4, 3), (1.0, 2.0), gen(0))


def test_one_eps_for_a_pack_privatises_every_config_at_it():
    names = ["one/0/noise", "one/1/noise", "one/2/noise"]
    h = torch.randn(3, 6, 5, generator=gen(23))
    packed = laplace_privatize(h, 8.0, _rng.PackStream.from_names(names))
    for k in range(3):
        assert torch.equal(packed[k], laplace_privatize(h[k:k + 1], 8.0, _rng.PackStream.from_names(names[k:k + 1]))[0])


def test_minmax_true_epsilon_takes_whole_dimensions_from_one():
    assert minmax_true_epsilon(0.7, 1) == 0.7
    for dim in (True, 2.0, 0, -3):
        with pytest.raises(InputError, match="^dim"):
            minmax_true_epsilon(1.0, dim)


@pytest.mark.parametrize("mechanism", [laplace_privatize, minmax_privatize])
def test_half_precision_rows_are_released_as_their_float32_rows(mechanism):
    """The tables' eps accounts for float32's rounding of a row (or float64's): a bfloat16 row is
    normalised and released in float32, then rounded to bfloat16 (post-processing)."""
    h = torch.randn(6, 9, generator=gen(24)).bfloat16()
    assert torch.equal(mechanism(h, 2.0, gen(25)), mechanism(h.float(), 2.0, gen(25)).bfloat16())


def test_federates_l2_variant_maps_a_zero_row_to_the_unit_row_one_over_sqrt_d():
    """A zero row (no direction) is released as the row of 1/sqrt(D) entries, a row of norm
    below 1 as its own direction; the same stream draws the same noise, so the releases of the
    same unit rows are equal (D = 4: 1/sqrt(D) = 0.5 exactly; 3 rows per config, not D)."""
    h = torch.zeros(1, 3, 4)
    h[0, 0, :2] = torch.tensor([0.375, 0.5])  # norm 0.625
    h[0, 2] = torch.randn(4, generator=gen(26))
    unit = h.clone()
    unit[0, 0, :2] = torch.tensor([3.0, 4.0])  # the same direction, norm 5
    unit[0, 1] = 0.5
    assert torch.equal(l2_privatize_like_federate_code(h, 8.0, _rng.PackStream.from_names(["z"])),
                       l2_privatize_like_federate_code(unit, 8.0, _rng.PackStream.from_names(["z"])))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_compiler_failure_on_the_gpu_warns_once_and_releases_the_eager_values(monkeypatch):
    """torch.compile failing (here: made to) turns the compiled release off for the process after
    one warning naming the error; that call and the next release what the eager path does."""
    import warnings

    def broken(*args, **kwargs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(_mechanisms, "_compiled_release", None)
    monkeypatch.setattr(torch, "compile", broken)
    x = torch.rand(2, 300, generator=gen(27)).double().cuda() * 2 - 1
    tables = _mechanisms._l1_tables((8.0, 12.0), 16, 53, torch.device("cuda", 0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = _mechanisms._released(x, tables, _rng.PackStream.from_names(["g0", "g1"], "cuda"))
        second = _mechanisms._released(x, tables, _rng.PackStream.from_names(["g0", "g1"], "cuda"))
    messages = [str(w.message) for w in caught if "compiled Laplace mechanism" in str(w.message)]
    assert len(messages) == 1 and "RuntimeError: no compiler here" in messages[0]
    assert _mechanisms._compiled_release is False
    w = _rng.words(3 * 300, _rng.PackStream.from_names(["g0", "g1"], "cuda")).view(2, 300, 3)
    eager = _mechanisms._release_from_words(w, x, tables.which.view(2, 1), tables.u_table, tables.u_bits,
                                            tables.v_cumulative, tables.t, tables.zero, tables.bound, tables.clamp,
                                            tables.scale_up, tables.gamma)
    assert torch.equal(first, eager) and torch.equal(second, eager)
