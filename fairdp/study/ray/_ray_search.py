"""A search's trials on Ray Tune: packed generations (``GenerationSearcher``) or one config per
trial (Ray's ``OptunaSearch``). Imported only when a search runs on Ray."""

from __future__ import annotations

from ray import tune

from fairdp.errors import InputError, RunAborted
from fairdp.methods import get_method
from fairdp.study.ray._ray_trainables import config_trainable, pack_trainable
from fairdp.study.ray._tune import (
    aborted_by_ray,
    driver_log_level,
    lenient_metric_check,
    trial_resources,
    tune_run_config,
)
from fairdp.study.run._progress import Progress
from fairdp.study.run._signals import sigterm_as_ctrl_c
from fairdp.study.search._generation_searcher import GenerationSearcher
from fairdp.study.search._generations import GenerationPlanner
from fairdp.study.search._optuna import (
    distributions,
    failed_since_complete,
    sampler,
    search_config,
    set_constraints,
)
from fairdp.study.spec._spec import SearchSpec, StudySpec


def run_search_on_ray(ctx, spec: StudySpec, slots: int, name: str, storage, planner: GenerationPlanner, mode: str,
                      progress: Progress) -> None:
    """The search's trials through Ray Tune on ``slots`` (a Ray session must be up)."""
    search = spec.search
    remaining = planner.total - planner.complete()
    if mode == "packed":
        searcher = GenerationSearcher(planner, slots, on_answered=progress.answered)
        trainable = tune.with_parameters(pack_trainable, ctx=ctx, log_level=driver_log_level())
        n_samples = -1  # until the searcher says FINISHED
    else:
        planner.retry_orphans()  # Ray's OptunaSearch asks for itself: a killed run's trials are asked again
        searcher = _config_id_optuna_search(search)(
            space=distributions(search), metric=list(search.objectives), mode=list(search.objectives.values()),
            sampler=sampler(search), study_name=name, storage=storage)
        trainable = tune.with_parameters(config_trainable, ctx=ctx, search=search, log_level=driver_log_level())
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
    if mode != "packed":
        # Ray's OptunaSearch ran its num_samples trials: those told without a finite objective
        # did not complete; the planner counts them for the stall check and the summary
        planner.failed_in_a_row = failed_since_complete(planner.study)


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
