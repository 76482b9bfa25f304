"""Multi-objective pruning inside packs (issue 16): wall time saved and RT-selection agreement.

    .venv/bin/python benchmarks/bench_pruning.py [--seeds 0,1,2,3,4] [--epochs 8] [--rungs 2,4]
        [--eps 8,12,16] [--lam-stop 1.9] [--keep 0.25] [--margin 0.5]

FEDERATE on Adult, a reduced grid of its Appendix D.4 protocol (eps x lam, 30 configs by
default; the full 150-config, 30-epoch, 5-seed grid takes about 19 hours on a 2-core CPU),
trained as one pack per seed through ``run_study`` with ``--executor local`` (no Ray), probes
off (leakage and MDL do not enter RT selection). For each seed the same study runs twice,
without and with ``prune:``, one after the other so both see the same machine load. Reported:
wall time of each arm, their ratio, the config-epochs pruning saved, how many configs each
rung stopped, and whether the config RT selection (rt 1.0, TPR-gap) picks without pruning is
still the one it picks with pruning (agreement k/n over seeds).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import pandas as pd

from fairdp.analysis import select_by_rt
from fairdp.study import parse_spec, read_results, run_study


def _spec(seed: int, args, prune: bool) -> dict:
    lam = [round(0.1 + 0.2 * i, 10) for i in range(int(round((args.lam_stop - 0.1) / 0.2)) + 1)]
    spec = {
        "name": f"bench-pruning-{'on' if prune else 'off'}", "dataset": "adult", "seeds": [seed],
        "train": {"epochs": args.epochs, "batch_size": 2000, "lr": 0.001},
        "evaluate": {"leakage": False, "mdl": False},
        "selection": {"fairness": "tpr_gap", "rt": 1.0},
        "methods": {"federate": {"grid": {"eps": args.eps, "lam": lam}}},
        "pack_size": len(args.eps) * len(lam),  # the whole grid in one pack: rungs compare all of it
        "resources": {"cpus_per_trial": 1},
    }
    if prune:
        spec["prune"] = {"rungs": args.rungs, "keep": args.keep, "margin": args.margin}
    return spec


def _run(spec: dict, tmp: str) -> tuple[float, pd.DataFrame]:
    results = f"{tmp}/{spec['name']}-{spec['seeds'][0]}"
    t0 = time.perf_counter()
    run_study(parse_spec(spec), results, executor="local", progress_stream=open("/dev/null", "w"))
    return time.perf_counter() - t0, read_results(results)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ints = lambda s: [int(v) for v in s.split(",")]  # noqa: E731
    p.add_argument("--seeds", type=ints, default=[0, 1, 2, 3, 4])
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--rungs", type=ints, default=[2, 4])
    p.add_argument("--eps", type=lambda s: [float(v) for v in s.split(",")], default=[8.0, 12.0, 16.0])
    p.add_argument("--lam-stop", type=float, default=1.9)
    p.add_argument("--keep", type=float, default=0.25)
    p.add_argument("--margin", type=float, default=0.5)
    args = p.parse_args()
    print(f"FEDERATE on Adult: eps {args.eps} x lam 0.1..{args.lam_stop} step 0.2, {args.epochs} epochs, "
          f"batch 2000, one pack per seed, --executor local, probes off; prune rungs {args.rungs}, "
          f"keep {args.keep}, margin {args.margin}; RT 1.0 on valid TPR-gap", flush=True)
    print("| seed | configs | wall off s | wall on s | on/off | config-epochs saved | stopped per rung "
          "| RT pick kept | pick off (valid acc, gap) | pick on (valid acc, gap) |", flush=True)
    print("|---|---|---|---|---|---|---|---|---|---|", flush=True)
    totals = {"off": 0.0, "on": 0.0, "trained": 0, "full": 0, "agree": 0, "n": 0}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            wall_off, off = _run(_spec(seed, args, prune=False), tmp)
            wall_on, on = _run(_spec(seed, args, prune=True), tmp)
            pruned_at = on["pruned_at"] if "pruned_at" in on.columns else pd.Series(np.nan, index=on.index)
            trained = int(pruned_at.fillna(args.epochs).sum())
            full = len(on) * args.epochs
            per_rung = ", ".join(f"{r}: {int((pruned_at == r).sum())}" for r in args.rungs)
            pick_off = select_by_rt(off, rt=1.0, fairness="tpr_gap").iloc[0]
            pick_on = select_by_rt(on, rt=1.0, fairness="tpr_gap").iloc[0]
            agree = pick_off["config_id"] == pick_on["config_id"]
            totals["off"] += wall_off
            totals["on"] += wall_on
            totals["trained"] += trained
            totals["full"] += full
            totals["agree"] += int(agree)
            totals["n"] += 1
            print(f"| {seed} | {len(on)} | {wall_off:.0f} | {wall_on:.0f} | {wall_on / wall_off:.2f} "
                  f"| {1 - trained / full:.0%} | {per_rung} | {'yes' if agree else 'no'} "
                  f"| {pick_off['valid_accuracy']:.2f}, {pick_off['valid_tpr_gap']:.2f} "
                  f"| {pick_on['valid_accuracy']:.2f}, {pick_on['valid_tpr_gap']:.2f} |", flush=True)
    print(f"\nTotal: wall {totals['off']:.0f} s without pruning, {totals['on']:.0f} s with "
          f"(ratio {totals['on'] / totals['off']:.2f}, {1 - totals['on'] / totals['off']:.0%} saved); "
          f"config-epochs {totals['trained']} of {totals['full']} ({1 - totals['trained'] / totals['full']:.0%} saved); "
          f"RT selection agreement {totals['agree']}/{totals['n']} seeds", flush=True)


if __name__ == "__main__":
    main()
