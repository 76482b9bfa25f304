"""The Ray Tune driver: packs as Tune trials, worker slots and resources, the run config, progress.

A Ray session must be up (``_ray.ray_session``) before these are called; Ray is imported
lazily so that the rest of ``fairdp.study`` (specs, the store, reading results) does not
pay for it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field

import numpy as np

from fairdp.engine._shared import native_bf16
from fairdp.errors import InputError, RunAborted, last_line
from fairdp.study._context import StudyContext
from fairdp.study.ray._ray import quiet_loggers
from fairdp.study.ray._ray_trainables import (
    LOG_RECORDS,
    PACK_DONE,
    PACK_RUN,
    STORE_FAULT,
    one_pack_runs,
    pack_runs,
    pack_table,
    pack_trainable,
)
from fairdp.study.run._plan import Pack
from fairdp.study.run._progress import Progress
from fairdp.study.spec._spec import StudySpec
from fairdp.study.store._lock import alive
from fairdp.study.store._rows import write_error_rows


def driver_log_level() -> int:
    """The level of the ``fairdp`` logger here, in the driver: passed with each trial's
    arguments, the level its worker logs at (``worker_logging``)."""
    return logging.getLogger("fairdp").getEffectiveLevel()


def relog(result: dict) -> None:
    """In the driver: log the records a trial's ``result`` carries (``TrialRecords.drain``)
    through the driver's loggers of the same names, as if emitted here; none when the trial
    ran in this very process (its records were logged here already)."""
    said = result.get(LOG_RECORDS)
    if not said or said.get("pid") == os.getpid():
        return
    for level, name, message in said["records"]:
        logging.getLogger(name).log(level, message)


@contextlib.contextmanager
def lenient_metric_check():
    """Tune's strict metric check off while a searcher runs: it would refuse the trials'
    progress reports, which carry config-epochs and not the searcher's metric (a searcher
    reads the final result, which has it). Tune reads the variable at each check."""
    key = "TUNE_DISABLE_STRICT_METRIC_CHECKING"
    before = os.environ.get(key)
    os.environ[key] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


def _store_fault_stopper():
    """Stops every trial once one reports that the results store cannot take a write (a full
    disk, an object store that did not answer: each would fail the same way); ``message``
    keeps what it said."""
    from ray import tune

    class StoreFaultStopper(tune.Stopper):
        def __init__(self):
            self.message: str | None = None

        def __call__(self, trial_id, result):
            if STORE_FAULT in result:
                self.message = result[STORE_FAULT]
                return True
            return False

        def stop_all(self):
            return self.message is not None

    return StoreFaultStopper()


@dataclass
class PackRuns:
    """A round of a run's packs as the driver follows it: the runs that one trial each trains
    (``pack_runs``: (start, stop) rows), each pack's progress key (its id), method and config
    count, and which packs a trial said are stored and which one each trial trains now."""

    packs: list[Pack]
    bounds: np.ndarray
    done: set[int] = field(default_factory=set)
    current: dict[str, int] = field(default_factory=dict)  # trial id -> the pack it trains

    def of(self, config: dict) -> range:
        """The numbers of the packs of the trial with ``config``."""
        start, stop = self.bounds[int(config[PACK_RUN])]
        return range(int(start), int(stop))

    def left(self, config: dict) -> list[int]:
        """The packs of the trial with ``config`` that no trial said are stored."""
        return [i for i in self.of(config) if i not in self.done]


def _tune_callback(progress: Progress, method: str | None, runs: PackRuns | None = None):
    """Tune events to ``progress``: a trial trains a run of packs (``runs``, each pack followed
    on its own under its id), a pack a searcher handed it, or, for a per-config search, one
    config of ``method``."""
    from ray import tune

    class _ProgressCallback(tune.Callback):
        def __init__(self):
            # failed trial id -> config: a trial whose worker died before it ran (the memory
            # monitor's kill) comes back in the result grid without its config
            self.failed_configs: dict[str, dict] = {}

        def _in_run(self, trial) -> bool:
            return runs is not None and PACK_RUN in trial.config

        def _key(self, trial) -> str:
            """The progress key of what ``trial`` trains now."""
            if self._in_run(trial) and trial.trial_id in runs.current:
                return runs.packs[runs.current[trial.trial_id]].id
            return trial.trial_id

        def _start_next(self, trial) -> None:
            """``trial``'s next pack not yet stored starts (none left: nothing)."""
            left = runs.left(trial.config)
            if not left:
                runs.current.pop(trial.trial_id, None)
                return
            runs.current[trial.trial_id] = left[0]
            pack = runs.packs[left[0]]
            progress.start_pack(pack.id, pack.method, len(pack.configs))

        def on_trial_start(self, iteration, trials, trial, **info):
            if self._in_run(trial):
                self._start_next(trial)
            elif "pack" in trial.config:
                progress.start_pack(trial.trial_id, trial.config["pack"]["method"], len(trial.config["pack"]["configs"]))
            else:
                progress.start_pack(trial.trial_id, method or "", 1)

        def on_trial_result(self, iteration, trials, trial, result, **info):
            relog(result)  # what the trial's worker said, before its pack counts as done
            if "configs" in result and PACK_DONE in result and self._in_run(trial):
                i = int(result[PACK_DONE])
                if i not in runs.done:  # else a restarted run says again what an earlier attempt stored
                    runs.done.add(i)
                    progress.finish_pack(runs.packs[i].id)
                    self._start_next(trial)
            elif "configs" in result:
                progress.finish_pack(trial.trial_id)
            elif "units" in result:
                progress.advance(self._key(trial), float(result["units"]))

        def on_trial_error(self, iteration, trials, trial, **info):
            self.failed_configs[trial.trial_id] = trial.config
            if self._in_run(trial) and len(runs.of(trial.config)) > 1:
                progress.retry_pack(self._key(trial))  # its packs not stored run again, one a trial (run_packs)
            else:
                progress.fail_pack(self._key(trial))

        def on_trial_recover(self, iteration, trials, trial, **info):
            progress.retry_pack(self._key(trial))

    return _ProgressCallback()


def check_trial_fits(spec: StudySpec, nodes: list[dict], where: str) -> None:
    """InputError unless some node has the CPUs and GPUs one trial asks for: Ray would
    otherwise wait forever for resources that never come. ``nodes`` are each node's total
    resources (``{"CPU": 2.0, "GPU": 1.0}``)."""
    if any(_fits_trial(spec, n) for n in nodes):
        return
    cpus, gpus = spec.resources.cpus_per_trial, spec.resources.gpus_per_trial
    have = "; ".join(f"{n.get('CPU', 0):g} CPUs, {n.get('GPU', 0):g} GPUs" for n in nodes) or "no nodes"
    raise InputError(f"resources: a trial asks for {cpus:g} CPUs and {gpus:g} GPUs, but no node of {where} has them "
                     f"({have}); lower resources.cpus_per_trial / gpus_per_trial")


def _fits_trial(spec: StudySpec, resources: dict) -> bool:
    """Whether a node with total ``resources`` has the CPUs and GPUs one trial asks for."""
    return (resources.get("CPU", 0) >= spec.resources.cpus_per_trial
            and resources.get("GPU", 0) >= spec.resources.gpus_per_trial)


def cluster_nodes() -> list[dict]:
    """Total resources of each live node of the connected Ray cluster."""
    import ray

    return [n["Resources"] for n in ray.nodes() if n.get("Alive")]


NODE_PROBE_TIMEOUT_S = 120.0


def nodes_native_bf16(spec: StudySpec) -> bool:
    """Whether every live node of the connected cluster that can run one of ``spec``'s trials has
    native bf16 matmuls, asked of each node by a task pinned to it (``native_bf16`` reads the
    CPU's flags there). A node that does not answer in time counts as one without."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and _fits_trial(spec, n["Resources"])]
    probe = ray.remote(num_cpus=0)(native_bf16)  # no CPU asked: it runs beside busy trials
    refs = [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote("cpu")
            for node in nodes]
    try:
        return bool(refs) and all(ray.get(refs, timeout=NODE_PROBE_TIMEOUT_S))
    except ray.exceptions.GetTimeoutError:
        return False


def slots_for(spec: StudySpec, cpus: float, gpus: float = 0.0) -> int:
    """Trials ``cpus`` CPUs and ``gpus`` GPUs run at once (at least one): a GPU trial is
    bounded by the GPUs too (16 CPUs and one GPU run one ``gpus_per_trial: 1`` trial at a time)."""
    slots = int(cpus // spec.resources.cpus_per_trial)
    if spec.resources.gpus_per_trial > 0:
        slots = min(slots, math.floor(gpus / spec.resources.gpus_per_trial + 1e-9))
    return max(1, slots)


def worker_slots(spec: StudySpec) -> int:
    """Trials the connected Ray cluster runs at once (at least one)."""
    import ray

    have = ray.cluster_resources()
    return slots_for(spec, have.get("CPU", 1), have.get("GPU", 0))


def machine_resources(num_cpus: int | None = None) -> dict:
    """What an embedded Ray on this machine is started with: ``num_cpus`` or the CPUs this
    process may use (``available_cpus``), and the GPUs torch sees."""
    import torch

    return {"CPU": num_cpus or available_cpus(), "GPU": torch.cuda.device_count()}


def available_cpus(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """The CPUs this process may use, as Ray counts a node's: the CPUs it may run on, bounded by
    a cgroup's CPU quota (a container's ``--cpus``; cgroup v2 ``cpu.max`` or v1 CFS), truncated."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = _cgroup_quota(cgroup_root)
    return max(1, min(cpus, int(quota))) if quota is not None else cpus


def _cgroup_quota(root: str) -> float | None:
    """The cgroup's CPU quota in CPUs; None when it has none or there is no cgroup file to read."""
    try:  # cgroup v2: "max 100000" (no quota) or "200000 100000" (two CPUs)
        quota, period = _read(os.path.join(root, "cpu.max")).split()[:2]
    except (OSError, ValueError):
        try:  # cgroup v1: a quota of -1 is none
            quota = _read(os.path.join(root, "cpu", "cpu.cfs_quota_us"))
            period = _read(os.path.join(root, "cpu", "cpu.cfs_period_us"))
        except OSError:
            return None
    try:
        cpus = int(quota) / int(period)
    except (ValueError, ZeroDivisionError):  # "max", or a file not as written above
        return None
    return cpus if cpus > 0 else None


def _read(path: str) -> str:
    with open(path) as f:
        return f.read().strip()


def trial_resources(spec: StudySpec) -> dict:
    return {"cpu": spec.resources.cpus_per_trial, "gpu": spec.resources.gpus_per_trial}


TUNE_DIR_PREFIX = "fairdp-tune-"


def remove_stale_tune_dirs() -> list[str]:
    """Remove Tune storage directories that a killed run left in the temporary directory:
    those named for a process of this machine that no longer runs. Returns what it removed."""
    removed = []
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        if not name.startswith(TUNE_DIR_PREFIX):
            continue
        pid = name[len(TUNE_DIR_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or alive(int(pid)):
            continue  # an older unnamed directory, or a run still going
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        removed.append(name)
    return removed


# Tune's own advice that fairdp replaces: a Tuner.restore(...) of a storage path fairdp
# deletes (fairdp resumes from its store with the same command), and per-trial metric
# fetch failures that fairdp reports as failed or unfinished packs.
TUNE_NOISE = {
    "ray.tune.tune": ("Resume experiment with", "Resume training with"),
    "ray.tune.analysis.experiment_analysis": ("Failed to fetch metrics",),
}


@contextlib.contextmanager
def tune_run_config(name: str, spec: StudySpec, progress: Progress, method: str | None = None,
                    runs: PackRuns | None = None):
    """Tune's RunConfig for a study: the spec's retries, progress lines (a run's trials training
    ``runs``), and the JSON logger that result grids read back; its storage is a
    temporary directory removed afterwards (rows live in the results store, so Tune keeps
    nothing worth resuming from)."""
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback

    remove_stale_tune_dirs()
    storage = tempfile.mkdtemp(prefix=f"{TUNE_DIR_PREFIX}{os.getpid()}-")
    try:
        with quiet_loggers(TUNE_NOISE):
            yield tune.RunConfig(name=name, storage_path=storage, verbose=0, stop=_store_fault_stopper(),
                                 failure_config=tune.FailureConfig(max_failures=spec.resources.max_failures),
                                 callbacks=[_tune_callback(progress, method, runs), JsonLoggerCallback()])
    finally:
        shutil.rmtree(storage, ignore_errors=True)


SLOTS_EVERY_S = 5.0  # how often the driver looks at the cluster's resources for the ETA


@contextlib.contextmanager
def watching_slots(spec: StudySpec, progress: Progress, cap: int):
    """For the block, tell ``progress`` when the cluster's trial slots change (a node died
    or joined), so that the ETA spreads the work left over the slots there are."""
    import threading

    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(SLOTS_EVERY_S):
            try:
                slots = worker_slots(spec)
            except Exception:  # noqa: BLE001 - the ETA must never cost the run
                continue
            progress.resize(min(slots, cap))

    thread = threading.Thread(target=watch, name="fairdp-slots", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=2 * SLOTS_EVERY_S)


def run_packs(ctx: StudyContext, packs: list[Pack], spec: StudySpec, progress: Progress) -> tuple[int, int]:
    """Run packs as Ray Tune trials: (failed, unfinished) pack counts.

    Each trial trains a run of packs (``pack_runs``: one pack a trial unless there are many a
    slot). Unfinished packs are those a Ctrl-C (Tune stops gracefully on SIGINT) kept from
    finishing. A trial that fails is retried ``resources.max_failures`` times, each time from the
    first of its packs not yet stored. A pack that still fails is stored as error rows (status
    'error', the exception's last line), which the next run retries; where it failed in a run of
    several packs, that run's packs not yet stored are first trained again one a trial, each
    with retries of its own, so that a failing pack costs no other pack its rows.
    """
    failed, unfinished, again = _run_round(ctx, packs, pack_runs(len(packs), worker_slots(spec)), spec, progress)
    if again and not unfinished:
        f, unfinished, _ = _run_round(ctx, again, one_pack_runs(len(again)), spec, progress)
        failed += f
    else:  # a Ctrl-C stopped the round: the next run trains them
        unfinished += len(again)
    return failed, unfinished


def _run_round(ctx: StudyContext, packs: list[Pack], bounds: np.ndarray, spec: StudySpec,
               progress: Progress) -> tuple[int, int, list[Pack]]:
    """``packs`` trained in the runs ``bounds``, one Tune trial a run: (failed, unfinished, the
    packs not stored of runs of several packs that failed)."""
    from ray import tune

    # the packs and runs handed to every trial once, each trial's config its run's number
    runs = PackRuns(packs, bounds)
    trainable = tune.with_resources(tune.with_parameters(pack_trainable, ctx=ctx, log_level=driver_log_level(),
                                                         packs=pack_table([p.to_dict() for p in packs]), runs=bounds),
                                    trial_resources(spec))
    with tune_run_config(spec.name, spec, progress, runs=runs) as run_config:
        with aborted_by_ray(ctx.results), watching_slots(spec, progress, len(packs)):
            grid = tune.Tuner(
                trainable,
                param_space={PACK_RUN: tune.grid_search(list(range(len(bounds))))},
                tune_config=tune.TuneConfig(reuse_actors=True, trial_dirname_creator=lambda t: t.trial_id,
                                            trial_name_creator=lambda t: f"pack_{t.trial_id}"),
                run_config=run_config,
            ).fit()
        if run_config.stop.message is not None:
            raise RunAborted(run_config.stop.message)
        failed_configs = run_config.callbacks[0].failed_configs
        store = ctx.store()
        failed = unfinished = 0
        again: list[Pack] = []
        for res in grid:
            # a trial's directory is named by its id (trial_dirname_creator above)
            config = res.config or failed_configs.get(os.path.basename(str(res.path or "")))
            if config is None:  # no pack to name: its configs have no rows, so the next run trains them
                continue
            left = runs.left(config)
            if res.error is None:
                unfinished += len(left)
            elif len(runs.of(config)) > 1:
                again += [packs[i] for i in left]
            elif left:
                failed += 1
                write_error_rows(store, ctx, packs[left[0]], ray_error_line(res.error))
    return failed, unfinished, again


OOM_KILL = "killed due to the node running low on memory"


def ray_error_line(error: BaseException) -> str:
    """One line for a failure Ray reports: its memory monitor's kill said as such (its own
    text ends in advice about Ray's settings), anything else by its last line."""
    text = str(error)
    if OOM_KILL in text:
        used = next((ln.split(" was ", 1)[1].split(" (")[0] for ln in text.splitlines()
                     if OOM_KILL in ln and " was " in ln), "")
        return (f"OutOfMemoryError: Ray's memory monitor killed the trial's worker, the node running low on memory"
                f"{f' ({used})' if used else ''}; fewer slots (resources.cpus_per_trial) or a smaller pack_size "
                f"needs less")
    return last_line(text, type(error).__name__)


@contextlib.contextmanager
def aborted_by_ray(results: str):
    """A failure Tune's scheduler raises instead of charging it to a trial (a worker killed
    while its actor starts) becomes ``RunAborted``: one line, what finished kept."""
    try:
        yield
    except (KeyboardInterrupt, InputError):
        raise
    except Exception as e:  # noqa: BLE001 - Ray raises many types; the user needs one line
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
        cause = ray_error_line(e) if OOM_KILL in str(e) else f"{type(e).__name__}: {first}"[:300]
        raise RunAborted(f"Ray Tune stopped the run: {cause}. The packs that finished are stored in {results}; "
                         f"the same command resumes") from None
