"""How long a study will take, from the reference figures of ``benchmarks/bench_costs.py``.

The figures (``reference_costs.json``) are seconds per config-epoch per 1,000 training rows of
each method, and per config and per pack of each probe under each stopping rule, measured on
one machine (the file says which). A
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


def config_epoch_figure(fig: dict, batch_size: int | None) -> float:
    """A method's seconds per config-epoch per 1,000 rows at ``batch_size``. An epoch of
    ceil(n / B) steps costs n (a / B + b) for a step of a + b B seconds (its per-step work and
    its per-row work), so between batch sizes measured (``by_batch``) the figure is
    interpolated linearly in 1 / B, and beyond them the nearest segment is extended; with one
    figure, or no batch size, the figure itself (measured at the reference batch size)."""
    points = sorted((1.0 / int(b), float(v)) for b, v in fig.get("by_batch", {}).items())
    if batch_size is None or len(points) < 2:
        return fig["per_config_epoch"]
    x = 1.0 / batch_size
    # the segment whose left end is the last inner point at or below x (the first one if none)
    left = max((i for i in range(1, len(points) - 1) if points[i][0] <= x), default=0)
    (x0, y0), (x1, y1) = points[left], points[left + 1]
    return max(0.0, y0 + (y1 - y0) * (x - x0) / (x1 - x0))


def probe_stopping(probe) -> str:
    """The key of a study's probe figures: ``early_stopping`` (fairdp's default probe stops when
    a held-out tenth stops improving) or ``training_loss`` (sklearn's rule, FEDERATE's probe
    protocol: it stops on the training loss, up to ``max_epochs``, and costs about ten times
    more on Adult). The rule decides a probe's cost far more than its other settings do."""
    return "early_stopping" if probe is None or probe.early_stopping else "training_loss"


def probe_figures(leakage: bool, mdl: bool, probe=None, figures: dict | None = None) -> tuple[float, float]:
    """Reference seconds per 1,000 training rows of a study's probes under ``probe``'s stopping
    rule: (per config, per pack), summed over the probes it runs (full precision)."""
    figures = reference() if figures is None else figures
    by_kind = figures.get("probes", {}).get(probe_stopping(probe), {})
    kinds = [k for k, on in (("leakage", leakage), ("mdl", mdl)) if on]
    return (sum(by_kind.get(k, {}).get("per_config", 0.0) for k in kinds),
            sum(by_kind.get(k, {}).get("per_pack", 0.0) for k in kinds))


def unit_costs(methods, epochs: int, train_rows: int, leakage: bool, mdl: bool,
               figures: dict | None = None, probes: bool = True, precision: str | None = None,
               batch_size: int | None = None, timed: dict | None = None, probe=None) -> dict[str, float]:
    """Reference seconds per config-epoch (one trial slot) of each of ``methods`` that has a
    figure, for this study: its training in ``precision`` at ``batch_size`` (``config_epoch_figure``),
    plus (``probes``) its probes' per-config cost under ``probe``'s settings (``probe_figures``)
    spread over its epochs; their per-pack cost is ``pack_fixed``'s. ``timed`` (method ->
    (seconds per config-epoch per 1,000 rows, the batch size timed at), ``_timing``) replaces a
    method's figure by what its module of the user's cost here, scaled to ``batch_size`` as its
    figure scales."""
    figures = reference() if figures is None else figures
    per_method = _method_figures(figures, precision)
    timed = timed or {}
    rows_k = train_rows / 1000
    probe_config = probe_figures(leakage, mdl, probe, figures)[0] if probes else 0.0
    epochs = max(1, epochs)
    costs = {}
    for name in methods:
        fig = per_method.get(name)
        if name in timed:
            seconds, at_batch = timed[name]
            scale = 1.0
            if fig is not None and "per_config_epoch" in fig and batch_size is not None:
                scale = config_epoch_figure(fig, batch_size) / max(config_epoch_figure(fig, at_batch), 1e-12)
            costs[name] = (seconds * scale * epochs + probe_config) * rows_k / epochs
            continue
        if fig is None:
            continue
        per_config = (config_epoch_figure(fig, batch_size) * epochs if "per_config_epoch" in fig
                      else fig["per_config"])
        costs[name] = (per_config + probe_config) * rows_k / epochs
    return costs


def pack_fixed(methods, train_rows: int, figures: dict | None = None, precision: str | None = None,
               leakage: bool = False, mdl: bool = False, probe=None) -> dict[str, float]:
    """Reference seconds a pack of each of ``methods`` takes in ``precision`` beyond its
    config-epochs (model set-up, predictions, and the probes' per-pack part under ``probe``'s
    settings), where the figures have it."""
    figures = reference() if figures is None else figures
    per_method = _method_figures(figures, precision)
    probe_pack = probe_figures(leakage, mdl, probe, figures)[1]
    fixed = {m: per_method.get(m, {}).get("per_pack", 0.0) + probe_pack for m in methods}
    return {m: seconds * train_rows / 1000 for m, seconds in fixed.items() if seconds > 0}


def calibration_by_pack_key(spec, packs, figures: dict | None = None) -> dict[tuple[str, int], float]:
    """Reference seconds one trial slot spends calibrating noise, per ``pack_work`` key
    (method, batch size): an accountant's search for the multiplier (``per_calibration``) runs
    once per worker process for each distinct target eps and batch size of a method, then is
    cached, and every slot meets most of them in a study's shuffle of packs."""
    per_method = (reference() if figures is None else figures).get("methods", {})
    targets = {(p.method, int(c.get("batch_size") or spec.train.batch_size), c.get("eps"))
               for p in packs for c in p.configs if "per_calibration" in per_method.get(p.method, {})}
    seconds: dict[tuple[str, int], float] = {}
    for method, batch, _ in targets:
        seconds[(method, batch)] = seconds.get((method, batch), 0.0) + per_method[method]["per_calibration"]
    return seconds


def calibration_seconds(spec, packs, figures: dict | None = None) -> float:
    """Reference seconds one trial slot spends calibrating noise over the whole study."""
    return sum(calibration_by_pack_key(spec, packs, figures).values())


def makespan(packs: list[tuple], costs: dict, slots: int, fixed: dict | None = None) -> float:
    """Wall seconds to run ``packs`` ((key, config-epochs), in the order they are handed out;
    a key is a method, or a (method, batch size) as ``pack_work`` gives) on ``slots`` slots,
    each pack to the first free slot, a pack taking its key's ``fixed`` time plus its
    config-epochs at ``costs``. Keys without a cost count 0."""
    fixed = fixed or {}
    free = [0.0] * max(1, slots)
    for method, units in packs:
        if method not in costs:
            continue
        start = heapq.heappop(free)
        heapq.heappush(free, start + fixed.get(method, 0.0) + units * costs[method])
    return max(free)


def study_unit_costs(spec, train_rows: int, probes: bool = True, precision: str | None = None,
                     batch_size: int | None = None, timed: dict | None = None) -> dict[str, float]:
    """``unit_costs`` for the methods, epochs and probes of a study spec trained in ``precision``
    at ``batch_size`` (default the study's), with the ``timed`` modules of the user's."""
    return unit_costs(study_methods(spec), spec.train.epochs, train_rows, spec.leakage, spec.mdl, probes=probes,
                      precision=precision, batch_size=batch_size or spec.train.batch_size, timed=timed,
                      probe=spec.probe)


def pack_work(spec, packs, train_rows: int, precision: str | None = None, timed: dict | None = None):
    """The dry run's ``makespan`` inputs for ``packs``: ((method, batch size), config-epochs)
    per pack, the reference cost of a config-epoch and the fixed cost of a pack under each such
    key (a pack trains at one batch size: its configs' ``batch_size``, else the study's)."""
    work, costs, fixed = [], {}, {}
    base = pack_fixed(study_methods(spec), train_rows, precision=precision, leakage=spec.leakage, mdl=spec.mdl,
                      probe=spec.probe)
    for p in packs:
        key = (p.method, int(p.configs[0].get("batch_size") or spec.train.batch_size))
        if key not in costs:
            at_batch = study_unit_costs(spec, train_rows, precision=precision, batch_size=key[1], timed=timed)
            if p.method in at_batch:
                costs[key] = at_batch[p.method]
                if p.method in base:
                    fixed[key] = base[p.method]
        work.append((key, len(p.configs) * spec.train.epochs))
    return work, costs, fixed


def study_methods(spec) -> list[str]:
    return [m.name for m in spec.methods] + ([spec.search.method] if spec.search else [])


def describe_reference(figures: dict | None = None) -> str:
    """Where the reference figures were measured, in a few words: the machine and torch, not
    the build they were measured at (benchmarks/reference_costs.json keeps that), which a user
    reading an estimate cannot use."""
    figures = reference() if figures is None else figures
    measured = figures.get("measured", {})
    if not measured:
        return "no reference figures"
    updated = figures.get("updated", {})
    later = "; " + "; ".join(
        f"{', '.join(sorted(names))} re-measured on {machine}"
        for machine, names in _grouped(updated).items()) if updated else ""
    return (f"{measured.get('device', '?')} ({measured.get('machine', '?')}), {measured.get('threads', '?')} "
            f"thread per trial, torch {measured.get('torch', '?')}{later}")


def _grouped(updated: dict) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for name, where in updated.items():
        groups.setdefault(where.get("machine", "?"), []).append(name)
    return groups
