"""The study's selection, stored with its results: what ``fairdp analyze``, ``report`` and
``compare`` default to.

``fairdp run`` and ``fairdp search`` write ``<results>.selection.parquet`` beside the results
(a side table like the plan: never inside, so readers of the directory see only rows), one
row: the study's ``selection`` (fairness metric, ``by`` keys, RT, the RT sweep ``rts`` when the
spec has one) and, once a search has run into the results, the search's method, objectives and
constraints. The analysis commands read it and use it unless a flag overrides it
(``choose_selection``), saying which selection they used and where it came from. Results
written before fairdp stored a selection have none; the commands then use fairdp's defaults
and say so.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa

from fairdp.errors import InputError
from fairdp.privacy._shared import PrivateSelection
from fairdp.schema import SELECTION_FAIRNESS
from fairdp.study.store._store import (
    CorruptSideTable,
    ResultStore,
    foreign_reason,
    read_or_move_aside,
)

if TYPE_CHECKING:
    from fairdp.study.run._prepare import Prepared
    from fairdp.study.spec._spec import StudySpec

SELECTION_TABLE = "selection.parquet"

DEFAULT_RTS = (0.0, 0.5, 1.0, 2.0, 3.0, 5.0)
DEFAULTS = {"fairness": "tpr_gap", "rt": 1.0, "by": (), "rts": DEFAULT_RTS, "private": None}
"""What the analysis commands use where neither a flag nor a stored selection says."""

# the table's columns; JSON text where a value is a list or a mapping (as the hypervolume
# history stores a search's objectives), null where the study has none
SELECTION_TYPES = {"study": pa.string(), "fairness": pa.string(), "rt": pa.float64(), "by": pa.string(),
                   "rts": pa.string(), "search_method": pa.string(), "objectives": pa.string(),
                   "constraints": pa.string()}
PRIVATE_COLUMN = "private"
"""The optional column of a private selection (``selection.private``, JSON; absent from tables
written before it existed, null for a study without one)."""


@dataclass(frozen=True)
class SearchSelection:
    """What a search optimised: its front is drawn on ``objectives``, over the rows that meet
    ``constraints`` (``fairdp.constraints`` strings)."""

    method: str
    objectives: dict[str, str]
    constraints: tuple[str, ...] = ()

    def describe(self) -> str:
        text = ", ".join(f"{k} ({v})" for k, v in self.objectives.items())
        return text + (f", feasible under {'; '.join(self.constraints)}" if self.constraints else "")


@dataclass(frozen=True)
class StoredSelection:
    """A study's selection as stored beside its results."""

    study: str
    fairness: str = DEFAULTS["fairness"]
    rt: float = DEFAULTS["rt"]
    by: tuple[str, ...] = ()
    rts: tuple[float, ...] | None = None  # the spec's RT sweep; None: it has none
    search: SearchSelection | None = None  # the search run into the results, if one was
    private: PrivateSelection | None = None  # the study's selection.private, if it has one

    @classmethod
    def of_spec(cls, spec: StudySpec, searched: bool = False) -> StoredSelection:
        """``spec``'s selection, with its search's objectives and constraints when ``searched``."""
        search = None
        if searched and spec.search is not None:
            search = SearchSelection(spec.search.method, dict(spec.search.objectives),
                                     tuple(str(c) for c in spec.search.constraints))
        return cls(spec.name, spec.fairness, float(spec.rt), tuple(spec.by),
                   None if spec.rts is None else tuple(float(r) for r in spec.rts), search, spec.private_selection)

    def to_frame(self) -> pd.DataFrame:
        s = self.search
        row = {"study": self.study, "fairness": self.fairness, "rt": float(self.rt), "by": json.dumps(list(self.by)),
               "rts": None if self.rts is None else json.dumps(list(self.rts)),
               "search_method": s.method if s else None, "objectives": json.dumps(s.objectives) if s else None,
               "constraints": json.dumps(list(s.constraints)) if s else None,
               PRIVATE_COLUMN: json.dumps(self.private.to_dict()) if self.private else None}
        table = pa.Table.from_pylist([row], schema=pa.schema([*SELECTION_TYPES.items(), (PRIVATE_COLUMN, pa.string())]))
        return table.to_pandas()

    @classmethod
    def from_frame(cls, df: pd.DataFrame, path: str) -> StoredSelection:
        """The selection in a table ``read_side_table`` returned; ``CorruptSideTable`` naming
        ``path`` when it is not one."""
        reason = foreign_reason(pa.Schema.from_pandas(df, preserve_index=False), SELECTION_TYPES)
        if reason is None and len(df) != 1:
            reason = f"{len(df)} rows, not one"
        if reason:
            raise CorruptSideTable(path, reason)
        row = df.iloc[0]
        try:
            fairness, rt = str(row["fairness"]), float(row["rt"])
            if fairness not in SELECTION_FAIRNESS or not (math.isfinite(rt) and rt >= 0):
                raise ValueError(f"fairness {fairness!r}, rt {rt!r}")
            by = tuple(str(k) for k in json.loads(row["by"]))
            rts = None if _null(row["rts"]) else tuple(float(r) for r in json.loads(row["rts"]))
            search = None
            if not _null(row["search_method"]):
                search = SearchSelection(str(row["search_method"]), dict(json.loads(row["objectives"])),
                                         tuple(str(c) for c in json.loads(row["constraints"])))
            private = None
            if PRIVATE_COLUMN in df.columns and not _null(row[PRIVATE_COLUMN]):
                private = PrivateSelection.from_dict(json.loads(row[PRIVATE_COLUMN]))
        except (ValueError, TypeError, KeyError, InputError) as e:  # json's errors are ValueErrors
            raise CorruptSideTable(path, f"not a selection: {e}") from None
        return cls(str(row["study"]), fairness, rt, by, rts, search, private)


def _null(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def read_selection(store: ResultStore) -> StoredSelection | None:
    """The selection stored beside ``store``'s results, or None when none was (results written
    before fairdp stored one); ``CorruptSideTable`` when it is unreadable or not one."""
    df = store.read_side_table(SELECTION_TABLE)
    return None if df is None else StoredSelection.from_frame(df, store.side_table_path(SELECTION_TABLE))


def read_selections(*locations) -> dict[str, StoredSelection | None]:
    """Each results location's stored selection (None for one without, and for a Parquet
    file of rows, which has no side tables), keyed by the location as given."""
    return {str(loc): None if Path(str(loc)).is_file() else read_selection(ResultStore(loc)) for loc in locations}


def write_selection(store: ResultStore, spec: StudySpec, searched: bool = False,
                    repair: bool = False) -> tuple[StoredSelection, StoredSelection | None]:
    """Store ``spec``'s selection beside the results, atomically (a run or a search, under its
    lock); returns (what was stored, what was stored before, None if nothing). A search
    (``searched``) stores its objectives and constraints; a run keeps those of a search of the
    same study stored before (its rows are still there). A corrupt or foreign file is an error,
    moved aside with ``repair`` (a warning of the ``fairdp`` logger)."""
    old = read_or_move_aside(store, read_selection, repair)
    new = StoredSelection.of_spec(spec, searched)
    if not searched and old is not None and old.study == spec.name and old.search is not None:
        new = replace(new, search=old.search)
    if new != old:
        store.write_side_table(new.to_frame(), SELECTION_TABLE)
    return new, old


def store_selection(prep: Prepared, repair: bool, searched: bool = False) -> None:
    """Write the study of ``prep`` (a run's or a search's) selection beside its results
    (``write_selection``), saying (``Prepared.say``) when that changed what the analysis commands
    default to."""
    new, old = write_selection(prep.store, prep.spec, searched, repair)
    change = selection_change(old, new)
    if change:
        prep.say(f"the study's selection changed ({change}): stored in "
                 f"{prep.store.side_table_path(SELECTION_TABLE)}; fairdp analyze, report and compare now default to it")


def selection_text(key: str, value) -> str:
    """One key of a selection as the commands say it: ``fairness dp_gap``, ``rt 0.5``,
    ``by eps,lam`` (``by none``), ``rts 0,1,2``, ``private eps 1 at delta 1e-05 ...``."""
    return f"{key} {_value_text(value)}"


def _value_text(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, (tuple, list)):
        return ",".join(_value_text(v) for v in value) or "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


def selection_change(old: StoredSelection | None, new: StoredSelection) -> str | None:
    """What changed between two stored selections of one results location, for the writer to
    say (the analysis commands' defaults change with it), or None when nothing did."""
    if old is None or old.study != new.study:
        return None
    changed = [f"{k} {_value_text(getattr(old, k))} -> {_value_text(getattr(new, k))}"
               for k in ("fairness", "rt", "by", "rts", "private") if getattr(old, k) != getattr(new, k)]
    if old.search is not None and new.search is not None and old.search != new.search:
        changed.append(f"search {old.search.describe()} -> {new.search.describe()}")
    return "; ".join(changed) or None


@dataclass(frozen=True)
class ChosenSelection:
    """The selection an analysis command uses, each key's value and where it came from."""

    values: dict  # key -> value (fairness, rt, by, rts: those asked for)
    sources: dict  # key -> "flag" | "study" | "default"
    search: SearchSelection | None  # the stored search's, for its front (None: no search stored)
    message: str  # which selection, from where: the line a command prints


def choose_selection(stored: Mapping[str, StoredSelection | None], given: Mapping[str, object],
                     flags: Mapping[str, str]) -> ChosenSelection:
    """Each key of ``flags`` (fairness, rt, by, rts; key -> its flag's name) from its flag when
    ``given`` (not None), else from the selections ``stored`` with the results (location ->
    selection or None), else fairdp's default. Locations whose stored selections disagree on a
    key need its flag (``InputError`` naming it); searches with different objectives or
    constraints cannot share one front (``InputError``). ``message`` says what was used and
    where it came from."""
    have = {loc: s for loc, s in stored.items() if s is not None}
    missing = [loc for loc, s in stored.items() if s is None]
    values, sources = {}, {}
    for key, flag in flags.items():
        if given.get(key) is not None:
            values[key], sources[key] = given[key], "flag"
            continue
        found = {loc: getattr(s, key) for loc, s in have.items() if getattr(s, key) is not None}
        distinct = list(dict.fromkeys(found.values()))
        if len(distinct) > 1:
            shown = ", ".join(f"{selection_text(key, v)} in {loc}" for loc, v in found.items())
            raise InputError(f"{flag}: the results' stored selections differ ({shown}); pass {flag} to choose one, "
                             f"or analyze them apart")
        values[key], sources[key] = (distinct[0], "study") if distinct else (DEFAULTS[key], "default")
    searches = {loc: s.search for loc, s in have.items() if s.search is not None}
    if len({(json.dumps(s.objectives), s.constraints) for s in searches.values()}) > 1:
        shown = "; ".join(f"{loc}: {s.describe()}" for loc, s in searches.items())
        raise InputError(f"{', '.join(searches)}: searches with different objectives or constraints ({shown}) have "
                         f"no one front; report each search's results alone")
    search = next(iter(searches.values()), None)
    # a clear selection, the usual one, goes unsaid: only a private one is named
    said = {k: v for k, v in values.items() if not (k == "private" and v is None)}
    return ChosenSelection(values, sources, search, _message(said, {k: sources[k] for k in said}, have, missing,
                                                             {k: flags[k] for k in said}))


def _message(values: dict, sources: dict, have: dict, missing: list[str], flags: Mapping[str, str]) -> str:
    def listed(source: str) -> str:
        return ", ".join(selection_text(k, values[k]) for k in values if sources[k] == source)

    studies = ", ".join(dict.fromkeys(s.study for s in have.values()))
    unset = "/".join(flags[k] for k in values if sources[k] != "flag")
    override = f" (override with {unset})" if unset else ""
    why_none = "(results written before fairdp stored the study's)"
    by_source = set(sources.values())
    pieces = []
    if "study" in by_source:
        pieces.append(f"{listed('study')} from the study {studies}")
    if "flag" in by_source:
        pieces.append(f"{listed('flag')} from " + "/".join(flags[k] for k in values if sources[k] == "flag"))
    if "default" in by_source:
        plural = "s" if sum(s == "default" for s in sources.values()) > 1 else ""
        pieces.append(f"fairdp's default{plural} {listed('default')}" + (" (the study sets none)" if have else ""))
    if not have:
        return f"no selection stored with {', '.join(missing)} {why_none}: " + "; ".join(pieces) + override
    # results without a stored selection pooled with results that have one
    partly = (f"; {', '.join(missing)} {'has' if len(missing) == 1 else 'have'} no stored selection {why_none}"
              if missing else "")
    if by_source == {"study"}:
        return f"selection from the study {studies}: {listed('study')}{override}{partly}"
    if by_source == {"flag"}:
        return f"selection from the flags: {listed('flag')}{partly}"
    return "selection: " + "; ".join(pieces) + override + partly
