"""What ``fairdp run`` and ``fairdp search`` do before training, in one place.

``prepare`` checks everything that can be checked before a file is written or Ray starts
(the checkpoint interval, the results location, the dataset, that the methods accept it,
that the results are writable, that a trial fits the executor) and returns a ``Prepared``;
under the results' lock, ``Prepared.read_stored`` reads the stored rows once (corrupt files
an error unless ``repair``) and refuses rows of another study or protocol.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from dataclasses import dataclass

import pandas as pd

from fairdp.engine._shared import describe_architecture, is_model_keyword
from fairdp.errors import InputError
from fairdp.methods import Method, get_method
from fairdp.study._context import StudyContext, load_study_data, study_store
from fairdp.study.executors._executors import Capacity, Executor
from fairdp.study.run._resume_checks import check_compatible, check_same_training, choose_sampler
from fairdp.study.spec._precision import PrecisionChoice, choose_precision, stored_precision
from fairdp.study.spec._spec import StudySpec, check_models, check_sizes_fit
from fairdp.study.store._lease import object_store_lease
from fairdp.study.store._lock import results_lock
from fairdp.study.store._store import ResultStore, corrupt_error
from fairdp.tracking._shared import TrackingSync

logger = logging.getLogger(__name__)

SLOW_S = 1.0  # a step that takes longer says what it is doing


@dataclass(frozen=True)
class Prepared:
    """A checked study, ready to run: its context (with the data's protocol), store, executor.
    A value: each later step that knows more (the precision) hands on a new one."""

    spec: StudySpec
    command: str                 # "run" or "search": how lines and the lock name it
    context: StudyContext        # the packs' context as prepared, before the precision is chosen
    store: ResultStore
    executor: Executor
    methods: tuple[str, ...]     # the methods this command trains
    train_rows: int
    stream: object               # the progress bar's (``progress_stream``); None: no bar
    precision: PrecisionChoice | None = None  # the study's precision, once ``with_stored_choices`` chose it
    sampler: str | None = None  # the Poisson sampler, chosen with the precision (``choose_sampler``)

    @property
    def ctx(self) -> StudyContext:
        """The packs' context, training in the chosen ``precision`` and drawing with the chosen
        ``sampler`` (once they are): each is held once, here, and the context derived from it."""
        if self.precision is None:
            return self.context
        return dataclasses.replace(self.context, train=dataclasses.replace(
            self.context.train, precision=self.precision.precision, sampler=self.sampler))

    @property
    def results(self) -> str:
        return self.context.results

    def say(self, line: str) -> None:
        """One of the command's status lines: an info record of the ``fairdp`` logger."""
        logger.info("fairdp %s %s: %s", self.command, self.spec.name, line)

    def lock(self) -> contextlib.AbstractContextManager:
        """The results' lock (a second run into the same results waits or is refused): a lock
        file in a local directory, a lease object on S3."""
        return results_lock(self.store.root, self.command) if self.store.is_local \
            else object_store_lease(self.store, self.command)

    def tracking(self) -> contextlib.AbstractContextManager:
        """Logging of the stored configs to the study's tracker (``tracking:``), if it has one,
        while the run lasts; the tracker is opened now, so a wrong address is refused before
        anything runs."""
        if self.spec.tracking is None:
            return contextlib.nullcontext()
        tracker = self.spec.tracking.make(self.spec.name, self.store.location)
        tracker.open()
        return TrackingSync(tracker, self.store)

    def with_stored_choices(self, stored: pd.DataFrame, capacity: Capacity) -> Prepared:
        """This study set to train in its precision (``choose_precision``), chosen once from its
        settings, the ``stored`` rows and the executor's ``capacity`` (its GPUs, its workers'
        CPUs), and to draw with its Poisson sampler (``choose_sampler``: the setting, else the
        stored rows'). A run asks a cluster's capacity once connected, so the nodes answer; only
        a dry run of a cluster study leaves the precision undecided."""
        choice = choose_precision(self.spec.train, stored_precision(stored, self.methods), capacity.on_gpu,
                                  lambda: capacity.native_bf16)
        return dataclasses.replace(self, precision=choice,
                                   sampler=choose_sampler(self.spec.train, stored, self.results))

    def stored_rows(self, repair: bool) -> tuple[pd.DataFrame, list]:
        """The stored rows and the corrupt files beside them, after every refusal a run makes
        before it trains: a corrupt file without ``repair``, rows of another study or protocol
        (InputError). It only reads: a dry run refuses exactly what its run refuses."""
        stored, corrupt = self.store.read(on_corrupt="collect")
        if corrupt and not repair:
            raise corrupt_error(corrupt)
        check_compatible(self.spec, stored, self.results)
        check_same_training(self.ctx, stored, self.results, list(self.methods))
        return stored, corrupt

    def read_stored(self, repair: bool) -> tuple[pd.DataFrame, list[str]]:
        """``stored_rows``, then, under the run's lock, the corrupt files moved aside (``repair``)
        and temporaries removed: the rows and where the files went."""
        stored, corrupt = self.stored_rows(repair)
        return stored, self.tidy(corrupt)

    def tidy(self, corrupt) -> list[str]:
        """Move the ``corrupt`` files aside and remove temporaries: where the files went."""
        repaired = []
        for c in corrupt:
            repaired.append(self.store.move_aside(c.path))
            logger.warning("fairdp %s: moved aside %s (%s)", self.command, c.path, c.reason)
        self.store.remove_temporaries()
        return repaired


def prepare(spec: StudySpec, results: str | None, executor: Executor, command: str, methods: list[str],
            stream=None, checkpoint_every_s: float = 600.0, method_field: str | None = None) -> Prepared:
    """Check the study against its data, results and executor before anything is written.
    ``method_field`` names the spec key that chose the methods (``search.method``) in errors."""
    if not checkpoint_every_s >= 0:  # NaN too
        raise InputError(f"--checkpoint-every: must be >= 0 seconds (0: no checkpoints), got {checkpoint_every_s}")
    if results is not None and not str(results).strip():  # not the default: a variable that expanded to nothing
        raise InputError("--results: empty; give a directory or URI, or leave it out for results/<study name>")
    # absolute: Ray Tune runs each trial in its own working directory
    store = study_store(spec, results or default_results(spec))
    store.probe()
    store.check_writable("--results" if results is not None else "name")  # before the data is loaded or fetched
    with said_if_slow(f"fairdp {command} {spec.name}: loading dataset {spec.dataset}"):
        data = load_study_data(spec.dataset, spec.dataset_options)
    # the protocol stored in every row includes the data's fingerprint
    ctx = StudyContext.from_spec(spec, store, data, checkpoint_every_s=checkpoint_every_s, driver=executor.driver)
    for name in methods:
        method = get_method(name)
        method.check_dataset(data, method_field) if method_field else method.check_dataset(data)
    check_models(spec, data, methods)  # first: the sizes' check builds the user's modules
    check_sizes_fit(spec, data, methods)
    executor.check_fits(spec)
    return Prepared(spec, command, ctx, store, executor, tuple(methods), len(data.splits["train"]), stream)


def default_results(spec: StudySpec) -> str:
    return f"results/{spec.name}"


@contextlib.contextmanager
def said_if_slow(text: str, after_s: float = SLOW_S):
    """Log ``text`` (info) if the block is still running after ``after_s`` seconds: a slow step
    says what it is, a fast one (or one that fails at once, whose error is then the only
    line) stays quiet."""
    timer = threading.Timer(after_s, logger.info, (text,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def settings_lines(spec: StudySpec, precision: PrecisionChoice, methods=None, sampler: str | None = None) -> list[str]:
    """What each method of the study trains with, printed once when a run starts, with the
    study's ``precision`` (``Prepared.with_stored_choices``) and why it is that one, and the
    ``sampler`` of its Poisson samples."""
    names = list(methods or (m.name for m in spec.methods))
    probes = [k for k, on in (("leakage", spec.leakage), ("MDL", spec.mdl)) if on]
    lines = [f"fairdp {spec.name}: {spec.train.epochs} epochs, batch {spec.train.batch_size}, dtype "
             f"{spec.train.dtype}, precision {precision.describe()}; " + (f"{' and '.join(probes)} by {spec.probe.describe()}" if probes
                                       else "no leakage or MDL probe")]
    width = max(len(n) for n in names)
    for name in names:
        ms = spec.method_settings[name]
        how = f"{ms.optimizer} lr {ms.lr:g}" if ms.optimizer else "no gradient training"
        plan = next(m for m in spec.methods if m.name == name) if name in {m.name for m in spec.methods} else None
        if plan is not None and ms.swept:
            swept = {k: sorted({c[k] for c in plan.configs}) for k in ms.swept}
            how = f"{ms.optimizer} " + ", ".join(f"{k} {{{', '.join(f'{v:g}' for v in vs)}}}" for k, vs in swept.items())
        method = get_method(name)
        spec_of = getattr(method, "spec", None)
        arch = (describe_architecture(ms.architecture, spec_of.adversaries if spec_of else 0)
                if ms.architecture else "no network")
        keys = [k for k in plan.configs[0] if is_model_keyword(k)] if plan is not None else []
        if keys:
            arch += "; " + ", ".join(f"{k} {{{', '.join(dict.fromkeys(repr(c[k]) for c in plan.configs))}}}"
                                     for k in keys)
        if type(method).dp_event is not Method.dp_event:  # its noise is calibrated by the accountant
            arch += f"; {spec.train.accountant.upper()} accountant"
        if method.clips_per_sample and spec.train.clipping == "per_layer":
            arch += "; per-layer clipping"
        if method.poisson_sampled and sampler is not None:
            arch += f"; Poisson samples by {sampler}"
        lines.append(f"  {name.ljust(width)}  {how}; {arch}")
    prune = spec.train.prune
    if prune is not None:
        lines.append(f"  pruning inside packs after epochs {', '.join(map(str, prune.rungs))}: configs dominated by "
                     f"{prune.margin:g} points on valid accuracy and valid {prune.fairness} stop, at least "
                     f"{prune.keep:g} of a pack continue")
    return lines
