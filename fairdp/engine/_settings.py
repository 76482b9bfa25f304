"""Training settings (FEDERATE D.4) and the device they run on."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fairdp.errors import InputError


def resolve_device(device: str | None) -> torch.device:
    """``None`` means CUDA when available, else the CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@dataclass(frozen=True)
class TrainSettings:
    """FEDERATE D.4's batch 2000; ``gamma`` is the GRL schedule's steepness.

    ``lr`` None means each method's own paper value (``Method.default_lr``: FEDERATE's Adam
    at 1e-3, CAPE's at 1e-4, ...); a number is used by every method that trains by gradient.
    """

    epochs: int = 30
    batch_size: int = 2000
    lr: float | None = None
    gamma: float = 10.0  # Ganin & Lempitsky; FEDERATE's public code uses 7
    device: str | None = None  # None: CUDA when available, else CPU
    dtype: str = "float32"
    # Configs computed together inside a pack; None picks by device (see engine.config_chunk).
    config_chunk: int | None = None
    # The part of a GPU this run may fill (a Ray trial's fractional GPU); bounds CUDA chunks.
    gpu_share: float = 1.0

    def __post_init__(self):
        for key in ("epochs", "batch_size"):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f"train.{key}: must be a positive integer, got {v!r}")
        if self.lr is not None and (isinstance(self.lr, bool) or not isinstance(self.lr, (int, float))
                                    or not self.lr > 0):
            raise InputError(f"train.lr: must be > 0, got {self.lr!r}")
        if self.config_chunk is not None and (not isinstance(self.config_chunk, int) or self.config_chunk < 1):
            raise InputError(f"train.config_chunk: must be a positive integer, got {self.config_chunk!r}")
        if not isinstance(self.gpu_share, (int, float)) or not 0 < self.gpu_share <= 1:
            raise InputError(f"train.gpu_share: must be in (0, 1], got {self.gpu_share!r}")
        if self.dtype not in ("float32", "float64"):
            raise InputError(f"train.dtype: must be float32 or float64, got {self.dtype!r}")
