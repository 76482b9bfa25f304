"""The run's pipeline reads as stages handed on (prepare → plan → execute): the study spec,
followed through the calls that receive it during a dry run, comes back to a module it had
left at most ``MAX_RETURNS`` times (tools/spec_path.py counts it)."""

from __future__ import annotations

import sys

import yaml

from .conftest import REPO

sys.path.insert(0, str(REPO / "tools"))
import spec_path  # noqa: E402 - the tool lives under tools/, not in a package

MAX_RETURNS = 12


def test_the_spec_path_of_a_dry_run_returns_to_few_modules(tmp_path):
    raw = yaml.safe_load((REPO / "studies" / "demo.yaml").read_text())
    raw["dataset"] = {"name": "synthetic", "rows": 300, "features": 4}  # the demo's methods, no download
    study = tmp_path / "demo.yaml"
    study.write_text(yaml.safe_dump(raw))
    path = spec_path.visits(spec_path.spec_calls(study))
    assert path[0] == "fairdp.study.run._runner"
    assert spec_path.returns(path) <= MAX_RETURNS, path


def test_returns_count_each_visit_back_to_a_module_left_before():
    assert spec_path.returns(["a", "b", "c"]) == 0
    assert spec_path.returns(["a", "b", "a", "c", "b", "a"]) == 3
    assert spec_path.visits([("a", "f"), ("a", "g"), ("b", "f"), ("a", "h")]) == ["a", "b", "a"]
