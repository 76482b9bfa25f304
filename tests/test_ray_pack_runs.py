"""Runs of packs: a study of many packs a slot hands Ray Tune runs of consecutive packs, one trial
each (Tune's own cost is about 0.1 s a trial here). Every pack is in exactly one run, in order,
the runs end together, a run's trial trains its own packs and skips those an earlier attempt
stored, the driver follows each pack on its own, and a pack that fails in a run costs no other
pack its rows (on embedded Ray, in the slow set)."""

from __future__ import annotations

import functools
import heapq
import io
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fairdp.study.ray import _ray_trainables as trainables
from fairdp.study.ray._ray_trainables import (
    PACK_DONE,
    PACK_RUN,
    RUN_SHARE,
    RUNS_FROM_PACKS_PER_SLOT,
    pack_runs,
    pack_table,
    trial_packs,
)
from fairdp.study.run._plan import Pack


def _makespan(bounds: np.ndarray, seconds: np.ndarray, slots: int) -> float:
    """When the last slot is free, trials started in order each on the slot free first (Tune's way)."""
    free = [0.0] * slots
    for start, stop in bounds:
        heapq.heappush(free, heapq.heappop(free) + float(seconds[start:stop].sum()))
    return max(free)


@settings(max_examples=300, deadline=None)
@given(packs=st.integers(0, 20_000), slots=st.integers(1, 64))
def test_every_pack_is_in_exactly_one_run_in_order_and_the_runs_end_together(packs, slots):
    bounds = pack_runs(packs, slots)
    assert bounds.shape == (len(bounds), 2) and bounds.dtype == np.int64
    covered = np.concatenate([np.arange(a, b) for a, b in bounds]) if len(bounds) else np.array([], dtype=np.int64)
    assert np.array_equal(covered, np.arange(packs))  # each pack once, in the plan's order
    sizes = bounds[:, 1] - bounds[:, 0]
    assert (sizes >= 1).all() and (np.diff(sizes) <= 0).all()  # shrinking: the last runs are of one pack
    if packs < RUNS_FROM_PACKS_PER_SLOT * slots:
        assert (sizes == 1).all()  # few packs a slot: one a trial, as before runs
    else:
        # Tune's trials: about RUN_SHARE * slots * (1 + ln(packs per share)), not one a pack
        assert len(bounds) <= RUN_SHARE * slots * (2 + np.log(packs / (RUN_SHARE * slots)))
        # packs that cost the same end within one pack of the ideal
        assert _makespan(bounds, np.ones(packs), slots) <= packs / slots + 1


def test_two_thousand_packs_on_eight_slots_are_85_trials_that_end_at_the_ideal():
    bounds = pack_runs(2000, 8)
    assert len(bounds) == 85 and list(bounds[0]) == [0, 125] and _makespan(bounds, np.ones(2000), 8) == 250


def _packs(n: int) -> list[dict]:
    return [Pack("unconstrained", s, ({"eps": 0.1 * s, "encoder.widths": (64, 32)},), (f"{s:016x}",)).to_dict()
            for s in range(n)]


def test_a_trial_finds_its_own_packs_in_the_table_handed_to_all():
    """Each run number gives back exactly its packs (floats, tuples), numbered; a searcher's
    trial, which holds its pack itself, is given that one."""
    packs = _packs(300)
    table, bounds = pack_table(packs), pack_runs(300, 2)
    assert [type(part) for part in table] == [np.ndarray, np.ndarray] and len(table[1]) == len(packs) + 1
    for r in (0, 1, len(bounds) - 1):
        start, stop = bounds[r]
        assert trial_packs({PACK_RUN: r}, table, bounds) == [(i, packs[i]) for i in range(start, stop)]
    assert trial_packs({"pack": packs[5]}) == [(None, packs[5])]


class _Store:
    def __init__(self, stored: set[str]):
        self.stored = stored

    def has_pack(self, dataset, method, seed, pid):
        return pid in self.stored


def test_a_run_trains_its_packs_in_order_and_skips_those_an_earlier_attempt_stored(monkeypatch):
    from ray import tune

    from fairdp.study.executors import _worker

    packs = _packs(4)
    bounds = np.array([[0, 3], [3, 4]], dtype=np.int64)
    stored = {Pack.from_dict(packs[1]).id}  # the attempt before stored pack 1, then its worker died
    trained, sent = [], []
    monkeypatch.setattr(tune, "report", sent.append)
    monkeypatch.setattr(_worker, "run_pack", lambda ctx, pack, callback: (
        trained.append(pack.seed) or [{"pack_duration_s": 1.0, "valid_accuracy": 0.5}]))
    ctx = SimpleNamespace(dataset="adult", store=lambda: _Store(stored))
    trainables.pack_trainable({PACK_RUN: 0}, ctx, packs=pack_table(packs), runs=bounds)
    assert trained == [0, 2]
    assert [(r[PACK_DONE], r["configs"]) for r in sent] == [(0, 1), (1, 1), (2, 1)]
    assert "rows" not in sent[0]  # a searcher's packs only carry their rows' metrics back
    sent.clear()
    trainables.pack_trainable({"pack": packs[3]}, ctx)
    assert PACK_DONE not in sent[0] and sent[0]["rows"] == [{"pack_duration_s": 1.0, "valid_accuracy": 0.5}]


class _Heard:
    """A Progress stand-in that keeps what it hears."""

    def __init__(self):
        self.events: list[tuple[str, str]] = []

    def __getattr__(self, name):
        return lambda key, *a: self.events.append((name, key))


def test_the_driver_follows_each_pack_of_a_run_on_its_own():
    from fairdp.study.ray._tune import PackRuns, _tune_callback

    packs = [Pack.from_dict(p) for p in _packs(5)]
    runs = PackRuns(packs, np.array([[0, 3], [3, 4], [4, 5]], dtype=np.int64))
    heard = _Heard()
    callback = _tune_callback(heard, None, runs)
    first, second, third = (SimpleNamespace(trial_id=f"t{r}", config={PACK_RUN: r}) for r in range(3))
    callback.on_trial_start(0, [], first)
    callback.on_trial_result(0, [], first, {"units": 2})
    callback.on_trial_result(0, [], first, {"configs": 1, PACK_DONE: 0})
    callback.on_trial_recover(0, [], first)  # its worker died in pack 1; Tune starts it again
    callback.on_trial_start(0, [], first)
    callback.on_trial_result(0, [], first, {"configs": 1, PACK_DONE: 0})  # said again: not counted twice
    callback.on_trial_result(0, [], first, {"configs": 1, PACK_DONE: 1})
    callback.on_trial_error(0, [], first)  # in pack 2, for good: it runs again on its own, not failed
    callback.on_trial_start(0, [], second)
    callback.on_trial_error(0, [], second)  # a run of one pack: that pack failed
    callback.on_trial_start(0, [], third)
    callback.on_trial_result(0, [], third, {"configs": 1, PACK_DONE: 4})
    ids = [p.id for p in packs]
    assert heard.events == [
        ("start_pack", ids[0]), ("advance", ids[0]), ("finish_pack", ids[0]), ("start_pack", ids[1]),
        ("retry_pack", ids[1]), ("start_pack", ids[1]), ("finish_pack", ids[1]), ("start_pack", ids[2]),
        ("retry_pack", ids[2]), ("start_pack", ids[3]), ("fail_pack", ids[3]),
        ("start_pack", ids[4]), ("finish_pack", ids[4])]
    assert runs.done == {0, 1, 4} and runs.left({PACK_RUN: 0}) == [2]


FLAKY = textwrap.dedent('''
    """A method whose pack of config ``index`` == ``fails_at`` raises; the others return at once."""
    import numpy as np

    from fairdp.engine.contract import PackResult
    from fairdp.methods import HyperParam, Method, register_method


    @register_method
    class Flaky(Method):
        name = "flaky"
        hyperparams = (HyperParam("index", low=0, integer=True), HyperParam("fails_at", low=-1, integer=True))

        def paper_grid(self, dataset):
            return {"index": [0], "fails_at": [-1]}

        def representation_dim(self, data, arch=None):
            return 1

        def fit(self, data, configs, config_ids, seed, settings, arch, callback=None, checkpoint=None):
            if any(c["index"] == c["fails_at"] for c in configs):
                raise RuntimeError(f"flaky: config {configs[0]['index']} fails")
            k = len(configs)
            return PackResult(configs=configs, best_epoch=np.zeros(k, dtype=np.int64), valid_history={},
                              predictions={s: np.zeros((k, len(data.splits[s])), dtype=np.int64) for s in ("valid", "test")},
                              representations={s: np.zeros((k, len(data.splits[s]), 1), dtype=np.float32)
                                               for s in ("valid", "test")}, duration_s=0.0)
''')


@pytest.mark.slow
def test_a_pack_failing_in_a_run_on_ray_is_stored_as_error_rows_and_its_run_mates_as_rows(tmp_path, monkeypatch):
    """Runs forced from one pack a slot: 8 packs on 2 slots are runs of 2, 2, 1, 1, 1, 1. Pack 3
    fails in the run of packs 2-3, which Tune retries from pack 3; then pack 3 trains alone with
    its own retry and is stored as error rows, and every other pack as ok rows, each once."""
    from fairdp.study import ResultStore, load_spec, run_study
    from fairdp.study.ray import _tune

    monkeypatch.setattr(_tune, "pack_runs", functools.partial(pack_runs, from_per_slot=1))
    (tmp_path / "flaky.py").write_text(FLAKY)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({
        "name": "runs", "plugins": ["flaky.py"], "dataset": {"name": "synthetic", "rows": 400, "features": 4},
        "seeds": [0], "train": {"epochs": 1, "batch_size": 100}, "evaluate": {"leakage": False, "mdl": False},
        "pack_size": 1, "resources": {"max_failures": 1},
        "methods": {"flaky": {"grid": {"index": list(range(8)), "fails_at": [3]}}}}))
    assert [list(b) for b in pack_runs(8, 2, from_per_slot=1)] == [[0, 2], [2, 4], [4, 5], [5, 6], [6, 7], [7, 8]]
    out = io.StringIO()
    summary = run_study(load_spec(tmp_path / "s.yaml"), str(tmp_path / "r"), executor="ray", num_cpus=2,
                        progress_stream=out)
    assert (summary.failed_packs, summary.unfinished_packs) == (1, 0), out.getvalue()[-2000:]
    df, _ = ResultStore(tmp_path / "r").read()
    assert len(df) == 8 and not df.duplicated(["method", "seed", "config_id"]).any()
    status = dict(zip(df["index"].astype(int), df["status"]))
    assert status == {i: ("error" if i == 3 else "ok") for i in range(8)}
    assert "flaky: config 3 fails" in df.loc[df["index"] == 3, "error"].iloc[0]
