"""The plan beside a study's results (``<results>.plan.parquet``: every config its runs planned,
stored or not), as an analysis reads it: apart from the planner, which expands grids with the
methods (torch), so that reading it does not load them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa

from fairdp.study.store._store import CorruptSideTable, ResultStore, foreign_reason

PLAN_TABLE = "plan.parquet"
PLAN_COLUMNS = ["study", "dataset", "method", "seed", "config_id", "epochs"]

PLAN_TYPES = {"study": pa.string(), "dataset": pa.string(), "method": pa.string(), "seed": pa.int64(),
              "config_id": pa.string(), "epochs": pa.int64()}


def read_plan(store: ResultStore) -> pd.DataFrame | None:
    """The plan beside ``store``'s results, or None when no run wrote one; ``CorruptSideTable``
    (an InputError naming it) when it is unreadable or not a plan."""
    plan = store.read_side_table(PLAN_TABLE)
    if plan is None:
        return None
    reason = foreign_reason(pa.Schema.from_pandas(plan, preserve_index=False), PLAN_TYPES)
    if reason:
        raise CorruptSideTable(store.side_table_path(PLAN_TABLE), reason)
    return plan


def read_plans(*locations) -> pd.DataFrame | None:
    """The plans beside several results locations, stacked; None when none has one. A
    location that is a Parquet file of rows has no plan."""
    frames = []
    for loc in locations:
        if Path(str(loc)).is_file():
            continue
        plan = read_plan(ResultStore(loc))
        if plan is not None:
            frames.append(plan)
    return pd.concat(frames, ignore_index=True) if frames else None
