"""The package's layers, checked on its source: who may import whom, no private module imported
across subpackages, no import cycle between subpackages, and every import inside a function
saying why it is not at the top.

The layers themselves (each unit's rank, the upward imports allowed) are defined once, in
tests/layers.py, which docs/architecture.md's layer table is drawn from.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.layers import ALLOWED_UP, LAYERS

PACKAGE = Path(__file__).resolve().parents[1] / "fairdp"


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "fairdp"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports():
    """(importer module, imported module, line, inside a function, the line's text) of every
    fairdp import in the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source)
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

        def in_function(node, parents=parents) -> bool:
            while node in parents:
                node = parents[node]
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    return True
            return False

        me = _module_name(path)
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module == "fairdp":
                    targets = [f"fairdp.{a.name}" for a in node.names]
                elif node.module.startswith("fairdp."):
                    targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("fairdp.")]
            for t in targets:
                context = "\n".join(lines[max(0, node.lineno - 2):node.end_lineno])  # the line above too
                found.append((me, t, node.lineno, in_function(node), context))
    return found


IMPORTS = _imports()


def test_every_unit_has_a_layer():
    units = {_unit(m) for m, *_ in IMPORTS} | {_unit(t) for _, t, *_ in IMPORTS}
    assert units <= set(LAYERS) | {"__version__"}, sorted(units - set(LAYERS))


def test_no_unit_imports_a_higher_layer():
    wrong = [f"{m}:{line} imports {t}" for m, t, line, *_ in IMPORTS
             if _unit(t) in LAYERS and LAYERS[_unit(t)] > LAYERS[_unit(m)] and (_unit(m), _unit(t)) not in ALLOWED_UP]
    assert not wrong, "\n".join(wrong)


def test_no_private_module_is_imported_across_subpackages():
    """A subpackage's private modules are its own; others use what its __init__ exports."""
    wrong = []
    for m, t, line, *_ in IMPORTS:
        parts = t.split(".")
        private = [i for i, p in enumerate(parts) if p.startswith("_") and i > 0]
        if not private:
            continue
        owner = ".".join(parts[:private[0]])  # the package the private module belongs to
        if owner != "fairdp" and not m.startswith(owner + ".") and m != owner:
            wrong.append(f"{m}:{line} imports {t}")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle_between_units():
    graph = defaultdict(set)
    for m, t, *_ in IMPORTS:
        if _unit(m) != _unit(t):
            graph[_unit(m)].add(_unit(t))
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(u, path):
        state[u] = 1
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                cycle.extend(path[path.index(v):] + [v])
                return True
            if v not in state and visit(v, path + [v]):
                return True
        state[u] = 2
        return False

    for u in sorted(graph):
        if u not in state and visit(u, [u]):
            break
    assert not cycle, " -> ".join(cycle)


# modules whose every fairdp import is inside a function, for one stated reason
LAZY_BY_DESIGN = {
    # each command imports what it needs when it runs, so that --help and an argument error
    # answer at once (test_light_modules_do_not_load_torch_or_ray holds it to that)
    "fairdp.cli",
}


def test_an_import_inside_a_function_says_why():
    """A lazy import saves start-up (torch, Ray, matplotlib) or breaks a cycle; each one says
    which in a comment on it or the line above, so a needless one is visible."""
    silent = [f"{m}:{line} imports {t}" for m, t, line, inner, context in IMPORTS
              if inner and "#" not in context and m not in LAZY_BY_DESIGN]
    assert not silent, "\n".join(silent)


@pytest.mark.parametrize("module", ["fairdp", "fairdp.cli", "fairdp.schema", "fairdp.fairness", "fairdp.errors"])
def test_light_modules_do_not_load_torch_or_ray(module):
    """``import fairdp`` (and the CLI's argument parsing) stays fast: no torch, Ray or pandas."""
    code = (f"import sys, {module}; heavy = [m for m in ('torch', 'ray', 'optuna', 'matplotlib') if m in sys.modules]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"import {module} loads {out}"
