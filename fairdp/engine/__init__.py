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
