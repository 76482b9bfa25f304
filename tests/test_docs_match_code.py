"""Pages whose tables state facts of the code say what the code says now.

- docs/architecture.md's executor table and layer table are not written by hand: docs/hooks.py
  draws them when the site is built, from ``Executor`` and from tests/layers.py (the layer
  definition tests/test_layers.py enforces). These tests render the page through the hook and
  compare the tables with the class and the definition, so neither the page nor the hook can
  drift; the page's list of registered executors and its repository layout are compared with
  the registry and the package's folders.
- docs/api/index.md gives each function a table of its parameters: the tables are compared with
  the live signatures, so a parameter added, renamed or removed fails here until the page
  follows.

Each failure names the page and what to change there.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import markdown_tables, resolve_dotted
from tests.layers import ALLOWED_UP, LAYERS

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
ARCHITECTURE = DOCS / "architecture.md"
API_INDEX = DOCS / "api" / "index.md"


def _hooks():
    spec = importlib.util.spec_from_file_location("fairdp_docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rendered(page: Path, caplog) -> str:
    """``page`` as the docs build hands it to MkDocs (the hook's markers filled); a warning of the
    hook (which ``strict: true`` makes a failed build) fails the test."""
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.fairdp"):
        text = _hooks().on_page_markdown(page.read_text(encoding="utf-8"),
                                         SimpleNamespace(file=SimpleNamespace(src_path=str(page.relative_to(DOCS)))),
                                         None, None)
    warnings = [r.getMessage() for r in caplog.records if r.name == "mkdocs.hooks.fairdp"]
    assert not warnings, "docs/hooks.py warns (a failed strict build):\n" + "\n".join(warnings)
    return text


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` (a ``## `` line) up to the next ``## `` heading."""
    start = text.index(heading + "\n") + len(heading) + 1
    end = re.compile(r"^## ", re.M).search(text, start)
    return text[start:end.start() if end else len(text)]


def _code(cell: str) -> str:
    m = re.fullmatch(r"`([^`]+)`", cell)
    assert m, f"a first cell that is not one backticked name: {cell!r}"
    return m.group(1)


# -- docs/architecture.md -----------------------------------------------------------------------

def test_architecture_page_asks_the_hook_for_its_tables():
    """The executor and layer tables are the hook's, not a hand-written copy that would go stale."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    executors, layers = _section(text, "## Executors"), _section(text, "## Layers")
    assert "<!-- fairdp:executor-members -->" in executors.splitlines(), \
        "docs/architecture.md: the Executors section must draw its table with <!-- fairdp:executor-members -->"
    assert not markdown_tables(executors), "docs/architecture.md: a hand-written table in Executors; the hook draws it"
    assert "<!-- fairdp:layers -->" in layers.splitlines(), \
        "docs/architecture.md: the Layers section must draw its table with <!-- fairdp:layers -->"
    assert not markdown_tables(layers) and "```" not in layers, \
        "docs/architecture.md: a hand-drawn layer table or diagram; the hook draws it from tests/layers.py"


def _public_members(cls) -> set[str]:
    """What ``cls`` itself defines that a subclass or caller sees: methods, properties and class
    attributes, assigned or only annotated (``name: ClassVar[str]``)."""
    names = set(vars(cls)) | set(inspect.get_annotations(cls))
    return {n for n in names if not n.startswith("_")}


def test_executor_table_lists_every_member_of_the_executor_class(caplog):
    from fairdp.study.executors import Executor

    (table,) = markdown_tables(_section(_rendered(ARCHITECTURE, caplog), "## Executors"))
    assert table[0] == ["member", "kind", "what it does"]
    rows = {re.sub(r"\(.*\)$", "", _code(row[0])): row for row in table[1:]}
    assert len(rows) == len(table) - 1, "a member listed twice"
    members = _public_members(Executor)
    assert not members - set(rows), f"the executor table lacks Executor's {sorted(members - set(rows))}"
    assert not set(rows) - members, f"the executor table lists {sorted(set(rows) - members)}, not Executor's"
    for name, (written, kind, text) in rows.items():
        assert text, f"Executor.{name} has no description"
        value = vars(Executor).get(name)
        if callable(value):
            params = list(inspect.signature(value).parameters)[1:]
            assert _code(written) == f"{name}({', '.join(params)})", f"Executor.{name}'s parameters: {params}"
        assert ("abstract" in kind) == (name in Executor.__abstractmethods__), f"Executor.{name}: {kind}"


def test_registered_executors_are_the_ones_the_page_names():
    from fairdp.study.executors import EXECUTORS

    bullets = re.findall(r"^- `(\w+)(?:\([^)]*\))?` \(`(\w+)`", _section(ARCHITECTURE.read_text(encoding="utf-8"),
                                                                      "## Executors"), re.M)
    named = {name: cls for cls, name in bullets}
    registered = {name: cls.__name__ for name, cls in EXECUTORS.items()}
    assert named == registered, f"docs/architecture.md names executors {named}; registered: {registered}"


def test_layer_table_is_the_layer_definition_the_layer_test_enforces(caplog):
    from tests import test_layers

    assert test_layers.LAYERS is LAYERS and test_layers.ALLOWED_UP is ALLOWED_UP, \
        "tests/test_layers.py must enforce tests/layers.py's definition, the one the docs draw"
    layers = _section(_rendered(ARCHITECTURE, caplog), "## Layers")
    (table,) = markdown_tables(layers)
    assert table[0] == ["layer", "unit", "what it holds"]
    shown = {}
    for rank, unit, role in table[1:]:
        assert role, f"layer unit {unit} has no description"
        shown[re.sub(r"^fairdp\.", "", _code(unit))] = int(rank)
    assert shown == LAYERS, f"docs/architecture.md's layers {shown} differ from tests/layers.py's {LAYERS}"
    ranks = [int(row[0]) for row in table[1:]]
    assert ranks == sorted(ranks, reverse=True), "the layer table is not ordered top layer first"
    for low, high in ALLOWED_UP:
        assert f"- `fairdp.{low}` imports `fairdp.{high}`:" in layers, f"the allowed import {low} -> {high}"
    assert layers.count(" imports `fairdp.") == len(ALLOWED_UP)


def test_repository_layout_names_every_subpackage():
    layout = re.search(r"```text\n(.*?)```", _section(ARCHITECTURE.read_text(encoding="utf-8"),
                                                      "## Repository layout"), re.S).group(1)
    packages = sorted(p.parent.name for p in (REPO / "fairdp").glob("*/__init__.py"))
    missing = [p for p in packages if f"{p}/" not in layout]
    assert not missing, f"docs/architecture.md's repository layout lacks fairdp/{missing}"


# -- docs/api/index.md --------------------------------------------------------------------------

DIRECTIVE = re.compile(r"^::: ([\w.]+)$", re.M)


def _directives(page: Path) -> list[str]:
    return DIRECTIVE.findall(page.read_text(encoding="utf-8"))


def _written(p: inspect.Parameter) -> str:
    return {p.VAR_POSITIONAL: f"*{p.name}", p.VAR_KEYWORD: f"**{p.name}"}.get(p.kind, p.name)


def _parameter_table(page: Path, target: str) -> list[list[str]] | None:
    """The table between ``::: target`` and the next directive or heading, if any."""
    text = page.read_text(encoding="utf-8")
    start = text.index(f"::: {target}\n")
    end = re.compile(r"^(::: |#)", re.M).search(text, start + 4)
    tables = markdown_tables(text[start:end.start() if end else len(text)])
    return tables[0] if tables else None


@pytest.mark.parametrize("target", [t for t in _directives(API_INDEX) if t.rsplit(".", 1)[-1][0].islower()])
def test_api_page_documents_every_parameter_of_each_function(target):
    """Each function on the page (a lower-case name; a class's members are its docstrings')."""
    obj = resolve_dotted(target)
    assert inspect.isfunction(obj), f"{target} is not a function"
    table = _parameter_table(API_INDEX, target)
    assert table is not None, f"docs/api/index.md: {target} has no parameter table under it"
    assert table[0] == ["parameter", "what it is"], table[0]
    documented = [_code(row[0]) for row in table[1:]]
    actual = [_written(p) for p in inspect.signature(obj).parameters.values() if not p.name.startswith("_")]
    missing = [p for p in actual if p not in documented]
    gone = [p for p in documented if p not in actual]
    assert not missing, f"docs/api/index.md: {target}'s parameters {missing} are not documented"
    assert not gone, f"docs/api/index.md documents {gone}, which {target} no longer has"
    assert documented == actual, f"docs/api/index.md: {target}'s parameters are listed out of order: {actual}"
    empty = [_code(row[0]) for row in table[1:] if not row[1]]
    assert not empty, f"docs/api/index.md: {target}'s parameters {empty} have no description"


def test_api_page_documents_every_report_option_in_order():
    """write_report takes one ReportOptions: its fields are the table under it, in order."""
    import dataclasses

    from fairdp.analysis import ReportOptions

    table = _parameter_table(API_INDEX, "fairdp.analysis._report.ReportOptions")
    assert table is not None and table[0] == ["field", "what it is"], table
    assert [_code(row[0]) for row in table[1:]] == [f.name for f in dataclasses.fields(ReportOptions)]
    assert all(row[1] for row in table[1:])


def test_api_page_has_every_exported_function():
    import fairdp

    on_page = {id(resolve_dotted(t)) for t in _directives(API_INDEX)}
    missing = [name for name, module in fairdp._EXPORTS.items()
               if id(getattr(importlib.import_module(module), name)) not in on_page]
    assert not missing, f"docs/api/index.md lacks fairdp.{missing}"
