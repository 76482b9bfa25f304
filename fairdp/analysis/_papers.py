"""The papers' published numbers and claims, side by side with a study's own.

Published tables ship as CSV under ``fairdp/analysis/papers/`` (read from the papers' text;
each file's header says which table and what could not be read). A comparison takes the
aggregate table of a study (``aggregate_seeds`` after ``select_by_rt``) and gives, per
method and metric, the paper's mean ± std, fairdp's, their difference and whether it lies
within the combined seed spread, sqrt(std_paper^2 + std_fairdp^2) (the spread of a
difference of two independent draws). Claims are the papers' orderings (one method's mean
below another's) and trends (a metric falling as eps grows), each checked on fairdp's means
and, where the paper prints numbers, on the paper's.

PF-LD's claims (Tran et al. print no numbers for Adult or COMPAS) are judged with intervals
over seeds instead (``pfld_claim_intervals``, ``pfld_trend_intervals``): each seed is one
split, so a claim comparing PF-LD with another method is the mean of the per-seed paired
differences and its t-interval, and its verdict says whether the interval settles it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources

import numpy as np
import pandas as pd

from fairdp.analysis._intervals import check_level, t_halfwidth
from fairdp.analysis._predictions import TEST_CONFUSION
from fairdp.analysis._rows import (
    DIFFERENT_GUARANTEES,
    different_guarantees,
    guarantee_text,
    guarantees_by_method,
    kinds_of,
)
from fairdp.analysis._select import aggregate_seeds, select_by_rt
from fairdp.errors import InputError
from fairdp.schema import PRIVACY_EVENT


@dataclass(frozen=True)
class Claim:
    """``kind`` "below": ``method``'s ``metric`` mean is below ``other``'s (per ``by`` group);
    "within": ``method``'s ``metric`` mean is within ``ACCURACY_MARGIN`` points of ``other``'s;
    "falls_with_eps": ``method``'s ``metric`` mean at the largest eps is below its mean at the
    smallest (per group of the other ``by`` keys)."""

    kind: str
    metric: str
    method: str
    other: str | None
    source: str  # where the paper says it


@dataclass(frozen=True)
class PaperReference:
    name: str
    title: str
    table: str | None          # CSV of published numbers (method, metric, mean, std), or None
    fairness: str              # the selection fairness the paper reports
    rt: float
    by: tuple[str, ...]
    claims: tuple[Claim, ...]
    note: str
    # metrics whose published values are another quantity than fairdp's of the same name:
    # shown beside fairdp's, judged by the claims' orderings only, with the reason in the caption
    other_scale: tuple[tuple[str, str], ...] = ()
    lagrangian: bool = False  # PF-LD's claims: add what bounds PF-LD per notion (``pfld_bounds``)


_FEDERATE_CLAIMS = (
    Claim("below", "test_tpr_gap", "federate", "unconstrained", "Table 3; sec. D.5"),
    Claim("below", "test_tpr_gap", "federate", "adversarial", "Table 3; sec. D.5"),
    Claim("below", "leakage", "noise", "unconstrained", "Table 3; sec. D.5"),
    Claim("below", "leakage", "noise", "adversarial", "Table 3; sec. D.5"),
    Claim("below", "leakage", "federate", "unconstrained", "Table 3; sec. D.5"),
    Claim("below", "leakage", "federate", "adversarial", "Table 3; sec. D.5"),
    # MDL: higher is more private
    Claim("below", "mdl", "unconstrained", "noise", "Table 3; sec. D.5"),
    Claim("below", "mdl", "adversarial", "noise", "Table 3; sec. D.5"),
    Claim("below", "mdl", "unconstrained", "federate", "Table 3; sec. D.5"),
    Claim("below", "mdl", "adversarial", "federate", "Table 3; sec. D.5"),
)

# What FEDERATE's public code (saist1993/DPNLP, MDL in src/training_loops/common_functionality.py)
# computes under the name MDL; fairdp computes Voita & Titov's online code (fairdp.metrics.mdl).
_FEDERATE_MDL = ("mdl", "the paper's MDL is its code's: the valid and test splits coded together, each block scored "
                        "on the whole next prefix (rows its probe trained on included, about 2n labels coded), on "
                        "unscaled inputs, in units of 1024 bits; fairdp's is Voita & Titov's online code of the test "
                        "split in kbits, every label coded once")

# "PF-LD's accuracy is close to N's" judged as: the paired difference PF-LD - N of test accuracy
# (rows store accuracy in percent, 0-100) lies within +-ACCURACY_MARGIN points. One point: what
# RT = 1 selection, the papers' own, already trades away as "as accurate" (select_by_rt).
ACCURACY_MARGIN = 1.0
_MARGIN_TEXT = f"{ACCURACY_MARGIN:g} point{'' if ACCURACY_MARGIN == 1 else 's'}"

_PFLD_CLAIMS = (
    Claim("below", "test_notion_gap", "pfld", "private_reductions",
          "Accuracy and Fairness: 'considerably lower fairness violations when compared to M', every notion"),
    Claim("below", "test_notion_gap", "pfld", "dpsgd",
          "implied: P (DP-SGD) enforces no fairness constraint"),
    Claim("within", "test_accuracy", "pfld", "unconstrained",
          "Accuracy and Fairness: 'the prediction accuracy of the proposed model is in line with that of the "
          "baseline non-private, non-fair classifier', every notion"),
    Claim("falls_with_eps", "test_notion_gap", "pfld", None,
          "Figure 2: 'the fairness violation score decreases as the privacy budget eps increases'"),
    Claim("falls_with_eps", "test_accuracy", "pfld", None,
          "Figure 2: 'the model accuracy slightly decreases as eps increases'"),
)

_PFLD_NOTE = ("Tran et al. print no Adult or COMPAS numbers in the text (their figures are plots, and the text "
              "discusses the Bank dataset), so only their claims are checked.")

PAPERS = {
    "federate-table3": PaperReference(
        "federate-table3", "FEDERATE (Maheshwari et al. 2022), Table 3: Adult, RT = 1, 5 seeds",
        "federate-table3.csv", "tpr_gap", 1.0, (), _FEDERATE_CLAIMS,
        "Read from the paper's text; Adversarial + Multiple's MDL cell holds two values and is left out.",
        (_FEDERATE_MDL,)),
    "pfld-adult": PaperReference(
        "pfld-adult", "PF-LD (Tran et al. 2021), Figures 1-2: Adult (Income), 10 repeats", None, "notion_gap",
        1.0, ("fairness_notion", "eps"), _PFLD_CLAIMS, _PFLD_NOTE, lagrangian=True),
    "pfld-compas": PaperReference(
        "pfld-compas", "PF-LD (Tran et al. 2021), Figures 1-2: COMPAS, 10 repeats", None, "notion_gap",
        1.0, ("fairness_notion", "eps"), _PFLD_CLAIMS, _PFLD_NOTE, lagrangian=True),
}


def get_paper(name: str) -> PaperReference:
    if name not in PAPERS:
        raise InputError(f"--compare: unknown paper table {name!r}; known: {', '.join(PAPERS)}")
    return PAPERS[name]


def published(paper: PaperReference) -> pd.DataFrame:
    """The paper's numbers: method, metric, mean, std (empty when it prints none)."""
    if paper.table is None:
        return pd.DataFrame(columns=["method", "metric", "mean", "std"])
    with resources.files("fairdp.analysis").joinpath("papers", paper.table).open() as f:
        return pd.read_csv(f, comment="#")


def compare_numbers(agg: pd.DataFrame, paper: PaperReference) -> pd.DataFrame:
    """Per published (method, metric): paper mean and std, fairdp mean and std (NaN where the
    study has no such method), difference (fairdp - paper), combined spread and whether
    |difference| <= spread (None for a metric on another scale, ``paper.other_scale``)."""
    pub = published(paper)
    other_scale = dict(paper.other_scale)
    rows = []
    for r in pub.itertuples(index=False):
        mine = agg[agg["method"] == r.method]
        mean = float(mine[f"{r.metric}_mean"].iloc[0]) if len(mine) and f"{r.metric}_mean" in mine else math.nan
        std = float(mine[f"{r.metric}_std"].iloc[0]) if len(mine) and f"{r.metric}_std" in mine else math.nan
        spread = math.sqrt(r.std ** 2 + (std if math.isfinite(std) else 0.0) ** 2)
        diff = mean - r.mean
        rows.append({"method": r.method, "metric": r.metric, "paper": r.mean, "paper_std": r.std,
                     "fairdp": mean, "fairdp_std": std, "difference": diff, "spread": spread,
                     "within spread": (bool(abs(diff) <= spread) if math.isfinite(diff) and r.metric not in other_scale
                                       else None)})
    return pd.DataFrame(rows)


def check_claims(agg: pd.DataFrame, paper: PaperReference, by: tuple[str, ...] = (),
                 kinds: dict | None = None) -> pd.DataFrame:
    """Each claim per group of ``by`` (minus eps for trends): holds on fairdp's means (None
    where a method is missing), and on the paper's numbers where it prints them; ``guarantees``
    says whether the two methods of an ordering have guarantees of one kind ("same", or
    ``DIFFERENT_GUARANTEES``: then the ordering is at their own ε, not at one privacy level;
    kinds from ``kinds``, else the registry)."""
    pub = published(paper)
    known = kinds_of({m for c in paper.claims for m in (c.method, c.other) if m is not None}, kinds)
    out = []
    for c in paper.claims:
        col = f"{c.metric}_mean"
        if col not in agg.columns:
            continue
        keys = [k for k in by if k in agg.columns and (c.kind != "falls_with_eps" or k != "eps")]
        groups = agg.groupby(keys, dropna=False) if keys else [((), agg)]
        for key, grp in groups:
            key = key if isinstance(key, tuple) else (key,)
            where = ", ".join(f"{k} {v}" for k, v in zip(keys, key) if not _missing(v))
            if c.kind in ("below", "within"):
                # a method without a by-column (a baseline) is repeated under every group
                a = _mean_of(agg, grp, c.method, col, keys, key)
                b = _mean_of(agg, grp, c.other, col, keys, key)
                if c.kind == "below":
                    holds = None if np.isnan(a) or np.isnan(b) else bool(a < b)
                    text = f"{c.method} {c.metric} below {c.other}'s"
                    in_paper = _paper_below(pub, c)
                else:
                    holds = None if np.isnan(a) or np.isnan(b) else bool(abs(a - b) <= ACCURACY_MARGIN)
                    text = f"{c.method} {c.metric} within {_MARGIN_TEXT} of {c.other}'s"
                    in_paper = None
                alike = DIFFERENT_GUARANTEES if different_guarantees(known[c.method], known[c.other]) else "same"
            else:
                mine = grp[grp["method"] == c.method].dropna(subset=["eps", col]).sort_values("eps")
                holds = bool(mine[col].iloc[-1] < mine[col].iloc[0]) if len(mine) >= 2 else None
                text = f"{c.method} {c.metric} falls as eps grows (largest eps below smallest)"
                in_paper = None
                alike = "same"
            out.append({"claim": text, "where": where, "source": c.source, "paper": in_paper, "fairdp": holds,
                        "guarantees": alike})
    return pd.DataFrame(out)


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _mean_of(agg: pd.DataFrame, grp: pd.DataFrame, method: str, col: str, keys, key) -> float:
    mine = grp[grp["method"] == method]
    if not len(mine):
        # a method without the group's keys appears once, with NaN keys (e.g. a baseline without eps)
        rows = agg[agg["method"] == method]
        for k, v in zip(keys, key):
            if k in rows.columns and rows[k].notna().any():
                rows = rows[rows[k] == v]
        mine = rows
    return float(mine[col].iloc[0]) if len(mine) == 1 else math.nan


def _paper_below(pub: pd.DataFrame, c: Claim) -> bool | None:
    a = pub[(pub["method"] == c.method) & (pub["metric"] == c.metric)]
    b = pub[(pub["method"] == c.other) & (pub["metric"] == c.metric)]
    if not len(a) or not len(b):
        return None
    return bool(a["mean"].iloc[0] < b["mean"].iloc[0])


# Verdicts of a claim judged by the interval of a mean over seeds (``pfld_claim_intervals``).
SUPPORTED, CONTRADICTED, NOT_RESOLVED = "supported", "contradicted", "not resolved"
TOO_FEW_SEEDS, NOT_RUN = "too few seeds", "not run"
CLAIM_LEVEL = 95.0  # percent: the t-interval over seeds each claim is judged by
PFLD = "pfld"
_METHOD_LABELS = {"pfld": "PF-LD", "dpsgd": "DP-SGD", "private_reductions": "M", "unconstrained": "N", "fld": "F-LD"}
_METRIC_LABELS = {"test_notion_gap": "violation", "test_accuracy": "accuracy"}
_LEVELS = ("test_notion_gap", "test_accuracy")


def mean_interval(values, level: float = CLAIM_LEVEL) -> tuple[int, float, float, float]:
    """(n, mean, lo, hi) of the finite ``values``: the mean and its t-interval at ``level``
    percent (sample std, n - 1 degrees of freedom); lo and hi NaN below two values."""
    v = np.asarray(pd.to_numeric(pd.Series(values), errors="coerce"), dtype=np.float64)
    v = v[np.isfinite(v)]
    if not len(v):
        return 0, math.nan, math.nan, math.nan
    mean = float(v.mean())
    half = t_halfwidth(float(v.std(ddof=1)), len(v), level) if len(v) >= 2 else math.nan
    return len(v), mean, mean - half, mean + half


def paired_difference(a: pd.Series, b: pd.Series, level: float = CLAIM_LEVEL) -> tuple[int, float, float, float]:
    """(n, mean, lo, hi) of the per-seed differences a - b: ``a`` and ``b`` are indexed by seed
    (one value each), only seeds both have count, and the interval is ``mean_interval``'s."""
    diff = (pd.to_numeric(a, errors="coerce") - pd.to_numeric(b, errors="coerce")).dropna()
    return mean_interval(diff, level)


def claim_verdict(kind: str, n: int, lo: float, hi: float) -> str:
    """The verdict of a claim from the interval [lo, hi] of n seeds' mean: for "below" (the
    difference is negative) and "falls_with_eps" (the slope is), supported when the interval
    lies wholly below 0 and contradicted when wholly above; for "within" (the difference is
    within +-``ACCURACY_MARGIN``), supported when the interval lies wholly inside the margin and
    contradicted when wholly below -margin (an interval wholly above +margin, more accurate than
    the baseline by more than the margin, is not what the claim denies: not resolved). Fewer
    than two seeds: too few seeds."""
    if n < 2 or not (math.isfinite(lo) and math.isfinite(hi)):
        return TOO_FEW_SEEDS
    if kind in ("below", "falls_with_eps"):
        return SUPPORTED if hi < 0 else CONTRADICTED if lo > 0 else NOT_RESOLVED
    if kind == "within":
        return (SUPPORTED if -ACCURACY_MARGIN <= lo and hi <= ACCURACY_MARGIN else
                CONTRADICTED if hi < -ACCURACY_MARGIN else NOT_RESOLVED)
    raise ValueError(f"claim kind {kind!r}: no verdict by interval")


def _paper_selection(df: pd.DataFrame, paper: PaperReference) -> pd.DataFrame:
    """``df``'s rows selected as the paper reports: one row per (dataset, method, seed, *by)."""
    return select_by_rt(df, paper.rt, paper.fairness, [k for k in paper.by if k in df.columns])


def _with_eps(selected: pd.DataFrame) -> pd.DataFrame:
    rows = selected.copy()
    rows["eps"] = pd.to_numeric(rows["eps"], errors="coerce") if "eps" in rows else math.nan
    return rows


def _per_seed(rows: pd.DataFrame, method: str, dataset, notion, eps: float, metric: str) -> pd.Series | None:
    """``method``'s selected ``metric`` per seed at (dataset, notion, eps); a method without eps
    (a baseline such as N) counts at every eps and one without a notion (DP-SGD) was repeated
    under each by the selection (``per_notion``). None when the study has no such rows."""
    mine = rows[(rows["method"] == method) & (rows["dataset"] == dataset)]
    if "fairness_notion" in mine and mine["fairness_notion"].notna().any():
        mine = mine[mine["fairness_notion"] == notion]
    if mine["eps"].notna().any():
        mine = mine[np.isclose(mine["eps"], eps)]
    if not len(mine) or metric not in mine:
        return None
    return mine.groupby("seed")[metric].mean()  # one selected row per seed: the mean is that row


def pfld_claim_intervals(df: pd.DataFrame, paper: PaperReference, level: float = CLAIM_LEVEL) -> pd.DataFrame:
    """PF-LD's "below" and "within" claims of ``paper`` judged per (dataset, fairness_notion,
    eps) with intervals over seeds, from ``df``'s result rows selected as the paper reports
    (``select_by_rt`` with its RT, fairness and by keys: one row per method, seed, notion, eps).

    One row per PF-LD (dataset, notion, eps): ``n_seeds`` (PF-LD's), ``<metric>_mean``,
    ``<metric>_lo``, ``<metric>_hi`` for test_notion_gap and test_accuracy (the t-interval over
    seeds at ``level`` percent, cut to [0, 100] as ``seed_intervals`` does), then per claim,
    with key ``<metric>_vs_<other>``: ``<key>_seeds`` (seeds both methods have), ``<key>_diff``
    (the mean of PF-LD's value minus the other's, seed by seed: one seed is one split),
    ``<key>_lo``, ``<key>_hi`` (its t-interval, not cut) and ``<key>_verdict``
    (``claim_verdict``; "not run" where the study has no rows of the other method there)."""
    return _claim_intervals(_paper_selection(df, paper), paper, level)


def _claim_intervals(selected: pd.DataFrame, paper: PaperReference, level: float) -> pd.DataFrame:
    level = check_level(level)
    claims = [c for c in paper.claims if c.kind in ("below", "within") and c.method == PFLD]
    columns = ["dataset", "fairness_notion", "eps", "n_seeds",
               *(f"{m}_{s}" for m in _LEVELS for s in ("mean", "lo", "hi")),
               *(f"{c.metric}_vs_{c.other}_{s}" for c in claims for s in ("seeds", "diff", "lo", "hi", "verdict"))]
    rows = _with_eps(selected)
    mine = rows[rows["method"] == PFLD]
    out = []
    for (dataset, notion, eps), grp in mine.groupby(["dataset", "fairness_notion", "eps"], sort=True):
        rec = {"dataset": dataset, "fairness_notion": notion, "eps": float(eps), "n_seeds": int(grp["seed"].nunique())}
        for m in _LEVELS:
            _, mean, lo, hi = mean_interval(grp[m] if m in grp else [], level)
            rec.update({f"{m}_mean": mean, f"{m}_lo": float(np.clip(lo, 0.0, 100.0)),
                        f"{m}_hi": float(np.clip(hi, 0.0, 100.0))})
        for c in claims:
            key = f"{c.metric}_vs_{c.other}"
            mine_c = _per_seed(rows, PFLD, dataset, notion, eps, c.metric)
            other = _per_seed(rows, c.other, dataset, notion, eps, c.metric)
            if mine_c is None or other is None:
                n, diff, lo, hi, verdict = 0, math.nan, math.nan, math.nan, NOT_RUN
            else:
                n, diff, lo, hi = paired_difference(mine_c, other, level)
                verdict = claim_verdict(c.kind, n, lo, hi)
            rec.update({f"{key}_seeds": n, f"{key}_diff": diff, f"{key}_lo": lo, f"{key}_hi": hi,
                        f"{key}_verdict": verdict})
        out.append(rec)
    return pd.DataFrame(out, columns=columns)


def pfld_trend_intervals(df: pd.DataFrame, paper: PaperReference, level: float = CLAIM_LEVEL) -> pd.DataFrame:
    """PF-LD's "falls_with_eps" claims of ``paper`` judged per (dataset, fairness_notion) with
    intervals over seeds, from ``df``'s rows selected as the paper reports.

    Per seed: ``slope``, the least-squares slope of the metric on ln(eps) over every eps that
    seed has (at least two), and ``end``, its value at the notion's largest eps minus at its
    smallest (seeds with both). One row per (dataset, notion, metric): ``n_seeds`` (seeds with
    a slope), ``eps_low``, ``eps_high``, ``end_seeds``, ``end_diff``, ``end_lo``, ``end_hi``,
    ``slope``, ``slope_lo``, ``slope_hi`` (means and t-intervals at ``level`` percent) and
    ``verdict``: supported when the slope's interval lies below 0 (``claim_verdict``)."""
    return _trend_intervals(_paper_selection(df, paper), paper, level)


def _trend_intervals(selected: pd.DataFrame, paper: PaperReference, level: float) -> pd.DataFrame:
    level = check_level(level)
    claims = [c for c in paper.claims if c.kind == "falls_with_eps" and c.method == PFLD]
    columns = ["dataset", "fairness_notion", "metric", "n_seeds", "eps_low", "eps_high", "end_seeds", "end_diff",
               "end_lo", "end_hi", "slope", "slope_lo", "slope_hi", "verdict"]
    rows = _with_eps(selected)
    mine = rows[(rows["method"] == PFLD) & (rows["eps"] > 0)]
    out = []
    for (dataset, notion), grp in mine.groupby(["dataset", "fairness_notion"], sort=True):
        low, high = float(grp["eps"].min()), float(grp["eps"].max())
        for c in claims:
            if c.metric not in grp:
                continue
            table = grp.pivot_table(index="seed", columns="eps", values=c.metric, aggfunc="mean")
            slopes = []
            for _, values in table.iterrows():
                values = values.dropna()
                if len(values) >= 2:
                    slopes.append(float(np.polyfit(np.log(values.index.to_numpy(float)), values.to_numpy(float), 1)[0]))
            n, slope, lo, hi = mean_interval(slopes, level)
            end_n, end, end_lo, end_hi = (paired_difference(table[high], table[low], level) if low < high
                                          else (0, math.nan, math.nan, math.nan))
            out.append({"dataset": dataset, "fairness_notion": notion, "metric": c.metric, "n_seeds": n,
                        "eps_low": low, "eps_high": high, "end_seeds": end_n, "end_diff": end, "end_lo": end_lo,
                        "end_hi": end_hi, "slope": slope, "slope_lo": lo, "slope_hi": hi,
                        "verdict": claim_verdict(c.kind, n, lo, hi)})
    return pd.DataFrame(out, columns=columns)


def _claim_text(c: Claim) -> str:
    metric = _METRIC_LABELS.get(c.metric, c.metric)
    who = _METHOD_LABELS.get(c.method, c.method)
    other = _METHOD_LABELS.get(c.other, c.other)
    if c.kind == "below":
        return f"{who} {metric} below {other}'s"
    if c.kind == "within":
        return f"{who} {metric} within ±{_MARGIN_TEXT} of {other}'s"
    return f"{who} {metric} falls as ε grows"


def _interval_cell(mean: float, lo: float, hi: float, fmt: str = ".1f") -> str:
    if not math.isfinite(mean):
        return "-"
    return f"{mean:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]" if math.isfinite(lo) and math.isfinite(hi) else f"{mean:{fmt}}"


def _verdict_cell(verdict: str, n: int) -> str:
    return verdict if verdict == NOT_RUN else f"{verdict} ({n} seed{'' if n == 1 else 's'})"


def _claims_display(table: pd.DataFrame, paper: PaperReference) -> pd.DataFrame:
    """``pfld_claim_intervals`` as text: one row per notion and eps."""
    claims = [c for c in paper.claims if c.kind in ("below", "within") and c.method == PFLD]
    shown = {"Dataset": table["dataset"]} if table["dataset"].nunique() > 1 else {}
    shown.update({"Notion": table["fairness_notion"], "ε": [f"{e:g}" for e in table["eps"]],
                  "Seeds": table["n_seeds"].astype(str)})
    for m in _LEVELS:
        shown[f"PF-LD {_METRIC_LABELS[m]}"] = [_interval_cell(*v) for v in zip(
            table[f"{m}_mean"], table[f"{m}_lo"], table[f"{m}_hi"])]
    for c in claims:
        key, other = f"{c.metric}_vs_{c.other}", _METHOD_LABELS.get(c.other, c.other)
        shown[f"{_METRIC_LABELS.get(c.metric, c.metric).capitalize()} − {other}'s"] = [
            _interval_cell(*v, fmt="+.1f") for v in zip(table[f"{key}_diff"], table[f"{key}_lo"], table[f"{key}_hi"])]
        question = _claim_text(c).removeprefix(f"{_METHOD_LABELS[PFLD]} ")
        shown[question[:1].upper() + question[1:] + "?"] = [
            _verdict_cell(v, n) for v, n in zip(table[f"{key}_verdict"], table[f"{key}_seeds"])]
    return pd.DataFrame(shown)


def _trends_display(table: pd.DataFrame) -> pd.DataFrame:
    """``pfld_trend_intervals`` as text: one row per notion and metric."""
    shown = {"Dataset": table["dataset"]} if table["dataset"].nunique() > 1 else {}
    shown.update({
        "Notion": table["fairness_notion"],
        "Metric": [_METRIC_LABELS.get(m, m) for m in table["metric"]],
        "Largest ε − smallest": [f"ε {h:g} − ε {lo:g}: {_interval_cell(d, a, b, '+.1f')}" for h, lo, d, a, b in zip(
            table["eps_high"], table["eps_low"], table["end_diff"], table["end_lo"], table["end_hi"])],
        "Slope per ln ε": [_interval_cell(*v, fmt="+.2f") for v in zip(table["slope"], table["slope_lo"],
                                                                        table["slope_hi"])],
        "Falls with ε?": [_verdict_cell(v, n) for v, n in zip(table["verdict"], table["n_seeds"])],
    })
    return pd.DataFrame(shown)


def _where_text(groups: pd.DataFrame, every_eps: dict) -> str:
    """"dp (ε 0.1, 0.5), eo (every ε)" for rows of (dataset, fairness_notion, eps)."""
    parts = []
    several = groups["dataset"].nunique() > 1
    for (dataset, notion), grp in groups.groupby(["dataset", "fairness_notion"], sort=True):
        name = f"{dataset} {notion}" if several else str(notion)
        eps = sorted(grp["eps"].dropna().unique()) if "eps" in grp else []
        parts.append(name if not eps else f"{name} (every ε)" if len(eps) == every_eps.get((dataset, notion))
                     else f"{name} (ε {', '.join(f'{e:g}' for e in eps)})")
    return ", ".join(parts)


def _failing_text(claims_table: pd.DataFrame, trends_table: pd.DataFrame, paper: PaperReference) -> str:
    """"Fails or unresolved: ..." naming each claim and where its verdict is not "supported"."""
    if not len(claims_table):
        return "The study has no PF-LD rows: no claim is judged."
    every_eps = claims_table.groupby(["dataset", "fairness_notion"])["eps"].nunique().to_dict()
    parts = []
    for c in paper.claims:
        if c.method != PFLD:
            continue
        if c.kind in ("below", "within"):
            table, col = claims_table, f"{c.metric}_vs_{c.other}_verdict"
        else:
            table, col = trends_table[trends_table["metric"] == c.metric], "verdict"
        if col not in table:
            continue
        bad = [f"{v} at {_where_text(table[table[col] == v], every_eps)}"
               for v in (CONTRADICTED, NOT_RESOLVED, TOO_FEW_SEEDS, NOT_RUN) if (table[col] == v).any()]
        if bad:
            parts.append(f"{_claim_text(c)}: {'; '.join(bad)}")
    return ("Fails or unresolved: " + ". ".join(parts) + ".") if parts else "Every claim is supported."


def _pfld_claims_caption(paper: PaperReference, claims_table: pd.DataFrame, trends_table: pd.DataFrame,
                         level: float) -> str:
    sources = "; ".join(f"{_claim_text(c)} ({c.source})" for c in paper.claims if c.method == PFLD)
    return (f"PF-LD's claims, judged with {level:g}% t-intervals over seeds, pairing each seed's PF-LD pick with "
            f"the other method's pick on the same seed (one seed is one split): M is private_reductions, N "
            f"unconstrained, DP-SGD and N selected on each notion's own violation. Below another's: the interval of "
            f"PF-LD − theirs lies wholly below 0 (supported), wholly above (contradicted), or across 0 (not "
            f"resolved). Accuracy close to N's: the interval of PF-LD − N lies within ±{_MARGIN_TEXT} of "
            f"accuracy (supported), wholly below −{ACCURACY_MARGIN:g} (contradicted), else not resolved. "
            f"Falls with ε: each seed's least-squares slope of the metric on ln ε over every ε, supported when "
            f"its interval lies below 0; the largest ε's value minus the smallest's is shown beside it. Fewer "
            f"than two paired seeds: too few seeds; not run: the study has no such method. PF-LD's violation "
            f"and accuracy are means with their t-interval cut to [0, 100]. Where the paper makes each claim: "
            f"{sources}. {_failing_text(claims_table, trends_table, paper)}")


def comparison_section(df: pd.DataFrame, paper: PaperReference) -> tuple[str, list[pd.DataFrame]]:
    """The report's comparison with ``paper``: a caption (with the cells that differ by more
    than the spread) and display tables of numbers and claims, from ``df``'s rows selected
    and aggregated as the paper reports (its RT, fairness and by keys)."""

    by = [k for k in paper.by if k in df.columns]
    selected = select_by_rt(df, paper.rt, paper.fairness, by)
    agg = aggregate_seeds(selected, fairness=paper.fairness, by=by)
    kinds = guarantees_by_method(df)
    tables, text = [], [f"{paper.title}: the paper's values beside this study's, selected as the paper does "
                        f"(RT = {paper.rt:g}, {paper.fairness}{', by ' + ', '.join(by) if by else ''}). {paper.note}"]
    numbers = compare_numbers(agg, paper)
    other_scale = dict(paper.other_scale)
    if len(numbers):
        off = numbers[numbers["within spread"] == False]  # noqa: E712 - None means no verdict
        text.append("A difference is within spread when |fairdp - paper| <= sqrt(std_paper² + std_fairdp²).")
        text.extend(f"{metric}: not judged by its difference ({why}); the claims below compare its orderings."
                    for metric, why in other_scale.items() if metric in set(numbers["metric"]))
        text.append(("Outside the spread: " + "; ".join(f"{r.method} {r.metric} ({r.fairdp:.2f} vs {r.paper:.2f})"
                                                         for r in off.itertuples()) + ".")
                    if len(off) else "Every difference is within the spread.")
        tables.append(pd.DataFrame({
            "Method": numbers["method"],
            "Guarantee": [guarantee_text(kinds_of([m], kinds)[m]) for m in numbers["method"]],
            "Metric": numbers["metric"],
            "Paper": [f"{m:.2f} ± {s:.2f}" for m, s in zip(numbers["paper"], numbers["paper_std"])],
            "fairdp": [f"{m:.2f} ± {s:.2f}" if math.isfinite(m) else "-"
                       for m, s in zip(numbers["fairdp"], numbers["fairdp_std"].fillna(0.0))],
            "Difference": [f"{d:+.2f}" if math.isfinite(d) else "-" for d in numbers["difference"]],
            "Spread": [f"{s:.2f}" for s in numbers["spread"]],
            "Within spread": ["other scale" if m in other_scale else {True: "yes", False: "no"}.get(w, "-")
                              for m, w in zip(numbers["metric"], numbers["within spread"])],
        }))
    claims = check_claims(agg, paper, tuple(by), kinds)
    if len(claims) and (claims["guarantees"] != "same").any():
        pairs = sorted({c.replace(" below ", " vs ").replace("'s", "") for c in
                        claims.loc[claims["guarantees"] != "same", "claim"]})
        text.append(f"Orderings between methods whose guarantees differ in kind ({'; '.join(pairs)}) compare them "
                    f"at their own ε, not at one privacy level: {DIFFERENT_GUARANTEES}.")
    if paper.lagrangian:
        # PF-LD's claims with intervals over seeds, in place of the means-only summary
        claims_table = _claim_intervals(selected, paper, CLAIM_LEVEL)
        trends_table = _trend_intervals(selected, paper, CLAIM_LEVEL)
        text.append(_pfld_claims_caption(paper, claims_table, trends_table, CLAIM_LEVEL))
        tables.extend(t for t in (_claims_display(claims_table, paper), _trends_display(trends_table)) if len(t))
    elif len(claims):
        summary = []
        for (claim, source), grp in claims.groupby(["claim", "source"], sort=False):
            known = grp["fairdp"].dropna()
            failing = grp[grp["fairdp"] == False]  # noqa: E712 - None means not run
            summary.append({
                "Claim": claim, "Source": source,
                "Paper": {True: "holds", False: "fails", None: "not printed"}[_verdict(grp["paper"])],
                "fairdp": ("not run" if not len(known) else
                           ("holds" if known.all() else "fails") if len(known) == 1 else
                           f"holds in {int(known.sum())} of {len(known)} groups"),
                "Fails where": "; ".join(w or "-" for w in failing["where"]) if len(failing) else "-",
                "Guarantees": grp["guarantees"].iloc[0],
            })
        tables.append(pd.DataFrame(summary))
    if paper.lagrangian:
        text.append("The last table says what bounds PF-LD per notion, from the same rows: F-LD (the same "
                    "constraints without privacy) is its ceiling, and its primal noise grows with 1 / share_0 + "
                    "1 / share_1 of the constraint's smallest population set (equalized odds splits each group "
                    "by label). PF-LD noise / signal (ε 1) is the primal noise's standard deviation per parameter, "
                    "σ_p Δ_p, over the largest norm the private part's clipped sum can reach in a population set, "
                    "about q n_1 sampled group-1 rows times C_p |κ| with Δ_p = C_p max |κ|: at least σ_p / (batch "
                    "size × group 1's share of the set), for the set where group 1 is smallest, from the accounted "
                    "σ_p and batch size of each seed's selected row at ε 1 (a range where the seeds differ); the "
                    "noise's norm is √d times this for d parameters.")
        tables.append(pfld_bounds(df, agg, selected))
    return " ".join(text), tables


def pfld_bounds(df: pd.DataFrame, agg: pd.DataFrame, selected: pd.DataFrame | None = None) -> pd.DataFrame:
    """What bounds PF-LD per fairness notion, measured on the study's rows: F-LD's test accuracy
    and violation (the same constraints without privacy: PF-LD's ceiling), DP-SGD's and M's
    violation at eps = 1 (what the claims compare with), the smallest share of the training
    population a constraint's group holds (from the test split's counts, drawn from the same
    distribution), and PF-LD's primal noise for that notion relative to dp's: the sensitivity
    Delta_p = C_p lambda (1 / n_0 + 1 / n_1) / q of the worst population set, proportional to
    1 / share_0 + 1 / share_1.

    With ``selected`` (the rows ``select_by_rt`` picked), PF-LD's primal noise relative to its
    signal at eps = 1: the private part sums kappa clip(grad h) over a Poisson sample (rate q) of
    group 1's rows of each population set P, about q n_{1,P} rows of norm <= C_p |kappa_P| each,
    and its noise has standard deviation sigma_p Delta_p per parameter with Delta_p = C_p max |kappa|
    (``fairdp.methods._lagrangian``); so per P the ratio is at least sigma_p / (q n_{1,P}) =
    sigma_p / (batch_size share_{1,P}), share_{1,P} = n_{1,P} / n. Shown for the P where group 1
    is smallest, from each selected row's accounted sigma_p (its ``privacy_event``) and batch size:
    "-" where the rows lack them."""

    conf = next((c for c in df.get(TEST_CONFUSION, pd.Series(dtype=object)) if isinstance(c, str) and c), None)
    counts = np.asarray(json.loads(conf), dtype=np.float64) if conf is not None else None  # (G, y, y_pred)
    shares: dict[str, list[tuple[float, float]]] = {}
    if counts is not None and counts.shape[0] == 2 and counts.shape[1] == 2:
        total = counts.sum()
        by_group = counts.sum(axis=(1, 2)) / total
        by_label = counts.sum(axis=2).T / total  # (y, group)
        shares = {"dp": [tuple(by_group)], "ap": [tuple(by_group)], "eo": [tuple(row) for row in by_label]}

    def scale(notion: str) -> float:
        return max(1 / a + 1 / b for a, b in shares[notion]) if notion in shares else math.nan

    def violation(method: str, notion: str, eps: float | None) -> str:
        rows = agg[(agg["method"] == method) & (agg["fairness_notion"] == notion)] if "fairness_notion" in agg \
            else agg.iloc[:0]
        if eps is not None and "eps" in rows:
            rows = rows[np.isclose(pd.to_numeric(rows["eps"], errors="coerce"), eps)]
        col = "test_notion_gap_mean"
        return f"{float(rows[col].iloc[0]):.1f}" if len(rows) == 1 and col in rows else "-"

    group1 = {}  # group 1's share of the smallest population set: the private part's rows
    if counts is not None and counts.shape[0] == 2 and counts.shape[1] == 2:
        total = counts.sum()
        group1 = {"dp": counts[1].sum() / total, "ap": counts[1].sum() / total,
                  "eo": counts[1].sum(axis=1).min() / total}

    def noise_to_signal(notion: str) -> str:
        if selected is None or notion not in group1 or not {"eps", "batch_size", PRIVACY_EVENT} <= set(selected):
            return "-"
        rows = selected[(selected["method"] == PFLD) & (selected["fairness_notion"] == notion)]
        rows = rows[np.isclose(pd.to_numeric(rows["eps"], errors="coerce"), 1.0)]
        ratios = sorted({round(sigma / (float(b) * group1[notion]), 12) for e, b in
                         zip(rows[PRIVACY_EVENT], pd.to_numeric(rows["batch_size"], errors="coerce"))
                         if (sigma := _primal_sigma(e)) is not None and math.isfinite(b) and b > 0})
        if not ratios:
            return "-"
        lo, hi = f"{ratios[0]:.2g}", f"{ratios[-1]:.2g}"
        return f"≥ {lo}" if lo == hi else f"≥ {lo}–{hi}"

    out = []
    for notion in ("dp", "eo", "ap"):
        fld = agg[(agg["method"] == "fld") & (agg.get("fairness_notion") == notion)] if "fairness_notion" in agg \
            else agg.iloc[:0]
        out.append({
            "Notion": notion,
            "F-LD accuracy": f"{float(fld['test_accuracy_mean'].iloc[0]):.1f}" if len(fld) == 1 else "-",
            "F-LD violation": violation("fld", notion, None),
            "DP-SGD violation (ε 1)": violation("dpsgd", notion, 1.0),
            "M violation (ε 1)": violation("private_reductions", notion, 1.0),
            "Smallest group share (%)": (f"{100 * min(min(p) for p in shares[notion]):.1f}" if notion in shares
                                         else "-"),
            "PF-LD noise vs dp": f"{scale(notion) / scale('dp'):.1f}x" if notion in shares else "-",
            "PF-LD noise / signal (ε 1)": noise_to_signal(notion),
        })
    return pd.DataFrame(out)


def _primal_sigma(event: object) -> float | None:
    """sigma_p of a PF-LD row's ``privacy_event``: the noise multiplier of its Poisson-sampled
    Gaussian (the primal steps; ``fairdp.privacy.pfld_event``); None where there is none."""
    if not isinstance(event, str) or not event:
        return None
    try:
        found = json.loads(event)
    except ValueError:
        return None
    stack = [found]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("class") == "PoissonSampledDpEvent":
                inner = node.get("event") or {}
                sigma = inner.get("noise_multiplier") if isinstance(inner, dict) else None
                return float(sigma) if isinstance(sigma, (int, float)) else None
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return None


def _verdict(values: pd.Series) -> bool | None:
    known = values.dropna()
    return None if not len(known) else bool(known.all())
