"""Multi-objective search: Optuna samplers (NSGA-II, TPE), run as a study runs.

One Optuna study per search seed in a JournalStorage file (``<results>/_optuna.journal``;
SQLite is not safe for parallel writers, and optuna-dashboard opens journal files). A search
behaves like ``fairdp run``: the same checks before anything is written (dataset, results,
address, stored rows of the same study and protocol), ``--executor ray`` or ``local``,
``--dry-run``, the same store, lock, progress, checkpoints and exit statuses. Its own
settings (sampler, objectives, space, fixed values, seed, population, constraints) are kept in
the Optuna study, and resuming with other ones is refused.

Generations (``_generations``): asked from Optuna at once, configs already stored (a grid
run's, or a repeat the sampler proposes) answered from their rows, the rest trained as packs:

* ``packed`` (the default for NSGA-II): a generation of ``population`` configs, as one pack
  per worker slot (Ray Tune, ``GenerationSearcher``) or one pack (local);
* ``per-config``: one config at a time. TPE conditions every suggestion on all finished
  trials, so batching would change it; TPE uses this mode by default (on Ray, Tune's
  ``OptunaSearch`` with metric and mode lists).

Rows go to the same Parquet store as ``fairdp run``; the Pareto front of the objectives over
the search's rows is written beside the results, to ``<results>.pareto-<method>-seed<s>.parquet``.

With ``search.constraints`` each trial gets its row's violations before it is told (the list
optuna-dashboard and Optuna's samplers read, ``set_constraints``). Infeasible trials train and
store their rows like any other; the front holds feasible rows only (as ``Study.best_trials``),
and the summary says how many rows each constraint excluded. The normalised hypervolume of the
feasible front after every ``population`` trials (one NSGA-II generation) goes to
``<results>.hypervolume-<method>-seed<s>.parquet``, recomputed from the journal's trial order and
the stored rows after every (resumed) search.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import math
import time
from dataclasses import dataclass

import pandas as pd

from fairdp.analysis import pareto_front
from fairdp.analysis._shared import hypervolume_history
from fairdp.constraints import feasible
from fairdp.errors import InputError
from fairdp.study.executors._executors import DEFAULT_EXECUTOR, Capacity, make_executor
from fairdp.study.run._prepare import Prepared, prepare, settings_lines
from fairdp.study.run._progress import Progress
from fairdp.study.run._resume_checks import protocol_difference
from fairdp.study.search._generations import GenerationPlanner
from fairdp.study.search._optuna import (
    complete_trials,
    completed_config_ids,
    journal_path,
    open_study,
    read_journal_study,
)
from fairdp.study.spec._spec import MAX_TRIALS, SearchSpec, StudySpec, checked_int
from fairdp.study.store._selection import store_selection
from fairdp.study.store._store import ResultStore

logger = logging.getLogger(__name__)


@dataclass
class SearchSummary:
    results: str
    journal: str
    trials_run: int
    trials_total: int
    front: pd.DataFrame
    wall_s: float
    mode: str
    history: pd.DataFrame  # hypervolume_history: trials, feasible_trials, front_size, hypervolume
    seed: int = 0
    answered: int = 0  # trials answered from stored rows instead of trained
    rows: int = 0  # the search's rows (method, seed): what the front was chosen from
    excluded: dict = dataclasses.field(default_factory=dict)  # constraint -> rows it makes infeasible
    dry_run: bool = False
    plan_lines: tuple[str, ...] = ()  # a dry run's report, the plan: for the caller to print (not logged)


def study_name(spec: StudySpec) -> str:
    """The Optuna study of the spec's search: one per study, method and search seed."""
    return f"{spec.name}-{spec.search.method}-seed{spec.search.seed}"


def search_settings(search: SearchSpec) -> dict:
    """What a search's trials depend on besides the rows' protocol: kept in its Optuna study
    and compared on resume (``trials`` is not: a search may be resumed to more trials)."""
    return json.loads(json.dumps({
        "method": search.method, "sampler": search.sampler, "objectives": search.objectives,
        "space": search.space, "fixed": search.fixed, "seed": search.seed, "population": search.population,
        "constraints": [str(c) for c in search.constraints]}))


SETTINGS_ATTR = "fairdp_search"


def check_search_settings(study, search: SearchSpec, journal: str, record: bool = True) -> None:
    """Refuse to resume a search whose settings changed (its trials would mix two searches);
    record them in a new study (``record``; a dry run only checks)."""
    want = search_settings(search)
    have = study.user_attrs.get(SETTINGS_ATTR)
    if have is None:
        if record:
            study.set_user_attr(SETTINGS_ATTR, want)
        return
    found = protocol_difference(have, want)
    if found:
        key, old, new = found
        raise InputError(f"{journal}: the search was started with search.{key} {json.dumps(old)}, this run asks for "
                         f"{json.dumps(new)}; its trials would mix two searches: pass another --results")


def search_study(spec: StudySpec, results: str | None = None, address: str | None = None, *,
                 trials: int | None = None, mode: str | None = None, progress_stream=None,
                 num_cpus: int | None = None, executor: str = DEFAULT_EXECUTOR, dry_run: bool = False,
                 checkpoint_every_s: float = 600.0, repair: bool = False) -> SearchSummary:
    """Run (or resume) the spec's ``search:`` block until its Optuna study has ``trials`` complete
    trials; ``executor``, ``dry_run`` (its plan in the summary's ``plan_lines``), ``checkpoint_every_s``,
    ``repair``, ``progress_stream`` (None: no bar) and what is logged as ``run_study``'s."""
    search = spec.search
    if search is None:
        raise InputError(f"{spec.source}: search: the study has no search block")
    if trials is not None:
        checked_int(trials, "--trials", low=1, high=MAX_TRIALS)  # as search.trials
    total = trials or search.trials
    mode = mode or ("packed" if search.sampler == "nsga2" else "per-config")
    if mode not in ("packed", "per-config"):
        raise InputError(f"--mode: must be packed or per-config, got {mode!r}")
    t0 = time.monotonic()
    prep = prepare(spec, results, make_executor(executor, address, num_cpus), "search", [search.method],
                   progress_stream, checkpoint_every_s, method_field="search.method")
    journal = journal_path(prep.store)
    if dry_run:  # the capacity as planned: a cluster is not connected to, nothing started
        return _dry_run(prep, prep.executor.capacity(spec), journal, total, mode, t0, repair)
    sync = prep.tracking()
    # a cluster is connected to first, so that its refusals write nothing and it answers the
    # capacity (as in run_study)
    remote = prep.executor.remote
    with (prep.executor.session(spec, lambda line: None) if remote else contextlib.nullcontext()), prep.lock(), sync:
        return _search_unlocked(prep, prep.executor.capacity(spec), journal, total, mode, repair, t0,
                                connected=remote)


def _dry_run(prep: Prepared, capacity: Capacity, journal: str, total: int, mode: str, t0: float,
             repair: bool = False) -> SearchSummary:
    """What the search would do, without training, writing or starting Ray, after the refusals
    the search makes before it trains (the stored rows', the journal's settings)."""
    spec, search = prep.spec, prep.spec.search
    stored, _ = prep.stored_rows(repair)
    study = read_journal_study(journal, study_name(spec))
    if study is not None:
        check_search_settings(study, search, journal, record=False)
    done = complete_trials(study) if study is not None else 0
    remaining = max(0, total - done)
    slots = capacity.slots
    per = search.population if mode == "packed" else 1
    prep = prep.with_stored_choices(stored, capacity)
    lines = settings_lines(spec, prep.precision, [search.method], prep.sampler)
    lines.append(f"fairdp search {spec.name} --dry-run: {remaining} of {total} trials to run ({done} complete in "
                 f"{journal}), {search.sampler} ({mode}): {math.ceil(remaining / per) if remaining else 0} generations "
                 f"of up to {per} configs, {min(slots, per)} pack(s) at a time {prep.executor.describe(spec)}; seed "
                 f"{search.seed}; configs already stored are answered from their rows. Nothing was run or written.")
    return SearchSummary(prep.results, journal, 0, total, pd.DataFrame(), time.monotonic() - t0, mode,
                         pd.DataFrame(), seed=search.seed, dry_run=True, plan_lines=tuple(lines))


def _search_unlocked(prep: Prepared, capacity: Capacity, journal: str, total: int, mode: str, repair: bool,
                     t0: float, connected: bool = False) -> SearchSummary:
    spec, search, store = prep.spec, prep.spec.search, prep.store
    stored_df, _ = prep.read_stored(repair)
    store.fs.create_dir(store.root, recursive=True)
    name = study_name(spec)
    # settings are checked before anything is written: a refused resume leaves every file as it was
    study, storage = open_study(search, name, journal,
                                check=lambda found: check_search_settings(found, search, journal))
    check_search_settings(study, search, journal)  # a new study: records its settings
    store_selection(prep, repair, searched=True)  # the report draws the front on these objectives
    done = complete_trials(study)
    remaining = max(0, total - done)
    ok = stored_df[(stored_df["status"] == "ok") & (stored_df["method"] == search.method)
                   & (stored_df["seed"] == search.seed)] if len(stored_df) else stored_df
    stored = {r["config_id"]: r for r in ok.to_dict("records")}
    prep = prep.with_stored_choices(stored_df, capacity)
    for line in settings_lines(spec, prep.precision, [search.method], prep.sampler):
        logger.info(line)
    if done:
        prep.say(f"{done} complete trials already in {journal}")
    epochs = prep.ctx.training(search.method)[0].epochs
    progress = Progress(f"search {spec.name}", None, remaining, epochs=epochs, slots=capacity.slots,
                        pending={search.method: remaining * epochs}, stream=prep.stream)
    planner = GenerationPlanner(study, search, total, stored, on_failed=functools.partial(progress.add_work, search.method))
    interrupted = False
    if remaining:
        with contextlib.nullcontext() if connected else prep.executor.session(spec, lambda line: None):
            interrupted = prep.executor.run_search(prep.ctx, spec, capacity, planner, mode, progress, name, storage)
    if planner.exhausted:
        prep.say(f"every config the sampler proposed is already stored; the search space is exhausted at "
                 f"{planner.complete()} complete trials")
    rows = _search_rows(store, spec.search)  # read once for both side tables
    front = write_front(store, spec, rows)
    history = write_hypervolume_history(store, spec, study, rows)
    if interrupted:
        raise KeyboardInterrupt
    if planner.stalled():
        objectives = ", ".join(search.objectives)
        raise InputError(f"search.objectives: the last {planner.failed_in_a_row} trials reported no finite {objectives} "
                         f"(a gap is NaN when fewer than two groups hold evaluate.min_group_count rows: see the "
                         f"report's groups too small to estimate); stopped at {complete_trials(study)} of {total} "
                         f"complete trials, their rows stored in {prep.results}")
    complete = complete_trials(study)
    if complete < total and not planner.exhausted:
        # per-config on Ray: its trials ran, some without a finite objective; a rerun asks for the rest
        prep.say(f"{total - complete} of the {total} trials did not complete (no finite "
                 f"{', '.join(search.objectives)}); the same command asks for them again")
    return SearchSummary(prep.results, journal, complete - done, total, front, time.monotonic() - t0,
                         mode, history, seed=search.seed, answered=progress.answered_configs, rows=len(rows),
                         excluded=excluded_by_constraint(rows, search))


def excluded_by_constraint(rows: pd.DataFrame, search: SearchSpec) -> dict[str, int]:
    """Per constraint, how many of the search's rows violate it (a row may violate several)."""
    return {str(c): int((~feasible(rows, (c,))).sum()) for c in search.constraints} if len(rows) else \
        {str(c): 0 for c in search.constraints}


def _search_rows(store: ResultStore, search: SearchSpec) -> pd.DataFrame:
    """The ok rows of the search's method and seed, one per config."""
    df, _ = store.read()
    if not len(df):
        return df
    rows = df[(df["status"] == "ok") & (df["method"] == search.method) & (df["seed"] == search.seed)]
    return rows.drop_duplicates("config_id", keep="last")


def write_front(store: ResultStore, spec: StudySpec, rows: pd.DataFrame) -> pd.DataFrame:
    """The non-dominated feasible rows of the search's method and seed over its objectives,
    stored as Parquet with a ``feasible`` column (true on every row: an infeasible row is never
    on the front, as in Optuna's ``best_trials`` for a constrained study); ``rows`` are
    ``_search_rows``."""

    search = spec.search
    if len(rows):
        rows = rows[feasible(rows, search.constraints)]
    front = pareto_front(rows, search.objectives) if len(rows) else rows
    cols = ["method", "seed", "config_id", *search.space, *search.fixed, *search.objectives,
            *(c.metric for c in search.constraints)]
    cols = list(dict.fromkeys(c for c in cols if c in front.columns))
    front = front[cols].sort_values(list(search.objectives)[0]).reset_index(drop=True)
    front["feasible"] = True
    store.write_side_table(front, f"pareto-{search.method}-seed{search.seed}.parquet")
    return front


def hypervolume_history_of(rows: pd.DataFrame, config_ids: list[str], spec: StudySpec) -> pd.DataFrame:
    """The search's hypervolume history from its complete trials' config ids, in the order
    they finished, and its stored rows; with the columns that say what it measured (study,
    dataset, method, seed, epochs, objectives and constraints as JSON)."""
    search = spec.search
    by_id = rows.set_index("config_id") if len(rows) else pd.DataFrame(columns=list(search.objectives))
    known = [c for c in config_ids if c in by_id.index]  # a trial told from a row since removed has none
    trials = by_id.loc[known, [c for c in by_id.columns if c in (*search.objectives,
                                                                  *(c.metric for c in search.constraints))]]
    trials = trials.assign(feasible=feasible(trials, search.constraints).to_numpy()).reset_index(drop=True)
    history = hypervolume_history(trials, search.objectives, every=search.population)
    head = {"study": spec.name, "dataset": spec.dataset, "method": search.method, "seed": search.seed,
            "epochs": int(rows["epochs"].iloc[0]) if len(rows) and "epochs" in rows else None,
            "objectives": json.dumps(search.objectives), "constraints": json.dumps([str(c) for c in search.constraints])}
    return pd.DataFrame({k: [v] * len(history) for k, v in head.items()}).join(history)


def write_hypervolume_history(store: ResultStore, spec: StudySpec, study, rows: pd.DataFrame) -> pd.DataFrame:
    """``hypervolume_history_of`` the search (``rows``: ``_search_rows``), written to
    ``<results>.hypervolume-<method>-seed<s>.parquet``."""
    history = hypervolume_history_of(rows, completed_config_ids(study), spec)
    store.write_side_table(history, f"hypervolume-{spec.search.method}-seed{spec.search.seed}.parquet")
    return history

