"""fairdp's packed DP-SGD and PF-LD against Opacus 1.6's DP-SGD: seconds per config-epoch on Adult.

    .venv/bin/pip install opacus==1.6.0        # or: pip install -e ".[bench]"
    .venv/bin/python benchmarks/bench_opacus.py [--batch 256,1024] [--pack 8] [--steps 60] [--repeats 3] [--device cpu]

The same model (Tran et al.'s network: two hidden layers of 64 units, ReLU, two logits), data
(Adult's training split, 85 standardised features), batch size B, clipping bound C = 1, noise
multiplier (calibrated to eps = 1, delta = 1e-5 over 30 epochs at that B, as the PF-LD studies
do) and plain SGD at lr 0.1 everywhere. Every trainer samples its rows by Poisson sampling at
rate B / n: Opacus's default ``poisson_sampling=True``, fairdp's DP-SGD step and PF-LD's
private group-1 sample. One thread (a study's trial: ``cpus_per_trial: 1``) on a CPU.

Timed: ``--steps`` training steps (a step of every config of a pack at once for fairdp), the
least of ``--repeats``, scaled to an epoch of ceil(n / B) steps and divided by the configs
trained: seconds per config-epoch. Opacus trains one model at a time, so K configs cost K
times one; it is timed with its per-sample-gradient hooks (``grad_sample_mode="hooks"``, its
default) and with ghost clipping (``"ghost"``, the same norm trick as fairdp's). fairdp is
timed unpacked (K = 1) and packed (K = ``--pack``), DP-SGD and PF-LD (dp; its per-epoch dual
step included), with F-LD (PF-LD without privacy) for reference. The training loop's
evaluation of each epoch is left out of every row.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
import warnings
from pathlib import Path

import torch

from fairdp.data import load_dataset
from fairdp.engine import TrainSettings
from fairdp.engine.contract import PackContext
from fairdp.methods import get_method
from fairdp.methods._lagrangian import ARCHITECTURE
from fairdp.privacy import calibrate_dpsgd_sigma
from fairdp.privacy._shared import PFLD_DELTA

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchkit, beside the benchmarks
from benchkit.steps import pack_epoch_seconds, synchronize  # noqa: E402

EPS, CLIP, LR, EPOCHS = 1.0, 1.0, 0.1, 30


def opacus_seconds_per_epoch(x: torch.Tensor, y: torch.Tensor, batch: int, sigma: float, mode: str,
                             steps: int, device: torch.device) -> float:
    """One model trained by Opacus for ``steps`` Poisson-sampled steps, scaled to an epoch."""
    from opacus import PrivacyEngine  # the benchmark's own dependency, not fairdp's

    warnings.filterwarnings("ignore", module="opacus")  # its secure-RNG and hook notices, every run

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                torch.nn.ReLU(), torch.nn.Linear(64, 2)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch)
    engine = PrivacyEngine(accountant="rdp")
    criterion = torch.nn.CrossEntropyLoss()
    kwargs = dict(module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=sigma,
                  max_grad_norm=CLIP, poisson_sampling=True, grad_sample_mode=mode)
    if mode == "ghost":
        model, optimizer, criterion, loader = engine.make_private(criterion=criterion, **kwargs)
    else:
        model, optimizer, loader = engine.make_private(**kwargs)
    done, started = 0, None
    while done < steps + 5:
        for xb, yb in loader:
            if done == 5:  # the first steps pay one-off costs
                started = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(xb.to(device)), yb.to(device))
            loss.backward()
            optimizer.step()
            done += 1
            if done >= steps + 5:
                break
    synchronize(device)
    return (time.perf_counter() - started) / steps * math.ceil(len(y) / batch)


def fairdp_seconds_per_epoch(data, method: str, configs: list[dict], batch: int, steps: int,
                             device: torch.device) -> float:
    """One pack of ``configs`` of fairdp's ``method`` stepped ``steps`` times on the engine's
    shuffled minibatches, scaled to an epoch, plus one end of epoch (PF-LD's dual step)."""
    m = get_method(method)
    settings = m.effective_settings(TrainSettings(epochs=EPOCHS, batch_size=batch, precision="float32",
                                                  device=device.type))
    ctx = PackContext(data, configs, [f"bench/{i}" for i in range(len(configs))], 0, settings, ARCHITECTURE, device)
    return pack_epoch_seconds(ctx, m.make_step(ctx), steps, warmup=5, end_epoch=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", default="256,1024", help="comma-separated batch sizes (default 256,1024)")
    ap.add_argument("--pack", type=int, default=8)
    ap.add_argument("--steps", type=int, default=60, help="timed steps per trainer (default 60)")
    ap.add_argument("--repeats", type=int, default=3, help="timings per trainer; the least is kept (default 3)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    data = load_dataset("adult")
    x = torch.as_tensor(data.split("train").X, dtype=torch.float32)
    y = torch.as_tensor(data.split("train").y, dtype=torch.long)
    n = len(y)
    import opacus

    print(f"Adult, {n} training rows, {x.shape[1]} features; network 64-64, C = {CLIP}, eps = {EPS} over {EPOCHS} "
          f"epochs; {args.threads} thread(s), {args.device}; torch {torch.__version__}, opacus {opacus.__version__}")
    print("| B | trainer | configs | s per config-epoch | vs fairdp DP-SGD packed |")
    print("|---|---|---|---|---|")
    for batch in (int(b) for b in args.batch.split(",")):
        sigma = calibrate_dpsgd_sigma(EPS, PFLD_DELTA, batch, n, EPOCHS)
        k = args.pack
        dpsgd = [{"eps": EPS, "clip_primal": CLIP}] * k
        pfld = [{"fairness_notion": "dp", "eps": EPS, "clip_primal": CLIP, "clip_dual": 5.0}] * k
        fld = [{"fairness_notion": "dp"}] * k
        opacus_run = functools.partial(opacus_seconds_per_epoch, x, y, batch, sigma, steps=args.steps, device=device)
        fairdp_run = functools.partial(fairdp_seconds_per_epoch, data, batch=batch, steps=args.steps, device=device)
        trainers = {
            "Opacus 1.6, hooks": (1, functools.partial(opacus_run, mode="hooks")),
            "Opacus 1.6, ghost clipping": (1, functools.partial(opacus_run, mode="ghost")),
            "fairdp DP-SGD": (1, functools.partial(fairdp_run, "dpsgd", dpsgd[:1])),
            f"fairdp DP-SGD, packed {k}": (k, functools.partial(fairdp_run, "dpsgd", dpsgd)),
            "fairdp PF-LD": (1, functools.partial(fairdp_run, "pfld", pfld[:1])),
            f"fairdp PF-LD, packed {k}": (k, functools.partial(fairdp_run, "pfld", pfld)),
            f"fairdp F-LD (no privacy), packed {k}": (k, functools.partial(fairdp_run, "fld", fld)),
        }
        best = {name: math.inf for name in trainers}
        for _ in range(args.repeats):  # interleaved, so that a slow spell of the machine hits every trainer
            for name, (configs, timed) in trainers.items():
                best[name] = min(best[name], timed() / configs)
        reference = best[f"fairdp DP-SGD, packed {k}"]
        for name, (configs, _) in trainers.items():
            print(f"| {batch} | {name} | {configs} | {best[name]:.4f} | {best[name] / reference:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
