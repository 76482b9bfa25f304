"""Multi-objective search: Optuna samplers (NSGA-II, TPE) driving Ray Tune trials.

Two execution paths, both through Ray Tune and one Optuna study in a JournalStorage file
(``<results>/optuna.journal``; SQLite is not safe for parallel writers, and
optuna-dashboard opens journal files):

* ``packed`` (the default for NSGA-II): a whole NSGA-II generation is asked from Optuna at
  once (ask/tell), split into one pack per free worker slot, trained as packed trials, and
  told back before the next generation is asked. NSGA-II builds a generation only from the
  completed generations before it, so this is the sampler's own behaviour; it just trains
  the generation's configs together.
* ``per-config``: Ray Tune's ``OptunaSearch`` with metric and mode lists, one config per
  trial. TPE conditions every suggestion on all finished trials, so batching would change
  it; TPE uses this path by default.

Rows go to the same Parquet store as ``fairdp run``; the Pareto front of the objectives over
the search's rows is written to ``<results>/pareto-<method>.parquet``.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

import pandas as pd

from fairdp.errors import InputError
from fairdp.methods import get_method
from fairdp.study._plan import Pack, auto_pack_size
from fairdp.study._ray import ray_session
from fairdp.study._runner import (
    Progress,
    StudyContext,
    _pack_trial,
    default_results,
    load_study_data,
    store_pack,
    train_and_evaluate,
    trial_resources,
    tune_run_config,
    worker_slots,
)
from fairdp.study._spec import SearchSpec, StudySpec
from fairdp.study._store import ResultStore


@dataclass
class SearchSummary:
    results: str
    journal: str
    trials_run: int
    trials_total: int
    front: pd.DataFrame
    wall_s: float
    mode: str


def journal_path(store: ResultStore) -> str:
    if not store.is_local:
        raise InputError(f"--results {store.location}: a search keeps its Optuna journal beside the results, "
                         f"which needs a local or shared filesystem path")
    return f"{store.root}/optuna.journal"


def _sampler(search: SearchSpec):
    import optuna

    if search.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=search.population, seed=search.seed)
    return optuna.samplers.TPESampler(seed=search.seed, multivariate=True)


def _distributions(search: SearchSpec) -> dict:
    import optuna.distributions as d

    out = {}
    for key, b in search.space.items():
        if "choices" in b:
            out[key] = d.CategoricalDistribution(b["choices"])
        elif b["int"]:
            out[key] = d.IntDistribution(int(b["low"]), int(b["high"]), log=b["log"])
        else:
            out[key] = d.FloatDistribution(b["low"], b["high"], log=b["log"])
    return out


def open_study(search: SearchSpec, study_name: str, journal: str):
    """The Optuna study in the journal (created, or loaded to resume). Trials a killed run
    left RUNNING are marked FAIL: they will never report."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(journal))
    directions = ["maximize" if v == "max" else "minimize" for v in search.objectives.values()]
    study = optuna.create_study(study_name=study_name, storage=storage, directions=directions,
                                sampler=_sampler(search), load_if_exists=True)
    if list(study.directions) != [optuna.study.StudyDirection.MAXIMIZE if x == "maximize"
                                  else optuna.study.StudyDirection.MINIMIZE for x in directions]:
        raise InputError(f"{journal}: study '{study_name}' was created with other objectives; "
                         f"pass another --results")
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(t.number, state=optuna.trial.TrialState.FAIL)
    return study, storage


def _objective_values(row: dict, objectives: dict[str, str]) -> list[float] | None:
    values = [row.get(k) for k in objectives]
    if any(v is None or not math.isfinite(v) for v in values):
        return None
    return [float(v) for v in values]


def _config(search: SearchSpec, params: dict) -> dict:
    return {**search.fixed, **params}


# -- packed generations -------------------------------------------------------------------

def _generation_searcher(study, search: SearchSpec, total: int, slots: int, stored: dict):
    """A Ray Tune Searcher that asks Optuna one generation at a time and hands it out as packs."""
    import optuna
    from ray.tune.search import Searcher

    method = get_method(search.method)
    distributions = _distributions(search)

    class GenerationSearcher(Searcher):
        def __init__(self):
            super().__init__(metric="configs", mode="max")
            self.asked = 0
            self.queue: list[list] = []  # packs of the current generation not yet handed out
            self.pending: dict[str, list] = {}  # tune trial id -> optuna trials
            self.outstanding = 0

        def _next_generation(self):
            n = min(search.population, total - self.asked)
            trials = []
            for _ in range(n):
                t = study.ask(distributions)
                cfg = method.validate_config(_config(search, t.params))
                cid = method.config_id(cfg)
                if cid in stored:  # already trained (this search or a grid run): tell, don't retrain
                    values = _objective_values(stored[cid], search.objectives)
                    study.tell(t, values, state=None if values else optuna.trial.TrialState.FAIL)
                else:
                    trials.append((t, cfg, cid))
            self.asked += n
            # one pack per slot; a config asked twice in a generation trains once
            unique = {}
            for item in trials:
                unique.setdefault(item[2], []).append(item)
            groups = list(unique.values())
            size = auto_pack_size(len(groups), 1, slots, cap=max(1, len(groups)))
            self.queue = [groups[i:i + size] for i in range(0, len(groups), size)]
            self.outstanding = len(self.queue)

        def suggest(self, trial_id):
            if not self.queue and self.outstanding == 0:
                if self.asked >= total:
                    return Searcher.FINISHED
                self._next_generation()
                if not self.queue:
                    return self.suggest(trial_id)
            if not self.queue:
                return None  # the generation is still training
            groups = self.queue.pop(0)
            self.pending[trial_id] = groups
            cfgs = tuple(g[0][1] for g in groups)
            ids = tuple(g[0][2] for g in groups)
            return {"pack": Pack(search.method, search.seed, cfgs, ids).to_dict()}

        def on_trial_complete(self, trial_id, result=None, error=False):
            groups = self.pending.pop(trial_id, [])
            rows = (result or {}).get("rows") if not error else None
            for i, group in enumerate(groups):
                values = _objective_values(rows[i], search.objectives) if rows else None
                if values:
                    stored[group[0][2]] = rows[i]
                for t, _cfg, _cid in group:
                    study.tell(t, values, state=None if values else optuna.trial.TrialState.FAIL)
            self.outstanding -= 1

    return GenerationSearcher()


# -- one config per trial -------------------------------------------------------------------

def _config_trial(config: dict, ctx: StudyContext, search: SearchSpec) -> None:
    from ray import tune

    method = get_method(search.method)
    cfg = method.validate_config(_config(search, config))
    pack = Pack(search.method, search.seed, (cfg,), (method.config_id(cfg),))
    rows = train_and_evaluate(ctx, pack)
    store_pack(ctx, pack, rows)
    values = {k: rows[0].get(k) for k in search.objectives}
    tune.report({"configs": 1, **{k: (v if v is not None and math.isfinite(v) else math.nan)
                                  for k, v in values.items()}})


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
    store = ResultStore(results or default_results(spec))
    results = store.location
    ctx = StudyContext.from_spec(spec, results)
    get_method(search.method).check_dataset(load_study_data(ctx), "search.method")
    journal = journal_path(store)
    stored_df, _ = store.read()
    store.fs.create_dir(store.root, recursive=True)
    study_name = f"{spec.name}-{search.method}"
    study, storage = open_study(search, study_name, journal)
    import optuna

    done = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)))
    remaining = max(0, total - done)
    ok = stored_df[(stored_df["status"] == "ok") & (stored_df["method"] == search.method)
                   & (stored_df["seed"] == search.seed)] if len(stored_df) else stored_df
    stored = {r["config_id"]: r for r in ok.to_dict("records")}
    stream = progress_stream or sys.stderr
    if done:
        print(f"fairdp search {spec.name}: {done} trials already in {journal}", file=stream, flush=True)
    if remaining:
        with ray_session(address, num_cpus=num_cpus):
            _run_search(ctx, spec, study, study_name, storage, stored, remaining, mode, stream)
    front = write_front(store, spec)
    return SearchSummary(results, journal, remaining, total, front, time.monotonic() - t0, mode)


def _run_search(ctx, spec: StudySpec, study, study_name: str, storage, stored: dict, remaining: int, mode: str,
                stream) -> None:
    """``remaining`` trials of the search through Ray Tune (a Ray session must be up)."""
    from ray import tune

    search = spec.search
    slots = worker_slots(spec)
    if mode == "packed":
        searcher = _generation_searcher(study, search, remaining, slots, stored)
        trainable = tune.with_parameters(_pack_trial, ctx=ctx)
        n_samples = -1  # until the searcher says FINISHED
        packs = math.ceil(remaining / search.population) * min(slots, search.population)
    else:
        from ray.tune.search.optuna import OptunaSearch

        searcher = OptunaSearch(space=_distributions(search), metric=list(search.objectives),
                                mode=list(search.objectives.values()), sampler=_sampler(search),
                                study_name=study_name, storage=storage)
        trainable = tune.with_parameters(_config_trial, ctx=ctx, search=search)
        n_samples = packs = remaining
    progress = Progress(f"search {spec.name}", packs, remaining, stream=stream)
    with tune_run_config(study_name, spec, progress) as run_config:
        tune.Tuner(tune.with_resources(trainable, trial_resources(spec)),
                   tune_config=tune.TuneConfig(search_alg=searcher, num_samples=n_samples,
                                               max_concurrent_trials=slots, reuse_actors=True,
                                               trial_dirname_creator=lambda t: t.trial_id),
                   run_config=run_config).fit()


def write_front(store: ResultStore, spec: StudySpec) -> pd.DataFrame:
    """The non-dominated rows of the search's method and seed over its objectives, stored as Parquet."""
    from fairdp.analysis import pareto_front

    search = spec.search
    df, _ = store.read()
    rows = df[(df["status"] == "ok") & (df["method"] == search.method) & (df["seed"] == search.seed)]
    front = pareto_front(rows, search.objectives) if len(rows) else rows
    cols = ["method", "seed", "config_id", *search.space, *search.fixed, *search.objectives]
    cols = list(dict.fromkeys(c for c in cols if c in front.columns))
    front = front[cols].sort_values(list(search.objectives)[0]).reset_index(drop=True)
    store.write_table(front, f"pareto-{search.method}.parquet")
    return front
