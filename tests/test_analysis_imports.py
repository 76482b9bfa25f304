"""The analysis commands read stored rows without loading torch or Ray (5.5 s of a command's
start here): the store's reader, the plan, the stored selection and the labels of fairdp's own
methods need no method registry. What they would have asked the registry is held in two tables,
each checked here against the registry itself."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fairdp import schema
from fairdp.analysis._rows import BUILTIN_GUARANTEES
from fairdp.methods import builtin_method_names, get_method
from tests.conftest import REPO

REFERENCE = str(REPO / "results" / "demo-reference")


def test_the_builtin_hyperparameter_columns_are_the_registrys():
    registry = schema.hyperparameter_columns(h for n in builtin_method_names() for h in get_method(n).hyperparams)
    assert sorted(schema.BUILTIN_HYPERPARAMETERS.items()) == registry


def test_the_builtin_guarantee_kinds_are_the_registrys():
    assert BUILTIN_GUARANTEES == {n: get_method(n).guarantee_kind for n in builtin_method_names()}


@pytest.mark.parametrize("command, heavy", [
    (["analyze", REFERENCE], ("torch", "ray", "matplotlib")),
    (["analyze", REFERENCE, "--selected"], ("torch", "ray", "matplotlib")),
    (["compare", REFERENCE, REFERENCE], ("torch", "ray")),
    (["report", REFERENCE, "-o", "{out}"], ("torch", "ray")),
    (["report", REFERENCE, "-o", "{out}", "--no-figures"], ("torch", "ray", "matplotlib")),
], ids=["analyze", "analyze-selected", "compare", "report", "report-no-figures"])
def test_an_analysis_command_imports_neither_torch_nor_ray(command, heavy, tmp_path):
    """Nor matplotlib where it draws nothing (a quarter of a second)."""
    args = [a.format(out=tmp_path / "report") for a in command]
    code = ("import sys\nfrom fairdp.cli import main\n"
            "try:\n    status = main(sys.argv[2:])\nexcept SystemExit as e:\n    status = e.code\n"
            "loaded = [m for m in sys.argv[1].split(',') if m in sys.modules]\n"
            "print('heavy:', loaded, 'status:', status, file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code, ",".join(heavy), *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    last = proc.stderr.strip().splitlines()[-1]
    assert last == "heavy: [] status: 0", proc.stderr[-2000:]
