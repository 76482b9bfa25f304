"""One colour and one marker per method, the same in every figure of every report.

Figures used to colour the methods each one happened to contain, in sorted order, so one
method changed colour between figures. A method's style is now a pure function of its name:
fairdp's methods have fixed, distinct styles (colour-blind-safe colours from the Okabe-Ito
and Tol palettes, each with its own marker, so that two methods never share both), and a
plugin method gets a style from a hash of its name, stable across runs and machines.

Methods that share a study have clearly different hues (Okabe-Ito for FEDERATE's set, Tol's
bright scheme for PF-LD's): in the first palette FEDERATE and the noise baseline were
vermillion and orange, F-LD and PF-LD teal and green, which a reader could not tell apart in
a figure's thin lines. Where a figure has a second key (a report's ``--by`` values, or a
method's fairness notion), colour stays the method's and the key's values take a line style
and marker each (``variant_style``).
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple


class MethodStyle(NamedTuple):
    color: str
    marker: str


BUILTIN_STYLES = {
    # FEDERATE's studies: black, grey and five Okabe-Ito hues
    "unconstrained": MethodStyle("#000000", "s"),
    "random": MethodStyle("#999999", "x"),
    "federate": MethodStyle("#D55E00", "o"),
    "noise": MethodStyle("#0072B2", "^"),
    "adversarial": MethodStyle("#009E73", "v"),
    "multi_adversarial": MethodStyle("#CC79A7", "<"),
    "inlp": MethodStyle("#999933", "D"),
    # CAPE's study (with unconstrained and federate)
    "dpnr": MethodStyle("#882255", "P"),
    "cape": MethodStyle("#44AA99", "X"),
    # PF-LD's studies (with unconstrained): Tol's bright hues
    "dpsgd": MethodStyle("#4477AA", ">"),
    "fld": MethodStyle("#228833", "h"),
    "pfld": MethodStyle("#EE6677", "*"),
    "reductions": MethodStyle("#DDAA33", "d"),
    "private_reductions": MethodStyle("#8E44AD", "p"),
    # the baselines reported pooled with PF-LD's study (studies/baselines_*.yaml): DP-SGD's fairness-aware
    # variants (Esipova et al. 2023; Xu et al. 2021) and DP-FERMI (Lowy et al. 2023), chosen so that
    # all nine methods of the pooled report are at least 41 apart in CIE L*a*b*; every filled marker is
    # taken, so DP-FERMI's is a plus
    "dpsgd_global_adapt": MethodStyle("#00BBBB", "H"),
    "dpsgd_f": MethodStyle("#B09C85", "8"),
    "dp_fermi": MethodStyle("#E41A1C", "+"),
}
_PLUGIN_COLORS = ("#88CCEE", "#DDCC77", "#CC6677", "#661100", "#6699CC", "#AA4466")
_PLUGIN_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*")


def method_style(method: str) -> MethodStyle:
    """The colour and marker of ``method`` in every figure ("pfld [dp]", a view's label of
    pfld, has pfld's)."""
    method = method.split(" [", 1)[0]
    if method in BUILTIN_STYLES:
        return BUILTIN_STYLES[method]
    h = int.from_bytes(hashlib.sha256(method.encode()).digest()[:8], "big")
    return MethodStyle(_PLUGIN_COLORS[h % len(_PLUGIN_COLORS)],
                       _PLUGIN_MARKERS[(h // len(_PLUGIN_COLORS)) % len(_PLUGIN_MARKERS)])


class VariantStyle(NamedTuple):
    marker: str
    linestyle: str


# The second key's values, in sorted order: a marker and a line style each, both changing
# from one value to the next (a reader tells neighbours apart by either), the pair distinct
# for 32 values.
VARIANT_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*")
VARIANT_LINESTYLES = ("-", "--", "-.", ":")


def variant_style(index: int) -> VariantStyle:
    """The marker and line style of the ``index``-th value of a figure's second key."""
    return VariantStyle(VARIANT_MARKERS[index % len(VARIANT_MARKERS)],
                        VARIANT_LINESTYLES[(index + index // len(VARIANT_MARKERS)) % len(VARIANT_LINESTYLES)])
