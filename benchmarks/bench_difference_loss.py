"""multi_adversarial's difference loss: the Gram form fairdp uses against the (B, B) form it
replaced, in one process on one device.

    .venv/bin/python benchmarks/bench_difference_loss.py [--k 10] [--epochs 1] [--threads 1]

Trains a multi_adversarial pack of K configs of the FEDERATE Table 3 grid on real Adult (batch
2000, adversaries 300-300) with each form, and FEDERATE's pack of the same K as the reference
(the same encoder and one adversary, no difference loss). Prints seconds per config-epoch,
peak resident memory growth, the ratio old / new, and how far the two forms' valid accuracy
histories are apart (they differ only by float rounding, which training amplifies).
"""

from __future__ import annotations

import argparse
import resource
import time
from dataclasses import replace

import numpy as np
import torch

from fairdp.data import load_dataset
from fairdp.engine import TrainSettings
from fairdp.methods import _representation, get_method


def by_definition(hidden, over: str = "samples"):
    """The form fairdp used before: square every entry of the (K, B, B) matrix of row cosines."""
    rows = [h / (h.norm(dim=2, keepdim=True).detach() + 1e-6) for h in hidden]
    return sum(torch.bmm(rows[i], rows[j].transpose(1, 2)).pow(2).mean(dim=(1, 2))
               for i in range(len(rows)) for j in range(i + 1, len(rows)))


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def timed(method, data, configs, settings):
    t0 = time.perf_counter()
    result = method.train_pack(data, configs, seed=0, settings=settings)
    return (time.perf_counter() - t0) / (len(configs) * settings.epochs), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=10, help="configs per pack (the (B, B) form needs ~0.7 GB each)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a Ray trial's 1 CPU by default)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = load_dataset("adult")
    settings = TrainSettings(epochs=args.epochs, device="cpu", precision="float32")
    multi, federate = get_method("multi_adversarial"), get_method("federate")
    grid = multi.expand(multi.paper_grid("adult"))[: args.k]
    fgrid = federate.expand(federate.paper_grid("adult"))[: args.k]
    multi.train_pack(data, grid[:1], seed=0, settings=replace(settings, epochs=1))  # warm-up

    gram_s, gram = timed(multi, data, grid, settings)
    gram_peak = peak_rss_gb()
    fed_s, _ = timed(federate, data, fgrid, settings)
    new_form = _representation.pairwise_difference_loss
    _representation.pairwise_difference_loss = by_definition
    try:
        old_s, old = timed(multi, data, grid, settings)
    finally:
        _representation.pairwise_difference_loss = new_form
    old_peak = peak_rss_gb()
    apart = np.nanmax(np.abs(gram.valid_accuracy_history - old.valid_accuracy_history))
    print(f"multi_adversarial on Adult, K = {args.k}, {args.epochs} epoch(s), {torch.get_num_threads()} thread(s), "
          f"batch 2000, width 300")
    print(f"  Gram form:     {gram_s:6.3f} s per config-epoch (peak RSS {gram_peak:.1f} GB)")
    print(f"  (B, B) form:   {old_s:6.3f} s per config-epoch (peak RSS {old_peak:.1f} GB)")
    print(f"  FEDERATE:      {fed_s:6.3f} s per config-epoch (the same network with one adversary)")
    print(f"  old / new = {old_s / gram_s:.2f}x; multi_adversarial / FEDERATE: {gram_s / fed_s:.2f}x now, "
          f"{old_s / fed_s:.2f}x before; valid accuracy histories at most {apart:.3f} points apart")


if __name__ == "__main__":
    main()
