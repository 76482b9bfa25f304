"""What a module of the user's costs to train, timed here before a run: the dry run's and the
run's estimate for a method that trains one, where the reference figures (measured on fairdp's
own networks) say nothing of it."""

from __future__ import annotations

import dataclasses
import time

import torch

from fairdp.data import Dataset
from fairdp.data._shared import subsample
from fairdp.methods import get_method
from fairdp.study._context import StudyContext

TIMED_ROWS = 2000
"""Training rows a method's timing run trains on (all of them when the split has fewer)."""


def time_user_modules(ctx: StudyContext, data: Dataset, plans) -> dict[str, tuple[float, int]]:
    """(seconds per config-epoch per 1,000 training rows, the batch size timed at) of each method
    in ``plans`` (``MethodPlan``) that trains a module of the user's: its first config trained
    for two epochs on at most ``TIMED_ROWS`` training rows in one thread, as a trial slot trains,
    the second epoch timed (the first pays the pack's set-up), evaluation included."""
    out = {}
    small = subsample(data, min(TIMED_ROWS, len(data.splits["train"])), seed=0)
    n_train = len(small.splits["train"])
    for plan in plans:
        settings, arch = ctx.training(plan.name)
        if arch is None or not arch.models:
            continue
        method = get_method(plan.name)
        config = plan.configs[0]
        settings = dataclasses.replace(method.config_settings(config, settings), epochs=2, config_chunk=1,
                                       prune=None)
        ends: list[float] = []
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            method.train_pack(small, [config], seed=0, settings=settings, arch=arch,
                              callback=lambda report, ends=ends: ends.append(time.perf_counter()))
        finally:
            torch.set_num_threads(threads)
        if len(ends) == 2:
            out[plan.name] = ((ends[1] - ends[0]) / (n_train / 1000), settings.batch_size)
    return out
