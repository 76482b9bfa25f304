"""Two runs of one study side by side: are they the same bits, the same picks, the same
numbers within seed noise, and could the seeds at hand have told?

The protocol comes first (``protocol_differences``): a verdict on numbers is one on the
method only between runs of one protocol (epochs, learning rate, batch, architecture, data and
split, precision, ...); across protocols it says what the settings did too. The same study
run on two machines gives bit-identical rows only on the same device with the same builds
(``device_differences``: the float reductions of another CPU's kernels differ in their last
bits, and training amplifies them). Elsewhere the honest question is whether the differences
exceed what another seed would give: for each (dataset, method), the RT picks' test metrics
are paired by seed and their differences tested with a paired t-test, beside the smallest
difference that test could detect with the seeds at hand (``detectable_difference``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from fairdp import schema
from fairdp.analysis._intervals import check_level, t_halfwidth
from fairdp.analysis._rows import ok_rows
from fairdp.analysis._select import select_by_rt
from fairdp.errors import InputError
from fairdp.schema import STATUS_OK

RUN = ["dataset", "method", "seed"]

PROTOCOL_SETTINGS = {
    "epochs": "epochs", "lr": "learning rate", "batch_size": "batch size", "optimizer": "optimizer",
    "precision": "precision", "accountant": "accountant", "sampler": "Poisson sampler", "architecture": "architecture",
    "probe": "probes",
}
"""Row columns that are part of a run's protocol, and their names in ``compare``'s words; the
``protocol`` column's JSON adds the rest (``_protocol_items``)."""

_PROTOCOL_NAMES = {"data": "data fingerprint (labels, splits, feature shape)", "dataset_options": "dataset options"}
CODE_SETTING = "fairdp version"
"""A difference in the code that wrote the rows: named apart from the protocol's settings (a
new version may or may not change what it computes)."""

NOT_RECORDED = "not recorded"


def _protocol_items(text) -> dict[str, str]:
    """The ``protocol`` column's JSON as flat (setting, value) pairs: "train.dtype", "data", ..."""
    if not isinstance(text, str):
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"protocol": text}
    out = {}

    def walk(prefix: str, v) -> None:
        if isinstance(v, dict) and v:
            for k, sub in v.items():
                walk(f"{prefix}.{k}" if prefix else str(k), sub)
        else:
            out[prefix] = json.dumps(v, sort_keys=True)

    walk("", value)
    return out


def _setting_values(rows: pd.DataFrame) -> dict[str, set[str]]:
    """Every protocol setting's values over ``rows`` (as text), NOT_RECORDED where a column is absent."""
    # each distinct value once: a million rows hold a few protocols
    out: dict[str, set[str]] = {}
    for column, name in PROTOCOL_SETTINGS.items():
        if column in rows.columns:
            out[name] = {NOT_RECORDED if pd.isna(v) else (f"{v:g}" if isinstance(v, float) else str(v))
                         for v in pd.unique(rows[column])}
    items = [_protocol_items(t) for t in (pd.unique(rows["protocol"]) if "protocol" in rows.columns else [])]
    for key in sorted({k for it in items for k in it}):
        name = _PROTOCOL_NAMES.get(key, key)
        out[name] = {it.get(key, NOT_RECORDED) for it in items}
    if "fairdp_version" in rows.columns:
        out[CODE_SETTING] = {NOT_RECORDED if pd.isna(v) else str(v) for v in pd.unique(rows["fairdp_version"])}
    return out


def protocol_differences(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, method) of both runs' ok rows, every protocol setting whose values differ
    between them: columns dataset, method, setting, a, b (each side's values, joined). The
    settings are the rows' protocol columns (``PROTOCOL_SETTINGS``), every entry of their
    ``protocol`` JSON (the data's fingerprint, its split included, the dataset's options, the
    training settings without a column of their own, ...) and the fairdp version
    (``CODE_SETTING``). A setting one side does not record reads ``NOT_RECORDED``."""
    read = ["dataset", "method", *PROTOCOL_SETTINGS, "protocol", "fairdp_version"]
    ra, rb = (ok_rows(df)[[c for c in read if c in df.columns]] for df in (a, b))
    out = []
    ga, gb = (dict(tuple(r.groupby(["dataset", "method"], sort=False))) for r in (ra, rb))
    for ds, method in sorted(set(ga) & set(gb)):
        va, vb = _setting_values(ga[(ds, method)]), _setting_values(gb[(ds, method)])
        for name in [*va, *(n for n in vb if n not in va)]:
            left, right = va.get(name, {NOT_RECORDED}), vb.get(name, {NOT_RECORDED})
            if left != right:
                out.append({"dataset": ds, "method": method, "setting": name,
                            "a": ", ".join(sorted(left)), "b": ", ".join(sorted(right))})
    return pd.DataFrame(out, columns=["dataset", "method", "setting", "a", "b"])


def devices(rows: pd.DataFrame) -> list[dict]:
    """The distinct devices the ok rows were computed on (their ``device`` JSON); empty when
    the rows do not record it (written before the column existed)."""
    if "device" not in rows.columns:
        return []
    ok = (rows["status"] == STATUS_OK).fillna(False).to_numpy(bool) if "status" in rows.columns else slice(None)
    # each distinct text once, without copying the rows: a million rows name a few devices
    texts = sorted({t for t in pd.unique(rows["device"].to_numpy(object)[ok]) if isinstance(t, str)})
    return [json.loads(t) for t in texts]


def device_differences(a: pd.DataFrame, b: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(field, A's values, B's values) for each device field that differs between the runs'
    rows (``fairdp.engine._settings.device_record``: CPU model and kernel features, threads, GPU and
    builds), or ("device", ...) with ``NOT_RECORDED`` when a run does not record its device.
    Empty when both record the same single device: only then can rows be bit-identical."""
    da, db = devices(a), devices(b)
    if not da or not db:
        return [("device", "; ".join(map(_device_text, da)) or NOT_RECORDED,
                 "; ".join(map(_device_text, db)) or NOT_RECORDED)]
    out = []
    for field in dict.fromkeys([k for d in da + db for k in d]):
        left = {json.dumps(d.get(field), sort_keys=True) for d in da}
        right = {json.dumps(d.get(field), sort_keys=True) for d in db}
        if left != right or len(left) > 1:
            out.append((field, ", ".join(sorted(left)), ", ".join(sorted(right))))
    return out


def _device_text(d: dict) -> str:
    flags = " ".join(d.get("cpu_flags") or [])
    where = d.get("gpu") or f"{d.get('cpu')} ({d.get('cpu_capability')}{'; ' + flags if flags else ''})"
    return f"{where}, {d.get('threads')} threads, torch {d.get('torch')}"


def describe_devices(rows: pd.DataFrame) -> str:
    """The run's devices in a few words each, or ``NOT_RECORDED``."""
    return "; ".join(_device_text(d) for d in devices(rows)) or NOT_RECORDED


def detectable_difference(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true mean difference that a two-sided paired t-test at level ``alpha``
    detects with probability ``power`` over ``n`` pairs whose differences have standard
    deviation ``sd``: delta with P(|T| > t_{1 - alpha/2, n - 1}) = power, T noncentral t with
    n - 1 degrees of freedom and noncentrality delta sqrt(n) / sd. NaN for fewer than 2 pairs
    or an unknown sd; 0 when the differences do not vary."""
    from scipy import optimize
    from scipy.stats import nct
    from scipy.stats import t as student_t

    if n < 2 or not math.isfinite(sd):
        return math.nan
    if sd == 0:
        return 0.0
    df = n - 1
    crit = float(student_t.ppf(1 - alpha / 2, df))

    def shortfall(nc: float) -> float:
        # the far tail, P(T < -crit), is below 1e-6 where scipy's series gives NaN (nc >= 8, 1 df)
        return float(nct.sf(crit, df, nc) + np.nan_to_num(nct.cdf(-crit, df, nc))) - power

    hi = 1.0
    while shortfall(hi) < 0:
        hi *= 2
    return float(optimize.brentq(shortfall, 0.0, hi, xtol=1e-10)) * sd / math.sqrt(n)


def precisions(rows: pd.DataFrame) -> tuple[str, ...]:
    """The precisions the ok rows' packs computed in (sorted; none for rows without networks
    or from before the column)."""
    if "precision" not in rows.columns:
        return ()
    return tuple(sorted(ok_rows(rows)["precision"].dropna().unique()))


def identical_configs(a: pd.DataFrame, b: pd.DataFrame) -> tuple[int, int, float]:
    """(configs in both whose every metric is bit-equal, configs in both, the largest valid
    accuracy difference between them in points)."""
    key = [*RUN, "config_id"]
    metrics = [c for c in schema.METRIC_COLUMNS if c in a.columns and c in b.columns]
    both = ok_rows(a)[key + metrics].merge(ok_rows(b)[key + metrics], on=key, suffixes=("_a", "_b"))
    if both.empty:
        return 0, 0, math.nan
    same = np.ones(len(both), bool)
    for m in metrics:
        x = pd.to_numeric(both[f"{m}_a"], errors="coerce").to_numpy(float)
        y = pd.to_numeric(both[f"{m}_b"], errors="coerce").to_numpy(float)
        same &= (x == y) | (np.isnan(x) & np.isnan(y))
    gap = np.abs(pd.to_numeric(both["valid_accuracy_a"]) - pd.to_numeric(both["valid_accuracy_b"]))
    return int(same.sum()), len(both), float(gap.max())


def compare_picks(a: pd.DataFrame, b: pd.DataFrame, rt: float = 1.0, fairness: str = "tpr_gap",
                  by: Sequence[str] = ()) -> pd.DataFrame:
    """The RT pick of each (dataset, method, seed, *by) in both runs: columns dataset, method,
    seed, the ``by`` columns, config_id_a, config_id_b, same_pick, then test_accuracy and
    test_<fairness> of each."""
    metrics = ["test_accuracy", f"test_{fairness}"]
    keys = [*RUN, *by]
    pa = select_by_rt(_rule_columns(a, fairness, by), rt=rt, fairness=fairness, by=by)[[*keys, "config_id", *metrics]]
    pb = select_by_rt(_rule_columns(b, fairness, by), rt=rt, fairness=fairness, by=by)[[*keys, "config_id", *metrics]]
    picks = pa.merge(pb, on=keys, suffixes=("_a", "_b"))  # a by-value NaN in both (a method without eps) pairs
    if picks.empty:
        raise InputError("the two runs have no (dataset, method, seed) in common: they are not runs of one study")
    picks["same_pick"] = picks["config_id_a"] == picks["config_id_b"]
    order = [*keys, "config_id_a", "config_id_b", "same_pick"] + [f"{m}_{s}" for m in metrics for s in "ab"]
    return picks[order].sort_values(keys).reset_index(drop=True)


def _rule_columns(rows: pd.DataFrame, fairness: str, by: Sequence[str]) -> pd.DataFrame:
    """``rows`` with only the columns a pick reads and ``compare_picks`` returns, those it has: the
    selection copies what it is given (a million rows' every column, per side)."""
    splits = ("valid", "test")
    notions = [f"{s}_{m}" for s in splits for m in schema.NOTION_METRICS.values()] \
        if fairness == schema.NOTION_GAP else []
    wanted = [*RUN, "config_id", "status", "fairness_notion", *by, *(f"{s}_accuracy" for s in splits),
              *(f"{s}_{fairness}" for s in splits), *notions]
    return rows[[c for c in dict.fromkeys(wanted) if c in rows.columns]]


RESOLUTION = 1.0
"""Points: a paired test that finds no difference says "within seed noise" only if it could
have detected one this large (``detectable`` at most this); else "not resolved"."""


def paired_tests(picks: pd.DataFrame, fairness: str = "tpr_gap", level: float = 95.0,
                 by: Sequence[str] = (), across: set | frozenset = frozenset(),
                 resolution: float = RESOLUTION) -> pd.DataFrame:
    """Per (dataset, method, *by) and metric: the picks' differences (a - b) paired by seed,
    their mean, the ``level``% t-interval of that mean, the paired t-test's two-sided p-value,
    ``detectable``, the smallest difference that test detects at alpha 0.05 with 80% power for
    the seeds and spread at hand (``detectable_difference``), and a verdict: "identical" (every
    difference 0), "differ" (the interval excludes 0), "within seed noise" (it does not, and
    the test would have detected a difference of ``resolution`` points: ``detectable`` is at
    most that), "not resolved with N seeds" (it does not, and could not have), or "one seed:
    no test". (``detectable`` always exceeds a difference the test does not find significant,
    so it is judged against a fixed resolution, not against the observed difference.) A (dataset, method) in ``across`` (runs of different protocols,
    ``protocol_differences``) has " (across protocols)" added to its verdicts: its difference
    is the settings' as much as the method's."""
    from scipy.stats import t as student_t

    level = check_level(level)
    out = []
    for key, g in picks.groupby(["dataset", "method", *by], sort=True, dropna=False):
        ds, method, values = key[0], key[1], dict(zip(by, key[2:]))
        for m in ("test_accuracy", f"test_{fairness}"):
            d = (pd.to_numeric(g[f"{m}_a"]) - pd.to_numeric(g[f"{m}_b"])).dropna().to_numpy(float)
            n = len(d)
            mean = float(d.mean()) if n else math.nan
            sd = float(d.std(ddof=1)) if n > 1 else math.nan
            half = t_halfwidth(sd, n, level) if n > 1 else math.nan
            if n and (d == 0).all():
                p, verdict = 1.0, "identical"
            elif n < 2:
                p, verdict = math.nan, "one seed: no test"
            elif sd == 0:  # every seed moved by the same amount
                p, verdict = 0.0, "differ"
            else:
                p = float(2 * student_t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))
                verdict = "differ" if abs(mean) > half else "within seed noise"
            detectable = detectable_difference(sd, n) if n > 1 else math.nan
            if verdict == "within seed noise" and not detectable <= resolution:
                verdict = f"not resolved with {n} seeds"
            if (ds, method) in across:
                verdict += " (across protocols)"
            out.append({"dataset": ds, "method": method, **values, "metric": m, "seeds": n, "mean_diff": mean,
                        "ci_lo": mean - half, "ci_hi": mean + half, "p_value": p, "detectable": detectable,
                        "verdict": verdict})
    return pd.DataFrame(out)
