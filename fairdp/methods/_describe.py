"""What a registered method is, in words and data (``fairdp methods``): its paper, its grid
keys with their ranges and the paper's values, its guarantee's kind, and which roles take a
module of the user's."""

from __future__ import annotations

import inspect
import math
import re
import sys

from fairdp.methods._base import SETTING_PARAMS, HyperParam, Method, NeuralMethod


def method_summary(method: Method) -> str:
    """The first sentence of the method's class docstring, else of its module's: for the
    built-in methods the paper and what it does ("FEDERATE (Maheshwari et al. 2022): ...")."""
    own = type(method).__dict__.get("__doc__")
    module = sys.modules.get(type(method).__module__)
    for doc in (own, getattr(module, "__doc__", None)):
        if doc and doc.strip():
            paragraph = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())
            end = re.search(r"(?<!\bal)(?<!e\.g)(?<!i\.e)\.(\s|$)", paragraph)  # "et al." ends no sentence
            return paragraph[:end.start() + 1] if end else paragraph
    return ""


def hyperparam_range(h: HyperParam) -> str:
    """A hyperparameter's valid values in words: "one of dp, eo, ap", "> 0", "0 to 1", "integer >= 1"."""
    if h.choices is not None:
        return "one of " + ", ".join(map(str, h.choices))
    kind = "integer " if h.integer else ""
    low = None if h.low is None else f"{'>' if h.low_open else '>='} {h.low:g}"
    high = None if h.high is None or math.isinf(h.high) else f"<= {h.high:g}"
    if low and high:
        return f"{kind}{low} and {high}" if h.low_open else f"{kind}{h.low:g} to {h.high:g}"
    return (kind + (low or high or "any finite number")).strip()


def describe_method(method: Method, dataset: str = "adult") -> dict:
    """A method as data: name, summary (``method_summary``), guarantee kind (None: not
    private), its grid keys (name, range, doc, the paper's grid values for ``dataset``), the
    training settings a grid may sweep, and the roles that take a module of the user's."""
    try:
        grid = method.paper_grid(dataset)
    except Exception:  # noqa: BLE001 - a plugin's grid for another dataset may refuse it: no values then
        grid = {}
    keys = [{"name": h.name, "range": hyperparam_range(h), "doc": h.doc, "paper_values": list(grid.get(h.name, []))}
            for h in method.hyperparams]
    roles = method.model_roles() if isinstance(method, NeuralMethod) else ()
    return {"name": method.name, "summary": method_summary(method), "guarantee": method.guarantee_kind,
            "grid_keys": keys,
            "settings": [p.name for p in SETTING_PARAMS if p in method.setting_params],
            "user_modules": list(roles), "module": type(method).__module__}
