"""The package's layers, checked on its source: who may import whom (between subpackages, and
between ``fairdp.study``'s own parts), no private module imported across subpackages but each
one's ``_shared`` (the names it shares with the rest of fairdp), no import cycle between
subpackages, and every import inside a function saying why it is not at the top. And the public
face: each public surface's ``__all__`` names only what exists and exactly what the docs/api
pages document, a public package holds no other public name, and the tests import fairdp's
private modules only where tests/layers.py says why.

The layers themselves (each unit's rank, the upward imports allowed) are defined once, in
tests/layers.py, which docs/architecture.md's layer table is drawn from.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import resolve_dotted
from tests.layers import (
    ALLOWED_UP,
    LAYERS,
    PUBLIC_SURFACES,
    STUDY_ALLOWED_UP,
    STUDY_LAYERS,
    TEST_PRIVATE_IMPORTS,
)

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


SHARED = "_shared"  # a unit's one private module that the rest of fairdp may import


def _shared_module(dotted: str) -> bool:
    """``fairdp.<unit>._shared`` (or a name in it)."""
    parts = dotted.split(".")
    return len(parts) >= 3 and parts[2] == SHARED


def test_no_private_module_is_imported_across_subpackages():
    """A subpackage's private modules are its own (those of its own subpackages too:
    ``fairdp.study.run`` may import ``fairdp.study.store._store``); others use what its
    __init__ exports, or what its ``_shared`` module shares within fairdp."""
    wrong = []
    for m, t, line, *_ in IMPORTS:
        parts = t.split(".")
        private = [i for i, p in enumerate(parts) if p.startswith("_") and i > 0]
        if not private or _shared_module(t):
            continue
        owner = ".".join(parts[:min(private[0], 2)])  # the unit the private module belongs to
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


# -- inside fairdp.study: its parts' layers (tests/layers.py, STUDY_LAYERS) -------------------

STUDY = PACKAGE / "study"


def _study_part(module: str) -> str | None:
    """The part of ``fairdp.study`` that ``module`` is or lies in: a subpackage (``run``), a
    module at the package's top (``_context``), or ``__init__`` for the package itself; None
    outside ``fairdp.study``."""
    parts = module.split(".")
    if parts[:2] != ["fairdp", "study"]:
        return None
    return parts[2] if len(parts) > 2 else "__init__"


def _under_study(module: str) -> str:
    return "__init__" if module == "fairdp.study" else module.removeprefix("fairdp.study.")


STUDY_IMPORTS = [(_under_study(m), _under_study(t), line) for m, t, line, *_ in IMPORTS
                 if _study_part(m) and _study_part(t)]


def _up(importer: str, imported: str) -> bool:
    return STUDY_LAYERS[_study_part(f"fairdp.study.{imported}")] > STUDY_LAYERS[_study_part(f"fairdp.study.{importer}")]


def test_every_part_of_the_study_has_a_layer():
    on_disk = {p.stem for p in STUDY.glob("*.py")} | {p.parent.name for p in STUDY.glob("*/__init__.py")}
    assert on_disk == set(STUDY_LAYERS), (f"fairdp/study's parts {sorted(on_disk)} differ from "
                                          f"tests/layers.py's STUDY_LAYERS {sorted(STUDY_LAYERS)}")


def test_no_part_of_the_study_imports_a_higher_layer():
    wrong = [f"fairdp.study.{m}:{line} imports fairdp.study.{t}" for m, t, line in STUDY_IMPORTS
             if _up(m, t) and (m, t) not in STUDY_ALLOWED_UP]
    assert not wrong, ("an import that goes up fairdp.study's layers (tests/layers.py, STUDY_LAYERS); "
                       "add it to STUDY_ALLOWED_UP with its reason only if it must:\n" + "\n".join(wrong))


def test_the_studys_upward_imports_allowed_are_all_made():
    made = {(m, t) for m, t, _ in STUDY_IMPORTS if _up(m, t)}
    stale = sorted(set(STUDY_ALLOWED_UP) - made)
    assert not stale, f"tests/layers.py's STUDY_ALLOWED_UP allows imports fairdp.study does not make: {stale}"


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


def test_a_run_or_a_ray_worker_does_not_import_the_accountant_or_scikit_learn_until_used():
    """What every CLI start and Ray worker imports (the study, the methods, the analysis) leaves
    dp-accounting, scipy, scikit-learn and fairlearn (about 2 s of a 3.5 s start) to the code
    that uses them."""
    code = ("import sys, fairdp.study, fairdp.methods, fairdp.analysis, fairdp.privacy, fairdp.metrics; "
            "print([m for m in ('dp_accounting', 'scipy', 'sklearn', 'fairlearn') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"importing fairdp's packages loads {out}"


# -- the public surfaces: __all__, the docs/api pages, the tests' imports ---------------------

REPO = PACKAGE.parent
API_PAGES = sorted((REPO / "docs" / "api").glob("*.md"))


def _public_path(dotted: str) -> str:
    """``dotted`` without its private modules: the lazily exported
    ``fairdp.analysis._plots.plot_rt_sweep`` is documented as ``fairdp.analysis.plot_rt_sweep``."""
    first, *rest = dotted.split(".")
    return ".".join([first, *(p for p in rest if not p.startswith("_"))])


def _documented() -> dict[str, str]:
    """public path -> page of every object a docs/api page renders: a ``::: path`` directive's
    object, or each name its ``members:`` option lists."""
    found = {}
    for page in API_PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            directive = re.fullmatch(r"::: ([\w.]+)", line)
            if not directive:
                continue
            options = []
            for option in lines[i + 1:]:
                if not option.startswith("    "):
                    break
                options.append(option)
            members = re.findall(r"^\s+- (\w+)$", "\n".join(options), re.M)
            for path in [f"{directive[1]}.{m}" for m in members] or [directive[1]]:
                found[_public_path(path)] = page.name
    return found


def _mentioned() -> dict[str, str]:
    """``fairdp.``-dotted name -> page, of every name in backticks in the pages' prose."""
    return {name: page.name for page in API_PAGES
            for name in re.findall(r"`(fairdp(?:\.\w+)+)`", page.read_text(encoding="utf-8"))}


def _is_public(dotted: str) -> bool:
    """A module, a name in a public surface's ``__all__``, a member of a public module that is
    no surface (``fairdp.testing.figures``), or an attribute of a public class."""
    obj = resolve_dotted(dotted)
    if obj is None or inspect.ismodule(obj):
        return obj is not None
    parent, name = dotted.rsplit(".", 1)
    if parent in PUBLIC_SURFACES:
        return name in importlib.import_module(parent).__all__
    owner = resolve_dotted(parent)
    return inspect.ismodule(owner) or (inspect.isclass(owner) and _is_public(parent))


def _public_names() -> list[str]:
    """Every name of every public surface's ``__all__``, as the path it is documented under
    (``fairdp``'s lazy names under the subpackage that defines them)."""
    import fairdp

    names = []
    for surface in PUBLIC_SURFACES:
        for name in importlib.import_module(surface).__all__:
            if surface == "fairdp":
                if name != "__version__":
                    names.append(f"{fairdp._EXPORTS[name]}.{name}")
            else:
                names.append(f"{surface}.{name}")
    return names


@pytest.mark.parametrize("surface", PUBLIC_SURFACES)
def test_each_all_names_only_what_exists(surface):
    """Lazily exported names included (``fairdp.analysis``' figures, ``fairdp.privacy``'s mechanisms)."""
    module = importlib.import_module(surface)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert not missing, f"{surface}.__all__ names {missing}, which {surface} does not have"
    twice = sorted({name for name in module.__all__ if module.__all__.count(name) > 1})
    assert not twice, f"{surface}.__all__ names {twice} twice"


@pytest.mark.parametrize("surface", [s for s in PUBLIC_SURFACES
                                     if s != "fairdp" and hasattr(importlib.import_module(s), "__path__")])
def test_a_public_package_holds_no_public_name_outside_its_all(surface):
    """A name a package holds is public (in ``__all__``, documented) or private by its name:
    never "not public" by a comment only. What a unit shares with the rest of fairdp lives in its
    ``_shared`` module. (Submodules and ``from __future__``'s ``annotations`` aside.)"""
    module = importlib.import_module(surface)
    stray = sorted(name for name, value in vars(module).items()
                   if not name.startswith("_") and name not in module.__all__ and not inspect.ismodule(value)
                   and name != "annotations")
    assert not stray, f"{surface} holds {stray} outside its __all__: make them public or move them to its {SHARED}"


def test_a_public_name_has_one_home():
    """Each class or function is public in one surface (``fairdp`` re-exports the subpackages')."""
    homes = defaultdict(list)
    for surface in PUBLIC_SURFACES:
        module = importlib.import_module(surface)
        for name in module.__all__ if surface != "fairdp" else ():
            value = getattr(module, name)
            if callable(value):  # constants may be equal by chance
                homes[id(value)].append(f"{surface}.{name}")
    twice = [paths for paths in homes.values() if len(paths) > 1]
    assert not twice, f"public in two surfaces: {twice}"


def test_every_public_name_is_documented_on_an_api_page():
    documented = _documented()
    missing = [name for name in _public_names() if name not in documented]
    assert not missing, f"in an __all__ but on no docs/api page (with its level): {missing}"


def test_every_name_the_api_pages_document_is_public():
    """What a page renders, or names in backticks, is a module or a public name: never a name
    a subpackage only shares within fairdp, nor one that is gone."""
    wrong = [f"docs/api/{page}: {name}" for name, page in {**_mentioned(), **_documented()}.items()
             if not _is_public(_public_path(name))]
    assert not wrong, "documented but in no public surface's __all__:\n" + "\n".join(wrong)


def _test_imports() -> list[tuple[str, int, str]]:
    """(test file, line, private module) of every import of a private fairdp module in tests/:
    ``fairdp.x._y`` and below, ``import fairdp.x._y``, ``from fairdp.x import _y``."""
    found = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        where = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names
                                           if a.name.startswith("_") and not a.name.startswith("__")]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            for module in modules:
                parts = module.split(".")
                private = [i for i, p in enumerate(parts) if p.startswith("_") and i > 0]
                if parts[0] != "fairdp" or not private:
                    continue
                owner = parts[:private[0] + 1]
                file = PACKAGE.parent.joinpath(*owner)
                if file.with_suffix(".py").is_file() or (file / "__init__.py").is_file():  # not a private function
                    found.append((where, node.lineno, ".".join(owner)))
    return found


TEST_IMPORTS = _test_imports()


def test_tests_import_private_modules_only_where_layers_says_why():
    """A test uses fairdp as its users and authors do, through the public surfaces (or a name a
    unit's ``_shared`` module shares within fairdp); a private module only for a reason
    tests/layers.py states (TEST_PRIVATE_IMPORTS)."""
    wrong = [f"{path}:{line} imports {module}" for path, line, module in TEST_IMPORTS
             if module not in TEST_PRIVATE_IMPORTS and not _shared_module(module)]
    assert not wrong, ("import it from its public surface, or add the module to tests/layers.py's "
                       "TEST_PRIVATE_IMPORTS with the reason:\n" + "\n".join(wrong))


def test_the_private_import_allowlist_holds_only_what_tests_import():
    unused = sorted(set(TEST_PRIVATE_IMPORTS) - {module for *_, module in TEST_IMPORTS})
    assert not unused, f"tests/layers.py allows private modules no test imports: {unused}"


def test_every_module_imports_first_with_no_cycle():
    """Each fairdp module imported first, in a process where no other fairdp module is loaded
    (as a Ray worker imports a trainable's module when it unpickles it): an import cycle that
    one import order hides (the packages' lazy names no longer fix an order) fails here."""
    code = ("import importlib, pkgutil, sys\nimport fairdp, torch, pandas, pyarrow\n"
            "names = sorted(m.name for m in pkgutil.walk_packages(fairdp.__path__, 'fairdp.') "
            "if '__main__' not in m.name)\nbad = []\n"
            "for name in names:\n"
            "    for k in [k for k in sys.modules if k == 'fairdp' or k.startswith('fairdp.')]:\n"
            "        del sys.modules[k]\n"
            "    try:\n        importlib.import_module(name)\n"
            "    except ImportError as e:\n        bad.append(f'{name}: {e}')\n"
            "print(len(names), bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    count, bad = out.split(" ", 1)
    assert int(count) > 100 and bad == "[]", bad
