"""Methods, one module each, registered under their papers' names; plugins register the same way."""

from fairdp.methods import (  # noqa: F401  (each module registers its method)
    adversarial,
    cape,
    dp_fermi,
    dpnr,
    dpsgd,
    dpsgd_f,
    dpsgd_global_adapt,
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
from fairdp.methods._base import HyperParam, Method, NeuralMethod, RunInfo
from fairdp.methods._plugins import load_plugins
from fairdp.methods._registry import builtin_method_names, get_method, method_names, register_method
from fairdp.methods._representation import RepresentationStep

__all__ = [
    # user API (docs/api/methods.md): the registry
    "builtin_method_names", "get_method", "load_plugins", "method_names",
    # method-author API (docs/api/methods.md; the step contract is fairdp.engine.contract)
    "HyperParam", "Method", "NeuralMethod", "RepresentationStep", "RunInfo", "register_method",
]
