"""Every benchmark still imports: each names the library's functions it measures, and a renamed
or removed name breaks it silently otherwise (its main runs for minutes, so only the imports
and definitions run here)."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("path", BENCHMARKS, ids=[p.stem for p in BENCHMARKS])
def test_a_benchmark_imports_what_it_measures(path, monkeypatch):
    name = f"benchmark_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # a dataclass looks its module up there
    spec.loader.exec_module(module)  # its main is behind `if __name__ == "__main__"`
    assert callable(getattr(module, "main", None))
