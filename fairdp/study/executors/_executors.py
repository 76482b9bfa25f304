"""Who runs a study's packs: an ``Executor``, chosen by name in ``make_executor``.

``LocalExecutor`` trains packs one after another in this process, without Ray (a GPU box
that cannot install it, a debugging run); ``RayExecutor`` runs them as Ray Tune trials on an
embedded single-node Ray or a cluster. Both write the same rows to the same store with the
same resume semantics, which ``tests/test_executor_contract.py`` checks for every registered
executor. A third executor is one subclass decorated with ``register_executor``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from fairdp.engine._shared import check_device_here, native_bf16, resolve_device
from fairdp.errors import InputError
from fairdp.study._context import StudyContext
from fairdp.study.executors._local import run_packs_locally, run_search_locally
from fairdp.study.ray._ray import address_source, check_reachable, ray_session, resolve_address
from fairdp.study.ray._tune import (
    check_trial_fits,
    cluster_nodes,
    machine_resources,
    nodes_native_bf16,
    run_packs,
    slots_for,
    worker_slots,
)
from fairdp.study.run._plan import Pack
from fairdp.study.run._progress import Progress
from fairdp.study.search._generations import GenerationPlanner
from fairdp.study.spec._precision import reads_workers
from fairdp.study.spec._spec import StudySpec


@dataclass(frozen=True)
class Capacity:
    """What an executor offers a study, asked once (``Executor.capacity``) and handed on: the
    plan cuts packs for it, the precision is chosen from it, the packs run on it."""

    slots: int                      # packs that run at once
    on_gpu: bool                    # packs train on a GPU (cut larger; full precision by default)
    native_bf16: bool | None        # every worker's CPU multiplies bf16 matrices in hardware; None: not
    #                                 asked (the study's settings fix its precision) or not known yet
    planned: bool = False           # estimated without reaching the workers (a dry run of a cluster study)


class Executor(ABC):
    """Runs packs of a study. ``session`` brackets everything that needs the executor up
    (a Ray cluster connection); ``capacity`` is asked once, as soon as the executor can
    answer (for a cluster inside ``session``; a dry run never starts it), then ``run`` or
    ``run_search`` inside ``session``."""

    name: ClassVar[str]
    remote: bool = False  # packs run on other machines (a dry run's estimate divides by their slots)

    @property
    def driver(self) -> tuple[str, int] | None:
        """(host, pid) of the process workers watch, stopping when it is gone; None when the
        packs run in it."""
        return None

    @abstractmethod
    def describe(self, spec: StudySpec) -> str:
        """Where the packs run, for the dry run's line."""

    def check_fits(self, spec: StudySpec) -> None:  # noqa: B027 - nothing to check by default
        """InputError, before anything is written, if a trial cannot run here."""

    def session(self, spec: StudySpec, announce) -> contextlib.AbstractContextManager:
        """The executor up for the duration of a block; ``announce(line)`` says what it starts."""
        return contextlib.nullcontext()

    @abstractmethod
    def capacity(self, spec: StudySpec) -> Capacity:
        """The slots, whether packs train on a GPU and whether the workers' CPUs have native
        bf16 matmuls (asked only when ``reads_workers``: the study's settings leave its
        precision open), as far as they can be known now without starting anything that
        ``session`` starts (``Capacity.planned`` when they cannot)."""

    @abstractmethod
    def run(self, ctx: StudyContext, packs: list[Pack], spec: StudySpec, progress: Progress) -> tuple[int, int]:
        """Train ``packs`` into ``ctx``'s store: (failed, unfinished) pack counts. A pack that still
        fails after ``resources.max_failures`` retries is stored as error rows; a Ctrl-C leaves the
        packs not finished unfinished."""

    @abstractmethod
    def run_search(self, ctx: StudyContext, spec: StudySpec, capacity: Capacity, planner: GenerationPlanner,
                   mode: str, progress: Progress, study_name: str, storage) -> bool:
        """Train the search's generations on ``capacity``'s slots until ``planner`` has its trials;
        True if a Ctrl-C stopped it."""


EXECUTORS: dict[str, type[Executor]] = {}
DEFAULT_EXECUTOR = "ray"  # the only one for clusters


def register_executor(cls: type[Executor]) -> type[Executor]:
    EXECUTORS[cls.name] = cls
    return cls


def make_executor(name: str, address: str | None = None, num_cpus: int | None = None) -> Executor:
    """The executor called ``name`` (``--executor``), checked before anything is written: a
    cluster address is reachable, and only an executor that can use one is given one."""
    if name not in EXECUTORS:
        raise InputError(f"--executor: must be one of {', '.join(EXECUTORS)}, got {name!r}")
    return EXECUTORS[name](address, num_cpus)


@register_executor
class RayExecutor(Executor):
    """Packs as Ray Tune trials on an embedded single-node Ray (no address) or a cluster."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None):
        self.address, self.num_cpus = resolve_address(address), num_cpus
        self.remote = self.address is not None
        if self.remote:
            check_reachable(self.address, address_source(address))

    @property
    def driver(self) -> tuple[str, int]:
        return socket.gethostname(), os.getpid()

    def describe(self, spec: StudySpec) -> str:
        if self.remote:
            return f"on {self.address} (slots are asked of the cluster when it runs)"
        cpus = machine_resources(self.num_cpus)["CPU"]
        return f"on embedded Ray ({cpus} CPUs, {spec.resources.cpus_per_trial:g} per trial)"

    def check_fits(self, spec: StudySpec) -> None:
        if not self.remote:  # a cluster's nodes are checked once connected (``session``)
            check_device_here(spec.train.device)
            check_trial_fits(spec, [machine_resources(self.num_cpus)], "this machine")

    @contextlib.contextmanager
    def session(self, spec: StudySpec, announce):
        announce(f"connecting to the Ray cluster at {self.address}" if self.remote
                 else "starting an embedded Ray on 127.0.0.1")
        # an embedded Ray is given what ``capacity`` planned for, so the two never differ
        have = {} if self.remote else machine_resources(self.num_cpus)
        with ray_session(self.address, num_cpus=have.get("CPU"), num_gpus=have.get("GPU")):
            if self.remote:
                nodes = cluster_nodes()
                check_trial_fits(spec, nodes, f"the cluster at {self.address}")
                check_cluster_device(spec, nodes, f"the cluster at {self.address}")
            yield

    def capacity(self, spec: StudySpec) -> Capacity:
        on_gpu = spec.resources.gpus_per_trial > 0  # a trial gets a GPU only if it asks
        asks = reads_workers(spec.train, on_gpu)
        if _ray_up():  # connected (a cluster, inside ``session``) or a Ray the caller started: it answers
            return Capacity(worker_slots(spec), on_gpu,
                            (nodes_native_bf16(spec) if self.remote else native_bf16("cpu")) if asks else None)
        if self.remote:  # a dry run does not connect: one slot, the nodes not asked
            return Capacity(1, on_gpu, None, planned=True)
        have = machine_resources(self.num_cpus)  # what the embedded Ray ``session`` starts will have
        return Capacity(slots_for(spec, have["CPU"], have["GPU"]), on_gpu, native_bf16("cpu") if asks else None)

    def run(self, ctx, packs, spec, progress):
        with _own_signal_handlers():
            return run_packs(ctx, packs, spec, progress)

    def run_search(self, ctx, spec, capacity, planner, mode, progress, study_name, storage):
        # Ray Tune's search modules load only when a search runs
        from fairdp.study.ray._ray_search import run_search_on_ray

        with _own_signal_handlers():
            run_search_on_ray(ctx, spec, capacity.slots, study_name, storage, planner, mode, progress)
        return False


def _ray_up() -> bool:
    """Whether this process is connected to a Ray (importing Ray to ask would cost a dry run
    seconds, and a process that never imported it is not connected)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def check_cluster_device(spec: StudySpec, nodes: list[dict], where: str) -> None:
    """InputError, before any pack trains, if ``train.device`` asks for CUDA and no node of the
    cluster (``nodes``: each node's total resources) has a GPU: the driver's own GPUs do not count."""
    device = spec.train.device
    if device is not None and resolve_device(device).type == "cuda" and not any(n.get("GPU", 0) for n in nodes):
        raise InputError(f"train.device: {device} asked for, but no node of {where} has a GPU; use cpu")


@contextlib.contextmanager
def _own_signal_handlers():
    """Tune installs its own SIGINT handler while it runs and leaves it there: a later local run
    in the same process (a notebook) would never hear Ctrl-C. Put back what was there."""
    before = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, before)


@register_executor
class LocalExecutor(Executor):
    """Packs one after another in this process, without Ray."""

    name = "local"

    def __init__(self, address: str | None = None, num_cpus: int | None = None):
        if address is not None:
            raise InputError("--address: a cluster address needs --executor ray; the local executor runs in this process")

    def describe(self, spec: StudySpec) -> str:
        return "in this process (--executor local)"

    def check_fits(self, spec: StudySpec) -> None:
        check_device_here(spec.train.device)

    def capacity(self, spec: StudySpec) -> Capacity:
        on_gpu = resolve_device(spec.train.device).type == "cuda"  # where train.device says, CUDA if present
        return Capacity(1, on_gpu, native_bf16("cpu") if reads_workers(spec.train, on_gpu) else None)

    def run(self, ctx, packs, spec, progress):
        return run_packs_locally(ctx, packs, spec, progress)

    def run_search(self, ctx, spec, capacity, planner, mode, progress, study_name, storage):
        return run_search_locally(ctx, spec, planner, mode, progress)
