"""Per-configuration random streams for packed training.

The engine trains K configurations at once, as tensors with a leading config axis K.
Each configuration draws its noise from its own ``torch.Generator``, and slice k of a
packed draw is filled from generator k alone with exactly the call a single draw makes.
So training configuration k inside a pack consumes the same random numbers, and gives the
same result, as training it alone: packing is an execution detail, never a change of run.

``generators`` is accepted in three forms throughout: ``None`` (the global generator),
one ``torch.Generator`` (one draw of ``shape``), or a list/tuple of K generators (a draw
of ``(K, *shape)`` whose slice k comes from generator k).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

Generators = torch.Generator | Sequence[torch.Generator] | None


def make_generators(seeds: Sequence[int], device: torch.device | str) -> list[torch.Generator]:
    """One generator per seed, seeded with it, living on ``device``."""
    gens = []
    for seed in seeds:
        gen = torch.Generator(device=device)
        gen.manual_seed(int(seed))
        gens.append(gen)
    return gens


def _is_list(generators: Generators) -> bool:
    return isinstance(generators, (list, tuple))


def _device_of(generators: Generators, device: torch.device | str | None) -> torch.device:
    if device is not None:
        return torch.device(device)
    if _is_list(generators):
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
    if not _is_list(generators):
        return torch.empty(shape, device=dev, dtype=dtype).uniform_(low, high, generator=generators)
    out = torch.empty((len(generators), *shape), device=dev, dtype=dtype)
    for k, gen in enumerate(generators):
        out[k].uniform_(low, high, generator=gen)
    return out


def laplace(
    shape: Sequence[int],
    scale: float | torch.Tensor,
    generators: Generators,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Laplace(0, scale) draws by inverse CDF, with the per-generator layout of :func:`uniform`.

    For u ~ U[-1/2, 1/2): x = -scale * sign(u) * log1p(-2|u|). ``uniform_`` can return the
    endpoint u = -1/2, where log1p(-1) = -inf, so 2|u| is capped just below 1 (the largest
    draw is then about 16 * scale in float32, 36 * scale in float64). ``scale`` is a float
    or a tensor broadcastable to the output, e.g. shape (K, 1, 1) for per-config scales.
    Floating-point sampling is not hardened against Mironov's (2012) attack on the
    textbook mechanism; the privacy claims are those of the idealised Laplace mechanism.
    """
    u = uniform(shape, generators, device=device, dtype=dtype, low=-0.5, high=0.5)
    cap = 1.0 - torch.finfo(dtype).eps
    # -sign(u) * log1p(-2|u|) written as copysign: the same bits (log1p(...) <= 0), one pass fewer
    out = torch.copysign(u.abs().mul_(2.0).clamp_(max=cap).neg_().log1p_(), u)
    if isinstance(scale, torch.Tensor):
        return out.mul_(scale.to(device=out.device, dtype=out.dtype))
    return out.mul_(scale)


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


def dropout_scale(
    shape: Sequence[int],
    keep_prob: float,
    generators: Generators,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Inverted-dropout multipliers: 1/keep_prob where ``uniform < keep_prob``, else 0.

    Same per-generator layout as :func:`uniform`; built in place on the uniform draws (two
    passes, no further allocation) because dropout sits on the training hot path.
    """
    u = uniform(shape, generators, device=device, dtype=dtype)
    return u.lt_(keep_prob).mul_(1.0 / keep_prob)


def normal(
    shape: Sequence[int],
    generators: Generators,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Standard normal draws with the per-generator layout of :func:`uniform`."""
    shape = tuple(shape)
    dev = _device_of(generators, device)
    if not _is_list(generators):
        return torch.empty(shape, device=dev, dtype=dtype).normal_(generator=generators)
    out = torch.empty((len(generators), *shape), device=dev, dtype=dtype)
    for k, gen in enumerate(generators):
        out[k].normal_(generator=gen)
    return out
