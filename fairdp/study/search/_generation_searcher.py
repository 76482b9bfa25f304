"""Packed NSGA-II generations as a Ray Tune ``Searcher`` (the shape of Ray Tune's
``tune/search/optuna/optuna_search.py``).

Each generation (``_generations.GenerationPlanner``: asked at once, stored configs answered
from their rows, the rest refilled) is split into one pack per free worker slot, trained as
packed trials, and told back before the next generation is asked. This module imports Ray at
the top, so ``_search`` imports it only when a search runs on Ray.
"""

from __future__ import annotations

import json

from ray.tune.search import Searcher

from fairdp.study.run._plan import Pack, auto_pack_size
from fairdp.study.search._generations import GenerationPlanner


class GenerationSearcher(Searcher):
    """Hands ``planner``'s generations out as packs, one per slot; ``on_answered(n)`` hears of
    trials answered from stored rows (the progress counts them done)."""

    def __init__(self, planner: GenerationPlanner, slots: int, on_answered=None):
        super().__init__(metric="configs", mode="max")
        self.planner, self.slots, self.on_answered = planner, slots, on_answered
        self.queue: list[list] = []  # packs of the current generation not yet handed out
        self.pending: dict[str, list] = {}  # tune trial id -> groups of optuna trials
        self.outstanding = 0
        self.generations = 0

    def _next_generation(self) -> bool:
        gen = self.planner.next_generation()
        if (gen.answered or gen.shared) and self.on_answered is not None:
            self.on_answered(gen.answered + gen.shared)
        if not gen.groups:
            return False
        self.generations += 1
        size = auto_pack_size(len(gen.groups), 1, self.slots, cap=max(1, len(gen.groups)))
        self.queue = [gen.groups[i:i + size] for i in range(0, len(gen.groups), size)]
        self.outstanding = len(self.queue)
        return True

    def suggest(self, trial_id: str):
        if not self.queue and self.outstanding == 0 and not self._next_generation():
            return Searcher.FINISHED
        if not self.queue:
            return None  # the generation is still training
        groups = self.queue.pop(0)
        self.pending[trial_id] = groups
        search = self.planner.search
        pack = Pack(search.method, search.seed, tuple(g[0][1] for g in groups), tuple(g[0][2] for g in groups))
        return {"pack": pack.to_dict()}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        groups = self.pending.pop(trial_id, [])
        rows = (result or {}).get("rows") if not error else None
        for i, group in enumerate(groups):
            self.planner.tell_group(group, rows[i] if rows else None)
        self.outstanding -= 1

    # Tune saves a searcher's state with the experiment's; the search's state is its Optuna
    # journal (resumed from there), so this state is only what a restored searcher reports.
    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "w") as f:
            json.dump({"generations": self.generations, "complete": self.planner.complete()}, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path) as f:
            self.generations = json.load(f).get("generations", 0)
