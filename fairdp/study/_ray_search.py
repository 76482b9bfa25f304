"""A search's trials on Ray Tune: packed generations (``GenerationSearcher``) or one config per
trial (Ray's ``OptunaSearch``). Imported only when a search runs on Ray."""

from __future__ import annotations

import math

import pyarrow.parquet as pq
from ray import tune

from fairdp.errors import InputError, RunAborted, StoreFault
from fairdp.methods import get_method
from fairdp.study._generation_searcher import GenerationSearcher
from fairdp.study._generations import GenerationPlanner
from fairdp.study._optuna import distributions, sampler, search_config, set_constraints
from fairdp.study._plan import Pack
from fairdp.study._progress import Progress
from fairdp.study._signals import sigterm_as_ctrl_c
from fairdp.study._spec import SearchSpec, StudySpec
from fairdp.study._store import pack_id
from fairdp.study._trial import StudyContext, run_pack
from fairdp.study._tune import (
    STORE_FAULT,
    aborted_by_ray,
    lenient_metric_check,
    pack_trainable,
    trial_resources,
    tune_run_config,
    units_reporter,
    worker_slots,
)


def config_trainable(config: dict, ctx: StudyContext, search: SearchSpec) -> None:
    """Ray Tune's trainable of a per-config search: one config trained, or answered from its
    stored row when it is a repeat."""
    method = get_method(search.method)
    cfg = method.validate_config(search_config(search, config))
    cid = method.config_id(cfg)
    rows = _stored_single(ctx, search, cid)
    if rows is None:
        try:
            rows = run_pack(ctx, Pack(search.method, search.seed, (cfg,), (cid,)), units_reporter())
        except StoreFault as e:  # reported, not raised: the driver stops the search with this one line
            tune.report({STORE_FAULT: str(e)})
            return
    values = {k: rows[0].get(k) for k in search.objectives}
    # the constrained metrics travel in the result to the searcher, which hands them to Optuna
    constrained = {f"constraint_{c.metric}": _finite_or_none(rows[0].get(c.metric)) for c in search.constraints}
    tune.report({"configs": 1, **{k: (v if v is not None and math.isfinite(v) else math.nan)
                                  for k, v in values.items()}, **constrained})


def _stored_single(ctx: StudyContext, search: SearchSpec, cid: str) -> list[dict] | None:
    """The stored ok rows of a one-config pack of ``cid`` (a per-config search's repeat), or None."""
    store = ctx.store()
    path = store.pack_path(ctx.dataset, search.method, search.seed, pack_id(search.method, search.seed, [cid]))
    try:
        rows = pq.read_table(path, filesystem=store.fs).to_pylist()
    except (OSError, Exception):  # noqa: BLE001 - not stored (or unreadable): train it
        return None
    return rows if rows and all(r.get("status") == "ok" for r in rows) else None


def run_search_on_ray(ctx, spec: StudySpec, name: str, storage, planner: GenerationPlanner, mode: str,
                      progress: Progress) -> None:
    """The search's trials through Ray Tune (a Ray session must be up)."""
    search = spec.search
    slots = worker_slots(spec)
    remaining = planner.total - planner.complete()
    if mode == "packed":
        searcher = GenerationSearcher(planner, slots, on_answered=progress.answered)
        trainable = tune.with_parameters(pack_trainable, ctx=ctx)
        n_samples = -1  # until the searcher says FINISHED
    else:
        planner.retry_orphans()  # Ray's OptunaSearch asks for itself: a killed run's trials are asked again
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
    from ray.tune.search.optuna import (
        OptunaSearch,  # imports optuna integration: only for per-config searches
    )

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


def _finite_or_none(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) else None
