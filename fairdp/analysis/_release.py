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

import pandas as pd

from fairdp.analysis._rows import (
    RELEASED_GUARANTEE_COLUMNS,
    as_frame,
    check_by,
    check_rt,
    eps_scope,
    guarantee_text,
    guarantees_by_method,
    require_columns,
)
from fairdp.privacy import composed_epsilon, event_from_json, repeat_and_select_epsilon
from fairdp.privacy._shared import (
    PFLD_DELTA,
    epsilon_of_rdp,
    repeat_and_select_rdp,
    trial_count_from_dict,
)
from fairdp.schema import PRIVACY_EVENT, RUN_KEYS, TUNING

ACCOUNTANT = "accountant"  # the rows' column: which accountant reported their eps (null: none)


def released_guarantees(df: object, selected: object, rt: float, by: Sequence[str] = ()) -> pd.DataFrame:
    """``selected`` (one row per run and ``by`` values, e.g. ``select_by_rt``'s) with
    ``RELEASED_GUARANTEE_COLUMNS`` added: eps_released at delta_released, how many configs the run
    trained, and the bound used (see the module docstring). ``df`` holds every row the
    selection chose from; ``rt`` is the threshold it used."""
    rt = check_rt(rt)
    rows = as_frame(df, "df")
    out = as_frame(selected, "selected").copy()
    by = check_by(by, out)
    require_columns(rows, [*RUN_KEYS, "config_id"], "df")
    scopes, memo = _scopes(rows, by), {}
    # each selection's composition once per distinct scope: a study's seeds compose the same events
    values = [_released(scopes, sel, rt, memo) for sel in out.to_dict("records")]
    for i, col in enumerate(RELEASED_GUARANTEE_COLUMNS):
        out[col] = [v[i] for v in values]
    return out


def has_release_events(df: pd.DataFrame) -> bool:
    """Whether any row stores a privacy event, i.e. some selection has an ``eps_released``."""
    return PRIVACY_EVENT in df.columns and bool(df[PRIVACY_EVENT].notna().any())


def _scopes(rows: pd.DataFrame, by: Sequence[str]) -> dict:
    """``rows`` split once by run (``RUN_KEYS``), then by each of ``by`` that the run's rows
    hold (``_scope`` looks a selection up in it): a report looks up hundreds of selections,
    and filtering the whole table for each took most of its time. Key None: no rows."""
    return {None: rows.iloc[:0],
            **{run: _split_by(grp, tuple(by)) for run, grp in rows.groupby(list(RUN_KEYS), sort=False)}}


def _split_by(rows: pd.DataFrame, by: tuple[str, ...]):
    """``rows``, or (key, {value: ...}) split by the first of ``by`` that some row holds."""
    if not by:
        return rows
    key, rest = by[0], by[1:]
    # a method without the column (a baseline repeated per notion) is one group
    if key not in rows.columns or not rows[key].notna().any():
        return _split_by(rows, rest)
    return key, {value: _split_by(grp, rest) for value, grp in rows.groupby(key, sort=False)}


def _scope(scopes: dict, sel) -> pd.DataFrame:
    """The rows the selection of ``sel``'s run and by-group chose from (``scopes``: ``_scopes``')."""
    node = scopes.get(tuple(sel[key] for key in RUN_KEYS))
    while isinstance(node, tuple):
        key, groups = node
        node = groups.get(sel[key])
    return scopes[None] if node is None else node


def _released(scopes: dict, sel: dict, rt: float, memo: dict | None = None):
    scope = _scope(scopes, sel)
    events = scope[PRIVACY_EVENT].dropna().tolist() if PRIVACY_EVENT in scope.columns else []
    event = sel.get(PRIVACY_EVENT)
    if not isinstance(event, str):
        eps = sel.get("eps_formal")
        if eps is None or (isinstance(eps, float) and math.isinf(eps)):
            why = "not covered: no privacy"
        elif eps_scope(str(sel["method"])) == "local":
            why = "not covered: a local guarantee per representation"
        else:
            why = "not covered: no accountant event stored"
        return math.nan, math.nan, len(scope), why
    _, relation = event_from_json(event)
    deltas = scope["delta"].dropna() if "delta" in scope.columns else pd.Series(dtype=float)
    # pure-DP rows (delta 0) are composed in RDP and stated at PF-LD's delta
    delta = float(deltas.max()) if len(deltas) and deltas.max() > 0 else PFLD_DELTA
    tuning = scope[TUNING].dropna() if TUNING in scope.columns else pd.Series(dtype=object)
    if len(tuning):
        record = json.loads(tuning.iloc[0])
        count = trial_count_from_dict(record)
        if rt == 0:
            grid = [event_from_json(e)[0] for e in record["grid_events"]]
            eps = repeat_and_select_epsilon(grid, relation, delta, count.mean, count.shape)
            return eps, delta, len(scope), (f"repeat-and-select: best of K ~ {count.describe()} draws "
                                            f"from {record['grid_size']} configs")
        eps, how = _composed(scope, relation, delta, memo)
        return eps, delta, len(scope), (f"composition of the {len(events)} trials drawn (K ~ {count.describe()}; "
                                        f"RT {rt:g} is no best-of by a fixed order)" + how)
    eps, how = _composed(scope, relation, delta, memo)
    return eps, delta, len(scope), (f"composition of the {len(events)} configs trained" + how if len(events) > 1
                                     else "one config trained: its own guarantee")


def _accountant(rows: pd.DataFrame) -> str:
    """The accountant that composes ``rows`` (those with an event): "pld" when every one of
    them says pld, else "rdp" (see the module docstring)."""
    if ACCOUNTANT not in rows.columns or not len(rows):
        return "rdp"
    return "pld" if (rows[ACCOUNTANT] == "pld").all() else "rdp"


def _composed(scope: pd.DataFrame, relation: str, delta: float, memo: dict | None = None) -> tuple[float, str]:
    """The smaller of two composition bounds at ``delta`` over the scope's events: RDP's or,
    where every row says pld, PLD's (each distinct event once, with its multiplicity), and
    basic composition, the sum of the rows' (eps, delta), when their deltas sum to at most
    ``delta`` (pure-DP rows, where RDP's conversion can cost more than the sum at a few
    configs); with what to add to the bound's label ("" for RDP's). ``memo``: answers by what
    decides them (the events with their counts, relation, delta, accountant, the basic sum), so
    that scopes composing the same events are composed once."""
    rows = scope[scope[PRIVACY_EVENT].notna()]
    counts = Counter(rows[PRIVACY_EVENT])
    basic = float(rows["eps_formal"].sum()) if rows["delta"].sum() <= delta else None
    key = (tuple(sorted(counts.items())), relation, delta, _accountant(rows), basic)
    if memo is not None and key in memo:
        return memo[key]
    answer = _compose(counts, relation, delta, key[3], basic)
    if memo is not None:
        memo[key] = answer
    return answer


def _compose(counts: Counter, relation: str, delta: float, accountant: str, basic: float | None) -> tuple[float, str]:
    """``_composed``'s answer from what decides it."""
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


PER_SEED = "ε released, one seed (largest)"
"""release_summary's column: each seed's pick released alone, the largest over seeds."""
MEAN_OVER_SEEDS = "ε released, mean over seeds"
"""release_summary's column: the mean over seeds released, every seed's pick composed."""
NOT_COVERED = ("no ε here covers the validation rows, whose protected attributes and labels the selection reads "
               "without noise, nor the valid and test splits' per-group confusion counts (valid_confusion, "
               "test_confusion), which every row publishes without noise and from which every metric, per-group "
               "rate and interval of this report is computed")
"""What no ε of a release covers, said beside it."""


def release_summary(released: pd.DataFrame, rows: pd.DataFrame, rt: float, by: Sequence[str] = ()) -> pd.DataFrame:
    """Per (dataset, method, *by) of ``released_guarantees``' output (``rows``: every row the
    selection chose from; ``rt``: its threshold): the guarantee kind, seeds, the selected
    configs' largest eps_formal, the largest eps_released over seeds (``PER_SEED``: one
    seed's pick released alone) and the eps of releasing the mean over those seeds
    (``MEAN_OVER_SEEDS``: every seed's pick, each selected on the same data, composed; see
    the module docstring), their delta, configs trained per run (min-max), the bound of the
    seed with the largest eps_released and the bound of the mean."""
    rt = check_rt(rt)
    rows = as_frame(rows, "rows")
    by = check_by(by)
    keys = ["dataset", "method", *by]
    kinds = guarantees_by_method(rows) if len(rows) else {}
    scopes = _scopes(rows, by) if len(released) else {}
    memo: dict = {}  # compositions by what decides them (``_composed``)
    out = []
    for key, grp in released.groupby(keys, sort=True, dropna=False):
        worst = grp.loc[grp["eps_released"].fillna(math.inf).idxmax()]
        lo, hi = int(grp["trained"].min()), int(grp["trained"].max())
        mean_eps, mean_bound = _over_seeds(scopes, grp, rt, memo)
        ident = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        out.append({**ident, "guarantee": guarantee_text(kinds.get(str(ident["method"]))),
                    "seeds": len(grp), "ε of one config": float(grp["eps_formal"].max()),
                    PER_SEED: float(grp["eps_released"].max()), MEAN_OVER_SEEDS: mean_eps,
                    "δ": worst["delta_released"], "trained per run": f"{lo}" if lo == hi else f"{lo}-{hi}",
                    "bound, one seed": worst["released_under"], "bound, mean over seeds": mean_bound})
    return pd.DataFrame(out)


def _over_seeds(scopes: dict, grp: pd.DataFrame, rt: float, memo: dict | None = None) -> tuple[float, str]:
    """(eps, bound) of releasing the mean over ``grp``'s seeds (one selected row per seed, with
    ``released_guarantees``' columns), at the seeds' largest ``delta_released`` (``scopes``:
    ``_scopes`` of every row the selection chose from)."""
    uncovered = grp[grp["eps_released"].isna()]
    if len(uncovered):
        return math.nan, str(uncovered["released_under"].iloc[0])
    seed_rows = [_scope(scopes, sel) for sel in grp.to_dict("records")]  # each seed's rows chosen from
    delta = float(grp["delta_released"].max())
    events = pd.concat([sc[PRIVACY_EVENT].dropna() for sc in seed_rows])
    _, relation = event_from_json(events.iloc[0])
    seeds = len(grp)
    if seeds == 1:
        return float(grp["eps_released"].iloc[0]), "one seed: its own release"
    records = [sc[TUNING].dropna() if TUNING in sc.columns else pd.Series(dtype=object) for sc in seed_rows]
    if rt == 0 and all(len(r) for r in records):
        rdp = 0.0
        for r in records:  # each seed's repeat-and-select, composed: RDP curves add
            record = json.loads(r.iloc[0])
            count = trial_count_from_dict(record)
            grid = [event_from_json(e)[0] for e in record["grid_events"]]
            rdp = rdp + repeat_and_select_rdp(grid, relation, count.mean, count.shape)
        return epsilon_of_rdp(rdp, delta), f"composition of the {seeds} seeds' repeat-and-select releases"
    eps, how = _composed(pd.concat(seed_rows), relation, delta, memo)
    what = "trials drawn" if any(len(r) for r in records) else "configs trained"
    return eps, f"composition of the {len(events)} {what} in the {seeds} seeds (the same data)" + how


WHOLE_TABLE_COLUMNS = ("dataset", "guarantee", "methods", "seeds", "configs per seed", "ε, one seed (largest)",
                       "ε, all seeds", "δ", "bound")
"""``whole_table_release``'s columns."""


def whole_table_release(rows: object) -> pd.DataFrame:
    """What releasing every config of ``rows`` costs, the whole table of a study at once (every
    pick of every ``by`` value, every point of every figure): per dataset and guarantee kind
    (``guarantees_by_method``; kinds are composed apart, each in its own relation), the
    composition of every config trained, by ``_composed`` as ``eps_released`` composes a run
    (RDP, PLD where every row says so, the sum of pure-DP rows' eps where smaller), at the rows'
    largest delta (PF-LD's for pure-DP rows): ``ε, one seed (largest)`` over each seed's configs
    (the largest over seeds) and ``ε, all seeds`` over every seed's, the same data. A kind
    without stored events (a local guarantee per representation, no privacy) is listed as not
    covered. Columns: ``WHOLE_TABLE_COLUMNS``."""
    rows = as_frame(rows, "rows")
    require_columns(rows, [*RUN_KEYS, "config_id"], "rows")
    ok = rows[rows["status"].astype("object") == "ok"] if "status" in rows.columns else rows
    kinds = guarantees_by_method(rows) if len(rows) else {}
    out = []
    for dataset, in_ds in ok.groupby("dataset", sort=True):
        by_kind: dict = {}
        for method in sorted(in_ds["method"].astype(str).unique()):
            if kinds.get(method) is not None:
                by_kind.setdefault(kinds[method], []).append(method)
        for kind, methods in sorted(by_kind.items()):
            mine = in_ds[in_ds["method"].astype(str).isin(methods)]
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
            memo: dict = {}  # seeds of one grid compose the same events: each distinct scope once
            one = max(_composed(grp, relation, delta, memo)[0] for _, grp in mine.groupby("seed"))
            every, how = _composed(mine, relation, delta)
            out.append({**record, "ε, one seed (largest)": one, "ε, all seeds": every, "δ": delta,
                        "bound": f"composition of every config trained ({relation})" + how})
    return pd.DataFrame(out, columns=list(WHOLE_TABLE_COLUMNS))
