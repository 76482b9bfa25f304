"""Packed training: K configurations of one method trained at once as one batched model.

``fit_pack`` is the one training loop; a neural method plugs a ``PackStep`` (its model,
minibatch update and epoch hooks) into it. The rest are the building blocks steps use:
packed layers and models, packed losses, per-sample clipping with noise, per-config seeds, and pruning dominated configs at rungs.
A ``Checkpointing`` passed to ``fit_pack`` makes it save its state as it trains and resume from it.
"""

from fairdp.engine._arch import (
    PRESETS,
    Architecture,
    architecture_from,
    describe_architecture,
    preset_for,
)
from fairdp.engine._checkpoint import (
    CheckpointFile,
    Checkpointing,
    data_fingerprint,
    published_data_fingerprint,
)
from fairdp.engine._loop import EVAL_CHUNK, BestEpochs, fit_pack, merge_results
from fairdp.engine._losses import (
    difference_loss,
    lambda_schedule,
    pairwise_difference_loss,
    per_config_accuracy,
    per_config_cross_entropy,
)
from fairdp.engine._memory import (
    ACTIVATION_COPIES,
    CUDA_MEMORY_SHARE,
    PRIVATISER_BYTES,
    bytes_per_config,
    config_chunk,
    cuda_config_chunk,
)
from fairdp.engine._model import ModelSpec, PackedModel, layer_shapes
from fairdp.engine._packed import PackedLinear, PackedMLP, grad_reverse
from fairdp.engine._per_sample import add_clipped_gradients, forward_traced
from fairdp.engine._prune import DEFAULT_KEEP, DEFAULT_MARGIN, Pruning, configs_to_stop, dominators
from fairdp.engine._seeds import config_id, stream_seed
from fairdp.engine._settings import (
    PRECISIONS,
    TrainSettings,
    autocast,
    check_device_here,
    full_precision,
    matmul_precision,
    native_bf16,
    resolve_device,
    resolve_precision,
)
from fairdp.engine.contract import (
    VALID_CURVES,
    Batch,
    EpochReport,
    PackContext,
    PackResult,
    PackStep,
    SplitTensors,
)

__all__ = [
    "check_device_here",
    "ACTIVATION_COPIES",
    "PRIVATISER_BYTES",
    "CUDA_MEMORY_SHARE",
    "DEFAULT_KEEP",
    "DEFAULT_MARGIN",
    "EVAL_CHUNK",
    "PRECISIONS",
    "PRESETS",
    "VALID_CURVES",
    "Architecture",
    "Batch",
    "BestEpochs",
    "CheckpointFile",
    "Checkpointing",
    "EpochReport",
    "ModelSpec",
    "PackContext",
    "PackResult",
    "PackStep",
    "PackedLinear",
    "PackedMLP",
    "PackedModel",
    "Pruning",
    "SplitTensors",
    "TrainSettings",
    "add_clipped_gradients",
    "architecture_from",
    "autocast",
    "bytes_per_config",
    "config_chunk",
    "config_id",
    "data_fingerprint",
    "published_data_fingerprint",
    "configs_to_stop",
    "cuda_config_chunk",
    "describe_architecture",
    "difference_loss",
    "pairwise_difference_loss",
    "dominators",
    "fit_pack",
    "forward_traced",
    "full_precision",
    "grad_reverse",
    "lambda_schedule",
    "layer_shapes",
    "matmul_precision",
    "native_bf16",
    "merge_results",
    "per_config_accuracy",
    "per_config_cross_entropy",
    "preset_for",
    "resolve_device",
    "resolve_precision",
    "stream_seed",
]
