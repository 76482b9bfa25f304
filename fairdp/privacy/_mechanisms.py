"""Local DP mechanisms on encoded representations (FEDERATE, DPNR, CAPE).

Every mechanism works on rows: the last dimension holds the D features of one example,
and any leading dimensions are batch or config axes. Normalisation is per row, and the
Laplace noise is i.i.d. per entry, drawn through :mod:`fairdp._rng` so that a packed
(K, B, D) call with K generators equals K separate (B, D) calls.

Three defects of the public reference code are deliberately not repeated:
FEDERATE's code divides by the L2 norm (the proof of its eq. 3 needs L1; the variant is
kept as :func:`l2_privatize_like_federate_code`, an audit target only); DPNR's code draws
one scalar noise per example and broadcasts it over the row; CAPE's code min-max
normalises over the whole batch and shares one noise vector across the batch.
"""

from __future__ import annotations

import math

import torch

from fairdp import _rng
from fairdp.errors import InputError

Eps = float | torch.Tensor


def _check_positive(name: str, value: float | torch.Tensor) -> None:
    """InputError unless ``value`` (a number or every entry of a tensor) is finite and > 0."""
    if isinstance(value, torch.Tensor):
        bad = value[~(torch.isfinite(value) & (value > 0))]
        if bad.numel():
            _check_positive(name, bad[0].item())
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{name} must be a number or a tensor, got {type(value).__name__}")
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


def _add_laplace(
    x: torch.Tensor, scale: float | torch.Tensor, generator: _rng.Generators
) -> torch.Tensor:
    noise = _rng.laplace(
        _noise_shape(x, generator), scale, generator, device=x.device, dtype=x.dtype
    )
    return x + noise


def l1_normalize(h: torch.Tensor) -> torch.Tensor:
    """Each row divided by its L1 norm (FEDERATE eq. 3, the deterministic part).

    Every output row has L1 norm 1, so two rows are at L1 distance at most 2: the
    sensitivity the Laplace(2/eps) noise is calibrated to. A zero row has no direction;
    it is mapped to the uniform row 1/D, which also has L1 norm 1, so the bound of 2 holds
    for every input and the output is never NaN. Nonzero rows are divided by their exact
    norm (the zero-row guard only replaces a 0 divisor), and the gradient flows through
    the normalisation.
    """
    norm = torch.linalg.vector_norm(h, ord=1, dim=-1, keepdim=True)
    zero = norm == 0
    out = h / torch.where(zero, 1.0, norm)
    # Zero rows are rare: on a CPU they are looked for on the (..., 1) norms so the common case
    # costs no extra pass; on a GPU looking would make the host wait for the device at every
    # training step, and the pass costs less than that.
    if h.device.type != "cpu" or zero.any():
        out = torch.where(zero, 1.0 / h.shape[-1], out)
    return out


def check_eps(eps: Eps) -> None:
    """InputError unless eps (a number, or every entry of a tensor) is finite and > 0. For a
    tensor on a GPU this waits for the device: the engine checks a pack's eps once, then
    privatises with ``eps_checked=True``."""
    _check_positive("eps", eps)


def laplace_privatize(h: torch.Tensor, eps: Eps, generator: _rng.Generators = None, *,
                      eps_checked: bool = False) -> torch.Tensor:
    """FEDERATE eq. 3: ``l1_normalize(h)`` plus i.i.d. Laplace(2/eps) noise per entry.

    eps-LDP per row: an L1-normalised row has L1 sensitivity 2 (see :func:`l1_normalize`
    for the zero row). ``h`` is (B, D) or (K, B, D), any float dtype and device, which the
    output keeps. ``eps`` is a positive float or a tensor broadcastable to ``h`` (the
    engine passes shape (K, 1, 1) for per-config budgets). ``generator`` is None, one
    generator, or a list of K generators, one per leading slice of ``h``. Differentiable
    in ``h``; the noise is additive and independent of ``h``. ``eps_checked``: the caller
    has passed ``eps`` through :func:`check_eps` already.
    """
    if not eps_checked:
        check_eps(eps)
    return _add_laplace(l1_normalize(h), 2.0 / eps, generator)


def minmax_normalize(h: torch.Tensor) -> torch.Tensor:
    """Per-row (x - min) / (max - min) into [0, 1] (DPNR Algorithm 2, step 3).

    Per row, not over the batch as CAPE's code does. A constant row has no range; it is
    mapped to zeros (its x - min), which stays in [0, 1] and is never NaN.
    """
    low = h.amin(dim=-1, keepdim=True)
    span = h.amax(dim=-1, keepdim=True) - low
    return (h - low) / torch.where(span > 0, span, 1)


def minmax_privatize(h: torch.Tensor, eps: Eps, generator: _rng.Generators = None, *,
                     eps_checked: bool = False) -> torch.Tensor:
    """DPNR/CAPE as published: ``minmax_normalize(h)`` plus i.i.d. Laplace(1/eps) per entry.

    The published analysis is wrong: it takes the L1 sensitivity of a min-max-normalised
    row to be 1, but it is D, the row dimension (FEDERATE appendix C: x = [0, 1, ..., 1]
    and x' = [1, 0, ..., 0] are both normalised and lie at L1 distance D). With noise
    Laplace(1/eps) the true guarantee is therefore D * eps-LDP per row, as
    :func:`minmax_true_epsilon` reports. Kept to reproduce the papers, never to claim eps.
    Arguments and shapes as in :func:`laplace_privatize`; the noise is per entry, not one
    scalar per example as in DPNR's code.
    """
    if not eps_checked:
        check_eps(eps)
    return _add_laplace(minmax_normalize(h), 1.0 / eps, generator)


def minmax_true_epsilon(eps: float, dim: int) -> float:
    """The real budget of :func:`minmax_privatize` at claimed ``eps`` on D = ``dim`` features: D * eps."""
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
    keep = _rng.bernoulli_mask(
        _noise_shape(tokens, generator), 1 - mu, generator, device=tokens.device
    )
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
    return _add_laplace(unit, 2.0 / eps, generator)
