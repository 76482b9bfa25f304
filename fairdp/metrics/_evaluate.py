"""Turn a trained pack into the metric columns of its result rows (``fairdp.schema``)."""

from __future__ import annotations

import json
import math

import numpy as np

from fairdp import schema
from fairdp.data import Dataset
from fairdp.engine import PackResult
from fairdp.metrics._fairness import accuracy, ap_gap, confusion, dp_gap, eo_gap, grms, tpr_gap
from fairdp.metrics._probes import ProbeSettings, leakage, mdl, uniform_codelength

# every fairness metric of the vocabulary, as (y, y_pred, s) -> gap; dp_gap ignores y
FAIRNESS = {"tpr_gap": tpr_gap, "grms": grms, "dp_gap": lambda y, pred, s, **kw: dp_gap(pred, s, **kw),
            "eo_gap": eo_gap, "ap_gap": ap_gap}


def evaluate_pack(data: Dataset, result: PackResult, *, with_leakage: bool = True, with_mdl: bool = True,
                  probe: ProbeSettings | None = None) -> list[dict]:
    """One dict of metrics per config of ``result``: accuracy and fairness gaps on valid and
    test (percent), leakage (probe trained on valid representations, scored on test),
    MDL of the test representations (kbits) beside the uniform code of the same labels
    (mdl_uniform), and the config's guarantee (eps_formal, delta)
    as its method's privacy hook reported it (``result.privacy``).

    Every metric is computed for the whole pack at once (fairness from one bincount,
    probes batched over the K representations).
    """
    if result.privacy is None or len(result.privacy) != len(result.configs):
        raise ValueError("result.privacy: one (eps, delta) per config is needed; train packs with "
                         "Method.train_pack, which asks the method's privacy hook")
    probe = probe or ProbeSettings()
    k = len(result.configs)
    cols: dict[str, np.ndarray] = {"best_epoch": result.best_epoch}
    for split in schema.SPLITS:
        y, s = data.split(split).y, data.split(split).s
        pred = result.predictions[split]
        kw = {"n_classes": data.n_classes, "n_groups": data.n_groups}
        cols[f"{split}_accuracy"] = accuracy(y, pred)
        for name, fn in FAIRNESS.items():
            cols[f"{split}_{name}"] = fn(y, pred, s, **kw)
    reps = result.representations
    s_valid, s_test = data.split("valid").s, data.split("test").s
    cols["leakage"] = (leakage(reps["valid"], s_valid, reps["test"], s_test, probe, n_groups=data.n_groups)
                       if with_leakage else np.full(k, math.nan))
    cols["mdl"] = mdl(reps["test"], s_test, probe, n_groups=data.n_groups) if with_mdl else np.full(k, math.nan)
    cols["mdl_uniform"] = np.full(k, uniform_codelength(len(s_test), data.n_groups) if with_mdl else math.nan)
    test = data.split("test")
    counts = confusion(test.y, result.predictions["test"], test.s, n_classes=data.n_classes,
                       n_groups=data.n_groups).reshape(k, data.n_groups, data.n_classes, data.n_classes)
    rows = []
    for i in range(k):
        row = {name: (int(v[i]) if name == "best_epoch" else float(v[i])) for name, v in cols.items()}
        eps_formal, delta = result.privacy[i]
        row.update(eps_formal=float(eps_formal), delta=float(delta))
        row[schema.TEST_CONFUSION] = json.dumps(counts[i].tolist(), separators=(",", ":"))
        rows.append(row)
    return rows
