"""Issue 41: every key of the study spec and every flag of ``fairdp run`` / ``fairdp search``,
given arbitrary values (huge, negative, NaN, inf, strings, numeric strings, booleans, None,
lists, nested maps), gives a valid study or one InputError line that names the key (exit 2)
and writes nothing; never another exception.

The keys are the documented ones (``docs/study-spec.md``, which ``tests/test_docs.py`` holds
equal to what the parser accepts), so a new key is fuzzed once it is documented. Each example
is checked by the parser and by a ``--dry-run`` in this process (the dataset loaded and the
plan made, nothing trained or written). The default run draws a bounded number of examples;
the slow set draws many more.
"""

from __future__ import annotations

import copy
import io
import math
import re
from contextlib import redirect_stderr
from pathlib import Path
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairdp.cli import build_parser, main
from fairdp.errors import InputError
from fairdp.study import parse_spec
from tests.test_docs import _documented_keys

BASE = {
    "name": "fuzz",
    "dataset": {"name": "synthetic", "rows": 200, "features": 4},
    "seeds": [0],
    "train": {"epochs": 3, "batch_size": 64},
    "evaluate": {"leakage": True, "mdl": False, "probe": {"max_epochs": 2}},
    "methods": {"federate": {"grid": {"eps": [8], "lam": {"start": 0.5, "stop": 0.5, "step": 0.5}}},
                "unconstrained": {}},
}
SEARCH = {"method": "federate", "objectives": {"valid_accuracy": "max"}, "trials": 2, "population": 2,
          "space": {"eps": {"low": 1, "high": 8}, "lam": {"choices": [0.5]}}}
# where each section's keys go in a study that uses them
SECTIONS = {
    "search": SEARCH,
    "tuning": {"count": "truncated_negative_binomial", "mean": 2, "shape": 1},
    "prune": {"rungs": [1]},
    "tracking.mlflow": {},
    "tracking.wandb": {},
    "architecture": {},
}
PLACEHOLDERS = {"<method>": "federate", "<hyperparameter>": "lam", "<objective>": "valid_accuracy"}
KEYS = sorted(_documented_keys()[0])
FAKE_MEMORY = 64 * 2**20  # the dry runs' machine: a synthetic draw or a network above it is refused at once

SCALARS = st.one_of(
    st.integers(min_value=-2**80, max_value=2**80),
    st.sampled_from([2**63 - 1, 2**63, 2**70, -1, 0, 1, 2, 10, 10**12]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.5, 1e-300, 1e308, -0.0]),
    st.text(max_size=10),
    st.sampled_from(["1e-3", "10", "0.5", "nan", "inf", "-1", "", "true", "cuda", "cuda:7", "mps", "cpu", "online",
                     "dp", "mlp", "poisson", "bios", "min", "max", "federate", "eps", "lam"]),
    st.booleans(),
    st.none(),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=6)


def _no_imports(value):
    """``plugins`` strings that cannot name an importable module or file (a fuzzer must not
    import ``antigravity``)."""
    if isinstance(value, str):
        return "zz_no_such_plugin_" + re.sub(r"[^A-Za-z0-9_]", "_", value)
    if isinstance(value, list):
        return [_no_imports(v) for v in value]
    if isinstance(value, dict):
        return {k: _no_imports(v) for k, v in value.items()}
    return value


def _place(key: str, value) -> tuple[dict, str, str]:
    """A study with ``value`` at the documented ``key``: (spec, the concrete key path, the command)."""
    spec = copy.deepcopy(BASE)
    path = key
    for placeholder, name in PLACEHOLDERS.items():
        path = path.replace(placeholder, name)
    parts = path.split(".")
    command = "search" if parts[0] == "search" else "run"
    for section, body in SECTIONS.items():
        if path == section or path.startswith(section + "."):
            node = spec
            *parents, last = section.split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[last] = copy.deepcopy(body)
    if parts[:2] == ["search", "fixed"] and len(parts) > 2:  # a fixed hyperparameter is not also searched
        spec["search"]["space"].pop(parts[2], None)
    if parts[0] == "dataset" and len(parts) == 2 and parts[1] != "name":
        # an option of another dataset: that dataset, parsed only (loading it reads files or the network)
        synthetic_options = _documented_keys()[1]
        names = sorted(synthetic_options.get(path, {"synthetic"}))
        spec["dataset"] = {"name": "synthetic" if "synthetic" in names else names[0],
                           **({"rows": 200, "features": 4} if "synthetic" in names else {})}
    if parts[0] == "plugins":
        value = _no_imports(value)
    node = spec
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[parts[-1]] = value
    return spec, path, command


def _names(path: str, message: str) -> bool:
    """Whether an error message names ``path`` (or, for an error found between siblings, its
    section: ``search.space.eps.high`` for a ``low`` above it)."""
    parent = path.rsplit(".", 1)[0] if "." in path else None
    return path in message or (parent is not None and parent in message)


def _is_synthetic(spec: dict) -> bool:
    dataset = spec.get("dataset")
    return dataset == "synthetic" or (isinstance(dataset, dict) and dataset.get("name") == "synthetic")


def _cli(tmp_path: Path, argv: list[str]) -> tuple[int, list[str]]:
    err = io.StringIO()
    with redirect_stderr(err), mock.patch("fairdp.data._dataset.physical_memory", return_value=FAKE_MEMORY):
        code = main(argv)
    lines = [ln for ln in err.getvalue().splitlines() if ln.startswith("fairdp: error:")]
    return code, lines


def _check_key(tmp_path: Path, key: str, value, dry_run: bool = True) -> None:
    spec, path, command = _place(key, value)
    try:
        parse_spec(copy.deepcopy(spec))
    except InputError as e:
        message = str(e)
        assert "\n" not in message, message
        assert _names(path, message), (key, value, message)
    if not dry_run or not _is_synthetic(spec):
        return
    try:
        text = yaml.safe_dump(spec, allow_unicode=True)
    except yaml.YAMLError:
        return
    study = tmp_path / "study.yaml"
    study.write_text(text)
    results = tmp_path / "results"
    code, errors = _cli(tmp_path, [command, str(study), "--results", str(results), "--dry-run", "--executor", "local"])
    assert code in (0, 2), (key, value, code)
    if code == 2:
        assert len(errors) == 1, errors
        # the YAML round trip may turn a string into a number, never the key it names
        assert _names(path, errors[0]), (key, value, errors[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"], (key, value)


def test_the_fuzzed_keys_are_the_documented_ones_and_each_can_be_placed():
    # test_docs holds the page equal to the parser; here every documented key has a place
    assert len(KEYS) > 50 and "train.epochs" in KEYS and "dataset.rows" in KEYS
    for key in KEYS:
        spec, path, _ = _place(key, 12345)
        node = spec
        for p in path.split("."):
            node = node[p]
        assert node == 12345, key


NASTY = [2**70, 2**63, -1, 0, math.nan, math.inf, -math.inf, "1e-3", "10", "", True, False, None, [], [2**70],
         {"x": 1}, 1e308]


@pytest.mark.parametrize("key", KEYS)
def test_every_key_with_every_kind_of_bad_value_is_valid_or_refused_naming_it(tmp_path, key):
    """The parser alone, every documented key against a fixed list of bad values (cheap: no dry run)."""
    for value in NASTY:
        _check_key(tmp_path, key, copy.deepcopy(value), dry_run=False)


def _spec_property(tmp_path_factory, max_examples: int):
    @settings(max_examples=max_examples, deadline=None, derandomize=max_examples < 1000,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(key=st.sampled_from(KEYS), value=VALUES)
    def prop(key, value):
        _check_key(tmp_path_factory.mktemp("spec"), key, value)

    prop()


def test_any_value_at_any_key_is_valid_or_refused_naming_it(tmp_path_factory):
    _spec_property(tmp_path_factory, 60)


@pytest.mark.slow
def test_any_value_at_any_key_is_valid_or_refused_naming_it_many_examples(tmp_path_factory):
    _spec_property(tmp_path_factory, 3000)


# -- the flags of fairdp run and fairdp search -------------------------------------------------------

def _flags(command: str) -> dict[str, bool]:
    """Each option of ``command``: whether it takes a value."""
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    return {a.option_strings[-1]: a.nargs != 0 for a in sub.choices[command]._actions
            if a.option_strings and "--help" not in a.option_strings}


# what the fuzz does with each flag; a new flag fails test_every_flag_is_fuzzed until it is added here
FLAGS = {
    "run": {"--results", "--address", "--seeds", "--epochs", "--dry-run", "--executor", "--checkpoint-every",
            "--repair", "--no-compact"},
    "search": {"--trials", "--results", "--address", "--mode", "--seeds", "--epochs", "--dry-run", "--executor",
               "--checkpoint-every", "--repair"},
}
FLAG_TEXT = st.one_of(
    st.text(max_size=12),
    st.integers(min_value=-2**80, max_value=2**80).map(str),
    st.sampled_from(["2**70", str(2**70), str(2**63), str(2**63 - 1), "-1", "0", "1", "nan", "inf", "-inf", "1e400",
                     "", ",", "0,0", "0,1", "1,x", " 3 ", "٣", "ray", "local", "packed", "per-config", "1e3"]),
)


def test_every_flag_is_fuzzed():
    for command, flags in FLAGS.items():
        assert set(_flags(command)) == flags, command


def _check_flag(tmp_path: Path, command: str, flag: str, text: str, repair: bool) -> None:
    spec = copy.deepcopy(BASE) | ({"search": SEARCH} if command == "search" else {})
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(spec))
    results = tmp_path / "results"
    argv = [command, str(study), "--dry-run"] + (["--repair"] if repair else [])
    if flag == "--results":  # inside this test's directory, whatever the text
        argv += ["--results", str(tmp_path / ("r" + re.sub(r"[/\\.\x00]", "_", text))), "--executor", "local"]
    elif flag == "--executor":
        argv += ["--results", str(results), "--executor", text]
    else:  # the local executor: --address is refused at once, no Ray and no network
        argv += ["--results", str(results), "--executor", "local", f"{flag}={text}"]
    code, errors = _cli(tmp_path, argv)
    assert code in (0, 2), (flag, text, code)
    if code == 2:
        assert len(errors) == 1, errors
        assert flag in errors[0] or flag.lstrip("-") in errors[0], (flag, text, errors[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"], (flag, text)


def _flag_property(tmp_path_factory, max_examples: int):
    choices = [(c, f) for c, flags in FLAGS.items() for f in sorted(flags) if _flags(c)[f]]

    @settings(max_examples=max_examples, deadline=None, derandomize=max_examples < 1000,
              suppress_health_check=[HealthCheck.too_slow])
    @given(which=st.sampled_from(choices), text=FLAG_TEXT, repair=st.booleans())
    def prop(which, text, repair):
        command, flag = which
        _check_flag(tmp_path_factory.mktemp("flag"), command, flag, text, repair)

    prop()


def test_any_flag_value_is_taken_or_refused_naming_the_flag(tmp_path_factory):
    _flag_property(tmp_path_factory, 40)


@pytest.mark.slow
def test_any_flag_value_is_taken_or_refused_naming_the_flag_many_examples(tmp_path_factory):
    _flag_property(tmp_path_factory, 2000)
