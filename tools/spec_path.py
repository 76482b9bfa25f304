"""Follow a study spec through fairdp: which modules the calls that receive it belong to, in
order, and how often the path returns to a module it had already left.

    .venv/bin/python tools/spec_path.py [STUDY.yaml] [--max-returns N] [--show]

Runs ``fairdp run STUDY --dry-run`` in this process (local executor: no Ray) under a profiler
that records every call of a ``fairdp`` function one of whose arguments is a ``StudySpec``
(the spec, or a copy of it that a step made). Consecutive calls in one module are one visit;
a visit to a module visited before, after leaving it, is a return. A pipeline whose stages
hand a value on (prepare, plan, execute) visits each module once; a path that asks the same
question of the executor at three moments keeps coming back. Exits 1 when the returns exceed
``--max-returns`` (the architecture's budget), so CI can hold it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DEFAULT_STUDY = REPO / "studies" / "demo.yaml"


def spec_calls(study: Path) -> list[tuple[str, str]]:
    """(module, function) of each call that received a StudySpec during the dry run, in order."""
    from fairdp.study import load_spec, run_study
    from fairdp.study.spec._spec import StudySpec

    spec = load_spec(study)
    calls: list[tuple[str, str]] = []

    def profile(frame, event, arg):  # noqa: ARG001 - sys.setprofile's signature
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("fairdp."):
            return
        code = frame.f_code
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if any(isinstance(frame.f_locals.get(n), StudySpec) for n in names):
            calls.append((module, code.co_name))

    with tempfile.TemporaryDirectory() as tmp:
        sys.setprofile(profile)
        try:
            run_study(spec, str(Path(tmp) / "r"), executor="local", dry_run=True)
        finally:
            sys.setprofile(None)
    return calls


def visits(calls: list[tuple[str, str]]) -> list[str]:
    """The modules in order, consecutive calls in one module as one visit."""
    out: list[str] = []
    for module, _ in calls:
        if not out or out[-1] != module:
            out.append(module)
    return out


def returns(path: list[str]) -> int:
    """How many visits go back to a module the path had already left."""
    seen: set[str] = set()
    count = 0
    for module in path:
        if module in seen:
            count += 1
        seen.add(module)
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/spec_path.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("study", nargs="?", default=str(DEFAULT_STUDY), help="the study file (default: the demo's)")
    parser.add_argument("--max-returns", type=int, default=None, help="exit 1 above this many returns")
    parser.add_argument("--show", action="store_true", help="print the path, a module per line")
    args = parser.parse_args(argv)
    calls = spec_calls(Path(args.study))
    path = visits(calls)
    if args.show:
        for module in path:
            print(module)
    n = returns(path)
    print(f"spec path: {len(calls)} calls, {len(path)} visits to {len(set(path))} modules, {n} returns")
    return 1 if args.max_returns is not None and n > args.max_returns else 0


if __name__ == "__main__":
    sys.exit(main())
