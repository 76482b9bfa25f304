"""Fuzzed, not sampled: a study over a module of the user's drawn from a family of well-formed
and broken modules, with random keywords, either trains (every row stored, status ok) or is
refused in one line with exit 2 and nothing written. A few examples in the fast set, many in
the slow one."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairdp.cli import main
from fairdp.study import ResultStore

FAMILIES = '''
import torch
import torch.nn.functional as F
from torch import nn


class Centred(nn.Linear):
    def forward(self, x):
        return super().forward(x - x.mean(0))


class NoParameters(nn.Module):
    def __init__(self, o):
        super().__init__()
        self.o = o

    def forward(self, x):
        return x[:, :1].expand(-1, self.o) * 2


class Cell(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.cell = nn.GRUCell(i, o)

    def forward(self, x):
        return self.cell(x)


class FunctionalDropout(nn.Linear):
    def forward(self, x):
        return super().forward(F.dropout(x, 0.5, self.training))


class Double(nn.Linear):
    def forward(self, x):
        return super().forward(x).double()


def act(name):
    return {"relu": nn.ReLU(), "tanh": nn.Tanh(), "gelu": nn.GELU()}[name]


def mlp(i, o, width=8, p=0.0, act_name="relu"):
    return nn.Sequential(nn.Linear(i, width), act(act_name), nn.Dropout(p), nn.Linear(width, o))


def normed(i, o, width=8, p=0.0, act_name="relu"):
    return nn.Sequential(nn.Linear(i, width), nn.LayerNorm(width), act(act_name), nn.Dropout(p),
                         nn.Linear(width, o))


def grouped(i, o, width=8, p=0.0, act_name="relu"):
    return nn.Sequential(nn.Linear(i, width), nn.GroupNorm(1, width), act(act_name), nn.Linear(width, o))


def batchnorm(i, o, width=8, p=0.0, act_name="relu"):
    return nn.Sequential(nn.Linear(i, width), nn.BatchNorm1d(width), act(act_name), nn.Linear(width, o))


def centred(i, o, width=8, p=0.0, act_name="relu"):
    return nn.Sequential(Centred(i, width), act(act_name), nn.Linear(width, o))


def no_parameters(i, o, width=8, p=0.0, act_name="relu"):
    return NoParameters(o)


def gru_cell(i, o, width=8, p=0.0, act_name="relu"):
    return Cell(i, o)


def functional_dropout(i, o, width=8, p=0.0, act_name="relu"):
    return FunctionalDropout(i, o)


def float64_out(i, o, width=8, p=0.0, act_name="relu"):
    return Double(i, o)


def lazy(i, o, width=8, p=0.0, act_name="relu"):
    return nn.Sequential(nn.LazyLinear(width), act(act_name), nn.Linear(width, o))


def wrong_out(i, o, width=8, p=0.0, act_name="relu"):
    return nn.Sequential(nn.Linear(i, width), act(act_name), nn.Linear(width, o + 1))


def raises(i, o, width=8, p=0.0, act_name="relu"):
    raise ValueError(f"width {width} does not divide the input")


def not_a_module(i, o, width=8, p=0.0, act_name="relu"):
    return torch.zeros(i, o)
'''

WELL_FORMED = {"mlp", "normed", "grouped"}
# refused whatever the method and keywords: they cannot be packed, trained or shaped
ALWAYS_REFUSED = {"batchnorm", "no_parameters", "functional_dropout", "float64_out", "lazy", "wrong_out", "raises",
                  "not_a_module"}
FACTORIES = sorted(WELL_FORMED | ALWAYS_REFUSED | {"centred", "gru_cell"})
GRIDS = {"unconstrained": {}, "federate": {"lam": [0.5], "eps": [4.0]}, "dpsgd": {"eps": [4.0], "clip_primal": [1.0]}}


def _outcome(folder, factory: str, keywords: dict, role: str, method: str, capsys) -> tuple[int, str]:
    (folder / "fam.py").write_text(FAMILIES)
    roles = ("encoder", "classifier") if method == "dpsgd" else ("encoder", "classifier", "adversary") \
        if method == "federate" else ("encoder", "classifier")
    role = role if role in roles else "encoder"
    study = {"name": "fuzz", "dataset": {"name": "synthetic", "rows": 300, "features": 5}, "seeds": [0],
             "train": {"epochs": 1, "batch_size": 100}, "evaluate": {"leakage": False, "mdl": False},
             "architecture": {"encoder": [6], "models": {role: {"factory": f"fam.py:{factory}", **keywords}}},
             "methods": {method: {"grid": GRIDS[method]}}}
    (folder / "s.yaml").write_text(yaml.safe_dump(study))
    capsys.readouterr()
    code = main(["run", str(folder / "s.yaml"), "--results", str(folder / "r"), "--executor", "local"])
    return code, capsys.readouterr().err


examples = st.fixed_dictionaries({
    "factory": st.sampled_from(FACTORIES),
    "keywords": st.fixed_dictionaries({}, optional={
        "width": st.integers(-1, 12), "p": st.floats(-0.5, 1.5, allow_nan=False),
        "act_name": st.sampled_from(["relu", "tanh", "gelu", "swish"])}),
    "role": st.sampled_from(["encoder", "classifier", "adversary"]),
    "method": st.sampled_from(sorted(GRIDS)),
})


def _check(tmp_path_factory, example, capsys) -> None:
    folder = tmp_path_factory.mktemp("fuzz")
    code, err = _outcome(folder, capsys=capsys, **example)
    written = list((folder / "r").rglob("*.parquet")) if (folder / "r").exists() else []
    errors = [ln for ln in err.splitlines() if ln.startswith("fairdp: error:")]
    assert code in (0, 2), (example, code, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    if code == 2:
        assert len(errors) == 1 and not written, (example, err)
    else:
        rows, _ = ResultStore(folder / "r").read()
        assert len(rows) == 1 and (rows["status"] == "ok").all(), (example, rows.get("error"))
    kw = example["keywords"]
    sound = kw.get("width", 8) >= 1 and 0 <= kw.get("p", 0.0) < 1 and kw.get("act_name", "relu") != "swish"
    if example["factory"] in ALWAYS_REFUSED:
        assert code == 2, example
    # GroupNorm of one channel normalises one value: no batch of one row (per-sample gradients) trains it
    if example["factory"] in WELL_FORMED and sound and not (example["factory"] == "grouped" and kw.get("width", 8) < 2):
        assert code == 0, (example, err[-2000:])
    if example["factory"] == "centred" and example["method"] == "dpsgd" and sound:
        assert code == 2 and "in training mode" in errors[0], example


@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(example=examples)
def test_a_module_drawn_from_the_family_trains_or_is_refused_in_one_line(tmp_path_factory, capsys, example):
    _check(tmp_path_factory, example, capsys)


@pytest.mark.slow
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(example=examples)
def test_many_modules_drawn_from_the_family_train_or_are_refused_in_one_line(tmp_path_factory, capsys, example):
    _check(tmp_path_factory, example, capsys)
