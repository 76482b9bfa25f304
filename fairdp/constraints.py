"""Search constraints: ``"<metric> <= <number>"`` or ``"<metric> >= <number>"`` strings.

A study's ``search.constraints`` is a list of such strings, e.g. ``["valid_accuracy >= 80",
"eps_formal <= 1"]``; the metric is one of ``fairdp.schema.OBJECTIVES``. Each constraint is
evaluated on a result row as a *violation* in Optuna's ``constraints_func`` convention: a
number that is <= 0 when the row satisfies it (``value - bound`` for ``<=``, ``bound -
value`` for ``>=``). A missing or NaN metric is a violation of +inf: a row that does not
report the metric cannot be shown to satisfy it (and Optuna refuses NaN constraint values).
Only the non-strict operators exist because Optuna counts a violation of exactly 0 as
feasible, so ``<`` could not be told apart from ``<=``.

Used by the spec (parse), the searchers (violations of one row, given to Optuna) and the
analysis (feasibility of many rows); plain functions, no imports from the rest of fairdp
but its vocabulary and its error type.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fairdp.errors import InputError
from fairdp.schema import OBJECTIVES

OPERATORS = ("<=", ">=")
_FORM = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*([<>=!]+)\s*(\S+)\s*$")


@dataclass(frozen=True)
class Constraint:
    metric: str
    op: str  # "<=" | ">="
    bound: float

    def violation(self, value: object) -> float:
        """Optuna's constraint value for a row whose metric is ``value``: <= 0 when satisfied."""
        if value is None or isinstance(value, bool):
            return math.inf
        try:
            v = float(value)
        except (TypeError, ValueError):
            return math.inf
        if math.isnan(v):
            return math.inf
        return v - self.bound if self.op == "<=" else self.bound - v

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}"


def parse_constraint(text: object, path: str) -> Constraint:
    """One constraint string; an ``InputError`` starting with ``path`` when it is not one."""
    if not isinstance(text, str):
        raise InputError(f"{path}: must be a string like 'valid_accuracy >= 80', got {text!r}")
    m = _FORM.match(text)
    if not m:
        raise InputError(f"{path}: expected '<metric> <= <number>' or '<metric> >= <number>', got {text!r}")
    metric, op, bound_text = m.groups()
    if metric not in OBJECTIVES:
        raise InputError(f"{path}: unknown metric '{metric}'; constraints may use: {', '.join(OBJECTIVES)}")
    if op not in OPERATORS:
        raise InputError(f"{path}: operator must be <= or >= (Optuna counts a violation of 0 as feasible, "
                         f"so < and > cannot be told apart from them), got {op!r}")
    try:
        bound = float(bound_text)
    except ValueError:
        raise InputError(f"{path}: bound must be a finite number, got {bound_text!r}") from None
    if not math.isfinite(bound):
        raise InputError(f"{path}: bound must be a finite number, got {bound_text!r}")
    return Constraint(metric, op, bound)


def parse_constraints(texts: Iterable[object], path: str = "constraints") -> tuple[Constraint, ...]:
    """Constraint strings, each checked with its index in the error path (``path[1]``)."""
    return tuple(parse_constraint(t, f"{path}[{i}]") for i, t in enumerate(texts))


def violations(row: Mapping[str, object], constraints: Sequence[Constraint]) -> list[float]:
    """Optuna's ``constraints_func`` values of one result row (a dict of its metrics)."""
    return [c.violation(row.get(c.metric)) for c in constraints]


def feasible(df: pd.DataFrame, constraints: Sequence[Constraint | str]) -> pd.Series:
    """True for each row of ``df`` that satisfies every constraint (all rows with none); a
    missing column or a NaN value is not feasible."""
    cons = [c if isinstance(c, Constraint) else parse_constraint(c, "constraints") for c in constraints]
    ok = np.ones(len(df), dtype=bool)
    for c in cons:
        if c.metric not in df.columns:
            ok[:] = False
            continue
        v = pd.to_numeric(df[c.metric], errors="coerce").to_numpy(float)
        with np.errstate(invalid="ignore"):
            ok &= (v <= c.bound) if c.op == "<=" else (v >= c.bound)  # NaN compares False
    return pd.Series(ok, index=df.index, name="feasible")
