"""DP-SGD's packed step against the same network's non-private packed step, and its fixed costs.

    .venv/bin/python benchmarks/bench_private_step.py [--batch 256,512,1024,2048] [--pack 8]
        [--steps 40] [--repeats 3] [--floor-batch 64] [--threads 1] [--device cpu]

Adult's training split (85 standardised features), Tran et al.'s network (64-64, two logits),
K = ``--pack`` configs packed, float32, plain SGD, one thread (a study's trial). Timed as
``--steps`` steps of the whole pack, the least of ``--repeats`` (trainers interleaved, so a slow
spell of the machine hits each), scaled to an epoch of ceil(n / B) steps and divided by K:
seconds per config-epoch.

- non-private: the network's cross-entropy on the loop's minibatch of B rows, one backward,
  an SGD step (what DP-SGD costs without privacy);
- DP-SGD by each Poisson sampler (``train.sampler``): its sample of about B rows at rate B / n,
  the ghost norms, the clipped sum and its Gaussian noise, an SGD step.

Then, at ``--floor-batch``, each fixed per-step cost of a DP-SGD step timed alone over the
same shapes: the Poisson sample (each sampler), the gathers of the sampled rows, the noise draw
of every parameter, and the host syncs (the clip counts read back); the rest of the step is the
forward, the backward by hand and the clipped sums.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

from fairdp import _rng
from fairdp.data import load_dataset
from fairdp.engine import TrainSettings
from fairdp.engine.contract import Batch, PackContext
from fairdp.methods import get_method
from fairdp.methods._lagrangian import ARCHITECTURE, ClassifierSGDStep, poisson_sample

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchkit, beside the benchmarks
from benchkit.steps import pack_epoch_seconds, timed  # noqa: E402

EPS, CLIP, EPOCHS = 1.0, 1.0, 30


class NonPrivateStep(ClassifierSGDStep):
    """The same network and SGD as DP-SGD's, on the loop's minibatch, without clipping or noise."""

    def update(self, batch: Batch, optimizer) -> None:
        logits = self.model(batch.x)
        k = self.ctx.k
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.y.repeat(k))
        optimizer.zero_grad(set_to_none=True)
        (loss * k).backward()  # each config's mean loss: the sum over configs of their means
        optimizer.step()


def _context(data, k: int, batch: int, device: torch.device, sampler: str | None = None) -> PackContext:
    settings = get_method("dpsgd").effective_settings(TrainSettings(
        epochs=EPOCHS, batch_size=batch, precision="float32", device=device.type, sampler=sampler))
    configs = [{"eps": EPS, "clip_primal": CLIP}] * k
    return PackContext(data, configs, [f"bench/{i}" for i in range(k)], 0, settings, ARCHITECTURE, device)


def seconds_per_config_epoch(ctx: PackContext, step, steps: int) -> float:
    return pack_epoch_seconds(ctx, step, steps) / ctx.k


def fixed_costs(data, k: int, batch: int, device: torch.device, repeats: int, steps: int) -> dict[str, float]:
    """Milliseconds per step of each fixed cost of a packed DP-SGD step at ``batch``."""
    out = {}
    train = data.split("train")
    n, q = len(train.y), batch / len(train.y)
    stream = _rng.PackStream.from_names([f"cost/{i}/sample" for i in range(k)])
    for sampler in _rng.POISSON_SAMPLERS:
        ctx = _context(data, k, batch, device, sampler)
        step = get_method("dpsgd").make_step(ctx)
        steps_a_epoch = math.ceil(n / batch)
        out[f"whole DP-SGD step ({sampler})"] = seconds_per_config_epoch(ctx, step, steps) * k / steps_a_epoch * 1e3
        out[f"Poisson sample ({sampler})"] = timed(
            lambda s=sampler: poisson_sample(n, q, stream, device, sampler=s), repeats, steps) * 1e3
    train = ctx.split("train")
    index, _ = poisson_sample(n, q, stream, device)
    out["gathers of the sampled rows"] = timed(lambda: (train.X[index], train.y[index]), repeats, steps) * 1e3
    params = sum(p[0].numel() for p in step.model.parameters())
    noise = _rng.PackStream.from_names([f"cost/{i}/noise" for i in range(k)])
    out[f"noise draw ({params} entries a config)"] = timed(
        lambda: _rng.normal((params,), noise, device=device, dtype=torch.float32), repeats, steps) * 1e3
    counts = torch.zeros(2, k, dtype=torch.long, device=device)
    out["host syncs (clip counts read back)"] = timed(lambda: counts.cpu().numpy(), repeats, steps) * 1e3
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", default="256,512,1024,2048", help="comma-separated batch sizes")
    ap.add_argument("--pack", type=int, default=8)
    ap.add_argument("--steps", type=int, default=40, help="timed steps per trainer (default 40)")
    ap.add_argument("--repeats", type=int, default=3, help="timings per trainer; the least is kept (default 3)")
    ap.add_argument("--floor-batch", type=int, default=64, help="batch of the fixed-cost table (0: none)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    data = load_dataset("adult")
    k = args.pack
    n = len(data.split("train").y)
    print(f"Adult, {n} training rows; network 64-64, K = {k}, float32, {args.threads} thread(s), {device}; "
          f"torch {torch.__version__}")
    print("| B | non-private s/config-epoch | DP-SGD (gaps) | ratio | DP-SGD (coins) | ratio |")
    print("|--:|--:|--:|--:|--:|--:|")
    for batch in (int(b) for b in args.batch.split(",")):
        plain = _context(data, k, batch, device)
        built = {"non-private": (plain, NonPrivateStep(plain))}
        for sampler in _rng.POISSON_SAMPLERS:
            ctx = _context(data, k, batch, device, sampler)
            built[sampler] = (ctx, get_method("dpsgd").make_step(ctx))
        best = {name: math.inf for name in built}
        for _ in range(args.repeats):
            for name, (ctx, step) in built.items():
                best[name] = min(best[name], seconds_per_config_epoch(ctx, step, args.steps))
        base = best["non-private"]
        print(f"| {batch} | {base:.4f} | {best['gaps']:.4f} | {best['gaps'] / base:.2f}x | "
              f"{best['coins']:.4f} | {best['coins'] / base:.2f}x |", flush=True)
    if args.floor_batch:
        print(f"\nFixed costs of a packed DP-SGD step at B = {args.floor_batch}, K = {k} (ms a step):")
        print("| cost | ms |")
        print("|---|--:|")
        for name, ms in fixed_costs(data, k, args.floor_batch, device, args.repeats, args.steps * 4).items():
            print(f"| {name} | {ms:.3f} |", flush=True)


if __name__ == "__main__":
    main()
