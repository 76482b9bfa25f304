"""The precision a study trains in when its file does not say, chosen once per study by the driver.

Rows store the precision their pack computed in, and bf16 rows and full-precision rows are two
protocols that one table never mixes (``check_same_training``). So the default is decided once,
by the driver, for the whole study, in this order:

1. ``train.precision``, when the study gives it;
2. the study's stored rows: a resumed study keeps the protocol it started with (so results
   stored before bf16 became a default, all float32, stay float32);
3. full precision (TF32 on CUDA, float32 on a CPU) when packs train on a GPU, or in float64;
4. bf16 when the CPU of every worker multiplies bf16 matrices in hardware (AVX512-BF16, AMX,
   Arm BF16: measured 1.3-1.7x float32's throughput); float32 otherwise, because emulated bf16
   is slower than float32.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from fairdp.engine import TrainSettings

FULL = "tf32 on CUDA, float32 on a CPU"  # what TrainSettings.precision None computes in


@dataclass(frozen=True)
class PrecisionChoice:
    """``precision`` is the value for ``TrainSettings.precision`` (None: full precision);
    ``decided`` is False while it waits for the workers' CPUs (a cluster not yet connected)."""

    precision: str | None
    reason: str
    decided: bool = True

    def describe(self) -> str:
        if not self.decided:
            return f"bf16 if the CPU of every node has native bf16 matmuls, else float32 ({self.reason})"
        return f"{self.precision or FULL} ({self.reason})"


def stored_precision(stored: pd.DataFrame, methods) -> str | None:
    """The precision the study's stored rows were computed in (bf16, or full precision as
    "float32"), read from the rows of ``methods`` if any has one, else from all of the study's
    rows; None when no stored row trained a network."""
    if not len(stored) or "precision" not in stored.columns:
        return None
    ok = stored[stored["status"] == "ok"]
    have = ok.loc[ok["method"].isin(list(methods)), "precision"].dropna()
    if not len(have):
        have = ok["precision"].dropna()
    if not len(have):
        return None
    return "bf16" if (have == "bf16").any() else "float32"


def reads_workers(train: TrainSettings, on_gpu: bool) -> bool:
    """Whether ``choose_precision`` may ask the workers' CPUs (rule 4): the study's settings and
    devices leave its precision open."""
    return train.precision is None and train.dtype != "float64" and not on_gpu


def choose_precision(train: TrainSettings, stored: str | None, on_gpu: bool,
                     workers_bf16: Callable[[], bool | None]) -> PrecisionChoice:
    """The study's precision (see the module's docstring). ``stored`` is ``stored_precision``'s
    answer; ``workers_bf16()`` whether every worker's CPU has native bf16 matmuls, None when
    that cannot be known yet; it is called only when the answer depends on it."""
    if train.precision is not None:
        return PrecisionChoice(train.precision, "train.precision")
    if train.dtype == "float64":
        return PrecisionChoice(None, "train.dtype float64")
    if stored == "bf16":
        return PrecisionChoice("bf16", "as the stored rows were computed")
    if stored is not None:
        return PrecisionChoice(None, "as the stored rows were computed")
    if on_gpu:
        return PrecisionChoice(None, "packs train on GPUs")
    native = workers_bf16()
    if native is None:
        return PrecisionChoice(None, "asked of the nodes when the run connects", decided=False)
    if native:
        return PrecisionChoice("bf16", "every worker's CPU multiplies bf16 matrices in hardware; "
                                       "train.precision float32 opts out")
    return PrecisionChoice(None, "a worker's CPU has no native bf16 matmuls")
