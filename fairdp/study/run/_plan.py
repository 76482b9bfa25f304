"""Grids into packs: the (method, seed, configs) units a Ray Tune trial trains together."""

from __future__ import annotations

import hashlib
import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fairdp.engine._shared import is_model_keyword
from fairdp.methods import get_method
from fairdp.privacy._shared import TrialCount
from fairdp.study.spec._spec import DEFAULT_PACK_CAP, GPU_PACK_CAP, MethodPlan, StudySpec
from fairdp.study.store._plans import PLAN_COLUMNS, PLAN_TABLE, read_plan
from fairdp.study.store._store import ResultStore, pack_id, read_or_move_aside


@dataclass(frozen=True)
class Pack:
    method: str
    seed: int
    configs: tuple[dict, ...]
    config_ids: tuple[str, ...]

    @property
    def id(self) -> str:
        return pack_id(self.method, self.seed, self.config_ids)

    def to_dict(self) -> dict:
        return {"method": self.method, "seed": self.seed, "configs": list(self.configs),
                "config_ids": list(self.config_ids)}

    @classmethod
    def from_dict(cls, d: dict) -> Pack:
        return cls(d["method"], int(d["seed"]), tuple(d["configs"]), tuple(d["config_ids"]))


def auto_pack_size(n_configs: int, n_groups: int, slots: int, cap: int = DEFAULT_PACK_CAP) -> int:
    """Pack size for a (method, seed) group of ``n_configs`` when the study has ``n_groups`` groups.

    A trial costs about a second of Ray overhead, so fewer, larger packs are cheaper; but the
    study needs at least ``slots`` packs to keep every worker busy, and a pack count that is
    a multiple of ``slots`` so the last round has no idle worker; ``cap`` bounds the work a
    kill can lose per slot.
    """
    slots = max(1, slots)
    per_group = max(math.ceil(slots / max(n_groups, 1)), math.ceil(n_configs / cap), 1)
    rounds = math.ceil(n_groups * per_group / slots)
    per_group = max(per_group, math.ceil(rounds * slots / max(n_groups, 1)))
    per_group = min(per_group, max(n_configs, 1))
    return max(1, math.ceil(n_configs / per_group))


@dataclass
class Backlog:
    """What a study still has to train, per (method, seed), computed once from the stored rows.

    A config is done when a row with status 'ok' exists for its (method, seed, config_id). A
    stored pack whose rows are errors is retried with exactly its configs (``retries``), so its
    new file replaces the old one; the remaining configs (``left``) are cut into packs afresh
    by ``packs`` for the executor's slots. ``plan`` is every config the spec trains, stored or
    not (what ``record_plan`` writes beside the results).
    """

    spec: StudySpec
    configs: dict[tuple[str, int], dict[str, dict]]     # (method, seed) -> config_id -> config, in grid order
    left: dict[tuple[str, int], list[str]]              # (method, seed) -> config ids to train afresh
    retries: list[tuple[str, int, tuple[str, ...]]]     # (method, seed, config ids) of error packs
    done: int                                           # configs already stored with status ok

    @classmethod
    def from_stored(cls, spec: StudySpec, stored: pd.DataFrame) -> Backlog:
        ok, errored = set(), {}
        if len(stored):
            good = stored[stored["status"] == "ok"]
            ok = set(zip(good["method"], good["seed"].astype(int), good["config_id"]))
            bad = stored[stored["status"] != "ok"]
            for (method, seed, pid), grp in bad.groupby(["method", "seed", "pack_id"]):
                errored[(method, int(seed), pid)] = set(grp["config_id"])
        configs, left, retries, done = {}, {}, [], 0
        for plan in spec.methods:
            for seed in spec.seeds:
                grid, ids = run_configs(spec, plan, seed)
                configs[(plan.name, seed)] = dict(zip(ids, grid))
                todo = [cid for cid in ids if (plan.name, seed, cid) not in ok]
                done += len(ids) - len(todo)
                waiting = set(todo)
                for (m, s, _pid), cids in errored.items():  # error packs first, with their exact composition
                    if m == plan.name and s == seed:
                        retry = [c for c in ids if c in cids and c in waiting]
                        if retry:
                            retries.append((m, s, tuple(retry)))
                            waiting -= set(retry)
                todo = [c for c in todo if c in waiting]
                left[(plan.name, seed)] = todo
        return cls(spec, configs, left, retries, done)

    @property
    def remaining(self) -> int:
        """Configs still to train."""
        return sum(map(len, self.left.values())) + sum(len(c) for _, _, c in self.retries)

    def plan(self) -> pd.DataFrame:
        """Every config the spec trains, one row per (method, seed, config_id), stored or not."""
        rows = [(self.spec.name, self.spec.dataset, method, seed, cid, self.spec.train.epochs)
                for (method, seed), by_id in self.configs.items() for cid in by_id]
        return pd.DataFrame(rows, columns=PLAN_COLUMNS).astype({"seed": "int64", "epochs": "int64"})

    def packs(self, slots: int = 1, gpu: bool = False) -> list[Pack]:
        """The backlog cut into packs for ``slots`` workers; on a GPU (``gpu``) packs are capped at
        ``GPU_PACK_CAP`` configs instead of ``DEFAULT_PACK_CAP``. Configs that sweep a training
        setting (lr, batch_size) or module keyword train apart: one pack, one setting."""
        packs = [Pack(m, s, tuple(self.configs[(m, s)][c] for c in cids), cids) for m, s, cids in self.retries]
        groups = len(self.configs)
        for (method, seed), todo in self.left.items():
            by_id = self.configs[(method, seed)]
            size = self.spec.pack_size or auto_pack_size(len(by_id), groups, slots,
                                                         GPU_PACK_CAP if gpu else DEFAULT_PACK_CAP)
            by_setting: dict[tuple, list[str]] = {}
            for cid in todo:
                by_setting.setdefault(setting_key(by_id[cid]), []).append(cid)
            for part in by_setting.values():
                for start in range(0, len(part), size):
                    chunk = part[start:start + size]
                    packs.append(Pack(method, seed, tuple(by_id[c] for c in chunk), tuple(chunk)))
        return hand_out_order(packs)


def plan_packs(spec: StudySpec, stored: pd.DataFrame, slots: int = 1, gpu: bool = False) -> tuple[list[Pack], int]:
    """Packs still to run and how many configs are already stored: ``Backlog.packs`` in one call."""
    backlog = Backlog.from_stored(spec, stored)
    return backlog.packs(slots, gpu), backlog.done


def setting_key(config: dict) -> tuple:
    """The training settings (``lr``, ``batch_size``) and module keywords (``encoder.width``) a
    config names, what packs are split by: configs of one pack share one network shape."""
    return (*(config.get(k) for k in ("lr", "batch_size")), *sorted((k, v) for k, v in config.items() if is_model_keyword(k)))


def run_configs(spec: StudySpec, plan: MethodPlan, seed: int) -> tuple[list[dict], list[str]]:
    """The configs one run (method, seed) trains, and their ids: the method's whole grid, or,
    when the study asks for ``tuning``, a random number of draws from it (``tuning_draws``)."""
    method = get_method(plan.name)
    ids = [method.config_id(c) for c in plan.configs]
    if spec.tuning is None:
        return list(plan.configs), ids
    picks = tuning_draws(spec.tuning, len(ids), plan.name, seed)
    return [plan.configs[j] for j in picks], [draw_id(ids[j], i) for i, j in enumerate(picks)]


def tuning_draws(count: TrialCount, grid_size: int, method: str, seed: int) -> list[int]:
    """Papernot & Steinke's random search for one run: K from ``count``, then K grid indices
    drawn uniformly with replacement, all from the run's seed and method (so a resumed
    study draws the same)."""
    digest = hashlib.sha256(f"{seed}/{method}/tuning".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    k = count.draw(rng)
    return [int(j) for j in rng.integers(grid_size, size=k)]


def draw_id(config_id: str, draw: int) -> str:
    """The row id of a run's ``draw``-th trial: a config drawn twice is trained twice, each
    with its own random streams (the theorem's trials are independent)."""
    return f"{config_id}-{draw}"


def hand_out_order(packs: list[Pack]) -> list[Pack]:
    """The order packs are handed out in: each method's largest pack first (methods by their
    largest pack), then each method's second largest, and so on. Every method starts in the
    first round, so one that fails does so within minutes and, with several slots, the
    progress ETA times every method early instead of costing the methods that would run
    last from reference figures; the rounds still go from large packs to small, so workers
    finish together (with many packs per method this is largest-first)."""
    by_method: dict[str, list[Pack]] = {}
    for p in sorted(packs, key=lambda p: -len(p.configs)):
        by_method.setdefault(p.method, []).append(p)
    ranked = sorted(by_method.values(), key=lambda ps: -len(ps[0].configs))
    return [p for rank in itertools.zip_longest(*ranked) for p in rank if p is not None]


def plan_table(spec: StudySpec) -> pd.DataFrame:
    """Every config ``spec`` trains, one row per (method, seed, config_id), stored or not."""
    return Backlog.from_stored(spec, pd.DataFrame()).plan()


def record_plan(store: ResultStore, spec: StudySpec, repair: bool = False,
                plan: pd.DataFrame | None = None) -> pd.DataFrame:
    """Write ``<results>.plan.parquet``: this run's configs added to those earlier runs into
    the same results planned (a ``--seeds 0`` run, then ``--seeds 1``), so an analysis can
    tell the whole study from the part that has finished. A plan left by another study or
    training length (whose rows are gone: ``check_compatible`` passed) is replaced; a corrupt
    or foreign one is an error, moved aside with ``repair``. ``plan``: ``Backlog.plan()`` when
    the caller has one (the spec's configs are then not expanded again)."""
    plan = plan_table(spec) if plan is None else plan
    old = read_or_move_aside(store, read_plan, repair, "fairdp run")
    if old is not None:
        same = (old["study"] == spec.name) & (old["dataset"] == spec.dataset) & (old["epochs"] == spec.train.epochs)
        plan = pd.concat([old[same][PLAN_COLUMNS], plan], ignore_index=True)
        plan = plan.drop_duplicates(["method", "seed", "config_id"], ignore_index=True)
    store.write_side_table(plan, PLAN_TABLE)
    return plan

