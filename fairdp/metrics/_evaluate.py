"""Turn a trained pack into the metric columns of its result rows (``fairdp.schema``)."""

from __future__ import annotations

import json
import math

import numpy as np

from fairdp import schema
from fairdp.data import Dataset
from fairdp.engine.contract import PackResult
from fairdp.fairness import confusion, scores_from_confusion
from fairdp.metrics._probes import ProbeSettings, leakage, mdl, uniform_codelength


def evaluate_pack(data: Dataset, result: PackResult, *, with_leakage: bool = True, with_mdl: bool = True,
                  probe: ProbeSettings | None = None, min_group_count: int = 1) -> list[dict]:
    """One dict of metrics per config of ``result``: accuracy and fairness gaps on valid and
    test (percent), leakage (probe trained on valid representations, scored on test),
    MDL of the test representations (kbits) beside the uniform code of the same labels
    (mdl_uniform), each split's counts per (group, y, y_pred) as JSON (``valid_confusion``,
    ``test_confusion``: what per-group rates and bootstrap intervals are computed from), and
    the config's guarantee (eps_formal, delta) as its method's privacy hook reported it
    (``result.privacy``). A gap leaves out a group's rate over fewer than ``min_group_count``
    rows (the study's ``evaluate.min_group_count``; ``fairdp.fairness``).

    Every metric is computed for the whole pack at once (fairness from one bincount,
    probes batched over the K representations).
    """
    if result.privacy is None or len(result.privacy) != len(result.configs):
        raise ValueError("result.privacy: one (eps, delta) per config is needed; train packs with "
                         "Method.train_pack, which asks the method's privacy hook")
    probe = probe or ProbeSettings()
    k = len(result.configs)
    cols: dict[str, np.ndarray] = {"best_epoch": result.best_epoch}
    counts = {}
    for split in schema.SPLITS:
        part = data.split(split)
        # one count per split; accuracy and every fairness gap are functions of it
        counts[split] = confusion(part.y, result.predictions[split], part.s, n_classes=data.n_classes,
                                  n_groups=data.n_groups).reshape(k, data.n_groups, data.n_classes, data.n_classes)
        scores = scores_from_confusion(counts[split], min_group_count)
        for name in ("accuracy", *schema.FAIRNESS_METRICS):
            cols[f"{split}_{name}"] = scores[name]
    reps = result.representations
    s_valid, s_test = data.split("valid").s, data.split("test").s
    cols["leakage"] = (leakage(reps["valid"], s_valid, reps["test"], s_test, probe, n_groups=data.n_groups)
                       if with_leakage else np.full(k, math.nan))
    cols["mdl"] = mdl(reps["test"], s_test, probe, n_groups=data.n_groups) if with_mdl else np.full(k, math.nan)
    cols["mdl_uniform"] = np.full(k, uniform_codelength(len(s_test), data.n_groups) if with_mdl else math.nan)
    rows = []
    for i in range(k):
        row = {name: (int(v[i]) if name == "best_epoch" else float(v[i])) for name, v in cols.items()}
        eps_formal, delta = result.privacy[i]
        row.update(eps_formal=float(eps_formal), delta=float(delta))
        for split, column in schema.CONFUSION_COLUMNS.items():
            row[column] = json.dumps(counts[split][i].tolist(), separators=(",", ":"))
        row[schema.PRIVACY_EVENT] = result.privacy_events[i] if result.privacy_events is not None else None
        rows.append(row)
    return rows
