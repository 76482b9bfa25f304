"""fairdp.analysis keeps its numbers apart from their presentation: the modules that select,
aggregate, bound and compare (what a user computes with) import nothing from the modules that
format, draw and render (what a report shows). `_intervals` and `_groups` imported the table
formatter; the cells they made are now the presentation modules' own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ANALYSIS = Path(__file__).resolve().parents[1] / "fairdp" / "analysis"

NUMBERS = ("_select", "_pareto", "_intervals", "_release", "_private", "_groups", "_compare", "_predictions", "_rows",
           "_curves", "_completeness", "_error_bars", "_search_progress", "_papers")
PRESENTATION = ("_report", "_plots", "_tables", "_render", "_style", "_dashboard")
SURFACES = ("_shared",)  # what the analysis shares with the rest of fairdp: both kinds


def presentation_imports(source: str) -> list[str]:
    """The presentation modules ``source`` imports, at its top or inside a function."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if isinstance(node, ast.ImportFrom) and node.module == "fairdp.analysis":
            names += [f"fairdp.analysis.{a.name}" for a in node.names]
        found += [n for n in names if n.split(".")[-1] in PRESENTATION and n.startswith("fairdp.analysis.")]
    return found


def test_every_analysis_module_has_a_role():
    modules = {p.stem for p in ANALYSIS.glob("_*.py")} - {"__init__"}
    roles = set(NUMBERS) | set(PRESENTATION) | set(SURFACES)
    assert modules == roles, modules ^ roles


@pytest.mark.parametrize("module", NUMBERS)
def test_a_number_module_imports_nothing_from_presentation(module):
    assert presentation_imports((ANALYSIS / f"{module}.py").read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("line", [
    "from fairdp.analysis._tables import mean_std",
    "import fairdp.analysis._plots",
    "def f():\n    from fairdp.analysis._report import write_report  # lazily\n",
    "from fairdp.analysis import _dashboard",
])
def test_the_check_sees_each_way_of_importing_presentation(line):
    assert presentation_imports(line)
