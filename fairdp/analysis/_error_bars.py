"""What a figure's error bars show, over seeds: a t-interval, ± 1 std, a bootstrap, or none.

With two seeds the 95% t-interval of a mean is 12.7 standard errors wide each way
(t(0.975, 1) = 12.7): cut to 0-100 it spans most of a percent axis and swamps every figure.
So the report's figures draw ± 1 std over seeds by default (``DEFAULT_ERROR_BARS``), the
spread the tables print beside each mean, and say so in every title and caption; the
t-interval (``t``) and a percentile bootstrap of the mean over seeds (``bootstrap``) are
there on request, with a warning below ``MIN_SEEDS_FOR_INTERVAL`` seeds, where neither
means much (two seeds' bootstrap is about the range of the two values).

``bootstrap_over_seeds`` needs the values of each seed, which the figures' tables (means
and stds) no longer hold: ``per_seed`` computes a table's function on each seed's rows
alone and stacks the results, so the per-seed values are exactly what the mean averages.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from fairdp.analysis._intervals import check_level, t_halfwidth
from fairdp.analysis._rows import note
from fairdp.errors import InputError

ERROR_BARS = ("t", "std", "bootstrap", "none")
DEFAULT_ERROR_BARS = "std"
# Fewer seeds than this and a t-interval or bootstrap of the mean says little: with 2 seeds
# the t-interval is 12.7 standard errors wide and the bootstrap is the two values' range.
MIN_SEEDS_FOR_INTERVAL = 3
BOOTSTRAP_DRAWS = 2000
BOOT_LO, BOOT_HI = "_boot_lo", "_boot_hi"  # suffixes of a metric's bootstrap bounds


def check_error_bars(error_bars: str) -> str:
    """``error_bars`` if it is one of ``ERROR_BARS``, else an ``InputError``."""
    if error_bars not in ERROR_BARS:
        raise InputError(f"error_bars: expected one of {', '.join(ERROR_BARS)}, got {error_bars!r}")
    return error_bars


def error_bars_text(error_bars: str, level: float = 95.0, n_seeds: Sequence[int] = (),
                    seeds_run: Sequence[int] = ()) -> str:
    """What the bars show, for a title or caption: "bars: ± 1 std over seeds, 2 seeds"; with
    ``seeds_run`` (the seeds each series ran, where a point averages only those that reached
    it) "..., 1-2 of 2 seeds per point"."""
    error_bars = check_error_bars(error_bars)
    counts = sorted({int(n) for n in n_seeds if n == n})
    ran = sorted({int(n) for n in seeds_run if n == n})
    seeds = ""
    if counts:
        span = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
        if ran and ran != counts:
            total = f"{ran[0]}" if len(ran) == 1 else f"{ran[0]}-{ran[-1]}"
            seeds = f", {span} of {total} seeds per point"
        else:
            seeds = f", {span} seed{'s' if counts[-1] != 1 else ''}"
    return {
        "t": f"bars: {level:g}% t-interval of the mean over seeds{seeds}",
        "std": f"bars: ± 1 std over seeds{seeds}",
        "bootstrap": f"bars: {level:g}% percentile bootstrap of the mean over seeds{seeds}, "
                     f"{BOOTSTRAP_DRAWS:,} resamples",
        "none": f"no error bars{seeds}",
    }[error_bars]


def note_few_seeds(error_bars: str, n_seeds: Sequence[int], notes: list[str] | None = None) -> None:
    """A note (``note``: a warning unless ``notes`` collects it) when an interval over seeds is
    drawn from fewer than ``MIN_SEEDS_FOR_INTERVAL`` seeds (the same text whatever the figure,
    so a report lists it once)."""
    counts = [int(n) for n in n_seeds if n == n and n >= 2]
    if error_bars in ("t", "bootstrap") and counts and min(counts) < MIN_SEEDS_FOR_INTERVAL:
        what = "t-intervals" if error_bars == "t" else "bootstrap intervals"
        note(f"error bars: {what} over {min(counts)} seeds say little about the mean (fewer than "
             f"{MIN_SEEDS_FOR_INTERVAL}); run more seeds, or draw ± 1 std (error_bars='std', "
             "fairdp report --error-bars std)", notes)


def metric_top(metric: str) -> float:
    """The upper end of a metric's range: MDL (kbits) has none, percentages stop at 100."""
    return math.inf if metric.endswith("mdl") else 100.0


def bar_extents(g: pd.DataFrame, metric: str, error_bars: str, level: float = 95.0) -> np.ndarray | None:
    """Error bars (2 x n: below and above the mean) of ``<metric>_mean`` in ``g``, cut to the
    metric's range; None for ``none``. ``t``: the t-interval over ``n_seeds`` seeds (± 1 std
    where the table does not count its seeds); ``std``: ± ``<metric>_std``; ``bootstrap``:
    the bounds ``bootstrap_over_seeds`` added. A single seed has no bar."""
    error_bars = check_error_bars(error_bars)
    if error_bars == "none":
        return None
    mean = g[f"{metric}_mean"].to_numpy(float)
    if error_bars == "bootstrap":
        if f"{metric}{BOOT_LO}" not in g.columns:
            raise InputError(f"error_bars='bootstrap': the table has no {metric}{BOOT_LO} / {metric}{BOOT_HI}; "
                             "add them with bootstrap_over_seeds")
        lo, hi = g[f"{metric}{BOOT_LO}"].to_numpy(float), g[f"{metric}{BOOT_HI}"].to_numpy(float)
    else:
        std = g[f"{metric}_std"].to_numpy(float)
        if error_bars == "t" and "n_seeds" in g.columns:
            half = np.array([t_halfwidth(s, n, level) for s, n in zip(std, g["n_seeds"].to_numpy(float))])
        else:
            half = std
        lo, hi = mean - half, mean + half
    top = metric_top(metric)
    lo, hi = np.clip(lo, 0.0, top), np.clip(hi, 0.0, top)
    return np.nan_to_num(np.vstack([np.maximum(mean - lo, 0.0), np.maximum(hi - mean, 0.0)]), nan=0.0)


def per_seed(compute: Callable[[pd.DataFrame], pd.DataFrame], rows: pd.DataFrame) -> pd.DataFrame:
    """``compute`` (a table of means over seeds, such as ``rt_sweep``) on each seed's rows
    alone, stacked with a ``seed`` column: each row's ``<metric>_mean`` is then that seed's
    value."""
    parts = []
    for seed, part in rows.groupby("seed", sort=True):
        table = compute(part)
        if len(table):
            parts.append(table.assign(seed=seed))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def bootstrap_over_seeds(table: pd.DataFrame, seeds: pd.DataFrame, keys: Sequence[str], metrics: Sequence[str],
                         level: float = 95.0, draws: int = BOOTSTRAP_DRAWS) -> pd.DataFrame:
    """``table`` with ``<metric>_boot_lo`` / ``_boot_hi``: the percentile bootstrap of each
    mean over seeds, from ``seeds`` (``per_seed`` of the same table: one row per seed and
    ``keys``, its value in ``<metric>_mean``). Each point resamples its seeds with
    replacement ``draws`` times from its own stream (seeded by its keys, so one point's
    bounds do not depend on the others); NaN with fewer than two seeds."""
    level = check_level(level, "level")
    keys = list(keys)
    out = table.copy()
    tail = (100.0 - level) / 2
    for metric in metrics:
        col = f"{metric}_mean"
        bounds: dict[tuple, tuple[float, float]] = {}
        if col in seeds.columns:
            for key, g in seeds.groupby(keys, sort=False, dropna=False):
                values = pd.to_numeric(g[col], errors="coerce").dropna().to_numpy(float)
                if len(values) < 2:
                    continue
                key = key if isinstance(key, tuple) else (key,)
                rng = np.random.default_rng([zlib.crc32(repr((metric, *key)).encode()), len(values)])
                means = values[rng.integers(0, len(values), size=(draws, len(values)))].mean(axis=1)
                bounds[_norm(key)] = (float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail)))
        found = [bounds.get(_norm(tuple(r)), (math.nan, math.nan)) for r in out[keys].itertuples(index=False)]
        out[f"{metric}{BOOT_LO}"] = [b[0] for b in found]
        out[f"{metric}{BOOT_HI}"] = [b[1] for b in found]
    return out


def _norm(key: tuple) -> tuple:
    """A group key that compares equal across tables: NaN as None, numbers as floats."""
    out = []
    for v in key:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out.append(None)
        elif isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
            out.append(float(v))
        else:
            out.append(str(v))
    return tuple(out)
