"""Live progress: the ETA model (pinned values and recorded traces of real runs), the plain
and bar outputs, and the reference-figure estimate of ``--dry-run``."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest

from fairdp.study.executors import Progress
from fairdp.study.run._estimate import (
    config_epoch_figure,
    lacking_precision,
    makespan,
    pack_fixed,
    reference,
    unit_costs,
)
from fairdp.study.run._progress import TRACE_ENV, EtaModel, replay

TRACES = sorted((Path(__file__).parent / "data" / "progress").glob("*.json"))


def test_eta_pins_hand_computed_values():
    m = EtaModel({"a": 20.0, "b": 10.0}, slots=2, pending_packs={"a": 2, "b": 1})
    m.start(0.0, "p1", "a", 10.0)
    m.start(0.0, "p2", "b", 10.0)
    assert m.pending == {"a": 10.0, "b": 0.0} and m.pending_packs == {"a": 1, "b": 0}
    m.advance(2.0, "p1", 2.0)
    assert m.eta(2.0) is None  # one report: no rate yet
    m.advance(6.0, "p1", 4.0)       # a: 4 units in the 4 s between reports, 1 s each
    # p1: 10 * 1 from its start -> 4 s left; p2 (b unmeasured: the pooled 1) the same;
    # pending a: 10 * 1; over 2 slots. Start-up: 2 s to the first report of 2 units = 0 fixed.
    assert m.eta(6.0) == pytest.approx((4 + 4 + 10) / 2)
    m.finish(12.0, "p1")            # 12 s for 10 units at 1 s: 2 s fixed per pack
    assert m.fixed == [pytest.approx(2.0)]
    # p2: 0 + 2 + 10 * 1 - 12 = 0 left; pending a: 10 * 1 + one pack's 2 s
    assert m.eta(12.0) == pytest.approx((0 + 10 + 2) / 2)
    m.advance(13.0, "p2", 3.0)
    m.advance(15.0, "p2", 4.0)      # b: 4 units in 2 s
    assert m.costs()[0] == pytest.approx({"a": 1.0, "b": 0.5})


def test_a_method_without_epoch_reports_is_timed_by_whole_packs():
    m = EtaModel({"r": 4.0}, slots=1, pending_packs={"r": 2})
    m.start(0.0, "k1", "r", 2.0)
    m.finish(3.0, "k1")
    m.start(3.0, "k2", "r", 2.0)
    assert m.eta(3.0) == pytest.approx(2 * 1.5)  # its packs' whole duration already holds the fixed time


def test_an_unmeasured_method_costs_its_reference_figure_scaled_by_the_measured_speed():
    def run(reference):
        m = EtaModel({"a": 10.0, "b": 10.0}, slots=1, reference=reference)
        m.start(0.0, "p1", "a", 10.0)
        m.advance(1.0, "p1", 1.0)
        m.advance(10.0, "p1", 9.0)  # a: 1 s per unit, twice its reference
        m.finish(10.0, "p1")
        return m.eta(10.0)

    assert run({"a": 0.5, "b": 1.5}) == pytest.approx(10 * 1.5 * 2)
    assert run(None) == pytest.approx(10 * 1.0)  # no figures: b takes a's cost


def test_a_retried_pack_starts_its_work_again():
    m = EtaModel({"a": 20.0}, slots=1, pending_packs={"a": 2})
    m.start(0.0, "p", "a", 10.0)
    m.advance(2.0, "p", 2.0)
    m.advance(4.0, "p", 2.0)
    m.restart(5.0, "p")
    assert m.eta(5.0) is None and m.running["p"].done == 0
    m.start(6.0, "p", "a", 10.0)  # Tune starts a recovered trial again: still one pack pending
    assert m.pending == {"a": 10.0} and m.pending_packs == {"a": 1}


def test_a_cluster_that_loses_a_node_spreads_the_work_left_over_the_slots_it_has():
    m = EtaModel({"a": 40.0}, slots=2, pending_packs={"a": 4})
    m.start(0.0, "p", "a", 10.0)
    m.start(0.0, "q", "a", 10.0)
    m.advance(1.0, "p", 1.0)
    m.advance(10.0, "p", 9.0)  # 1 s per config-epoch
    m.finish(11.0, "p")
    two = m.eta(11.0)
    m.resize(11.0, 1)
    one = m.eta(11.0)
    # 1 s per config-epoch and 1 s fixed per pack (p took 11 s for 10 units): q is due now, the
    # two pending packs are 2 x (10 + 1) s of work, shared by two slots before and by one after
    assert (two, one) == (pytest.approx(11.0), pytest.approx(22.0))


# (relative, absolute seconds) the ETA of each recorded run must be within, once 10% is done.
# With several slots every method is timed in the first round. With one slot, methods run one
# after another and each is costed from its reference figure (benchmarks/bench_costs.py)
# until it starts, so that trace also tests the figures' ratios between methods.
TOLERANCE = {"demo-ray-2-slots": (0.25, 5.0), "demo-local-1-slot": (0.25, 5.0)}


@pytest.mark.parametrize("path", TRACES, ids=[p.stem for p in TRACES])
def test_the_eta_of_a_recorded_run_stays_close_after_the_first_tenth(path):
    """Replay the progress events a real run recorded (``FAIRDP_PROGRESS_TRACE``): once 10%
    of the config-epochs are done, the ETA is within TOLERANCE of the time the run really
    took to finish (relative, or in seconds near the end, where a pack's own fixed time
    varies by seconds)."""
    relative, absolute = TOLERANCE[path.stem]
    trace = json.loads(path.read_text())
    end = trace["events"][-1]["t"]
    checked = 0
    for t, done, eta in replay(trace):
        actual = end - t
        if done < 0.1:
            continue
        assert eta is not None and abs(eta - actual) <= max(relative * actual, absolute), \
            f"{path.name}: at {t:.0f} s ({done:.0%} done) eta {eta:.0f} s, really {actual:.0f} s"
        checked += 1
    assert checked >= 50


def test_traces_cover_a_multi_slot_ray_run_and_a_one_slot_local_run():
    assert {p.stem for p in TRACES} == set(TOLERANCE)
    kinds = {(json.loads(p.read_text())["slots"] > 1) for p in TRACES}
    assert kinds == {True, False}


FAULT_TRACES = sorted((Path(__file__).parent / "data" / "progress-faults").glob("*.json"))


class _FixedSlots(EtaModel):
    """The ETA model as it was before it heard of the cluster's slots: the control."""

    def resize(self, t, slots):
        pass


def _misses_after_the_shrink(trace: dict, model=None) -> tuple[int, int]:
    """(ETAs outside TOLERANCE, ETAs checked) from the moment the run learnt it lost slots."""
    relative, absolute = 0.25, 5.0
    end = trace["events"][-1]["t"]
    shrunk = next(e["t"] for e in trace["events"] if e["kind"] == "slots")
    misses = checked = 0
    for t, _, eta in replay(trace, model):
        if t >= shrunk:
            checked += 1
            misses += eta is None or abs(eta - (end - t)) > max(relative * (end - t), absolute)
    return misses, checked


@pytest.mark.parametrize("path", FAULT_TRACES, ids=[p.stem for p in FAULT_TRACES])
def test_the_eta_recovers_once_a_run_learns_its_cluster_lost_a_node(path):
    """A real run on a three-host cluster whose worker host was killed mid-pack
    (tests/test_cluster_faults.py records it): the killed pack restarts and its units are
    taken back, the cluster's slots drop from 2 to 1, and from then on the ETA is within 25%
    (or 5 s) of the time the run really took; without the resize it is not."""
    trace = json.loads(path.read_text())
    kinds = [e["kind"] for e in trace["events"]]
    assert "restart" in kinds and "slots" in kinds and trace["slots"] == 2
    misses, checked = _misses_after_the_shrink(trace)
    assert checked >= 20 and misses == 0
    control = _FixedSlots(trace["pending"], trace["slots"], trace.get("reference"), trace.get("pending_packs"))
    assert _misses_after_the_shrink(trace, control)[0] >= checked // 2


def _progress(stream, bar=False):
    return Progress("run t", packs=2, configs=3, epochs=4, slots=1, pending={"a": 8.0, "b": 4.0},
                    stream=stream, bar=bar)


def test_plain_lines_show_config_epochs_packs_and_failures(tmp_path, monkeypatch):
    monkeypatch.setenv(TRACE_ENV, str(tmp_path / "trace.json"))
    out = io.StringIO()
    with _progress(out) as p:
        p.start_pack("0", "a", 2)
        p.advance("0", 2)
        p.advance("0", 10)           # never more than the pack holds
        p.retry_pack("0")
        p.advance("0", 2)
        p.finish_pack("0")
        p.start_pack("1", "b", 1)
        p.fail_pack("1")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("fairdp run t:   0% | 0/12 config-epochs | packs 0/2 done, 0 failed, 1 running")
    assert "67% | 8/12 config-epochs | packs 1/2 done, 0 failed, 1 retried, 0 running" in out.getvalue()
    assert lines[-1].startswith("fairdp run t: 100% | 12/12 config-epochs | packs 1/2 done, 1 failed, 1 retried")
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert [e["kind"] for e in trace["events"]] == ["start", "advance", "advance", "restart", "advance", "finish",
                                                    "start", "finish"]
    assert replay(trace)[-1][1] == pytest.approx(1.0)  # the replay counts the units the run counted


def test_on_a_terminal_it_draws_a_bar_in_place():
    out = io.StringIO()
    with _progress(out, bar=True) as p:
        p.start_pack("0", "a", 2)
        p.advance("0", 4)
    text = out.getvalue()
    assert "\r" in text and "fairdp run t:  33%|" in text and "4/12 config-epochs" in text
    assert "packs 0/2 done, 0 failed" in text


def test_reference_costs_turn_into_a_schedule():
    figures = {"methods": {"a": {"per_config_epoch": 0.5}, "b": {"per_config": 2.0}},
               "probes": {"early_stopping": {"leakage": {"per_config": 1.0}, "mdl": {"per_config": 4.0}}}}
    costs = unit_costs(["a", "b", "c"], epochs=10, train_rows=2000, leakage=True, mdl=False, figures=figures)
    # per config: a 0.5 * 10 epochs + 1 leakage; b 2 + 1; per 1,000 rows x 2, spread over 10 epochs
    assert costs == pytest.approx({"a": 1.2, "b": 0.6})
    # two a-packs of 10 units fill both slots for 12 s; the b-pack follows on the first free one
    assert makespan([("a", 10), ("a", 10), ("b", 5)], costs, slots=2) == pytest.approx(15.0)
    # a pack's fixed time comes on top of its config-epochs
    assert makespan([("a", 10), ("a", 10), ("b", 5)], costs, slots=2, fixed={"a": 1.0}) == pytest.approx(16.0)
    assert makespan([("c", 10)], costs, slots=1) == 0.0
    assert unit_costs(["a"], epochs=10, train_rows=2000, leakage=True, mdl=True, figures=figures,
                      probes=False) == pytest.approx({"a": 1.0})


def test_a_bf16_study_is_costed_at_the_bf16_figures_where_measured():
    figures = {"methods": {"a": {"per_config_epoch": 0.5, "per_pack": 1.0,
                                 "bf16": {"per_config_epoch": 0.25, "per_pack": 0.5}},
                           "b": {"per_config_epoch": 0.5, "per_pack": 1.0}, "c": {"per_config": 2.0}},
               "probes": {"early_stopping": {"leakage": {"per_config": 1.0}}}}
    args = dict(epochs=10, train_rows=2000, leakage=True, mdl=False, figures=figures)
    # a: 0.25 * 10 epochs + 1 leakage (probes train in full precision), per 1,000 rows x 2, over 10 epochs
    assert unit_costs(["a", "b", "c"], **args, precision="bf16") == pytest.approx({"a": 0.7, "b": 1.2, "c": 0.6})
    for full in (None, "float32"):
        assert unit_costs(["a", "b", "c"], **args, precision=full) == pytest.approx({"a": 1.2, "b": 1.2, "c": 0.6})
    assert pack_fixed(["a", "b", "c"], 2000, figures, precision="bf16") == pytest.approx({"a": 1.0, "b": 2.0})
    assert pack_fixed(["a", "b"], 2000, figures) == pytest.approx({"a": 2.0, "b": 2.0})
    # b trains by epochs with no bf16 figure: the estimate says it used float32's; c has no training loop
    assert lacking_precision(["a", "b", "c"], "bf16", figures) == ["b"]
    # tf32 computes in float32 on the CPU the figures are from: float32's figures, nothing lacking
    assert unit_costs(["a"], **args, precision="tf32") == pytest.approx({"a": 1.2})
    for full in (None, "float32", "tf32"):
        assert lacking_precision(["a", "b", "c"], full, figures) == []


@pytest.mark.parametrize("early_stopping", [True, False])
@pytest.mark.parametrize("leakage, mdl", [(True, False), (False, True), (True, True), (False, False)])
def test_probes_are_costed_under_the_studys_stopping_rule_per_config_and_per_pack(early_stopping, leakage, mdl):
    """FEDERATE's probe protocol stops on the training loss and costs about ten times fairdp's
    default probe, which stops early: a study is costed at its own rule's figures, each probe
    it runs a per-config part (spread over the epochs) and a per-pack part (on every method's
    fixed time, a method without one of its own included)."""
    from fairdp.metrics import ProbeSettings

    rules = {"early_stopping": {"leakage": {"per_config": 1.0, "per_pack": 0.5}, "mdl": {"per_config": 2.0, "per_pack": 1.5}},
             "training_loss": {"leakage": {"per_config": 10.0, "per_pack": 5.0}, "mdl": {"per_config": 20.0, "per_pack": 15.0}}}
    figures = {"methods": {"a": {"per_config_epoch": 0.5, "per_pack": 1.0}, "r": {"per_config": 2.0}}, "probes": rules}
    probe = ProbeSettings(early_stopping=early_stopping, max_epochs=1000, alpha=1.0)
    rule = rules["early_stopping" if early_stopping else "training_loss"]
    kinds = [k for k, on in (("leakage", leakage), ("mdl", mdl)) if on]
    per_config = sum(rule[k]["per_config"] for k in kinds)
    per_pack = sum(rule[k]["per_pack"] for k in kinds)
    costs = unit_costs(["a", "r"], epochs=10, train_rows=2000, leakage=leakage, mdl=mdl, figures=figures, probe=probe)
    assert costs == pytest.approx({"a": (0.5 * 10 + per_config) * 2 / 10, "r": (2.0 + per_config) * 2 / 10})
    fixed = pack_fixed(["a", "r"], 2000, figures, leakage=leakage, mdl=mdl, probe=probe)
    assert fixed == pytest.approx({"a": (1.0 + per_pack) * 2, **({"r": per_pack * 2} if per_pack else {})})


@pytest.mark.parametrize("batch", [64, 256, 1024, 2000, 4096])
def test_a_config_epoch_is_costed_at_the_packs_batch_size(batch):
    """Figures at two batch sizes are a step's work a and a row's work b: an epoch of n / B steps
    costs n (a / B + b), so the cost at any B is the line through them in 1 / B."""
    fig = {"per_config_epoch": 1.0, "by_batch": {"2000": 1.0, "256": 4.0}}
    a = (4.0 - 1.0) / (1 / 256 - 1 / 2000)  # by hand: two equations, two unknowns
    b = 1.0 - a / 2000
    assert config_epoch_figure(fig, batch) == pytest.approx(a / batch + b)
    assert config_epoch_figure(fig, None) == 1.0  # no batch size: the reference's figure
    assert config_epoch_figure({"per_config_epoch": 1.0}, batch) == 1.0  # one figure: no fit
    costs = unit_costs(["m"], epochs=10, train_rows=2000, leakage=False, mdl=False,
                       figures={"methods": {"m": fig}}, batch_size=batch)
    assert costs == pytest.approx({"m": 2 * (a / batch + b)})  # per 1,000 rows x 2


@pytest.mark.parametrize("batch, expected", [
    (2000, 1.0), (1024, 2.0), (256, 5.0),               # the measured points themselves
    (1500, 1.0 + (2.0 - 1.0) * (1 / 1500 - 1 / 2000) / (1 / 1024 - 1 / 2000)),  # between two: linear in 1 / B
    (512, 2.0 + (5.0 - 2.0) * (1 / 512 - 1 / 1024) / (1 / 256 - 1 / 1024)),
    (128, 5.0 + (5.0 - 2.0) * (1 / 128 - 1 / 256) / (1 / 256 - 1 / 1024)),   # beyond: the end segment extended
])
def test_figures_at_three_batch_sizes_are_interpolated_between_neighbours(batch, expected):
    fig = {"per_config_epoch": 1.0, "by_batch": {"2000": 1.0, "1024": 2.0, "256": 5.0}}
    assert config_epoch_figure(fig, batch) == pytest.approx(expected)


def test_the_dry_run_costs_each_pack_at_its_own_batch_size():
    from fairdp.study import load_spec
    from fairdp.study.run._estimate import pack_work
    from fairdp.study.run._plan import Backlog

    spec = load_spec(str(Path(__file__).parents[1] / "studies" / "pfld_adult.yaml"))
    packs = Backlog.from_stored(spec, pd.DataFrame()).packs(2, False)
    work, costs, fixed = pack_work(spec, packs, 27133, "float32")
    batches = {key: {c.get("batch_size", 256) for p in packs if p.method == key[0] for c in p.configs}
               for key, _ in work}
    assert {b for (_, b), _ in work} == {256, 1024}
    for (method, batch), units in work:
        assert units > 0 and batch in batches[(method, batch)]
    for method in ("dpsgd", "pfld", "fld"):  # a smaller batch takes more steps an epoch: dearer
        assert costs[(method, 256)] > costs[(method, 1024)]
    assert set(fixed) <= set(costs)


def test_the_dry_run_costs_a_studys_probes_under_its_own_probe_settings():
    """studies/federate_adult.yaml gives FEDERATE's probe protocol (stopping on the training
    loss): its random baseline, which trains nothing, is costed almost wholly at that rule's
    probe figures, per config and per pack, not at the default probe's."""
    from fairdp.study import load_spec
    from fairdp.study.run._estimate import pack_work
    from fairdp.study.run._plan import Backlog

    spec = load_spec(str(Path(__file__).parents[1] / "studies" / "federate_adult.yaml"))
    assert not spec.probe.early_stopping and spec.leakage and spec.mdl
    packs = Backlog.from_stored(spec, pd.DataFrame()).packs(2, False)
    work, costs, fixed = pack_work(spec, packs, 27133, "float32")
    probes = reference()["probes"]["training_loss"]
    per_config = sum(probes[k]["per_config"] for k in ("leakage", "mdl")) * 27.133
    per_pack = sum(probes[k]["per_pack"] for k in ("leakage", "mdl")) * 27.133
    random = reference()["methods"]["random"]["per_config"] * 27.133
    assert costs[("random", 2000)] * spec.train.epochs == pytest.approx(random + per_config)
    assert fixed[("random", 2000)] == pytest.approx(per_pack)


def test_each_slot_pays_one_calibration_per_distinct_method_eps_and_batch():
    from types import SimpleNamespace

    from fairdp.study.run._estimate import calibration_by_pack_key, calibration_seconds

    figures = {"methods": {"dpsgd": {"per_config_epoch": 1.0, "per_calibration": 2.0},
                           "fld": {"per_config_epoch": 1.0}}}
    spec = SimpleNamespace(train=SimpleNamespace(batch_size=256))
    packs = [SimpleNamespace(method="dpsgd", configs=[{"eps": 1.0}, {"eps": 1.0, "clip_primal": 3.0}, {"eps": 2.0}]),
             SimpleNamespace(method="dpsgd", configs=[{"eps": 1.0, "batch_size": 1024}, {"eps": 2.0}]),
             SimpleNamespace(method="fld", configs=[{"lr": 0.1}])]
    # (1, 256), (2, 256), (1, 1024): three searches; fld has none
    assert calibration_seconds(spec, packs, figures) == pytest.approx(6.0)
    # per pack key, as benchmarks/check_estimate.py attributes them
    assert calibration_by_pack_key(spec, packs, figures) == {("dpsgd", 256): 4.0, ("dpsgd", 1024): 2.0}


def test_every_builtin_method_has_a_reference_figure():
    from fairdp.methods import builtin_method_names

    figures = reference()
    assert set(builtin_method_names()) <= set(figures["methods"])
    for fig in figures["methods"].values():  # epoch-trained methods: a config-epoch's cost and a pack's fixed time
        assert ("per_config_epoch" in fig and "per_pack" in fig) or set(fig) == {"per_config"}
    assert figures["measured"]["device"] == "cpu"
    for rule in ("early_stopping", "training_loss"):  # each probe, each stopping rule, per config and per pack
        for kind in ("leakage", "mdl"):
            assert set(figures["probes"][rule][kind]) == {"per_config", "per_pack"}
    # FEDERATE's probe protocol (stopping on the training loss) costs far more than the default
    assert figures["probes"]["training_loss"]["leakage"]["per_config"] > 3 * figures["probes"]["early_stopping"]["leakage"]["per_config"]
    # a study trains in bf16 by default on CPUs with native bf16 matmuls: its estimate needs their figures
    assert figures["measured"]["precisions"] == ["float32", "bf16"]
    updated = figures.get("updated", {})
    for name, fig in figures["methods"].items():
        if name in updated and "bf16" not in updated[name]["precisions"]:
            assert "bf16" not in fig  # measured again where bf16 is emulated: float32's figure stands in
            continue
        assert "per_config" in fig or set(fig["bf16"]) - {"by_batch"} == {"per_config_epoch", "per_pack"}


def test_a_trial_reports_its_config_epochs_to_tune_between_epochs(monkeypatch):
    from ray import tune

    from fairdp.engine.contract import EpochReport
    from fairdp.study.ray import _ray_trainables

    sent = []
    monkeypatch.setattr(tune, "report", sent.append)
    monkeypatch.setattr(_ray_trainables, "UNITS_EVERY_S", 0.0)
    report = _ray_trainables.units_reporter()
    for epoch in (1, 2, 3):
        report(EpochReport(epoch, 3, 5, None))
    # the last epoch's units come with the pack's final report (its rows), not on their own
    assert sent == [{"units": 5}, {"units": 5}]
    monkeypatch.setattr(_ray_trainables, "UNITS_EVERY_S", 3600.0)
    sent.clear()
    report = _ray_trainables.units_reporter()
    for epoch in (1, 2, 3):
        report(EpochReport(epoch, 3, 5, None))
    assert sent == []  # at most one report per UNITS_EVERY_S: each is a round trip to the driver


def test_a_slow_step_says_what_it_is_and_a_fast_one_stays_quiet(caplog):
    import logging
    import time

    from fairdp.study.run._prepare import said_if_slow

    caplog.set_level(logging.INFO, logger="fairdp")
    with said_if_slow("loading dataset x", after_s=0.05):
        pass
    time.sleep(0.1)
    assert caplog.messages == []  # a fast step (or one that fails at once) leaves its error the only line
    with said_if_slow("loading dataset y", after_s=0.05):
        time.sleep(0.2)
    assert caplog.messages == ["loading dataset y"]


def test_work_added_by_a_replaced_search_trial_grows_the_total_and_its_replay(tmp_path, monkeypatch):
    """A search trial told without a finite objective is asked again: ``add_work`` grows the
    total, so the line never passes 100%, and a replayed trace ends at exactly 1."""
    trace_path = tmp_path / "trace.json"
    monkeypatch.setenv(TRACE_ENV, str(trace_path))
    out = io.StringIO()
    with Progress("search s", None, 2, epochs=3, pending={"noise": 6.0}, stream=out) as p:
        for key in ("g0", "g1", "g2"):  # g0 fails: its trial is replaced by g2's
            p.start_pack(key, "noise", 1)
            p.advance(key, 3)
            p.finish_pack(key)
            if key == "g0":
                p.add_work("noise")
        assert (p.units, p.total_units) == (9.0, 9.0)
    assert "100% | 9/9 config-epochs" in out.getvalue().splitlines()[-1]
    assert replay(json.loads(trace_path.read_text()))[-1][1] == pytest.approx(1.0)
