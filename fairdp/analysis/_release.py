"""``eps_released``: the guarantee of releasing what a selection picked, tuning included.

A selected row's ``eps_formal`` is one config's guarantee; the selection looked at every
config its run trained (its dataset, method, seed and ``by`` values), so releasing the
pick costs more. Per selected row, from the events the rows store (``privacy_event``):

* whole grids (no ``tuning``): RDP composition of every config the selection looked at,
  labelled as such; valid for any selection rule;
* a random trial count (``tuning``) and a selection that is a best-of by a fixed total
  order (``rt = 0``: valid accuracy, then the fairness gap): Papernot & Steinke's bound,
  dp-accounting's ``RepeatAndSelectDpEvent``, over the grid's events;
* a random count with ``rt > 0``: the relaxation threshold is relative to the best
  accuracy among the trials, so which of two configs wins depends on the others (no total
  order), and the theorem does not apply; the bound is the composition of the trials drawn.

Accountant. The compositions are RDP's unless every row composed says ``accountant`` pld (a
study's ``train: {accountant: pld}``): then dp-accounting's PLD accountant composes them too,
and ``released_under`` ends "(PLD)". Rows of both accountants in one scope (a study resumed
under the other one is refused, but result sets can be read together) are composed by RDP,
a valid bound for every row whatever accountant reported its own eps; so are rows written
before the column existed, all RDP's. Repeat-and-select is RDP's in every case: dp-accounting's
PLD accountant has no such event. An event PLD cannot compose falls back to RDP, labelled so.

Not covered (``eps_released`` is NaN, ``released_under`` says why): methods without an
accountant's guarantee of the training data (local DP per released representation, as
FEDERATE's; no privacy at all). What is covered is the training data: the selection reads
validation metrics, protected attributes included, in the clear, as in every paper here.
The valid and test splits' per-group confusion counts (``valid_confusion``, ``test_confusion``)
are published by every row without noise, and no eps covers them either. Releasing several picks
(a Pareto front, one model per ``by`` value) is several releases, composed by
``whole_table_release`` for the whole table.

``eps_released`` is one seed's release. A table's mean over seeds releases every seed's
pick at once, and every seed trained on the same data, so ``release_summary`` states both:
the largest per-seed figure, and the composition over the seeds the mean uses (RDP
composition of every config trained in every one of them; the sum of their eps for pure-DP
rows where it is smaller; with a random trial count and ``rt = 0``, the sum of the seeds'
repeat-and-select RDP curves).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fairdp.analysis._rows import (
    RELEASED_GUARANTEE_COLUMNS,
    as_frame,
    check_by,
    check_rt,
    eps_scope,
    factorize_objects,
    guarantee_text,
    guarantees_by_method,
    require_columns,
)
from fairdp.privacy import composed_epsilon, event_from_json, repeat_and_select_epsilon
from fairdp.privacy._shared import (
    PFLD_DELTA,
    epsilon_of_rdp,
    rdp_curve,
    repeat_and_select_rdp,
    trial_count_from_dict,
)
from fairdp.schema import GUARANTEE, PRIVACY_EVENT, RUN_KEYS, TUNING

# A private pick's columns (``fairdp.analysis._private.private_valid_metrics``): its run's count
# release (event JSON with its relation), the noise's sigma, and why its reads are not covered
SELECTION_EVENT, SELECTION_SIGMA, SELECTION_UNCOVERED = "selection_event", "selection_sigma", "selection_uncovered"
SELECTION_RUN = "selection_run"  # the run whose count release the row's counts are part of
ACCOUNTANT = "accountant"  # the rows' column: which accountant reported their eps (null: none)


def released_guarantees(df: object, selected: object, rt: float, by: Sequence[str] = ()) -> pd.DataFrame:
    """``selected`` (one row per run and ``by`` values, e.g. ``select_by_rt``'s) with
    ``RELEASED_GUARANTEE_COLUMNS`` added: eps_released at delta_released, how many configs the run
    trained, and the bound used (see the module docstring). ``df`` holds every row the
    selection chose from; ``rt`` is the threshold it used."""
    return _released(df, selected, rt, by)[0]


def selection_release(df: object, selected: object, rt: float, by: Sequence[str] = ()) -> tuple[pd.DataFrame,
                                                                                                 pd.DataFrame]:
    """``released_guarantees(df, selected, rt, by)`` and its ``release_summary``, from one
    computation of the selections' scopes and compositions (what the report shows of both)."""
    released, releases, chosen = _released(df, selected, rt, by)
    return released, release_summary(released, df, rt, by, _computed=(releases, chosen))


def _released(df: object, selected: object, rt: float, by: Sequence[str]) -> tuple[pd.DataFrame, _Releases,
                                                                                      np.ndarray]:
    """``released_guarantees``' table, the ``_Releases`` that computed it and the scope each
    selection chose from."""
    rt = check_rt(rt)
    rows = as_frame(df, "df")
    out = as_frame(selected, "selected").copy()
    by = check_by(by, out)
    require_columns(rows, [*RUN_KEYS, "config_id"], "df")
    stats, chosen = _selection_scopes(rows, out, by)
    releases = _Releases(stats, rt)
    values = releases.of(out, chosen)
    for i, col in enumerate(RELEASED_GUARANTEE_COLUMNS):
        out[col] = [v[i] for v in values]
    return out, releases, chosen


def has_release_events(df: pd.DataFrame) -> bool:
    """Whether any row stores a privacy event, i.e. some selection has an ``eps_released``."""
    return PRIVACY_EVENT in df.columns and bool(df[PRIVACY_EVENT].notna().any())


def _selection_scopes(rows: pd.DataFrame, selected: pd.DataFrame, by: Sequence[str]) -> tuple[_ScopeStats, np.ndarray]:
    """The stats of every scope of ``rows`` plus one empty scope (last), and per selection the
    index of the scope it chose from."""
    row_scope, sel_scope, n = _scope_ids(rows, selected, by)
    return _ScopeStats.of(rows, row_scope, n + 1), np.where(sel_scope < 0, n, sel_scope)


class _Releases:
    """eps_released of selections from their scopes' stats, each distinct composition, trial
    record and event parsed once."""

    def __init__(self, stats: _ScopeStats, rt: float):
        self.stats, self.rt, self.composed = stats, rt, _Compositions(stats)
        self.relations: dict[str, str] = {}
        self.records: dict[str, tuple] = {}
        self.repeats: dict[tuple, float] = {}

    def relation(self, event: str) -> str:
        if event not in self.relations:
            self.relations[event] = event_from_json(event)[1]
        return self.relations[event]

    def record(self, text: str) -> tuple:
        """A tuning record's (record, trial count)."""
        if text not in self.records:
            record = json.loads(text)
            self.records[text] = (record, trial_count_from_dict(record))
        return self.records[text]

    def of(self, selected: pd.DataFrame, chosen: np.ndarray) -> list[tuple]:
        def column(name):
            return selected[name].to_numpy(object) if name in selected.columns \
                else np.full(len(selected), None, dtype=object)

        events, eps, methods = column(PRIVACY_EVENT), column("eps_formal"), selected["method"].astype(str).to_numpy(object)
        reads = list(zip(column(SELECTION_EVENT), column(SELECTION_SIGMA), column(SELECTION_UNCOVERED)))
        return [self.with_selection(self.one(int(i), e, x, m), int(i), r) if isinstance(r[0], str)
                else self.one(int(i), e, x, m) for i, e, x, m, r in zip(chosen, events, eps, methods, reads)]

    def with_selection(self, released: tuple, i: int, reads: tuple) -> tuple:
        """A private pick's guarantee (``fairdp.analysis._private``): the training's bound
        ``released`` composed with its run's release of noisy validation counts, RDP curves
        added, at the training's delta; NaN where either is not covered."""
        eps, delta, trained, how = released
        event, sigma, uncovered = reads
        if isinstance(uncovered, str) and uncovered:
            return math.nan, math.nan, trained, f"not covered: {uncovered}"
        if math.isnan(eps):
            return released
        selection, relation = event_from_json(event)
        rdp = self.training_rdp(i, relation, how) + rdp_curve(selection, relation)
        return (epsilon_of_rdp(rdp, delta), delta, trained,
                f"{how}, and the noisy validation counts it was picked from (discrete Gaussian, sigma {sigma:.3g})")

    def training_rdp(self, i: int, relation: str, how: str) -> np.ndarray:
        """The RDP curve of scope ``i``'s training release, as ``one`` bounded it (``how``)."""
        s = self.stats
        tuning = s.tuning[i]
        if tuning is not None and self.rt == 0:
            record, count = self.record(tuning)
            grid = [event_from_json(e)[0] for e in record["grid_events"]]
            return repeat_and_select_rdp(grid, relation, count.mean, count.shape)
        return _composed_rdp(s.counter(i), relation)

    def one(self, i: int, event: object, eps_formal: object, method: str) -> tuple:
        s = self.stats
        trained = int(s.rows[i])
        if not isinstance(event, str):
            if eps_formal is None or (isinstance(eps_formal, float) and math.isinf(eps_formal)):
                why = "not covered: no privacy"
            elif eps_scope(method) == "local":
                why = "not covered: a local guarantee per representation"
            else:
                why = "not covered: no accountant event stored"
            return math.nan, math.nan, trained, why
        relation, delta, tuning, drawn = self.relation(event), s.delta_of(i), s.tuning[i], int(s.events[i])
        if tuning is not None:
            record, count = self.record(tuning)
            if self.rt == 0:
                key = (tuning, relation, delta)
                if key not in self.repeats:
                    grid = [event_from_json(e)[0] for e in record["grid_events"]]
                    self.repeats[key] = repeat_and_select_epsilon(grid, relation, delta, count.mean, count.shape)
                return self.repeats[key], delta, trained, (f"repeat-and-select: best of K ~ {count.describe()} draws "
                                                           f"from {record['grid_size']} configs")
            eps, how = self.composed(i, relation, delta)
            return eps, delta, trained, (f"composition of the {drawn} trials drawn (K ~ {count.describe()}; "
                                         f"RT {self.rt:g} is no best-of by a fixed order)" + how)
        eps, how = self.composed(i, relation, delta)
        return eps, delta, trained, (f"composition of the {drawn} configs trained" + how if drawn > 1
                                     else "one config trained: its own guarantee")

    def over_seeds(self, chosen: np.ndarray, released: pd.DataFrame) -> tuple[float, str]:
        """(eps, bound) of releasing the mean over ``released``'s seeds (one selected row per seed,
        with ``released_guarantees``' columns; ``chosen``: the scope each chose from), at the
        seeds' largest ``delta_released``: every seed's configs composed, the same data."""
        uncovered = released[released["eps_released"].isna()]
        if len(uncovered):
            return math.nan, str(uncovered["released_under"].iloc[0])
        seeds = len(released)
        if seeds == 1:
            return float(released["eps_released"].iloc[0]), "one seed: its own release"
        s = self.stats
        delta = float(released["delta_released"].max())
        union = s.union(np.zeros(len(chosen), np.int64), chosen, 1)
        relation = union.relation_of(0) or self.relation(released[PRIVACY_EVENT].iloc[0])
        tunings = [s.tuning[i] for i in chosen]
        # a private pick's count releases, one per seed, compose with the training: RDP curves add
        counts = [t for t in (released[SELECTION_EVENT] if SELECTION_EVENT in released.columns else ()) if isinstance(t, str)]
        reads = np.sum([rdp_curve(event_from_json(t)[0], relation) for t in counts], axis=0) if counts else None
        with_reads = f", and their {len(counts)} releases of noisy validation counts" if counts else ""
        if self.rt == 0 and all(t is not None for t in tunings):
            rdp = 0.0
            for text, times in Counter(tunings).items():  # each seed's repeat-and-select, composed: RDP curves add
                record, count = self.record(text)
                grid = [event_from_json(e)[0] for e in record["grid_events"]]
                rdp = rdp + times * repeat_and_select_rdp(grid, relation, count.mean, count.shape)
            if reads is not None:
                rdp = rdp + reads
            return epsilon_of_rdp(rdp, delta), f"composition of the {seeds} seeds' repeat-and-select releases{with_reads}"
        what = "trials drawn" if any(t is not None for t in tunings) else "configs trained"
        if reads is not None:
            return (epsilon_of_rdp(_composed_rdp(union.counter(0), relation) + reads, delta),
                    f"composition of the {int(union.events[0])} {what} in the {seeds} seeds (the same data){with_reads}")
        eps, how = _Compositions(union)(0, relation, delta)
        return eps, f"composition of the {int(union.events[0])} {what} in the {seeds} seeds (the same data)" + how


_SKIPPED = -2  # a scope level whose rows hold no value of its key: one group at that level


def _joint_codes(left: pd.Series, right: pd.Series) -> np.ndarray:
    """Integer codes of two columns' values in one numbering: equal values get equal codes in
    either column (as ``groupby`` and a dict look-up compare them), NaN -1."""
    both = pd.concat([left.reset_index(drop=True), right.reset_index(drop=True)], ignore_index=True)
    return pd.factorize(both, use_na_sentinel=True)[0].astype(np.int64)


def _pair_codes(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """One code per distinct (first, second) pair (both codes >= -2)."""
    width = int(second.max(initial=0)) + 3
    return pd.factorize((first + 2) * width + (second + 2))[0].astype(np.int64)


def _scope_ids(rows: pd.DataFrame, selected: pd.DataFrame, by: Sequence[str]) -> tuple[np.ndarray, np.ndarray, int]:
    """Which scope each row is in and which each selection chose from: a scope is the rows of one
    run (``RUN_KEYS``) split by each of ``by`` in turn, a level where the part being split holds no
    value of that key being one group (a method without the column, a baseline repeated per
    notion); rows without a value where the part holds some are in no scope, as ``groupby``
    leaves them out. Returns (per row, -1 for none; per selection, -1 for no rows; how many),
    in arrays, not a split of the table: a report looks up tens of thousands of selections."""
    n_rows = len(rows)
    valid = np.ones(n_rows + len(selected), bool)
    prefix = np.zeros(n_rows + len(selected), np.int64)
    for key in RUN_KEYS:
        codes = _joint_codes(rows[key], selected[key])
        valid &= codes >= 0
        prefix = _pair_codes(prefix, codes)
    for key in by:
        if key not in rows.columns:
            continue
        codes = _joint_codes(rows[key], selected[key])
        parts = int(prefix.max(initial=0)) + 1
        mine = valid[:n_rows] & (codes[:n_rows] >= 0)
        held = np.bincount(prefix[:n_rows][mine], minlength=parts) > 0  # the part holds some value of key
        split = held[prefix]
        valid &= ~(split & (codes < 0))
        prefix = _pair_codes(prefix, np.where(split, codes, _SKIPPED))
    row_prefix = prefix[:n_rows]
    ids, uniques = pd.factorize(row_prefix[valid[:n_rows]])
    row_scope = np.full(n_rows, -1, np.int64)
    row_scope[valid[:n_rows]] = ids
    sel_scope = pd.Index(uniques).get_indexer(prefix[n_rows:]).astype(np.int64)
    sel_scope[~valid[n_rows:]] = -1
    return row_scope, sel_scope, len(uniques)


def _first_per_group(groups: np.ndarray, values: np.ndarray, n: int, fill: object) -> np.ndarray:
    """Per group 0..n-1, the value of its first member in order (``fill`` where none)."""
    out = np.full(n, fill, dtype=values.dtype if fill is not None else object)
    found, first = np.unique(groups, return_index=True)
    out[found] = values[first]
    return out


@dataclass(frozen=True)
class _ScopeStats:
    """Per scope (a set of rows, e.g. the configs a selection looked at): what decides the
    composition of its configs (``_compose``), in arrays. ``pair_*``: the multiset of its
    events, sorted by scope then event code (``event_text``: code -> the stored JSON)."""

    rows: np.ndarray  # rows in the scope
    events: np.ndarray  # of them, rows with a privacy event
    delta_max: np.ndarray  # the largest delta of its rows (NaN: none)
    eps_sum: np.ndarray  # eps_formal summed over its rows with an event
    delta_sum: np.ndarray  # delta summed over its rows with an event
    pld: np.ndarray  # every row with an event says pld, and some row has one
    first_event: np.ndarray  # code of its first event (-1: none)
    tuning: np.ndarray  # its first tuning record (None: none)
    pair_scope: np.ndarray
    pair_event: np.ndarray
    pair_count: np.ndarray
    event_text: np.ndarray

    @classmethod
    def of(cls, rows: pd.DataFrame, row_scope: np.ndarray, n: int) -> _ScopeStats:
        """The stats of ``n`` scopes, ``row_scope`` naming each row's (-1: none)."""
        inside = row_scope >= 0
        scope = row_scope[inside]

        def column(name: str, numeric: bool) -> np.ndarray:
            if name not in rows.columns:
                return np.full(len(scope), np.nan if numeric else None, dtype=float if numeric else object)
            values = rows[name].to_numpy()[inside]
            return pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(float) if numeric \
                else np.asarray(values, dtype=object)

        # the object array itself: a Series of it would first be converted to Arrow strings (0.6 s a million)
        codes, text = factorize_objects(column(PRIVACY_EVENT, False), sort=True)
        codes = codes.astype(np.int64)
        has = codes >= 0
        delta, eps = column("delta", True), column("eps_formal", True)
        delta_max = np.full(n, -np.inf)
        np.fmax.at(delta_max, scope, delta)
        delta_max[delta_max == -np.inf] = np.nan
        pld = (column(ACCOUNTANT, False) == "pld") if ACCOUNTANT in rows.columns else np.zeros(len(scope), bool)
        events = np.bincount(scope[has], minlength=n)
        not_pld = np.bincount(scope[has & ~pld], minlength=n)
        tuning = column(TUNING, False)
        noted = pd.notna(tuning)
        width = max(len(text), 1)
        pairs, counts = np.unique(scope[has] * width + codes[has], return_counts=True)
        return cls(rows=np.bincount(scope, minlength=n), events=events, delta_max=delta_max,
                   eps_sum=np.bincount(scope[has], weights=np.where(np.isnan(eps[has]), 0.0, eps[has]), minlength=n),
                   delta_sum=np.bincount(scope[has], weights=np.where(np.isnan(delta[has]), 0.0, delta[has]), minlength=n),
                   pld=(events > 0) & (not_pld == 0) & (ACCOUNTANT in rows.columns),
                   first_event=_first_per_group(scope[has], codes[has], n, -1),
                   tuning=_first_per_group(scope[noted], tuning[noted], n, None),
                   pair_scope=pairs // width, pair_event=pairs % width, pair_count=counts.astype(np.int64),
                   event_text=np.asarray(text, dtype=object))

    def union(self, group: np.ndarray, member: np.ndarray, n: int) -> _ScopeStats:
        """The stats of ``n`` unions of scopes: scope ``member[k]`` is in union ``group[k]`` (a
        scope named twice counts twice, as two seeds' rows would)."""
        starts = np.searchsorted(self.pair_scope, member, side="left")
        ends = np.searchsorted(self.pair_scope, member, side="right")
        lengths = ends - starts
        take = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
        pair_group = np.repeat(group, lengths)
        width = max(len(self.event_text), 1)
        keys, inverse = np.unique(pair_group * width + self.pair_event[take], return_inverse=True)
        counts = np.bincount(inverse, weights=self.pair_count[take], minlength=len(keys)).astype(np.int64)
        delta_max = np.full(n, -np.inf)
        np.fmax.at(delta_max, group, self.delta_max[member])
        delta_max[delta_max == -np.inf] = np.nan
        events = np.bincount(group, weights=self.events[member], minlength=n).astype(np.int64)
        not_pld = np.bincount(group, weights=(self.events[member] > 0) & ~self.pld[member], minlength=n)
        with_event = self.first_event[member] >= 0
        return _ScopeStats(rows=np.bincount(group, weights=self.rows[member], minlength=n).astype(np.int64),
                           events=events, delta_max=delta_max,
                           eps_sum=np.bincount(group, weights=self.eps_sum[member], minlength=n),
                           delta_sum=np.bincount(group, weights=self.delta_sum[member], minlength=n),
                           pld=(events > 0) & (not_pld == 0),
                           first_event=_first_per_group(group[with_event], self.first_event[member][with_event], n, -1),
                           tuning=_first_per_group(group, self.tuning[member], n, None),
                           pair_scope=keys // width, pair_event=keys % width, pair_count=counts,
                           event_text=self.event_text)

    def signatures(self) -> np.ndarray:
        """Per scope, a number equal for two scopes exactly when their event multisets are."""
        n = len(self.rows)
        starts = np.searchsorted(self.pair_scope, np.arange(n), side="left")
        ends = np.searchsorted(self.pair_scope, np.arange(n), side="right")
        data = np.stack([self.pair_event, self.pair_count], axis=1).astype(np.int64).tobytes()
        step = 16  # two int64 a pair
        return pd.factorize(pd.Series([data[s * step:e * step] for s, e in zip(starts, ends)], dtype=object))[0]

    def counter(self, i: int) -> Counter:
        """Scope ``i``'s events with their counts."""
        lo, hi = np.searchsorted(self.pair_scope, [i, i + 1])
        return Counter({self.event_text[c]: int(k) for c, k in zip(self.pair_event[lo:hi], self.pair_count[lo:hi])})

    def delta_of(self, i: int) -> float:
        """The delta scope ``i``'s release is stated at: its rows' largest, PF-LD's for pure-DP rows."""
        largest = self.delta_max[i]
        return float(largest) if largest > 0 else PFLD_DELTA

    def relation_of(self, i: int) -> str | None:
        """The neighbouring relation of scope ``i``'s first event (None: it has none)."""
        code = self.first_event[i]
        return None if code < 0 else event_from_json(self.event_text[code])[1]


class _Compositions:
    """``_compose``'s answers for the scopes of one ``_ScopeStats``, each distinct one composed
    once: by what decides it (the events with their counts, relation, delta, accountant, the
    basic sum), so the seeds of one grid, which compose the same events, cost one composition."""

    def __init__(self, stats: _ScopeStats):
        self.stats, self.signature, self.memo = stats, stats.signatures(), {}

    def __call__(self, i: int, relation: str, delta: float) -> tuple[float, str]:
        s = self.stats
        basic = float(s.eps_sum[i]) if s.delta_sum[i] <= delta else None
        key = (int(self.signature[i]), relation, delta, "pld" if s.pld[i] else "rdp", basic)
        if key not in self.memo:
            self.memo[key] = _compose(s.counter(i), relation, delta, key[3], basic)
        return self.memo[key]


def _compose(counts: Counter, relation: str, delta: float, accountant: str, basic: float | None) -> tuple[float, str]:
    """The smaller of two composition bounds at ``delta`` over ``counts`` (each distinct event
    with its multiplicity): RDP's or, where every row composed says pld, PLD's; and ``basic``,
    the sum of the rows' eps when their deltas sum to at most ``delta`` (pure-DP rows, where
    RDP's conversion can cost more than the sum at a few configs); with what to add to the
    bound's label ("" for RDP's)."""
    import dp_accounting  # imported here, not at the top: it pulls in scipy (~2 s per fairdp start)

    counted = [dp_accounting.SelfComposedDpEvent(event_from_json(e)[0], n) for e, n in counts.items()]
    how = ""
    if accountant == "pld":
        try:
            eps, how = composed_epsilon(counted, relation, delta, "pld"), " (PLD)"
        except dp_accounting.UnsupportedEventError:
            eps, how = composed_epsilon(counted, relation, delta), " (RDP: PLD cannot compose these events)"
    else:
        eps = composed_epsilon(counted, relation, delta)
    if basic is not None:
        eps = min(eps, basic)
    return eps, how


def _composed_rdp(counts: Counter, relation: str) -> np.ndarray:
    """The RDP curve of composing each distinct event (JSON) of ``counts`` its number of times."""
    import dp_accounting  # imported here: scipy under it costs a CLI start ~2 s

    return rdp_curve(dp_accounting.ComposedDpEvent(
        [dp_accounting.SelfComposedDpEvent(event_from_json(e)[0], n) for e, n in counts.items()]), relation)


def _with_count_releases(mine: pd.DataFrame, stats: _ScopeStats, whole: _ScopeStats, seed_of_row: np.ndarray,
                         relation: str, delta: float) -> tuple[float, float, str]:
    """(one seed's largest eps, every seed's eps, label) of the whole table where the rows were
    picked from noisy validation counts (a private selection): every config's training and every
    run's count release (``SELECTION_RUN`` names the run, each released once), RDP curves added."""

    releases = mine.loc[mine[SELECTION_EVENT].notna(), [SELECTION_RUN, SELECTION_EVENT]].drop_duplicates(SELECTION_RUN)
    seeds = seed_of_row[mine.index.get_indexer(releases.index)]
    curves = np.array([rdp_curve(event_from_json(t)[0], relation) for t in releases[SELECTION_EVENT]])
    per_seed = [epsilon_of_rdp(_composed_rdp(stats.counter(i), relation) + curves[seeds == i].sum(axis=0), delta)
                for i in range(int(seed_of_row.max()) + 1)]
    every = epsilon_of_rdp(_composed_rdp(whole.counter(0), relation) + curves.sum(axis=0), delta)
    return max(per_seed), every, f", and the {len(releases)} runs' noisy validation counts (RDP)"


PER_SEED = "ε released, one seed (largest)"
"""release_summary's column: each seed's pick released alone, the largest over seeds."""
MEAN_OVER_SEEDS = "ε released, mean over seeds"
"""release_summary's column: the mean over seeds released, every seed's pick composed."""
NOT_COVERED = ("no ε here covers the validation rows, whose protected attributes and labels the selection reads "
               "without noise, nor the valid and test splits' per-group confusion counts (valid_confusion, "
               "test_confusion), which every row publishes without noise and from which every metric, per-group "
               "rate and interval of this report is computed")
"""What no ε of a release covers, said beside it."""


def release_summary(released: pd.DataFrame, rows: pd.DataFrame, rt: float, by: Sequence[str] = (), *,
                    _computed: tuple[_Releases, np.ndarray] | None = None) -> pd.DataFrame:
    """Per (dataset, method, *by) of ``released_guarantees``' output (``rows``: every row the
    selection chose from; ``rt``: its threshold): the guarantee kind, seeds, the selected
    configs' largest eps_formal, the largest eps_released over seeds (``PER_SEED``: one
    seed's pick released alone) and the eps of releasing the mean over those seeds
    (``MEAN_OVER_SEEDS``: every seed's pick, each selected on the same data, composed; see
    the module docstring), their delta, configs trained per run (min-max), the bound of the
    seed with the largest eps_released and the bound of the mean. ``_computed``: the
    ``_Releases`` and chosen scopes ``released`` was computed with (``selection_release``)."""
    rt = check_rt(rt)
    rows = as_frame(rows, "rows")
    by = check_by(by)
    keys = ["dataset", "method", *by]
    kinds = guarantees_by_method(rows) if len(rows) else {}
    released = released.reset_index(drop=True)
    if _computed is not None:
        releases, chosen = _computed
    elif len(released):
        stats, chosen = _selection_scopes(rows, released, by)
        releases = _Releases(stats, rt)
    out = []
    for key, grp in released.groupby(keys, sort=True, dropna=False):
        worst = grp.loc[grp["eps_released"].fillna(math.inf).idxmax()]
        lo, hi = int(grp["trained"].min()), int(grp["trained"].max())
        mean_eps, mean_bound = releases.over_seeds(chosen[grp.index.to_numpy()], grp)
        ident = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        out.append({**ident, "guarantee": guarantee_text(kinds.get(str(ident["method"]))),
                    "seeds": len(grp), "ε of one config": float(grp["eps_formal"].max()),
                    PER_SEED: float(grp["eps_released"].max()), MEAN_OVER_SEEDS: mean_eps,
                    "δ": worst["delta_released"], "trained per run": f"{lo}" if lo == hi else f"{lo}-{hi}",
                    "bound, one seed": worst["released_under"], "bound, mean over seeds": mean_bound})
    return pd.DataFrame(out)


WHOLE_TABLE_COLUMNS = ("dataset", "guarantee", "methods", "seeds", "configs per seed", "ε, one seed (largest)",
                       "ε, all seeds", "δ", "bound")
"""``whole_table_release``'s columns."""


def whole_table_release(rows: object, kinds: dict[str, str | None] | None = None) -> pd.DataFrame:
    """What releasing every config of ``rows`` costs, the whole table of a study at once (every
    pick of every ``by`` value, every point of every figure): per dataset and guarantee kind
    (``guarantees_by_method``; kinds are composed apart, each in its own relation), the
    composition of every config trained, by ``_compose`` as ``eps_released`` composes a run
    (RDP, PLD where every row says so, the sum of pure-DP rows' eps where smaller), at the rows'
    largest delta (PF-LD's for pure-DP rows): ``ε, one seed (largest)`` over each seed's configs
    (the largest over seeds) and ``ε, all seeds`` over every seed's, the same data. A kind
    without stored events (a local guarantee per representation, no privacy) is listed as not
    covered. ``kinds``: ``guarantees_by_method`` of ``rows`` where the caller has it. Columns:
    ``WHOLE_TABLE_COLUMNS``."""
    rows = as_frame(rows, "rows")
    require_columns(rows, [*RUN_KEYS, "config_id"], "rows")
    # the columns read here, taken before any filter copies the rows (a million rows, sixty columns)
    rows = rows[[c for c in (*RUN_KEYS, "config_id", "status", PRIVACY_EVENT, "eps_formal", "delta", ACCOUNTANT,
                             TUNING, GUARANTEE, SELECTION_EVENT, SELECTION_RUN) if c in rows.columns]]
    ok = rows[rows["status"].astype("object") == "ok"] if "status" in rows.columns else rows
    if kinds is None:
        kinds = guarantees_by_method(rows) if len(rows) else {}
    out = []
    for dataset, in_ds in ok.groupby("dataset", sort=True):
        by_kind: dict = {}
        for method in sorted(map(str, in_ds["method"].unique())):
            if kinds.get(method) is not None:
                by_kind.setdefault(kinds[method], []).append(method)
        for kind, methods in sorted(by_kind.items()):
            mine = in_ds[in_ds["method"].isin(methods).to_numpy(bool)]
            seeds = sorted(mine["seed"].unique())
            per_seed = mine.groupby("seed")["config_id"].size()
            configs = f"{per_seed.min()}" if per_seed.min() == per_seed.max() else f"{per_seed.min()}-{per_seed.max()}"
            record = {"dataset": dataset, "guarantee": guarantee_text(kind), "methods": ", ".join(methods),
                      "seeds": len(seeds), "configs per seed": configs}
            events = mine[PRIVACY_EVENT].notna() if PRIVACY_EVENT in mine.columns else pd.Series(False, mine.index)
            if not events.all():
                why = ("not covered: a local guarantee per representation" if not events.any()
                       else "not covered: some rows store no accountant event")
                out.append({**record, "ε, one seed (largest)": math.nan, "ε, all seeds": math.nan, "δ": math.nan,
                            "bound": why})
                continue
            _, relation = event_from_json(mine[PRIVACY_EVENT].iloc[0])
            deltas = pd.to_numeric(mine["delta"], errors="coerce").dropna() if "delta" in mine.columns \
                else pd.Series(dtype=float)
            delta = float(deltas.max()) if len(deltas) and deltas.max() > 0 else PFLD_DELTA
            seed_of_row, seed_values = pd.factorize(mine["seed"])
            stats = _ScopeStats.of(mine, seed_of_row.astype(np.int64), len(seed_values))
            composed = _Compositions(stats)  # seeds of one grid compose the same events: each distinct one once
            whole = stats.union(np.zeros(len(seed_values), np.int64), np.arange(len(seed_values)), 1)
            if SELECTION_EVENT in mine.columns and mine[SELECTION_EVENT].notna().any():
                one, every, how = _with_count_releases(mine, stats, whole, seed_of_row, relation, delta)
            else:
                one = max(composed(i, relation, delta)[0] for i in range(len(seed_values)))
                every, how = _Compositions(whole)(0, relation, delta)
            out.append({**record, "ε, one seed (largest)": one, "ε, all seeds": every, "δ": delta,
                        "bound": f"composition of every config trained ({relation})" + how})
    return pd.DataFrame(out, columns=list(WHOLE_TABLE_COLUMNS))
