"""The (eps, delta) guarantee a method reports for each config it trains, and its kind: what
one neighbouring change alters, so that eps of different kinds are never read as one.

A kind is a compact, stable label (the ``guarantee`` result column) made of the scope and the
neighbouring relation with the unit it changes:

* ``"central, add/remove one record"``: (eps, delta)-DP of the training data, one whole record
  added or removed (DP-SGD);
* ``"central, replace one record's attribute"``: one record's sensitive attribute changed,
  Tran et al.'s Definition 1 (PF-LD);
* ``"local, replace one record's representation"``: eps-LDP of the representation each record
  releases, any two inputs (FEDERATE, DPNR, CAPE, the noise baseline);
* ``"local, replace one record's attribute"``: eps-LDP of the attribute each record releases
  (randomized response: private reductions).

An eps of one kind is not an eps of another: a table or figure that shows methods of several
kinds says so.
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
