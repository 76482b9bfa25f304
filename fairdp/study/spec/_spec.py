"""Study specs (YAML; docs/study-spec.md): load, validate every key with its path, expand grids.

Validation happens before anything runs: unknown keys, wrong types and out-of-range values
are ``InputError``s whose message starts with the key path, e.g.
``methods.federate.grid.eps[2]: must be > 0.0, got -1``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

from fairdp.constraints import Constraint, parse_constraints
from fairdp.data import Dataset, dataset_names
from fairdp.data._shared import check_fits_memory, get_entry
from fairdp.engine import Architecture, ModelRef, Pruning, TrainSettings, packing_problems
from fairdp.engine._shared import (
    DEFAULT_KEEP,
    DEFAULT_MARGIN,
    architecture_from,
    is_model_keyword,
    model_keywords,
    row_mixing,
    trial_step,
)
from fairdp.errors import InputError
from fairdp.fairness import MIN_GROUP_COUNT
from fairdp.methods import HyperParam, Method, get_method, load_plugins, method_names
from fairdp.methods._shared import arange_grid, range_count
from fairdp.metrics import ProbeSettings
from fairdp.privacy._shared import COUNTS, PrivateSelection, TrialCount
from fairdp.schema import NOTION_GAP, OBJECTIVES, SELECTION_FAIRNESS
from fairdp.tracking._shared import TrackingSpec, parse_tracking

SAMPLERS = ("nsga2", "tpe")
PREDICTIONS = ("selected", "none")
"""``evaluate.predictions``: store the test-set predictions of the selected configs beside the
results (``fairdp.study.read_predictions``), or not."""
DEFAULT_PACK_CAP = 32
# On a GPU a (method, seed) group of up to this many configs is one pack: one batched model
# fills the GPU where small packs queue kernel launches (the memory rule splits a pack that
# does not fit into chunks), and a checkpoint bounds what a kill loses.
GPU_PACK_CAP = 1024
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class MethodSettings:
    """How one method of a study trains: its optimiser and learning rate (None: it does not
    train by gradient) and its architecture (None: it trains no network)."""

    optimizer: str | None
    lr: float | None
    architecture: Architecture | None
    swept: tuple[str, ...] = ()  # the training settings (lr, batch_size) its grid sweeps per config
    swept_keywords: tuple[str, ...] = ()  # the module keywords (encoder.width) its grid sweeps per config


@dataclass(frozen=True)
class MethodPlan:
    """One method of a study: its validated configs, in grid order, and how it trains."""

    name: str
    configs: tuple[dict, ...]
    settings: MethodSettings


@dataclass(frozen=True)
class SearchSpec:
    method: str
    sampler: str
    trials: int
    objectives: dict[str, str]  # column -> "min" | "max"
    space: dict[str, dict]  # param -> {low, high, log} | {choices}
    fixed: dict
    seed: int
    population: int  # NSGA-II generation size; also the pack size of a packed search
    # rows must satisfy these to be feasible: given to the sampler (Optuna's constraints_func),
    # and only feasible rows make the Pareto front and its hypervolume
    constraints: tuple[Constraint, ...] = ()


@dataclass(frozen=True)
class Resources:
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    max_failures: int = 1  # Ray Tune retries of a failed pack


def _not_protocol(default=dataclasses.MISSING, *, why: str, **kw):
    """A StudySpec field that does not change what a row means (``why`` says what it is)."""
    return field(default=default, metadata={"protocol": False, "why": why}, **kw)


@dataclass(frozen=True)
class StudySpec:
    # Fields change what a result row means (stored with each row and compared on resume,
    # ``study_protocol``) unless marked: a new field is compared unless said otherwise.
    name: str = field(metadata={"protocol": "column"})
    dataset: str
    dataset_options: dict
    seeds: tuple[int, ...] = _not_protocol(why="which runs, not how")
    train: TrainSettings = field(default_factory=TrainSettings)
    leakage: bool = False
    mdl: bool = False
    probe: ProbeSettings = field(default=None, metadata={"protocol": "column"})
    # "selected": each pack keeps its test predictions, the run stores the selected configs'
    # (``_predictions``; a pick whose pack kept none is trained again for them); None: none
    predictions: str | None = _not_protocol(None, why="what is kept beside the rows, not what they are")
    fairness: str = _not_protocol("tpr_gap", why="how rows are selected, not what they are")
    rt: float = _not_protocol(1.0, why="how rows are selected")
    rts: tuple[float, ...] | None = _not_protocol(None, why="the report's RT sweep")  # None: the report's default
    # selection.private: picks made from noisy validation counts (fairdp.analysis._private)
    private_selection: PrivateSelection | None = _not_protocol(None, why="how rows are selected")
    methods: tuple[MethodPlan, ...] = _not_protocol((), why="grids: which configs; each method's settings are columns")
    search: SearchSpec | None = _not_protocol(None, why="compared by the search's own study")
    resources: Resources = _not_protocol(None, why="where it runs")
    pack_size: int | None = _not_protocol(None, why="how configs are grouped")  # None: from the grid and CPUs
    # resolved plugin files / modules, imported before the methods
    plugins: tuple[str, ...] = _not_protocol((), why="where methods come from; the method is a column")
    # name -> MethodSettings, the search's method too
    method_settings: dict = _not_protocol(why="per-method columns (optimizer, lr, architecture)",
                                          default_factory=dict)
    by: tuple[str, ...] = _not_protocol((), why="report-by keys")  # selection and aggregation per their values too
    # a random trial count per run (Papernot & Steinke); None: whole grids
    tuning: TrialCount | None = field(default=None, metadata={"protocol": "column"})
    source: str = _not_protocol("", why="the file it was read from")
    tracking: TrackingSpec | None = _not_protocol(None, why="where configs are also logged")
    raw: dict = _not_protocol(why="the file's text", default_factory=dict, compare=False, repr=False)

    @property
    def n_configs(self) -> int:
        return sum(len(m.configs) for m in self.methods) * len(self.seeds)


class _StudyLoader(yaml.SafeLoader):
    """YAML as a study file needs it: a key given twice is an error (PyYAML keeps the last,
    silently: ``{epochs: 2, epochs: 200}`` trains 200), and ``1e-3`` is a number (YAML 1.2;
    PyYAML's YAML 1.1 reads a float without a dot as a string)."""


def _mapping_without_duplicates(loader: _StudyLoader, node: yaml.MappingNode, deep: bool = False):
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice (first on line {seen[key] + 1})", key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_StudyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)
_StudyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def read_study_yaml(text: str):
    """Parse a study file's text with ``_StudyLoader``."""
    return yaml.load(text, Loader=_StudyLoader)  # noqa: S506 - a SafeLoader subclass


def load_spec(path: str | Path) -> StudySpec:
    """Read and validate a study file; every problem is an ``InputError`` naming the key path."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such study file")
    try:
        raw = read_study_yaml(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise InputError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', None) or e}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file") from None
    except OSError as e:
        raise InputError(f"{path}: cannot be read ({e.strerror or e})") from None
    if raw is None:
        raise InputError(f"{path}: empty; a study file is a mapping with at least name, dataset and methods")
    if not isinstance(raw, dict):
        raise InputError(f"{path}: a study file must be a mapping with at least name, dataset and methods, "
                         f"got {type(raw).__name__}")
    return parse_spec(raw, source=str(path), base_dir=path.parent)


def parse_spec(raw, source: str = "<spec>", base_dir: str | Path | None = None) -> StudySpec:
    """Validate a spec's mapping; ``base_dir`` is where relative plugin paths are resolved
    (the study file's directory; the working directory by default)."""
    top = _mapping(raw, "", required=("name", "dataset", "methods"),
                   optional=("seeds", "train", "evaluate", "selection", "search", "resources", "pack_size",
                             "plugins", "architecture", "description", "tuning", "prune",
                             "tracking"))
    plugins = top.get("plugins") or []
    if not isinstance(plugins, list):
        raise InputError(f"plugins: must be a list of plugin files or module names, got {plugins!r}")
    plugins = tuple(load_plugins(plugins, base_dir))  # before the methods, which may be theirs
    name = _string(top["name"], "name")
    if not _NAME.match(name):
        raise InputError(f"name: {name!r} must be letters, digits, '_', '.', '-' (it names the results directory)")
    dataset, dataset_options = _dataset(top["dataset"])
    seeds = _seeds(top.get("seeds", [0]))
    train = _train(top.get("train") or {})
    leakage, mdl, probe, predictions, min_group_count = _evaluate(top.get("evaluate") or {})
    train = dataclasses.replace(train, min_group_count=min_group_count)  # before the methods copy it
    study_arch = top.get("architecture")
    methods = _methods(top["methods"], dataset, train, study_arch, base_dir)
    search = _search(top["search"], leakage, mdl, seeds) if top.get("search") is not None else None
    fairness, rt, by, rts, private_selection = _selection(top.get("selection") or {}, methods, search)
    resources = _resources(top.get("resources") or {})
    pack_size = top.get("pack_size")
    if pack_size is not None:
        pack_size = checked_int(pack_size, "pack_size", low=1)
    method_settings = {m.name: m.settings for m in methods}
    if search is not None and search.method not in method_settings:
        method_settings[search.method] = _method_settings(get_method(search.method), dataset, train, study_arch,
                                                          {}, "search.method", base_dir)
    if search is not None:
        _check_search_keywords(search, method_settings[search.method])
    _check_applies(method_settings, train, study_arch)
    if top.get("prune") is not None:
        train = dataclasses.replace(train, prune=_prune(top["prune"], fairness, method_settings))
    tuning = _tuning(top["tuning"], by, search) if top.get("tuning") is not None else None
    tracking = parse_tracking(top["tracking"]) if top.get("tracking") is not None else None
    return StudySpec(name=name, dataset=dataset, dataset_options=dataset_options, seeds=seeds, train=train,
                     leakage=leakage, mdl=mdl, probe=probe, predictions=predictions, fairness=fairness, rt=rt,
                     rts=rts, private_selection=private_selection, methods=methods, search=search, resources=resources, pack_size=pack_size, plugins=plugins,
                     method_settings=method_settings, by=by, tuning=tuning, source=source, raw=top,
                     tracking=tracking)


# -- sections ---------------------------------------------------------------------------------

def _dataset(value) -> tuple[str, dict]:
    if isinstance(value, str):
        name, options = value, {}
    else:
        d = _mapping(value, "dataset", required=("name",), optional=None)
        name = _string(d["name"], "dataset.name")
        options = {k: v for k, v in d.items() if k != "name"}
    if name not in dataset_names():
        raise InputError(f"dataset: unknown dataset '{name}'; known: {', '.join(dataset_names())}")
    known = get_entry(name).options()
    for key, option in options.items():
        if key not in known:
            raise InputError(f"dataset.{key}: '{name}' has no option '{key}'; it has: {', '.join(known) or 'none'}")
        if not _plain(option):  # a loader takes values and lists of them; a mapping is never an option
            raise InputError(f"dataset.{key}: must be a value or a list of values, got {type(option).__name__} "
                             f"{option!r:.60}")
    return name, options


def _plain(value) -> bool:
    """A number, string, boolean or null, or a list of them."""
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


INT64_MAX = 2**63 - 1
"""The largest integer a key may hold: integers are stored as int64 (Parquet, torch, numpy)."""
MAX_SEED = INT64_MAX
"""Seeds are stored as int64 and seed 64-bit generators."""
MAX_EPOCHS = 100_000
"""Most epochs a config trains (``train.epochs``, ``--epochs``, ``evaluate.probe.max_epochs``):
each config keeps its valid curves for every epoch in memory and in its row, 2.4 MB a config
at this many (2.4 GB for a GPU pack of 1,024), and no tabular protocol comes near it."""


def _seeds(value) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise InputError(f"seeds: must be a non-empty list of integers, got {value!r}")
    seeds = tuple(checked_int(v, f"seeds[{i}]", low=0, high=MAX_SEED) for i, v in enumerate(value))
    if len(set(seeds)) != len(seeds):
        raise InputError(f"seeds: repeated seed in {list(seeds)}")
    return seeds


def _train(value) -> TrainSettings:
    d = _mapping(value, "train", optional=("epochs", "batch_size", "lr", "gamma", "device", "dtype", "precision",
                                           "accountant", "clipping", "packing", "sampler", "config_chunk"))
    # TrainSettings checks dtype, precision, accountant, clipping, packing and sampler itself
    # (naming train.<key>); the numbers are checked here, each against the range it can hold.
    kw = {k: d[k] for k in ("dtype", "precision", "accountant", "clipping", "packing", "sampler") if k in d}
    if "epochs" in d:
        kw["epochs"] = checked_int(d["epochs"], "train.epochs", low=1, high=MAX_EPOCHS)
    for key in ("batch_size", "config_chunk"):
        if key in d:
            kw[key] = checked_int(d[key], f"train.{key}", low=1)
    for key in ("lr", "gamma"):
        if key in d:
            kw[key] = _number(d[key], f"train.{key}", low=0.0, low_open=True)
    if "device" in d:
        kw["device"] = _string(d["device"], "train.device")
        try:  # a typo ("gpu") is refused here; whether the workers have the device, they find out
            import torch

            kind = torch.device(kw["device"]).type
        except RuntimeError:
            kind = None
        if kind not in ("cpu", "cuda", "mps"):
            raise InputError(f"train.device: must be cpu, cuda, cuda:N or mps, got {kw['device']!r}")
    return TrainSettings(**kw)


def _evaluate(value) -> tuple[bool, bool, ProbeSettings, str | None, int]:
    d = _mapping(value, "evaluate", optional=("leakage", "mdl", "probe", "predictions", "min_group_count"))
    min_group_count = checked_int(d.get("min_group_count", MIN_GROUP_COUNT), "evaluate.min_group_count", low=1)
    predictions = d.get("predictions", "none")
    predictions = "none" if predictions is None else predictions  # YAML's empty value: the default
    if predictions not in PREDICTIONS:
        raise InputError(f"evaluate.predictions: must be {' or '.join(PREDICTIONS)}, got {predictions!r}")
    flags = []
    for key in ("leakage", "mdl"):
        v = d.get(key, True)
        if not isinstance(v, bool):
            raise InputError(f"evaluate.{key}: must be true or false, got {v!r}")
        flags.append(v)
    probe_raw = _mapping(d.get("probe") or {}, "evaluate.probe",
                         optional=("kind", "hidden", "lr", "alpha", "batch_size", "max_epochs", "patience", "backend",
                                   "standardize", "early_stopping"))
    if probe_raw.get("kind", "mlp") not in ("mlp", "linear"):
        raise InputError(f"evaluate.probe.kind: must be mlp or linear, got {probe_raw['kind']!r}")
    if probe_raw.get("backend", "torch") not in ("torch", "sklearn"):
        raise InputError(f"evaluate.probe.backend: must be torch or sklearn, got {probe_raw['backend']!r}")
    for key in ("standardize", "early_stopping"):
        if key in probe_raw and not isinstance(probe_raw[key], bool):
            raise InputError(f"evaluate.probe.{key}: must be true or false, got {probe_raw[key]!r}")
    for key in ("hidden", "batch_size", "max_epochs", "patience"):
        if key in probe_raw:
            probe_raw[key] = checked_int(probe_raw[key], f"evaluate.probe.{key}", low=1,
                                  high=MAX_EPOCHS if key == "max_epochs" else INT64_MAX)
    for key in ("lr", "alpha"):
        if key in probe_raw:
            probe_raw[key] = _number(probe_raw[key], f"evaluate.probe.{key}", low=0.0, low_open=key == "lr")
    return (flags[0], flags[1], ProbeSettings(**probe_raw), None if predictions == "none" else predictions,
            min_group_count)


def _check_search_keywords(search: SearchSpec, settings: MethodSettings) -> None:
    """InputError naming the key unless every module keyword the search sets or searches is a
    keyword of a module of the user's (architecture.models) that its method trains."""
    method = get_method(search.method)
    for key, value in [*((k, b["choices"][0] if "choices" in b else b["low"]) for k, b in search.space.items()),
                       *search.fixed.items()]:
        if is_model_keyword(key):
            where = "search.space" if key in search.space else "search.fixed"
            method.config_architecture({key: value}, settings.architecture, where)


def _selection(value, methods: tuple[MethodPlan, ...],
               search: SearchSpec | None = None) -> tuple[str, float, tuple[str, ...], tuple[float, ...] | None,
                                                          PrivateSelection | None]:
    d = _mapping(value, "selection", optional=("fairness", "rt", "by", "rts", "private"))
    fairness = d.get("fairness", "tpr_gap")
    if fairness not in SELECTION_FAIRNESS:
        raise InputError(f"selection.fairness: must be one of {', '.join(SELECTION_FAIRNESS)}, got {fairness!r}")
    rt = _number(d.get("rt", 1.0), "selection.rt", low=0.0)
    by = d.get("by", [])
    if not isinstance(by, list):
        raise InputError(f"selection.by: must be a list of hyperparameter names, got {by!r}")
    declared = {h.name for m in methods for h in get_method(m.name).hyperparams}
    declared |= {key for m in methods for key in ("lr", "batch_size") if any(key in c for c in m.configs)}
    # the module keywords a grid sweeps or a search sets: each row stores its value as a column
    declared |= {key for m in methods for c in m.configs for key in c if is_model_keyword(key)}
    if search is not None:
        declared |= {h.name for h in get_method(search.method).hyperparams}
        declared |= {key for key in (*search.space, *search.fixed) if is_model_keyword(key)}
    for i, key in enumerate(by):
        if not isinstance(key, str) or key not in declared:
            raise InputError(f"selection.by[{i}]: {key!r} is no hyperparameter of the study's methods; they have: "
                             f"{', '.join(sorted(declared)) or 'none'}")
    if len(set(by)) != len(by):
        raise InputError(f"selection.by: a key repeated in {by}")
    if fairness == NOTION_GAP and "fairness_notion" not in by:
        raise InputError("selection.fairness: notion_gap reports each notion on its own violation; "
                         "add fairness_notion to selection.by")
    rts = d.get("rts")
    if rts is not None:
        if not isinstance(rts, list) or not rts:
            raise InputError(f"selection.rts: must be a non-empty list of numbers >= 0, got {rts!r}")
        rts = tuple(_number(r, f"selection.rts[{i}]", low=0.0) for i, r in enumerate(rts))
    private = PrivateSelection.from_dict(d["private"]) if d.get("private") is not None else None
    return fairness, rt, tuple(by), rts, private


def _method_settings(method: Method, dataset: str, train: TrainSettings, study_arch, body: dict,
                     path: str, base_dir=None) -> MethodSettings:
    """The method's optimiser and learning rate (its own ``train.lr``, else the study's, else its
    paper's) and architecture (its default, with the study's then its own fields over it)."""
    own_train = _mapping(body.get("train") or {}, f"{path}.train", optional=("lr",))
    if "lr" in own_train and method.optimizer is None:
        raise InputError(f"{path}.train.lr: '{method.name}' does not train by gradient; a learning rate does "
                         f"not apply")
    lr = None
    if method.optimizer is not None:
        lr = _number(own_train["lr"], f"{path}.train.lr", low=0.0, low_open=True) if "lr" in own_train else None
        lr = lr or train.lr or method.default_lr
    fields = method.architecture_fields()
    own_arch = body.get("architecture")
    if "architecture" in body and not fields:
        raise InputError(f"{path}.architecture: '{method.name}' trains no network; an architecture does not apply")
    for key in own_arch if isinstance(own_arch, dict) else ():
        if key != "preset" and key in ARCHITECTURE_FIELDS and key not in fields and \
                not (key == "models" and method.model_roles()):
            raise InputError(f"{path}.architecture.{key}: '{method.name}' has no {_ARCH_PART[key]}; it "
                             f"does not apply (its network has: {', '.join(fields)})")
    arch = None
    if method.uses_architecture:
        arch = architecture_from(study_arch, dataset, base=method.default_architecture(dataset), base_dir=base_dir)
        arch = architecture_from(body.get("architecture"), dataset, base=arch, path=f"{path}.architecture",
                                 base_dir=base_dir)
        for role, _ in arch.models:
            if role not in method.model_roles():
                where = f"{path}.architecture.models.{role}" if role in dict(
                    (own_arch or {}).get("models") or {}) else f"architecture.models.{role}"
                raise InputError(f"{where}: '{method.name}' takes no module of the user's as its {role} "
                                 f"(it takes: {', '.join(method.model_roles()) or 'none'})")
    return MethodSettings(method.optimizer, lr, arch)


def _check_applies(settings: dict[str, MethodSettings], train: TrainSettings, study_arch) -> None:
    """A study-level value no method can use is refused, never silently ignored."""
    if train.lr is not None and all(s.optimizer is None for s in settings.values()):
        raise InputError(f"train.lr: no method of the study trains by gradient ({', '.join(settings)})")
    methods = [get_method(name) for name in settings]
    if train.accountant != "rdp" and not any(type(m).dp_event is not Method.dp_event for m in methods):
        raise InputError(f"train.accountant: no method of the study is accounted by one ({', '.join(settings)}); "
                         f"DP-SGD and PF-LD are")
    if train.sampler is not None and not any(m.poisson_sampled for m in methods):
        raise InputError(f"train.sampler: no method of the study draws a Poisson sample ({', '.join(settings)}); "
                         f"DP-SGD and PF-LD do")
    if train.clipping is not None and not any(m.clips_per_sample for m in methods):
        raise InputError(f"train.clipping: no method of the study clips per sample ({', '.join(settings)}); "
                         f"DP-SGD and PF-LD do")
    if study_arch is None:
        return
    fields = {name: get_method(name).architecture_fields() for name in settings}
    if not any(fields.values()):
        raise InputError(f"architecture: no method of the study trains a network ({', '.join(settings)})")
    for key in study_arch if isinstance(study_arch, dict) else ():
        if key == "models":
            continue  # each role is checked against each method (_method_settings)
        if key != "preset" and key in ARCHITECTURE_FIELDS and not any(key in f for f in fields.values()):
            raise InputError(f"architecture.{key}: no method of the study has {_ARCH_PART[key]} "
                             f"({', '.join(settings)}); it does not apply")


ARCHITECTURE_FIELDS = ("encoder", "classifier", "adversary", "dropout", "models")
_ARCH_PART = {"encoder": "an encoder", "classifier": "a classifier network", "adversary": "an adversary",
              "dropout": "dropout", "models": "a network"}


def _prune(value, fairness: str, settings: dict[str, MethodSettings]) -> Pruning:
    """``prune: {rungs, keep, margin}``; the objectives are the study's (valid accuracy, its
    selection fairness on valid). Methods that do not train by epochs are never pruned."""
    d = _mapping(value, "prune", required=("rungs",), optional=("keep", "margin"))
    rungs = d["rungs"]
    if not isinstance(rungs, list) or not rungs:
        raise InputError(f"prune.rungs: must be a non-empty list of epochs, got {rungs!r}")
    rungs = tuple(checked_int(r, f"prune.rungs[{i}]", low=1) for i, r in enumerate(rungs))
    keep = _number(d.get("keep", DEFAULT_KEEP), "prune.keep", low=0.0, low_open=True)
    margin = _number(d.get("margin", DEFAULT_MARGIN), "prune.margin", low=0.0)
    if all(s.optimizer is None for s in settings.values()):
        raise InputError(f"prune: no method of the study trains by epochs ({', '.join(settings)}), so none can "
                         f"be pruned")
    return Pruning(rungs, keep, margin, fairness)  # checks the rest: increasing, keep <= 1


# A study's grid is expanded, validated and planned up front; above this many configs per
# method that alone takes minutes and gigabytes (and the training, weeks): refuse it.
MAX_CONFIGS_PER_METHOD = 100_000
# A search's trials (``search.trials``, ``--trials``): a generation is at most a grid's configs,
# and the journal Optuna replays on every resume grows with each trial.
MAX_TRIALS = 1_000_000
MIN_TUNING_SHAPE, MAX_TUNING_SHAPE = 1e-6, 1e6


def _methods(value, dataset: str, train: TrainSettings, study_arch, base_dir=None) -> tuple[MethodPlan, ...]:
    if not isinstance(value, dict) or not value:
        raise InputError("methods: must be a non-empty mapping of method name -> {grid: ...}")
    value = _mapping(value, "methods", optional=None)
    plans = []
    for name, body in value.items():
        path = f"methods.{name}"
        if name not in method_names():
            raise InputError(f"{path}: unknown method '{name}'; known: {', '.join(method_names())}")
        method = get_method(name)
        body = _mapping(body or {}, path, optional=("grid", "architecture", "train"))
        grid = _grid(method, body.get("grid") or {}, f"{path}.grid", dataset)
        if "lr" in grid and "lr" in (body.get("train") or {}):
            raise InputError(f"{path}.train.lr: the grid sweeps lr ({path}.grid.lr); give it in one place")
        count = math.prod(len(v) for v in grid.values())
        if count > MAX_CONFIGS_PER_METHOD:  # checked before expanding: a 10^6 grid takes minutes and GBs
            raise InputError(f"{path}.grid: {count:,} configs, above fairdp's limit of {MAX_CONFIGS_PER_METHOD:,} "
                             f"per method; narrow the grid or use a search: block")
        configs = tuple(method.expand(grid))
        ids = [method.config_id(c) for c in configs]
        if len(set(ids)) != len(ids):
            raise InputError(f"{path}.grid: repeated values give the same config twice")
        settings = _method_settings(method, dataset, train, study_arch, body, path, base_dir)
        for key in grid:
            if is_model_keyword(key):  # the role's module must be the user's: a grid sweeps its keywords
                method.config_architecture({key: grid[key][0]}, settings.architecture, f"{path}.grid")
        swept = tuple(h.name for h in method.setting_params if h.name in grid)
        keywords = tuple(sorted(k for k in grid if is_model_keyword(k)))
        plans.append(MethodPlan(name, configs, dataclasses.replace(settings, swept=swept, swept_keywords=keywords)))
    return tuple(plans)


def _grid(method: Method, grid, path: str, dataset: str) -> dict[str, list]:
    """The method's grid: every hyperparameter (the paper's values where the study gives none),
    and the training settings (``lr``, ``batch_size``) the study sweeps."""
    grid = _mapping(grid, path, optional=None)
    params = {h.name: h for h in method.hyperparams}
    settings = {h.name: h for h in method.setting_params}
    models = {}  # role.keyword -> the values of a module keyword the grid sweeps
    for key in grid:
        if is_model_keyword(key):
            values = grid[key] if isinstance(grid[key], list) and grid[key] else [grid[key]]
            models[key] = [method.model_keyword_value(key, v, f"{path}.{key}" + (f"[{i}]" if len(values) > 1 else ""))
                           for i, v in enumerate(values)]
        elif key not in params and key not in settings:
            known = [*params, *settings]
            raise InputError(f"{path}.{key}: '{method.name}' has no hyperparameter '{key}'; "
                             f"it has: {', '.join(known) or 'none'}")
    paper = method.paper_grid(dataset)
    out = {}
    for key, hp in {**params, **{k: v for k, v in settings.items() if k in grid}}.items():
        if key not in grid:
            out[key] = list(paper[key])
            continue
        values = grid[key]
        if isinstance(values, dict):
            r = _mapping(values, f"{path}.{key}", required=("start", "stop", "step"), optional=())
            start, stop = (_number(r[k], f"{path}.{key}.{k}") for k in ("start", "stop"))
            step = _number(r["step"], f"{path}.{key}.step", low=0.0, low_open=True)
            if stop < start:
                raise InputError(f"{path}.{key}.stop: must be >= start ({start}), got {stop}")
            span = (stop - start) / step  # inf where the floats overflow
            # counted, not expanded: 1e12 values would take hours
            count = range_count(start, stop, step) if span <= MAX_CONFIGS_PER_METHOD else span + 1
            if count > MAX_CONFIGS_PER_METHOD:
                many = f"{math.floor(count):,}" if math.isfinite(count) else "more than a float can count:"
                raise InputError(f"{path}.{key}: {many} values, above fairdp's limit of "
                                 f"{MAX_CONFIGS_PER_METHOD:,} configs per method; a larger step or a search: block")
            values = arange_grid(start, stop, step)
            out[key] = [_value(hp, v, f"{path}.{key}[{i}]") for i, v in enumerate(values)]
        elif isinstance(values, list) and values:
            out[key] = [_value(hp, v, f"{path}.{key}[{i}]") for i, v in enumerate(values)]
        else:
            out[key] = [_value(hp, values, f"{path}.{key}")]
    return {**out, **models}


def _value(hp: HyperParam, value, path: str):
    """A hyperparameter's value (``HyperParam.validate``); an integer one must fit the int64 it
    is stored and trained as."""
    value = hp.validate(value, path)
    if hp.integer:
        checked_int(value, path)
    return value


def _resources(value) -> Resources:
    d = _mapping(value, "resources", optional=("cpus_per_trial", "gpus_per_trial", "max_failures"))
    cpus = _number(d.get("cpus_per_trial", 1), "resources.cpus_per_trial", low=0.0, low_open=True)
    gpus = _number(d.get("gpus_per_trial", 0), "resources.gpus_per_trial", low=0.0)
    if gpus > 1 and gpus != int(gpus):
        raise InputError(f"resources.gpus_per_trial: fractions are for sharing one GPU; above 1 it must be whole, got {gpus}")
    retries = checked_int(d.get("max_failures", 1), "resources.max_failures", low=0)
    return Resources(cpus, gpus, retries)


def _search(value, leakage: bool, mdl: bool, seeds: tuple[int, ...]) -> SearchSpec:
    d = _mapping(value, "search", required=("method", "objectives", "space"),
                 optional=("sampler", "trials", "fixed", "seed", "population", "constraints"))
    name = _string(d["method"], "search.method")
    if name not in method_names():
        raise InputError(f"search.method: unknown method '{name}'; known: {', '.join(method_names())}")
    method = get_method(name)
    params = {h.name: h for h in method.hyperparams}
    sampler = d.get("sampler", "nsga2")
    if sampler not in SAMPLERS:
        raise InputError(f"search.sampler: must be one of {', '.join(SAMPLERS)}, got {sampler!r}")
    trials = checked_int(d.get("trials", 100), "search.trials", low=1, high=MAX_TRIALS)
    population = checked_int(d.get("population", 16), "search.population", low=2, high=MAX_CONFIGS_PER_METHOD)
    objectives = _mapping(d["objectives"], "search.objectives", optional=None)
    if not objectives:
        raise InputError("search.objectives: needs at least one objective")
    for key, direction in objectives.items():
        if key not in OBJECTIVES:
            raise InputError(f"search.objectives.{key}: no method reports '{key}'; objectives: {', '.join(OBJECTIVES)}")
        if (key == "leakage" and not leakage) or (key == "mdl" and not mdl):
            raise InputError(f"search.objectives.{key}: evaluate.{key} is false, so no run reports it")
        if direction not in ("min", "max"):
            raise InputError(f"search.objectives.{key}: direction must be min or max, got {direction!r}")
    space_raw = _mapping(d["space"], "search.space", optional=None)
    space = {}
    for key, body in space_raw.items():
        path = f"search.space.{key}"
        if is_model_keyword(key):  # a keyword of the user's module (encoder.width): each trial builds its own
            space[key] = _keyword_space(method, key, body, path)
            continue
        if key not in params:
            raise InputError(f"{path}: '{name}' has no hyperparameter '{key}'; it has: {', '.join(params) or 'none'}")
        hp = params[key]
        if isinstance(body, dict) and "choices" in body:
            b = _mapping(body, path, required=("choices",), optional=())
            if not isinstance(b["choices"], list) or not b["choices"]:
                raise InputError(f"{path}.choices: must be a non-empty list")
            space[key] = {"choices": [_value(hp, v, f"{path}.choices[{i}]") for i, v in enumerate(b["choices"])]}
            continue
        b = _mapping(body, path, required=("low", "high"), optional=("log",))
        low, high = _value(hp, b["low"], f"{path}.low"), _value(hp, b["high"], f"{path}.high")
        if not high > low:
            raise InputError(f"{path}.high: must be > low ({low}), got {high}")
        log = b.get("log", False)
        if not isinstance(log, bool):
            raise InputError(f"{path}.log: must be true or false, got {log!r}")
        if log and low <= 0:
            raise InputError(f"{path}.low: a log scale needs low > 0, got {low}")
        space[key] = {"low": low, "high": high, "log": log, "int": hp.integer}
    fixed_raw = _mapping(d.get("fixed") or {}, "search.fixed", optional=None)
    fixed = {}
    for key, v in fixed_raw.items():
        if key not in params and not is_model_keyword(key):
            raise InputError(f"search.fixed.{key}: '{name}' has no hyperparameter '{key}'")
        if key in space:
            raise InputError(f"search.fixed.{key}: also in search.space")
        fixed[key] = method.model_keyword_value(key, v, f"search.fixed.{key}") if is_model_keyword(key) else \
            _value(params[key], v, f"search.fixed.{key}")
    for key in params:  # an optional one (``HyperParam.default``) left out trains at its default
        if key not in space and key not in fixed and params[key].default is None:
            raise InputError(f"search.space.{key}: '{name}' needs '{key}' searched (space) or set (fixed)")
    seed = checked_int(d.get("seed", seeds[0]), "search.seed", low=0)
    constraints_raw = d.get("constraints") or []
    if not isinstance(constraints_raw, list):
        raise InputError(f"search.constraints: must be a list of strings like 'valid_accuracy >= 80', "
                         f"got {constraints_raw!r}")
    constraints = parse_constraints(constraints_raw, "search.constraints")
    for i, c in enumerate(constraints):
        if (c.metric == "leakage" and not leakage) or (c.metric == "mdl" and not mdl):
            raise InputError(f"search.constraints[{i}]: evaluate.{c.metric} is false, so no run reports it")
    return SearchSpec(name, sampler, trials, dict(objectives), space, fixed, seed, population, constraints)


def _keyword_space(method: Method, key: str, body, path: str) -> dict:
    """A search space for a keyword of the user's module: ``{choices: [...]}`` of values a
    module keyword takes, or ``{low, high, log}``, integers when both ends are."""
    if isinstance(body, dict) and "choices" in body:
        b = _mapping(body, path, required=("choices",), optional=())
        if not isinstance(b["choices"], list) or not b["choices"]:
            raise InputError(f"{path}.choices: must be a non-empty list")
        return {"choices": [method.model_keyword_value(key, v, f"{path}.choices[{i}]")
                            for i, v in enumerate(b["choices"])]}
    b = _mapping(body, path, required=("low", "high"), optional=("log",))
    ends = [b["low"], b["high"]]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in ends):
        raise InputError(f"{path}: low and high must be finite numbers, got {ends}")
    method.model_keyword_value(key, ends[0], f"{path}.low")  # the role must take a module
    integer = all(isinstance(v, int) for v in ends)
    low, high = (ends if integer else [float(v) for v in ends])
    if not high > low:
        raise InputError(f"{path}.high: must be > low ({low}), got {high}")
    log = b.get("log", False)
    if not isinstance(log, bool):
        raise InputError(f"{path}.log: must be true or false, got {log!r}")
    if log and low <= 0:
        raise InputError(f"{path}.low: a log scale needs low > 0, got {low}")
    return {"low": low, "high": high, "log": log, "int": integer}


def _tuning(value, by: tuple[str, ...], search) -> TrialCount:
    """``tuning: {count: poisson, mean: 20}`` or ``{count: truncated_negative_binomial, mean, shape}``:
    each run trains a random number of configs drawn from its method's grid."""
    d = _mapping(value, "tuning", required=("count", "mean"), optional=("shape",))
    count = d["count"]
    if count not in COUNTS:
        raise InputError(f"tuning.count: must be one of {', '.join(COUNTS)}, got {count!r}")
    # dp-accounting's RepeatAndSelect bound needs a mean of at least one trial
    # capped like search.trials; numpy's samplers fail on counts near float's range
    mean = _number(d["mean"], "tuning.mean", low=1.0, high=MAX_TRIALS)
    if count == "poisson":
        if "shape" in d:
            raise InputError("tuning.shape: a Poisson count has no shape (it is the shape-infinity limit)")
        shape = math.inf
    else:
        if "shape" not in d:
            raise InputError("tuning.shape: required for a truncated negative binomial (0: logarithmic, "
                             "1: geometric)")
        # past 1e6 the count is Poisson to float precision (the shape-infinity limit), and below 1e-6
        # logarithmic (shape 0), where eta log(gamma) would lose precision
        shape = _number(d["shape"], "tuning.shape", low=0.0, high=MAX_TUNING_SHAPE)
        if 0 < shape < MIN_TUNING_SHAPE:
            raise InputError(f"tuning.shape: must be 0 (logarithmic) or >= {MIN_TUNING_SHAPE:g}, got {shape!r}")
    if by:
        raise InputError(f"tuning: selection.by ({', '.join(by)}) splits each run into several selections, "
                         "each over a thinned count the bound does not cover; leave selection.by out")
    if search is not None:
        raise InputError("tuning: a search picks its trials adaptively, which the random-search bound does "
                         "not cover; drop search: or tuning:")
    return TrialCount(count, mean, shape)


# -- what the machine can hold ------------------------------------------------------------------

def check_sizes_fit(spec: StudySpec, data: Dataset, methods: list[str]) -> None:
    """InputError naming the key, checked once the data is loaded and before anything is
    written, if one config of a method does not fit this machine's memory: its network's
    parameters with their gradients and Adam's two moments, the representations of the valid
    and test rows it releases, or the probe trained on them."""
    itemsize = 8 if spec.train.dtype == "float64" else 4
    rows = len(data.splits["valid"]) + len(data.splits["test"])
    for name in methods:
        arch = spec.method_settings[name].architecture
        if arch is None:
            continue
        body = (spec.raw.get("methods") or {}).get(name)
        path = (f"methods.{name}.architecture" if isinstance(body, dict) and "architecture" in body
                else "architecture")
        method = get_method(name)
        params = max(sum(fan_in * fan_out + fan_out for fan_in, fan_out in method.layer_shapes(data, a))
                     if hasattr(method, "layer_shapes") else 0 for a in _config_architectures(spec, name, arch))
        check_fits_memory(params * itemsize * 4, path,
                          f"{name}'s {params:,} parameters per config with their gradients and optimiser state")
        width = arch.representation_dim
        check_fits_memory(rows * width * itemsize, path, f"{name}'s representations of {rows:,} rows, {width:,} wide")
        if (spec.leakage or spec.mdl) and spec.probe.kind == "mlp":
            hidden = spec.probe.hidden
            probe = (width + 1) * hidden + (hidden + 1) * data.n_groups
            check_fits_memory(probe * 4 * 4 + rows * hidden * 4, "evaluate.probe.hidden",
                              f"a probe of {hidden:,} hidden units on {name}'s {width:,}-wide representation")


def _config_architectures(spec: StudySpec, name: str, arch: Architecture) -> list[Architecture]:
    """The distinct architectures method ``name``'s configs train: ``arch``, or one per value of
    the module keywords its grid sweeps (``encoder.width``)."""
    plan = next((p for p in spec.methods if p.name == name), None)
    if plan is None:
        return [arch]
    method = get_method(name)
    return list(dict.fromkeys(method.config_architecture(c, arch) for c in plan.configs))


def study_modules(spec: StudySpec, data: Dataset) -> list[tuple[str, ModelRef, int, int]]:
    """Every module of the user's the study trains, once each: (role, module with its keywords,
    input size, output size) for each method and each value of the keywords its grid sweeps,
    with the sizes the data and the method's architecture give the role."""
    out = {}
    for name in [m.name for m in spec.methods] + ([spec.search.method] if spec.search else []):
        arch = spec.method_settings[name].architecture
        if arch is None or not arch.models:
            continue
        d = arch.representation_dim
        sizes = {"encoder": (data.n_features, d), "classifier": (d, data.n_classes), "adversary": (d, data.n_groups)}
        for a in _config_architectures(spec, name, arch):
            for role, ref in a.models:
                out.setdefault((role, ref, *sizes[role]), None)
    return list(out)


def check_models(spec: StudySpec, data: Dataset, methods: list[str]) -> None:
    """InputError naming the key, checked once the data is loaded and before anything is
    written, if a module of the user's (``architecture.models``) cannot be built for its
    role's sizes, cannot be packed (``packing_problems``: the layer and why), does not map
    a batch of rows to the role's output size, or cannot train a packed step in the study's
    dtype and precision (``trial_step``: forward with dropout, backward, and per-sample
    gradients for a method that clips per sample); and, for such a method (DP-SGD, PF-LD), if
    in training mode a row's output is not its own (``row_mixing``). Each module the grid's
    keywords make is checked."""
    # a module that is refused is refused in one line, without the warnings torch printed on the way
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _check_models(spec, data, methods)


def _check_models(spec: StudySpec, data: Dataset, methods: list[str]) -> None:
    rows = torch.randn(6, data.n_features, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for name in methods:
        arch = spec.method_settings[name].architecture
        if arch is None or not arch.models:
            continue
        body = (spec.raw.get("methods") or {}).get(name)
        own = ((body or {}).get("architecture") or {}).get("models") or {} if isinstance(body, dict) else {}
        d = arch.representation_dim
        sizes = {"encoder": (data.n_features, d), "classifier": (d, data.n_classes), "adversary": (d, data.n_groups)}
        # every module the grid's keywords make (``encoder.width``), each once
        refs = dict.fromkeys(ref for a in _config_architectures(spec, name, arch) for ref in a.models)
        plan = next((p for p in spec.methods if p.name == name), None)
        for role, ref in refs:
            swept = plan is not None and role in model_keywords(plan.configs[0])
            where = f"methods.{name}.grid.{role}" if swept else \
                f"methods.{name}.architecture.models.{role}" if role in own else f"architecture.models.{role}"
            d_in, d_out = sizes[role]
            try:
                module = ref.build(d_in, d_out)
                problems = packing_problems(module)
                out = None if problems else module(torch.zeros(2, d_in))
            except InputError:
                raise
            except Exception as e:  # noqa: BLE001 - the user's module's own error, as one line
                raise InputError(f"{where}: {ref.describe()} for {d_in} inputs and {d_out} outputs: "
                                 f"{type(e).__name__}: {' '.join(str(e).split())}") from None
            if problems:
                raise InputError(f"{where}: {ref.describe()} cannot be packed: {problems[0]}")
            if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, d_out):
                shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                raise InputError(f"{where}: {ref.describe()} maps a batch of (2, {d_in}) to {shape}; its role "
                                 f"needs (2, {d_out})")
            if get_method(name).clips_per_sample:
                # the rows' inputs the role sees: the data's width for the encoder, the encoder's for the rest
                x = rows if role == "encoder" else torch.randn(6, d_in, dtype=torch.float64,
                                                                generator=torch.Generator().manual_seed(1))
                try:
                    why = row_mixing(module.double(), x)
                except Exception as e:  # noqa: BLE001 - the user's module's own error, as one line
                    why = f"{type(e).__name__}: {' '.join(str(e).split())}"
                if why is not None:
                    raise InputError(f"{where}: {ref.describe()} cannot be clipped per sample by {name}: {why}")
            dtype = getattr(torch, spec.train.dtype)
            why = trial_step(functools.partial(ref.build, d_in, d_out), d_in, d_out, dtype=dtype,
                             bf16=dtype != torch.float64 and spec.train.precision in (None, "bf16"),
                             per_sample=get_method(name).clips_per_sample)
            if why is not None:
                raise InputError(f"{where}: {ref.describe()} for {d_in} inputs and {d_out} outputs: {why}")


# -- typed accessors ---------------------------------------------------------------------------

def _mapping(value, path: str, required=(), optional=()) -> dict:
    """A dict with string keys; ``optional=None`` allows any key, else unknown keys are errors."""
    where = path or "study"
    if not isinstance(value, dict):
        raise InputError(f"{where}: must be a mapping, got {type(value).__name__}")
    for key in value:
        if not isinstance(key, str) or not key.isprintable():  # a key is named in one-line errors
            raise InputError(f"{where}: keys must be printable strings, got {key!r}")
        if optional is not None and key not in required and key not in optional:
            allowed = ", ".join([*required, *optional])
            raise InputError(f"{_join(path, key)}: unknown key; allowed here: {allowed}")
    for key in required:
        if key not in value:
            raise InputError(f"{_join(path, key)}: required")
    return dict(value)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _string(value, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise InputError(f"{path}: must be a non-empty string, got {value!r}")
    return value


def _number(value, path: str, low: float | None = None, low_open: bool = False,
            high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{path}: must be a finite number, got {value!r}")
    if low is not None and (value <= low if low_open else value < low):
        raise InputError(f"{path}: must be {'>' if low_open else '>='} {low}, got {value!r}")
    if high is not None and value > high:
        raise InputError(f"{path}: must be <= {high:,g}, got {value!r}")
    return float(value)


def checked_int(value, path: str, low: int | None = None, high: int = INT64_MAX) -> int:
    """The one rule of every integer key and flag: an int (never a bool, a float or a numeric
    string) in [low, high], ``high`` at most int64's largest, which every stored integer is."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{path}: must be an integer, got {value!r}")
    if low is not None and value < low:
        raise InputError(f"{path}: must be >= {low}, got {value}")
    if value > high:
        limit = "2**63 - 1, the largest int64" if high == INT64_MAX else f"{high:,}"
        raise InputError(f"{path}: must be <= {limit}, got {value}")
    return value

