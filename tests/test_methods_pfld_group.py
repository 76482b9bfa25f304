"""PF-LD's ``private_group``: the group whose rows are the private part of the group term.

Either group gives the same mechanism (the groups' roles swap), the same sample law within
the chosen group, the same accountant events, and configs that do not name it keep their ids
and rows."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from fairdp.data import load_dataset
from fairdp.engine import TrainSettings
from fairdp.engine._shared import config_id
from fairdp.engine.contract import Batch, PackContext
from fairdp.errors import InputError
from fairdp.methods import RunInfo, get_method
from fairdp.methods._lagrangian import ARCHITECTURE, PrivateLagrangianStep
from fairdp.metrics import ProbeSettings
from fairdp.study import ResultStore, load_spec, parse_spec, study_columns
from fairdp.study.executors import Pack, StudyContext, run_pack
from tests.conftest import REPO, assert_input_error, run_main

DATA = {"rows": 400, "features": 6, "seed": 3}
CONFIG = {"fairness_notion": "dp", "eps": 1.0, "clip_primal": 1.0, "clip_dual": 5.0}
SETTINGS = TrainSettings(epochs=3, batch_size=64, dtype="float64")


@pytest.fixture(scope="module")
def data():
    return load_dataset("synthetic", **DATA)


def relabelled(data):
    """``data`` with every record's attribute reversed (s -> 1 - s), groups renamed to match."""
    return dataclasses.replace(data, s=(1 - data.s).astype(data.s.dtype), group_names=data.group_names[::-1])


def step_of(data, configs, ids, settings=SETTINGS, sigmas=(1.0, 20.0)):
    settings = get_method("pfld").effective_settings(settings)
    ctx = PackContext(data, configs, ids, 0, settings, ARCHITECTURE, torch.device("cpu"))
    return PrivateLagrangianStep(ctx, [sigmas] * len(configs))


def train_by_hand(step, epochs=3):
    """The step's own updates over fixed minibatches (rows in order) and its dual steps."""
    train = step.ctx.split("train")
    optimizer = step.optimizer()
    b = step.ctx.settings.batch_size
    for epoch in range(epochs):
        for start in range(0, len(train.y), b):
            index = torch.arange(start, min(start + b, len(train.y)))
            step.update(Batch(index, train.X[index], train.y[index], train.s[index]), optimizer)
        step.end_epoch(epoch)
    return step


# -- (a) the symmetry: group 0 private on s -> 1 - s is group 1 private on the data ----------

@pytest.mark.parametrize("notion", ["dp", "eo", "ap"])
def test_group_0_on_reversed_attributes_is_group_1_on_the_data(data, notion):
    """Every parameter, multiplier (groups' roles swapped), sign and release is bit for bit
    the same after three epochs of updates and dual steps, with the same streams."""
    config = {**CONFIG, "fairness_notion": notion}
    one = train_by_hand(step_of(data, [{**config, "private_group": 1}], ["sym"]))
    zero = train_by_hand(step_of(relabelled(data), [{**config, "private_group": 0}], ["sym"]))
    for p, q in zip(one.model.parameters(), zero.model.parameters()):
        assert torch.equal(p, q)
    assert torch.equal(one.lam, zero.lam.flip(2)) and torch.equal(one.sign, zero.sign.flip(2))
    assert torch.equal(one.count1, zero.count1) and torch.equal(one.released, zero.released)
    assert (one.lam > 0).any()  # the multipliers moved: the group term was trained on
    for a, b in zip(one.coefficients(), zero.coefficients()):
        assert torch.equal(a, b)


def test_rows_of_the_two_runs_are_the_same(data):
    """Through the method's train_pack (same config id, hence streams): the same predictions on
    every split, the same guarantee and the same accountant event."""
    method = get_method("pfld")
    settings = TrainSettings(epochs=2, batch_size=64)
    one = method.train_pack(data, [{**CONFIG, "private_group": 1}], 0, settings, config_ids=["sym"])
    zero = method.train_pack(relabelled(data), [{**CONFIG, "private_group": 0}], 0, settings, config_ids=["sym"])
    for split in one.predictions:
        np.testing.assert_array_equal(one.predictions[split], zero.predictions[split])
    assert one.privacy == zero.privacy and one.privacy_events == zero.privacy_events


def test_a_pack_of_both_groups_trains_each_config_as_alone(data):
    """Configs naming different groups in one pack: each draws its own group's sample (the
    pack draws among all rows and keeps each config's group) and trains as it would alone."""
    configs = [{**CONFIG, "private_group": 1}, {**CONFIG, "private_group": 0}, {**CONFIG, "fairness_notion": "eo"}]
    ids = ["mix-0", "mix-1", "mix-2"]
    pack = train_by_hand(step_of(data, configs, ids), epochs=2)
    for i, (config, cid) in enumerate(zip(configs, ids)):
        alone = train_by_hand(step_of(data, [config], [cid]), epochs=2)
        for p, q in zip(pack.model.parameters(), alone.model.parameters()):
            torch.testing.assert_close(p[i], q[0], rtol=1e-12, atol=1e-12)
        assert torch.equal(pack.lam[i], alone.lam[0]) and torch.equal(pack.count1[i], alone.count1[0])


def test_coefficients_are_the_decomposition_for_either_group(data):
    """The group term -sum_a w_a sum_{G_a} g(z), w_a = lambda_a sign_a / n_a, equals the public
    part -rho sum_P g(z) plus the private part -q kappa sum_{G_g} g(z), for g = 0 and g = 1:
    checked with a random vector g(z) per row against the decomposition's own sums."""
    gen = torch.Generator().manual_seed(0)
    s = data.split("train").s
    grad = torch.randn(len(s), 3, generator=gen, dtype=torch.float64)
    for g in (0, 1):
        step = step_of(data, [{**CONFIG, "private_group": g}], ["c"])
        step.lam[:] = torch.tensor([[0.7, 0.4], [0.0, 0.0]], dtype=torch.float64)
        step.sign[:] = torch.tensor([[1.0, -1.0], [0.0, 0.0]], dtype=torch.float64)
        step.count1[:] = torch.tensor([float((s == g).sum()) + 2.5, 0.0], dtype=torch.float64)
        n0, n1 = step._normalisers()
        assert float(n0[0, 0] + n1[0, 0]) == len(s)
        assert float((n1 if g == 1 else n0)[0, 0]) == float(step.count1[0, 0])  # the released one is g's
        w = step.lam[0, 0] * step.sign[0, 0] / torch.stack([n0[0, 0], n1[0, 0]])
        term = -(w[0] * grad[s == 0].sum(0) + w[1] * grad[s == 1].sum(0))
        rho, kappa = (c[0, 0] for c in step.coefficients())
        split = -rho * grad.sum(0) - step.q * kappa * grad[s == g].sum(0)
        torch.testing.assert_close(term, split, rtol=1e-12, atol=1e-15)
        assert float(rho) == float(w[1 - g])  # the public weight is the other group's


# -- (b) the private sample ---------------------------------------------------------------------

@pytest.mark.parametrize("g", [0, 1])
def test_the_private_sample_holds_group_g_rows_only_at_rate_q(data, g):
    """Over T draws of K configs, every sampled row is of group g, and the total count is a
    Binomial(T K n_g, q): within 6 standard deviations of its mean (a false alarm < 2e-9),
    while sampling among all rows would put it ~ (n - n_g) q T K above."""
    k, draws = 4, 100
    step = step_of(data, [{**CONFIG, "private_group": g}] * k, [f"s{i}" for i in range(k)])
    s = data.split("train").s
    n_g = int((s == g).sum())
    total = 0
    for _ in range(draws):
        index, valid = step.poisson_sample()
        assert bool((s[index[valid]] == g).all())
        assert bool((index[~valid] == 0).all())
        total += int(valid.sum())
    trials, q = draws * k * n_g, step.q
    mean, sd = trials * q, math.sqrt(trials * q * (1 - q))
    assert abs(total - mean) <= 6 * sd, (total, mean, sd)
    assert (len(s) - n_g) * q * draws * k > 12 * sd  # the check tells the two apart


# -- (c) the accountant ---------------------------------------------------------------------------

@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_the_accountant_sees_the_same_mechanism_for_either_group(data, accountant):
    method = get_method("pfld")
    run = RunInfo.of(data, dataclasses.replace(SETTINGS, accountant=accountant), ARCHITECTURE.representation_dim)
    zero, one = ({**CONFIG, "private_group": g} for g in (0, 1))
    assert method.noise_multipliers(zero, run) == method.noise_multipliers(one, run) == \
        method.noise_multipliers(CONFIG, run)
    assert method.dp_event(zero, run) == method.dp_event(one, run)
    assert method.event_json(zero, run) == method.event_json(one, run) == method.event_json(CONFIG, run)
    assert method.privacy(zero, run) == method.privacy(one, run)
    assert method.grid_events(data, [zero, one, CONFIG], SETTINGS)[:2] == method.grid_events(data, [one, one], SETTINGS)


# -- (d) configs that do not name it: the ids and rows they had ------------------------------------

def test_configs_without_the_key_keep_their_ids():
    method = get_method("pfld")
    assert method.config_id(CONFIG) == config_id("pfld", CONFIG) == "ec8f51546f4b61eb"  # the id before the key
    assert method.config_id({**CONFIG, "private_group": 1}) == method.config_id(CONFIG)  # the default, named
    assert method.config_id({**CONFIG, "private_group": 0}) != method.config_id(CONFIG)
    assert method.validate_config(CONFIG)["private_group"] == 1


@pytest.mark.parametrize("study", ["pfld_adult", "pfld_compas", "pfld_adult_sensitivity"])
def test_committed_studies_plan_the_configs_they_stored(study):
    """The studies' grids (which do not name the key) give exactly the PF-LD config ids their
    committed plans stored before the key existed: a resume finds every row and reruns none."""
    spec = load_spec(REPO / "studies" / f"{study}.yaml")
    method = get_method("pfld")
    configs = next(p.configs for p in spec.methods if p.name == "pfld")
    plan = pd.read_parquet(REPO / "results" / f"{spec.name}.plan.parquet")
    assert {method.config_id(c) for c in configs} == set(plan.loc[plan["method"] == "pfld", "config_id"])
    assert all(c["private_group"] == 1 for c in configs)


def test_a_config_naming_the_default_trains_the_rows_of_one_that_does_not(data, tmp_path):
    """The same id, hence streams and rows; stored rows record the group trained (1 where the
    config does not name it), and group 0 trains other rows."""
    configs = ({**CONFIG}, {**CONFIG, "private_group": 1}, {**CONFIG, "private_group": 0})
    method = get_method("pfld")
    settings = TrainSettings(epochs=2, batch_size=64)
    results = [method.train_pack(data, [c], 0, settings) for c in configs]
    for split in results[0].predictions:
        np.testing.assert_array_equal(results[0].predictions[split], results[1].predictions[split])
    assert results[0].privacy_events == results[2].privacy_events
    ctx = StudyContext(study="group", dataset="synthetic", dataset_options=DATA, train=settings, leakage=False,
                       mdl=False, probe=ProbeSettings(), results=str(tmp_path), cpus_per_trial=1,
                       columns=tuple(study_columns(["pfld"])))
    for c in (configs[0], configs[2]):
        run_pack(ctx, Pack("pfld", 0, (c,), (method.config_id(c),)))
    df, corrupt = ResultStore(tmp_path).read()
    assert corrupt == [] and (df["status"] == "ok").all()
    stored = df.set_index("config_id")["private_group"]
    assert stored[method.config_id(configs[0])] == 1.0 and stored[method.config_id(configs[2])] == 0.0


# -- (e) bad values, one line naming the field -------------------------------------------------------

@pytest.mark.parametrize("value", [2, -1, 0.5, True, "0", None, math.nan])
def test_a_bad_group_is_refused_naming_the_key(data, value):
    with pytest.raises(InputError) as err:
        get_method("pfld").train_pack(data, [{**CONFIG, "private_group": value}], 0, SETTINGS)
    assert str(err.value).startswith("config.private_group:") and "\n" not in str(err.value)


SPEC = {"name": "group", "dataset": {"name": "synthetic", "rows": 400, "features": 6}, "seeds": [0],
        "train": {"epochs": 1, "batch_size": 100}, "evaluate": {"leakage": False, "mdl": False},
        "methods": {"pfld": {"grid": {"fairness_notion": ["dp"], "eps": [1.0], "clip_primal": [1.0],
                                      "clip_dual": [5.0]}}}}


def with_group(value):
    return {**SPEC, "methods": {"pfld": {"grid": {**SPEC["methods"]["pfld"]["grid"], "private_group": value}}}}


def test_a_grid_sweeps_the_group_and_a_search_may_leave_it_out():
    configs = next(p.configs for p in parse_spec(with_group([0, 1])).methods)
    assert [c["private_group"] for c in configs] == [0, 1]
    search = {**SPEC, "search": {"method": "pfld", "objectives": {"valid_accuracy": "max"}, "trials": 2,
                                 "space": {"eps": {"low": 0.5, "high": 2.0}},
                                 "fixed": {"fairness_notion": "dp", "clip_primal": 1.0, "clip_dual": 5.0}}}
    assert "private_group" not in parse_spec(search).search.fixed
    fixed = {**search["search"], "fixed": {**search["search"]["fixed"], "private_group": 0}}
    assert parse_spec({**search, "search": fixed}).search.fixed["private_group"] == 0
    with pytest.raises(InputError, match=r"^search\.fixed\.private_group: must be <= 1"):
        parse_spec({**search, "search": {**fixed, "fixed": {**fixed["fixed"], "private_group": 3}}})


@pytest.mark.parametrize(("value", "field"), [(2, "methods.pfld.grid.private_group:"),
                                              ([0, "1"], "methods.pfld.grid.private_group[1]:"),
                                              ([1.5], "methods.pfld.grid.private_group[0]:")])
def test_a_bad_group_in_a_study_is_one_line_naming_the_field(value, field):
    with pytest.raises(InputError) as err:
        parse_spec(with_group(value))
    assert str(err.value).startswith(field) and "\n" not in str(err.value)


def test_a_bad_group_exits_2_before_writing_anything(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(with_group([0, 2])))
    line = assert_input_error(run_main("run", str(path), "--results", str(tmp_path / "r"), "--executor", "local"),
                              "methods.pfld.grid.private_group[1]")
    assert "must be <= 1" in line and json.dumps(2) in line
    assert not (tmp_path / "r").exists()
