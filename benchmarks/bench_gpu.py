"""One seed's FEDERATE grid on a GPU against the device's measured ceilings: wall time of
training and probes, share of the matmul peak, and how busy the GPU is.

    python benchmarks/bench_gpu.py [--k 150] [--epochs 30] [--methods federate,multi_adversarial]
                                   [--profile FILE] [--json FILE]

FEDERATE on real Adult with its D.3 architecture (85 features, encoder 300-300, adversary
300-300-2, batch 2000), the study's settings (train precision: the default, TF32 on CUDA).
Measured in one process on one device:

- the ceilings: 8192^3 matmul peaks in fp32, TF32 and bf16, and a device-to-device copy;
- per method, one pack of the first K configs of its paper grid for --epochs epochs: wall
  time, FLOPs (torch's FlopCounterMode on one config, extrapolated linearly in epochs:
  the count is exact per epoch), the share of the fp32 and TF32 peaks, the configs per
  batched chunk the memory rule chose, the memory estimate against
  torch.cuda.max_memory_allocated, and the GPU's busy share (NVML's utilisation, sampled);
- for FEDERATE, leakage (valid -> test) and MDL (test) of the K representations with
  FEDERATE's probe protocol (studies/federate_adult.yaml), timed and busy share likewise.

The issue-14 targets it prints against: the 150-config FEDERATE grid with probes <= 6 s,
training >= 50% of the fp32 peak (or its TF32 equivalent), probes >= 80% busy.
--profile writes torch.profiler's table of a short FEDERATE pack and its probes.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from dataclasses import replace

import torch
from torch.utils.flop_counter import FlopCounterMode

from fairdp.data import load_dataset
from fairdp.engine import EVAL_CHUNK, TrainSettings
from fairdp.engine._arch import architecture_from
from fairdp.engine._memory import bytes_per_config, config_chunk
from fairdp.methods import get_method
from fairdp.metrics import FEDERATE_PROBE, leakage, mdl


def matmul_peak_gflops(dtype: torch.dtype, tf32: bool = False, n: int = 8192, reps: int = 10) -> float:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        for _ in range(3):
            a @ b
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            a @ b
        end.record()
        end.synchronize()
        return 2 * n**3 * reps / (start.elapsed_time(end) / 1e3) / 1e9
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False


def copy_gbytes_per_s(nbytes: int = 2 << 30, reps: int = 10) -> float:
    src = torch.empty(nbytes // 4, device="cuda").uniform_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        dst.copy_(src)
    end.record()
    end.synchronize()
    return 2 * nbytes * reps / (start.elapsed_time(end) / 1e3) / 1e9


class BusySampler:
    """The GPU's busy share over a block: NVML's utilisation (the share of its sample period
    in which a kernel ran), read every 20 ms on a thread and averaged."""

    def __init__(self, period_s: float = 0.02):
        self.period_s, self.samples = period_s, []
        self._stop = threading.Event()

    def _run(self):
        while not self._stop.is_set():
            self.samples.append(torch.cuda.utilization())
            time.sleep(self.period_s)

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def share(self) -> float:
        return sum(self.samples) / max(len(self.samples), 1) / 100


def timed(fn):
    torch.cuda.synchronize()
    with BusySampler() as busy:
        t = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t
    return out, seconds, busy.share


def flops_per_config(method, data, config, settings: TrainSettings) -> float:
    """One config's FLOPs over ``settings.epochs`` epochs, from counts at 1 and 2 epochs
    (per-epoch work is the same every epoch; the final evaluation is counted once)."""
    counts = []
    for epochs in (1, 2):
        counter = FlopCounterMode(display=False)
        with counter:
            method.train_pack(data, [config], seed=0, settings=replace(settings, epochs=epochs))
        counts.append(counter.get_total_flops())
    per_epoch = counts[1] - counts[0]
    return counts[0] + per_epoch * (settings.epochs - 1)


def bench_method(name, data, args, peaks, out):
    method = get_method(name)
    grid = method.expand(method.paper_grid("adult"))[: args.k]
    settings = TrainSettings(epochs=args.epochs, batch_size=2000, device="cuda")
    method.train_pack(data, grid[:2], seed=0, settings=replace(settings, epochs=1))  # warm-up
    flops = flops_per_config(method, data, grid[0], settings) * len(grid)
    shapes = method.layer_shapes(data, architecture_from(None, "adult"))
    torch.cuda.reset_peak_memory_stats()
    res, seconds, busy = timed(lambda: method.train_pack(data, grid, seed=0, settings=settings))
    row = {"method": name, "configs": len(grid), "epochs": args.epochs, "precision": res.precision,
           "train_s": seconds, "s_per_config": seconds / len(grid), "tflops": flops / seconds / 1e12,
           "fp32_peak_share": flops / seconds / 1e9 / peaks["fp32"],
           "tf32_peak_share": flops / seconds / 1e9 / peaks["tf32"], "train_busy": busy,
           "max_allocated_gib": torch.cuda.max_memory_allocated() / 2**30}
    # the memory rule's inputs as fit_pack computes them
    eval_rows = min(EVAL_CHUNK, max(len(v) for v in data.splits.values()))
    kept, width = sum(len(data.splits[n]) for n in ("valid", "test")), max(b for _, b in shapes)
    row["chunk"] = config_chunk(settings, shapes, len(grid), torch.device("cuda"), eval_rows, kept, width)
    row["estimate_gib"] = bytes_per_config(shapes, 2000, eval_rows, kept, width) * row["chunk"] / 2**30
    out.append(row)
    print(f"{name}: {len(grid)} configs x {args.epochs} epochs ({res.precision}) in {seconds:.1f} s = "
          f"{seconds / len(grid):.3f} s per config; {row['tflops']:.1f} TFLOP/s = {row['fp32_peak_share']:.0%} of the "
          f"fp32 peak, {row['tf32_peak_share']:.0%} of TF32's; GPU busy {busy:.0%}; peak memory "
          f"{row['max_allocated_gib']:.1f} GiB (the memory rule: {row['chunk']} configs per chunk, estimate "
          f"{row['estimate_gib']:.1f} GiB)", flush=True)
    return res


def bench_probes(res, data, out):
    reps = res.representations
    s_valid, s_test = data.split("valid").s, data.split("test").s
    _, t_leak, b_leak = timed(lambda: leakage(reps["valid"], s_valid, reps["test"], s_test, FEDERATE_PROBE))
    _, t_mdl, b_mdl = timed(lambda: mdl(reps["test"], s_test, FEDERATE_PROBE))
    seconds = t_leak + t_mdl
    busy = (b_leak * t_leak + b_mdl * t_mdl) / seconds
    out.append({"probes_s": seconds, "leakage_s": t_leak, "mdl_s": t_mdl, "probes_busy": busy})
    print(f"probes (FEDERATE's protocol) for {len(reps['test'])} representations: leakage {t_leak:.1f} s "
          f"(busy {b_leak:.0%}), MDL {t_mdl:.1f} s (busy {b_mdl:.0%})", flush=True)
    return seconds, busy


def profile(data, k: int, path: str) -> None:
    method = get_method("federate")
    grid = method.expand(method.paper_grid("adult"))[:k]
    settings = TrainSettings(epochs=3, batch_size=2000, device="cuda")
    method.train_pack(data, grid, seed=0, settings=settings)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with open(path, "w") as f:
        with torch.profiler.profile(activities=acts) as prof:
            res = method.train_pack(data, grid, seed=0, settings=settings)
        f.write(f"# FEDERATE pack of {k}, 3 epochs\n")
        f.write(prof.key_averages().table(sort_by="cuda_time_total", row_limit=40) + "\n")
        f.write(prof.key_averages().table(sort_by="cpu_time_total", row_limit=40) + "\n")
        probe = replace(FEDERATE_PROBE, max_epochs=20)
        with torch.profiler.profile(activities=acts) as prof:
            leakage(res.representations["valid"], data.split("valid").s, res.representations["test"],
                    data.split("test").s, probe)
        f.write(f"# leakage probe of {k}, at most 20 epochs\n")
        f.write(prof.key_averages().table(sort_by="cuda_time_total", row_limit=30) + "\n")
        f.write(prof.key_averages().table(sort_by="cpu_time_total", row_limit=30) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=150, help="configs of each method's paper grid")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--methods", default="federate,multi_adversarial")
    ap.add_argument("--profile", help="write a torch.profiler table of a short FEDERATE pack here")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py: needs a CUDA GPU")
    peaks = {"fp32": matmul_peak_gflops(torch.float32), "tf32": matmul_peak_gflops(torch.float32, tf32=True),
             "bf16": matmul_peak_gflops(torch.bfloat16)}
    copy = copy_gbytes_per_s()
    name = torch.cuda.get_device_name()
    print(f"device: {name}; matmul peaks (8192^3): " + ", ".join(f"{k} {v / 1e3:.0f} TFLOP/s" for k, v in peaks.items())
          + f"; device-to-device copy {copy:.0f} GB/s (read + written)", flush=True)
    data = load_dataset("adult")
    rows = []
    total = None
    for method in args.methods.split(","):
        res = bench_method(method, data, args, peaks, rows)
        if method == "federate":
            probe_s, busy = bench_probes(res, data, rows)
            total = rows[-2]["train_s"] + probe_s
            fed = rows[-2]
    if total is not None:
        print(f"\nFEDERATE grid of one seed ({fed['configs']} configs, {args.epochs} epochs) with leakage + MDL: "
              f"{total:.1f} s (target <= 6 s: {'met' if total <= 6 else 'not met'}); training at "
              f"{fed['fp32_peak_share']:.0%} of the fp32 peak, {fed['tf32_peak_share']:.0%} of TF32's (target >= 50%: "
              f"{'met' if max(fed['fp32_peak_share'], fed['tf32_peak_share']) >= 0.5 else 'not met'}); probes busy "
              f"{busy:.0%} (target >= 80%: {'met' if busy >= 0.8 else 'not met'}); probes / training = "
              f"{(total - fed['train_s']) / fed['train_s']:.2f}x")
    if args.profile:
        profile(data, args.k, args.profile)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "peaks_gflops": peaks, "copy_gbytes_per_s": copy, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
