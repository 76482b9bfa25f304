"""What a pack's checkpoint costs: one save against one epoch of the pack's training.

    .venv/bin/python benchmarks/bench_checkpoint.py [--method multi_adversarial] [--k 25] [--epochs 2]

Trains a pack of the method's Adult paper grid (FEDERATE's architecture, fp32) twice: once
without checkpoints and once saving after every epoch (to a temporary directory, through
the results store as a study does), and reports the time per save, its size, and the save
as a fraction of an epoch; a study saves every ``--checkpoint-every`` seconds (600 by
default), so its overhead is (save time) / (interval). It also resumes from the last save
and checks that the outcome equals the uninterrupted one.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from fairdp.data import load_dataset
from fairdp.engine import Checkpointing, TrainSettings, _checkpoint
from fairdp.methods import get_method
from fairdp.study import ResultStore

SAVES: list[float] = []
SIZES: list[int] = []


def _timed_save(save):
    """Saver.save timed whole: pickling the state and writing it."""

    def timed(self, state):
        t = time.perf_counter()
        save(self, state)
        SAVES.append(time.perf_counter() - t)
        SIZES.append(len(self.checkpointing.file.read()))

    return timed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", default="multi_adversarial")
    ap.add_argument("--k", type=int, default=25, help="configs in the pack (a FEDERATE Adult study's packs: 25)")
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    data = load_dataset("adult")
    method = get_method(args.method)
    configs = method.expand(method.paper_grid("adult"))[: args.k]
    settings = TrainSettings(epochs=args.epochs)
    t = time.perf_counter()
    plain = method.train_pack(data, configs, seed=0, settings=settings)
    epoch_s = (time.perf_counter() - t) / args.epochs
    _checkpoint.Saver.save = _timed_save(_checkpoint.Saver.save)
    with tempfile.TemporaryDirectory() as tmp:
        file = ResultStore(tmp).checkpoint("bench")
        every_epoch = Checkpointing(file, every_s=0)
        saved = method.train_pack(data, configs, seed=0, settings=settings, checkpoint=every_epoch)
        t = time.perf_counter()
        # all epochs in the file
        resumed = method.train_pack(data, configs, seed=0, settings=settings, checkpoint=every_epoch)
        resume_s = time.perf_counter() - t
    same = all(np.array_equal(a.predictions["test"], b.predictions["test"]) for a, b in
               [(plain, saved), (plain, resumed)])
    save_s = float(np.mean(SAVES))
    print(f"{args.method}, {len(configs)} configs, Adult, fp32: epoch {epoch_s:.1f} s; save (pickle + write) "
          f"{save_s:.2f} s for {np.mean(SIZES) / 2**20:.0f} MiB ({save_s / epoch_s:.3f}x an epoch; "
          f"{save_s / 600:.4f}x the run at the default 600 s interval); loading and finishing from the last save "
          f"{resume_s:.1f} s; outcomes equal with and without checkpoints, and resumed: {same}")


if __name__ == "__main__":
    main()
