"""Per-epoch training time of N (plain), F-LD, P (DP-SGD) and PF-LD: the layout of Tran et al.'s Table 1.

    .venv/bin/python benchmarks/bench_lagrangian.py [--epochs 1]

On real Adult (27,133 training rows, 85 features; the paper uses Bank, of similar size),
networks of 2 and 10 hidden layers of 64 units, minibatches of 16, 64 and 256, one config
per run, dp constraints; P (``dpsgd``, private without fairness) and PF-LD at eps = 1
(delta 1e-5), C_p = 1, C_d = 5. Times are the training loop's own (``PackResult.duration_s``):
the one-off noise calibration by the accountant (~0.25 s) is left out of "per epoch".
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=1)
    args = ap.parse_args()
    data = load_dataset("adult")
    get_method("fld").train_pack(data, [{"fairness_notion": "dp"}], seed=0,
                                 settings=TrainSettings(epochs=1))  # warm-up
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
