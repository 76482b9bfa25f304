"""The method contract: hyperparameters and paper grid, how a pack trains, and the guarantee
of each config it trains (the privacy hook, as opacus's ``IAccountant.get_epsilon``)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from fairdp.data import Dataset
from fairdp.engine import (
    Architecture,
    Checkpointing,
    ModelSpec,
    TrainSettings,
    fit_pack,
    layer_shapes,
)
from fairdp.engine._shared import (
    config_id,
    is_model_keyword,
    merge_results,
    model_keywords,
    preset_for,
    with_model_keywords,
)
from fairdp.engine.contract import EpochReport, PackContext, PackResult, PackStep
from fairdp.errors import InputError
from fairdp.methods._representation import RepresentationStep
from fairdp.privacy import NOT_PRIVATE, Guarantee, minmax_true_epsilon
from fairdp.privacy._shared import LARGEST_L1_EPS, LARGEST_SCALE_EPS, event_to_json, guarantee_kind


@dataclass(frozen=True)
class HyperParam:
    """A hyperparameter's valid range: (low, high] when ``low_open``, else [low, high].

    Its ``name`` is also the name of its column in the result rows. One with a ``default``
    (not None) is optional: a config that leaves it out trains at the default
    (``Method.validate_config`` fills it in), and a config that names the default is the
    config that leaves it out, with the same id (``Method.config_id`` leaves it out). A
    method can so gain a hyperparameter without changing its stored configs' ids or rows.
    """

    name: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    integer: bool = False
    choices: tuple | None = None
    doc: str = ""
    default: object = None

    @property
    def column_type(self) -> str:
        """'string' for a choice among strings, else 'float64' (integers too: the column holds
        nulls for methods without this hyperparameter)."""
        if self.choices is not None and all(isinstance(c, str) for c in self.choices):
            return "string"
        return "float64"

    def to_column(self, value):
        return value if self.column_type == "string" else float(value)

    def validate(self, value, path: str):
        if self.choices is not None:
            if value not in self.choices:
                raise InputError(f"{path}: {value!r} is not one of {', '.join(map(str, self.choices))}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(f"{path}: must be a finite number, got {value!r}")
        if self.integer and value != int(value):
            raise InputError(f"{path}: must be an integer, got {value!r}")
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            raise InputError(f"{path}: must be {'>' if self.low_open else '>='} {self.low}, got {value!r}")
        if self.high is not None and value > self.high:
            raise InputError(f"{path}: must be <= {self.high}, got {value!r}")
        return int(value) if self.integer else float(value)


EPS = HyperParam("eps", low=0.0, low_open=True, high=LARGEST_L1_EPS,
                 doc="privacy budget of the Laplace layer (its exact tables reach eps 24)")
MINMAX_EPS = HyperParam("eps", low=0.0, low_open=True, high=LARGEST_SCALE_EPS,
                        doc="claimed budget of the min-max Laplace layer, noise 1/eps (tables reach eps 12)")
LAM = HyperParam("lam", low=0.0, doc="adversarial weight lambda")
# DP-SGD and PF-LD: the eps their noise is calibrated to, by the study's accountant (RDP unless
# ``train.accountant`` says pld) at delta 1e-5
TARGET_EPS = HyperParam("eps", low=0.0, low_open=True,
                        doc="target eps of the accountant, RDP or PLD (`train.accountant`; delta 1e-5)")

# Training settings a grid may sweep for a method trained by gradient: the learning rate (the
# primal step of Tran et al.'s Algorithm 1) and the minibatch size. Unlike a hyperparameter, a
# config that does not name one trains at the study's value (``train.batch_size``, the method's
# learning rate), so grids that leave them out keep their configs and ids. Rows store the value
# each config trained at in the ``lr`` and ``batch_size`` columns.
LR = HyperParam("lr", low=0.0, low_open=True, doc="learning rate (Tran et al.'s primal step alpha)")
BATCH_SIZE = HyperParam("batch_size", low=1, integer=True, doc="minibatch size")
SETTING_PARAMS = (LR, BATCH_SIZE)


def range_count(start: float, stop: float, step: float) -> int:
    """How many values ``arange_grid(start, stop, step)`` has, without making them."""
    return int(math.floor((stop - start) / step + 1e-9)) + 1


def arange_grid(start: float, stop: float, step: float) -> list[float]:
    """start, start+step, ... up to stop (inclusive within rounding), rounded to avoid 0.30000000000000004."""
    return [round(start + i * step, 10) for i in range(range_count(start, stop, step))]


@dataclass(frozen=True)
class RunInfo:
    """What a config's guarantee may depend on besides the config: the run's shape."""

    n: int                    # training rows
    batch_size: int           # minibatch size actually used (at most n)
    epochs: int
    representation_dim: int   # width of what an attacker sees
    n_groups: int
    # the dp-accounting accountant ("rdp" or "pld", ``TrainSettings.accountant``) that an
    # accountant-based method calibrates its noise with and reports the eps of
    accountant: str = "rdp"

    @classmethod
    def of(cls, data: Dataset, settings: TrainSettings, representation_dim: int) -> RunInfo:
        n = len(data.splits["train"])
        return cls(n, min(settings.batch_size, n), settings.epochs, representation_dim, data.n_groups,
                   settings.accountant)


class Method(ABC):
    """A registered method: ``name``, its hyperparameters, its paper grid, how it trains a
    pack (``fit``) and the guarantee of each config it trains (``privacy``)."""

    name: ClassVar[str]
    hyperparams: ClassVar[tuple[HyperParam, ...]] = ()
    binary_only: ClassVar[bool] = False  # constraints written for y in {0, 1}
    # How the method trains: "adam", "sgd", or None when it does not train by gradient (a
    # learning rate does not apply), and the step size its paper uses.
    optimizer: ClassVar[str | None] = None
    default_lr: ClassVar[float | None] = None
    # Whether an ``Architecture`` shapes what the method trains (a study may set one).
    uses_architecture: ClassVar[bool] = False
    # What its ``eps`` protects: "local" (eps-LDP of each released representation or
    # attribute), "central" ((eps, delta)-DP of the training data), None (not private).
    privacy_scope: ClassVar[str | None] = None
    # What one neighbouring change alters: "record" (the whole training record), "attribute"
    # (its sensitive attribute only) or "representation" (the representation it releases);
    # None: "attribute" under the relation replace_attribute, else "representation" for a
    # local guarantee and "record" for a central one (``guarantee_kind``).
    privacy_unit: ClassVar[str | None] = None
    # Whether it clips each row's gradient (DP-SGD, PF-LD): ``train.clipping`` applies to it.
    clips_per_sample: ClassVar[bool] = False
    # Whether each step draws a Poisson sample of the training rows (DP-SGD, PF-LD):
    # ``train.sampler`` applies to it, and its rows record the sampler.
    poisson_sampled: ClassVar[bool] = False

    def check_dataset(self, data: Dataset, path: str | None = None) -> None:
        """Refuse, before any training, a dataset this method cannot train on."""
        if self.binary_only and data.n_classes != 2:
            raise InputError(f"{path or 'methods.' + self.name}: '{self.name}' needs binary labels; "
                             f"'{data.name}' has {data.n_classes} classes")

    @abstractmethod
    def paper_grid(self, dataset: str) -> dict[str, list]:
        """Hyperparameter lists whose product is the paper's grid for this dataset."""

    @abstractmethod
    def fit(self, data: Dataset, configs: list[dict], config_ids: list[str], seed: int,
            settings: TrainSettings, arch: Architecture,
            callback: Callable[[EpochReport], None] | None = None,
            checkpoint: Checkpointing | None = None) -> PackResult:
        """Train validated configs together: predictions and attacker-visible representations
        of the valid and test splits (``privacy`` is filled in by ``train_pack``). A method
        trained by ``fit_pack`` passes ``checkpoint`` on to it; one trained in a single pass
        (no epochs to resume from) ignores it."""

    def privacy(self, config: dict, run: RunInfo) -> Guarantee:
        """The (eps, delta) guarantee a trained config has; (inf, 0) for a non-private method.

        Mechanisms with a fixed guarantee answer from the config; accountant-based ones
        calibrate their noise for ``run`` and report the accountant's eps for it.
        """
        return NOT_PRIVATE

    # the adjacency ``dp_event``'s guarantee is stated under (one of fairdp.privacy._release.RELATION_NAMES)
    neighbour_relation: ClassVar[str] = "add_or_remove_one"

    @property
    def guarantee_kind(self) -> str | None:
        """The kind of this method's guarantee, what every row it trains stores as
        ``guarantee``: scope, neighbouring relation and the unit protected, e.g. "central,
        add/remove one record" (``fairdp.privacy._guarantee.guarantee_kind``); None for a
        method without privacy. The one source of the kind: tables and figures label each
        method's eps with it."""
        return guarantee_kind(self.privacy_scope, self.neighbour_relation, self.privacy_unit)

    def dp_event(self, config: dict, run: RunInfo):
        """The ``dp_accounting.DpEvent`` of training ``config`` on the training data, for a
        method whose ``privacy`` is an accountant's (eps, delta) of that data; None otherwise
        (no privacy, or a local guarantee per released representation). A study composes
        these events into the guarantee of releasing its selection (``eps_released``)."""
        return None

    def train_pack(self, data: Dataset, configs: list[dict], seed: int, settings: TrainSettings,
                   arch: Architecture | None = None,
                   callback: Callable[[EpochReport], None] | None = None,
                   config_ids: list[str] | None = None, checkpoint: Checkpointing | None = None) -> PackResult:
        """Validate ``configs``, train them as one pack, and return the outputs with each
        config's guarantee from ``privacy`` and its ``dp_event`` as JSON. ``config_ids`` key
        the configs' random streams (default: their hyperparameters' hash); a study that draws
        one config twice gives each draw its own id, hence fresh randomness. Configs that name
        other training settings (``lr``, ``batch_size``) or module keywords (``encoder.width``)
        than the others train as separate packs, one per setting, and come back in the order given. With a ``checkpoint`` a pack
        of one setting saves its training state as it goes and resumes from a saved one."""
        self.check_dataset(data)
        configs = [self.validate_config(c) for c in configs]
        config_ids = list(config_ids) if config_ids is not None else [self.config_id(c) for c in configs]
        if len(config_ids) != len(configs):
            raise ValueError(f"{len(config_ids)} config_ids for {len(configs)} configs")
        arch = arch or self.default_architecture(data.name)
        per_config = [self.config_settings(c, settings) for c in configs]
        archs = [self.config_architecture(c, arch) for c in configs]
        runs = [RunInfo.of(data, s, self.representation_dim(data, a)) for s, a in zip(per_config, archs)]
        privacy = tuple(self._checked(self.privacy(c, run)) for c, run in zip(configs, runs))
        events = tuple(self.event_json(c, run) for c, run in zip(configs, runs))
        groups: dict[tuple[TrainSettings, Architecture], list[int]] = {}
        for i, key in enumerate(zip(per_config, archs)):
            groups.setdefault(key, []).append(i)
        if len(groups) == 1:
            result = self.fit(data, configs, config_ids, seed, per_config[0], archs[0], callback, checkpoint)
        else:  # a study's planner gives each pack one setting; one checkpoint file holds one fit
            result = merge_results([(index, self.fit(data, [configs[i] for i in index],
                                                     [config_ids[i] for i in index], seed, s, a, callback))
                                    for (s, a), index in groups.items()], configs)
        return dataclasses.replace(result, privacy=privacy, privacy_events=events)

    @property
    def setting_params(self) -> tuple[HyperParam, ...]:
        """The training settings a grid may sweep for this method (``SETTING_PARAMS`` if it
        trains by gradient, else none)."""
        return SETTING_PARAMS if self.optimizer is not None else ()

    def config_settings(self, config: dict, settings: TrainSettings) -> TrainSettings:
        """The settings ``config`` trains at: ``settings`` with the method's learning rate
        (``effective_settings``), and the config's own ``lr`` and ``batch_size`` where it names them."""
        settings = self.effective_settings(settings)
        changes = {p.name: config[p.name] for p in self.setting_params if p.name in config}
        return dataclasses.replace(settings, **changes) if changes else settings

    def grid_events(self, data: Dataset, configs: list[dict], settings: TrainSettings,
                    arch: Architecture | None = None) -> list[str | None]:
        """``event_json`` of each of ``configs`` as ``train_pack`` would record it."""
        dim = self.representation_dim(data, arch or self.default_architecture(data.name))
        out = []
        for c in configs:
            c = self.validate_config(c)
            out.append(self.event_json(c, RunInfo.of(data, self.config_settings(c, settings), dim)))
        return out

    def event_json(self, config: dict, run: RunInfo) -> str | None:
        """``dp_event`` of ``config`` as JSON with this method's neighbouring relation, or None."""
        event = self.dp_event(config, run)
        return None if event is None else event_to_json(event, self.neighbour_relation)

    def effective_settings(self, settings: TrainSettings) -> TrainSettings:
        """``settings`` with the learning rate this method trains at: the one given, else its
        paper's (``default_lr``); None for a method that does not train by gradient."""
        if self.optimizer is None:
            return dataclasses.replace(settings, lr=None)
        return settings if settings.lr is not None else dataclasses.replace(settings, lr=self.default_lr)

    def _checked(self, guarantee) -> Guarantee:
        eps, delta = (float(v) for v in guarantee)
        if not (eps > 0 and 0 <= delta < 1):
            raise ValueError(f"method {self.name!r}: privacy() must return eps > 0 (inf: none) and delta "
                             f"in [0, 1), got {guarantee!r}")
        return Guarantee(eps, delta)

    def default_architecture(self, dataset: str) -> Architecture:
        return preset_for(dataset)

    def architecture_fields(self) -> tuple[str, ...]:
        """The ``Architecture`` fields that shape the network this method trains; a study that
        sets another one for it is refused, since it would change nothing. Empty: no network
        (``uses_architecture`` may still be True, for a representation of the encoder's width)."""
        return ()

    def model_roles(self) -> tuple[str, ...]:
        """The roles (encoder, classifier, adversary) for which a study may give this method a
        module of the user's (``architecture.models``); none unless the method says."""
        return ()

    def representation_dim(self, data: Dataset, arch: Architecture | None = None) -> int:
        """Width of the representation an attacker sees (the encoder's output by default)."""
        return (arch or self.default_architecture(data.name)).representation_dim

    def validate_config(self, config: dict, path: str = "config") -> dict:
        """``config`` checked: every hyperparameter, the training settings it sweeps, and the
        keywords of the user's modules it sweeps (``role.keyword``, ``model_keyword_value``)."""
        known = {h.name: h for h in self.hyperparams}
        settings = {h.name: h for h in self.setting_params}
        if not isinstance(config, dict):
            raise InputError(f"{path}: must be a mapping of hyperparameters, got {type(config).__name__}")
        out = {}
        for key, value in config.items():
            if is_model_keyword(key):
                out[key] = self.model_keyword_value(key, value, f"{path}.{key}")
            elif key not in known and key not in settings:
                raise InputError(f"{path}.{key}: '{self.name}' has no hyperparameter '{key}'; "
                                 f"it has: {', '.join([*known, *settings]) or 'none'}")
            else:
                out[key] = (known.get(key) or settings[key]).validate(value, f"{path}.{key}")
        out.update({k: h.default for k, h in known.items() if k not in config and h.default is not None})
        missing = [k for k in known if k not in out]
        if missing:
            raise InputError(f"{path}.{missing[0]}: '{self.name}' needs a value for '{missing[0]}'")
        return out

    def model_keyword_value(self, key: str, value, path: str):
        """A config's keyword for the user's module of a role (``encoder.width``: 64): the role
        must be one of ``model_roles``, the keyword a Python name, the value a number, string
        or boolean (what a study file can write and a row's architecture stores)."""
        role, _, keyword = key.partition(".")
        if role not in self.model_roles():
            raise InputError(f"{path}: '{self.name}' takes no module of the user's as its {role!r}; model "
                             f"keywords apply to: {', '.join(self.model_roles()) or 'none of its parts'}")
        if not keyword.isidentifier():
            raise InputError(f"{path}: a module's keyword must be a Python name, got {keyword!r}")
        if isinstance(value, float) and not math.isfinite(value) or not isinstance(value, (bool, int, float, str)):
            raise InputError(f"{path}: a module's keyword takes a finite number, a string or a boolean, "
                             f"got {value!r}")
        return value

    def config_architecture(self, config: dict, arch: Architecture, path: str = "config") -> Architecture:
        """The architecture ``config`` trains: ``arch`` with the module keywords it sweeps."""
        return with_model_keywords(arch, model_keywords(config), path)

    def expand(self, grid: dict[str, list]) -> list[dict]:
        """The product of ``grid``'s lists: every hyperparameter (an optional one where ``grid``
        names it), the training settings and the module keywords (``role.keyword``) it names."""
        keys = [h.name for h in self.hyperparams if h.default is None or h.name in grid] + \
            [h.name for h in self.setting_params if h.name in grid] + \
            [k for k in grid if is_model_keyword(k)]
        return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]

    def config_id(self, config: dict) -> str:
        """The stable hash of ``config``; an optional hyperparameter at its default is left out
        (``HyperParam.default``), so naming it or not is one config."""
        optional = {h.name: h.default for h in self.hyperparams if h.default is not None}
        return config_id(self.name, {k: v for k, v in config.items() if not (k in optional and v == optional[k])})


class NeuralMethod(Method):
    """A method trained by the engine's loop (``fairdp.engine.fit_pack``).

    ``make_step`` builds the ``PackStep`` of a chunk of configs. By default that is the
    encoder -> privatiser -> classifier (+ adversaries) model of FEDERATE's family, set up
    by ``spec``; the guarantee then follows from the spec's privatiser. A new neural method
    overrides ``make_step`` (and ``layer_shapes`` if its model is another shape), never the loop.
    """

    spec: ClassVar[ModelSpec] = ModelSpec()
    optimizer = "adam"
    default_lr = 1e-3  # FEDERATE D.4: Adam, learning rate 0.001
    uses_architecture = True

    def make_step(self, ctx: PackContext) -> PackStep:
        return RepresentationStep(ctx, self.spec)

    def architecture_fields(self) -> tuple[str, ...]:
        if type(self).make_step is not NeuralMethod.make_step:  # its own step reads what it reads
            return ("encoder", "classifier", "adversary", "dropout")
        return ("encoder", "classifier", "dropout") + (("adversary",) if self.spec.adversaries else ())

    def model_roles(self) -> tuple[str, ...]:
        """The representation step's parts, except adversaries whose hidden layers the
        orthogonality term reads (a user's module has no layers fairdp can name); a method
        with its own step says for itself."""
        if type(self).make_step is not NeuralMethod.make_step:
            return ()
        parts = [f for f in self.architecture_fields() if f in ("encoder", "classifier", "adversary")]
        return tuple(p for p in parts if not (p == "adversary" and self.spec.orthogonality))

    def layer_shapes(self, data: Dataset, arch: Architecture) -> list[tuple[int, int]]:
        """(fan_in, fan_out) of one config's linear layers: the engine sizes chunks from them."""
        return layer_shapes(self.spec, arch, data.n_features, data.n_classes, data.n_groups)

    def fit(self, data, configs, config_ids, seed, settings, arch, callback=None, checkpoint=None):
        return fit_pack(self.make_step, data, configs, config_ids, seed, settings, arch,
                        shapes=self.layer_shapes(data, arch), callback=callback, checkpoint=checkpoint)

    def privacy(self, config, run):
        if self.spec.privatizer == "laplace":
            # FEDERATE Theorem 1: L1-normalised rows (sensitivity 2) plus Laplace(2/eps) is eps-LDP
            return Guarantee(float(config["eps"]), 0.0)
        if self.spec.privatizer == "minmax":
            # DPNR as published: [0, 1]^D rows have L1 sensitivity D, not 1 (FEDERATE appendix C)
            return Guarantee(float(minmax_true_epsilon(config["eps"], run.representation_dim)), 0.0)
        return NOT_PRIVATE
