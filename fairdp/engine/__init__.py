"""Packed training: K configurations of one method trained at once as one batched model.

``fit_pack`` is the one training loop; a neural method plugs a ``PackStep`` (its model,
minibatch update and epoch hooks) into it. The rest are the building blocks steps use:
packed layers and models, packed losses, per-sample clipping with noise, per-config seeds, and pruning dominated configs at rungs.
A ``Checkpointing`` passed to ``fit_pack`` makes it save its state as it trains and resume from it.
"""

from fairdp.engine._arch import Architecture
from fairdp.engine._checkpoint import Checkpointing
from fairdp.engine._functional import FunctionalPack, packing_problems
from fairdp.engine._loop import EVAL_CHUNK, fit_pack
from fairdp.engine._losses import (
    difference_loss,
    lambda_schedule,
    pairwise_difference_loss,
    per_config_cross_entropy,
)
from fairdp.engine._model import ModelSpec, PackedModel, layer_shapes
from fairdp.engine._models import ModelRef, model_names, register_model
from fairdp.engine._packed import PackedLinear, grad_reverse
from fairdp.engine._per_sample import add_clipped_gradients, backprop_errors, forward_traced
from fairdp.engine._prune import Pruning
from fairdp.engine._seeds import stream_seed
from fairdp.engine._settings import TrainSettings

__all__ = [
    # method-author API (docs/api/engine.md; the step contract is fairdp.engine.contract)
    "Architecture", "Checkpointing", "EVAL_CHUNK", "FunctionalPack", "ModelRef", "ModelSpec", "PackedLinear",
    "PackedModel", "Pruning", "TrainSettings", "add_clipped_gradients", "backprop_errors", "difference_loss",
    "fit_pack", "forward_traced", "grad_reverse", "lambda_schedule", "layer_shapes", "model_names",
    "packing_problems", "pairwise_difference_loss", "per_config_cross_entropy", "register_model", "stream_seed",
]

# Shared within fairdp, not public: what fairdp's methods, metrics, study and testing import
# (the contract's types are public in fairdp.engine.contract).
from fairdp.engine._arch import (  # noqa: F401
    PRESETS,
    ROLES,
    architecture_from,
    describe_architecture,
    is_model_keyword,
    model_keywords,
    preset_for,
    with_model_keywords,
)
from fairdp.engine._checkpoint import CheckpointFile, published_data_fingerprint  # noqa: F401
from fairdp.engine._functional import build_instances, row_mixing, trial_step  # noqa: F401
from fairdp.engine._loop import merge_results  # noqa: F401
from fairdp.engine._prune import DEFAULT_KEEP, DEFAULT_MARGIN  # noqa: F401
from fairdp.engine._seeds import config_id  # noqa: F401
from fairdp.engine._settings import check_device_here, device_record, native_bf16, resolve_device  # noqa: F401
from fairdp.engine.contract import (  # noqa: F401
    VALID_CURVES,
    Batch,
    EpochReport,
    PackContext,
    PackResult,
    PackStep,
)
