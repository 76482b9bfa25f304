"""A probe's settings (``evaluate.probe``) and how a row records them: apart from the probes
themselves (``_probes``, torch), so that describing stored rows' probes loads no torch."""

from __future__ import annotations

import json
from dataclasses import dataclass

from fairdp.errors import InputError


@dataclass(frozen=True)
class ProbeSettings:
    kind: str = "mlp"  # "mlp" (one hidden layer) or "linear"
    hidden: int = 100
    lr: float | None = None  # Adam step: 1e-3 for the MLP (sklearn's), 1e-2 for the linear probe
    alpha: float = 1e-4
    batch_size: int = 200
    max_epochs: int = 200
    tol: float = 1e-4
    patience: int = 10
    early_stopping: bool = True  # False: stop on the training loss, sklearn's default
    validation_fraction: float = 0.1
    standardize: bool = True
    backend: str = "torch"  # or "sklearn", the reference
    device: str | None = None
    seed: int = 0

    @property
    def step_size(self) -> float:
        return self.lr if self.lr is not None else (1e-3 if self.kind == "mlp" else 1e-2)

    def __post_init__(self):
        if self.kind not in ("mlp", "linear"):
            raise InputError(f"evaluate.probe.kind: must be mlp or linear, got {self.kind!r}")
        if self.backend not in ("torch", "sklearn"):
            raise InputError(f"evaluate.probe.backend: must be torch or sklearn, got {self.backend!r}")

    def protocol(self) -> dict:
        """What decides a probe's numbers (stored with each row as JSON): every setting a study
        can choose (``evaluate.probe``), the step size as effective; :meth:`from_protocol` reads it back."""
        out = {"kind": self.kind, "standardize": self.standardize, "early_stopping": self.early_stopping,
               "backend": self.backend, "alpha": self.alpha, "lr": self.step_size, "batch_size": self.batch_size,
               "max_epochs": self.max_epochs, "patience": self.patience}
        if self.kind == "mlp":
            out["hidden"] = self.hidden
        return out

    @classmethod
    def from_protocol(cls, text: str) -> ProbeSettings:
        """The settings a row's ``probe`` JSON records (:meth:`protocol`); keys a row lacks,
        stored before fairdp recorded them, take their defaults."""
        return cls(**json.loads(text))

    def describe(self) -> str:
        """'MLP probe (100 hidden ReLU units, L2 alpha 0.0001), standardised inputs, early stopping
        on 10% held out'."""
        kind = (f"MLP probe ({self.hidden} hidden ReLU units, L2 alpha {self.alpha:g})" if self.kind == "mlp"
                else f"linear probe (L2 alpha {self.alpha:g})")
        scale = "standardised inputs" if self.standardize else "unscaled inputs"
        stop = (f"early stopping on {self.validation_fraction:.0%} held out" if self.early_stopping
                else f"stopping on the training loss (at most {self.max_epochs} epochs)")
        return f"{kind}, {scale}, {stop}" + (" (scikit-learn)" if self.backend == "sklearn" else "")


# FEDERATE's leakage probe as its public code trains it (see the module docstring).
FEDERATE_PROBE = ProbeSettings(standardize=True, early_stopping=False, alpha=1.0, max_epochs=1000)
