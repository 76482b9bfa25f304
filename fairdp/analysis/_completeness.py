"""Whether result rows are the whole study: planned configs against finished ones.

A multi-sitting run (a paper's protocol on a laptop) can be analysed at any point; a table
selected from part of a grid looks like a table selected from all of it. ``fairdp run``
writes the configs it plans beside the results (``<results>.plan.parquet``,
``fairdp.study.run._plan.record_plan``); these functions set the rows against that plan, or,
where no plan was stored, against each other (a method with fewer configs in one seed than
in another).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
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
    plan = plan if plan is not None and not plan.empty else None
    n_rows = len(df)
    # each key numbered once over the rows and the plan together (a groupby and a merge of a
    # million rows each took a second): a config is then one integer, a run another
    codes, sizes, values = [], [], []
    for key in ids:
        code, size, value_of = _codes([df[key]] if plan is None else [df[key], plan[key]], key == "seed")
        codes.append(code)
        sizes.append(size)
        values.append(value_of)
    run_key = (codes[0] * sizes[1] + codes[1]) * sizes[2] + codes[2]
    config_key = run_key * sizes[3] + codes[3]
    ok = (df["status"] == "ok").fillna(False).to_numpy(bool)
    # one entry per config tried: finished if any of its rows is ok (a failed pack retried), else failed
    tried, tried_first, tried_of_row = np.unique(config_key[:n_rows], return_index=True, return_inverse=True)
    tried_ok = np.bincount(tried_of_row.reshape(-1), weights=ok, minlength=len(tried)) > 0
    tried_run = tried // sizes[3]
    runs = [tried_run]
    firsts = [tried_first]  # each entry's first row: where its run's keys are read
    if plan is not None:
        planned_configs, planned_first = np.unique(config_key[n_rows:], return_index=True)
        if len(tried):
            at = np.minimum(np.searchsorted(tried, planned_configs), len(tried) - 1)
            found = tried[at] == planned_configs
            done, failed = found & tried_ok[at], found & ~tried_ok[at]
        else:
            done = failed = np.zeros(len(planned_configs), bool)
        planned_run = planned_configs // sizes[3]
        runs.append(planned_run)
        firsts.append(n_rows + planned_first)
    run_ids, first = np.unique(np.concatenate(runs), return_index=True)
    n_runs = len(run_ids)
    seen_run = np.searchsorted(run_ids, tried_run)
    out = {"finished": np.bincount(seen_run, weights=tried_ok, minlength=n_runs).astype(np.int64),
           "failed": np.bincount(seen_run, weights=~tried_ok, minlength=n_runs).astype(np.int64),
           "planned": np.full(n_runs, np.nan), "missing": np.full(n_runs, np.nan)}
    if plan is not None:
        in_plan = np.searchsorted(run_ids, planned_run)
        has_plan = np.bincount(in_plan, minlength=n_runs) > 0
        planned = np.bincount(in_plan, minlength=n_runs)
        finished = np.bincount(in_plan, weights=done, minlength=n_runs).astype(np.int64)
        failed_planned = np.bincount(in_plan, weights=failed, minlength=n_runs).astype(np.int64)
        out["finished"] = np.where(has_plan, finished, out["finished"])
        out["failed"] = np.where(has_plan, failed_planned, out["failed"])
        out["planned"] = np.where(has_plan, planned, np.nan)
        out["missing"] = np.where(has_plan, planned - finished - failed_planned, np.nan)
        if has_plan.all():  # counts, as a table of planned runs only holds them
            out["planned"], out["missing"] = out["planned"].astype(np.int64), out["missing"].astype(np.int64)
    first_of = np.concatenate(firsts)[first]
    table = pd.DataFrame({key: values[k](codes[k][first_of]) for k, key in enumerate(KEYS)} | out)
    table["seed"] = table["seed"].astype("int64")
    table = table.sort_values(KEYS, kind="mergesort", ignore_index=True)
    return table[KEYS + ["planned", "finished", "failed", "missing"]]


def _codes(columns: list[pd.Series], integers: bool) -> tuple[np.ndarray, int, Callable[[np.ndarray], np.ndarray]]:
    """One numbering of the values of ``columns`` together: each entry's code (the columns one
    after another), how many values, and a function giving the values of codes; a missing value
    is a value of its own, as ``groupby(dropna=False)`` counts it. Text is numbered by Arrow,
    which hashes a million config ids in 0.05 s (pandas: 0.25 s, after 0.15 s converting them
    to Python strings)."""
    if integers:
        code, uniques = pd.factorize(np.concatenate([c.astype("int64").to_numpy() for c in columns]))
        return code.astype(np.int64), len(uniques), lambda codes: np.asarray(uniques)[codes]
    import pyarrow as pa

    arrays = [pa.array(c, from_pandas=True) if c.dtype != object
              else pa.array(c.to_numpy(object), type=pa.large_string(), from_pandas=True) for c in columns]
    chunks = [chunk.cast(pa.large_string()) for a in arrays for chunk in getattr(a, "chunks", [a])]
    encoded = pa.chunked_array(chunks, type=pa.large_string()).dictionary_encode()
    if not encoded.num_chunks:
        return np.zeros(0, np.int64), 0, lambda codes: np.asarray([], dtype=object)[codes]
    dictionary = encoded.chunk(0).dictionary
    # null (a missing value): one code past the dictionary's
    indices = pa.chunked_array([chunk.indices for chunk in encoded.chunks]).fill_null(len(dictionary))
    with_null = pa.concat_arrays([dictionary, pa.nulls(1, pa.large_string())])
    return (indices.to_numpy().astype(np.int64), len(dictionary) + 1,
            lambda codes: np.asarray(with_null.take(pa.array(codes, pa.int64())).to_pylist(), dtype=object))


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
