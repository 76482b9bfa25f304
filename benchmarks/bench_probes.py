"""Leakage and MDL probes: batched torch (K representations at once) against scikit-learn.

    .venv/bin/python benchmarks/bench_probes.py [--k 150] [--train-epochs 2] [--sklearn-reps 2]

Representations come from a real FEDERATE pack on Adult (paper grid, Twitter-shaped
architecture, 300-d, ~9,000 valid and test rows). Per-representation probe time is
compared with scikit-learn's MLPClassifier on the same data (timed on a few
representations), and the pack's evaluation time with its training time at the
study's epoch count (per-epoch time measured here, scaled linearly).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

from fairdp.data import load_dataset
from fairdp.engine import TrainSettings
from fairdp.methods import get_method
from fairdp.metrics import FEDERATE_PROBE, ProbeSettings, leakage, mdl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=150)
    ap.add_argument("--train-epochs", type=int, default=2, help="epochs timed for the training cost")
    ap.add_argument("--study-epochs", type=int, default=30, help="epochs a study trains for")
    ap.add_argument("--sklearn-reps", type=int, default=2)
    args = ap.parse_args()
    data = load_dataset("adult")
    method = get_method("federate")
    configs = method.expand(method.paper_grid("adult"))[: args.k]
    t = time.perf_counter()
    res = method.train_pack(data, configs, seed=0, settings=TrainSettings(epochs=args.train_epochs))
    train_epoch_s = (time.perf_counter() - t) / args.train_epochs
    reps = res.representations
    s_valid, s_test = data.split("valid").s, data.split("test").s
    timings = {}
    # fairdp's probe (torch, batched), its sklearn reference (same recipe), and the probe of
    # FEDERATE's public code: standardised, MLPClassifier(alpha=1, max_iter=1000), no early stopping.
    variants = {
        "torch": (ProbeSettings(), args.k),
        "torch, FEDERATE's settings": (FEDERATE_PROBE, args.k),
        "sklearn": (ProbeSettings(backend="sklearn"), args.sklearn_reps),
        "sklearn, FEDERATE's settings": (replace(FEDERATE_PROBE, backend="sklearn"), 1),
    }
    for backend, (settings, k) in variants.items():
        t = time.perf_counter()
        leak = leakage(reps["valid"][:k], s_valid, reps["test"][:k], s_test, settings)
        t_leak = (time.perf_counter() - t) / k
        t = time.perf_counter()
        code = mdl(reps["test"][:k], s_test, settings)
        t_mdl = (time.perf_counter() - t) / k
        timings[backend] = (t_leak, t_mdl, np.asarray(leak), np.asarray(code))
        print(f"{backend}: {k} representations, leakage {t_leak:.2f} s/rep, MDL {t_mdl:.2f} s/rep", flush=True)
    n = args.sklearn_reps
    tl, tm, leak_t, mdl_t = timings["torch"]
    print(f"\n| probe | s/rep | leakage s/rep | MDL s/rep | torch batched (K={args.k}) speed-up |")
    print("|---|---|---|---|---|")
    for name, (sl, sm, _, _) in timings.items():
        print(f"| {name} | {sl + sm:.2f} | {sl:.2f} | {sm:.2f} | {(sl + sm) / (tl + tm):.1f}x |")
    _, _, leak_s, mdl_s = timings["sklearn"]
    print(f"\nsame representations (first {n}): leakage torch {np.round(leak_t[:n], 1)} vs sklearn "
          f"{np.round(leak_s, 1)}; MDL torch {np.round(mdl_t[:n], 3)} vs sklearn {np.round(mdl_s, 3)} kbits")
    evaluate_s = (tl + tm) * args.k
    train_s = train_epoch_s * args.study_epochs
    print(f"\npack of {args.k}: training {train_epoch_s:.0f} s/epoch -> {train_s:.0f} s for "
          f"{args.study_epochs} epochs; evaluating (leakage + MDL) {evaluate_s:.0f} s "
          f"= {evaluate_s / train_s:.2f}x the training time")
    fl, fm, _, _ = timings["torch, FEDERATE's settings"]
    print(f"with FEDERATE's probe (alpha 1, no early stopping): {(fl + fm) * args.k:.0f} s "
          f"= {(fl + fm) * args.k / train_s:.2f}x the training time")


if __name__ == "__main__":
    main()
