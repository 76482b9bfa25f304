"""A private selection: the released pick chosen from noisy validation counts, and its total eps.

Every selection fairdp makes (the relaxation-threshold pick, a notion's own violation, a
Pareto front) reads validation accuracy and fairness gaps, and each is a function of the row's
validation counts per (group, y, y_pred) (``valid_confusion``). ``private_valid_metrics``
releases each run's counts through the discrete Gaussian mechanism
(``fairdp.privacy._selection``: noise calibrated so that releasing all K configs' counts of one
run, as one record moves K or 2K of them by 1, is (eps, delta)-DP) and recomputes every
validation metric from the noisy counts (negative counts clipped to 0, the row's
``evaluate.min_group_count`` applied): any selection of its output is post-processing of that
release. ``released_guarantees`` of a pick from those rows states its total guarantee:
dp-accounting's RDP composition of the training release it bounds for every pick (the K
configs' events, or Papernot & Steinke's repeat-and-select) and the count release, under the
rows' relation.

Not covered, as ``released_under`` says: a run whose training itself read validation data in
the clear (a config stopped by ``prune:`` on its validation gaps; a method that keeps its best
epoch by validation accuracy) and rows without an accountant's event.
The noise is drawn from a seeded stream per run (``seed``, for a reproducible report); a release
for real should draw it from the OS (``seed=None``), and keep the exact counts unpublished.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence

import numpy as np
import pandas as pd

from fairdp.analysis._release import (
    SELECTION_EVENT,
    SELECTION_RUN,
    SELECTION_SIGMA,
    SELECTION_UNCOVERED,
    released_guarantees,
)
from fairdp.analysis._rows import (
    RUN_KEYS,
    check_by,
    min_group_counts,
    ok_rows,
    require_columns,
)
from fairdp.analysis._select import select_by_rt
from fairdp.errors import InputError
from fairdp.fairness import scores_from_confusion
from fairdp.privacy import event_from_json
from fairdp.privacy._shared import (
    PrivateSelection,
    count_cells,
    count_release_event,
    count_sigma,
    discrete_gaussian,
    event_to_json,
)
from fairdp.schema import FAIRNESS_METRICS, PRIVACY_EVENT, VALID_CONFUSION

LAST_EPOCH_METHODS = frozenset({"fld", "pfld", "dpsgd", "dpsgd_global_adapt", "dpsgd_f", "dp_fermi"})
"""fairdp's methods whose training never reads the validation split: Tran et al.'s protocol, the
model after the last epoch (``TranMethod``; a test holds this to the registry). Every other
method's reported model is its epoch of best validation accuracy, and a plugin's may be: a
private pick of theirs is not covered."""
_VALID_COLUMNS = ("valid_accuracy", *(f"valid_{m}" for m in FAIRNESS_METRICS))


def _scope_relation(events: pd.Series) -> str:
    """The neighbouring relation of a run's training events; a replacement (2 counts per config
    moved) where none is stored or they differ: it bounds add/remove too."""
    relations = {event_from_json(e)[1] for e in events.dropna().unique()}
    return relations.pop() if len(relations) == 1 else "replace_one"


def private_valid_metrics(df: object, selection: PrivateSelection, by: Sequence[str] = ()) -> pd.DataFrame:
    """``df``'s ok rows with their validation counts (``valid_confusion``) replaced by the
    released ones (each count plus discrete Gaussian noise, clipped at 0), every validation
    metric (``valid_accuracy``, ``valid_<gap>``) recomputed from them, and the release beside
    each row: ``SELECTION_EVENT``, ``SELECTION_SIGMA``, ``SELECTION_UNCOVERED`` (why its run's
    training read validation data in the clear; "" where it did not). A run is a (dataset, method,
    seed, *by) as a selection with ``by`` reads it; its K rows' counts are one release."""
    if not isinstance(selection, PrivateSelection):
        raise InputError(f"selection: expected a PrivateSelection, got {type(selection).__name__}")
    rows = ok_rows(df, "df").reset_index(drop=True)
    by = check_by(by, rows)
    require_columns(rows, [*RUN_KEYS, VALID_CONFUSION], "df")
    missing = rows[VALID_CONFUSION].isna()
    if missing.any():
        raise InputError(f"df: {int(missing.sum())} ok row(s) without {VALID_CONFUSION} (stored before fairdp kept "
                         f"validation counts): a private selection reads nothing else")
    least = min_group_counts(rows)
    out = {c: np.full(len(rows), np.nan) for c in _VALID_COLUMNS}  # nothing of the exact values kept
    events = np.full(len(rows), None, dtype=object)
    uncovered = np.full(len(rows), "", dtype=object)
    released = np.full(len(rows), None, dtype=object)  # the noisy counts replace the exact ones
    runs, runs_seen = np.full(len(rows), -1, dtype=np.int64), []
    sigmas = np.full(len(rows), np.nan)
    keys = [*RUN_KEYS, *by]
    stored_events = rows[PRIVACY_EVENT] if PRIVACY_EVENT in rows.columns else pd.Series([None] * len(rows))
    for key, index in rows.groupby(keys, sort=True, dropna=False).indices.items():
        relation = _scope_relation(stored_events.iloc[index])
        cells = count_cells(relation, len(index))
        sigma = count_sigma(selection.eps, selection.delta, cells)
        stream = random.Random("|".join(map(str, (selection.seed, *np.atleast_1d(key))))) \
            if selection.seed is not None else random.SystemRandom()
        for i in index:
            conf = np.asarray(json.loads(rows[VALID_CONFUSION].iloc[i]), dtype=np.int64)
            noisy = np.maximum(conf + discrete_gaussian(sigma, conf.size, stream).reshape(conf.shape), 0)
            released[i] = json.dumps(noisy.tolist(), separators=(",", ":"))
            scores = scores_from_confusion(noisy, int(least[i]))
            for column in _VALID_COLUMNS:
                out[column][i] = float(scores[column[len("valid_"):]])
        events[index] = event_to_json(count_release_event(sigma, cells), relation)
        runs[index] = len(runs_seen)
        runs_seen.append(key)
        sigmas[index] = sigma
        uncovered[index] = _uncovered(rows.iloc[index])
    return rows.assign(**out, **{VALID_CONFUSION: released, SELECTION_EVENT: events, SELECTION_RUN: runs, SELECTION_SIGMA: sigmas, SELECTION_UNCOVERED: uncovered})


def _uncovered(run: pd.DataFrame) -> str:
    """Why a run's training read validation data in the clear ("" where it did not)."""
    if "pruned_at" in run.columns and run["pruned_at"].notna().any():
        return "prune read validation gaps in the clear while training"
    if str(run["method"].iloc[0]) not in LAST_EPOCH_METHODS:
        return ("its epoch may have been picked by validation accuracy in the clear (only the methods trained to "
                "their last epoch are covered)")
    return ""


def _run_labels(frame: pd.DataFrame, keys: list[str]) -> pd.Series:
    """One text per row naming its run (NaN of a method without a by key included): what
    pairs two selections' picks of one run."""
    return pd.Series(["\x1f".join(map(str, t)) for t in frame[keys].itertuples(index=False, name=None)],
                     index=frame.index, dtype=object)


PICK_COST_COLUMNS = ("runs", "same_pick", "accuracy_given_up_mean", "accuracy_given_up_std", "violation_added_mean",
                     "violation_added_std", "eps_released", "eps_total")


def private_pick_cost(df: object, selection: PrivateSelection, rt: float, fairness: str,
                      by: Sequence[str] = ()) -> pd.DataFrame:
    """What a private pick gives up, per (dataset, method, *by): over the runs (seeds) where both
    picks exist, ``same_pick`` (the share of runs whose private pick is the config the clear
    selection picks), the test accuracy it gives up and the test violation it adds (percentage
    points: clear pick minus private pick, and private minus clear; mean and std over runs, of
    ``fairness``'s test column, each row's own notion under ``notion_gap``), the clear pick's
    ``eps_released`` (training only, its largest over runs) and the private pick's ``eps_total``
    (training and the count release, largest over runs)."""

    rows = ok_rows(df, "df")
    by = check_by(by, rows)
    keys = ["dataset", "method", *by]
    clear = released_guarantees(rows, select_by_rt(rows, rt=rt, fairness=fairness, by=by), rt, by)
    noisy = private_valid_metrics(rows, selection, by)
    private = released_guarantees(noisy, select_by_rt(noisy, rt=rt, fairness=fairness, by=by), rt, by)
    run = [*RUN_KEYS, *by]
    both = pd.DataFrame({"_run": _run_labels(clear, run), **{k: clear[k] for k in keys},
                         "config_clear": clear["config_id"], "acc_clear": clear["test_accuracy"],
                         "gap_clear": clear[f"test_{fairness}"], "eps_released": clear["eps_released"]})
    theirs = pd.DataFrame({"_run": _run_labels(private, run), "config_private": private["config_id"],
                           "acc_private": private["test_accuracy"],
                           "gap_private": private[f"test_{fairness}"], "eps_total": private["eps_released"]})
    paired = both.merge(theirs, on="_run", how="inner")
    paired["same"] = paired["config_clear"] == paired["config_private"]
    paired["given_up"] = paired["acc_clear"] - paired["acc_private"]
    paired["added"] = paired["gap_private"] - paired["gap_clear"]
    grouped = paired.groupby(keys, sort=True, dropna=False)
    out = pd.DataFrame({
        "runs": grouped.size(), "same_pick": grouped["same"].mean(),
        "accuracy_given_up_mean": grouped["given_up"].mean(), "accuracy_given_up_std": grouped["given_up"].std(ddof=1),
        "violation_added_mean": grouped["added"].mean(), "violation_added_std": grouped["added"].std(ddof=1),
        "eps_released": grouped["eps_released"].max(), "eps_total": grouped["eps_total"].max()})
    return out.reset_index()[[*keys, *PICK_COST_COLUMNS]]
