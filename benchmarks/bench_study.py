"""Fixed cost of a study, and Ray Tune overhead: packed trials vs one config per trial; packed vs per-config search.

    .venv/bin/python benchmarks/bench_study.py [--epochs 5] [--search-trials 32] [--only-fixed-cost]

Part 0 is the fixed cost a small study pays: one FEDERATE config on Adult with the probes
off, run as a user runs it (``python -m fairdp run``, a new process: imports, data, planning,
Ray start and shutdown), embedded Ray and ``--executor local``; the overhead is the
command's wall time minus the pack's own ``pack_duration_s``.

Part 1 runs FEDERATE's Adult grid (150 configs, 1 seed, leakage probe on, MDL off) through
Ray Tune twice on embedded Ray: with automatic packs, and with ``pack_size: 1``. For each it
reports the wall time of ``run_study`` (Ray start-up included), the compute the packs
themselves measured (sum of ``pack_duration_s`` over the slots, i.e. perfect balance), and
the overhead = wall - compute/slots, as a share of the wall time and per config.

Part 2 runs the same NSGA-II search (population 16) as packed generations and as Ray
Tune's OptunaSearch with one config per trial, and reports both wall times.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time

import yaml

from fairdp.study import ResultStore, parse_spec, run_study, search_study


def _spec(epochs: int, pack_size: int | None, trials: int = 32) -> dict:
    spec = {
        "name": "bench-federate-adult", "dataset": "adult", "seeds": [0],
        "train": {"epochs": epochs, "batch_size": 2000}, "evaluate": {"leakage": True, "mdl": False},
        "methods": {"federate": {}},
        "search": {"method": "federate", "sampler": "nsga2", "population": 16, "trials": trials, "seed": 0,
                   "objectives": {"valid_accuracy": "max", "valid_tpr_gap": "min"},
                   "space": {"eps": {"low": 1, "high": 20, "log": True}, "lam": {"low": 0.1, "high": 3.0}}},
    }
    if pack_size:
        spec["pack_size"] = pack_size
    return spec


def bench_fixed_cost(epochs: int) -> None:
    print(f"One FEDERATE config on Adult, {epochs} epochs, probes off, as `python -m fairdp run` (a new process)")
    print("| executor | wall s | pack s | overhead s |")
    print("|---|---|---|---|")
    for executor in ("ray", "local"):
        with tempfile.TemporaryDirectory() as tmp:
            study = os.path.join(tmp, "one.yaml")
            with open(study, "w") as f:
                yaml.safe_dump({"name": "one-config", "dataset": "adult", "seeds": [0],
                                "train": {"epochs": epochs}, "evaluate": {"leakage": False, "mdl": False},
                                "methods": {"federate": {"grid": {"eps": [8.0], "lam": [1.0]}}}}, f)
            results = os.path.join(tmp, "r")
            t = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "fairdp", "run", study, "--results", results,
                                   "--executor", executor], capture_output=True, text=True)
            wall = time.perf_counter() - t
            if proc.returncode != 0:
                raise SystemExit(proc.stderr[-2000:])
            pack = ResultStore(results).read()[0]["pack_duration_s"].iloc[0]
        print(f"| {executor} | {wall:.1f} | {pack:.1f} | {wall - pack:.1f} |", flush=True)


def bench_grid(epochs: int) -> None:
    slots = os.cpu_count()
    print(f"FEDERATE Adult grid, 150 configs x 1 seed, {epochs} epochs, leakage on; {slots} CPUs = {slots} slots")
    print("| trials | configs/trial | wall s | pack compute s / slots | overhead s | overhead share | overhead per config |")
    print("|---|---|---|---|---|---|---|")
    for label, pack_size in (("packed (auto)", None), ("one config per trial", 1)):
        spec = parse_spec(_spec(epochs, pack_size))
        with tempfile.TemporaryDirectory() as results:
            t = time.perf_counter()
            run_study(spec, results, progress_stream=io.StringIO())
            wall = time.perf_counter() - t
            df, _ = ResultStore(results).read()
        packs = df.groupby("pack_id")["pack_duration_s"].first()
        compute = packs.sum() / slots
        overhead = wall - compute
        print(f"| {label}: {len(packs)} | {len(df) / len(packs):.0f} | {wall:.1f} | {compute:.1f} | {overhead:.1f} | "
              f"{overhead / wall:.1%} | {overhead / len(df):.3f} s |", flush=True)


def bench_search(epochs: int, trials: int) -> None:
    print(f"\nNSGA-II search, population 16, {trials} trials, {epochs} epochs")
    print("| mode | Tune trials | wall s |")
    print("|---|---|---|")
    for mode in ("packed", "per-config"):
        spec = parse_spec(_spec(epochs, None, trials))
        with tempfile.TemporaryDirectory() as results:
            t = time.perf_counter()
            s = search_study(spec, results, mode=mode, progress_stream=io.StringIO())
            wall = time.perf_counter() - t
            n_packs = ResultStore(results).read()[0]["pack_id"].nunique()
        print(f"| {s.mode} | {n_packs} | {wall:.1f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--search-trials", type=int, default=32)
    ap.add_argument("--skip-search", action="store_true")
    ap.add_argument("--only-fixed-cost", action="store_true", help="part 0 only")
    args = ap.parse_args()
    bench_fixed_cost(args.epochs)
    if args.only_fixed_cost:
        return
    bench_grid(args.epochs)
    if not args.skip_search:
        bench_search(args.epochs, args.search_trials)


if __name__ == "__main__":
    main()
