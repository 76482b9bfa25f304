"""Architecture presets (FEDERATE appendix D.3): the layer sizes of encoder, classifier and adversaries."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from dataclasses import fields as dataclasses_fields
from pathlib import Path

from fairdp.engine._models import ModelRef
from fairdp.errors import InputError

ROLES = ("encoder", "classifier", "adversary")


@dataclass(frozen=True, repr=False)
class Architecture:
    """Hidden sizes of the encoder E, the task classifier C and each adversary A.

    The encoder's last hidden size is the representation size D. ``classifier=()`` means a
    linear classifier; an adversary with hidden sizes (300, 300) has three layers. ``models``
    replaces a role's MLP by the user's module (``ModelRef`` per role, sorted by role): an
    encoder module maps the features to D values, a classifier D to the classes, an
    adversary D to the groups; its hidden sizes are then unused.
    """

    encoder: tuple[int, ...] = (300, 300)
    classifier: tuple[int, ...] = ()
    adversary: tuple[int, ...] = (300, 300)
    dropout: float = 0.1
    models: tuple[tuple[str, ModelRef], ...] = ()

    def __repr__(self) -> str:
        # without models as before they existed: checkpoints key on it, rows store to_dict()
        shown = [f for f in dataclasses_fields(self) if f.name != "models" or self.models]
        return f"Architecture({', '.join(f'{f.name}={getattr(self, f.name)!r}' for f in shown)})"

    def model_factories(self) -> dict:
        """role -> factory(in_features, out_features) of the user's modules."""
        return {role: ref.build for role, ref in self.models}

    @property
    def representation_dim(self) -> int:
        return self.encoder[-1]

    def to_dict(self) -> dict:
        out = asdict(self)
        del out["models"]
        if self.models:
            out["models"] = [[role, ref.to_dict()] for role, ref in self.models]
        return out


PRESETS: dict[str, Architecture] = {
    # Twitter Sentiment (Han et al. 2021): 2-layer encoder, linear classifier, 3-layer adversary.
    # FEDERATE uses it for Adult and CelebA too.
    "twitter": Architecture(encoder=(300, 300), classifier=(), adversary=(300, 300)),
    # Bias in Bios: 3-layer encoder, 3-layer classifier, 2-layer adversary.
    "bios": Architecture(encoder=(300, 300, 300), classifier=(300, 300), adversary=(300,)),
    # CAPE (Plant et al. 2021, Table 2): two dense layers of 256 and two-layer heads, dropout 0.4.
    "cape": Architecture(encoder=(256, 256), classifier=(256,), adversary=(256,), dropout=0.4),
}

DATASET_PRESET = {"bios": "bios"}  # every other dataset: the Twitter-shaped preset


def preset_for(dataset: str) -> Architecture:
    return PRESETS[DATASET_PRESET.get(dataset, "twitter")]


def architecture_from(spec: dict | None, dataset: str, base: Architecture | None = None,
                      path: str = "architecture", base_dir: str | Path | None = None) -> Architecture:
    """A preset by name (``{"preset": "bios"}``) or ``base`` (default: the dataset's preset),
    with any field overridden; errors name ``path``, e.g. ``methods.federate.architecture``.
    ``models`` maps roles to the user's modules (``ModelRef.parse``; files relative to ``base_dir``)."""
    if spec is not None and not isinstance(spec, dict):
        raise InputError(f"{path}: must be a mapping (preset, encoder, classifier, adversary, dropout, models), "
                         f"got {spec!r}")
    spec = dict(spec or {})
    name = spec.pop("preset", None)
    if name is not None and (not isinstance(name, str) or name not in PRESETS):
        raise InputError(f"{path}.preset: {name!r} is not one of {', '.join(PRESETS)}")
    base = PRESETS[name] if name else (base or preset_for(dataset))
    fields = {f.name for f in dataclasses_fields(base)}
    for key, value in spec.items():
        if not isinstance(key, str) or not key.isprintable():
            raise InputError(f"{path}: unknown field {key!r}; fields: preset, {', '.join(sorted(fields))}")
        if key not in fields:
            raise InputError(f"{path}.{key}: unknown field; fields: preset, {', '.join(sorted(fields))}")
        if key == "dropout":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise InputError(f"{path}.dropout: must be in [0, 1), got {value!r}")
        elif key == "models":
            spec[key] = _models(value, f"{path}.models", base_dir, dict(base.models))
        else:
            if not isinstance(value, (list, tuple)) or not all(
                    isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
                raise InputError(f"{path}.{key}: must be a list of positive layer sizes, got {value!r}")
            if key == "encoder" and not value:
                raise InputError(f"{path}.encoder: needs at least one layer")
            spec[key] = tuple(value)
    return replace(base, **spec)


def _models(value, path: str, base_dir, inherited: dict) -> tuple[tuple[str, ModelRef], ...]:
    if not isinstance(value, dict):
        raise InputError(f"{path}: must map roles ({', '.join(ROLES)}) to model factories, got {value!r}")
    out = dict(inherited)
    for role, ref in value.items():
        if role not in ROLES:
            raise InputError(f"{path}.{role}: unknown role; roles: {', '.join(ROLES)}")
        out[role] = ModelRef.parse(ref, f"{path}.{role}", base_dir)
    return tuple(sorted(out.items()))


def is_model_keyword(key) -> bool:
    """Whether a config or grid key names a keyword of a user's module (``encoder.width``):
    the one definition the methods, the planner, the rows and the spec share."""
    return isinstance(key, str) and "." in key


def model_keywords(config: dict) -> dict[str, dict]:
    """``{role: {keyword: value}}`` of the module keywords ``config`` sweeps (empty for none)."""
    out: dict[str, dict] = {}
    for key, value in config.items():
        if is_model_keyword(key):
            role, _, keyword = key.partition(".")
            out.setdefault(role, {})[keyword] = value
    return out


def with_model_keywords(arch: Architecture, keywords: dict[str, dict], path: str = "config") -> Architecture:
    """``arch`` with role r's module called with ``keywords[r]`` over its own keywords: a config
    that sweeps a module's keywords (grid keys ``encoder.width``) trains this architecture."""
    if not keywords:
        return arch
    models = dict(arch.models)
    for role, kwargs in keywords.items():
        if role not in models:
            raise InputError(f"{path}.{role}.{next(iter(kwargs))}: no module of the user's is the {role} "
                             f"(architecture.models.{role}); a grid sweeps the keywords of one")
        ref = models[role]
        models[role] = ref.with_kwargs(kwargs)
    return replace(arch, models=tuple(sorted(models.items())))


def describe_architecture(arch: Architecture, adversaries: int = 1) -> str:
    """'encoder 300-300, classifier linear, 1 adversary 300-300, dropout 0.1' (hidden sizes)."""
    def sizes(layers):
        return "-".join(map(str, layers)) if layers else "linear"

    models = dict(arch.models)

    def part(role, layers):
        return models[role].describe() if role in models else sizes(layers)

    adv = f"{adversaries} adversar{'y' if adversaries == 1 else 'ies'} {part('adversary', arch.adversary)}, " \
        if adversaries else ""
    # architecture.dropout is the built-in MLPs' rate, applied after the encoder's layers and
    # between the hidden layers of the others (none in a linear one); a user's module has its own
    droppers = [r for r in ("encoder", "classifier", *(("adversary",) if adversaries else ()))
                if r not in models and (r == "encoder" or getattr(arch, r))]
    if not models:
        dropout = f"dropout {arch.dropout:g}" if droppers else "no dropout"
    elif droppers and arch.dropout:
        dropout = f"dropout {arch.dropout:g} in the {' and '.join(droppers)} MLP{'s' if len(droppers) > 1 else ''}"
    else:
        dropout = "no MLP dropout"
    return f"encoder {part('encoder', arch.encoder)}, classifier {part('classifier', arch.classifier)}, {adv}{dropout}"
