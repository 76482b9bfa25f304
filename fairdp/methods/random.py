"""Random: predicts a uniformly random label; its representation is noise independent of the input.

It bounds what any method can do: chance accuracy, chance leakage, and the uniform-code MDL.
"""

import time

import numpy as np
import torch

from fairdp import _rng
from fairdp.engine import stream_seed
from fairdp.engine.contract import PackResult
from fairdp.methods._base import Method
from fairdp.methods._registry import register_method


@register_method
class Random(Method):
    name = "random"
    # no network (``architecture_fields`` is empty, an architecture set for it is refused), but
    # its representation has the study's encoder width, as the methods it is compared with
    uses_architecture = True

    def paper_grid(self, dataset):
        return {}

    def fit(self, data, configs, config_ids, seed, settings, arch, callback=None, checkpoint=None):
        t0 = time.perf_counter()
        dim = arch.representation_dim
        gens = _rng.make_generators([stream_seed(seed, cid, "predict") for cid in config_ids], "cpu")
        predictions, representations = {}, {}
        for name in ("valid", "test"):
            n = len(data.splits[name])
            u = _rng.uniform((n,), gens, device="cpu", dtype=torch.float64)
            predictions[name] = np.minimum((u * data.n_classes).long().numpy(), data.n_classes - 1)
            g = _rng.uniform((n, dim), gens, device="cpu", dtype=torch.float32)
            representations[name] = g.numpy()
        k = len(configs)
        return PackResult(configs=configs, best_epoch=np.zeros(k, dtype=np.int64),
                          valid_history={}, predictions=predictions,
                          representations=representations, duration_s=time.perf_counter() - t0)
