"""A search's generations asked from Optuna and told back, whoever trains them (Ray or this process).

A generation is asked at once (ask/tell): NSGA-II builds each generation only from the
completed ones before it, so training a generation's configs together is the sampler's own
behaviour. A trial whose config is already stored (trained by this search, a grid run, or
proposed twice) is answered from its row at once and the generation is refilled with
another ask, so each generation trains up to ``population`` new configs (Optuna counts a
generation by its complete trials: a repeat told at once joins the generation beside the
refills). Ray-free: ``_generation_searcher`` hands these generations to Ray Tune, the local
search trains them in this process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fairdp.methods import get_method
from fairdp.study.search._optuna import (
    distributions,
    objective_values,
    restore_sampler_state,
    retry_orphans,
    sampler_state,
    search_config,
    set_constraints,
)
from fairdp.study.spec._spec import SearchSpec

if TYPE_CHECKING:
    pass

REFILL_ASKS = 10
"""Asks per generation slot before a generation gives up refilling (a search space whose
configs are all stored would otherwise ask forever)."""
FAILED_IN_A_ROW = 10
"""Trials in a row (at least; a generation's size when larger) that report no finite objective
before a search stops: it runs until ``trials`` complete, and a study whose every row has a NaN
objective (a gap of fewer than two groups at ``evaluate.min_group_count``, a failing method)
would otherwise train forever."""

ASK_ATTR = "fairdp:ask"
"""A trial's system attr, written right after it is asked: the generation that asked it and the
sampler's random states after the ask (``sampler_state``)."""
RECORDING_ATTR = "fairdp:asks_recorded"
"""A study's system attr: its asks carry ``ASK_ATTR`` (a study without it began under a fairdp
that kept no sampler state)."""
ASKED_ATTR = "fairdp:generations_asked"
"""A study's system attr: how many generations finished asking (a resume that finds the last
generation's asks unfinished goes on asking it)."""


@dataclass
class Generation:
    """New configs to train: ``groups`` (one per distinct config, each the Optuna trials that
    asked for it), and how many trials were answered from stored rows while asking."""

    groups: list[list[tuple]] = field(default_factory=list)  # (optuna trial, config, config id)
    answered: int = 0

    @property
    def shared(self) -> int:
        """Trials that asked for a config another trial of the generation asked for: the one
        row answers them all."""
        return sum(len(g) - 1 for g in self.groups)

    @property
    def configs(self) -> list[dict]:
        return [g[0][1] for g in self.groups]

    @property
    def config_ids(self) -> list[str]:
        return [g[0][2] for g in self.groups]


@dataclass
class _Asking:
    """One generation's ask loop: its number, the asks so far, and the trials pending for new
    configs, by config id (a config asked twice counts twice in ``pending``)."""

    number: int
    asks: int = 0
    pending: int = 0
    unique: dict[str, list] = field(default_factory=dict)
    finished: bool = False


class GenerationPlanner:
    """Asks ``study`` for generations until it has ``total`` complete trials. ``stored`` maps
    config ids already trained to their rows: those are told from the rows, never retrained.

    A resumed search proposes what an uninterrupted one would: after every ask the sampler's
    random states go to the trial (``ASK_ATTR``), and a resume puts back the last ones, trains
    and tells the trials a killed run left RUNNING as they are (their trial numbers, NSGA-II
    generation and parameters kept), and goes on asking an unfinished generation where it
    stopped. Every proposal is then a function of the seed and the trials told before it, as
    in one uninterrupted process. A trial killed between its ask and that record is failed
    and asked again (the restored state proposes it again)."""

    def __init__(self, study, search: SearchSpec, total: int, stored: dict,
                 on_failed: Callable[[], None] | None = None):
        self.study, self.search, self.total, self.stored = study, search, total, stored
        self.on_failed = on_failed  # called per trial told failed: another is asked in its place
        self.method = get_method(search.method)
        self.distributions = distributions(search)
        self.exhausted = False  # a generation found only stored configs
        self.failed_in_a_row = 0  # trials told without finite objectives since the last complete one
        self.generation = 0  # the number of the next generation asked
        self._resumed = False

    def complete(self) -> int:
        from fairdp.study.search._optuna import complete_trials  # optuna: only once a search runs

        return complete_trials(self.study)

    def _study_attrs(self) -> dict:
        return self.study._storage.get_study_system_attrs(self.study._study_id)

    def _set_study_attr(self, key: str, value) -> None:
        self.study._storage.set_study_system_attr(self.study._study_id, key, value)

    def retry_orphans(self) -> int:
        """``retry_orphans`` for a search whose trials Ray's ``OptunaSearch`` asks (no planner
        generations): the orphans are asked again, not resumed."""
        self._resumed = True
        return retry_orphans(self.study)

    def _resume(self, gen: Generation) -> _Asking | None:
        """Where a killed (or finished) run left the study: the sampler's random states put back,
        and the last generation's loop, with its RUNNING trials (answered from their rows when
        the killed run stored them); None when there is nothing to resume."""
        import optuna

        self._resumed = True
        if not self._study_attrs().get(RECORDING_ATTR):  # new, or begun by a fairdp keeping no state
            retry_orphans(self.study)
            self._set_study_attr(RECORDING_ATTR, True)
            return None
        trials = self.study.get_trials(deepcopy=False)
        recorded = [t for t in trials if ASK_ATTR in t.system_attrs]
        running = optuna.trial.TrialState.RUNNING
        for t in trials:
            if t.state == running and ASK_ATTR not in t.system_attrs:
                self.study.tell(t.number, state=optuna.trial.TrialState.FAIL)  # asked again from the state before it
        if not recorded:
            return None  # the sampler's state is still its seed's
        last = recorded[-1]  # get_trials is in trial order: the last ask
        restore_sampler_state(self.study.sampler, last.system_attrs[ASK_ATTR]["rng"])
        number = last.system_attrs[ASK_ATTR]["generation"]
        self.generation = number + 1
        asking = _Asking(number, finished=self._study_attrs().get(ASKED_ATTR, 0) > number)
        asking.asks = sum(t.system_attrs[ASK_ATTR]["generation"] == number for t in recorded)
        for t in recorded:
            if t.state != running:
                continue
            trial = optuna.trial.Trial(self.study, t._trial_id)  # no draw: sampling is lazy
            cfg = self.method.validate_config(search_config(self.search, t.params))
            cid = self.method.config_id(cfg)
            if t.user_attrs.get("config_id") != cid:  # a kill before its record was written
                trial.set_user_attr("config_id", cid)
            if cid in self.stored:  # trained and stored before the kill, not yet told
                self.tell(trial, self.stored[cid])
                gen.answered += 1
                continue
            asking.unique.setdefault(cid, []).append((trial, cfg, cid))
            asking.pending += 1
        return asking

    def next_generation(self, population: int | None = None) -> Generation:
        """Ask until ``population`` (default the search's) new configs, or the trials left to
        the total, are pending; stored configs are told at once. The first call resumes what a
        killed run left (``_resume``). Empty when the study is done."""
        population = population or self.search.population
        gen = Generation()
        if self.stalled():
            return gen
        asking = None if self._resumed else self._resume(gen)
        if asking is None or (asking.finished and not asking.unique):
            asking = _Asking(self.generation)
        done = self.complete()
        while (not asking.finished and done + asking.pending < self.total and len(asking.unique) < population
               and asking.asks < REFILL_ASKS * population):
            asking.asks += 1
            t = self.study.ask(self.distributions)
            self.study._storage.set_trial_system_attr(
                t._trial_id, ASK_ATTR, {"generation": asking.number, "rng": sampler_state(self.study.sampler)})
            cfg = self.method.validate_config(search_config(self.search, t.params))
            cid = self.method.config_id(cfg)
            t.set_user_attr("config_id", cid)  # the row it trains: shown by optuna-dashboard
            if cid in self.stored:
                self.tell(t, self.stored[cid])
                gen.answered += 1
                done += 1
                continue
            asking.unique.setdefault(cid, []).append((t, cfg, cid))
            asking.pending += 1
        if asking.asks and not asking.finished:
            self._set_study_attr(ASKED_ATTR, asking.number + 1)
            self.generation = asking.number + 1
        self.exhausted = not asking.unique and done < self.total
        gen.groups = list(asking.unique.values())
        return gen

    def tell(self, trial, row: dict | None) -> None:
        """Tell ``trial`` the row that answers it (failed when there is none or its values are not finite)."""
        import optuna

        values = objective_values(row, self.search.objectives) if row else None
        if values:
            set_constraints(trial, row, self.search)  # an infeasible trial is told like any other
        self.study.tell(trial, values, state=None if values else optuna.trial.TrialState.FAIL)
        self.failed_in_a_row = 0 if values else self.failed_in_a_row + 1
        if not values and self.on_failed is not None:
            self.on_failed()

    def stalled(self) -> bool:
        """Whether the last ``FAILED_IN_A_ROW`` trials (a generation's worth when larger) reported
        no finite objective: the search stops there rather than train forever."""
        return self.failed_in_a_row >= max(FAILED_IN_A_ROW, self.search.population)

    def tell_group(self, group: list, row: dict | None) -> None:
        """Every trial that asked for one config, answered by the row it trained (None: it failed)."""
        if row is not None and objective_values(row, self.search.objectives):
            self.stored[group[0][2]] = row
        for trial, _cfg, _cid in group:
            self.tell(trial, row)
