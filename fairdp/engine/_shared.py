"""The names fairdp.engine shares with the rest of fairdp: not public API (that is
``fairdp.engine.__all__``). fairdp's methods, metrics, study and testing import them from here,
the one private module of fairdp.engine that other parts of fairdp may import
(tests/test_layers.py)."""

from fairdp.engine._arch import (
    PRESETS,
    ROLES,
    architecture_from,
    describe_architecture,
    is_model_keyword,
    model_keywords,
    preset_for,
    with_model_keywords,
)
from fairdp.engine._checkpoint import CheckpointFile, published_data_fingerprint
from fairdp.engine._functional import build_instances, row_mixing, trial_step
from fairdp.engine._loop import merge_results
from fairdp.engine._prune import DEFAULT_KEEP, DEFAULT_MARGIN
from fairdp.engine._seeds import config_id
from fairdp.engine._settings import check_device_here, device_record, native_bf16, resolve_device

__all__ = [
    "architecture_from", "build_instances", "check_device_here", "CheckpointFile", "config_id",
    "DEFAULT_KEEP", "DEFAULT_MARGIN", "describe_architecture", "device_record", "is_model_keyword",
    "merge_results", "model_keywords", "native_bf16", "preset_for", "PRESETS", "published_data_fingerprint",
    "resolve_device", "ROLES", "row_mixing", "trial_step", "with_model_keywords",
]
