"""Bootstrap intervals over a whole results table: the FEDERATE Adult protocol's row count.

    .venv/bin/python benchmarks/bench_intervals.py [--draws 1000] [--rows 1665]

The FEDERATE Adult protocol (``studies/federate_adult.yaml``: 7 methods, 5 seeds, the
Appendix D.4 grids) stores 1,665 rows. Each row's bootstrap needs only its stored test
confusion counts, so this times ``bootstrap_intervals`` on that many rows whose counts come
from real Adult test labels and groups with predictions of 80-86% accuracy, and on the 35
rows an RT selection keeps (one per method and seed), which is what ``fairdp analyze --ci
--selected`` and the report bootstrap.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pandas as pd

from fairdp.analysis._intervals import bootstrap_intervals
from fairdp.data import load_dataset
from fairdp.fairness import confusion


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--rows", type=int, default=1665)
    args = ap.parse_args()
    test = load_dataset("adult").split("test")
    rng = np.random.default_rng(0)
    rows = []
    for i in range(args.rows):
        right = rng.random(len(test.y)) < rng.uniform(0.80, 0.86)
        pred = np.where(right, test.y, 1 - test.y)
        conf = confusion(test.y, pred, test.s, n_classes=2, n_groups=2)
        rows.append({"dataset": "adult", "method": f"m{i % 7}", "seed": i % 5, "config_id": f"c{i}",
                     "test_confusion": json.dumps(conf.tolist())})
    df = pd.DataFrame(rows)
    print(f"Adult test split: {len(test.y)} rows, 2 groups; {args.draws} resamples per row")
    print("| rows | seconds | ms per row |")
    print("|---|---|---|")
    for n in (35, len(df)):
        t = time.perf_counter()
        out = bootstrap_intervals(df.iloc[:n], draws=args.draws)
        s = time.perf_counter() - t
        assert out["test_accuracy_lo"].notna().all()
        print(f"| {n} | {s:.2f} | {1000 * s / n:.2f} |", flush=True)


if __name__ == "__main__":
    main()
