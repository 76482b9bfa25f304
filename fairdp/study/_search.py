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
import json
import math
import os
import socket
import sys
import time
from dataclasses import dataclass

import pandas as pd

from fairdp.errors import DiskFull, InputError, RunAborted, last_line
from fairdp.methods import get_method
from fairdp.study._generations import GenerationPlanner
from fairdp.study._local import EXECUTORS
from fairdp.study._lock import results_lock
from fairdp.study._optuna import (
    complete_trials,
    completed_config_ids,
    distributions,
    journal_path,
    open_study,
    read_complete_trials,
    sampler,
    search_config,
    set_constraints,
)
from fairdp.study._plan import Pack, check_compatible, pack_id
from fairdp.study._progress import Progress
from fairdp.study._ray import address_source, check_reachable, ray_session, resolve_address
from fairdp.study._runner import default_results, said_if_slow, settings_lines
from fairdp.study._signals import sigterm_as_ctrl_c
from fairdp.study._spec import SearchSpec, StudySpec
from fairdp.study._store import ResultStore, corrupt_error
from fairdp.study._trial import (
    StudyContext,
    check_same_training,
    error_rows,
    load_study_data,
    protocol_difference,
    protocol_json,
    run_pack,
    store_pack,
)
from fairdp.study._tune import (
    DISK_FULL,
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
    seed: int = 0
    answered: int = 0  # trials answered from stored rows instead of trained
    rows: int = 0  # the search's rows (method, seed): what the front was chosen from
    excluded: dict = dataclasses.field(default_factory=dict)  # constraint -> rows it makes infeasible
    dry_run: bool = False


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


def check_search_settings(study, search: SearchSpec, journal: str) -> None:
    """Refuse to resume a search whose settings changed (its trials would mix two searches);
    record them in a new study."""
    want = search_settings(search)
    have = study.user_attrs.get(SETTINGS_ATTR)
    if have is None:
        study.set_user_attr(SETTINGS_ATTR, want)
        return
    found = protocol_difference(have, want)
    if found:
        key, old, new = found
        raise InputError(f"{journal}: the search was started with search.{key} {json.dumps(old)}, this run asks for "
                         f"{json.dumps(new)}; its trials would mix two searches: pass another --results")


def config_trainable(config: dict, ctx: StudyContext, search: SearchSpec) -> None:
    """Ray Tune's trainable of a per-config search: one config trained, or answered from its
    stored row when it is a repeat."""
    from ray import tune

    method = get_method(search.method)
    cfg = method.validate_config(search_config(search, config))
    cid = method.config_id(cfg)
    rows = _stored_single(ctx, search, cid)
    if rows is None:
        try:
            rows = run_pack(ctx, Pack(search.method, search.seed, (cfg,), (cid,)), units_reporter())
        except DiskFull as e:  # reported, not raised: the driver stops the search with this one line
            tune.report({DISK_FULL: str(e)})
            return
    values = {k: rows[0].get(k) for k in search.objectives}
    # the constrained metrics travel in the result to the searcher, which hands them to Optuna
    constrained = {f"constraint_{c.metric}": _finite_or_none(rows[0].get(c.metric)) for c in search.constraints}
    tune.report({"configs": 1, **{k: (v if v is not None and math.isfinite(v) else math.nan)
                                  for k, v in values.items()}, **constrained})


def _stored_single(ctx: StudyContext, search: SearchSpec, cid: str) -> list[dict] | None:
    """The stored ok rows of a one-config pack of ``cid`` (a per-config search's repeat), or None."""
    import pyarrow.parquet as pq

    store = ctx.store()
    path = store.pack_path(ctx.dataset, search.method, search.seed, pack_id(search.method, search.seed, [cid]))
    try:
        rows = pq.read_table(path, filesystem=store.fs).to_pylist()
    except (OSError, Exception):  # noqa: BLE001 - not stored (or unreadable): train it
        return None
    return rows if rows and all(r.get("status") == "ok" for r in rows) else None


def search_study(spec: StudySpec, results: str | None = None, address: str | None = None, *,
                 trials: int | None = None, mode: str | None = None, progress_stream=None,
                 num_cpus: int | None = None, executor: str = "ray", dry_run: bool = False,
                 checkpoint_every_s: float = 600.0, repair: bool = False) -> SearchSummary:
    """Run (or resume) the spec's ``search:`` block until its Optuna study has ``trials`` complete
    trials; ``executor``, ``dry_run``, ``checkpoint_every_s`` and ``repair`` as ``run_study``'s."""
    search = spec.search
    if search is None:
        raise InputError(f"{spec.source}: search: the study has no search block")
    if trials is not None and trials < 1:
        raise InputError(f"--trials: must be >= 1, got {trials}")
    if executor not in EXECUTORS:
        raise InputError(f"--executor: must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if executor == "local" and address is not None:
        raise InputError("--address: a cluster address needs --executor ray; the local executor runs in this process")
    if not checkpoint_every_s >= 0:
        raise InputError(f"--checkpoint-every: must be >= 0 seconds (0: no checkpoints), got {checkpoint_every_s}")
    total = trials or search.trials
    mode = mode or ("packed" if search.sampler == "nsga2" else "per-config")
    if mode not in ("packed", "per-config"):
        raise InputError(f"--mode: must be packed or per-config, got {mode!r}")
    if executor == "ray" and resolve_address(address) is not None:  # before anything is written
        check_reachable(resolve_address(address), address_source(address))
    t0 = time.monotonic()
    # absolute: Ray Tune runs each trial in its own working directory
    results = ResultStore(results or default_results(spec)).location
    ctx = dataclasses.replace(StudyContext.from_spec(spec, results), checkpoint_every_s=float(checkpoint_every_s),
                              driver=(socket.gethostname(), os.getpid()) if executor == "ray" else None)
    store = ctx.store()
    store.probe()
    stream = progress_stream or sys.stderr
    with said_if_slow(f"fairdp search {spec.name}: loading dataset {spec.dataset}", stream):
        data = load_study_data(ctx)
    ctx = dataclasses.replace(ctx, protocol=protocol_json(spec, data))  # with the data's fingerprint
    get_method(search.method).check_dataset(data, "search.method")
    store.check_writable()
    journal = journal_path(store)
    if dry_run:
        return _dry_run(spec, store, journal, total, mode, executor, num_cpus, stream, t0)
    lock = results_lock(store.root, "search", progress_stream) if store.is_local else contextlib.nullcontext()
    with lock:
        return _search_unlocked(spec, ctx, store, journal, results, address, total, mode, executor, stream,
                                num_cpus, repair, t0)


def _dry_run(spec, store, journal, total, mode, executor, num_cpus, stream, t0) -> SearchSummary:
    """What the search would do, without training, writing or starting Ray."""
    search = spec.search
    done = read_complete_trials(journal, study_name(spec))
    remaining = max(0, total - done)
    if executor == "local":
        slots, where = 1, "in this process (--executor local)"
    else:
        from fairdp.study._tune import machine_resources, slots_for

        have = machine_resources(num_cpus)
        slots, where = slots_for(spec, have["CPU"], have["GPU"]), "on embedded Ray"
    per = search.population if mode == "packed" else 1
    for line in settings_lines(spec, [search.method]):
        print(line, file=stream, flush=True)
    print(f"fairdp search {spec.name} --dry-run: {remaining} of {total} trials to run ({done} complete in {journal}), "
          f"{search.sampler} ({mode}): {math.ceil(remaining / per) if remaining else 0} generations of up to {per} "
          f"configs, {min(slots, per)} pack(s) at a time {where}; seed {search.seed}; configs already stored are "
          f"answered from their rows. Nothing was run or written.", file=stream, flush=True)
    return SearchSummary(store.location, journal, 0, total, pd.DataFrame(), time.monotonic() - t0, mode,
                         pd.DataFrame(), seed=search.seed, dry_run=True)


def _search_unlocked(spec, ctx, store, journal, results, address, total, mode, executor, stream, num_cpus, repair,
                     t0) -> SearchSummary:
    search = spec.search
    stored_df, corrupt = store.read(on_corrupt="collect")
    if corrupt:
        if not repair:
            raise corrupt_error(corrupt)
        for c in corrupt:
            print(f"fairdp search: moved aside {c.path} ({c.reason}) to {store.move_aside(c.path)}", file=stream)
        stored_df, _ = store.read()
    check_compatible(spec, stored_df, results)
    check_same_training(ctx, stored_df, results, [search.method])
    store.remove_temporaries()
    store.fs.create_dir(store.root, recursive=True)
    name = study_name(spec)
    study, storage = open_study(search, name, journal, stream)
    check_search_settings(study, search, journal)
    done = complete_trials(study)
    remaining = max(0, total - done)
    ok = stored_df[(stored_df["status"] == "ok") & (stored_df["method"] == search.method)
                   & (stored_df["seed"] == search.seed)] if len(stored_df) else stored_df
    stored = {r["config_id"]: r for r in ok.to_dict("records")}
    for line in settings_lines(spec, [search.method]):
        print(line, file=stream, flush=True)
    if done:
        print(f"fairdp search {spec.name}: {done} complete trials already in {journal}", file=stream, flush=True)
    planner = GenerationPlanner(study, search, total, stored)
    epochs = ctx.training(search.method)[0].epochs
    progress = Progress(f"search {spec.name}", None, remaining, epochs=epochs, slots=1,
                        pending={search.method: remaining * epochs}, stream=stream)
    interrupted = False
    if remaining:
        if executor == "ray":
            with ray_session(address, num_cpus=num_cpus):
                progress.model.slots = worker_slots(spec)
                _run_search_on_ray(ctx, spec, study, name, storage, planner, mode, progress)
        else:
            interrupted = _run_search_locally(ctx, spec, planner, mode, progress)
    if planner.exhausted:
        print(f"fairdp search {spec.name}: every config the sampler proposed is already stored; the search space "
              f"is exhausted at {planner.complete()} complete trials", file=stream, flush=True)
    rows = _search_rows(store, spec.search)  # read once for both side tables
    front = write_front(store, spec, rows)
    history = write_hypervolume_history(store, spec, study, rows)
    if interrupted:
        raise KeyboardInterrupt
    return SearchSummary(results, journal, complete_trials(study) - done, total, front, time.monotonic() - t0, mode,
                         history, seed=search.seed, answered=progress.answered_configs, rows=len(rows),
                         excluded=excluded_by_constraint(rows, search))


def _run_search_locally(ctx, spec: StudySpec, planner: GenerationPlanner, mode: str, progress: Progress) -> bool:
    """The search's generations trained in this process, one pack per generation; True if a
    Ctrl-C stopped it (the trials it left running are asked again on resume)."""
    search = spec.search
    size = search.population if mode == "packed" else 1
    n = 0
    with progress, sigterm_as_ctrl_c():
        try:
            while True:
                gen = planner.next_generation(size)
                if gen.answered or gen.shared:
                    progress.answered(gen.answered + gen.shared)
                if not gen.groups:
                    return False
                key, n = f"generation-{n}", n + 1
                pack = Pack(search.method, search.seed, tuple(gen.configs), tuple(gen.config_ids))
                progress.start_pack(key, search.method, len(pack.configs))
                for attempt in range(spec.resources.max_failures + 1):
                    try:
                        rows = run_pack(ctx, pack, lambda epoch, key=key: progress.advance(key, epoch.configs))
                    except (KeyboardInterrupt, DiskFull):
                        raise
                    except Exception as exc:  # noqa: BLE001 - a failing pack becomes error rows, as in a run
                        if attempt < spec.resources.max_failures:
                            progress.retry_pack(key)
                            continue
                        store_pack(ctx, pack, error_rows(ctx, pack, f"{type(exc).__name__}: "
                                                                    f"{last_line(str(exc), type(exc).__name__)}"))
                        rows = None
                        progress.fail_pack(key)
                    else:
                        progress.finish_pack(key)
                    break
                for i, group in enumerate(gen.groups):
                    planner.tell_group(group, rows[i] if rows else None)
        except KeyboardInterrupt:
            return True


def _run_search_on_ray(ctx, spec: StudySpec, study, name: str, storage, planner: GenerationPlanner, mode: str,
                       progress: Progress) -> None:
    """The search's trials through Ray Tune (a Ray session must be up)."""
    from ray import tune

    search = spec.search
    slots = worker_slots(spec)
    remaining = planner.total - planner.complete()
    if mode == "packed":
        from fairdp.study._generation_searcher import GenerationSearcher

        searcher = GenerationSearcher(planner, slots, on_answered=progress.answered)
        trainable = tune.with_parameters(pack_trainable, ctx=ctx)
        n_samples = -1  # until the searcher says FINISHED
    else:
        searcher = _config_id_optuna_search(search)(
            space=distributions(search), metric=list(search.objectives), mode=list(search.objectives.values()),
            sampler=sampler(search), study_name=name, storage=storage)
        trainable = tune.with_parameters(config_trainable, ctx=ctx, search=search)
        n_samples = remaining
    with progress, lenient_metric_check(), sigterm_as_ctrl_c(), \
            tune_run_config(name, spec, progress, search.method) as run_config, aborted_by_ray(ctx.results):
        tune.Tuner(tune.with_resources(trainable, trial_resources(spec)),
                   tune_config=tune.TuneConfig(search_alg=searcher, num_samples=n_samples,
                                               max_concurrent_trials=slots, reuse_actors=True,
                                               trial_dirname_creator=lambda t: t.trial_id),
                   run_config=run_config).fit()
        if run_config.stop.message is not None:
            raise RunAborted(run_config.stop.message)


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

        def save(self, checkpoint_path: str) -> None:
            pass  # the search's state is its Optuna journal, which it resumes from

        def restore(self, checkpoint_path: str) -> None:
            pass

    return ConfigIdOptunaSearch


def excluded_by_constraint(rows: pd.DataFrame, search: SearchSpec) -> dict[str, int]:
    """Per constraint, how many of the search's rows violate it (a row may violate several)."""
    from fairdp.constraints import feasible

    return {str(c): int((~feasible(rows, (c,))).sum()) for c in search.constraints} if len(rows) else \
        {str(c): 0 for c in search.constraints}


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
    store.write_side_table(front, f"pareto-{search.method}-seed{search.seed}.parquet")
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
    ``<results>.hypervolume-<method>-seed<s>.parquet``."""
    history = hypervolume_history_of(rows, completed_config_ids(study), spec)
    store.write_side_table(history, f"hypervolume-{spec.search.method}-seed{spec.search.seed}.parquet")
    return history


def read_hypervolume_histories(*locations: str) -> pd.DataFrame | None:
    """Every ``<results>.hypervolume-<method>-seed<s>.parquet`` beside the given results locations,
    stacked; None when there is none."""
    import glob

    frames = []
    for loc in locations:
        store = ResultStore(loc)
        if store.is_local:
            frames += [pd.read_parquet(p) for p in sorted(glob.glob(f"{glob.escape(store.root)}.hypervolume-*.parquet"))]
    return pd.concat(frames, ignore_index=True) if frames else None
