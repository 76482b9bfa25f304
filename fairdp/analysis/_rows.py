"""What every analysis function checks of its input, and the row filters they share.

A DataFrame of result rows (``fairdp.schema``): only rows with status "ok" count; metric
columns are cast to float; a bad argument is an ``InputError`` naming it.
"""

from __future__ import annotations

import json
import math
import numbers
import textwrap
import warnings
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from fairdp.errors import InputError
from fairdp.privacy import comparison_groups, convert_guarantee
from fairdp.privacy._shared import (
    ADD_REMOVE_RECORD,
    KIND_CAVEATS,
    LOCAL_ATTRIBUTE,
    LOCAL_REPRESENTATION,
    REPLACE_ATTRIBUTE,
)
from fairdp.schema import (
    FAIRNESS_METRICS,
    FIXED_COLUMNS,
    GUARANTEE,
    LEGACY_MIN_GROUP_COUNT,
    MIN_GROUP_COUNT_KEY,
    NOTION_GAP,
    RUN_KEYS,
    SELECTION_FAIRNESS,
    STATUS_OK,
)

# whether a frame must be copied deeply to be changed apart from the one it came from: not under
# copy-on-write (always on from pandas 3)
_DEEP_COPIES = int(pd.__version__.split(".")[0]) < 3 and not pd.get_option("mode.copy_on_write")

__all__ = ["FAIRNESS_METRICS", "RUN_KEYS", "as_frame", "check_by", "check_fairness", "check_rt", "describe_rows", "drop_nan",
           "hyperparameter_columns", "numeric_columns", "ok_rows", "require_columns"]


def as_frame(df: object, name: str = "df") -> pd.DataFrame:
    if not isinstance(df, pd.DataFrame):
        raise InputError(f"{name}: expected a pandas DataFrame of result rows, got {type(df).__name__}")
    return df


def require_columns(df: pd.DataFrame, columns: Iterable[str], name: str = "df") -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise InputError(f"{name}: missing column {', '.join(repr(c) for c in missing)}")


def ok_rows(df: object, name: str = "df") -> pd.DataFrame:
    """The rows that count: status == "ok" (every row when there is no status column)."""
    df = as_frame(df, name)
    if "status" in df.columns:
        ok = (df["status"] == STATUS_OK).fillna(False).to_numpy(bool)
        if not ok.all():  # a filter copies every column, even when it keeps every row
            df = df[ok]
    # a frame the caller may change without changing ``df``: under copy-on-write (pandas 3) a
    # shallow copy is one, and a deep copy of a million rows costs a second each time
    return df.copy(deep=_DEEP_COPIES)


def check_fairness(fairness: object) -> str:
    if fairness not in SELECTION_FAIRNESS:
        raise InputError(
            f"fairness: unknown metric {fairness!r} (expected one of {', '.join(SELECTION_FAIRNESS)})"
        )
    return str(fairness)


def check_by(by: object, df: pd.DataFrame | None = None) -> list[str]:
    """Report-by keys: distinct column names other than dataset, method, seed (and, given
    ``df``, columns it has)."""
    if isinstance(by, str):
        by = [by]
    if not isinstance(by, (list, tuple)) or not all(isinstance(k, str) and k for k in by):
        raise InputError(f"by: expected a list of column names, got {by!r}")
    by = list(by)
    if len(set(by)) != len(by):
        raise InputError(f"by: a key repeated in {by}")
    for key in by:
        if key in RUN_KEYS or key == "config_id":
            raise InputError(f"by: {key!r} is always grouped on; by takes other columns, e.g. fairness_notion, eps")
        if df is not None and key not in df.columns:
            raise InputError(f"by: no column {key!r} in the result rows")
    return by


def check_rt(rt: object, name: str = "rt") -> float:
    if isinstance(rt, bool) or not isinstance(rt, numbers.Real) or math.isnan(float(rt)):
        raise InputError(f"{name}: expected a number >= 0, got {rt!r}")
    if rt < 0:
        raise InputError(f"{name}: must be >= 0 (accuracy points), got {rt!r}")
    return float(rt)


def numeric_columns(df: pd.DataFrame, columns: Iterable[str], name: str = "df") -> pd.DataFrame:
    """Cast metric columns to float (None -> NaN); a non-numeric column is an InputError."""
    for col in columns:
        try:
            df[col] = pd.to_numeric(df[col], errors="raise").astype(float)
        except (TypeError, ValueError):
            raise InputError(f"{name}: column {col!r} is not numeric") from None
    return df


def describe_rows(rows: pd.DataFrame, limit: int = 10) -> str:
    parts = []
    for _, r in rows.head(limit).iterrows():
        ident = [f"{k}={r[k]}" for k in ("dataset", "method", "seed", "config_id") if k in rows.columns]
        parts.append("(" + " ".join(ident) + ")")
    more = len(rows) - limit
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def config_keys(rows: pd.DataFrame, method: pd.Series | None = None) -> list[tuple]:
    """The (dataset, method, seed, config_id) of each row, the key a config is matched by across
    tables (``method``: another label per row, e.g. a method's name without its variant)."""
    method = rows["method"] if method is None else method
    return list(zip(_each_as(rows["dataset"], str), _each_as(method, str), _each_as(rows["seed"], int),
                    rows["config_id"].to_numpy(object)))


def _each_as(values: pd.Series, cast) -> np.ndarray:
    """``cast`` of each value, computed once per distinct value (a million rows hold a few)."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return np.asarray([cast(v) for v in uniques], dtype=object)[codes]


def factorize_objects(values, sort: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize`` of an object array (None, NaN: -1) that hashes each distinct string
    object once. Where every value is a string, pandas hashes each one's characters anew (a
    privacy event of 400 characters a row: 0.27 s a million rows); one value of another kind
    among them (the None appended here, then dropped) makes it use Python's own hash, which a
    string caches, and the columns fairdp reads hold one object per distinct string."""
    codes, uniques = pd.factorize(np.append(np.asarray(values, dtype=object), None), sort=sort, use_na_sentinel=True)
    return codes[:-1], np.asarray(uniques, dtype=object)


def min_group_counts(rows: pd.DataFrame) -> np.ndarray:
    """Each row's ``evaluate.min_group_count`` (int64), the fewest rows its gaps estimated a
    group's rate from, read from its ``protocol``; a row without one (no protocol column, or
    a protocol from before the setting existed) was scored at ``LEGACY_MIN_GROUP_COUNT``."""
    out = np.full(len(rows), LEGACY_MIN_GROUP_COUNT, dtype=np.int64)
    if "protocol" not in rows.columns:
        return out
    section, key = MIN_GROUP_COUNT_KEY
    codes, texts = factorize_objects(rows["protocol"].to_numpy(object))
    for code, text in enumerate(texts):  # a study's rows share a few protocols: each parsed once
        if not isinstance(text, str) or not text:
            continue
        try:
            value = json.loads(text).get(section, {}).get(key)
        except (ValueError, AttributeError):
            continue  # not a protocol this version wrote: its rows were scored as before
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            out[codes == code] = value
    return out


def default_direction(column: str) -> str:
    """"max" for accuracies and MDL (higher is better), "min" for gaps, leakage and the rest."""
    return "max" if column.endswith("accuracy") or column.endswith("mdl") else "min"


def note(message: str, notes: list[str] | None, stacklevel: int = 3) -> None:
    """Say ``message``, a note about a result (rows left out, an interval over few seeds):
    appended to ``notes`` (once) when the caller collects them, as the report does, else a
    UserWarning of the call ``stacklevel`` frames up."""
    if notes is None:
        warnings.warn(message, UserWarning, stacklevel=stacklevel + 1)
    elif message not in notes:
        notes.append(message)


def drop_nan(df: pd.DataFrame, columns: Sequence[str], caller: str | Sequence[str],
             notes: list[str] | None = None) -> pd.DataFrame:
    """Drop rows with NaN in ``columns``, noting (``note``) the identity of each dropped row, once
    for each of ``caller`` when it names several (one computation standing for several calls)."""
    bad = df[list(columns)].isna().any(axis=1)
    if bad.any():
        said = describe_rows(df[bad])
        for who in [caller] if isinstance(caller, str) else caller:
            note(f"{who}: excluding {int(bad.sum())} row(s) with NaN {' or '.join(columns)}: {said}", notes)
        df = df[~bad]
    return df


# columns analysis functions add to result rows (select_by_rt's threshold, per_notion's gap)
RELEASED_GUARANTEE_COLUMNS = ("eps_released", "delta_released", "trained", "released_under")
"""What ``released_guarantees`` adds to selected rows."""
_DERIVED_COLUMNS = ("rt", *(f"{split}_{NOTION_GAP}" for split in ("valid", "test")), *RELEASED_GUARANTEE_COLUMNS)


SWEPT_SETTINGS = ("lr", "batch_size")
"""Training settings a grid may sweep per config; result columns, shown as hyperparameters
where they vary within a method."""


def hyperparameter_columns(df: pd.DataFrame) -> list[str]:
    """The hyperparameter columns of result rows, in order: every column that is neither a
    fixed result column (``fairdp.schema``) nor added by an analysis, and that is set for
    some row, then the training settings (``lr``, ``batch_size``) that take more than one
    value within some method. A plugin method's hyperparameters are found without knowing
    the plugin."""
    own = [c for c in df.columns
           if c not in FIXED_COLUMNS and c not in _DERIVED_COLUMNS and df[c].notna().any()]
    swept = [c for c in SWEPT_SETTINGS
             if c in df.columns and "method" in df.columns and len(df) and df.groupby("method")[c].nunique().max() > 1]
    return own + swept


def eps_scope(method: str) -> str | None:
    """"local", "central" or None: what ``method``'s eps protects (its registry entry's
    ``privacy_scope``; a label like "pfld [dp]" is looked up by its method name)."""
    from fairdp.methods import (
        get_method,  # the registry loads torch: only when a label needs a scope
    )

    try:
        return get_method(str(method).split(" [", 1)[0]).privacy_scope
    except (InputError, KeyError, ValueError):
        return None  # a plugin this process has not loaded


# -- the kind of each method's guarantee ---------------------------------------------------------

NOT_PRIVATE = "not private"
"""How a table or legend shows a method without privacy (its ``guarantee`` is null)."""
UNKNOWN_GUARANTEE = "unknown (method not loaded)"
"""The kind of a plugin method this process has not loaded, for rows that do not store it."""
DIFFERENT_GUARANTEES = "different guarantees: not comparable on ε"


BUILTIN_GUARANTEES = {
    "adversarial": None, "cape": LOCAL_REPRESENTATION, "dpnr": LOCAL_REPRESENTATION, "dpsgd": ADD_REMOVE_RECORD,
    "federate": LOCAL_REPRESENTATION, "fld": None, "inlp": None, "multi_adversarial": None,
    "noise": LOCAL_REPRESENTATION, "pfld": REPLACE_ATTRIBUTE, "private_reductions": LOCAL_ATTRIBUTE,
    "random": None, "reductions": None, "unconstrained": None,
    "dpsgd_global_adapt": ADD_REMOVE_RECORD, "dpsgd_f": ADD_REMOVE_RECORD,
    "dp_fermi": ADD_REMOVE_RECORD,
}
"""The kind of each of fairdp's own methods' guarantee (None: not private), so that labelling a
table or figure needs no method registry (torch); a test holds it equal to the registry's."""


def method_guarantee(method: str) -> str | None:
    """The kind of ``method``'s guarantee (``Method.guarantee_kind``; a label like "pfld [dp]"
    is looked up by its method name): fairdp's own methods' from ``BUILTIN_GUARANTEES``, a
    plugin's from the registry; None for a method without privacy, ``UNKNOWN_GUARANTEE`` for a
    plugin this process has not loaded."""
    name = str(method).split(" [", 1)[0]
    if name in BUILTIN_GUARANTEES:
        return BUILTIN_GUARANTEES[name]
    from fairdp.methods import get_method  # the registry loads torch: only for a plugin's label

    try:
        return get_method(name).guarantee_kind
    except (InputError, KeyError, ValueError):
        return UNKNOWN_GUARANTEE


def row_guarantees(df: pd.DataFrame) -> pd.Series:
    """Each row's guarantee kind: its ``guarantee`` column where set; else (rows written before
    the column existed) None for a row without privacy (``eps_formal`` inf) and its method's
    kind (``method_guarantee``) otherwise."""
    require_columns(df, ["method"])
    methods = df["method"].astype(str)
    private = (~np.isinf(pd.to_numeric(df["eps_formal"], errors="coerce").to_numpy(float))
               if "eps_formal" in df.columns else np.ones(len(df), dtype=bool))
    stored = df[GUARANTEE] if GUARANTEE in df.columns else pd.Series([None] * len(df), index=df.index)
    # the registry only for the methods of private rows that store no kind (it loads torch)
    # each distinct (stored kind, method, private) decided once: a million rows hold a few
    stored_code, stored_values = pd.factorize(stored, use_na_sentinel=True)
    method_code, method_values = pd.factorize(methods)
    key = ((stored_code + 1) * max(len(method_values), 1) + method_code) * 2 + private.astype(np.int64)
    distinct, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    answers = []
    for row in first:
        s = stored_values[stored_code[row]] if stored_code[row] >= 0 else None
        answers.append(kind_of(s) if isinstance(s, str) else
                       method_guarantee(method_values[method_code[row]]) if private[row] else None)
    return pd.Series(np.asarray(answers, dtype=object)[inverse.reshape(-1)] if len(df) else [],
                     index=df.index, dtype=object)


def guarantees_by_method(df: pd.DataFrame) -> dict[str, str | None]:
    """Each method label of ``df`` and the kind of its guarantee (``row_guarantees``; several
    kinds of one method, joined by "; "; None where no row is private). Rows of any status
    count: a failed row stores its method's kind too."""
    kinds = row_guarantees(df)
    # each distinct (method, kind) pair once: a million rows hold a few
    method_code, methods = pd.factorize(df["method"], use_na_sentinel=False)
    kind_code, kind_values = pd.factorize(kinds.to_numpy(object), use_na_sentinel=True)  # None, NaN: -1
    width = len(kind_values) + 1
    found: dict[str, set[str]] = {}
    for pair in np.unique(method_code.astype(np.int64) * width + kind_code + 1):
        m, k = divmod(int(pair), width)
        kinds_of_method = found.setdefault(str(methods[m]), set())
        if k:
            kinds_of_method.add(str(kind_values[k - 1]))
    return {method: "; ".join(sorted(found[method])) or None for method in sorted(found)}


def kind_of(value) -> str | None:
    """A ``guarantee`` cell's kind: None for a method without privacy, whichever way a table
    says so (None or NaN in rows, ``NOT_PRIVATE`` in ``aggregate_seeds`` and ``selected_configs``)."""
    return value if isinstance(value, str) and value != NOT_PRIVATE else None


def shown_kinds(kinds) -> list[str]:
    """Kinds as a table's ``guarantee`` column holds them: ``NOT_PRIVATE`` for none."""
    return [NOT_PRIVATE if kind_of(k) is None else k for k in kinds]


def guarantee_text(kind: str | None) -> str:
    """A kind as a table cell or legend shows it: the label, or "not private"."""
    return NOT_PRIVATE if kind is None or (isinstance(kind, float) and math.isnan(kind)) else str(kind)


def kinds_of(methods, kinds: dict | None = None) -> dict[str, str | None]:
    """Each method label's kind: from ``kinds`` (e.g. ``guarantees_by_method`` of the rows)
    where it names the label, else from the registry."""
    def one(label: str) -> str | None:
        if kinds is not None:
            for name in (label, label.split(" [", 1)[0]):  # "pfld [dp]": a view's label of pfld
                if name in kinds:
                    return kinds[name]
        return method_guarantee(label)

    return {str(m): one(str(m)) for m in methods}


def different_guarantees(a: str | None, b: str | None) -> bool:
    """Whether two methods' eps are of different kinds, so not comparable: both private, both
    known, and not the same kind."""
    known = (None, UNKNOWN_GUARANTEE)
    return a not in known and b not in known and a != b


def kind_labels(methods, kinds: dict | None = None) -> dict[str, str]:
    """Each method's legend label: its name and the kind of its guarantee, e.g. "dpsgd
    (central, add/remove one record)", "unconstrained (not private)"."""
    return {m: f"{m} ({guarantee_text(k)})" for m, k in kinds_of(methods, kinds).items()}


# -- one relation before any comparison ------------------------------------------------------------

COMPARED_IN = "compared_in"
"""Column ``with_compared_eps`` adds: the relation a row's ε is compared in (None: not private)."""
EPS_COMPARED, DELTA_COMPARED = "eps_compared", "delta_compared"
"""Columns ``with_compared_eps`` adds: the row's ε and δ converted to that relation."""
APART = "apart"
"""Column ``with_compared_eps`` adds: the key of the rows compared together (``comparison_key``)."""


def compared_relations(kinds: dict[str, str | None]) -> dict[str, str | None]:
    """Each method's relation, the one its ε is compared in (``fairdp.privacy.comparison_groups``
    over the private methods' kinds): methods of kinds with a sound conversion to one relation
    share it, the others have their own. None for a method without privacy, and for a plugin
    this process has not loaded whose rows store no kind (``UNKNOWN_GUARANTEE``): nothing is
    known to set it apart, as ``different_guarantees`` has it (rows written since the
    ``guarantee`` column existed always store their kind)."""
    known = [k for k in kinds.values() if k is not None and k != UNKNOWN_GUARANTEE]
    relation_of = {k: relation for relation, members in comparison_groups(known) for k in members}
    return {m: None if k is None or k == UNKNOWN_GUARANTEE else relation_of[k] for m, k in kinds.items()}


def _table_kinds(table: pd.DataFrame, kinds: dict | None) -> dict[str, str | None]:
    """Each method label of ``table`` and its kind: the table's ``guarantee`` column where it
    has one (the first private value of the label's rows), else ``kinds`` or the registry."""
    methods = [str(m) for m in table["method"].unique()]
    if GUARANTEE not in table.columns:
        return kinds_of(methods, kinds)
    found: dict[str, str | None] = {m: None for m in methods}
    for m, k in zip(table["method"].astype(str), table[GUARANTEE]):
        if found[m] is None and kind_of(k) is not None:
            found[m] = k
    return found


def with_compared_eps(table: pd.DataFrame, kinds: dict | None = None,
                      deltas: dict[str, float] | None = None) -> pd.DataFrame:
    """``table`` with ``COMPARED_IN``, ``EPS_COMPARED``, ``DELTA_COMPARED`` and ``APART``: each
    row's relation (``compared_relations`` over the table's methods; kinds from its
    ``guarantee`` column, else ``kinds`` or the registry), its ``eps`` and δ (its ``delta``
    column, else ``deltas`` by method, else NaN) converted to that relation
    (``fairdp.privacy.convert_guarantee``), and the key of the rows ranked together
    (``comparison_key``). A row without eps has NaN ones."""
    require_columns(table, ["method"])
    kinds = _table_kinds(table, kinds)
    relations = compared_relations(kinds)
    methods = table["method"].astype(str)
    eps = (pd.to_numeric(table["eps"], errors="coerce").to_numpy(float) if "eps" in table.columns
           else np.full(len(table), np.nan))
    if "delta" in table.columns:
        delta = pd.to_numeric(table["delta"], errors="coerce").to_numpy(float)
    else:
        delta = np.array([(deltas or {}).get(m, np.nan) for m in methods], dtype=float)
    out_eps, out_delta = np.full(len(table), np.nan), np.full(len(table), np.nan)
    for i, (m, e, d) in enumerate(zip(methods, eps, delta)):
        kind, relation = kinds[m], relations[m]
        if relation is None or not np.isfinite(e):
            continue
        got = convert_guarantee(kind, e, d if np.isfinite(d) else 0.0, relation)
        if got is not None:  # a kind converts to its own relation by construction; a plugin's is its own
            out_eps[i], out_delta[i] = got.eps, (got.delta if np.isfinite(d) else np.nan)
        else:
            out_eps[i], out_delta[i] = e, d
    out = table.assign(**{COMPARED_IN: [relations[m] for m in methods], EPS_COMPARED: out_eps,
                          DELTA_COMPARED: out_delta})
    return out.assign(**{APART: comparison_key(out)})


def comparison_key(table: pd.DataFrame) -> pd.Series:
    """Per row of a ``with_compared_eps`` table, which rows it may be ranked with: its
    relation; for a method without privacy (no ε to compare), the one relation of its
    dataset's private rows where they share one, else ``NOT_PRIVATE`` (compared only with
    other methods without privacy)."""
    relations = table[COMPARED_IN]
    datasets = table["dataset"].astype(str) if "dataset" in table.columns else pd.Series([""] * len(table),
                                                                                       index=table.index)
    shared = {}
    for ds, rel in relations.groupby(datasets, sort=False):
        found = {r for r in rel if isinstance(r, str)}
        shared[ds] = found.pop() if len(found) == 1 else NOT_PRIVATE
    return pd.Series([r if isinstance(r, str) else shared[d] for r, d in zip(relations, datasets)],
                     index=table.index, dtype=object)


def converted_methods(table: pd.DataFrame) -> dict[str, str]:
    """Per method of a ``with_compared_eps`` table whose ε is compared after a conversion (its
    kind is not its relation): how its ε maps, "2ε" (group privacy) or "ε" (kept)."""
    kinds = _table_kinds(table, None)
    out = {}
    for m, relation in zip(table["method"].astype(str), table[COMPARED_IN]):
        kind = kinds.get(m)
        if isinstance(relation, str) and kind is not None and kind != relation and m not in out:
            out[m] = "2ε" if kind == ADD_REMOVE_RECORD else "ε"
    return out


def eps_labels(methods, kinds: dict | None = None) -> tuple[dict[str | None, str], dict[str, str]]:
    """The label of each ε axis, by the relation its panels compare in (``compared_relations``;
    None: no private method), and each method's legend label (``kind_labels``). An axis names
    its relation and, where some method's ε was converted to it, which and how ("converted:
    dpsgd 2ε"): ε of kinds without a common relation are never drawn on one axis."""
    kinds = kinds_of([str(m) for m in methods], kinds)
    relations = compared_relations(kinds)
    frame = pd.DataFrame({"method": list(kinds), GUARANTEE: list(kinds.values())})
    frame[COMPARED_IN] = [relations[m] for m in frame["method"]]
    converted = converted_methods(frame)
    axes: dict[str | None, str] = {None: "ε"}
    for relation in sorted({r for r in relations.values() if r is not None}):
        moved = [f"{m} {how}" for m, how in converted.items() if relations[m] == relation]
        # wrapped: five converted methods on one line overlapped the next panel's label
        axes[relation] = f"ε ({relation})" + ("\n" + "\n".join(textwrap.wrap(f"converted: {', '.join(moved)}", 36))
                                              if moved else "")
    return axes, kind_labels(kinds, kinds)


def relations_text(kinds: dict[str, str | None]) -> list[str]:
    """Per relation the methods of ``kinds`` are compared in (``compared_relations``): "relation:
    methods", with how each converted method's guarantee maps into it."""
    relations = compared_relations(kinds)
    parts = []
    for relation in sorted({r for r in relations.values() if r is not None}):
        members = sorted(m for m, r in relations.items() if r == relation)
        moved = [f"{m}, {kinds[m]} (ε, δ) → (2ε, (1 + e^ε) δ)" if kinds[m] == ADD_REMOVE_RECORD
                 else f"{m}, {kinds[m]} ε → the same ε" for m in members if kinds[m] != relation]
        parts.append(f"{relation}: {', '.join(members)}" + (f" (converted: {'; '.join(moved)})" if moved else ""))
    return parts


def caveats_text(kinds: dict[str, str | None]) -> str:
    """What each kind among ``kinds`` assumes (``fairdp.privacy._guarantee.KIND_CAVEATS``), as
    one sentence; "" when none is known."""
    found = sorted({k for k in kinds.values() if k in KIND_CAVEATS})
    return " ".join(f"{k[0].upper()}{k[1:]}: {KIND_CAVEATS[k]}." for k in found)


def method_deltas(df: pd.DataFrame) -> dict[str, float]:
    """Each method's δ: the largest ``delta`` of its ok rows (NaN where none is stored)."""
    rows = ok_rows(df)
    if "delta" not in rows.columns or not len(rows):
        return {}
    return {str(m): float(v) for m, v in pd.to_numeric(rows["delta"], errors="coerce").groupby(
        rows["method"].astype(str)).max().items()}
