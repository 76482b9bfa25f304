"""Run a study on Ray Tune: one trial trains, evaluates and stores one pack of configs."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from fairdp import __version__
from fairdp.engine import TrainSettings
from fairdp.errors import InputError
from fairdp.methods import get_method
from fairdp.metrics import ProbeSettings
from fairdp.study._plan import Pack, check_compatible, plan_packs
from fairdp.study._ray import ray_session
from fairdp.study._spec import StudySpec
from fairdp.study._store import HYPERPARAMS, ResultStore, corrupt_error


@dataclass(frozen=True)
class StudyContext:
    """What a worker needs to train and store a pack (sent once through Ray's object store)."""

    study: str
    dataset: str
    dataset_options: dict
    train: TrainSettings
    leakage: bool
    mdl: bool
    probe: ProbeSettings
    results: str
    cpus_per_trial: float

    @classmethod
    def from_spec(cls, spec: StudySpec, results: str) -> StudyContext:
        gpus = spec.resources.gpus_per_trial
        train = dataclasses.replace(spec.train, gpu_share=min(1.0, gpus)) if gpus > 0 else spec.train
        return cls(spec.name, spec.dataset, dict(spec.dataset_options), train, spec.leakage, spec.mdl,
                   spec.probe, results, spec.resources.cpus_per_trial)


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
        if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
            raise InputError(f"--seeds: needs distinct non-negative integers, got {seeds}")
        spec = dataclasses.replace(spec, seeds=tuple(seeds))
    if epochs is not None:
        if epochs < 1:
            raise InputError(f"--epochs: must be >= 1, got {epochs}")
        spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, epochs=epochs))
    return spec


@functools.lru_cache(maxsize=4)
def _load(name: str, options_json: str):
    from fairdp.data import load_dataset

    return load_dataset(name, **json.loads(options_json))


def load_study_data(ctx: StudyContext):
    """The study's dataset, loaded once per worker process."""
    return _load(ctx.dataset, json.dumps(ctx.dataset_options, sort_keys=True))


def _node() -> str:
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - provenance only; never fail a pack over it
        pass
    import socket

    return socket.gethostname()


def base_row(ctx: StudyContext, pack: Pack, i: int) -> dict:
    config = pack.configs[i]
    row = {"study": ctx.study, "dataset": ctx.dataset, "method": pack.method, "seed": pack.seed,
           "config_id": pack.config_ids[i], "epochs": ctx.train.epochs, "pack_id": pack.id,
           "pack_size": len(pack.configs), "fairdp_version": __version__, "node": _node(),
           "finished_at": datetime.now(timezone.utc)}
    for h in HYPERPARAMS:
        if h in config:
            row[h] = config[h] if h == "fairness_notion" else float(config[h])
    return row


def train_and_evaluate(ctx: StudyContext, pack: Pack) -> list[dict]:
    """Train a pack, compute its metric columns and return its rows (status 'ok')."""
    import torch

    from fairdp.metrics import evaluate_pack

    torch.set_num_threads(max(1, int(ctx.cpus_per_trial)))
    data = load_study_data(ctx)
    method = get_method(pack.method)
    t0 = time.perf_counter()
    result = method.train_pack(data, list(pack.configs), pack.seed, ctx.train)
    metrics = evaluate_pack(method, data, result, with_leakage=ctx.leakage, with_mdl=ctx.mdl,
                            probe=dataclasses.replace(ctx.probe, seed=pack.seed))
    elapsed = time.perf_counter() - t0
    rows = []
    for i, m in enumerate(metrics):
        row = base_row(ctx, pack, i)
        row.update(m, duration_s=elapsed / len(pack.configs), pack_duration_s=elapsed, status="ok")
        rows.append(row)
    return rows


def error_rows(ctx: StudyContext, pack: Pack, error: str) -> list[dict]:
    rows = []
    for i in range(len(pack.configs)):
        row = base_row(ctx, pack, i)
        row.update(status="error", error=error)
        rows.append(row)
    return rows


def store_pack(ctx: StudyContext, pack: Pack, rows: list[dict]) -> str:
    return ResultStore(ctx.results).write_pack(rows, ctx.dataset, pack.method, pack.seed, pack.id)


def _pack_trial(config: dict, ctx: StudyContext) -> None:
    """The Ray Tune trainable: one pack in, its Parquet file written, a summary reported
    (with each row's metrics, which a searcher handing out packs tells back to Optuna)."""
    from ray import tune

    pack = Pack.from_dict(config["pack"])
    rows = train_and_evaluate(ctx, pack)
    store_pack(ctx, pack, rows)
    tune.report({"configs": len(rows), "pack_duration_s": rows[0]["pack_duration_s"],
                 "rows": [{k: v for k, v in r.items() if isinstance(v, float)} for r in rows]})


class Progress:
    """Packs and configs done / total, failures, elapsed and ETA, as lines on stderr."""

    def __init__(self, label: str, packs: int, configs: int, stream=None):
        self.label, self.total_packs, self.total_configs = label, packs, configs
        self.packs = self.configs = self.failures = self.retries = 0
        self.t0 = time.monotonic()
        self.stream = stream or sys.stderr

    def update(self, packs: int = 0, configs: int = 0, failures: int = 0, retries: int = 0) -> None:
        self.packs += packs
        self.configs += configs
        self.failures += failures
        self.retries += retries
        print(self.line(), file=self.stream, flush=True)

    def __getstate__(self):  # Tune pickles its callbacks with the experiment state; streams don't pickle
        return {k: v for k, v in self.__dict__.items() if k != "stream"}

    def __setstate__(self, state):
        self.__dict__.update(state, stream=sys.stderr)

    def line(self) -> str:
        elapsed = time.monotonic() - self.t0
        done = self.configs
        eta = "?" if done == 0 else _duration(elapsed / done * (self.total_configs - done))
        return (f"fairdp {self.label}: packs {self.packs}/{self.total_packs} | configs "
                f"{self.configs}/{self.total_configs} | failures {self.failures} | retries {self.retries} | "
                f"elapsed {_duration(elapsed)} | eta {eta}")


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def _tune_callback(progress: Progress):
    from ray import tune

    class _ProgressCallback(tune.Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            progress.update(packs=1, configs=int(result.get("configs", 0)))

        def on_trial_error(self, iteration, trials, trial, **info):
            progress.update(failures=1)

        def on_trial_recover(self, iteration, trials, trial, **info):
            progress.update(retries=1)

    return _ProgressCallback()


def worker_slots(spec: StudySpec) -> int:
    """Trials the connected Ray cluster runs at once (at least one)."""
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1) // spec.resources.cpus_per_trial))


def trial_resources(spec: StudySpec) -> dict:
    return {"cpu": spec.resources.cpus_per_trial, "gpu": spec.resources.gpus_per_trial}


@contextlib.contextmanager
def tune_run_config(name: str, spec: StudySpec, progress: Progress):
    """Tune's RunConfig for a study: the spec's retries, progress lines, and the JSON logger
    that result grids read back; its storage is a temporary directory removed afterwards
    (rows live in the results store, so Tune keeps nothing worth resuming from)."""
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback

    storage = tempfile.mkdtemp(prefix="fairdp-tune-")
    try:
        yield tune.RunConfig(name=name, storage_path=storage, verbose=0,
                             failure_config=tune.FailureConfig(max_failures=spec.resources.max_failures),
                             callbacks=[_tune_callback(progress), JsonLoggerCallback()])
    finally:
        shutil.rmtree(storage, ignore_errors=True)


def run_packs(ctx: StudyContext, packs: list[Pack], spec: StudySpec, progress: Progress) -> tuple[int, int]:
    """Run packs as Ray Tune trials (a Ray session must be up): (failed, unfinished) pack counts.

    Unfinished packs are those a Ctrl-C (Tune stops gracefully on SIGINT) kept from finishing.

    A pack that still fails after ``resources.max_failures`` retries is stored as error rows
    (status 'error', the exception's last line), which the next run retries.
    """
    from ray import tune

    trainable = tune.with_resources(tune.with_parameters(_pack_trial, ctx=ctx), trial_resources(spec))
    with tune_run_config(spec.name, spec, progress) as run_config:
        grid = tune.Tuner(
            trainable,
            param_space={"pack": tune.grid_search([p.to_dict() for p in packs])},
            tune_config=tune.TuneConfig(reuse_actors=True, trial_dirname_creator=lambda t: t.trial_id,
                                        trial_name_creator=lambda t: f"pack_{t.trial_id}"),
            run_config=run_config,
        ).fit()
        failed = unfinished = 0
        for res in grid:
            if res.error is None and "configs" not in (res.metrics or {}):
                unfinished += 1
            elif res.error is not None:
                failed += 1
                pack = Pack.from_dict(res.config["pack"])
                message = (str(res.error).strip().splitlines() or ["error"])[-1][:500]
                store_pack(ctx, pack, error_rows(ctx, pack, message))
    return failed, unfinished


def run_study(spec: StudySpec, results: str | None = None, address: str | None = None, *, repair: bool = False,
              progress_stream=None, num_cpus: int | None = None) -> RunSummary:
    """Run every (method, config, seed) of ``spec`` not already stored under ``results``.

    Everything that can be checked is checked before Ray starts or a file is written: the
    spec (already validated), the dataset (loaded here, so a missing file is named), the
    results location (corrupt files are an error unless ``repair``), and that stored rows
    come from the same study, dataset and epochs.
    """
    t0 = time.monotonic()
    # absolute: Ray Tune runs each trial in its own working directory
    store = ResultStore(results or default_results(spec))
    results = store.location
    ctx = StudyContext.from_spec(spec, results)
    data = load_study_data(ctx)
    for plan in spec.methods:
        get_method(plan.name).check_dataset(data)
    stored, corrupt = store.read(on_corrupt="collect")
    repaired = []
    if corrupt:
        if not repair:
            raise corrupt_error(corrupt)
        for c in corrupt:
            repaired.append(store.move_aside(c.path))
            print(f"fairdp run: moved aside {c.path} ({c.reason})", file=progress_stream or sys.stderr)
    check_compatible(spec, stored, results)
    store.remove_temporaries()
    with ray_session(address, num_cpus=num_cpus):
        packs, done = plan_packs(spec, stored, worker_slots(spec))
        configs = sum(len(p.configs) for p in packs)
        progress = Progress(f"run {spec.name}", len(packs), configs, stream=progress_stream)
        if done:
            print(f"fairdp run {spec.name}: {done} configs already stored in {results}, skipped",
                  file=progress.stream, flush=True)
        failed, unfinished = run_packs(ctx, packs, spec, progress) if packs else (0, 0)
    return RunSummary(results, len(packs), configs, done, failed, time.monotonic() - t0, repaired, unfinished)
