"""Every registered method through the same checks (optuna-style contract test), the example
plugin (examples/gap_reg.py) included:

(a) a config trained in a pack gives what it gives alone (float64), and a pack reproduces;
(b) its rows go through evaluate_pack into a ResultStore and read back with every declared
    hyperparameter as a column;
(c) the privacy hook's (eps, delta) per config matches an independent computation: the
    noise the method actually injects, measured, or the accountant's events composed here;
(d) bad configs are refused with a one-line error naming the key.
"""

import dataclasses
import math

import dp_accounting
import numpy as np
import pytest
import torch
from dp_accounting.rdp import RdpAccountant

from fairdp.data import load_dataset
from fairdp.engine import CheckpointFile, TrainSettings, checkpointing
from fairdp.errors import InputError
from fairdp.methods import RunInfo, get_method, load_plugins, method_names
from fairdp.metrics import ProbeSettings
from fairdp.privacy import l1_normalize, minmax_normalize
from fairdp.study import Pack, ResultStore, StudyContext, run_pack, study_columns
from tests.conftest import REPO

PLUGINS = tuple(load_plugins([str(REPO / "examples" / "gap_reg.py")]))  # registered before parametrizing

DESIGN_METHODS = {"random", "unconstrained", "noise", "dpnr", "adversarial", "multi_adversarial",
                  "inlp", "federate", "cape", "fld", "pfld", "reductions", "private_reductions"}
DATA_OPTIONS = {"rows": 1500, "features": 12, "seed": 1}
SETTINGS = TrainSettings(epochs=2, batch_size=256, dtype="float64")


@pytest.fixture(scope="module")
def data():
    return load_dataset("synthetic", **DATA_OPTIONS)


def configs_of(name: str, data) -> list[dict]:
    """Three configs spread over the method's paper grid (fewer if the grid is smaller)."""
    method = get_method(name)
    grid = method.expand(method.paper_grid(data.name))
    return [grid[i] for i in sorted({0, len(grid) // 2, len(grid) - 1})]


@pytest.fixture(scope="module")
def packs(data):
    """Each method's pack of ``configs_of``, trained once as one chunk in float64."""
    cache = {}

    def get(name):
        if name not in cache:
            configs = configs_of(name, data)
            settings = TrainSettings(epochs=2, batch_size=256, dtype="float64", config_chunk=len(configs))
            cache[name] = get_method(name).train_pack(data, configs, seed=0, settings=settings)
        return cache[name]

    return get


def test_registry_has_the_design_names_and_the_plugin():
    assert DESIGN_METHODS | {"gap_reg"} <= set(method_names())


# -- (a) packing is an execution detail ------------------------------------------------------

@pytest.mark.parametrize("name", method_names())
def test_a_pack_gives_each_config_what_it_gives_alone(name, data, packs):
    method = get_method(name)
    configs = configs_of(name, data)
    packed = packs(name)
    k = len(configs)
    dim = method.representation_dim(data)
    again = method.train_pack(data, configs, seed=0, settings=TrainSettings(epochs=2, batch_size=256,
                                                                              dtype="float64", config_chunk=k))
    for split in ("valid", "test"):
        n = len(data.splits[split])
        preds, reps = packed.predictions[split], packed.representations[split]
        assert preds.shape == (k, n) and preds.min() >= 0 and preds.max() < data.n_classes
        assert reps.shape == (k, n, dim) and np.isfinite(reps).all()
        np.testing.assert_array_equal(preds, again.predictions[split])  # same seed, same pack: bitwise
        np.testing.assert_array_equal(reps, again.representations[split])
    assert packed.best_epoch.shape == (k,)
    if packed.valid_accuracy_history.shape[1]:  # trained by epochs: the kept epoch is one of them
        assert ((packed.best_epoch >= 1) & (packed.best_epoch <= 2)).all()
    # Pack and alone agree to rounding after one epoch; later, rounding that training amplifies
    # can move them apart (a different best epoch by epoch 30, measured on CPU and CUDA alike),
    # which test_engine's statistical test covers.
    one_epoch = dataclasses.replace(SETTINGS, epochs=1)
    packed_once = method.train_pack(data, configs, seed=0, settings=one_epoch)
    for i, cfg in enumerate(configs):
        alone = method.train_pack(data, [cfg], seed=0, settings=one_epoch)
        assert packed_once.best_epoch[i] == alone.best_epoch[0]
        np.testing.assert_allclose(packed_once.valid_accuracy_history[i], alone.valid_accuracy_history[0])
        np.testing.assert_array_equal(packed_once.predictions["test"][i], alone.predictions["test"][0])
        np.testing.assert_allclose(packed_once.representations["test"][i], alone.representations["test"][0],
                                   rtol=1e-9, atol=1e-9)
        assert packed_once.privacy[i] == alone.privacy[0]


class MemoryCheckpoint(CheckpointFile):
    """A checkpoint file in memory; counts its writes."""

    name = "memory"

    def __init__(self):
        self.blob, self.writes = None, 0

    def read(self):
        return self.blob

    def write(self, blob):
        self.blob, self.writes = blob, self.writes + 1

    def drop(self):
        self.blob = None


class Killed(Exception):
    pass


def assert_same_pack(got, want):
    """Two PackResults equal bit for bit in everything a row is made from."""
    np.testing.assert_array_equal(got.best_epoch, want.best_epoch)
    np.testing.assert_array_equal(got.valid_accuracy_history, want.valid_accuracy_history)
    for split in want.predictions:
        np.testing.assert_array_equal(got.predictions[split], want.predictions[split])
        np.testing.assert_array_equal(got.representations[split], want.representations[split])
    assert sorted(got.diagnostics) == sorted(want.diagnostics)
    for key in want.diagnostics:
        np.testing.assert_array_equal(got.diagnostics[key], want.diagnostics[key])
    assert got.privacy == want.privacy and got.privacy_events == want.privacy_events


@pytest.mark.parametrize("name", method_names())
def test_a_pack_killed_mid_training_resumes_from_its_checkpoint_bit_for_bit(name, data, packs):
    """A run killed after epoch 1 (of 2) and started again continues from the saved epoch and
    computes exactly what the uninterrupted pack did: same streams, moments, best epochs."""
    method = get_method(name)
    configs = configs_of(name, data)
    settings = TrainSettings(epochs=2, batch_size=256, dtype="float64", config_chunk=len(configs))
    file = MemoryCheckpoint()
    seen = []

    def kill_at_epoch_2(report):
        seen.append(report.epoch)
        if report.epoch == 2:
            raise Killed

    killed = False
    with checkpointing(file, every_s=0):
        try:
            method.train_pack(data, configs, seed=0, settings=settings, callback=kill_at_epoch_2)
        except Killed:
            killed = True
    if not seen:
        assert file.writes == 0 and not killed
        pytest.skip(f"{name} does not train by epochs: nothing to checkpoint")
    assert killed and file.writes == 1  # saved after epoch 1, killed in epoch 2
    resumed_epochs = []
    with checkpointing(file, every_s=0):
        resumed = method.train_pack(data, configs, seed=0, settings=settings,
                                    callback=lambda r: resumed_epochs.append(r.epoch))
    assert resumed_epochs == [2]  # epoch 1 came from the checkpoint
    assert resumed.resumed_s > 0
    assert_same_pack(resumed, packs(name))


# -- (b) rows, with every declared hyperparameter, through the store --------------------------

@pytest.mark.parametrize("name", method_names())
def test_rows_reach_the_store_with_every_hyperparameter_as_a_column(name, data, tmp_path):
    method = get_method(name)
    configs = configs_of(name, data)
    ctx = StudyContext(study="contract", dataset="synthetic", dataset_options=DATA_OPTIONS,
                       train=TrainSettings(epochs=2, batch_size=256), leakage=True, mdl=False,
                       probe=ProbeSettings(max_epochs=5), results=str(tmp_path), cpus_per_trial=1,
                       plugins=PLUGINS, columns=tuple(study_columns([name])))
    pack = Pack(name, 0, tuple(configs), tuple(method.config_id(c) for c in configs))
    rows = run_pack(ctx, pack)
    df, corrupt = ResultStore(tmp_path).read()
    assert corrupt == [] and len(df) == len(configs) == len(rows)
    assert (df["status"] == "ok").all() and (df["method"] == name).all()
    df = df.set_index("config_id").loc[list(pack.config_ids)]
    for h in method.hyperparams:
        assert h.name in df.columns, h.name
        stored = df[h.name].tolist()
        assert stored == [h.to_column(c[h.name]) for c in configs], (h.name, stored)
    for col in ("valid_accuracy", "test_accuracy", "valid_dp_gap", "leakage"):
        assert df[col].between(0, 100).all(), col
    # the rows' guarantee is the hook's, for the run's shape
    run = RunInfo.of(data, ctx.train, method.representation_dim(data))
    for (eps, delta), cfg in zip(df[["eps_formal", "delta"]].itertuples(index=False), configs):
        assert (eps, delta) == tuple(method.privacy(cfg, run))


# -- (c) the privacy hook against an independent computation ----------------------------------
# Each returns, per config, (eps, delta, relative tolerance): measured noise is checked within
# five standard errors of its estimator, the accountant's events to rounding.

def _not_private(name, data, result, run):
    return [(math.inf, 0.0, 0.0)] * len(result.configs)


def _injected_noise(result, data, normalize):
    """Per config: the representation minus its noise-free value (the trained encoder's output,
    normalised as the mechanism does), i.e. the noise the method actually added."""
    x = torch.as_tensor(data.split("test").X, dtype=torch.float64)
    with torch.no_grad():
        clean = normalize(result.model.encoder(x))
    return result.representations["test"] - clean.numpy()


def _laplace_eps(noise, sensitivity):
    """eps = sensitivity / b for Laplace(b) noise, b measured as mean |noise| (E|L| = b, sd b)."""
    return [(sensitivity / float(np.abs(n).mean()), 0.0, 5 / math.sqrt(n.size)) for n in noise]


def _measured_laplace(name, data, result, run):
    """An L1-normalised row moves by at most 2 in L1 norm when the input changes, so
    Laplace(b) noise per entry gives eps = 2 / b."""
    return _laplace_eps(_injected_noise(result, data, l1_normalize), 2.0)


def _measured_minmax(name, data, result, run):
    """Min-max rows lie in [0, 1]^D, so one input change moves them by up to D in L1 norm:
    eps = D / b for the measured Laplace scale b (DPNR claims 1 / b)."""
    return _laplace_eps(_injected_noise(result, data, minmax_normalize), run.representation_dim)


def _measured_randomized_response(name, data, result, run):
    """k-ary randomized response keeps a code with probability pi and moves it to each other
    code with (1 - pi) / (k - 1): eps = ln(pi (k - 1) / (1 - pi)), pi measured on 400,000 draws."""
    from fairdp.methods.private_reductions import randomized_response

    k, n = data.n_groups, 400_000
    s = np.repeat(np.arange(k), n // k)
    out = []
    for cfg in result.configs:
        kept = float((randomized_response(s, k, cfg["eps"], np.random.default_rng(0)) == s).mean())
        se = math.sqrt(kept * (1 - kept) / n) / (kept * (1 - kept))  # delta method: d eps / d pi = 1/(pi(1-pi))
        eps = math.log(kept * (k - 1) / (1 - kept))
        out.append((eps, 0.0, 5 * se / eps))
    return out


def _rdp_eps(events, delta):
    accountant = RdpAccountant()
    for event, count in events:
        accountant.compose(event, count)
    return accountant.get_epsilon(delta)


def _accountant_pfld(name, data, result, run):
    """Theorem 3, written out here: T ceil(n / B) Poisson-sampled Gaussian primal steps
    (q = B / n, multiplier sigma_p) and T Gaussian dual steps (multiplier sigma_d)."""
    method, delta = get_method(name), 1e-5
    out = []
    for cfg in result.configs:
        sp, sd = method.noise_multipliers(cfg, run)
        steps = run.epochs * math.ceil(run.n / run.batch_size)
        primal = dp_accounting.PoissonSampledDpEvent(run.batch_size / run.n, dp_accounting.GaussianDpEvent(sp))
        eps = _rdp_eps([(primal, steps), (dp_accounting.GaussianDpEvent(sd), run.epochs)], delta)
        out.append((eps, delta, 1e-9))
    return out


def _accountant_dpsgd(name, data, result, run):
    """T ceil(n / B) Poisson-sampled Gaussian steps (q = B / n, multiplier sigma)."""
    method, delta = get_method(name), 1e-5
    out = []
    for cfg in result.configs:
        sigma = method.noise_multiplier(cfg, run)
        steps = run.epochs * math.ceil(run.n / run.batch_size)
        step = dp_accounting.PoissonSampledDpEvent(run.batch_size / run.n, dp_accounting.GaussianDpEvent(sigma))
        out.append((_rdp_eps([(step, steps)], delta), delta, 1e-9))
    return out


INDEPENDENT_PRIVACY = {
    "random": _not_private, "unconstrained": _not_private, "adversarial": _not_private,
    "multi_adversarial": _not_private, "inlp": _not_private, "fld": _not_private, "reductions": _not_private,
    "gap_reg": _not_private,
    "noise": _measured_laplace, "federate": _measured_laplace, "cape": _measured_laplace,
    "dpnr": _measured_minmax,
    "private_reductions": _measured_randomized_response,
    "pfld": _accountant_pfld, "dpsgd": _accountant_dpsgd,
}


def test_every_registered_method_has_an_independent_privacy_check():
    assert set(method_names()) <= set(INDEPENDENT_PRIVACY), "add the new method's computation above"


@pytest.mark.parametrize("name", method_names())
def test_privacy_hook_matches_an_independent_computation(name, data, packs):
    method = get_method(name)
    result = packs(name)
    run = RunInfo.of(data, SETTINGS, method.representation_dim(data))
    expected = INDEPENDENT_PRIVACY[name](name, data, result, run)
    assert len(result.privacy) == len(result.configs) == len(expected)
    for (eps, delta), (want_eps, want_delta, rel) in zip(result.privacy, expected):
        assert delta == want_delta
        if math.isinf(want_eps):
            assert math.isinf(eps)
        else:
            assert eps == pytest.approx(want_eps, rel=rel), (eps, want_eps)
    # a private method says what its eps protects, so figures never mix local and central eps unlabelled
    private = any(math.isfinite(eps) for eps, _ in result.privacy)
    assert (method.privacy_scope in ("local", "central")) if private else method.privacy_scope is None
    if method.privacy_scope == "local":
        assert all(delta == 0.0 for _, delta in result.privacy)  # pure eps-LDP


@pytest.mark.parametrize("name", method_names())
def test_a_stored_privacy_event_is_the_guarantee_the_row_reports(name, data, packs):
    """What eps_released composes: a method with an accountant's guarantee stores its event, and
    the event is worth the row's eps (PF-LD and DP-SGD by the accountant; k-RR by its
    keep/other probability ratio, written out here); other methods store none."""
    from fairdp.privacy import composed_epsilon, event_from_json

    method = get_method(name)
    result = packs(name)
    assert len(result.privacy_events) == len(result.configs)
    for (eps, delta), blob in zip(result.privacy, result.privacy_events):
        if method.privacy_scope != "central" and name != "private_reductions":
            assert blob is None
            continue
        event, relation = event_from_json(blob)
        if name == "private_reductions":
            k, p = event.num_buckets, event.noise_parameter
            assert relation == "replace_one" and k == data.n_groups
            assert math.log((1 - p + p / k) / (p / k)) == pytest.approx(eps, rel=1e-9)
        else:  # DP-SGD protects a record, PF-LD one record's attribute (Definition 1)
            assert relation == {"pfld": "replace_attribute"}.get(name, "add_or_remove_one")
            assert composed_epsilon([event], relation, delta) == pytest.approx(eps, rel=1e-12)


# -- the optimiser a method declares is the one its step builds --------------------------------

@pytest.mark.parametrize("name", method_names())
def test_the_declared_optimizer_and_learning_rate_are_the_ones_used(name, data):
    from fairdp.engine import PackContext
    from fairdp.methods import NeuralMethod

    method = get_method(name)
    if not isinstance(method, NeuralMethod):
        assert method.optimizer is None and method.effective_settings(SETTINGS).lr is None
        return
    expected = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[method.optimizer]
    for lr, want in ((None, method.default_lr), (0.0123, 0.0123)):
        settings = method.effective_settings(TrainSettings(epochs=1, batch_size=256, lr=lr))
        ctx = PackContext(data, configs_of(name, data)[:1], ["x"], 0, settings,
                          method.default_architecture(data.name), torch.device("cpu"))
        opt = method.make_step(ctx).optimizer()
        assert type(opt) is expected and opt.param_groups[0]["lr"] == want


# -- (d) bad configs --------------------------------------------------------------------------

def _bad_values(h):
    if h.choices is not None:
        return ["not-a-choice"]
    bad = ["text", math.nan]
    if h.low is not None:
        bad.append(h.low if h.low_open else h.low - 1)
    if h.high is not None:
        bad.append(h.high + 1)
    if h.integer:
        bad.append((h.low or 0) + 1.5)
    return bad


@pytest.mark.parametrize("name", method_names())
def test_bad_configs_are_refused_naming_the_key(name, data):
    method = get_method(name)
    good = configs_of(name, data)[0]
    cases = [({**good, "no_such_key": 1.0}, "config.no_such_key")]
    for h in method.hyperparams:
        cases.append(({k: v for k, v in good.items() if k != h.name}, f"config.{h.name}"))
        cases += [({**good, h.name: v}, f"config.{h.name}") for v in _bad_values(h)]
    for config, key in cases:
        with pytest.raises(InputError) as err:
            method.train_pack(data, [config], seed=0, settings=SETTINGS)
        message = str(err.value)
        assert message.startswith(key + ":") and "\n" not in message, (config, message)


def test_paper_grids_have_the_papers_sizes():
    assert len(get_method("federate").expand(get_method("federate").paper_grid("adult"))) == 150
    assert len(get_method("multi_adversarial").expand(get_method("multi_adversarial").paper_grid("adult"))) == 150
    lams = get_method("adversarial").paper_grid("adult")["lam"]
    assert len(lams) == 15 and lams[0] == 0.1 and lams[-1] == 2.9
    assert get_method("noise").paper_grid("adult")["eps"] == [8, 9, 10, 11, 12, 13, 14, 15, 16, 20]
    assert get_method("inlp").paper_grid("twitter")["iterations"] == [2, 3, 4, 5, 6, 7]
    assert get_method("inlp").paper_grid("bios")["iterations"][0] == 15
    assert len(get_method("cape").expand(get_method("cape").paper_grid("text"))) == 16


def test_formal_privacy_columns():
    run = RunInfo(n=1000, batch_size=100, epochs=2, representation_dim=300, n_groups=2)
    assert get_method("federate").privacy({"lam": 1.0, "eps": 8.0}, run) == (8.0, 0.0)
    assert get_method("noise").privacy({"eps": 10.0}, run) == (10.0, 0.0)
    # DPNR's published eps is off by the representation size D (FEDERATE appendix C).
    assert get_method("dpnr").privacy({"eps": 0.5}, run) == (150.0, 0.0)
    assert get_method("adversarial").privacy({"lam": 1.0}, run)[0] == float("inf")
