"""Methods, one module each, registered under DESIGN.md's names."""

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
from fairdp.methods._base import HyperParam, Method, NeuralMethod
from fairdp.methods._registry import get_method, method_names, register_method

__all__ = ["HyperParam", "Method", "NeuralMethod", "get_method", "method_names", "register_method"]
