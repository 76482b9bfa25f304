"""The dry run's estimate against a stored seed: per method and batch size, estimated and measured seconds.

    .venv/bin/python benchmarks/check_estimate.py STUDY.yaml RESULTS [--seed 0] [--wall SECONDS]

Plans the study's packs for one seed as ``fairdp run --dry-run`` does (same planner, same
reference figures of ``fairdp/study/run/reference_costs.json``), and costs each pack as the
estimate does: its fixed time plus its config-epochs at its method's figure for its batch
size, plus each accountant-calibrated method's noise searches (once per distinct eps and batch
size). Beside each (method, batch size) it puts what that seed's stored rows measured: the sum
of their packs' ``pack_duration_s`` (the time a pack's trial trained, on one slot). With
``--wall`` (the run's wall time) it also compares the whole estimate, on the study's slots.
"""

from __future__ import annotations

import argparse
import dataclasses

import pandas as pd

from fairdp.data import load_dataset
from fairdp.study import load_spec, read_results
from fairdp.study.run._estimate import calibration_by_pack_key, makespan, pack_work
from fairdp.study.run._plan import Backlog


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study")
    ap.add_argument("results")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--wall", type=float, help="the run's wall seconds, to compare the whole estimate with")
    args = ap.parse_args()
    spec = load_spec(args.study)
    spec = dataclasses.replace(spec, seeds=(args.seed,))
    rows = read_results(args.results)
    rows = rows[rows["seed"] == args.seed]
    train_rows = len(load_dataset(spec.dataset).splits["train"])
    packs = Backlog.from_stored(spec, pd.DataFrame()).packs(args.slots, False)
    precision = rows["precision"].dropna().iloc[0] if "precision" in rows and rows["precision"].notna().any() else None
    work, costs, fixed = pack_work(spec, packs, train_rows, precision)
    estimated: dict[tuple, float] = {}
    for key, units in work:
        estimated[key] = estimated.get(key, 0.0) + fixed.get(key, 0.0) + units * costs.get(key, 0.0)
    calibration = calibration_by_pack_key(spec, packs)
    for key, seconds in calibration.items():
        estimated[key] = estimated.get(key, 0.0) + seconds * args.slots  # every slot's process searches for itself
    batch = rows["batch_size"].fillna(spec.train.batch_size).astype(int) if "batch_size" in rows else spec.train.batch_size
    measured = (rows.assign(batch=batch).drop_duplicates(["method", "batch", "pack_duration_s"])
                .groupby(["method", "batch"])["pack_duration_s"].sum())
    print(f"{spec.name} seed {args.seed}: {train_rows} training rows, precision {precision}, {len(packs)} packs")
    print("| method | batch | estimated s | measured s | measured / estimated |")
    print("|---|---|---|---|---|")
    for (method, b), est in sorted(estimated.items()):
        got = float(measured.get((method, b), float("nan")))
        print(f"| {method} | {b} | {est:.0f} | {got:.0f} | {got / est:.2f} |")
    if args.wall:
        whole = makespan(work, costs, args.slots, fixed) + sum(calibration.values())
        print(f"whole study on {args.slots} slots: estimated {whole:.0f} s, measured {args.wall:.0f} s wall, "
              f"{args.wall / whole:.2f}x")


if __name__ == "__main__":
    main()
