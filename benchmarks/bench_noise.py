"""The grid discrete Laplace mechanism against the floating-point Laplace it replaced, alone
and inside the engine, per config-epoch, in one run on one device.

    .venv/bin/python benchmarks/bench_noise.py [--device cpu|cuda] [--threads 1] [--packs 8]
                                              [--epochs 2] [--rounds 3] [--json out.json]

- privatisation alone: one epoch of FEDERATE's training rows on real Adult (27,133 rows of
  300 entries, batches of 2,000) for a pack of K configs at eps 8-20, ``laplace_privatize``
  (grid, exact) against the float sampler fairdp used before (24-bit uniforms, inverse CDF in
  float32: the reference is kept here, not in the package);
- the engine: a pack of K FEDERATE configs trained for --epochs on Adult (the D.3 architecture),
  once as fairdp trains it and once with the float sampler patched in, seconds per config-epoch.

On a CPU the grid mechanism runs as fairdp runs it, by its compiled kernel (``grid``), and by
the NumPy path that is its fallback where no C compiler is found (``grid_numpy``); the two are
checked bit-identical on the benchmark's own batch before anything is timed. ``--threads``
sets torch's CPU threads (1: a trial's default). Interleaved rounds (each times every
variant); ratios are medians over rounds of each round's ratio to the float sampler.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time

import torch

from fairdp import _rng
from fairdp.data import load_dataset
from fairdp.engine import TrainSettings
from fairdp.methods import get_method
from fairdp.privacy import _grid_kernel, l1_normalize, laplace_privatize


def float_laplace_privatize(h, eps, generator=None, *, eps_checked=False):
    """The sampler fairdp used until the grid mechanism: float32 U[-1/2, 1/2) from 24-bit
    uniforms, -b sign(u) log1p(-2|u|), |x| capped near 16.6 b (a support gap) and open to
    Mironov's attack. For timing only."""
    x = l1_normalize(h)
    scale = 2.0 / torch.tensor(eps, dtype=x.dtype, device=x.device).reshape(-1, *([1] * (x.dim() - 1)))
    u = _rng.uniform(x.shape[1:], generator, device=x.device, dtype=x.dtype, low=-0.5, high=0.5)
    cap = 1.0 - torch.finfo(x.dtype).eps
    return x + torch.copysign(u.abs().mul_(2.0).clamp_(max=cap).neg_().log1p_(), u).mul_(scale)


@contextlib.contextmanager
def kernel_off(off: bool):
    """The grid mechanism's NumPy path (``FAIRDP_GRID_KERNEL=0``) while ``off``."""
    saved = os.environ.get(_grid_kernel.DISABLE_ENV)
    if off:
        os.environ[_grid_kernel.DISABLE_ENV] = "0"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(_grid_kernel.DISABLE_ENV, None)
        else:
            os.environ[_grid_kernel.DISABLE_ENV] = saved


def check_identical(k: int, device) -> bool:
    """The kernel's release equals the NumPy path's on a (k, 2000, 300) batch, bit for bit."""
    eps = tuple(float(e) for e in ([8, 12, 16, 20] * k)[:k])
    h = torch.randn(k, 2000, 300, device=device)
    names = [f"bench/{i}/identical" for i in range(k)]
    kernel = laplace_privatize(h, eps, _rng.PackStream.from_names(names, device), eps_checked=True)
    with kernel_off(True):
        numpy = laplace_privatize(h, eps, _rng.PackStream.from_names(names, device), eps_checked=True)
    return bool(torch.equal(kernel, numpy))


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def privatise_epoch(fn, k: int, rows: int, device) -> float:
    eps = tuple(float(e) for e in ([8, 12, 16, 20] * k)[:k])
    stream = _rng.PackStream.from_names([f"bench/{i}/noise" for i in range(k)], device)
    h = torch.randn(k, 2000, 300, device=device)
    fn(h, eps, stream, eps_checked=True)  # tables built, kernels loaded
    sync(device)
    t = time.perf_counter()
    for _ in range(-(-rows // 2000)):
        fn(h, eps, stream, eps_checked=True)
    sync(device)
    return (time.perf_counter() - t) / k


def engine_epoch(data, k: int, epochs: int, device, patched: bool) -> float:
    import fairdp.engine._model as model_module

    method = get_method("federate")
    configs = [{"eps": float(e), "lam": 0.5} for e in ([8, 12, 16, 20] * k)[:k]]
    settings = TrainSettings(epochs=epochs, batch_size=2000, device=str(device))
    saved = model_module.laplace_privatize
    if patched:
        model_module.laplace_privatize = float_laplace_privatize
    try:
        sync(device)
        t = time.perf_counter()
        method.train_pack(data, configs, seed=0, settings=settings)
        sync(device)
        return (time.perf_counter() - t) / k / epochs
    finally:
        model_module.laplace_privatize = saved


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: a trial's default)")
    ap.add_argument("--packs", type=int, default=8, help="configs per pack K")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    data = load_dataset("adult")
    rows = len(data.splits["train"])
    on_cpu = device.type == "cpu"
    if on_cpu and _grid_kernel.kernel() is None:
        raise SystemExit("bench_noise: the grid kernel could not be built here (see the log line); nothing to compare")
    variants = {"float": (True, False), "grid": (False, False)}  # (float sampler, NumPy path)
    if on_cpu:
        variants["grid_numpy"] = (False, True)
    identical = check_identical(args.packs, device) if on_cpu else None
    alone = {v: [] for v in variants}
    engine = {v: [] for v in variants}
    engine_epoch(data, args.packs, 1, device, patched=False)  # warm-up: tables, kernels
    # one untimed round of every variant first: the first large allocations of a process are
    # mapped page by page (the float sampler's temporaries took 2x longer in the first rounds)
    for float_sampler, numpy_path in variants.values():
        with kernel_off(numpy_path):
            privatise_epoch(float_laplace_privatize if float_sampler else laplace_privatize, args.packs, rows, device)
    for r in range(args.rounds):
        for name, (float_sampler, numpy_path) in variants.items():
            with kernel_off(numpy_path):
                fn = float_laplace_privatize if float_sampler else laplace_privatize
                alone[name].append(privatise_epoch(fn, args.packs, rows, device))
                engine[name].append(engine_epoch(data, args.packs, args.epochs, device, patched=float_sampler))
        print(f"round {r + 1}: privatise " + ", ".join(f"{v} {alone[v][-1] * 1e3:.1f} ms" for v in variants)
              + " per config-epoch; engine " + ", ".join(f"{v} {engine[v][-1]:.3f} s" for v in variants), flush=True)

    def ratios(times: dict) -> dict:
        return {v: statistics.median(g / f for g, f in zip(times[v], times["float"])) for v in variants if v != "float"}

    out = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(), "pack": args.packs, "epochs": args.epochs, "rows": rows,
        "rounds": args.rounds, "kernel_equals_numpy_path": identical,
        "privatise_ms": {k: statistics.median(v) * 1e3 for k, v in alone.items()},
        "privatise_ratio": ratios(alone),
        "engine_s": {k: statistics.median(v) for k, v in engine.items()},
        "engine_ratio": ratios(engine),
    }
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return out


if __name__ == "__main__":
    main()
