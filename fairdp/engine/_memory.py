"""How many of a pack's configs are computed as one batched model: the CPU cache rule and
the CUDA memory rule."""

from __future__ import annotations

import torch

from fairdp.engine._settings import TrainSettings

# Float32 activation budgets per layer for a chunk of configs on a CPU: a core's cache for
# elementwise-bound models, a larger slice of the last-level cache for GEMM-bound ones.
CPU_CHUNK_FLOATS = 1 << 20
CPU_CHUNK_FLOATS_GEMM_BOUND = 1 << 23
CPU_BATCHED_INTENSITY = 500  # matmul FLOPs per activation element above which batching pays on a CPU

# On CUDA a pack runs as one batched model unless its memory estimate exceeds this share of
# the trial's part of the device (the rest: CUDA context, allocator slack, the probes).
CUDA_MEMORY_SHARE = 0.6
# Float32 copies of each layer's output alive in a training step: pre- and post-activation,
# dropout mask, privacy noise, and the two gradients flowing back.
ACTIVATION_COPIES = 6
# Bytes per representation entry a privatiser holds at once on top of those copies: the grid
# Laplace mechanism's three 64-bit words (twice: a replayed draw's graph output and its clone),
# its float64 input and output, and (run eagerly) its int64 rounded input and noise. On an H200
# 8 * (2 * 3 + 2) fell 0.5% short of a 32-config FEDERATE pack's peak.
PRIVATISER_BYTES = 8 * (2 * 3 + 4)


def bytes_per_config(shapes: list[tuple[int, int]], batch_size: int, eval_rows: int, kept_rows: int = 0,
                     representation_dim: int = 0, itemsize: int = 4) -> int:
    """Memory estimate of one config in a pack: parameters with their gradient, two Adam
    moments and the best epoch's copy; a training step's activations; one evaluation chunk's
    forward pass (``eval_rows``: the loop evaluates ``EVAL_CHUNK`` rows at a time, not a whole
    split); the representations the pack keeps on the device for ``kept_rows`` rows; and a
    privatiser's transient words for the larger of a batch and an evaluation chunk of
    representations (``PRIVATISER_BYTES``; counted for every method with a representation)."""
    params = sum(a * b + b for a, b in shapes)
    widths = sum(b for _, b in shapes)
    return (itemsize * (5 * params + ACTIVATION_COPIES * batch_size * widths + eval_rows * widths
                        + kept_rows * representation_dim)
            + PRIVATISER_BYTES * max(batch_size, eval_rows) * representation_dim)


def cuda_config_chunk(per_config: int, device_bytes: int, gpu_share: float, k: int) -> int:
    """Configs per batched chunk on a GPU: as many as fit in ``CUDA_MEMORY_SHARE`` of the
    trial's share of the device (``gpu_share`` = the trial's fractional GPU), at least one."""
    return max(1, min(k, int(CUDA_MEMORY_SHARE * gpu_share * device_bytes // max(per_config, 1))))


def config_chunk(settings: TrainSettings, shapes: list[tuple[int, int]], k: int, device: torch.device,
                 eval_rows: int = 0, kept_rows: int = 0, representation_dim: int = 0) -> int:
    """How many of a pack's K configs are computed as one batched model.

    On CUDA all K (batching is what fills the GPU) unless the pack's memory estimate
    (``bytes_per_config``) exceeds ``CUDA_MEMORY_SHARE`` of the trial's share of the device
    (``TrainSettings.gpu_share``); then as many as fit (``cuda_config_chunk``). On a CPU it depends on the model's
    arithmetic intensity (matmul FLOPs per activation element, sum(in*out) / sum(out)).
    Measured on a 2-core machine (benchmarks/bench_engine.py): the Adult-shaped FEDERATE
    model (intensity ~250) runs slower per config when batched, because the elementwise
    work (dropout, noise, normalisation) on K x batch x width activations spills out of
    cache; the Twitter-shaped one (2304-d input, intensity ~800) runs 1.3x faster per config
    in a pack of 15, the shared-input GEMM dominating, but slower again at 150. So a chunk's
    widest activation is kept within ``CPU_CHUNK_FLOATS`` (elementwise-bound) or
    ``CPU_CHUNK_FLOATS_GEMM_BOUND`` (GEMM-bound). Chunking never changes results: every
    config has its own random streams and its own optimiser state.
    """
    if settings.config_chunk is not None:
        return min(settings.config_chunk, k)
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        per_config = bytes_per_config(shapes, settings.batch_size, eval_rows, kept_rows, representation_dim)
        return cuda_config_chunk(per_config, total, settings.gpu_share, k)
    intensity = sum(a * b for a, b in shapes) / sum(b for _, b in shapes)
    budget = CPU_CHUNK_FLOATS_GEMM_BOUND if intensity >= CPU_BATCHED_INTENSITY else CPU_CHUNK_FLOATS
    widest = max(b for _, b in shapes)
    return max(1, min(k, budget // (settings.batch_size * widest)))
