"""What ``fairdp check-model`` checks of a module of the user's before a study trains it.

Each check is a name and a function returning None (passed) or why it failed, in one line:
the factory builds for the role's sizes; nothing in it keeps it from being packed
(``fairdp.engine.packing_problems``: the layer and why); it maps a batch of rows to the
output size, each row's output its own in training mode (``row_mixing``); a pack of it trains a
step, forward with dropout, backward and per-sample gradients, in float32 and under bf16
autocast (``trial_step``; the study runs the same two checks before anything is written); K
configs packed start from the weights each starts from alone; a config's outputs in a pack are
its outputs alone, dropout included, to rounding; its clipped per-sample gradient sum equals a
per-row loop's. A failing check skips the checks that need it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from fairdp import _rng
from fairdp.engine import FunctionalPack, ModelRef, packing_problems
from fairdp.engine._shared import build_instances, row_mixing, trial_step

ROWS, CONFIGS = 6, 3


def _streams(tag: str, names: list[str]) -> _rng.PackStream:
    return _rng.PackStream.from_names([f"check-model/{n}/{tag}" for n in names])


def model_checks(ref: ModelRef, in_features: int, out_features: int) -> list[tuple[str, Callable[[], str | None]]]:
    """The checks of ``ref`` for a role of ``in_features`` inputs and ``out_features`` outputs, in order."""
    state: dict = {}
    names = [f"c{i}" for i in range(CONFIGS)]
    x = torch.randn(ROWS, in_features, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def builds():
        state["module"] = ref.build(in_features, out_features)
        if not isinstance(state["module"], nn.Module):
            return f"returned {type(state['module']).__name__}, not a torch.nn.Module"
        return None

    def packable():
        problems = packing_problems(state["module"])
        return "; ".join(problems) or None

    def maps_rows():
        out = state["module"].double().eval()(x)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (ROWS, out_features):
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            return f"maps a batch of {(ROWS, in_features)} to {shape}, not {(ROWS, out_features)}"
        return None

    def rows_independent():
        # per-sample clipping bounds one row's influence only if a row's output is its own, in the
        # training mode a pack trains it in
        return row_mixing(state["module"], x)

    def pack(subset):
        return FunctionalPack(build_instances(lambda: ref.build(in_features, out_features),
                                              _streams("init", subset), device="cpu", dtype=torch.float64))

    def same_start():
        state["pack"] = pack(names)
        for i, n in enumerate(names):
            alone = pack([n])
            for key, p in alone.params.items():
                if not torch.equal(p[0], state["pack"].params[key][i]):
                    return f"config {i}'s initial {key.replace('__', '.')} differs in a pack from alone"
        return None

    def same_outputs():
        packed = state["pack"](x, _streams("dropout", names)).detach()
        for i, n in enumerate(names):
            alone = pack([n])(x, _streams("dropout", [n])).detach()[0]
            if not torch.allclose(alone, packed[i], rtol=1e-9, atol=1e-12):
                gap = (alone - packed[i]).abs().max().item()
                return f"config {i}'s outputs in a pack differ from alone by up to {gap:.3g}"
        return None

    def clipped_sum():
        model = state["pack"]
        g = torch.Generator().manual_seed(1)
        unit = torch.randn(CONFIGS, ROWS, out_features, dtype=torch.float64, generator=g)
        weight = torch.rand(CONFIGS, ROWS, dtype=torch.float64, generator=g)
        clip = torch.full((CONFIGS,), 0.5, dtype=torch.float64)
        for p in model.parameters():
            p.grad = None
        out, trace = model.forward_traced(x)
        model.add_clipped(trace, unit, None, weight, clip, None, None)
        got = [p.grad.clone() for p in model.parameters()]
        expected = [torch.zeros_like(p) for p in model.parameters()]
        for z in range(ROWS):
            model.zero_grad()
            (model(x[z:z + 1]) * unit[:, z:z + 1]).sum().backward()
            grads = [p.grad for p in model.parameters()]
            norm = torch.sqrt(sum(t.flatten(1).pow(2).sum(1) for t in grads))
            factor = torch.clamp(clip / norm.clamp_min(1e-12), max=1.0) * weight[:, z]
            for e, t in zip(expected, grads):
                e -= t * factor.view(-1, *[1] * (t.dim() - 1))
        worst = max((a - b).abs().max().item() / max(b.abs().max().item(), 1e-12) for a, b in zip(got, expected))
        return None if worst < 1e-7 else f"the clipped per-sample sum differs from a per-row loop by {worst:.3g} (relative)"

    def trains():
        # the study's default path: float32, and bf16 autocast where the CPUs have it
        return trial_step(lambda: ref.build(in_features, out_features), in_features, out_features,
                          dtype=torch.float32, bf16=True, per_sample=True)

    return [("builds for its sizes", builds), ("can be packed", packable), ("maps rows to outputs", maps_rows),
            ("a row's output does not depend on the rest of its batch, in training mode", rows_independent),
            ("trains a packed step in float32 and under bf16 autocast", trains),
            ("a config starts from the same weights in a pack as alone", same_start),
            ("a config computes the same in a pack as alone, dropout included", same_outputs),
            ("clipped per-sample gradients equal a per-row loop", clipped_sum)]


def run_model_checks(ref: ModelRef, in_features: int, out_features: int,
                     report: Callable[[str, str | None, bool], None]) -> bool:
    """Run ``model_checks`` in order, ``report(name, why, skipped)`` after each; True if all pass."""
    failed = False
    for name, check in model_checks(ref, in_features, out_features):
        if failed:
            report(name, None, True)
            continue
        try:
            why = check()
        except Exception as e:  # noqa: BLE001 - the user's module's own error is the check's answer
            why = f"{type(e).__name__}: {' '.join(str(e).split())}"
        failed = why is not None
        report(name, why, False)
    return not failed
