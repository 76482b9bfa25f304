"""The functional path (any nn.Module, torch.func) against the hand-packed layers, on the built-in MLP.

    .venv/bin/python benchmarks/bench_functional.py [--pack 1,8] [--precision fp32,bf16] [--steps 40] [--repeats 3]

Adult's training split (85 standardised features), batch 256, one thread (a study's trial).
Two workloads, each timed as ``--steps`` steps of every config of a pack, the least of
``--repeats``, scaled to an epoch of ceil(n / B) steps and divided by the configs: seconds
per config-epoch.

- train: the unconstrained network of the FEDERATE studies (encoder 300-300, linear
  classifier, dropout 0.1), cross-entropy, backward and an Adam step: the step of the
  representation methods without their adversaries.
- dpsgd: Tran et al.'s network (64-64, two logits) with DP-SGD's per-sample clipping and
  noise (C = 1, sigma = 1) on a Poisson sample at rate B / n: ghost norms over the hand-packed
  layers against vmap'd per-sample gradients of the functional pack.

Paths: ``hand`` (PackedModel's hand-packed layers), ``functional`` (the same architecture
through ``models``: torch.func's stacked modules under vmap) and, for train, ``loop``: K
separate ``nn.Sequential`` models, each with its own Adam, stepped one after another (what a
user's module costs without packing). bf16 is autocast (matmuls in bf16, parameters fp32);
this CPU has no native bf16, so bf16 rows measure emulation here.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from torch import nn

from fairdp import _rng
from fairdp.data import load_dataset
from fairdp.engine import Architecture, ModelSpec, PackedModel
from fairdp.engine._functional import mlp
from fairdp.engine._settings import autocast
from fairdp.methods._lagrangian import poisson_sample
from fairdp.methods.dpsgd import dpsgd_gradients

TRAIN_ARCH = Architecture(encoder=(300, 300), classifier=(), adversary=(), dropout=0.1)
DPSGD_ARCH = Architecture(encoder=(64, 64), classifier=(), adversary=(), dropout=0.0)
BATCH = 256


def _model(path: str, arch: Architecture, k: int, d: int) -> PackedModel:
    init = _rng.PackStream.from_names([f"bench/{i}/init" for i in range(k)])
    models = None
    if path == "functional":  # the same MLPs, as user modules: the functional path
        models = {"encoder": lambda i, o: mlp([i, *arch.encoder[:-1], o], arch.dropout, True),
                  "classifier": lambda i, o: mlp([i, *arch.classifier, o], arch.dropout, False)}
    return PackedModel(ModelSpec(), arch, d, 2, 2, init, device="cpu", dtype=torch.float32, models=models)


def _timed(step, steps: int, repeats: int) -> float:
    step()  # warm-up: first-call costs (vmap's tracing, allocator)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, (time.perf_counter() - t0) / steps)
    return best


def train_step(path: str, k: int, x: torch.Tensor, y: torch.Tensor, precision: str):
    d = x.shape[1]
    g = torch.Generator().manual_seed(0)
    if path == "loop":
        models = [mlp([d, *TRAIN_ARCH.encoder, 2], TRAIN_ARCH.dropout, False) for _ in range(k)]
        opts = [torch.optim.Adam(m.parameters(), lr=1e-3) for m in models]

        def step():
            idx = torch.randint(0, len(y), (BATCH,), generator=g)
            for m, o in zip(models, opts):
                o.zero_grad(set_to_none=True)
                with autocast(precision, x.device):
                    loss = nn.functional.cross_entropy(m(x[idx]), y[idx])
                loss.backward()
                o.step()
        return step
    model = _model(path, TRAIN_ARCH, k, d)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    dropout = _rng.PackStream.from_names([f"bench/{i}/dropout" for i in range(k)])

    def step():
        idx = torch.randint(0, len(y), (BATCH,), generator=g)
        opt.zero_grad(set_to_none=True)
        with autocast(precision, x.device):
            logits = model.classifier(model.encoder(x[idx], dropout), dropout)
            loss = nn.functional.cross_entropy(logits.reshape(-1, 2).float(), y[idx].repeat(k), reduction="sum") / BATCH
        loss.backward()
        opt.step()
    return step


def dpsgd_step(path: str, k: int, x: torch.Tensor, y: torch.Tensor, precision: str):
    model = _model(path, DPSGD_ARCH, k, x.shape[1])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    n = len(y)
    q = BATCH / n
    sample = _rng.PackStream.from_names([f"bench/{i}/sample" for i in range(k)])
    noise = _rng.PackStream.from_names([f"bench/{i}/noise" for i in range(k)])
    clip, sigma = torch.ones(k), torch.ones(k)

    def step():
        index, valid = poisson_sample(n, q, sample, x.device)
        opt.zero_grad(set_to_none=True)
        with autocast(precision, x.device):
            dpsgd_gradients(model.per_sample_chain(), x[index], y[index], clip, sigma, noise, valid=valid,
                            expected_rows=q * n)
        opt.step()
    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pack", default="1,8")
    ap.add_argument("--precision", default="fp32,bf16")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = load_dataset("adult")
    train = data.split("train")
    x = torch.as_tensor(train.X, dtype=torch.float32)
    y = torch.as_tensor(train.y, dtype=torch.long)
    per_epoch = math.ceil(len(y) / BATCH)
    print(f"Adult, {len(y)} training rows, {x.shape[1]} features, batch {BATCH}, {args.threads} thread(s)")
    print("| workload | precision | K | path | s per config-epoch | vs hand-packed |")
    print("|---|---|---|---|---|---|")
    for workload, make, paths in (("train", train_step, ("hand", "functional", "loop")),
                                  ("dpsgd", dpsgd_step, ("hand", "functional"))):
        for precision in args.precision.split(","):
            for k in (int(v) for v in args.pack.split(",")):
                hand = None
                for path in paths:
                    seconds = _timed(make(path, k, x, y, precision), args.steps, args.repeats) * per_epoch / k
                    hand = hand or seconds
                    print(f"| {workload} | {precision} | {k} | {path} | {seconds:.4f} | {seconds / hand:.2f}x |",
                          flush=True)


if __name__ == "__main__":
    main()
