"""What logging every config to a tracker costs a study: the same study with and without
``tracking: {mlflow: ...}`` (or ``{wandb: ...}``, offline), in one run of this script.

    .venv/bin/python benchmarks/bench_tracking.py [--tracker mlflow|wandb] [--rounds 2] [--epochs 3]
        [--seeds 2] [--executor local]

FEDERATE (eps x lam grid) and the unconstrained baseline on Adult, probes off (short packs:
the worst case for a fixed per-config cost), small packs (many stores to follow). Each round
runs the study untracked and tracked (a sqlite MLflow store, or W&B offline runs, in a temporary folder), in
alternating order; a ratio is the median over rounds of tracked over untracked. Prints the
wall time, the mean training time of a pack (``pack_duration_s``: what tracking must not
slow), and the tracker's own time per config (spent in the driver, beside the packs).
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path

from fairdp.study import ResultStore, parse_spec, run_study
from fairdp.tracking._base import get_tracker


def _raw(args, folder: Path | None) -> dict:
    raw = {"name": "bench-tracking", "dataset": "adult", "seeds": list(range(args.seeds)),
           "train": {"epochs": args.epochs, "batch_size": 256}, "evaluate": {"leakage": False, "mdl": False},
           "methods": {"unconstrained": {}, "federate": {"grid": {"eps": [1, 4, 10], "lam": [0.5, 1.0, 1.5]}}},
           "pack_size": 2}
    if folder is not None:
        raw["tracking"] = ({"mlflow": {"uri": f"sqlite:///{folder / 'mlflow.db'}"}} if args.tracker == "mlflow"
                           else {"wandb": {"dir": str(folder)}})
    return raw


def _once(args, tracked: bool, folder: Path) -> dict:
    spent = []
    tracker = get_tracker(args.tracker)
    log = tracker.log

    def timed(self, record):  # the tracker's own time, measured around MLflow's client
        t = time.perf_counter()
        log(self, record)
        spent.append(time.perf_counter() - t)

    tracker.log = timed
    try:
        results = folder / ("tracked" if tracked else "plain")
        spec = parse_spec(_raw(args, folder if tracked else None))
        t0 = time.perf_counter()
        run_study(spec, str(results), executor=args.executor, progress_stream=io.StringIO(), checkpoint_every_s=0)
        wall = time.perf_counter() - t0
    finally:
        tracker.log = log
    rows, _ = ResultStore(results).read()
    packs = rows.drop_duplicates("pack_id")["pack_duration_s"]
    return {"wall": wall, "pack": float(packs.mean()), "configs": len(rows), "log": spent}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tracker", default="mlflow", choices=("mlflow", "wandb"))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--executor", default="local", choices=("local", "ray"))
    args = p.parse_args()
    wall, pack, per_config = [], [], []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            order = (False, True) if r % 2 == 0 else (True, False)
            got = {tracked: _once(args, tracked, Path(tmp) / ("t" if tracked else "p")) for tracked in order}
        plain, tracked = got[False], got[True]
        assert len(tracked["log"]) == tracked["configs"], "every config logged once"
        wall.append(tracked["wall"] / plain["wall"])
        pack.append(tracked["pack"] / plain["pack"])
        per_config.append(statistics.mean(tracked["log"]))
        print(f"round {r + 1}: {plain['configs']} configs; wall {plain['wall']:.1f} s untracked, "
              f"{tracked['wall']:.1f} s tracked; mean pack training {plain['pack']:.2f} s vs {tracked['pack']:.2f} s; "
              f"{args.tracker} {1000 * per_config[-1]:.0f} ms per config", flush=True)
    print(f"tracked / untracked (median of {args.rounds} rounds): wall {statistics.median(wall):.3f}x, "
          f"pack training {statistics.median(pack):.3f}x; {args.tracker} logging "
          f"{1000 * statistics.median(per_config):.0f} "
          f"ms per config, in the driver")


if __name__ == "__main__":
    main()
