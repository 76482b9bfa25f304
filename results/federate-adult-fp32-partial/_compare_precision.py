"""TF32 (results/federate-adult, one H100) against fp32 (results/federate-adult-fp32-partial, the
2-core CPU) on what both runs trained: RT-selected rows per (method, seed) over the configs both
have, judged against the TF32 run's seed spread, and every shared config paired.

    .venv/bin/python results/federate-adult-fp32-partial/_compare_precision.py
"""
from pathlib import Path

import numpy as np
import pandas as pd

from fairdp.analysis import select_by_rt

HERE = Path(__file__).resolve().parent
fp32 = pd.read_parquet(HERE)
tf32 = pd.read_parquet(HERE.parent / "federate-adult")
METRICS = ["test_accuracy", "test_tpr_gap", "leakage", "mdl"]
# a difference of two independent draws has sd sqrt(2) x sigma: 95% of them within 2 sqrt(2) sigma
band = 2 * np.sqrt(2) * select_by_rt(tf32, 1.0).groupby("method")[METRICS].std()
rows, outside = [], 0
for (method, seed), a in fp32.groupby(["method", "seed"]):
    b = tf32[(tf32.method == method) & (tf32.seed == seed) & tf32.config_id.isin(a.config_id)]
    pa, pb = select_by_rt(a, 1.0).iloc[0], select_by_rt(b, 1.0).iloc[0]
    row = {"method": method, "seed": seed, "configs": len(a), "same pick": pa.config_id == pb.config_id}
    for m in METRICS:
        d = pb[m] - pa[m]
        out = abs(d) > band.loc[method, m]
        outside += out
        row[m] = f"{pa[m]:.2f} / {pb[m]:.2f}{' *' if out else ''}"
    rows.append(row)
print("RT = 1 picks, fp32 / tf32 (* outside the 95% band of two draws, 2 sqrt(2) x the tf32 seed std):")
print(pd.DataFrame(rows).to_string(index=False))
print(f"{outside} of {len(rows) * len(METRICS)} comparisons outside the band (about 5% expected by chance)")
pairs = fp32.merge(tf32, on=["method", "seed", "config_id"], suffixes=("_fp32", "_tf32"))
print(f"\n{len(pairs)} configs in both runs, tf32 - fp32: mean (standard error), sd")
for m in ["valid_accuracy", *METRICS]:
    d = pairs[f"{m}_tf32"] - pairs[f"{m}_fp32"]
    print(f"  {m}: {d.mean():+.3f} ({d.std() / np.sqrt(len(d)):.3f}), sd {d.std():.3f}")
print("\nper method, tf32 - fp32: mean (standard error)")
for method, g in pairs.groupby("method"):
    cells = []
    for m in ["valid_accuracy", "test_accuracy", "leakage"]:
        d = g[f"{m}_tf32"] - g[f"{m}_fp32"]
        cells.append(f"{m} {d.mean():+.3f} ({d.std() / np.sqrt(len(d)):.3f})")
    print(f"  {method} ({len(g)}): " + ", ".join(cells))
