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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fairdp.methods import get_method
from fairdp.study._optuna import distributions, objective_values, search_config, set_constraints
from fairdp.study._spec import SearchSpec

if TYPE_CHECKING:
    pass

REFILL_ASKS = 10
"""Asks per generation slot before a generation gives up refilling (a search space whose
configs are all stored would otherwise ask forever)."""


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


class GenerationPlanner:
    """Asks ``study`` for generations until it has ``total`` complete trials. ``stored`` maps
    config ids already trained to their rows: those are told from the rows, never retrained."""

    def __init__(self, study, search: SearchSpec, total: int, stored: dict):
        self.study, self.search, self.total, self.stored = study, search, total, stored
        self.method = get_method(search.method)
        self.distributions = distributions(search)
        self.exhausted = False  # a generation found only stored configs

    def complete(self) -> int:
        from fairdp.study._optuna import complete_trials  # optuna: only once a search runs

        return complete_trials(self.study)

    def next_generation(self, population: int | None = None) -> Generation:
        """Ask until ``population`` (default the search's) new configs, or the trials left to
        the total, are pending; stored configs are told at once. Empty when the study is done."""
        population = population or self.search.population
        gen = Generation()
        done = self.complete()
        pending = 0  # trials asked for new configs (a config asked twice counts twice)
        unique: dict[str, list] = {}
        asks = 0
        while done + pending < self.total and len(unique) < population and asks < REFILL_ASKS * population:
            asks += 1
            t = self.study.ask(self.distributions)
            cfg = self.method.validate_config(search_config(self.search, t.params))
            cid = self.method.config_id(cfg)
            t.set_user_attr("config_id", cid)  # the row it trains: shown by optuna-dashboard
            if cid in self.stored:
                self.tell(t, self.stored[cid])
                gen.answered += 1
                done += 1
                continue
            unique.setdefault(cid, []).append((t, cfg, cid))
            pending += 1
        self.exhausted = not unique and done < self.total
        gen.groups = list(unique.values())
        return gen

    def tell(self, trial, row: dict | None) -> None:
        """Tell ``trial`` the row that answers it (failed when there is none or its values are not finite)."""
        import optuna

        values = objective_values(row, self.search.objectives) if row else None
        if values:
            set_constraints(trial, row, self.search)  # an infeasible trial is told like any other
        self.study.tell(trial, values, state=None if values else optuna.trial.TrialState.FAIL)

    def tell_group(self, group: list, row: dict | None) -> None:
        """Every trial that asked for one config, answered by the row it trained (None: it failed)."""
        if row is not None and objective_values(row, self.search.objectives):
            self.stored[group[0][2]] = row
        for trial, _cfg, _cid in group:
            self.tell(trial, row)
