"""The allocator setting of the analysis commands (``fairdp._malloc``): a freed column-sized
array's memory serves the next one, where glibc's defaults fault it in from the kernel again."""

from __future__ import annotations

import subprocess
import sys

import pytest

import fairdp.cli as cli

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")

_FAULTS = """
import resource, sys
import numpy as np
if sys.argv[1] == "set":
    from fairdp._malloc import reuse_freed_memory
    assert reuse_freed_memory()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
a = np.ones(3_000_000); del a
start = faults()
for i in range(30):  # 24 MB arrays, each a little larger than the last, as a report's columns are
    a = np.ones(3_000_000 + i * 1000); del a
print(faults() - start)
"""


def _page_faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_freed_arrays_are_reused_instead_of_faulted_in_again():
    """30 arrays of 24 MB are 175,000 pages; at glibc's defaults most are faulted in anew,
    with the setting almost none (each array reuses the last one's memory)."""
    default, kept = _page_faults("default"), _page_faults("set")
    assert kept < 1_000 and 5 * kept < default, (default, kept)


@pytest.mark.parametrize("argv, expected", [(["analyze", "r"], True), (["report", "r", "-o", "o"], True),
                                            (["compare", "a", "b"], True), (["figure", "pareto", "r", "-o", "o.png"], True),
                                            (["run", "s.yaml"], False), (["compact", "r"], False)])
def test_only_the_commands_that_analyse_a_table_change_the_allocator(monkeypatch, argv, expected):
    """A training run keeps glibc's defaults (its processes live for hours and give a pack's
    memory back between packs); the analysis commands set it before they read."""
    calls = []
    monkeypatch.setattr(cli, "reuse_freed_memory", lambda: calls.append(True))
    monkeypatch.setattr(cli, f"_cmd_{argv[0]}", lambda args: 0)
    assert cli.main(argv) == 0
    assert bool(calls) is expected
