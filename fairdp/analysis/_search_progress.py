"""How far a search got: the normalised hypervolume of its feasible front, per generation,
and against the front of a full grid over the same method.

The hypervolume uses a fixed reference point, so that numbers from different searches,
grids and runs compare: each objective's worst possible value (``hypervolume_bounds``):
accuracy 0 %, fairness gaps and leakage 100 %, eps_formal ``EPS_FORMAL_WORST``, MDL 0 kbits.
It is divided by the volume of the box between that point and the ideal one (accuracy 100 %,
gaps and leakage 0 %, eps_formal 0), so 1.0 would be a single perfect config. MDL has no
ideal value, so its axis is in kbits, unnormalised. Only feasible rows (``fairdp.constraints``)
count: a constrained search's front, like Optuna's ``best_trials``, holds feasible trials only.

- ``normalised_hypervolume``: of the feasible Pareto front of some rows.
- ``hypervolume_history``: after every ``every`` trials of a search (one NSGA-II generation),
  what Optuna's ``plot_hypervolume_history`` draws; non-decreasing by construction.
- ``search_vs_grid``: each history entry against the grid's front hypervolume, as a ratio.
- ``search_progress``: stacked histories of several searches, each against its grid rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from fairdp.analysis._pareto import _check_objectives, hypervolume, pareto_front
from fairdp.analysis._rows import as_frame, ok_rows, require_columns
from fairdp.constraints import Constraint, feasible
from fairdp.errors import InputError

# The widest eps any of the papers' grids reach (FEDERATE's go to 20): a config with a larger
# formal eps adds nothing to the hypervolume.
EPS_FORMAL_WORST = 20.0


def hypervolume_bounds(objectives: Mapping[str, str]) -> tuple[list[float], list[float]]:
    """(worst, ideal) value of each objective under its direction: the reference point and
    the corner it is normalised against. MDL's ideal is worst + 1 kbit (no natural bound)."""
    objectives = _check_objectives(objectives)
    worst, ideal = [], []
    for col, direction in objectives.items():
        if col == "mdl":
            if direction != "max":
                raise InputError("objectives: mdl has no worst value to minimise from (higher MDL is better)")
            lo, hi = 0.0, 1.0
        elif col == "eps_formal":
            lo, hi = 0.0, EPS_FORMAL_WORST
        else:  # percentages: accuracy, fairness gaps, leakage
            lo, hi = 0.0, 100.0
        good_is_high = direction == "max"
        worst.append(lo if good_is_high else hi)
        ideal.append(hi if good_is_high else lo)
    return worst, ideal


def normalised_hypervolume(
    rows: pd.DataFrame, objectives: Mapping[str, str], constraints: Sequence[Constraint | str] = ()
) -> float:
    """Hypervolume of the feasible rows' Pareto front, in [0, 1] (``hypervolume_bounds``)."""
    objectives = _check_objectives(objectives)
    rows = ok_rows(rows)
    require_columns(rows, objectives)
    rows = rows[feasible(rows, constraints)]
    if rows.empty:
        return 0.0
    front = pareto_front(rows, objectives)
    if front.empty:
        return 0.0
    worst, ideal = hypervolume_bounds(objectives)
    scale = float(np.prod([abs(i - w) for w, i in zip(worst, ideal)]))
    return hypervolume(front[list(objectives)], worst, list(objectives.values())) / scale


def hypervolume_history(trials: pd.DataFrame, objectives: Mapping[str, str], every: int) -> pd.DataFrame:
    """The normalised hypervolume of the feasible front after every ``every`` trials.

    ``trials``: one row per complete trial in the order the search finished them, with the
    objective columns and a boolean ``feasible`` column. One entry per ``every`` trials (an
    NSGA-II generation when ``every`` is its population), plus one for a last partial block.
    Columns: trials (complete trials so far), feasible_trials, front_size, hypervolume.
    """
    objectives = _check_objectives(objectives)
    trials = as_frame(trials, "trials")
    require_columns(trials, [*objectives, "feasible"], "trials")
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise InputError(f"every: expected an integer >= 1, got {every!r}")
    ends = list(range(every, len(trials) + 1, every))
    if len(trials) and (not ends or ends[-1] != len(trials)):
        ends.append(len(trials))
    out = []
    for n in ends:
        done = trials.iloc[:n]
        ok = done[done["feasible"].astype(bool)].dropna(subset=list(objectives))
        front = pareto_front(ok, objectives) if len(ok) else ok
        out.append((n, len(ok), len(front), normalised_hypervolume(front, objectives) if len(front) else 0.0))
    return pd.DataFrame(out, columns=["trials", "feasible_trials", "front_size", "hypervolume"])


def search_vs_grid(
    history: pd.DataFrame,
    grid_rows: pd.DataFrame,
    objectives: Mapping[str, str],
    constraints: Sequence[Constraint | str] = (),
) -> pd.DataFrame:
    """Each entry of a search's ``hypervolume_history`` against the grid's front.

    ``grid_rows``: the grid's result rows of the same dataset, method and seed (the caller
    picks them). Adds grid_configs (ok rows of the grid), grid_hypervolume (the normalised
    hypervolume of the grid's feasible front under the same objectives, constraints and
    reference point) and ratio = hypervolume / grid_hypervolume (NaN when the grid has no
    feasible point): the share of the grid's front the search had reached at that many trials.
    """
    history = as_frame(history, "history")
    require_columns(history, ["trials", "hypervolume"], "history")
    grid_ok = ok_rows(grid_rows, "grid_rows")
    grid_hv = normalised_hypervolume(grid_ok, objectives, constraints)
    out = history.copy()
    out["grid_configs"] = len(grid_ok)
    out["grid_hypervolume"] = grid_hv
    out["ratio"] = out["hypervolume"] / grid_hv if grid_hv > 0 else np.nan
    return out


SEARCH_KEYS = ("dataset", "method", "seed")


def search_progress(histories: pd.DataFrame, grid_rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """Hypervolume histories of searches (stacked ``<results>.hypervolume-<method>-seed<s>.parquet``
    tables), each against the grid rows of its dataset, method and seed when ``grid_rows``
    are given (``search_vs_grid``, under the objectives and constraints the history records).

    Grid rows trained with other epochs than the search's rows are left out: their front is
    not the same problem's. A search with no matching grid rows gets NaN grid columns.
    """
    import json

    histories = as_frame(histories, "histories")
    require_columns(histories, [*SEARCH_KEYS, "objectives", "constraints", "trials", "hypervolume"], "histories")
    if grid_rows is None:
        return histories.reset_index(drop=True)
    grid = ok_rows(grid_rows, "grid_rows")
    require_columns(grid, SEARCH_KEYS, "grid_rows")
    parts = []
    for key, history in histories.groupby(list(SEARCH_KEYS), sort=True):
        match = grid
        for col, value in zip(SEARCH_KEYS, key):
            match = match[match[col].astype(str) == str(value)]
        epochs = history["epochs"].iloc[0] if "epochs" in history.columns else None
        if epochs is not None and pd.notna(epochs) and "epochs" in match.columns:
            match = match[pd.to_numeric(match["epochs"], errors="coerce") == float(epochs)]
        if match.empty:
            parts.append(history.assign(grid_configs=0, grid_hypervolume=np.nan, ratio=np.nan))
            continue
        objectives = json.loads(history["objectives"].iloc[0])
        constraints = json.loads(history["constraints"].iloc[0])
        parts.append(search_vs_grid(history, match, objectives, constraints))
    return pd.concat(parts, ignore_index=True)
