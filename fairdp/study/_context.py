"""What the driver hands every worker: a study's context (``StudyContext``, sent once through
Ray's object store), the protocol stored in every row, and how a row says it was trained.

Built on the driver (``prepare``), read on both sides.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass

from fairdp.data import load_dataset
from fairdp.engine import Architecture, TrainSettings
from fairdp.engine._shared import published_data_fingerprint
from fairdp.methods import Method, get_method
from fairdp.metrics import ProbeSettings
from fairdp.study.spec._spec import StudySpec
from fairdp.study.store._store import ResultStore, study_columns


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
    plugins: tuple[str, ...] = ()                    # resolved plugin files / modules to import first
    columns: tuple[tuple[str, str], ...] = ()        # the study's result columns (name, type)
    method_settings: dict = dataclasses.field(default_factory=dict)  # name -> MethodSettings
    # the study's random trial count (TrialCount.to_dict()) and each method's grid it draws
    # from; None when every grid config is trained
    tuning: dict | None = None
    grids: dict = dataclasses.field(default_factory=dict)  # name -> tuple of configs
    # a pack in training saves a checkpoint this often (seconds; 0: never) to resume from
    # if it is killed; it does not change what the pack computes
    checkpoint_every_s: float = 600.0
    protocol: str = ""  # study_protocol(spec, data) as JSON, stored in every row
    driver: tuple[str, int] | None = None  # (host, pid) of the run's driver: its workers die with it
    predictions: str | None = None  # evaluate.predictions: "selected" keeps each pack's test predictions

    @classmethod
    def from_spec(cls, spec: StudySpec, store: ResultStore, data=None, *, checkpoint_every_s: float = 600.0,
                  driver: tuple[str, int] | None = None) -> StudyContext:
        """The context of ``spec``'s packs, stored in ``store`` (``study_store``); with the loaded
        ``data`` its protocol (stored in every row) includes the data's fingerprint."""
        gpus = spec.resources.gpus_per_trial
        train = dataclasses.replace(spec.train, gpu_share=min(1.0, gpus)) if gpus > 0 else spec.train
        return cls(spec.name, spec.dataset, dict(spec.dataset_options), train, spec.leakage, spec.mdl,
                   spec.probe, store.location, spec.resources.cpus_per_trial, spec.plugins,
                   store.columns, dict(spec.method_settings),
                   spec.tuning.to_dict() if spec.tuning is not None else None,
                   {m.name: m.configs for m in spec.methods} if spec.tuning is not None else {},
                   checkpoint_every_s=float(checkpoint_every_s), protocol=protocol_json(spec, data), driver=driver,
                   predictions=spec.predictions)

    def training(self, method: str) -> tuple[TrainSettings, Architecture | None]:
        """The settings and architecture ``method`` trains with in this study (its defaults
        when the study does not say)."""
        ms = self.method_settings.get(method)
        if ms is None:
            return self.train, None
        return dataclasses.replace(self.train, lr=ms.lr), ms.architecture

    def store(self) -> ResultStore:
        """The study's store, with the columns the driver computed (never the registry's: a
        worker's plugins may differ). Build it once per pack or run and pass it on."""
        return ResultStore(self.results, columns=self.columns or None)


@functools.lru_cache(maxsize=4)
def _load(name: str, options_json: str):

    return load_dataset(name, **json.loads(options_json))


def load_study_data(dataset: str, options: dict):
    """A study's dataset, loaded once per process (a worker trains many packs of it)."""
    return _load(dataset, json.dumps(options, sort_keys=True))


def study_store(spec: StudySpec, results: str) -> ResultStore:
    """The store of ``spec``'s rows at ``results``: its columns are the fixed ones and the
    hyperparameters of fairdp's methods and the study's (plugins included), computed once here
    and handed to every worker in the context."""
    methods = [m.name for m in spec.methods] + ([spec.search.method] if spec.search else [])
    return ResultStore(results, columns=study_columns(methods))


def _plain(value):
    """A setting as JSON data: dataclasses as mappings, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _protocol_fields(obj) -> dict:
    """The fields of a settings dataclass whose ``protocol`` metadata is True (the default)."""
    return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)
            if f.metadata.get("protocol", True) is True}


def study_protocol(spec: StudySpec, data=None) -> dict:
    """Every setting of ``spec`` that changes what a result row means and is not a row column
    of its own, derived from the fields of ``StudySpec`` and ``TrainSettings`` (their
    ``protocol`` metadata), so a new setting is compared unless it is marked otherwise; with
    the loaded ``data``, a fingerprint of its labels, splits and feature shape (never of its
    protected attributes: rows publish it)."""
    out = _protocol_fields(spec)
    out["train"] = _protocol_fields(spec.train)
    if data is not None:
        out["data"] = published_data_fingerprint(data)
    return out


def protocol_json(spec: StudySpec, data=None) -> str:
    return json.dumps(study_protocol(spec, data), sort_keys=True, separators=(",", ":"))


def training_provenance(ctx: StudyContext, method_name: str) -> dict:
    """How the rows of ``method_name`` are trained and probed: optimizer, lr, architecture
    (JSON), probe protocol (JSON) and the accountant that composes its privacy events (and,
    for DP-SGD and PF-LD, calibrates their noise: ``train.accountant``) and the sampler of their
    Poisson samples (``train.sampler``); None where it does not apply (the accountant: a method
    without a ``dp_event``; the sampler: one that draws no Poisson sample)."""
    method = get_method(method_name)
    train, arch = ctx.training(method_name)
    arch = arch or (method.default_architecture(ctx.dataset) if method.uses_architecture else None)
    return {"optimizer": method.optimizer, "lr": method.effective_settings(train).lr,
            "batch_size": train.batch_size if method.optimizer is not None else None,
            "architecture": json.dumps(arch.to_dict()) if arch is not None else None,
            "probe": json.dumps(ctx.probe.protocol()) if (ctx.leakage or ctx.mdl) else None,
            "accountant": train.accountant if type(method).dp_event is not Method.dp_event else None,
            "sampler": train.poisson_sampler if method.poisson_sampled else None}
