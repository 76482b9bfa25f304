"""The Optuna side of a search: its sampler, its distributions, and the study in a journal file
(``<results>/_optuna.journal``; SQLite is not safe for parallel writers, and
optuna-dashboard opens journal files)."""

from __future__ import annotations

import json
import logging
import math
import os
import warnings
from collections.abc import Callable

from fairdp.errors import InputError
from fairdp.study.spec._spec import SearchSpec
from fairdp.study.store._store import ResultStore

logger = logging.getLogger(__name__)

# '_'-prefixed: pandas, pyarrow, polars and duckdb readers of the results directory skip it
JOURNAL_NAME = "_optuna.journal"


def journal_path(store: ResultStore) -> str:
    if not store.is_local:
        raise InputError(f"--results {store.location}: a search keeps its Optuna journal beside the results, "
                         f"which needs a local or shared filesystem path")
    journal = f"{store.root}/{JOURNAL_NAME}"
    old = f"{store.root}/optuna.journal"  # where fairdp kept it before: pandas and pyarrow read it as rows
    if os.path.isfile(old) and not os.path.exists(journal):
        os.replace(old, journal)
        logger.warning("fairdp: moved %s to %s (Parquet readers of the results directory skip '_' names)", old,
                       journal)
    return journal


CONSTRAINTS_ATTR = "constraints"  # Optuna's system attr of a trial's constraint values, a list


def set_constraints(trial, row: dict, search: SearchSpec) -> None:
    """The violation of each of the search's constraints by ``row`` (<= 0: satisfied) on the
    Optuna trial that trained it, before it is told, as the list in the trial's system attr
    ``constraints``: what optuna-dashboard shows and what Optuna's ``trial.constraints`` reads
    (NSGA-II's constrained domination, TPE's feasible-first split and ``Study.best_trials``).
    Their names go to the user attr ``constraint_names``, in the same order."""
    if not search.constraints:
        return
    values = [float(c.violation(row.get(c.metric))) for c in search.constraints]
    trial.storage.set_trial_system_attr(trial._trial_id, CONSTRAINTS_ATTR, values)  # Optuna's key since v3
    trial.set_user_attr("constraint_names", [str(c) for c in search.constraints])


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


def check_journal(journal: str) -> None:
    """InputError, before anything reads or changes it, unless ``journal`` is absent or an
    Optuna journal: a regular file whose complete lines are JSON records and whose last,
    partial line (a run killed while writing it) is text."""
    if not os.path.lexists(journal):
        return
    if not os.path.isfile(journal):
        raise InputError(f"{journal}: not a file, so not the search's Optuna journal; move it aside or pass "
                         f"another --results")
    with open(journal, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    for number, line in enumerate(lines, 1):
        complete = number < len(lines)
        try:
            text = line.decode("utf-8")
            if complete and not isinstance(json.loads(text), dict):
                raise ValueError("not a record")
        except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise InputError(f"{journal}: line {number} is not an Optuna journal record, so fairdp cannot resume "
                             f"the search from it; move it aside or pass another --results") from None


def repair_journal(journal: str) -> int:
    """Cut a journal back to its last complete record if a kill left half a line at its end
    (a warning of the ``fairdp`` logger); returns the bytes dropped. Optuna skips such a line
    when reading but appends after it, fusing the next record into one line that no later
    read can parse."""
    if not os.path.isfile(journal):
        return 0
    with open(journal, "rb+") as f:
        data = f.read()
        if not data or data.endswith(b"\n"):
            return 0
        keep = data.rfind(b"\n") + 1
        f.truncate(keep)
    logger.warning("fairdp: %s: dropped a partial last record (%d bytes, a run killed while writing it); the search "
                   "resumes from the record before it", journal, len(data) - keep)
    return len(data) - keep


def private_journal(journal: str) -> None:
    """Create ``journal`` readable by its owner only (0600, as the result rows are), or make an
    existing one so: it holds every trial's hyperparameters and results."""
    os.close(os.open(journal, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600))
    os.chmod(journal, 0o600)


def open_study(search: SearchSpec, study_name: str, journal: str,
               check: Callable[[object], None] | None = None):
    """The Optuna study in the journal (created, or loaded to resume). A partial last record is
    cut off (``repair_journal``). ``check`` is called with a study the journal already holds
    before anything is appended to it, so that a refused resume writes nothing (Optuna's
    ``create_study(load_if_exists=True)`` appends a record even when it loads). Trials a
    killed run left RUNNING are left as they are: the search's ``GenerationPlanner`` trains
    and tells them (or ``retry_orphans`` asks them again)."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    check_journal(journal)
    repair_journal(journal)
    private_journal(journal)
    storage = JournalStorage(JournalFileBackend(journal))
    directions = ["maximize" if v == "max" else "minimize" for v in search.objectives.values()]
    try:
        storage.get_study_id_from_name(study_name)  # read-only: KeyError when the journal has none
    except KeyError:
        study = optuna.create_study(study_name=study_name, storage=storage, directions=directions,
                                    sampler=sampler(search))
    else:
        study = optuna.load_study(study_name=study_name, storage=storage, sampler=sampler(search))
        if check is not None:
            check(study)
    if list(study.directions) != [optuna.study.StudyDirection.MAXIMIZE if x == "maximize"
                                  else optuna.study.StudyDirection.MINIMIZE for x in directions]:
        raise InputError(f"{journal}: study '{study_name}' was created with other objectives; "
                         f"pass another --results")
    if study.metric_names is None:  # optuna-dashboard then names the axes by the objectives
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(list(search.objectives))
    return study, storage


def retry_orphans(study) -> int:
    """Mark the trials a killed run left RUNNING failed (they will never report) and enqueue
    their parameters again, so that the next asks propose them first; returns how many. For
    studies whose asks carry no sampler state (Ray's per-config ``OptunaSearch``, or a journal
    of an older fairdp): the search then reaches its count of complete trials with the configs
    its sampler chose, though later proposals may differ from an uninterrupted search's."""
    import optuna

    orphans = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    for t in orphans:
        study.tell(t.number, state=optuna.trial.TrialState.FAIL)
        if t.params:
            study.enqueue_trial(t.params, user_attrs={"retry_of": t.number})
    return len(orphans)


def _random_states(sampler) -> list:
    """The NumPy random states ``sampler`` draws from: its own and those of the samplers and
    strategies it holds (NSGA-II's and TPE's ``RandomSampler``, NSGA-II's child generation),
    each once, in attribute order."""
    from optuna.samplers._lazy_random_state import LazyRandomState

    found: dict[int, LazyRandomState] = {}

    def visit(obj, depth: int) -> None:
        for value in vars(obj).values():
            if isinstance(value, LazyRandomState):
                found.setdefault(id(value), value)
            elif depth and hasattr(value, "__dict__") and type(value).__module__.startswith("optuna.samplers"):
                visit(value, depth - 1)

    visit(sampler, 2)
    return [lazy.rng for lazy in found.values()]


def sampler_state(sampler) -> list[dict]:
    """``sampler``'s random states as JSON (what a journal record holds): with the trials in the
    study, they decide its next proposal. Restored by ``restore_sampler_state``."""
    import base64

    import numpy as np

    out = []
    for rng in _random_states(sampler):
        kind, key, pos, has_gauss, gauss = rng.get_state(legacy=True)
        out.append({"kind": kind, "key": base64.b64encode(np.asarray(key, dtype="<u4").tobytes()).decode("ascii"),
                    "pos": int(pos), "has_gauss": int(has_gauss), "gauss": float(gauss)})
    return out


def restore_sampler_state(sampler, state: list[dict]) -> None:
    """Put ``sampler``'s random states back to ``state`` (``sampler_state`` of a sampler of the
    same settings)."""
    import base64

    import numpy as np

    rngs = _random_states(sampler)
    if len(rngs) != len(state):
        raise InputError(f"the search's journal holds {len(state)} random states of its sampler, "
                         f"this Optuna's sampler has {len(rngs)}: resume it with the Optuna that started it")
    for rng, s in zip(rngs, state):
        key = np.frombuffer(base64.b64decode(s["key"]), dtype="<u4").astype(np.uint32)
        rng.set_state((s["kind"], key, s["pos"], s["has_gauss"], s["gauss"]))


def read_journal_study(journal: str, study_name: str):
    """The Optuna study ``study_name`` in ``journal``, loaded without writing; None when there
    is none: what a dry run reads (its trials, the settings it was started with)."""
    check_journal(journal)
    if not os.path.isfile(journal):
        return None
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return optuna.load_study(study_name=study_name, storage=JournalStorage(JournalFileBackend(journal)))
    except Exception:  # noqa: BLE001 - no such study in the journal
        return None


def complete_trials(study) -> int:
    """Trials that reported: the count a search runs until (failed ones do not count)."""
    import optuna

    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


def failed_since_complete(study) -> int:
    """Trials failed since the last complete one, in the order they were asked (the count a
    search stalls at, ``GenerationPlanner.stalled``, when Ray's OptunaSearch told them)."""
    import optuna

    n = 0
    for trial in reversed(study.get_trials(deepcopy=False)):
        if trial.state == optuna.trial.TrialState.COMPLETE:
            break
        n += trial.state == optuna.trial.TrialState.FAIL
    return n


def objective_values(row: dict, objectives: dict[str, str]) -> list[float] | None:
    """The row's objective values in order, or None when one is missing or not finite."""
    values = [row.get(k) for k in objectives]
    if any(v is None or not math.isfinite(v) for v in values):
        return None
    return [float(v) for v in values]


def search_config(search: SearchSpec, params: dict) -> dict:
    """A method config from a trial's sampled parameters and the search's fixed ones."""
    return {**search.fixed, **params}


def completed_config_ids(study) -> list[str]:
    """The config_id of each complete trial, in the order the trials finished (ties by
    number): the order a hypervolume history counts trials in."""
    import optuna

    trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    trials = sorted(trials, key=lambda t: (t.datetime_complete is None, t.datetime_complete or 0, t.number))
    return [t.user_attrs["config_id"] for t in trials if "config_id" in t.user_attrs]
