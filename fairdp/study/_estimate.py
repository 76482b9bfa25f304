"""How long a study will take, from the reference figures of ``benchmarks/bench_costs.py``.

The figures (``reference_costs.json``) are seconds per config-epoch per 1,000 training rows of
each method, and per config of each probe, measured on one machine (the file says which). A
method's figure is float32's; its figure in another precision (bf16) is stored under that
precision's name, where measured.
``fairdp run --dry-run`` turns them into a wall-time estimate; the live ETA uses them only as
the *relative* cost of methods it has not timed yet, scaled by what it has measured.
"""

from __future__ import annotations

import functools
import heapq
import json
import os

REFERENCE_PATH = os.path.join(os.path.dirname(__file__), "reference_costs.json")


@functools.lru_cache(maxsize=1)
def reference() -> dict:
    """The reference figures, or {} when the file is missing (a trimmed install)."""
    try:
        with open(REFERENCE_PATH) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


# the figures are a CPU's, where these all compute in float32 (tf32 is a CUDA mode)
FLOAT32_ON_A_CPU = (None, "float32", "tf32")


def _method_figures(figures: dict, precision: str | None) -> dict[str, dict]:
    """Each method's figure in ``precision``: the one measured in it, else float32's."""
    return {m: fig.get(precision, fig) if precision not in FLOAT32_ON_A_CPU else fig
            for m, fig in figures.get("methods", {}).items()}


def lacking_precision(methods, precision: str | None, figures: dict | None = None) -> list[str]:
    """Those of ``methods`` that train by epochs and have a float32 figure but none in ``precision``."""
    if precision in FLOAT32_ON_A_CPU:
        return []
    per_method = (reference() if figures is None else figures).get("methods", {})
    return [m for m in methods if "per_config_epoch" in per_method.get(m, {}) and precision not in per_method[m]]


def unit_costs(methods, epochs: int, train_rows: int, leakage: bool, mdl: bool,
               figures: dict | None = None, probes: bool = True, precision: str | None = None) -> dict[str, float]:
    """Reference seconds per config-epoch (one trial slot) of each of ``methods`` that has a
    figure, for this study: its training in ``precision``, plus (``probes``) its probes (full
    precision) spread over its epochs."""
    figures = reference() if figures is None else figures
    per_method = _method_figures(figures, precision)
    probe_figs = figures.get("probes_per_config", {}) if probes else {}
    rows_k = train_rows / 1000
    probe = (probe_figs.get("leakage", 0.0) if leakage else 0.0) + (probe_figs.get("mdl", 0.0) if mdl else 0.0)
    epochs = max(1, epochs)
    costs = {}
    for name in methods:
        fig = per_method.get(name)
        if fig is None:
            continue
        per_config = fig["per_config_epoch"] * epochs if "per_config_epoch" in fig else fig["per_config"]
        costs[name] = (per_config + probe) * rows_k / epochs
    return costs


def pack_fixed(methods, train_rows: int, figures: dict | None = None, precision: str | None = None) -> dict[str, float]:
    """Reference seconds a pack of each of ``methods`` takes in ``precision`` beyond its
    config-epochs (model set-up, predictions), where the figures have it."""
    per_method = _method_figures(reference() if figures is None else figures, precision)
    return {m: per_method[m]["per_pack"] * train_rows / 1000 for m in methods
            if "per_pack" in per_method.get(m, {})}


def makespan(packs: list[tuple[str, float]], costs: dict[str, float], slots: int,
             fixed: dict[str, float] | None = None) -> float:
    """Wall seconds to run ``packs`` ((method, config-epochs), in the order they are handed
    out) on ``slots`` slots, each pack to the first free slot, a pack taking its method's
    ``fixed`` time plus its config-epochs at ``costs``. Methods without a cost count 0."""
    fixed = fixed or {}
    free = [0.0] * max(1, slots)
    for method, units in packs:
        if method not in costs:
            continue
        start = heapq.heappop(free)
        heapq.heappush(free, start + fixed.get(method, 0.0) + units * costs[method])
    return max(free)


def study_unit_costs(spec, train_rows: int, probes: bool = True, precision: str | None = None) -> dict[str, float]:
    """``unit_costs`` for the methods, epochs and probes of a study spec trained in ``precision``."""
    return unit_costs(study_methods(spec), spec.train.epochs, train_rows, spec.leakage, spec.mdl, probes=probes,
                      precision=precision)


def study_methods(spec) -> list[str]:
    return [m.name for m in spec.methods] + ([spec.search.method] if spec.search else [])


def describe_reference(figures: dict | None = None) -> str:
    """Where the reference figures were measured, in a few words."""
    measured = (reference() if figures is None else figures).get("measured", {})
    if not measured:
        return "no reference figures"
    return (f"{measured.get('device', '?')} ({measured.get('machine', '?')}), {measured.get('threads', '?')} "
            f"thread per trial, torch {measured.get('torch', '?')}, fairdp {measured.get('commit', '?')}")
