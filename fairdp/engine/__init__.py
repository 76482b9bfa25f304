"""Packed training: K configurations of one method trained at once as one batched model."""

from fairdp.engine._arch import PRESETS, Architecture, TrainSettings, architecture_from, preset_for
from fairdp.engine._packed import PackedLinear, PackedMLP, grad_reverse
from fairdp.engine._seeds import config_id, stream_seed
from fairdp.engine._train import (
    BestEpochs,
    ModelSpec,
    PackedModel,
    PackResult,
    bytes_per_config,
    cuda_config_chunk,
    lambda_schedule,
    per_config_accuracy,
    per_config_cross_entropy,
    resolve_device,
    train_pack,
)

__all__ = [
    "PRESETS",
    "Architecture",
    "BestEpochs",
    "ModelSpec",
    "PackResult",
    "PackedLinear",
    "PackedMLP",
    "PackedModel",
    "TrainSettings",
    "architecture_from",
    "bytes_per_config",
    "config_id",
    "cuda_config_chunk",
    "grad_reverse",
    "lambda_schedule",
    "per_config_accuracy",
    "per_config_cross_entropy",
    "preset_for",
    "resolve_device",
    "stream_seed",
    "train_pack",
]
