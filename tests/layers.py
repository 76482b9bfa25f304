"""The package's layers: the one definition of who may import whom inside ``fairdp``.

tests/test_layers.py enforces it on the source, and docs/hooks.py draws the layer table of
docs/architecture.md from it (``<!-- fairdp:layers -->``), so the page and the rule cannot
disagree; tests/test_docs_match_code.py checks that the page shows exactly these layers.

A unit is a module or subpackage directly under ``fairdp`` (``fairdp.study``, ``fairdp.errors``),
or ``fairdp`` itself (its ``__init__``). Plain data: no imports, so the docs build can load this
file by its path.
"""

# unit -> rank: a unit imports only units of lower or equal rank
LAYERS = {
    "errors": 0, "schema": 0, "fairness": 0, "_atomic": 0, "_rng": 0, "_philox": 0, "constraints": 0,
    "data": 1,
    "privacy": 2,
    "engine": 3,
    "metrics": 4,
    "analysis": 5,
    "methods": 5,
    "tracking": 5,  # loggers of stored rows: over schema and errors; the study drives them
    "study": 6,
    "cli": 7, "testing": 7,  # testing: the method contract a plugin author runs, over the whole package
    "__main__": 8, "fairdp": 8,  # fairdp: the package's own __init__, lazy re-exports
}

# imports that cross a layer upwards: (importer, imported) -> the reason
ALLOWED_UP = {
    ("analysis", "methods"): "a method's privacy scope (local or central eps) is registry metadata; "
                             "imported lazily, as importing the methods loads torch",
}
