"""Run a study: check everything before Ray starts, plan the packs still to run, and hand them
to the Ray Tune driver."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass

from fairdp.engine import describe_architecture, resolve_device
from fairdp.errors import InputError
from fairdp.methods import get_method
from fairdp.study._estimate import (
    describe_reference,
    makespan,
    pack_fixed,
    study_methods,
    study_unit_costs,
)
from fairdp.study._local import EXECUTORS, run_packs_locally
from fairdp.study._lock import results_lock
from fairdp.study._plan import check_compatible, plan_packs, record_plan
from fairdp.study._progress import Progress, duration
from fairdp.study._ray import address_source, check_reachable, ray_session, resolve_address
from fairdp.study._signals import sigterm_as_ctrl_c
from fairdp.study._spec import GPU_PACK_CAP, MAX_SEED, StudySpec
from fairdp.study._store import CHECKPOINTS, ResultStore, corrupt_error
from fairdp.study._trial import StudyContext, check_same_training, load_study_data, protocol_json
from fairdp.study._tune import (
    check_trial_fits,
    cluster_nodes,
    machine_resources,
    run_packs,
    slots_for,
    worker_slots,
)


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


def default_results(spec: StudySpec) -> str:
    return f"results/{spec.name}"


def with_overrides(spec: StudySpec, seeds: list[int] | None = None, epochs: int | None = None) -> StudySpec:
    """The spec with ``--seeds`` / ``--epochs`` applied (validated like the file's values)."""
    if seeds is not None:
        if not seeds or any(s < 0 or s > MAX_SEED for s in seeds) or len(set(seeds)) != len(seeds):
            raise InputError(f"--seeds: needs distinct integers in [0, 2**63 - 1], got {seeds}")
        spec = dataclasses.replace(spec, seeds=tuple(seeds))
    if epochs is not None:
        if epochs < 1:
            raise InputError(f"--epochs: must be >= 1, got {epochs}")
        spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, epochs=epochs))
    return spec


def settings_lines(spec: StudySpec, methods=None) -> list[str]:
    """What each method of the study trains with, printed once when a run starts."""
    names = list(methods or (m.name for m in spec.methods))
    probes = [k for k, on in (("leakage", spec.leakage), ("MDL", spec.mdl)) if on]
    precision = spec.train.precision or "tf32 on CUDA, float32 on a CPU"
    lines = [f"fairdp {spec.name}: {spec.train.epochs} epochs, batch {spec.train.batch_size}, dtype "
             f"{spec.train.dtype}, precision {precision}; " + (f"{' and '.join(probes)} by {spec.probe.describe()}" if probes
                                       else "no leakage or MDL probe")]
    width = max(len(n) for n in names)
    for name in names:
        ms = spec.method_settings[name]
        how = f"{ms.optimizer} lr {ms.lr:g}" if ms.optimizer else "no gradient training"
        plan = next(m for m in spec.methods if m.name == name) if name in {m.name for m in spec.methods} else None
        if plan is not None and ms.swept:
            swept = {k: sorted({c[k] for c in plan.configs}) for k in ms.swept}
            how = f"{ms.optimizer} " + ", ".join(f"{k} {{{', '.join(f'{v:g}' for v in vs)}}}" for k, vs in swept.items())
        spec_of = getattr(get_method(name), "spec", None)
        arch = (describe_architecture(ms.architecture, spec_of.adversaries if spec_of else 0)
                if ms.architecture else "no network")
        lines.append(f"  {name.ljust(width)}  {how}; {arch}")
    prune = spec.train.prune
    if prune is not None:
        lines.append(f"  pruning inside packs after epochs {', '.join(map(str, prune.rungs))}: configs dominated by "
                     f"{prune.margin:g} points on valid accuracy and valid {prune.fairness} stop, at least "
                     f"{prune.keep:g} of a pack continue")
    return lines


def run_study(spec: StudySpec, results: str | None = None, address: str | None = None, *, repair: bool = False,
              progress_stream=None, num_cpus: int | None = None, executor: str = "ray",
              dry_run: bool = False, checkpoint_every_s: float = 600.0) -> RunSummary:
    """Run every (method, config, seed) of ``spec`` not already stored under ``results``.

    ``executor`` "ray" (the default, and the only one for clusters) runs packs as Ray Tune
    trials; "local" runs them one after another in this process, without Ray, into the
    same store with the same resume semantics.

    Everything that can be checked is checked before Ray starts or a file is written: the
    spec (already validated), the dataset (loaded here, so a missing file is named), the
    results location (corrupt files are an error unless ``repair``), and that stored rows
    come from the same study, dataset and epochs.

    Each pack in training saves a checkpoint every ``checkpoint_every_s`` seconds (0: never)
    under the results; a rerun after the run was killed resumes those packs from there.
    """
    if executor not in EXECUTORS:
        raise InputError(f"--executor: must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if executor == "local" and address is not None:
        raise InputError("--address: a cluster address needs --executor ray; the local executor runs in this process")
    if not checkpoint_every_s >= 0:  # NaN too
        raise InputError(f"--checkpoint-every: must be >= 0 seconds (0: no checkpoints), got {checkpoint_every_s}")
    if executor == "ray" and resolve_address(address) is not None:  # before anything is written
        check_reachable(resolve_address(address), address_source(address))
    t0 = time.monotonic()
    # absolute: Ray Tune runs each trial in its own working directory
    results = ResultStore(results or default_results(spec)).location
    ctx = dataclasses.replace(StudyContext.from_spec(spec, results), checkpoint_every_s=float(checkpoint_every_s),
                              driver=(socket.gethostname(), os.getpid()) if executor == "ray" else None)
    store = ctx.store()
    store.probe()
    with said_if_slow(f"fairdp run {spec.name}: loading dataset {spec.dataset}", progress_stream or sys.stderr):
        data = load_study_data(ctx)
    ctx = dataclasses.replace(ctx, protocol=protocol_json(spec, data))  # with the data's fingerprint
    for plan in spec.methods:
        get_method(plan.name).check_dataset(data)
    store.check_writable()
    if executor == "ray" and resolve_address(address) is None:  # embedded: the machine's own resources, before Ray
        check_trial_fits(spec, [machine_resources(num_cpus)], "this machine")
    if dry_run:
        return _dry_run(spec, store, results, address, executor, progress_stream, num_cpus, t0, len(data.splits["train"]))
    lock = results_lock(store.root, "run", progress_stream) if store.is_local else contextlib.nullcontext()
    with lock:
        return _run_unlocked(spec, ctx, store, results, address, repair, progress_stream, num_cpus, executor, t0,
                             len(data.splits["train"]))


SLOW_S = 1.0  # a step that takes longer says what it is doing


@contextlib.contextmanager
def said_if_slow(text: str, stream, after_s: float = SLOW_S):
    """Print ``text`` if the block is still running after ``after_s`` seconds: a slow step
    says what it is, a fast one (or one that fails at once, whose error is then the only
    line) stays quiet."""
    timer = threading.Timer(after_s, lambda: print(text, file=stream, flush=True))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def packs_train_on_gpu(spec: StudySpec, executor: str) -> bool:
    """Whether the study's packs will train on a GPU: a Ray trial gets one only if it asks
    (``gpus_per_trial``); a local run trains where ``train.device`` says, CUDA if present."""
    if executor == "ray":
        return spec.resources.gpus_per_trial > 0
    return resolve_device(spec.train.device).type == "cuda"


GPU_PLAN_LINE = ("  on a GPU each method's seed is one pack (up to {cap} configs; the memory rule trains a pack "
                 "that does not fit in chunks): one big pack per GPU fills it, many small ones queue kernel launches")


def _dry_run(spec, store, results, address, executor, stream, num_cpus, t0, train_rows) -> RunSummary:
    """Print the plan (configs, packs, slots, estimated time) without training, writing or starting Ray."""
    stream = stream or sys.stderr
    stored, _ = store.read(on_corrupt="collect")
    if executor == "local":
        slots, where = 1, "in this process (--executor local)"
    elif resolve_address(address) is None:
        have = machine_resources(num_cpus)
        cpus = have["CPU"]
        slots = slots_for(spec, cpus, have["GPU"])
        where = f"on embedded Ray ({cpus} CPUs, {spec.resources.cpus_per_trial:g} per trial)"
    else:
        slots, where = 1, f"on {resolve_address(address)} (slots are asked of the cluster when it runs)"
    gpu = packs_train_on_gpu(spec, executor)
    packs, done = plan_packs(spec, stored, slots, gpu)
    configs = sum(len(p.configs) for p in packs)
    for line in settings_lines(spec):
        print(line, file=stream, flush=True)
    resuming = len(_resuming(store, packs))
    resuming = f", {resuming} of the packs from their checkpoints" if resuming else ""
    print(f"fairdp run {spec.name} --dry-run: {configs} configs to train in {len(packs)} packs{resuming}, {slots} at "
          f"a time {where}; {done} already stored in {results}. Nothing was run or written.", file=stream, flush=True)
    by_method: dict[str, int] = {}
    for p in packs:
        by_method[p.method] = by_method.get(p.method, 0) + len(p.configs)
    for name, n in by_method.items():
        print(f"  {name}: {n} configs", file=stream, flush=True)
    if gpu and spec.pack_size is None:
        print(GPU_PLAN_LINE.format(cap=GPU_PACK_CAP), file=stream, flush=True)
    if packs:
        print(estimate_line(spec, packs, slots, train_rows, remote=resolve_address(address) is not None
                            and executor == "ray"), file=stream, flush=True)
    return RunSummary(results, len(packs), configs, done, 0, time.monotonic() - t0, [], 0)


def estimate_line(spec: StudySpec, packs, slots: int, train_rows: int, remote: bool = False) -> str:
    """The dry run's time estimate from the reference figures, saying what they are."""
    costs = study_unit_costs(spec, train_rows)
    if not costs:
        return "  estimate: none (no reference figures; benchmarks/bench_costs.py --write measures them)"
    fixed = pack_fixed(study_methods(spec), train_rows)
    work = [(p.method, len(p.configs) * spec.train.epochs) for p in packs]
    missing = sorted({m for m, _ in work} - set(costs))
    lacking = f"; {', '.join(missing)} not included (no figure)" if missing else ""
    where = describe_reference()
    if resolve_device(spec.train.device).type == "cuda":
        return (f"  estimate: none for a GPU run; the reference figures are from a {where}. A CPU run "
                f"would take about {duration(makespan(work, costs, slots, fixed))} of training{lacking}")
    if remote:
        return (f"  estimate: about {duration(makespan(work, costs, 1, fixed))} of compute on one slot of the reference "
                f"{where}, divided among the cluster's slots{lacking}")
    return (f"  estimate: about {duration(makespan(work, costs, slots, fixed))} of training and probes on {slots} "
            f"slot(s) at the reference speed ({where}; Ray start-up not included){lacking}")


def _drop_finished_checkpoints(store: ResultStore, stored) -> None:
    """Delete the checkpoints of packs whose rows are stored with status ok (left by a run
    killed between storing a pack and deleting its checkpoint): nothing resumes them. Those
    of packs this run does not plan are kept: a run of other seeds may."""
    if not len(stored) or not store.is_local:  # locally under the run's lock: nobody is training them
        return
    done = set(stored.loc[stored["status"] == "ok", "pack_id"])
    for pid in store.checkpoint_ids():
        if pid in done:
            store.checkpoint(pid).drop()


def _resuming(store: ResultStore, packs) -> set[str]:
    """The planned packs that have a checkpoint to resume from."""
    return set(store.checkpoint_ids()) & {p.id for p in packs}


def _announce_checkpoints(spec: StudySpec, store: ResultStore, packs, stream) -> None:
    resuming = _resuming(store, packs)
    if resuming:
        print(f"fairdp run {spec.name}: {len(resuming)} of the packs resume from checkpoints in "
              f"{store.root}/{CHECKPOINTS}", file=stream, flush=True)


def _run_unlocked(spec, ctx, store, results, address, repair, progress_stream, num_cpus, executor, t0,
                  train_rows) -> RunSummary:
    stored, corrupt = store.read(on_corrupt="collect")
    repaired = []
    if corrupt:
        if not repair:
            raise corrupt_error(corrupt)
        for c in corrupt:
            repaired.append(store.move_aside(c.path))
            print(f"fairdp run: moved aside {c.path} ({c.reason})", file=progress_stream or sys.stderr)
    check_compatible(spec, stored, results)
    check_same_training(ctx, stored, results, [m.name for m in spec.methods])
    store.remove_temporaries()
    _drop_finished_checkpoints(store, stored)
    record_plan(store, spec, repair, progress_stream)  # before training: an interrupted run's analysis knows what is missing
    for line in settings_lines(spec):
        print(line, file=progress_stream or sys.stderr, flush=True)
    left, done = plan_packs(spec, stored, 1)
    if not left:  # nothing left to run: no Ray to start
        print(f"fairdp run {spec.name}: all {done} configs already stored in {results}; nothing to run",
              file=progress_stream or sys.stderr, flush=True)
        return RunSummary(results, 0, 0, done, 0, time.monotonic() - t0, repaired, 0)
    embedded = executor == "ray" and resolve_address(address) is None
    if executor == "ray":
        what = "starting an embedded Ray on 127.0.0.1" if embedded else \
            f"connecting to the Ray cluster at {resolve_address(address)}"
        print(f"fairdp run {spec.name}: {what}", file=progress_stream or sys.stderr, flush=True)
    session = ray_session(address, num_cpus=num_cpus) if executor == "ray" else contextlib.nullcontext()
    with session:
        if executor == "ray" and not embedded:
            check_trial_fits(spec, cluster_nodes(), f"the cluster at {resolve_address(address)}")
        slots = worker_slots(spec) if executor == "ray" else 1
        packs, done = plan_packs(spec, stored, slots, packs_train_on_gpu(spec, executor))
        configs = sum(len(p.configs) for p in packs)
        epochs = spec.train.epochs
        pending: dict[str, float] = {}
        pending_packs: dict[str, int] = {}
        for p in packs:
            pending[p.method] = pending.get(p.method, 0.0) + len(p.configs) * epochs
            pending_packs[p.method] = pending_packs.get(p.method, 0) + 1
        progress = Progress(f"run {spec.name}", len(packs), configs, epochs=epochs, slots=min(slots, len(packs)),
                            pending=pending, pending_packs=pending_packs,
                            reference=study_unit_costs(spec, train_rows, probes=False), stream=progress_stream)
        print(f"fairdp run {spec.name}: {configs} configs to train in {len(packs)} packs, {min(slots, len(packs))} "
              f"at a time; {configs * epochs:,} config-epochs", file=progress.stream, flush=True)
        if done:
            print(f"fairdp run {spec.name}: {done} configs already stored in {results}, skipped",
                  file=progress.stream, flush=True)
        _announce_checkpoints(spec, store, packs, progress.stream)
        execute = run_packs if executor == "ray" else run_packs_locally
        with progress, sigterm_as_ctrl_c():
            failed, unfinished = execute(ctx, packs, spec, progress)
    return RunSummary(results, len(packs), configs, done, failed, time.monotonic() - t0, repaired, unfinished)
