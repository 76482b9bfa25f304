"""Whether result rows are the whole study: planned configs against finished ones.

A multi-sitting run (a paper's protocol on a laptop) can be analysed at any point; a table
selected from part of a grid looks like a table selected from all of it. ``fairdp run``
writes the configs it plans beside the results (``<results>.plan.parquet``,
``fairdp.study.run._plan.record_plan``); these functions set the rows against that plan, or,
where no plan was stored, against each other (a method with fewer configs in one seed than
in another).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

KEYS = ["dataset", "method", "seed"]


def completeness(df: pd.DataFrame, plan: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (dataset, method, seed): ``planned`` configs, ``finished`` (an ok row),
    ``failed`` (only error rows) and ``missing`` (no row at all).

    With ``plan`` (rows of dataset, method, seed, config_id) only planned configs count and
    every planned (dataset, method, seed) appears, rows or not; a group with rows but no plan
    has ``planned``/``missing`` NaN. Without a plan those two are NaN throughout.
    """
    ids = KEYS + ["config_id"]
    rows = df[ids].astype({"seed": "int64"}).assign(_ok=(df["status"] == "ok").fillna(False).to_numpy(bool))
    # one row per config tried: finished if any of its rows is ok (a failed pack retried), else failed
    tried = rows.groupby(ids, sort=False, dropna=False)["_ok"].any().reset_index()
    seen = tried.groupby(KEYS, sort=False, dropna=False)["_ok"].agg(["sum", "size"])
    seen = pd.DataFrame({"finished": seen["sum"], "failed": seen["size"] - seen["sum"]})
    if plan is None or plan.empty:
        out = seen.assign(planned=float("nan"), missing=float("nan"))
    else:
        p = plan[ids].drop_duplicates().astype({"seed": "int64"})
        both = p.merge(tried, on=ids, how="left")
        done, failed = both["_ok"].eq(True), both["_ok"].eq(False)
        planned = both.assign(_done=done, _failed=failed).groupby(KEYS, sort=False, dropna=False).agg(
            planned=("config_id", "size"), finished=("_done", "sum"), failed=("_failed", "sum"))
        planned["missing"] = planned["planned"] - planned["finished"] - planned["failed"]
        unplanned = seen.loc[~seen.index.isin(planned.index)].assign(planned=float("nan"), missing=float("nan"))
        out = pd.concat([planned, unplanned]) if len(unplanned) else planned
    out = out.reset_index().sort_values(KEYS, kind="mergesort", ignore_index=True)
    return out[KEYS + ["planned", "finished", "failed", "missing"]]


@dataclass(frozen=True)
class Completeness:
    """``state``: 'complete', 'partial' (the plan has configs without an ok row), 'uneven'
    (no plan, and a method has fewer configs in one seed than another) or 'unknown' (no
    plan, nothing uneven); ``text``: one sentence saying so."""

    state: str
    text: str

    @property
    def is_partial(self) -> bool:
        return self.state in ("partial", "uneven")


def _seeds(seeds) -> str:
    seeds = sorted(int(s) for s in seeds)
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


def _name(dataset: str, method: str, datasets: int) -> str:
    return f"{dataset}/{method}" if datasets > 1 else method


def summarise(table: pd.DataFrame, searched: bool = False) -> Completeness:
    """One sentence over ``completeness``'s table. ``searched``: the rows are a search's
    trials, which no plan lists in advance (a search draws its configs as it runs)."""
    n_datasets = table["dataset"].nunique()
    planned = table.dropna(subset=["planned"])
    if len(planned):
        total, done = int(planned["planned"].sum()), int(planned["finished"].sum())
        failed = int(planned["failed"].sum())
        short = planned[planned["finished"] < planned["planned"]]
        if short.empty:
            return Completeness("complete", f"complete: all {total:,} planned configs finished "
                                            f"({planned['method'].nunique()} methods, {_seeds(planned['seed'].unique())})")
        parts = []
        for (d, m), g in short.groupby(["dataset", "method"], sort=True):
            lacking = int((g["planned"] - g["finished"]).sum())
            parts.append(f"{_name(d, m, n_datasets)} {_seeds(g['seed'])} ({lacking:,} of "
                         f"{int(g['planned'].sum()):,} configs unfinished)")
        failed_text = f", {failed:,} failed" if failed else ""
        return Completeness("partial", f"partial: {done:,} of {total:,} planned configs finished{failed_text}; "
                                       f"unfinished: {'; '.join(parts)}. Every table selects among the configs that "
                                       f"finished, so it is not the study's result until the run completes")
    parts = []
    for (d, m), g in table.groupby(["dataset", "method"], sort=True):
        seeds = set(table.loc[table["dataset"] == d, "seed"])
        most = int(g["finished"].max())
        fewer = g[g["finished"] < most]
        absent = seeds - set(g["seed"])
        if len(fewer) or absent:
            what = [f"{int(r.finished)} in seed {int(r.seed)}" for r in fewer.itertuples()]
            what += [f"none in seed {s}" for s in sorted(absent)]
            parts.append(f"{_name(d, m, n_datasets)} has {most} config{'' if most == 1 else 's'} in some seeds but "
                         f"{', '.join(what)}")
    if searched:
        counts = "; ".join(f"{_name(d, m, n_datasets)}: {', '.join(str(int(n)) for n in g.sort_values('seed')['finished'])} "
                           f"in {_seeds(g['seed'])}" for (d, m), g in table.groupby(["dataset", "method"], sort=True))
        return Completeness("uneven" if parts else "unknown",
                            f"a search's trials, which it draws as it runs, so no plan lists them in advance; trials "
                            f"finished: {counts}" + (" (uneven across seeds: a search stopped early in some)" if parts
                                                     else ""))
    if parts:
        return Completeness("uneven", "uneven: " + "; ".join(parts) + ". No plan is stored beside these results "
                                      "(fairdp run writes <results>.plan.parquet) to say which configs are missing")
    return Completeness("unknown", "not recorded: no plan is stored beside these results "
                                   "(fairdp run writes <results>.plan.parquet); every method has as many configs "
                                   "in each seed")
