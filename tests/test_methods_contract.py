"""fairdp's own methods, and the example plugin (examples/gap_reg.py), through the method
contract (``fairdp.testing.method_contract``: packing, checkpoints, rows, optimiser, bad
configs), plus what only fairdp can check of its own methods: the privacy hook's (eps, delta)
per config against an independent computation (the noise the method actually injects,
measured, or the accountant's events composed here), the stored events, the papers' grids.
"""

import importlib
import math
import os
import sys

import dp_accounting
import numpy as np
import pytest
import torch
from dp_accounting.rdp import RdpAccountant

from fairdp.methods import RunInfo, get_method, method_names
from fairdp.privacy import l1_normalize, minmax_normalize
from tests.conftest import REPO

os.environ["FAIRDP_CHECK_PLUGINS"] = str(REPO / "examples" / "gap_reg.py")
_IMPORTED_BEFORE = "fairdp.testing.method_contract" in sys.modules
from fairdp.testing import method_contract  # noqa: E402 - after the plugin is named: the checks list it

if _IMPORTED_BEFORE:  # by a test module collected earlier, before the plugin was named: list the methods again
    method_contract = importlib.reload(method_contract)

del os.environ["FAIRDP_CHECK_PLUGINS"]
SETTINGS = method_contract.SETTINGS
# the contract's checks and fixtures, collected here for every method, the plugin included
globals().update({k: v for k, v in vars(method_contract).items() if k.startswith("test_") or k in ("data", "packs")})

# the module's shared packs (``packs``: each method's, trained once) on one xdist worker, once
pytestmark = pytest.mark.xdist_group("methods_contract")

DESIGN_METHODS = {"random", "unconstrained", "noise", "dpnr", "adversarial", "multi_adversarial",
                  "inlp", "federate", "cape", "fld", "pfld", "reductions", "private_reductions"}


def test_registry_has_the_design_names_and_the_plugin():
    assert DESIGN_METHODS | {"gap_reg"} <= set(method_names())


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


def _accountant_adaptive_clipping(name, data, result, run):
    """DPSGD-Global-Adapt and DPSGD-F: each of T ceil(n / B) steps releases the clipped sum
    (multiplier sigma) and the count(s) (multiplier sigma_c) from one Poisson sample (q = B / n):
    written here as a Poisson-sampled composition of the two Gaussians, which dp-accounting's RDP
    accountant reduces itself; the count's multiplier is count_noise_ratio times the gradient's."""
    method, delta = get_method(name), 1e-5
    out = []
    for cfg in result.configs:
        sigma, sigma_count = method.noise_multipliers(cfg, run)
        assert sigma_count == pytest.approx(cfg["count_noise_ratio"] * sigma, rel=1e-12)
        steps = run.epochs * math.ceil(run.n / run.batch_size)
        # floats: dp-accounting reads an int multiplier inside a composition as a wrong event
        pair = dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(float(sigma)),
                                              dp_accounting.GaussianDpEvent(float(sigma_count))])
        step = dp_accounting.PoissonSampledDpEvent(run.batch_size / run.n, pair)
        eps = _rdp_eps([(step, steps)], delta)
        assert eps <= cfg["eps"] * (1 + 1e-9)  # calibrated to the target
        out.append((eps, delta, 1e-9))
    return out


def _accountant_dp_fermi(name, data, result, run):
    """DP-FERMI: one Gaussian release of the group counts (multiplier sigma_count), then T ceil(n / B)
    steps, each releasing the theta sum (multiplier sigma_theta) and the W sum (multiplier sigma_w)
    of one Poisson sample (q = B / n): written here as a Poisson-sampled composition of the two
    Gaussians, which dp-accounting's RDP accountant reduces itself."""
    method, delta = get_method(name), 1e-5
    out = []
    for cfg in result.configs:
        s_theta, s_w, s_count = (float(s) for s in method.noise_multipliers(cfg, run))
        assert s_theta == s_w  # the paper's one multiplier for both steps
        steps = run.epochs * math.ceil(run.n / run.batch_size)
        pair = dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(s_theta),
                                              dp_accounting.GaussianDpEvent(s_w)])
        step = dp_accounting.PoissonSampledDpEvent(run.batch_size / run.n, pair)
        eps = _rdp_eps([(dp_accounting.GaussianDpEvent(s_count), 1), (step, steps)], delta)
        assert eps <= cfg["eps"] * (1 + 1e-9)  # calibrated to the target
        out.append((eps, delta, 1e-9))
    return out


INDEPENDENT_PRIVACY = {
    "random": _not_private, "unconstrained": _not_private, "adversarial": _not_private,
    "multi_adversarial": _not_private, "inlp": _not_private, "fld": _not_private, "reductions": _not_private,
    "gap_reg": _not_private,
    "noise": _measured_laplace, "federate": _measured_laplace, "cape": _measured_laplace,
    "dpnr": _measured_minmax,
    "private_reductions": _measured_randomized_response,
    "pfld": _accountant_pfld, "dpsgd": _accountant_dpsgd,
    "dpsgd_global_adapt": _accountant_adaptive_clipping, "dpsgd_f": _accountant_adaptive_clipping,
    "dp_fermi": _accountant_dp_fermi,
}


def test_every_registered_method_has_an_independent_privacy_check():
    assert set(method_names()) <= set(INDEPENDENT_PRIVACY), "add the new method's computation above"


@pytest.mark.parametrize("name", method_names())
def test_privacy_hook_matches_an_independent_computation(name, data, packs):
    method = get_method(name)
    result = packs(name)
    run = RunInfo.of(data, SETTINGS, method.representation_dim(data, method_contract.architecture_of(name, data)))
    expected = INDEPENDENT_PRIVACY[name](name, data, result, run)
    assert len(result.privacy) == len(result.configs) == len(expected)
    for (eps, delta), (want_eps, want_delta, rel) in zip(result.privacy, expected):
        assert delta == want_delta
        if math.isinf(want_eps):
            assert math.isinf(eps)
        else:
            assert eps == pytest.approx(want_eps, rel=rel), (eps, want_eps)


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
