"""Packed NSGA-II generations as a Ray Tune ``Searcher`` (the shape of Ray Tune's
``tune/search/optuna/optuna_search.py``).

A whole generation is asked from Optuna at once (ask/tell), split into one pack per free
worker slot, trained as packed trials, and told back before the next generation is asked.
NSGA-II builds a generation only from the completed generations before it, so this is the
sampler's own behaviour; it just trains the generation's configs together. This module
imports Ray at the top, so ``_search`` imports it only when a packed search runs.
"""

from __future__ import annotations

import optuna
from ray.tune.search import Searcher

from fairdp.methods import get_method
from fairdp.study._optuna import (
    distributions,
    objective_values,
    search_config,
    set_constraints,
)
from fairdp.study._plan import Pack, auto_pack_size
from fairdp.study._spec import SearchSpec


class GenerationSearcher(Searcher):
    """Asks ``study`` for ``total`` trials one generation at a time and hands each generation
    out as packs, one per slot. ``stored`` maps config ids already trained (by this search or
    a grid run) to their rows: those are told from the rows, never retrained."""

    def __init__(self, study: optuna.Study, search: SearchSpec, total: int, slots: int, stored: dict):
        super().__init__(metric="configs", mode="max")
        self.study, self.search, self.total, self.slots, self.stored = study, search, total, slots, stored
        self.method = get_method(search.method)
        self.distributions = distributions(search)
        self.asked = 0
        self.queue: list[list] = []  # packs of the current generation not yet handed out
        self.pending: dict[str, list] = {}  # tune trial id -> groups of optuna trials
        self.outstanding = 0

    def _next_generation(self) -> None:
        n = min(self.search.population, self.total - self.asked)
        trials = []
        for _ in range(n):
            t = self.study.ask(self.distributions)
            cfg = self.method.validate_config(search_config(self.search, t.params))
            cid = self.method.config_id(cfg)
            t.set_user_attr("config_id", cid)  # the row it trains: shown by optuna-dashboard
            if cid in self.stored:
                values = objective_values(self.stored[cid], self.search.objectives)
                set_constraints(t, self.stored[cid], self.search)
                self.study.tell(t, values, state=None if values else optuna.trial.TrialState.FAIL)
            else:
                trials.append((t, cfg, cid))
        self.asked += n
        # one pack per slot; a config asked twice in a generation trains once
        unique: dict[str, list] = {}
        for item in trials:
            unique.setdefault(item[2], []).append(item)
        groups = list(unique.values())
        size = auto_pack_size(len(groups), 1, self.slots, cap=max(1, len(groups)))
        self.queue = [groups[i:i + size] for i in range(0, len(groups), size)]
        self.outstanding = len(self.queue)

    def suggest(self, trial_id: str):
        if not self.queue and self.outstanding == 0:
            if self.asked >= self.total:
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
        return {"pack": Pack(self.search.method, self.search.seed, cfgs, ids).to_dict()}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        groups = self.pending.pop(trial_id, [])
        rows = (result or {}).get("rows") if not error else None
        for i, group in enumerate(groups):
            values = objective_values(rows[i], self.search.objectives) if rows else None
            if values:
                self.stored[group[0][2]] = rows[i]
            for t, _cfg, _cid in group:
                if values:
                    set_constraints(t, rows[i], self.search)  # an infeasible trial is told like any other
                self.study.tell(t, values, state=None if values else optuna.trial.TrialState.FAIL)
        self.outstanding -= 1
