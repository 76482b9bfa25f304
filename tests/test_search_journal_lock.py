"""A search whose Optuna journal lock was left behind by a SIGKILLed process resumes instead of
hanging.

Every append to a search's journal (``<results>/_optuna.journal``) takes Optuna's file lock: the
storage's lock object creates ``_optuna.journal.lock`` and removes it after the write. A process
killed between the two leaves the lock file behind. Before Optuna 4.3 (optuna#5971) the next
writer waited for it forever; from 4.3 a lock unchanged for its grace period (30 s) is released
by force, so a resumed search loses that much time and nothing else."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
import yaml
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from fairdp.study import ResultStore
from tests.conftest import run_cli

NAME = "lock"
FIRST, TRIALS = 2, 6  # the first part's trials (one generation), then the whole search's
SEARCH = {
    "name": NAME,
    "dataset": {"name": "synthetic", "rows": 600, "features": 6},
    "seeds": [0],
    "train": {"epochs": 1, "batch_size": 200},
    "evaluate": {"leakage": False, "mdl": False, "min_group_count": 1},
    "methods": {"noise": {}},
    "search": {"method": "noise", "sampler": "nsga2", "population": 2, "trials": TRIALS, "seed": 0,
               "objectives": {"valid_accuracy": "max", "valid_tpr_gap": "min"},
               "space": {"eps": {"low": 1, "high": 20, "log": True}}},
}
STUDY = f"{NAME}-noise-seed0"  # the Optuna study of the search's seed 0

# Takes the journal's lock as the search's storage does (the lock object of a JournalFileBackend
# made as fairdp makes it, no lock_obj), says so, and waits to be killed.
HOLD_LOCK = """
import sys, time
from optuna.storages.journal import JournalFileBackend
lock = JournalFileBackend(sys.argv[1])._lock
lock.acquire()
print(type(lock).__name__, flush=True)
time.sleep(600)
"""


def _grace_period(journal) -> float | None:
    """The grace period of the lock the search's storage takes on ``journal`` (None: this Optuna
    has none)."""
    return getattr(JournalFileBackend(str(journal))._lock, "grace_period", None)


def _complete(journal) -> list:
    study = optuna.load_study(study_name=STUDY, storage=JournalStorage(JournalFileBackend(str(journal))))
    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


@pytest.mark.slow  # a search in two parts, the second waiting out Optuna's grace period (~30 s)
def test_a_search_resumes_past_a_journal_lock_left_by_a_killed_process(tmp_path):
    study, results = tmp_path / "s.yaml", tmp_path / "r"
    study.write_text(yaml.safe_dump(SEARCH))
    journal = results / "_optuna.journal"
    lock_file = f"{journal}.lock"

    # the first part, timed: the resume starts the same way and trains twice as many configs
    started = time.monotonic()
    first = run_cli("search", str(study), "--results", str(results), "--executor", "local", "--trials", str(FIRST))
    first_s = time.monotonic() - started
    assert first.returncode == 0, first.stderr[-2000:]
    assert len(_complete(journal)) == FIRST
    before, corrupt = ResultStore(results).read()
    assert corrupt == [] and len(before) == FIRST

    # a process takes the journal's lock and is SIGKILLed holding it: the lock file stays
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(journal)], stdout=subprocess.PIPE, text=True)
    try:
        said = holder.stdout.readline().strip()
        assert said, "the lock holder did not take the lock"
        assert os.path.lexists(lock_file)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
        holder.stdout.close()
    assert os.path.lexists(lock_file), f"the killed holder's lock ({said}) should be left behind"

    # The resume's first write waits the grace period out, then releases the lock by force.
    # Bound: the grace period, plus three times the first part (process start-up, the data, and
    # twice its trials; the machine's load varies between the two), plus a minute. Without a grace
    # period the resume never writes, and the bound ends it.
    grace = _grace_period(journal)
    bound = (grace or 30) + 3 * first_s + 60
    started = time.monotonic()
    try:
        resumed = run_cli("search", str(study), "--results", str(results), "--executor", "local", timeout=bound)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the resumed search was still waiting on {lock_file} after {bound:.0f} s (the first part "
                    f"took {first_s:.0f} s): optuna {optuna.__version__}'s {said} has grace period {grace} "
                    f"(optuna>=4.3 releases a lock left unchanged for 30 s)")
    resumed_s = time.monotonic() - started
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    print(f"first part {first_s:.1f} s; resumed past the left lock in {resumed_s:.1f} s "
          f"(grace period {grace} s, bound {bound:.0f} s)")
    assert resumed_s >= grace, "the resume did not wait for the lock: the scenario tested nothing"
    assert not os.path.lexists(lock_file)

    # the planned trials, each config once, the first part's rows kept as they were
    complete = _complete(journal)
    assert len(complete) == TRIALS
    assert len({t.user_attrs["config_id"] for t in complete}) == TRIALS
    rows, corrupt = ResultStore(results).read()
    assert corrupt == [] and len(rows) == TRIALS and not rows.duplicated(["seed", "config_id"]).any()
    kept = rows.set_index("config_id").loc[before["config_id"], ["valid_accuracy", "valid_tpr_gap"]]
    assert kept.to_numpy().tolist() == before[["valid_accuracy", "valid_tpr_gap"]].to_numpy().tolist()
