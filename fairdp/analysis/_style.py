"""One colour and one marker per method, the same in every figure of every report.

Figures used to colour the methods each one happened to contain, in sorted order, so one
method changed colour between figures. A method's style is now a pure function of its name:
fairdp's methods have fixed, distinct styles (colour-blind-safe colours from the Okabe-Ito
and Tol palettes, each with its own marker, so that two methods never share both), and a
plugin method gets a style from a hash of its name, stable across runs and machines.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple


class MethodStyle(NamedTuple):
    color: str
    marker: str


BUILTIN_STYLES = {
    "federate": MethodStyle("#D55E00", "o"),
    "unconstrained": MethodStyle("#000000", "s"),
    "random": MethodStyle("#999999", "x"),
    "noise": MethodStyle("#E69F00", "^"),
    "adversarial": MethodStyle("#0072B2", "v"),
    "multi_adversarial": MethodStyle("#56B4E9", "<"),
    "inlp": MethodStyle("#009E73", "D"),
    "dpnr": MethodStyle("#CC79A7", "P"),
    "cape": MethodStyle("#882255", "X"),
    "dpsgd": MethodStyle("#332288", ">"),
    "fld": MethodStyle("#44AA99", "h"),
    "pfld": MethodStyle("#117733", "*"),
    "reductions": MethodStyle("#999933", "d"),
    "private_reductions": MethodStyle("#AA4499", "p"),
}
_PLUGIN_COLORS = ("#88CCEE", "#DDCC77", "#CC6677", "#661100", "#6699CC", "#AA4466")
_PLUGIN_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*")


def method_style(method: str) -> MethodStyle:
    """The colour and marker of ``method`` in every figure."""
    if method in BUILTIN_STYLES:
        return BUILTIN_STYLES[method]
    h = int.from_bytes(hashlib.sha256(method.encode()).digest()[:8], "big")
    return MethodStyle(_PLUGIN_COLORS[h % len(_PLUGIN_COLORS)],
                       _PLUGIN_MARKERS[(h // len(_PLUGIN_COLORS)) % len(_PLUGIN_MARKERS)])
