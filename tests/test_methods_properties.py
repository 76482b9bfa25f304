"""What the papers claim the methods do, on synthetic data with strong label bias and
attribute leakage, tested over ten seeds so that no claim holds by the luck of one stream.

FEDERATE (Table 3 and its Twitter tables) claims: FEDERATE's and Noise's leakage are below
Unconstrained's and Adversarial's; Adversarial, selected as the paper selects (the lowest
valid TPR-gap within a relaxation threshold of the best valid accuracy over its lambda
grid), lowers the TPR-gap below Unconstrained's. It does not claim that adversarial
training lowers leakage (its leakage is at or above Unconstrained's in every table), so
that is not tested. Each claim is a one-sided paired t-test over the seeds at the 1% level.

The ten seeds are ten replicates trained in one pack per method (each config's random stream is
keyed by its id, ``seed0-<i>`` to ``seed9-<i>``; the method contract checks that a pack gives a
config what it gives alone), about a sixth of the cost of a pack per seed.

The leakage claims hold at half the rows and epochs (2,000 rows, 10 epochs: p below 2e-7 for
each), so the default set tests them there, at a quarter of the cost. The TPR-gap claims need
the full scale (at 2,000 rows and 10 epochs: adversarial's p 6e-5, federate's 0.36): they, and
the leakage claims again, run at 4,000 rows and 20 epochs in the slow set, where their p-values
are 7e-3 (adversarial) and 2e-6 (federate). With a pack per seed (seeds 0-9, 100-109, 200-209)
they held for two of three seed sets, not for seeds 100-109 (federate's p 0.09): the claim is
supported, not by a wide margin.

The probe is a logistic regression on standardised representations, trained on the valid
split and scored on the test split (FEDERATE's leakage protocol, with a linear probe to
keep the suite fast).
"""

import numpy as np
import pytest
from scipy import stats
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from fairdp.analysis import select_by_rt
from fairdp.data import load_dataset
from fairdp.engine import Architecture, TrainSettings
from fairdp.methods import get_method
from fairdp.metrics import tpr_gap

pytestmark = pytest.mark.xdist_group("methods_properties")  # one xdist worker computes the module's shared runs once

SEEDS = range(10)
LAMS = [0.5, 1.0, 1.5, 2.0, 2.5, 2.9]
RUNS = {"unconstrained": [{}], "adversarial": [{"lam": lam} for lam in LAMS],
        "federate": [{"lam": 1.0, "eps": 8.0}], "noise": [{"eps": 8.0}]}
LEVEL = 0.01


def _outcomes(rows: int, epochs: int) -> dict:
    """Per run: test accuracy, test TPR-gap and leakage, one value per seed (adversarial: the
    RT-selected lambda of each seed)."""
    data = load_dataset("synthetic", rows=rows, features=20, label_correlation=0.7, leakage=2.0, seed=0)
    settings = TrainSettings(epochs=epochs, batch_size=100, device="cpu")
    arch = Architecture(encoder=(32, 32), classifier=(), adversary=(32, 32))
    valid, test = data.split("valid"), data.split("test")
    rows = []
    for name, configs in RUNS.items():
        # the seeds as replicates in one pack: a config's random stream is keyed by its id, and the
        # method contract checks that a pack gives each config what it would give alone
        runs = [(seed, i) for seed in SEEDS for i in range(len(configs))]
        res = get_method(name).train_pack(data, [configs[i] for _, i in runs], seed=0, settings=settings, arch=arch,
                                          config_ids=[f"seed{seed}-{i}" for seed, i in runs])
        for k, (seed, i) in enumerate(runs):
            rv, rt = res.representations["valid"][k], res.representations["test"][k]
            scaler = StandardScaler().fit(rv)
            probe = LogisticRegression(max_iter=2000).fit(scaler.transform(rv), valid.s)
            pv, pt = res.predictions["valid"][k], res.predictions["test"][k]
            rows.append({"dataset": "synthetic", "method": name, "seed": seed, "config_id": str(i), "status": "ok",
                         **configs[i],
                         "valid_accuracy": (pv == valid.y).mean() * 100,
                         "valid_tpr_gap": float(tpr_gap(valid.y, pv, valid.s)),
                         "test_accuracy": (pt == test.y).mean() * 100,
                         "test_tpr_gap": float(tpr_gap(test.y, pt, test.s)),
                         "leakage": probe.score(scaler.transform(rt), test.s) * 100})
    import pandas as pd

    selected = select_by_rt(pd.DataFrame(rows), rt=1.0, fairness="tpr_gap").sort_values("seed")
    return {name: {m: g[m].to_numpy() for m in ("test_accuracy", "test_tpr_gap", "leakage")}
            for name, g in selected.groupby("method")}


@pytest.fixture(scope="module")
def outcomes():
    return _outcomes(rows=2000, epochs=10)


@pytest.fixture(scope="module")
def outcomes_at_scale():
    return _outcomes(rows=4000, epochs=20)


def lower(a: np.ndarray, b: np.ndarray) -> float:
    """p-value of the one-sided paired t-test that ``a`` is below ``b`` over the seeds."""
    return stats.ttest_rel(a, b, alternative="less").pvalue


def test_unconstrained_leaks_the_attribute_and_has_a_tpr_gap(outcomes):
    u = outcomes["unconstrained"]
    assert u["leakage"].mean() > 90 and u["test_accuracy"].mean() > 90 and u["test_tpr_gap"].mean() > 10


@pytest.mark.parametrize("method", ["federate", "noise"])
def test_federate_and_noise_lower_leakage_below_unconstrained(outcomes, method):
    assert lower(outcomes[method]["leakage"], outcomes["unconstrained"]["leakage"]) < LEVEL


@pytest.mark.parametrize("method", ["federate", "noise"])
def test_federate_and_noise_lower_leakage_below_adversarial(outcomes, method):
    assert lower(outcomes[method]["leakage"], outcomes["adversarial"]["leakage"]) < LEVEL


@pytest.mark.slow
def test_the_leakage_claims_hold_at_twice_the_rows_and_epochs(outcomes_at_scale):
    test_unconstrained_leaks_the_attribute_and_has_a_tpr_gap(outcomes_at_scale)
    for method in ("federate", "noise"):
        test_federate_and_noise_lower_leakage_below_unconstrained(outcomes_at_scale, method)
        test_federate_and_noise_lower_leakage_below_adversarial(outcomes_at_scale, method)


@pytest.mark.slow
def test_rt_selected_adversarial_lowers_the_tpr_gap(outcomes_at_scale):
    outcomes = outcomes_at_scale
    assert lower(outcomes["adversarial"]["test_tpr_gap"], outcomes["unconstrained"]["test_tpr_gap"]) < LEVEL


@pytest.mark.slow
def test_federate_lowers_the_tpr_gap(outcomes_at_scale):
    outcomes = outcomes_at_scale
    assert lower(outcomes["federate"]["test_tpr_gap"], outcomes["unconstrained"]["test_tpr_gap"]) < LEVEL
