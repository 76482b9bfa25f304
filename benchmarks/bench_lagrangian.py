"""Per-epoch training time of N (plain), F-LD, P (DP-SGD) and PF-LD: the layout of Tran et al.'s Table 1.

    .venv/bin/python benchmarks/bench_lagrangian.py [--epochs 1]
    .venv/bin/python benchmarks/bench_lagrangian.py --groups [--epochs 1] [--k 8] [--batches 256 1024]

On real Adult (27,133 training rows, 85 features; the paper uses Bank, of similar size),
networks of 2 and 10 hidden layers of 64 units, minibatches of 16, 64 and 256, one config
per run, dp constraints; P (``dpsgd``, private without fairness) and PF-LD at eps = 1
(delta 1e-5), C_p = 1, C_d = 5. Times are the training loop's own (``PackResult.duration_s``):
the one-off noise calibration by the accountant (~0.25 s) is left out of "per epoch".

``--groups``: PF-LD's cost against DP-SGD's by ``private_group`` (the group whose rows are
its private sample, of size q |group|): packs of K configs (eps spread over 0.5-10) on PF-LD's
own two-hidden-layer network, for each minibatch size, PF-LD with group 1 private (the
default) and with group 0, and each one's time over DP-SGD's. On Adult (sex), group 0
(Female) holds a third of the training rows, group 1 (Male) two thirds.
"""

from __future__ import annotations

import argparse

from fairdp.data import load_dataset
from fairdp.engine import Architecture, TrainSettings
from fairdp.methods import get_method

RUNS = {
    "N": ("unconstrained", {}),
    "F-LD": ("fld", {"fairness_notion": "dp"}),
    "P": ("dpsgd", {"eps": 1.0, "clip_primal": 1.0}),
    "PF-LD": ("pfld", {"fairness_notion": "dp", "eps": 1.0, "clip_primal": 1.0, "clip_dual": 5.0}),
}


def groups(data, epochs: int, k: int, batches: list[int]) -> None:
    """PF-LD (private group 1, then 0) against DP-SGD, K configs a pack, s per epoch."""
    train_s = data.splits["train"]
    share0 = float((data.s[train_s] == 0).mean())
    print(f"group 0 ({data.group_names[0]}): {share0:.1%} of the training rows, "
          f"group 1 ({data.group_names[1]}): {1 - share0:.1%}")
    eps = [0.5 + 9.5 * i / max(k - 1, 1) for i in range(k)]
    runs = {"P": ("dpsgd", [{"eps": e, "clip_primal": 1.0} for e in eps])}
    for g in (1, 0):
        runs[f"PF-LD g={g}"] = ("pfld", [{"fairness_notion": "dp", "eps": e, "clip_primal": 1.0, "clip_dual": 5.0,
                                          "private_group": g} for e in eps])
    print("| K | |B| | P s/epoch | PF-LD g=1 s/epoch | PF-LD g=0 s/epoch | g=1 / P | g=0 / P |")
    print("|---|---|---|---|---|---|---|")
    for batch in batches:
        settings = TrainSettings(epochs=epochs, batch_size=batch)
        times = {}
        for label, (name, configs) in runs.items():
            result = get_method(name).train_pack(data, configs, seed=0, settings=settings)
            times[label] = result.duration_s / epochs
        p, one, zero = times["P"], times["PF-LD g=1"], times["PF-LD g=0"]
        print(f"| {k} | {batch} | {p:.2f} | {one:.2f} | {zero:.2f} | {one / p:.2f}x | {zero / p:.2f}x |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--groups", action="store_true", help="PF-LD by private_group against DP-SGD, K configs a pack")
    ap.add_argument("--k", type=int, default=8, help="configs a pack (--groups)")
    ap.add_argument("--batches", type=int, nargs="+", default=[256, 1024], help="minibatch sizes (--groups)")
    args = ap.parse_args()
    data = load_dataset("adult")
    get_method("fld").train_pack(data, [{"fairness_notion": "dp"}], seed=0,
                                 settings=TrainSettings(epochs=1))  # warm-up
    if args.groups:
        groups(data, args.epochs, args.k, args.batches)
        return
    print("| hidden layers | |B| | N s/epoch | F-LD s/epoch | P s/epoch | PF-LD s/epoch | PF-LD / F-LD | PF-LD / N |")
    print("|---|---|---|---|---|---|---|---|")
    for layers in (2, 10):
        arch = Architecture(encoder=(64,) * layers, classifier=(), adversary=(), dropout=0.0)
        for batch in (16, 64, 256):
            settings = TrainSettings(epochs=args.epochs, batch_size=batch)
            times = {}
            for label, (name, config) in RUNS.items():
                result = get_method(name).train_pack(data, [config], seed=0, settings=settings, arch=arch)
                times[label] = result.duration_s / args.epochs
            print(f"| {layers} | {batch} | {times['N']:.2f} | {times['F-LD']:.2f} | {times['P']:.2f} | "
                  f"{times['PF-LD']:.2f} | {times['PF-LD'] / times['F-LD']:.2f}x | {times['PF-LD'] / times['N']:.2f}x |",
                  flush=True)


if __name__ == "__main__":
    main()
