"""Run a study: prepare (check everything before a file is written), ask the executor its
capacity once, plan (the backlog of what is left, read once from the stored rows, cut into packs
for the capacity's slots), record, execute."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from dataclasses import dataclass

import pandas as pd

from fairdp.engine._shared import resolve_device
from fairdp.errors import InputError
from fairdp.study._context import load_study_data
from fairdp.study.executors._executors import DEFAULT_EXECUTOR, Capacity, make_executor
from fairdp.study.run._estimate import (
    calibration_seconds,
    describe_reference,
    lacking_precision,
    makespan,
    pack_work,
    study_unit_costs,
)
from fairdp.study.run._plan import Backlog, Pack, record_plan
from fairdp.study.run._predictions import store_predictions
from fairdp.study.run._prepare import (
    Prepared,
    default_results,
    prepare,
    said_if_slow,
    settings_lines,
)
from fairdp.study.run._progress import Progress, duration
from fairdp.study.run._signals import sigterm_as_ctrl_c
from fairdp.study.run._timing import time_user_modules
from fairdp.study.spec._precision import PrecisionChoice
from fairdp.study.spec._spec import GPU_PACK_CAP, MAX_EPOCHS, MAX_SEED, StudySpec, checked_int
from fairdp.study.store._compact import compact_store
from fairdp.study.store._selection import store_selection
from fairdp.study.store._store import CHECKPOINTS, ResultStore

__all__ = ["RunSummary", "default_results", "run_study", "with_overrides"]

logger = logging.getLogger(__name__)


@dataclass
class RunSummary:
    results: str
    packs: int
    configs: int
    already_stored: int
    failed_packs: int
    wall_s: float
    repaired: list[str]
    unfinished_packs: int = 0  # packs a Ctrl-C stopped before they ran or finished
    plan_lines: tuple[str, ...] = ()  # a dry run's report, the plan: for the caller to print (not logged)


def run_study(spec: StudySpec, results: str | None = None, address: str | None = None, *, repair: bool = False,
              progress_stream=None, num_cpus: int | None = None, executor: str = DEFAULT_EXECUTOR,
              dry_run: bool = False, checkpoint_every_s: float = 600.0, compact: bool = True) -> RunSummary:
    """Run every (method, config, seed) of ``spec`` not already stored under ``results``.

    ``executor`` "ray" (the default, and the only one for clusters) runs packs as Ray Tune
    trials; "local" runs them one after another in this process, without Ray, into the same
    store with the same resume semantics. Everything that can be checked is checked before
    Ray starts or a file is written (``prepare``). Each pack in training saves a checkpoint
    every ``checkpoint_every_s`` seconds (0: never); a rerun after a kill resumes from there.
    ``compact``: at the end, the pack files of the seeds the run finished are merged
    (``fairdp.study.compact``); False keeps one file per pack.

    What it does is said through the ``fairdp`` logger (status lines: info; a file moved aside,
    a lock taken over: warning). The progress bar is drawn on ``progress_stream`` only (None,
    the default: no bar). ``dry_run`` trains, writes and starts nothing: the summary's
    ``plan_lines`` are the plan, for the caller to show.
    """
    t0 = time.monotonic()
    prep = prepare(spec, results, make_executor(executor, address, num_cpus), "run", [m.name for m in spec.methods],
                   progress_stream, checkpoint_every_s)
    if dry_run:  # the capacity as planned: a cluster is not connected to, nothing started
        return _dry_run(plan_run(prep, prep.executor.capacity(prep.spec), repair), t0)
    tracking = prep.tracking()  # opened now: a wrong tracker address is refused before a cluster is reached
    # a cluster is connected to first: what only its nodes can answer (a GPU for train.device, a
    # node a trial fits, the capacity) is refused before anything is written; an embedded Ray
    # starts only if something is left to train
    with _cluster_session(prep), prep.lock(), tracking:
        plan = plan_run(prep, prep.executor.capacity(prep.spec), repair)
        repaired = prep.tidy(plan.corrupt)
        _record(plan, repair)
        outcome = _execute(plan)
        if prep.spec.predictions == "selected" and not outcome.unfinished:  # a Ctrl-C: the next run gathers
            store_predictions(plan.prep, plan.backlog.configs, complete=not outcome.failed)
        if compact and outcome.packs and not outcome.unfinished:
            _compact_finished(prep)
    return RunSummary(plan.prep.results, outcome.packs, outcome.configs, plan.backlog.done, outcome.failed,
                      time.monotonic() - t0, repaired, outcome.unfinished)


# -- the stages of a run, each a value handed to the next: prepare, capacity, plan, record, execute --

@dataclass(frozen=True)
class RunPlan:
    """What a run will do: the prepared study set to its precision, the executor's capacity,
    the rows already stored, the corrupt files beside them (moved aside by a run with
    ``repair``), the backlog left and its packs. The run (under its lock) and its dry run make
    it the same way (``plan_run``)."""

    prep: Prepared
    capacity: Capacity
    stored: pd.DataFrame
    corrupt: tuple
    backlog: Backlog
    packs: tuple[Pack, ...]


@dataclass(frozen=True)
class Outcome:
    packs: int = 0
    configs: int = 0
    failed: int = 0
    unfinished: int = 0  # packs a Ctrl-C stopped before they ran or finished


def _cluster_session(prep: Prepared) -> contextlib.AbstractContextManager:
    return prep.executor.session(prep.spec, prep.say) if prep.executor.remote else contextlib.nullcontext()


def plan_run(prep: Prepared, capacity: Capacity, repair: bool) -> RunPlan:
    """The run's plan on ``capacity``, read without writing, after every refusal it makes before
    training (``Prepared.stored_rows``): what the run trains and what its dry run reports."""
    stored, corrupt = prep.stored_rows(repair)
    backlog = Backlog.from_stored(prep.spec, stored)
    return RunPlan(prep.with_stored_choices(stored, capacity), capacity, stored, tuple(corrupt), backlog,
                   tuple(backlog.packs(capacity.slots, capacity.on_gpu)))


def _record(plan: RunPlan, repair: bool) -> None:
    """What the analysis reads before a pack has trained: the plan (so an interrupted run's
    analysis knows what is missing) and the selection (the table this run prints); stale
    checkpoints dropped; the settings said."""
    prep = plan.prep
    _drop_finished_checkpoints(prep.store, plan.stored)
    record_plan(prep.store, prep.spec, repair, plan=plan.backlog.plan())
    store_selection(prep, repair)
    for line in settings_lines(prep.spec, prep.precision, sampler=prep.sampler):
        logger.info(line)


def _execute(plan: RunPlan) -> Outcome:
    """Train the plan's packs (an embedded Ray started only now, and only if there is something
    to train)."""
    prep, packs = plan.prep, list(plan.packs)
    if not packs:
        prep.say(f"all {plan.backlog.done} configs already stored in {prep.results}; nothing to run")
        return Outcome()
    local = contextlib.nullcontext() if prep.executor.remote else prep.executor.session(prep.spec, prep.say)
    with local:
        progress = _progress(prep, packs, min(plan.capacity.slots, len(packs)), plan.backlog.done)
        with progress, sigterm_as_ctrl_c():
            failed, unfinished = prep.executor.run(prep.ctx, packs, prep.spec, progress)
    return Outcome(len(packs), sum(len(p.configs) for p in packs), failed, unfinished)


def with_overrides(spec: StudySpec, seeds: list[int] | None = None, epochs: int | None = None) -> StudySpec:
    """The spec with ``--seeds`` / ``--epochs`` applied (validated like the file's values)."""
    if seeds is not None:
        if not seeds or any(s < 0 or s > MAX_SEED for s in seeds) or len(set(seeds)) != len(seeds):
            raise InputError(f"--seeds: needs distinct integers in [0, 2**63 - 1], got {seeds}")
        spec = dataclasses.replace(spec, seeds=tuple(seeds))
    if epochs is not None:
        checked_int(epochs, "--epochs", low=1, high=MAX_EPOCHS)  # as train.epochs
        spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, epochs=epochs))
    return spec


def _progress(prep: Prepared, packs: list[Pack], slots: int, done: int) -> Progress:
    """The run's progress over ``packs`` on ``slots``, after the lines that say what it will train."""
    spec, epochs = prep.spec, prep.spec.train.epochs
    configs = sum(len(p.configs) for p in packs)
    pending: dict[str, float] = {}
    pending_packs: dict[str, int] = {}
    for p in packs:
        pending[p.method] = pending.get(p.method, 0.0) + len(p.configs) * epochs
        pending_packs[p.method] = pending_packs.get(p.method, 0) + 1
    progress = Progress(f"run {spec.name}", len(packs), configs, epochs=epochs, slots=slots, pending=pending,
                        pending_packs=pending_packs,
                        reference=study_unit_costs(spec, prep.train_rows, probes=False, precision=prep.ctx.train.precision),
                        stream=prep.stream)
    prep.say(f"{configs} configs to train in {len(packs)} packs, {slots} at a time; {configs * epochs:,} config-epochs")
    if done:
        prep.say(f"{done} configs already stored in {prep.results}, skipped")
    resuming = _resuming(prep.store, packs)
    if resuming:
        prep.say(f"{len(resuming)} of the packs resume from checkpoints in {prep.store.root}/{CHECKPOINTS}")
    return progress


GPU_PLAN_LINE = ("  on a GPU each method's seed is one pack (up to {cap} configs; the memory rule trains a pack "
                 "that does not fit in chunks): one big pack per GPU fills it, many small ones queue kernel launches")


def _dry_run(plan: RunPlan, t0: float) -> RunSummary:
    """The plan (configs, packs, slots, estimated time) as the summary's ``plan_lines``,
    without training, writing or starting Ray."""
    prep, backlog, packs = plan.prep, plan.backlog, list(plan.packs)
    spec, executor, slots = prep.spec, prep.executor, plan.capacity.slots
    lines = [f"fairdp run {spec.name} --dry-run: --repair would move aside {c.path} ({c.reason})" for c in plan.corrupt]
    configs = sum(len(p.configs) for p in packs)
    lines += settings_lines(spec, prep.precision, sampler=prep.sampler)
    resuming = len(_resuming(prep.store, packs))
    resuming = f", {resuming} of the packs from their checkpoints" if resuming else ""
    lines.append(f"fairdp run {spec.name} --dry-run: {configs} configs to train in {len(packs)} packs{resuming}, "
                 f"{slots} at a time {executor.describe(spec)}; {backlog.done} already stored in {prep.results}. "
                 f"Nothing was run or written.")
    by_method: dict[str, int] = {}
    for p in packs:
        by_method[p.method] = by_method.get(p.method, 0) + len(p.configs)
    lines += [f"  {name}: {n} configs" for name, n in by_method.items()]
    if plan.capacity.on_gpu and spec.pack_size is None:
        lines.append(GPU_PLAN_LINE.format(cap=GPU_PACK_CAP))
    if packs:
        timed = _timed_modules(prep, packs)
        lines.append(estimate_line(spec, packs, slots, prep.train_rows, remote=executor.remote, choice=prep.precision,
                                   timed=timed))
    return RunSummary(prep.results, len(packs), configs, backlog.done, 0, time.monotonic() - t0, [], 0,
                      plan_lines=tuple(lines))


def _timed_modules(prep: Prepared, packs) -> dict:
    """``time_user_modules`` for the methods of ``packs`` that train a module of the user's
    (none: no timing, nothing loaded)."""
    planned = {p.method for p in packs}
    plans = [m for m in prep.spec.methods if m.name in planned and prep.spec.method_settings[m.name].architecture
             is not None and prep.spec.method_settings[m.name].architecture.models]
    if not plans:
        return {}
    data = load_study_data(prep.spec.dataset, prep.spec.dataset_options)
    with said_if_slow(f"fairdp run {prep.spec.name} --dry-run: timing {', '.join(p.name for p in plans)} on your "
                      f"modules"):
        return time_user_modules(prep.ctx, data, plans)


def estimate_line(spec: StudySpec, packs, slots: int, train_rows: int, remote: bool = False,
                  choice: PrecisionChoice | None = None, timed: dict | None = None) -> str:
    """The dry run's time estimate from the reference figures of the methods trained in the
    study's precision (``choice``, settled; float32's figures while it waits for a cluster's
    nodes), saying what they are; a method in ``timed`` (``_timing``) at what its module of the
    user's cost here."""
    precision = choice.precision if choice is not None else None
    if not study_unit_costs(spec, train_rows, precision=precision, timed=timed):
        return "  estimate: none (no reference figures; benchmarks/bench_costs.py --write measures them)"
    work, costs, fixed = pack_work(spec, packs, train_rows, precision, timed=timed)
    calibrating = calibration_seconds(spec, packs)
    methods = {method for (method, _), _ in work}
    missing = sorted(methods - {method for method, _ in costs})
    lacking = f"; {', '.join(missing)} not included (no figure)" if missing else ""
    in_float32 = lacking_precision(sorted(methods), precision)
    if in_float32:
        lacking += f"; {', '.join(in_float32)} at float32's figure (none in {precision})"
    where = describe_reference()
    if timed:
        where += f"; {', '.join(sorted(timed))} at what {'its' if len(timed) == 1 else 'their'} module of yours cost " \
                 f"here, timed on up to 2,000 rows in one thread"

    def total(on_slots: int) -> str:  # each slot calibrates for itself
        return duration(makespan(work, costs, on_slots, fixed) + calibrating)

    if resolve_device(spec.train.device).type == "cuda":
        return (f"  estimate: none for a GPU run; the reference figures are from a {where}. A CPU run "
                f"would take about {total(slots)} of training{lacking}")
    trained = f"training in {precision or spec.train.dtype}"
    if choice is not None and not choice.decided:
        trained += " (in bf16, faster, if every node has native bf16 matmuls)"
    if remote:
        return (f"  estimate: about {total(1)} of compute, {trained}, on one slot of the reference {where}, "
                f"divided among the cluster's slots{lacking}")
    return (f"  estimate: about {total(slots)} of {trained} and probes on {slots} slot(s) at the reference speed "
            f"({where}; Ray start-up not included){lacking}")


def _compact_finished(prep: Prepared) -> None:
    """Merge the pack files of the seeds this run finished (``compact_store``, under the run's
    lock), so that a store stays a few files however many packs wrote it."""
    t = time.monotonic()
    done = compact_store(prep.store, seeds={int(s) for s in prep.spec.seeds})
    if done.merged:
        prep.say(f"compacted the finished seeds' rows: {done.describe()} in {time.monotonic() - t:.1f} s")


def _drop_finished_checkpoints(store: ResultStore, stored) -> None:
    """Delete the checkpoints of packs whose rows are stored with status ok (left by a run
    killed between storing a pack and deleting its checkpoint): nothing resumes them. Those
    of packs this run does not plan are kept: a run of other seeds may."""
    if not len(stored) or not (store.is_local or store.fs.type_name == "s3"):  # under the run's lock or lease
        return
    done = set(stored.loc[stored["status"] == "ok", "pack_id"])
    for pid in store.checkpoint_ids():
        if pid in done:
            store.checkpoint(pid).drop()


def _resuming(store: ResultStore, packs) -> set[str]:
    """The planned packs that have a checkpoint to resume from."""
    return set(store.checkpoint_ids()) & {p.id for p in packs}
