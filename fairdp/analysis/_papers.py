"""The papers' published numbers and claims, side by side with a study's own.

Published tables ship as CSV under ``fairdp/analysis/papers/`` (read from the papers' text;
each file's header says which table and what could not be read). A comparison takes the
aggregate table of a study (``aggregate_seeds`` after ``select_by_rt``) and gives, per
method and metric, the paper's mean ± std, fairdp's, their difference and whether it lies
within the combined seed spread, sqrt(std_paper^2 + std_fairdp^2) (the spread of a
difference of two independent draws). Claims are the papers' orderings (one method's mean
below another's) and trends (a metric falling as eps grows), each checked on fairdp's means
and, where the paper prints numbers, on the paper's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources

import numpy as np
import pandas as pd

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


@dataclass(frozen=True)
class Claim:
    """``kind`` "below": ``method``'s ``metric`` mean is below ``other``'s (per ``by`` group);
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

_PFLD_CLAIMS = (
    Claim("below", "test_notion_gap", "pfld", "private_reductions",
          "Accuracy and Fairness: 'considerably lower fairness violations when compared to M', every notion"),
    Claim("below", "test_notion_gap", "pfld", "dpsgd",
          "implied: P (DP-SGD) enforces no fairness constraint"),
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
        keys = [k for k in by if k in agg.columns and (c.kind == "below" or k != "eps")]
        groups = agg.groupby(keys, dropna=False) if keys else [((), agg)]
        for key, grp in groups:
            key = key if isinstance(key, tuple) else (key,)
            where = ", ".join(f"{k} {v}" for k, v in zip(keys, key) if not _missing(v))
            if c.kind == "below":
                # a method without a by-column (a baseline) is repeated under every group
                a = _mean_of(agg, grp, c.method, col, keys, key)
                b = _mean_of(agg, grp, c.other, col, keys, key)
                holds = None if np.isnan(a) or np.isnan(b) else bool(a < b)
                text = f"{c.method} {c.metric} below {c.other}'s"
                in_paper = _paper_below(pub, c)
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


def comparison_section(df: pd.DataFrame, paper: PaperReference) -> tuple[str, list[pd.DataFrame]]:
    """The report's comparison with ``paper``: a caption (with the cells that differ by more
    than the spread) and display tables of numbers and claims, from ``df``'s rows selected
    and aggregated as the paper reports (its RT, fairness and by keys)."""

    by = [k for k in paper.by if k in df.columns]
    agg = aggregate_seeds(select_by_rt(df, paper.rt, paper.fairness, by), fairness=paper.fairness, by=by)
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
    if len(claims):
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
                    "by label).")
        tables.append(pfld_bounds(df, agg))
    return " ".join(text), tables


def pfld_bounds(df: pd.DataFrame, agg: pd.DataFrame) -> pd.DataFrame:
    """What bounds PF-LD per fairness notion, measured on the study's rows: F-LD's test accuracy
    and violation (the same constraints without privacy: PF-LD's ceiling), DP-SGD's and M's
    violation at eps = 1 (what the claims compare with), the smallest share of the training
    population a constraint's group holds (from the test split's counts, drawn from the same
    distribution), and PF-LD's primal noise for that notion relative to dp's: the sensitivity
    Delta_p = C_p lambda (1 / n_0 + 1 / n_1) / q of the worst population set, proportional to
    1 / share_0 + 1 / share_1."""

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
        })
    return pd.DataFrame(out)


def _verdict(values: pd.Series) -> bool | None:
    known = values.dropna()
    return None if not len(known) else bool(known.all())
