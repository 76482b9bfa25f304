"""``bench_sleep``: a benchmark-only plugin method whose packs sleep instead of training.

Used by ``benchmarks/bench_driver.py`` (``plugins: [<this file>]`` in the study it writes) to
measure fairdp's driver cost per pack: every pack goes through the real path (planning,
submission, ``run_pack``, evaluation, ``ResultStore.write_pack``, progress), and the only work
inside ``fit`` is ``time.sleep``.

Hyperparameters:

- ``bench_index`` (integer >= 0): makes the configs distinct (the grid is a range of it), so
  a study of N configs with ``pack_size: 1`` has exactly N packs;
- ``bench_sleep_s`` (>= 0): how long a *pack* sleeps. The sleep is per pack, not per config:
  ``fit`` receives the whole pack and sleeps once, the largest ``bench_sleep_s`` of its configs
  (a study gives every config the same value), whatever the pack's size.

The pack then returns valid outputs for every config without training anything: every
prediction is label 0, and the representation an attacker would see is one zero column
(with ``evaluate: {leakage: false, mdl: false}`` no probe reads it). It trains by no
gradient (``optimizer`` None), has no network and no privacy (eps inf), so nothing but the
sleep and fairdp's own evaluation of the predictions costs time in a pack.
"""

from __future__ import annotations

import time

import numpy as np

from fairdp.engine.contract import PackResult
from fairdp.methods import HyperParam, Method, register_method

INDEX = HyperParam("bench_index", low=0, integer=True, doc="config number (makes the configs distinct)")
SLEEP_S = HyperParam("bench_sleep_s", low=0.0, doc="seconds each pack sleeps (once per pack)")


@register_method
class BenchSleep(Method):
    name = "bench_sleep"
    hyperparams = (INDEX, SLEEP_S)

    def paper_grid(self, dataset):
        return {"bench_index": [0], "bench_sleep_s": [1.0]}

    def representation_dim(self, data, arch=None):
        return 1

    def fit(self, data, configs, config_ids, seed, settings, arch, callback=None, checkpoint=None):
        t0 = time.perf_counter()
        time.sleep(max(float(c["bench_sleep_s"]) for c in configs))
        k = len(configs)
        predictions = {s: np.zeros((k, len(data.splits[s])), dtype=np.int64) for s in ("valid", "test")}
        representations = {s: np.zeros((k, len(data.splits[s]), 1), dtype=np.float32) for s in ("valid", "test")}
        return PackResult(configs=configs, best_epoch=np.zeros(k, dtype=np.int64), valid_history={},
                          predictions=predictions, representations=representations,
                          duration_s=time.perf_counter() - t0)
