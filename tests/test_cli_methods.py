"""`fairdp methods`: every registered method, plugins included, with its paper, grid keys and
their ranges, guarantee kind and the roles that take a module of the user's; each shown range
checked against the hyperparameter's own validation (the general computation)."""

from __future__ import annotations

import json
import math

import pytest

from fairdp.errors import InputError
from fairdp.methods import builtin_method_names, get_method
from fairdp.methods._describe import describe_method, hyperparam_range

from .conftest import REPO, assert_input_error, run_main


def _edges(h):
    """Values just inside and just outside a numeric hyperparameter's stated range."""
    inside, outside = [], []
    for bound, opens, side in ((h.low, h.low_open, -1), (h.high, False, 1)):
        if bound is None or math.isinf(bound):
            continue
        step = 1 if h.integer else 1e-9 * max(1.0, abs(bound))
        if opens:
            inside.append(bound + step)
            outside.append(bound)
        else:
            inside.append(bound)
            outside.append(bound + side * step)
    return inside, outside


@pytest.mark.parametrize("name", builtin_method_names())
def test_every_method_is_described_as_its_registration_says(name):
    method = get_method(name)
    d = describe_method(method)
    assert d["name"] == name and d["summary"].endswith(".") and len(d["summary"]) > 20
    assert d["guarantee"] == method.guarantee_kind
    assert [k["name"] for k in d["grid_keys"]] == [h.name for h in method.hyperparams]
    grid = method.paper_grid("adult")
    for key, h in zip(d["grid_keys"], method.hyperparams):
        assert key["paper_values"] == list(grid.get(h.name, []))
        assert key["range"] == hyperparam_range(h)
        for value in key["paper_values"]:  # the paper's values are within the range shown
            h.validate(value, "x")
        if h.choices is None:
            inside, outside = _edges(h)
            for v in inside:
                h.validate(v, "x")
            for v in outside:
                with pytest.raises(InputError):
                    h.validate(v, "x")


def test_the_command_lists_every_method_and_a_plugins(tmp_path):
    out = run_main("methods", "--json", "--plugin", str(REPO / "examples" / "gap_reg.py"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    listed = {d["name"]: d for d in json.loads(out.stdout)}
    assert set(builtin_method_names()) < set(listed)
    plugin = [d for n, d in listed.items() if n not in builtin_method_names()]
    assert plugin and not plugin[0]["module"].startswith("fairdp.")
    assert listed["federate"]["user_modules"] == ["encoder", "classifier", "adversary"]
    assert listed["pfld"]["guarantee"] == "central, replace one record's attribute"
    text = run_main("methods", "pfld", "dpsgd", cwd=tmp_path).stdout
    assert text.startswith("pfld: PF-LD (Tran et al. 2021)") and "\ndpsgd: DP-SGD (Abadi et al. 2016)" in text
    assert "clip_primal: > 0;" in text and "guarantee: central, add/remove one record" in text
    assert_input_error(run_main("methods", "nosuch", cwd=tmp_path), "METHOD", "nosuch")
    assert_input_error(run_main("methods", "--plugin", "missing.py", cwd=tmp_path), "--plugin")


@pytest.mark.parametrize("h, words", [
    (dict(name="a", low=0.0, low_open=True), "> 0"),
    (dict(name="a", low=0.0, high=1.0), "0 to 1"),
    (dict(name="a", low=0.0, low_open=True, high=24.0), "> 0 and <= 24"),
    (dict(name="a", low=1, integer=True), "integer >= 1"),
    (dict(name="a", choices=("dp", "eo")), "one of dp, eo"),
    (dict(name="a"), "any finite number"),
])
def test_a_range_reads_as_the_validation_it_states(h, words):
    from fairdp.methods import HyperParam

    assert hyperparam_range(HyperParam(**h)) == words
