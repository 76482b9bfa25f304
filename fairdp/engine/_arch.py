"""Architecture presets (FEDERATE appendix D.3): the layer sizes of encoder, classifier and adversaries."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from fairdp.errors import InputError


@dataclass(frozen=True)
class Architecture:
    """Hidden sizes of the encoder E, the task classifier C and each adversary A.

    The encoder's last hidden size is the representation size D. ``classifier=()`` means a
    linear classifier; an adversary with hidden sizes (300, 300) has three layers.
    """

    encoder: tuple[int, ...] = (300, 300)
    classifier: tuple[int, ...] = ()
    adversary: tuple[int, ...] = (300, 300)
    dropout: float = 0.1

    @property
    def representation_dim(self) -> int:
        return self.encoder[-1]

    def to_dict(self) -> dict:
        return asdict(self)


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


def architecture_from(spec: dict | None, dataset: str) -> Architecture:
    """A preset by name (``{"preset": "bios"}``) or the dataset's, with any field overridden."""
    spec = dict(spec or {})
    name = spec.pop("preset", None)
    if name is not None and name not in PRESETS:
        raise InputError(f"architecture.preset: '{name}' is not one of {', '.join(PRESETS)}")
    base = PRESETS[name] if name else preset_for(dataset)
    fields = set(base.to_dict())
    for key, value in spec.items():
        if key not in fields:
            raise InputError(f"architecture.{key}: unknown field; fields: {', '.join(sorted(fields))}")
        if key == "dropout":
            if not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise InputError(f"architecture.dropout: must be in [0, 1), got {value!r}")
        else:
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and v > 0 for v in value):
                raise InputError(f"architecture.{key}: must be a list of positive layer sizes, got {value!r}")
            if key == "encoder" and not value:
                raise InputError("architecture.encoder: needs at least one layer")
            spec[key] = tuple(value)
    return replace(base, **spec)
