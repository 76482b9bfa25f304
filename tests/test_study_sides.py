"""Where the study package's code runs is said by its files' names: the worker's side (what a Ray
worker process, or the driver's own process for ``--executor local``, runs to train and store a
pack) imports nothing of the driver's (preparing, planning, scheduling, progress)."""

import ast
from pathlib import Path

import pytest

STUDY = Path(__file__).resolve().parents[1] / "fairdp" / "study"

# what a worker runs, and the plain values and files it shares with the driver (modules named
# under fairdp.study)
WORKER_SIDE = {"executors._worker", "store._rows", "_context", "ray._ray_trainables"}
# specs, the store (its checkpoint files and the plan beside it), packs, the results' lock; and
# ``search_config`` (a per-config search trial's parameters as the method's config)
SHARED = {"spec._spec", "store._store", "store._checkpoint", "store._plans", "run._plan", "store._lock",
          "search._optuna"}


def _file(module: str) -> Path:
    """The file of ``module``, named under fairdp.study (``__init__`` is the package's own)."""
    path = STUDY.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def study_imports(module: str) -> set[str]:
    """The ``fairdp.study`` modules ``module`` imports, at any depth in its file (lazy imports count)."""
    tree = ast.parse(_file(module).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fairdp.study."):
            package = node.module.removeprefix("fairdp.study.")
            # ``from fairdp.study.ray import _ray_reaper`` imports the module ``ray._ray_reaper``
            found |= {f"{package}.{a.name}" if _file(f"{package}.{a.name}").is_file() else package for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module == "fairdp.study":
            found.add("__init__")
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("fairdp.study.") for a in node.names if a.name.startswith("fairdp.study.")}
    return found


def closure(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo += sorted(study_imports(m))
    return seen - {module}


@pytest.mark.parametrize("module", sorted(m for m in WORKER_SIDE if _file(m).exists()))
def test_the_workers_side_imports_nothing_of_the_drivers(module):
    driver_side = closure(module) - WORKER_SIDE - SHARED
    assert not driver_side, f"{module} (run by workers) imports the driver's {sorted(driver_side)}"

