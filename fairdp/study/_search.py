"""Multi-objective search: Optuna samplers (NSGA-II, TPE) driving Ray Tune trials.

Two execution paths, both through Ray Tune and one Optuna study in a JournalStorage file
(``<results>/_optuna.journal``; SQLite is not safe for parallel writers, and
optuna-dashboard opens journal files):

* ``packed`` (the default for NSGA-II): whole NSGA-II generations trained as packs
  (``GenerationSearcher``).
* ``per-config``: Ray Tune's ``OptunaSearch`` with metric and mode lists, one config per
  trial. TPE conditions every suggestion on all finished trials, so batching would change
  it; TPE uses this path by default.

Rows go to the same Parquet store as ``fairdp run``; the Pareto front of the objectives over
the search's rows is written beside the results, to ``<results>.pareto-<method>.parquet``.

With ``search.constraints`` each trial gets its row's violations before it is told
(``Trial.set_constraint``, which both samplers read). Infeasible trials train and store
their rows like any other; the front holds feasible rows only (as ``Study.best_trials``).
The normalised hypervolume of the feasible front after every ``population`` trials (one
NSGA-II generation) goes to ``<results>.hypervolume-<method>.parquet``, recomputed from the
journal's trial order and the stored rows after every (resumed) search.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from dataclasses import dataclass

import pandas as pd

from fairdp.errors import InputError
from fairdp.methods import get_method
from fairdp.study._lock import results_lock
from fairdp.study._optuna import (
    complete_trials,
    completed_config_ids,
    distributions,
    journal_path,
    open_study,
    sampler,
    search_config,
    set_constraints,
)
from fairdp.study._plan import Pack
from fairdp.study._progress import Progress
from fairdp.study._ray import ray_session
from fairdp.study._runner import default_results, settings_lines
from fairdp.study._signals import sigterm_as_ctrl_c
from fairdp.study._spec import SearchSpec, StudySpec
from fairdp.study._store import ResultStore
from fairdp.study._trial import StudyContext, load_study_data, run_pack
from fairdp.study._tune import (
    aborted_by_ray,
    lenient_metric_check,
    pack_trainable,
    trial_resources,
    tune_run_config,
    units_reporter,
    worker_slots,
)


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


def config_trainable(config: dict, ctx: StudyContext, search: SearchSpec) -> None:
    from ray import tune

    method = get_method(search.method)
    cfg = method.validate_config(search_config(search, config))
    rows = run_pack(ctx, Pack(search.method, search.seed, (cfg,), (method.config_id(cfg),)), units_reporter())
    values = {k: rows[0].get(k) for k in search.objectives}
    # the constrained metrics travel in the result to the searcher, which hands them to Optuna
    constrained = {f"constraint_{c.metric}": _finite_or_none(rows[0].get(c.metric)) for c in search.constraints}
    tune.report({"configs": 1, **{k: (v if v is not None and math.isfinite(v) else math.nan)
                                  for k, v in values.items()}, **constrained})


def search_study(spec: StudySpec, results: str | None = None, address: str | None = None, *,
                 trials: int | None = None, mode: str | None = None, progress_stream=None,
                 num_cpus: int | None = None) -> SearchSummary:
    """Run (or resume) the spec's ``search:`` block until the study has ``trials`` trials."""
    search = spec.search
    if search is None:
        raise InputError(f"{spec.source}: search: the study has no search block")
    if trials is not None and trials < 1:
        raise InputError(f"--trials: must be >= 1, got {trials}")
    total = trials or search.trials
    mode = mode or ("packed" if search.sampler == "nsga2" else "per-config")
    if mode not in ("packed", "per-config"):
        raise InputError(f"--mode: must be packed or per-config, got {mode!r}")
    t0 = time.monotonic()
    # absolute: Ray Tune runs each trial in its own working directory
    results = ResultStore(results or default_results(spec)).location
    ctx = StudyContext.from_spec(spec, results)
    store = ctx.store()
    get_method(search.method).check_dataset(load_study_data(ctx), "search.method")
    store.check_writable()
    lock = results_lock(store.root, "search", progress_stream) if store.is_local else contextlib.nullcontext()
    with lock:
        return _search_unlocked(spec, ctx, store, results, address, total, mode, progress_stream, num_cpus, t0)


def _search_unlocked(spec, ctx, store, results, address, total, mode, progress_stream, num_cpus, t0) -> SearchSummary:
    search = spec.search
    journal = journal_path(store)
    stored_df, _ = store.read()
    store.fs.create_dir(store.root, recursive=True)
    study_name = f"{spec.name}-{search.method}"
    study, storage = open_study(search, study_name, journal, progress_stream)
    done = complete_trials(study)
    remaining = max(0, total - done)
    ok = stored_df[(stored_df["status"] == "ok") & (stored_df["method"] == search.method)
                   & (stored_df["seed"] == search.seed)] if len(stored_df) else stored_df
    stored = {r["config_id"]: r for r in ok.to_dict("records")}
    stream = progress_stream or sys.stderr
    for line in settings_lines(spec, [search.method]):
        print(line, file=stream, flush=True)
    if done:
        print(f"fairdp search {spec.name}: {done} complete trials already in {journal}", file=stream, flush=True)
    if remaining:
        with ray_session(address, num_cpus=num_cpus):
            _run_search(ctx, spec, study, study_name, storage, stored, remaining, mode, stream)
    rows = _search_rows(store, spec.search)  # read once for both side tables
    front = write_front(store, spec, rows)
    history = write_hypervolume_history(store, spec, study, rows)
    return SearchSummary(results, journal, remaining, total, front, time.monotonic() - t0, mode, history)


def _run_search(ctx, spec: StudySpec, study, study_name: str, storage, stored: dict, remaining: int, mode: str,
                stream) -> None:
    """``remaining`` trials of the search through Ray Tune (a Ray session must be up)."""
    from ray import tune

    search = spec.search
    slots = worker_slots(spec)
    if mode == "packed":
        from fairdp.study._generation_searcher import GenerationSearcher

        searcher = GenerationSearcher(study, search, remaining, slots, stored)
        trainable = tune.with_parameters(pack_trainable, ctx=ctx)
        n_samples = -1  # until the searcher says FINISHED
        packs = math.ceil(remaining / search.population) * min(slots, search.population)
    else:
        searcher = _config_id_optuna_search(search)(
            space=distributions(search), metric=list(search.objectives), mode=list(search.objectives.values()),
            sampler=sampler(search), study_name=study_name, storage=storage)
        trainable = tune.with_parameters(config_trainable, ctx=ctx, search=search)
        n_samples = packs = remaining
    epochs = ctx.training(search.method)[0].epochs
    progress = Progress(f"search {spec.name}", packs, remaining, epochs=epochs, slots=slots,
                        pending={search.method: remaining * epochs}, stream=stream)
    with progress, lenient_metric_check(), sigterm_as_ctrl_c(), \
            tune_run_config(study_name, spec, progress, search.method) as run_config, aborted_by_ray(ctx.results):
        tune.Tuner(tune.with_resources(trainable, trial_resources(spec)),
                   tune_config=tune.TuneConfig(search_alg=searcher, num_samples=n_samples,
                                               max_concurrent_trials=slots, reuse_actors=True,
                                               trial_dirname_creator=lambda t: t.trial_id),
                   run_config=run_config).fit()


def _config_id_optuna_search(search: SearchSpec):
    """Ray's ``OptunaSearch`` that tags each Optuna trial with the ``config_id`` of the row it
    trains (optuna-dashboard shows it), as the packed searcher does: Ray owns the trial
    objects, so the tag goes on just before Ray tells Optuna the trial's result."""
    from ray.tune.search.optuna import OptunaSearch

    method = get_method(search.method)

    class ConfigIdOptunaSearch(OptunaSearch):
        def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
            ot_trial = self._ot_trials.get(trial_id)  # Ray's private map of its Optuna trials
            if ot_trial is not None and trial_id not in self._completed_trials:
                try:
                    cfg = method.validate_config(search_config(search, ot_trial.params))
                    ot_trial.set_user_attr("config_id", method.config_id(cfg))
                except InputError:
                    pass  # a config the method refuses fails its trial; it has no row to name
                if result and not error:
                    set_constraints(ot_trial, {c.metric: result.get(f"constraint_{c.metric}")
                                               for c in search.constraints}, search)
            super().on_trial_complete(trial_id, result, error)

    return ConfigIdOptunaSearch


def _finite_or_none(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) else None


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
    from fairdp.analysis import pareto_front
    from fairdp.constraints import feasible

    search = spec.search
    if len(rows):
        rows = rows[feasible(rows, search.constraints)]
    front = pareto_front(rows, search.objectives) if len(rows) else rows
    cols = ["method", "seed", "config_id", *search.space, *search.fixed, *search.objectives,
            *(c.metric for c in search.constraints)]
    cols = list(dict.fromkeys(c for c in cols if c in front.columns))
    front = front[cols].sort_values(list(search.objectives)[0]).reset_index(drop=True)
    front["feasible"] = True
    store.write_side_table(front, f"pareto-{search.method}.parquet")
    return front


def hypervolume_history_of(rows: pd.DataFrame, config_ids: list[str], spec: StudySpec) -> pd.DataFrame:
    """The search's hypervolume history from its complete trials' config ids, in the order
    they finished, and its stored rows; with the columns that say what it measured (study,
    dataset, method, seed, epochs, objectives and constraints as JSON)."""
    import json

    from fairdp.analysis._search_progress import hypervolume_history
    from fairdp.constraints import feasible

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
    ``<results>.hypervolume-<method>.parquet``."""
    history = hypervolume_history_of(rows, completed_config_ids(study), spec)
    store.write_side_table(history, f"hypervolume-{spec.search.method}.parquet")
    return history


def read_hypervolume_histories(*locations: str) -> pd.DataFrame | None:
    """Every ``<results>.hypervolume-<method>.parquet`` beside the given results locations,
    stacked; None when there is none."""
    import glob

    frames = []
    for loc in locations:
        store = ResultStore(loc)
        if store.is_local:
            frames += [pd.read_parquet(p) for p in sorted(glob.glob(f"{glob.escape(store.root)}.hypervolume-*.parquet"))]
    return pd.concat(frames, ignore_index=True) if frames else None
