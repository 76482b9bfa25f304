"""The engine against the hardware and a plain PyTorch loop: per-config time, share of the
measured matmul peak, packing and precision ratios.

    .venv/bin/python benchmarks/bench_engine.py [--device cpu|cuda] [--epochs 2] [--packs 8,150]
                                               [--rounds 3] [--bf16] [--json out.json]

FEDERATE on real Adult with its D.3 architecture (85 features, encoder 300-300, adversary
300-300-2, batch 2000). Measured in one process on one device:

- the device's matmul peaks, fp32 and bf16 (and TF32 on CUDA), on tensors on that device;
- the model's FLOPs per config-epoch, training and per-epoch validation, counted by
  torch's FlopCounterMode;
- a plain PyTorch loop of the same model (nn.Linear, nn.Dropout, Adam; one config) as the
  reference for "a packed config costs no more than the plain loop";
- fairdp packs of K configs (one batched model, and the engine's default chunking) in
  float32 (and bf16 autocast where the device has native bf16 matmuls, or with --bf16), each
  as seconds per config-epoch, its ratio to the plain loop and its share of the fp32 peak.
Shared machines drift: each of --rounds rounds times the plain loop and then every variant,
and a variant's ratio is the median over rounds of its time / that round's plain loop.
On a CPU the threads are torch's default unless --threads says otherwise.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import numpy as np
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from fairdp.data import load_dataset
from fairdp.engine import TrainSettings
from fairdp.engine._shared import native_bf16
from fairdp.methods import get_method
from fairdp.study.spec._precision import choose_precision


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak_gflops(device: torch.device, dtype=torch.float32, n: int = 4096, reps: int = 5) -> float:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


class _GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lam):
        ctx.lam = lam
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -ctx.lam * grad, None


def plain_federate(data, epochs: int, device: torch.device) -> float:
    """Seconds per epoch of FEDERATE as one would write it for one config in plain PyTorch:
    training with dropout, L1 normalisation, Laplace noise and a GRL adversary, and a
    validation pass per epoch."""
    torch.manual_seed(0)
    train, valid = data.split("train"), data.split("valid")
    x = torch.as_tensor(train.X, dtype=torch.float32, device=device)
    y, s = torch.as_tensor(train.y, device=device), torch.as_tensor(train.s, device=device)
    xv = torch.as_tensor(valid.X, dtype=torch.float32, device=device)
    d = x.shape[1]
    enc = nn.Sequential(nn.Linear(d, 300), nn.ReLU(), nn.Dropout(0.1), nn.Linear(300, 300), nn.ReLU(),
                        nn.Dropout(0.1)).to(device)
    clf = nn.Linear(300, 2).to(device)
    adv = nn.Sequential(nn.Linear(300, 300), nn.ReLU(), nn.Dropout(0.1), nn.Linear(300, 300), nn.ReLU(),
                        nn.Dropout(0.1), nn.Linear(300, 2)).to(device)
    modules = (enc, clf, adv)
    opt = torch.optim.Adam([p for m in modules for p in m.parameters()], lr=1e-3)
    noise = torch.distributions.Laplace(torch.tensor(0.0, device=device), torch.tensor(2 / 8.0, device=device))
    sync(device)
    t = time.perf_counter()
    for _ in range(epochs):
        for m in modules:
            m.train()
        perm = torch.randperm(len(x), device=device)
        for i in range(0, len(x), 2000):
            idx = perm[i:i + 2000]
            h = enc(x[idx])
            z = h / h.abs().sum(1, keepdim=True) + noise.sample(h.shape)
            loss = (nn.functional.cross_entropy(clf(z), y[idx])
                    + nn.functional.cross_entropy(adv(_GradReverse.apply(z, 0.5)), s[idx]))
            opt.zero_grad()
            loss.backward()
            opt.step()
        for m in modules:
            m.eval()
        with torch.no_grad():
            h = enc(xv)
            clf(h / h.abs().sum(1, keepdim=True) + noise.sample(h.shape)).argmax(1)
    sync(device)
    return (time.perf_counter() - t) / epochs


def flops_per_config_epoch(method, data, config, settings) -> float:
    """FLOPs of one config over ``settings.epochs`` epochs (with the final evaluation of the
    valid and test splits, as timed), per epoch."""
    counter = FlopCounterMode(display=False)
    with counter:
        method.train_pack(data, [config], seed=0, settings=settings)
    return counter.get_total_flops() / settings.epochs


def per_config_epoch(method, data, configs, settings) -> float:
    device = torch.device(settings.device)
    sync(device)
    t = time.perf_counter()
    method.train_pack(data, configs, seed=0, settings=settings)
    sync(device)
    return (time.perf_counter() - t) / len(configs) / settings.epochs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--packs", default="8", help="pack sizes K (comma-separated)")
    ap.add_argument("--threads", type=int, help="torch threads on a CPU (default: torch's)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median ratio)")
    ap.add_argument("--bf16", action="store_true",
                    help="also time bf16 where the device has no native bf16 matmuls (emulated: very slow)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    bf16 = args.bf16 or native_bf16(device)
    peaks = {"fp32": matmul_peak_gflops(device)}
    if bf16:
        peaks["bf16"] = matmul_peak_gflops(device, torch.bfloat16, n=4096 if native_bf16(device) else 1024, reps=2)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        peaks["tf32"] = matmul_peak_gflops(device)
        torch.backends.cuda.matmul.allow_tf32 = False
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"device: {where}; native bf16 matmuls: {'yes' if native_bf16(device) else 'no'}; matmul peaks: "
          + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peaks.items()))
    default = choose_precision(TrainSettings(), None, device.type == "cuda", lambda: native_bf16("cpu"))
    print(f"a new study without train.precision trains here in {default.describe()}")

    data = load_dataset("adult")
    method = get_method("federate")
    grid = method.expand(method.paper_grid("adult"))
    base = TrainSettings(epochs=args.epochs, device=args.device, precision="float32")
    flops = flops_per_config_epoch(method, data, grid[0], base)
    counter = FlopCounterMode(display=False)
    with counter:
        plain_federate(data, 1, device)  # also the warm-up
    plain_flops = counter.get_total_flops()
    method.train_pack(data, grid[:1], seed=0, settings=replace(base, epochs=1))  # warm-up
    precisions = ["float32"] + (["bf16"] if bf16 else [])
    if device.type == "cuda":
        precisions.insert(1, "tf32")
    # K = 1 is always timed (the plain loop's equal); --packs 1,8 names it once more
    variants = [(k, chunk, precision) for k in sorted({1, *(int(v) for v in args.packs.split(","))})
                for chunk in ((None,) if k == 1 else (k, None)) for precision in precisions]
    plains, times = [], {v: [] for v in variants}
    for r in range(args.rounds):
        plains.append(plain_federate(data, args.epochs, device))
        for k, chunk, precision in variants:
            settings = replace(base, config_chunk=chunk, precision=precision)
            times[(k, chunk, precision)].append(per_config_epoch(method, data, grid[:k], settings))
        print(f"round {r + 1} of {args.rounds}: plain loop {plains[-1]:.3f} s per epoch", flush=True)
    plain = float(np.median(plains))
    print(f"FEDERATE Adult, {args.epochs} epochs: fairdp {flops / 1e9:.1f} GFLOP per config-epoch (training, "
          f"validation, the final valid + test pass); the plain loop {plain_flops / 1e9:.1f} GFLOP per epoch in "
          f"{plain:.3f} s (median of {args.rounds}) = {plain_flops / plain / 1e9:.0f} GFLOP/s "
          f"({plain_flops / plain / 1e9 / peaks['fp32']:.0%} of the fp32 peak)\n")
    rows = []
    for (k, chunk, precision), ts in times.items():
        per = float(np.median(ts))
        ratios = np.array(ts) / np.array(plains)
        rows.append({"K": k, "chunk": "all" if chunk else "auto", "precision": precision,
                     "per_config_epoch_s": per, "vs_plain": float(np.median(ratios)),
                     "vs_plain_range": [float(ratios.min()), float(ratios.max())],
                     "gflops": flops / per / 1e9, "fp32_peak_share": flops / per / 1e9 / peaks["fp32"]})
    print("| K | chunking | precision | s per config-epoch | / plain loop (median, range over rounds) | GFLOP/s "
          "| share of fp32 peak |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["vs_plain_range"]
        print(f"| {r['K']} | {r['chunk']} | {r['precision']} | {r['per_config_epoch_s']:.3f} | {r['vs_plain']:.2f}x "
              f"({lo:.2f}-{hi:.2f}) | {r['gflops']:.0f} | {r['fp32_peak_share']:.0%} |")
    fp32 = {(r["K"], r["chunk"]): r["per_config_epoch_s"] for r in rows if r["precision"] == "float32"}
    for r in rows:
        if r["precision"] != "float32":
            print(f"{r['precision']} throughput / float32, K={r['K']} {r['chunk']}: "
                  f"{fp32[(r['K'], r['chunk'])] / r['per_config_epoch_s']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": where, "peaks_gflops": peaks, "epochs": args.epochs, "flops_per_config_epoch": flops,
                       "plain_s": plain, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
