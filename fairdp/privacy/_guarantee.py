"""The (eps, delta) guarantee a method reports for each config it trains, and its kind: what
one neighbouring change alters, so that eps of different kinds are never read as one.

A kind is a compact, stable label (the ``guarantee`` result column) made of the scope and the
neighbouring relation with the unit it changes:

* ``"central, add/remove one record"``: (eps, delta)-DP of the training data, one whole record
  added or removed (DP-SGD); of the training split as fixed, with its size n public: rows
  publish q = B / n exactly, and adding or removing a record of the dataset as loaded would
  change n_train and move rows across the split, which the guarantee does not cover;
* ``"central, replace one record's attribute"``: one record's sensitive attribute changed,
  Tran et al.'s Definition 1 (PF-LD);
* ``"local, replace one record's representation"``: eps-LDP of the representation each record
  releases, any two inputs (FEDERATE, DPNR, CAPE, the noise baseline);
* ``"local, replace one record's attribute"``: eps-LDP of the attribute each record releases
  (randomized response: private reductions).

An eps of one kind is not an eps of another. Before two kinds are compared, both are converted
to one relation where that is sound (``convert_guarantee``: add/remove one record (eps, delta)
is replace one record (2 eps, (1 + e^eps) delta) by group privacy, which covers replacing its
attribute; a local release of each record's attribute, read by nothing else, is the central
attribute-level eps by post-processing); kinds with no common relation are compared apart
(``comparison_groups``). docs/methods.md gives the reasoning.
"""

from __future__ import annotations

import math
from typing import NamedTuple


class Guarantee(NamedTuple):
    """(eps, delta)-differential privacy; ``NOT_PRIVATE`` = (inf, 0) for methods without any."""

    eps: float
    delta: float


NOT_PRIVATE = Guarantee(math.inf, 0.0)

SCOPES = ("local", "central")
"""local: eps-LDP of what each record releases; central: (eps, delta)-DP of the training data."""
UNITS = ("record", "attribute", "representation")
"""What one neighbouring change alters: a whole record, its sensitive attribute, or the
representation it releases."""
# the words of a central guarantee's neighbouring relation (fairdp.privacy._release.RELATION_NAMES)
_RELATION_WORDS = {"add_or_remove_one": "add/remove one", "replace_one": "replace one",
                   "replace_attribute": "replace one"}


def guarantee_kind(scope: str | None, relation: str, unit: str | None = None) -> str | None:
    """The kind label of a guarantee: ``scope`` ("local", "central"; None: not private, the
    label is None), the neighbouring ``relation`` of a central guarantee (a local one is
    always "replace one": any two inputs of one record), and the ``unit`` changed (default:
    "attribute" under ``replace_attribute``, else "representation" for a local guarantee and
    "record" for a central one). ValueError for an unknown value or a unit the relation
    contradicts."""
    if scope is None:
        return None
    if scope not in SCOPES:
        raise ValueError(f"privacy scope must be one of {SCOPES} or None, got {scope!r}")
    if relation not in _RELATION_WORDS:
        raise ValueError(f"unknown neighbouring relation {relation!r}; one of {sorted(_RELATION_WORDS)}")
    if unit is None:
        unit = "attribute" if relation == "replace_attribute" else "representation" if scope == "local" else "record"
    if unit not in UNITS:
        raise ValueError(f"privacy unit must be one of {UNITS}, got {unit!r}")
    if relation == "replace_attribute" and unit != "attribute":
        raise ValueError(f"the relation replace_attribute changes an attribute, not a {unit}")
    words = "replace one" if scope == "local" else _RELATION_WORDS[relation]
    return f"{scope}, {words} " + ("record" if unit == "record" else f"record's {unit}")


# -- one neighbouring relation before any comparison ----------------------------------------------

ADD_REMOVE_RECORD = guarantee_kind("central", "add_or_remove_one")
"""DP-SGD's kind: one whole record added or removed (the training split as fixed, n public)."""
REPLACE_RECORD = guarantee_kind("central", "replace_one")
"""One whole record replaced by any other (n unchanged)."""
REPLACE_ATTRIBUTE = guarantee_kind("central", "replace_attribute")
"""PF-LD's kind: one record's sensitive attribute replaced, its features and label kept."""
LOCAL_ATTRIBUTE = guarantee_kind("local", "replace_one", "attribute")
"""Private reductions' kind: eps-LDP of the attribute each record releases."""
LOCAL_REPRESENTATION = guarantee_kind("local", "replace_one")
"""FEDERATE's, DPNR's, CAPE's and the noise baseline's kind: eps-LDP of each released representation."""

# Sound one-step conversions: kind -> (the kind it implies, how (eps, delta) change, why). Nothing
# converts out of a local representation guarantee: it bounds what each record's representation
# reveals under a fixed encoder, and says nothing of the training that fitted the encoder (which
# reads labels, and FEDERATE's adversary the true attribute, in the clear). Nothing converts to
# add/remove or out of an attribute-level guarantee: neither implies the stronger relation.
_STEPS = {
    ADD_REMOVE_RECORD: ((REPLACE_RECORD, "group",
                         "group privacy over two steps: a replacement is a removal then an addition, so (eps, "
                         "delta) add/remove gives (2 eps, (1 + e^eps) delta)"),),
    REPLACE_RECORD: ((REPLACE_ATTRIBUTE, "same",
                      "replacing one record's attribute is one replacement of that record: (eps, delta) kept"),),
    LOCAL_ATTRIBUTE: ((REPLACE_ATTRIBUTE, "same",
                       "post-processing: training reads each record's attribute only through its eps-LDP release, "
                       "so the trained model is eps-DP when one true attribute is replaced: (eps, delta) kept"),),
}
_ORDER = (ADD_REMOVE_RECORD, REPLACE_RECORD, REPLACE_ATTRIBUTE, LOCAL_ATTRIBUTE, LOCAL_REPRESENTATION)


def _group_of_two(eps: float, delta: float) -> Guarantee:
    """(2 eps, (1 + e^eps) delta): group privacy for two neighbouring steps."""
    if delta == 0:
        return Guarantee(2 * eps, 0.0)
    grown = delta * (1 + math.exp(eps)) if eps < 700 else math.inf  # e^eps overflows a float past 709
    return Guarantee(2 * eps, grown)


def conversion_path(kind: str | None, target: str) -> tuple[str, ...] | None:
    """The kinds from ``kind`` to ``target`` by sound conversions, both ends included (one
    kind: the same); None where ``target`` does not follow from ``kind`` (or ``kind`` is None:
    not private)."""
    if kind is None:
        return None
    paths = {kind: (kind,)}
    todo = [kind]
    while todo:
        here = todo.pop(0)
        if here == target:
            return paths[here]
        for nxt, _, _ in _STEPS.get(here, ()):
            if nxt not in paths:
                paths[nxt] = (*paths[here], nxt)
                todo.append(nxt)
    return None


def convert_guarantee(kind: str | None, eps: float, delta: float, target: str) -> Guarantee | None:
    """The (eps, delta) guarantee of kind ``target`` that an (``eps``, ``delta``) guarantee of
    ``kind`` implies, or None where none soundly follows. The conversions: add/remove one
    record (eps, delta) gives replace one record (2 eps, (1 + e^eps) delta) by group privacy;
    replace one record gives replace one record's attribute, unchanged; a local guarantee of
    each record's attribute gives the central attribute-level one, unchanged (post-processing:
    a method of that kind reads the attribute only through its release). A local guarantee of
    a representation gives nothing else. delta may reach 1 or more: then no guarantee is left."""
    path = conversion_path(kind, target)
    if path is None:
        return None
    out = Guarantee(float(eps), float(delta))
    for here, nxt in zip(path, path[1:]):
        how = next(h for k, h, _ in _STEPS[here] if k == nxt)
        out = _group_of_two(*out) if how == "group" else out
    return out


def conversion_reasons(kind: str, target: str) -> tuple[str, ...]:
    """Why each step from ``kind`` to ``target`` is sound (empty for the same kind); ValueError
    where none is."""
    path = conversion_path(kind, target)
    if path is None:
        raise ValueError(f"no sound conversion from {kind!r} to {target!r}")
    return tuple(next(why for k, _, why in _STEPS[here] if k == nxt) for here, nxt in zip(path, path[1:]))


def comparison_groups(kinds) -> list[tuple[str, tuple[str, ...]]]:
    """The relations ``kinds`` are compared in: (relation, the kinds converted to it) pairs
    that cover every kind once. Greedy: the relation that the most remaining kinds convert to
    (``conversion_path``), ties to the one that converts fewest of them, then to the stronger
    relation; repeated on the rest. Kinds that share no relation land in different groups,
    to be drawn and ranked apart. None (not private) is left out: it has no eps to compare."""
    left = sorted({k for k in kinds if k is not None}, key=_rank)
    groups = []
    while left:
        targets = sorted({t for k in left for t in _reachable(k)}, key=_rank)
        best = min(targets, key=lambda t: (-sum(conversion_path(k, t) is not None for k in left),
                                           sum(k != t for k in left if conversion_path(k, t) is not None),
                                           _rank(t)))
        members = tuple(k for k in left if conversion_path(k, best) is not None)
        groups.append((best, members))
        left = [k for k in left if k not in members]
    return groups


def _reachable(kind: str) -> list[str]:
    return [t for t in (*_ORDER, kind) if conversion_path(kind, t) is not None]


def _rank(kind: str) -> tuple[int, str]:
    return (_ORDER.index(kind) if kind in _ORDER else len(_ORDER), kind)


KIND_CAVEATS = {
    ADD_REMOVE_RECORD: "of the training split as fixed, with n_train public: rows publish q = B / n exactly, and "
                       "adding or removing a record of the dataset as loaded changes n_train and moves rows across "
                       "the split, which is not covered; its Gaussian noise is floating point",
    REPLACE_ATTRIBUTE: "features and labels public; it holds for the dataset as loaded, whose split never reads "
                       "the attribute; its Gaussian noise is floating point",
    LOCAL_ATTRIBUTE: "of each training record's attribute; the model reads the attribute only through this "
                     "release, so it is also the central attribute-level ε",
    LOCAL_REPRESENTATION: "of each representation released by the trained encoder; the training that fitted "
                          "it reads labels (and FEDERATE's adversary the attribute) in the clear: no guarantee of "
                          "the training data",
}
"""What each kind of fairdp's methods assumes or leaves out, said beside it in reports."""
