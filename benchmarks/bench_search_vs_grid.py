"""How much of a full grid's Pareto front an NSGA-II search reaches with fewer trials.

    .venv/bin/python benchmarks/bench_search_vs_grid.py [--quick] [--epochs 5] [--eps 8] [--lam 6]
        [--population 8] [--trials 32] [--constraint "valid_accuracy >= 65"] [--keep DIR]

FEDERATE on Adult, seed 0, validation accuracy (max) and TPR-gap (min), probes off. The grid
is ``--eps`` log-spaced values in [1, 20] times ``--lam`` values in [0.1, 3.0], run with
``--executor local`` (packs in this process); the search is NSGA-II over the same box
(eps log-scaled), packed generations on embedded Ray, in its own results directory so that
it trains every config it asks (a shared directory would answer grid configs from the rows).
Both fronts are restricted to the rows that satisfy ``--constraint`` (repeatable; default
``valid_accuracy >= 65``, which drops the near-random configs whose tiny gaps would
otherwise dominate the front; none with ``--constraint ''``). Prints the search's hypervolume history (normalised, reference point the
worst value of each objective: accuracy 0 %, gap 100 %) next to the grid front's, and the
ratio at each generation; ``--quick`` is a smoke run (2 epochs, 3 x 2 grid, 4 trials).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time

import numpy as np

from fairdp.analysis._search_progress import search_vs_grid
from fairdp.constraints import feasible
from fairdp.study import ResultStore, parse_spec, run_study, search_study

OBJECTIVES = {"valid_accuracy": "max", "valid_tpr_gap": "min"}


def _spec(args) -> dict:
    eps = [float(f"{v:.3g}") for v in np.geomspace(1, 20, args.eps)]
    lam = [float(f"{v:.3g}") for v in np.linspace(0.1, 3.0, args.lam)]
    return {
        "name": "bench-search-vs-grid", "dataset": "adult", "seeds": [0],
        "train": {"epochs": args.epochs, "batch_size": 2000}, "evaluate": {"leakage": False, "mdl": False},
        "methods": {"federate": {"grid": {"eps": eps, "lam": lam}}},
        "search": {"method": "federate", "sampler": "nsga2", "population": args.population, "trials": args.trials,
                   "seed": 0, "objectives": OBJECTIVES, "constraints": args.constraint,
                   "space": {"eps": {"low": 1, "high": 20, "log": True}, "lam": {"low": 0.1, "high": 3.0}}},
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: 2 epochs, a 3 x 2 grid, 4 trials")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--eps", type=int, default=8, help="grid: eps values, log-spaced in [1, 20]")
    p.add_argument("--lam", type=int, default=6, help="grid: lam values, evenly spaced in [0.1, 3.0]")
    p.add_argument("--population", type=int, default=8)
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--constraint", action="append", help="a search.constraints string (default valid_accuracy >= 65)")
    p.add_argument("--keep", metavar="DIR", help="keep the results under DIR (grid/ and search/) instead of a temp dir")
    args = p.parse_args(argv)
    if args.quick:
        args.epochs, args.eps, args.lam, args.population, args.trials = 2, 3, 2, 2, 4
    args.constraint = [c for c in (args.constraint or ["valid_accuracy >= 65"]) if c]
    spec = parse_spec(_spec(args))
    root = args.keep or tempfile.mkdtemp(prefix="fairdp-search-vs-grid-")
    grid_dir, search_dir = f"{root}/grid", f"{root}/search"
    n_grid = args.eps * args.lam
    print(f"FEDERATE on Adult, seed 0, {args.epochs} epochs; objectives {json.dumps(OBJECTIVES)}; "
          f"constraints {args.constraint}; results under {root}", flush=True)

    t0 = time.monotonic()
    run_study(spec, grid_dir, executor="local", progress_stream=io.StringIO())
    grid_s = time.monotonic() - t0
    print(f"grid: {n_grid} configs ({args.eps} eps x {args.lam} lam), --executor local, {grid_s:.0f} s", flush=True)

    t0 = time.monotonic()
    summary = search_study(spec, search_dir, progress_stream=io.StringIO())
    search_s = time.monotonic() - t0
    print(f"search: NSGA-II, population {args.population}, {args.trials} trials, packed on embedded Ray, "
          f"{search_s:.0f} s", flush=True)

    grid_rows, _ = ResultStore(grid_dir).read()
    grid_rows = grid_rows[grid_rows["method"] == "federate"]
    table = search_vs_grid(summary.history, grid_rows, OBJECTIVES, spec.search.constraints)
    feasible_grid = int(feasible(grid_rows, spec.search.constraints).sum())
    print(f"\ngrid front: {feasible_grid} of {len(grid_rows)} configs feasible, normalised hypervolume "
          f"{table['grid_hypervolume'].iloc[0]:.4f}\n")
    print("| trials | feasible | front | search HV | grid HV | ratio |\n|---:|---:|---:|---:|---:|---:|")
    for r in table.itertuples(index=False):
        print(f"| {r.trials} | {r.feasible_trials} | {r.front_size} | {r.hypervolume:.4f} | "
              f"{r.grid_hypervolume:.4f} | {r.ratio:.3f} |")
    print(f"\nwall: grid {grid_s:.0f} s, search {search_s:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
