"""A search resumed after a kill proposes exactly what an uninterrupted one would (issue 41,
class 8): the sampler's random state after every ask is kept in the journal, and the trials a
killed run left RUNNING are trained and told as they are, so the resumed rows equal an
uninterrupted search's bit for bit and hold no config twice."""

from __future__ import annotations

import math
import os
import signal
import time

import optuna
import pandas as pd
import pytest
import yaml
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from fairdp.study import ResultStore, parse_spec
from fairdp.study.executors import GenerationPlanner
from fairdp.study.search import _generations
from fairdp.study.search._optuna import open_study
from tests.conftest import group_alive, run_cli, start_driver

pytestmark = pytest.mark.xdist_group("search_resume")  # one xdist worker computes the module's shared runs once

NAME = "resume"
SEARCH = {
    "name": NAME,
    "dataset": {"name": "synthetic", "rows": 1500, "features": 6},
    "seeds": [0],
    "train": {"epochs": 3, "batch_size": 100},
    "evaluate": {"leakage": False, "mdl": False},
    "methods": {"noise": {}},
    "search": {"method": "noise", "sampler": "nsga2", "population": 2, "trials": 10, "seed": 3,
               "objectives": {"valid_accuracy": "max", "valid_tpr_gap": "min"},
               "space": {"eps": {"low": 1, "high": 20, "log": True}}},
}
VOLATILE = ["duration_s", "pack_duration_s", "finished_at", "node", "device"]  # when and where, not what


def _rows(results) -> pd.DataFrame:
    rows, corrupt = ResultStore(results).read()
    assert corrupt == []
    return rows.drop(columns=[c for c in VOLATILE if c in rows]).sort_values("config_id").reset_index(drop=True)


def _complete_trials(results, name: str) -> list[tuple]:
    """(config id, values) of each complete trial in trial order."""
    storage = JournalStorage(JournalFileBackend(str(results / "_optuna.journal")))
    trials = optuna.load_study(study_name=name, storage=storage).get_trials(
        deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return [(t.user_attrs["config_id"], tuple(t.values)) for t in trials]


def _search_killed_after_packs(study, results, packs: int, *executor: str) -> int:
    """Start the search in its own process group, SIGKILL the group once ``packs`` pack files are
    stored (polled from the store, not timed), and check nothing it started outlives it; the
    pack files stored at the kill."""
    proc = start_driver("search", str(study), "--results", str(results), *executor)
    store = ResultStore(results)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None and len(store.pack_files()) < packs:
            time.sleep(0.01)
        assert proc.poll() is None, "the search ended before the kill"
        assert len(store.pack_files()) >= packs, "no packs stored in time"
    finally:
        if group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    stored = len(store.pack_files())
    deadline = time.monotonic() + 10
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not group_alive(proc.pid), "a process the killed search started is still alive"
    return stored


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The uninterrupted search's results directory, searched once per module with the local
    executor (the kills after 2 and 3 packs, and the one on Ray, compare with it)."""
    root = tmp_path_factory.mktemp("whole")
    study = root / "s.yaml"
    study.write_text(yaml.safe_dump(SEARCH))
    proc = run_cli("search", str(study), "--results", str(root / "whole"), "--executor", "local")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return root / "whole"


@pytest.mark.slow
@pytest.mark.parametrize("executor, packs", [("local", 2), ("local", 3), ("ray", 2)])
def test_a_search_killed_after_packs_and_resumed_stores_the_uninterrupted_rows_bit_for_bit(tmp_path, executor, packs,
                                                                                            uninterrupted):
    """SIGKILL to the search's process group once ``packs`` packs are stored, then the same
    command again: the rows and told trials of an uninterrupted search of the same seed (before
    the fix: 5 and 8 distinct configs of 10 for the kills after 2 and 3 packs)."""
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump(SEARCH))
    resumed = tmp_path / "resumed"
    flags = ("--executor", executor)
    # on Ray, against the local executor's uninterrupted search: the executor contract proves both
    # store the same numbers, and Ray packs a generation per slot where the local executor packs it whole
    whole = uninterrupted
    packing = ["pack_id", "pack_size"] if executor == "ray" else []
    generations = SEARCH["search"]["trials"] // SEARCH["search"]["population"]
    stored = _search_killed_after_packs(study, resumed, packs, *flags)
    assert packs <= stored < generations * (SEARCH["search"]["population"] if executor == "ray" else 1)
    again = run_cli("search", str(study), "--results", str(resumed), *flags)
    assert again.returncode == 0, again.stderr[-2000:]
    rows = _rows(resumed)
    assert not rows.duplicated(["seed", "config_id"]).any()
    # same configs, same metrics, same packs (on Ray, each pack whole: its configs stored together)
    pd.testing.assert_frame_equal(rows.drop(columns=packing), _rows(whole).drop(columns=packing))
    if executor == "ray":
        assert (rows.groupby("pack_id").size() == rows.groupby("pack_id")["pack_size"].first()).all()
    name = f"{NAME}-noise-seed3"
    assert _complete_trials(resumed, name) == _complete_trials(whole, name)


# -- the same without a kill: a search abandoned at each point of a generation, in this process ---

class Killed(Exception):
    """Where the simulated kill lands: nothing after it runs, nothing is cleaned up."""


def _row(cfg: dict) -> dict:
    """What training ``cfg`` would store: two objectives at odds, and the constrained metric."""
    eps = cfg["eps"]
    return {"valid_accuracy": 50 + 10 * math.log(eps) + math.sin(7 * eps), "valid_tpr_gap": eps / 4 + math.cos(5 * eps),
            "eps_formal": eps}


def _search_spec(sampler: str, space: dict, trials: int):
    return parse_spec({**SEARCH, "search": {**SEARCH["search"], "sampler": sampler, "space": space, "trials": trials,
                                            "constraints": ["eps_formal <= 8"]}}).search


def _drive(search, journal: str, stored: dict, trained: list, size: int, kill=None) -> None:
    """The local search's loop (``run_search_locally``) with training faked by ``_row``: ask a
    generation, train its new configs, store their rows, tell them. ``kill(point, generation)``
    may raise ``Killed`` at 'asked' (before training) or 'stored' (rows stored, not told)."""
    study, _ = open_study(search, "s", journal)
    planner = GenerationPlanner(study, search, search.trials, dict(stored))  # the rows a rerun reads
    n = 0
    while True:
        gen = planner.next_generation(size)
        if not gen.groups:
            return
        kill and kill("asked", n)
        for group in gen.groups:
            stored[group[0][2]] = _row(group[0][1])
            trained.append(group[0][2])
        kill and kill("stored", n)
        for group in gen.groups:
            planner.tell_group(group, stored[group[0][2]])
        n += 1


def _told(journal: str) -> list[tuple]:
    storage = JournalStorage(JournalFileBackend(journal))
    trials = optuna.load_study(study_name="s", storage=storage).get_trials(
        deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    return [(t.user_attrs["config_id"], tuple(t.values), t.system_attrs.get("constraints")) for t in trials]


CONTINUOUS = {"eps": {"low": 1, "high": 20, "log": True}}
FEW = {"eps": {"choices": [1.0, 2.0, 3.0, 4.0, 8.0, 16.0]}}  # repeats: answered from their rows


@pytest.mark.parametrize("sampler, space, trials, size", [
    ("nsga2", CONTINUOUS, 12, 3), ("nsga2", FEW, 12, 2), ("tpe", CONTINUOUS, 14, 1)])
@pytest.mark.parametrize("point", ["asked", "stored", "mid-ask", "before-record"])
def test_a_search_abandoned_anywhere_in_a_generation_resumes_to_the_uninterrupted_proposals(
        tmp_path, monkeypatch, sampler, space, trials, size, point):
    """Abandoned after asking its third generation, after storing its rows, in the middle of its
    asks, or between an ask and the record of the sampler's state, then reopened as a rerun
    would: the same configs trained once each, in the same order, and the same trials told."""
    search = _search_spec(sampler, space, trials)
    whole_rows, whole_trained = {}, []
    _drive(search, str(tmp_path / "whole.journal"), whole_rows, whole_trained, size)
    assert len(_told(str(tmp_path / "whole.journal"))) == trials

    journal, rows, trained = str(tmp_path / "resumed.journal"), {}, []
    kill_generation = 2
    if point in ("asked", "stored"):
        def kill(at, n):
            if (at, n) == (point, kill_generation):
                raise Killed
        with pytest.raises(Killed):
            _drive(search, journal, rows, trained, size, kill)
    elif point == "mid-ask":  # an ask while the third generation has one pending
        if size == 1:
            pytest.skip("a generation of one config has no middle")
        real_ask = optuna.Study.ask

        def ask(self, *a, **k):
            if len(self.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))) >= \
                    size * kill_generation and self.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
                raise Killed
            return real_ask(self, *a, **k)
        monkeypatch.setattr(optuna.Study, "ask", ask)
    else:  # the second ask of the third generation, counted over the asks of this process
        real_state, calls = _generations.sampler_state, iter(range(10_000))

        def state(sampler_):
            if next(calls) == size * kill_generation + 1:
                raise Killed
            return real_state(sampler_)
        monkeypatch.setattr(_generations, "sampler_state", state)
    if point in ("mid-ask", "before-record"):
        with pytest.raises(Killed):
            _drive(search, journal, rows, trained, size)
        monkeypatch.undo()
    left = optuna.load_study(study_name="s", storage=JournalStorage(JournalFileBackend(journal))).get_trials(
        deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    assert left, "the simulated kill left no trial running"
    _drive(search, journal, rows, trained, size)  # the rerun
    assert trained == whole_trained  # the same configs, each once, in the same order
    assert rows == whole_rows
    assert _told(journal) == _told(str(tmp_path / "whole.journal"))


def test_every_ask_records_its_generation_and_the_samplers_state(tmp_path):
    search = _search_spec("nsga2", CONTINUOUS, 6)
    _drive(search, str(tmp_path / "j"), {}, [], 3)
    trials = optuna.load_study(study_name="s", storage=JournalStorage(JournalFileBackend(str(tmp_path / "j")))).trials
    assert [t.system_attrs[_generations.ASK_ATTR]["generation"] for t in trials] == [0, 0, 0, 1, 1, 1]
    assert all(len(t.system_attrs[_generations.ASK_ATTR]["rng"]) == 2 for t in trials)  # NSGA-II's own and its RandomSampler's
