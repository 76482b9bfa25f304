"""Methods, one module each, registered under their papers' names; plugins register the same way."""

from fairdp.methods import (  # noqa: F401  (each module registers its method)
    adversarial,
    cape,
    dpnr,
    dpsgd,
    federate,
    fld,
    inlp,
    multi_adversarial,
    noise,
    pfld,
    private_reductions,
    random,
    reductions,
    unconstrained,
)
from fairdp.methods._base import (
    EPS,
    LAM,
    HyperParam,
    Method,
    NeuralMethod,
    RunInfo,
    arange_grid,
    range_count,
)
from fairdp.methods._plugins import load_plugins, resolve_plugin
from fairdp.methods._registry import (
    ENTRY_POINT_GROUP,
    builtin_method_names,
    get_method,
    method_names,
    register_method,
)
from fairdp.methods._representation import RepresentationStep

__all__ = [
    "ENTRY_POINT_GROUP",
    "EPS",
    "LAM",
    "HyperParam",
    "Method",
    "NeuralMethod",
    "RepresentationStep",
    "RunInfo",
    "arange_grid",
    "range_count",
    "builtin_method_names",
    "get_method",
    "load_plugins",
    "method_names",
    "register_method",
    "resolve_plugin",
]
