"""The Optuna side of a search: its sampler, its distributions, and the study in a journal file
(``<results>/optuna.journal``; SQLite is not safe for parallel writers, and
optuna-dashboard opens journal files)."""

from __future__ import annotations

import math

from fairdp.errors import InputError
from fairdp.study._spec import SearchSpec
from fairdp.study._store import ResultStore


def journal_path(store: ResultStore) -> str:
    if not store.is_local:
        raise InputError(f"--results {store.location}: a search keeps its Optuna journal beside the results, "
                         f"which needs a local or shared filesystem path")
    return f"{store.root}/optuna.journal"


def sampler(search: SearchSpec):
    import optuna

    if search.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=search.population, seed=search.seed)
    return optuna.samplers.TPESampler(seed=search.seed, multivariate=True)


def distributions(search: SearchSpec) -> dict:
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
                                sampler=sampler(search), load_if_exists=True)
    if list(study.directions) != [optuna.study.StudyDirection.MAXIMIZE if x == "maximize"
                                  else optuna.study.StudyDirection.MINIMIZE for x in directions]:
        raise InputError(f"{journal}: study '{study_name}' was created with other objectives; "
                         f"pass another --results")
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(t.number, state=optuna.trial.TrialState.FAIL)
    return study, storage


def objective_values(row: dict, objectives: dict[str, str]) -> list[float] | None:
    """The row's objective values in order, or None when one is missing or not finite."""
    values = [row.get(k) for k in objectives]
    if any(v is None or not math.isfinite(v) for v in values):
        return None
    return [float(v) for v in values]


def search_config(search: SearchSpec, params: dict) -> dict:
    """A method config from a trial's sampled parameters and the search's fixed ones."""
    return {**search.fixed, **params}
