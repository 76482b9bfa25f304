"""The functional path (any nn.Module, torch.func) against the hand-packed layers, on the built-in MLP,
and DP-SGD's cost on a user's CNN.

    .venv/bin/python benchmarks/bench_functional.py [--workloads train,dpsgd,cnn] [--pack 1,8]
        [--precision fp32,bf16] [--steps 40] [--repeats 3]

Adult's training split (85 standardised features), batch 256, one thread (a study's trial);
for ``cnn``, digits' training split (64 pixels), batch 64. Each workload is timed as
``--steps`` steps of every config of a pack, the least of ``--repeats``, scaled to an epoch of
ceil(n / B) steps and divided by the configs: seconds per config-epoch, and the ratio to the
workload's first path.

- train: the unconstrained network of the FEDERATE studies (encoder 300-300, linear
  classifier, dropout 0.1), cross-entropy, backward and an Adam step: the step of the
  representation methods without their adversaries.
- dpsgd: Tran et al.'s network (64-64, two logits) with DP-SGD's per-sample clipping and
  noise (C = 1, sigma = 1) on a Poisson sample at rate B / n: ghost norms over the hand-packed
  layers (``hand``) against the functional pack with ghost clipping (``functional``, the
  default) and with every row's gradients materialised by vmap'd vjps (``materialised``).
- cnn: ``examples/models.py``'s ``digits_cnn`` (two 3 x 3 convolutions with GroupNorm, a
  max-pool, dropout, a linear layer; two logits) as a functional pack: its non-private step
  (``plain``: cross-entropy, backward, an SGD step) against DP-SGD's (C = 1, sigma = 1, a
  Poisson sample) with ghost clipping (``dpsgd``) and materialised (``dpsgd_materialised``).

Paths: ``hand`` (PackedModel's hand-packed layers), ``functional`` (the same architecture
through ``models``: torch.func's stacked modules under vmap) and, for train, ``loop``: K
separate ``nn.Sequential`` models, each with its own Adam, stepped one after another (what a
user's module costs without packing). bf16 is autocast (matmuls in bf16, parameters fp32);
this CPU has no native bf16, so bf16 rows measure emulation here.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
from torch import nn

from fairdp import _rng
from fairdp.data import load_dataset
from fairdp.engine import Architecture, FunctionalPack, ModelRef, ModelSpec, PackedModel
from fairdp.engine._functional import build_instances, mlp
from fairdp.engine._settings import autocast
from fairdp.methods._lagrangian import poisson_sample
from fairdp.methods.dpsgd import dpsgd_gradients

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchkit, beside the benchmarks
from benchkit.steps import timed  # noqa: E402

TRAIN_ARCH = Architecture(encoder=(300, 300), classifier=(), adversary=(), dropout=0.1)
DPSGD_ARCH = Architecture(encoder=(64, 64), classifier=(), adversary=(), dropout=0.0)
BATCH = 256
CNN_BATCH = 64
CNN = str(Path(__file__).resolve().parents[1] / "examples" / "models.py") + ":digits_cnn"


class Materialised:
    """A functional pack's per-sample chain with ghost clipping off: every row's gradients
    materialised (``FunctionalPack.add_clipped(ghost=False)``)."""

    def __init__(self, pack: FunctionalPack):
        self.pack = pack

    def parameters(self):
        return self.pack.parameters()

    def forward_traced(self, x):
        return self.pack.forward_traced(x)

    def add_clipped(self, *args, **kwargs):
        return self.pack.add_clipped(*args, **kwargs, ghost=False)


def _model(path: str, arch: Architecture, k: int, d: int) -> PackedModel:
    init = _rng.PackStream.from_names([f"bench/{i}/init" for i in range(k)])
    models = None
    if path == "functional":  # the same MLPs, as user modules: the functional path
        models = {"encoder": lambda i, o: mlp([i, *arch.encoder[:-1], o], arch.dropout, True),
                  "classifier": lambda i, o: mlp([i, *arch.classifier, o], arch.dropout, False)}
    return PackedModel(ModelSpec(), arch, d, 2, 2, init, device="cpu", dtype=torch.float32, models=models)


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


def _private_step(chain, params, k: int, x: torch.Tensor, y: torch.Tensor, precision: str, batch: int):
    opt = torch.optim.SGD(params, lr=0.1)
    n = len(y)
    q = batch / n
    sample = _rng.PackStream.from_names([f"bench/{i}/sample" for i in range(k)])
    noise = _rng.PackStream.from_names([f"bench/{i}/noise" for i in range(k)])
    clip, sigma = torch.ones(k), torch.ones(k)

    def step():
        index, valid = poisson_sample(n, q, sample, x.device)
        opt.zero_grad(set_to_none=True)
        with autocast(precision, x.device):
            dpsgd_gradients(chain, x[index], y[index], clip, sigma, noise, valid=valid, expected_rows=q * n)
        opt.step()
    return step


def dpsgd_step(path: str, k: int, x: torch.Tensor, y: torch.Tensor, precision: str):
    model = _model("functional" if path == "materialised" else path, DPSGD_ARCH, k, x.shape[1])
    chain = model.per_sample_chain()
    return _private_step(Materialised(chain) if path == "materialised" else chain, list(model.parameters()), k,
                         x, y, precision, BATCH)


def cnn_step(path: str, k: int, x: torch.Tensor, y: torch.Tensor, precision: str):
    build = ModelRef.parse(CNN, "bench").build
    init = _rng.PackStream.from_names([f"bench/{i}/init" for i in range(k)])
    pack = FunctionalPack(build_instances(lambda: build(x.shape[1], 2), init, device="cpu", dtype=torch.float32))
    if path != "plain":
        return _private_step(Materialised(pack) if path == "dpsgd_materialised" else pack, list(pack.parameters()),
                             k, x, y, precision, CNN_BATCH)
    opt = torch.optim.SGD(pack.parameters(), lr=0.1)
    dropout = _rng.PackStream.from_names([f"bench/{i}/dropout" for i in range(k)])
    g = torch.Generator().manual_seed(0)

    def step():
        idx = torch.randint(0, len(y), (CNN_BATCH,), generator=g)
        opt.zero_grad(set_to_none=True)
        with autocast(precision, x.device):
            logits = pack(x[idx], dropout)
            loss = nn.functional.cross_entropy(logits.reshape(-1, 2).float(), y[idx].repeat(k),
                                               reduction="sum") / CNN_BATCH
        loss.backward()
        opt.step()
    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="train,dpsgd,cnn")
    ap.add_argument("--pack", default="1,8")
    ap.add_argument("--precision", default="fp32,bf16")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = {}
    for name in ("adult", "digits"):
        train = load_dataset(name).split("train")
        data[name] = (torch.as_tensor(train.X, dtype=torch.float32), torch.as_tensor(train.y, dtype=torch.long))
    workloads = {"train": ("adult", BATCH, train_step, ("hand", "functional", "loop")),
                 "dpsgd": ("adult", BATCH, dpsgd_step, ("hand", "functional", "materialised")),
                 "cnn": ("digits", CNN_BATCH, cnn_step, ("plain", "dpsgd", "dpsgd_materialised"))}
    print(f"Adult: {len(data['adult'][1])} training rows, {data['adult'][0].shape[1]} features, batch {BATCH}; "
          f"digits: {len(data['digits'][1])} rows, batch {CNN_BATCH}; {args.threads} thread(s)")
    print("| workload | precision | K | path | s per config-epoch | vs the first path |")
    print("|---|---|---|---|---|---|")
    for workload in args.workloads.split(","):
        name, batch, make, paths = workloads[workload]
        x, y = data[name]
        per_epoch = math.ceil(len(y) / batch)
        for precision in args.precision.split(","):
            for k in (int(v) for v in args.pack.split(",")):
                first = None
                for path in paths:
                    seconds = timed(make(path, k, x, y, precision), args.repeats, args.steps) * per_epoch / k
                    first = first or seconds
                    print(f"| {workload} | {precision} | {k} | {path} | {seconds:.4f} | {seconds / first:.2f}x |",
                          flush=True)


if __name__ == "__main__":
    main()
