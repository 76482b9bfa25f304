"""Reference costs: seconds per config-epoch of every registered method, and of the probes, on Adult.

    .venv/bin/python benchmarks/bench_costs.py [--pack 8] [--epochs 2] [--repeats 2] [--precisions float32,bf16]
                                               [--batches 2000,256] [--methods M,... | --probes-only] [--write]

For each method, a pack of up to ``--pack`` configs spread over its Adult paper grid trains
for 1 and for 1 + ``--epochs`` epochs on one thread (a trial's default ``cpus_per_trial: 1``)
at each of ``--batches`` (default 2000, the reference, 1024 and 256: a step's fixed work makes a
config-epoch dearer at small batches; the dry run interpolates between them in 1 / B),
after a one-config warm-up (and one of FEDERATE before the first method, for the process's
one-off costs). The cost of a config-epoch is the slope between the two, the least of
``--repeats`` timings; what the one-epoch
pack took beyond its config-epochs is the pack's fixed time (model set-up, predictions). A
method whose fixed work depends on how long it trained is timed over more epochs: INLP fits its
nullspace projection to the trained features, 6.5 s after 1 epoch and 8.4 s after 3 on Adult,
so ``--epochs 2`` counted that growth as training (``--methods inlp --epochs 10``); the file
records each method's ``epochs``.
A method that does not train by epochs is timed per config. All per 1,000 training rows. The leakage and MDL probes
are timed on FEDERATE's pack and on its first config alone, under each stopping rule (fairdp's
default probe, which stops early on a held-out tenth, and FEDERATE's probe protocol, which
stops on the training loss): the slope is a config's cost, the rest a pack's. ``--probes-only``
times just them (with ``--write``, replacing only their figures). Each method that trains by epochs is timed in every
``--precisions`` (default float32, and bf16 where this CPU multiplies bf16 matrices in hardware,
as a study without ``train.precision`` then trains in it); float32's figure is the method's,
another precision's is stored under its name. The probes train in full precision whatever the
study's. ``--write`` stores the figures in
``fairdp/study/run/reference_costs.json``, which ``fairdp run --dry-run`` turns into a time
estimate (with each accountant-calibrated method's ``per_calibration``, the seconds its noise
search takes for one eps and batch size, which a worker pays once for each) and the live ETA
uses as the relative cost of methods it has not measured yet; with
``--methods`` it replaces only those methods' figures (the file records when each was updated).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import time

import torch

from fairdp.data import load_dataset
from fairdp.engine import TrainSettings
from fairdp.engine._shared import native_bf16
from fairdp.methods import RunInfo, get_method, method_names
from fairdp.metrics import FEDERATE_PROBE, ProbeSettings, evaluate_pack
from fairdp.study.run._estimate import REFERENCE_PATH


def spread(configs: list[dict], k: int) -> list[dict]:
    """``k`` configs spread evenly over the grid (its order varies the last parameter fastest)."""
    if len(configs) <= k:
        return configs
    step = len(configs) / k
    return [configs[int(i * step)] for i in range(k)]


# Below this a method's guarantee is a formula, not an accountant's search: not stored
CALIBRATION_FLOOR = 0.01

# the probes' stopping rules (``_estimate.probe_stopping``), each timed as the studies that use
# it set it: fairdp's default probe, and FEDERATE's probe protocol (studies/federate_*.yaml)
PROBE_PROTOCOLS = {
    "early_stopping": ProbeSettings(device="cpu"),
    "training_loss": dataclasses.replace(FEDERATE_PROBE, device="cpu"),
}


def probe_figures(data, pack, single, repeats: int) -> dict[str, dict]:
    """Seconds per 1,000 training rows of each probe under each stopping rule: per config (the
    slope between ``single``, the pack's first config trained alone, and ``pack``) and per pack
    (what the single config took beyond it), the least of ``repeats`` timings each, beyond
    ``evaluate_pack``'s own work without probes."""
    rows_k = len(data.splits["train"]) / 1000
    k = len(pack.configs)

    def seconds(result, probe, leakage, mdl):
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            evaluate_pack(data, result, with_leakage=leakage, with_mdl=mdl, probe=probe)
            best = min(best, time.perf_counter() - t)
        return best

    figures = {}
    for rule, probe in PROBE_PROTOCOLS.items():
        base = [seconds(r, probe, False, False) for r in (single, pack)]
        figures[rule] = {"settings": {f: getattr(probe, f) for f in ("kind", "standardize", "early_stopping",
                                                                     "alpha", "max_epochs")}}
        for kind, flags in (("leakage", (True, False)), ("mdl", (False, True))):
            one = max(0.0, seconds(single, probe, *flags) - base[0])
            many = max(0.0, seconds(pack, probe, *flags) - base[1])
            per_config = max(0.0, (many - one) / (k - 1))
            figures[rule][kind] = {"per_config": per_config / rows_k, "per_pack": max(0.0, one - per_config) / rows_k}
            print(f"| probe {kind} ({rule}) | - | 1, {k} | {one:.2f}, {many:.2f} | - | "
                  f"{per_config / rows_k:.4f} per config | {figures[rule][kind]['per_pack']:.4f} |", flush=True)
    return figures


def calibration_seconds(method, configs: list[dict], data, settings: TrainSettings) -> float:
    """Seconds of a config's guarantee on a fresh process, ``Method.privacy`` for each of
    ``configs`` at a study's shape (30 epochs, batch 256) with the accountants' caches
    emptied, averaged: the noise calibration a study's worker does once per eps and batch size.
    Not per 1,000 rows: the search's cost depends on the step count, little on the rows."""
    from fairdp.privacy import _accounting

    run = RunInfo.of(data, dataclasses.replace(settings, epochs=30, batch_size=256), method.representation_dim(data))
    started = time.perf_counter()
    for config in configs:
        _accounting.calibrate_dpsgd_sigma.cache_clear()
        _accounting.calibrate_pfld_sigmas.cache_clear()
        _accounting.calibrate_adaptive_clipping_sigmas.cache_clear()
        method.privacy(method.validate_config(config), run)
    return (time.perf_counter() - started) / len(configs)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pack", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--write", action="store_true", help=f"store the figures in {REFERENCE_PATH}")
    ap.add_argument("--repeats", type=int, default=2, help="timings per method; the least is kept (default 2)")
    ap.add_argument("--methods", help="comma-separated methods to time (default: every registered one)")
    ap.add_argument("--probes-only", action="store_true", help="time only the probes (no method)")
    ap.add_argument("--batches", default="2000,1024,256",
                    help="comma-separated batch sizes to time the methods that train by epochs at (default 2000,1024,256); "
                         "the first is the reference, whose figure is the method's; the dry run interpolates "
                         "between them in 1 / B for a study's batch sizes")
    ap.add_argument("--precisions", help="comma-separated precisions to time the methods in (default float32, and "
                                         "bf16 where this CPU has native bf16 matmuls); float32 is always timed")
    args = ap.parse_args()
    precisions = (args.precisions.split(",") if args.precisions
                  else ["float32"] + (["bf16"] if native_bf16("cpu") else []))
    if any(p not in ("float32", "bf16") for p in precisions):
        ap.error(f"--precisions: CPU precisions are float32 and bf16, got {args.precisions}")
    precisions = ["float32"] + [p for p in dict.fromkeys(precisions) if p != "float32"]
    torch.set_num_threads(1)
    data = load_dataset("adult")
    n_train = len(data.splits["train"])
    rows_k = n_train / 1000
    batches = [int(b) for b in args.batches.split(",")]
    settings = TrainSettings(epochs=args.epochs, batch_size=batches[0], device="cpu")
    methods, probe_pack = {}, None
    print(f"Adult, {n_train} training rows, {args.epochs} epochs, packs of up to {args.pack}, "
          f"1 thread, {_cpu_model()}, precisions {', '.join(precisions)}")
    print("| method | precision | configs | wall s | by epochs | s per config-epoch (per config) per 1k rows | "
          "fixed s per pack per 1k rows |")
    print("|---|---|---|---|---|---|---|")
    # the process's first trainings pay one-off costs (allocator, thread pools, each precision's
    # kernels): not any method's
    federate = get_method("federate")
    warm = spread(federate.expand(federate.paper_grid("adult")), args.pack)
    for precision in [] if args.probes_only else precisions:
        for epochs in (1, 1 + args.epochs):
            federate.train_pack(data, warm, 0, dataclasses.replace(settings, epochs=epochs, precision=precision))
    names = [] if args.probes_only else args.methods.split(",") if args.methods else method_names()
    if args.probes_only and args.methods:
        ap.error("--probes-only times no method: give it without --methods")

    def timed(method, configs, epochs, precision, callback=None, batch=None):
        t = time.perf_counter()
        result = method.train_pack(data, configs, 0, dataclasses.replace(settings, epochs=epochs, precision=precision,
                                                                         batch_size=batch or batches[0]),
                                   callback=callback)
        return time.perf_counter() - t, result

    for name in names:
        method = get_method(name)
        configs = spread(method.expand(method.paper_grid("adult")), args.pack)
        k = len(configs)
        for precision in precisions:
            method.train_pack(data, configs[:1], 0, dataclasses.replace(settings, epochs=1, precision=precision))
            reports = []
            t_short, result = timed(method, configs, 1, precision, reports.append)
            by_epochs = bool(reports)
            if not by_epochs:  # no training loop for a precision to change
                wall, per, fixed = t_short, t_short / k, 0.0
                methods[name] = {"per_config": per / rows_k}
            else:
                # the slope between 1 and 1 + E epochs: a config-epoch's cost without the pack's
                # fixed part; the least of --repeats, as this machine's timings of one script vary
                # by tens of %
                by_batch = {}
                for batch in batches:
                    slopes, shorts = [], [t_short] if batch == batches[0] else []
                    for r in range(args.repeats):
                        if r or batch != batches[0]:
                            shorts.append(timed(method, configs, 1, precision, batch=batch)[0])
                        wall, result = timed(method, configs, 1 + args.epochs, precision, batch=batch)
                        slopes.append((wall - shorts[-1]) / (k * args.epochs))
                    by_batch[str(batch)] = min(slopes) / rows_k
                    if batch == batches[0]:
                        per = min(slopes)
                        fixed = max(0.0, min(shorts) - k * per)
                figure = {"per_config_epoch": per / rows_k, "per_pack": fixed / rows_k}
                if len(batches) > 1:
                    figure["by_batch"] = by_batch
                if precision == "float32":
                    calibrating = calibration_seconds(method, configs, data, settings)
                    if calibrating > CALIBRATION_FLOOR:
                        figure["per_calibration"] = calibrating
                if precision == "float32":
                    methods[name] = figure
                else:
                    methods[name][precision] = figure
            at = (" (" + ", ".join(f"B {b}: {v:.4f}" for b, v in figure.get("by_batch", {}).items()) + ")"
                  if by_epochs and "by_batch" in figure else "")
            if by_epochs and "per_calibration" in figure:
                at += f"; calibration {figure['per_calibration']:.2f} s per eps"
            print(f"| {name} | {precision if by_epochs else '-'} | {k} | {wall:.2f} | {'yes' if by_epochs else 'no'} | "
                  f"{per / rows_k:.4f}{at} | {fixed / rows_k:.4f} |", flush=True)
            if name == "federate" and precision == "float32":
                probe_pack = result
            if not by_epochs:
                break
    if args.methods:
        if args.write:
            _update(methods, args, precisions, batches)
        return
    probe_configs = spread(federate.expand(federate.paper_grid("adult")), args.pack)
    if probe_pack is None:
        probe_pack = federate.train_pack(data, probe_configs, 0, dataclasses.replace(settings, precision="float32",
                                                                                     epochs=1 + args.epochs))
    # the first config alone: the same streams as in the pack (counter-based), so the same representation
    single = federate.train_pack(data, probe_configs[:1], 0, dataclasses.replace(settings, precision="float32",
                                                                                 epochs=1 + args.epochs))
    probes = probe_figures(data, probe_pack, single, args.repeats)
    if args.probes_only:
        if args.write:
            _update({}, args, precisions, batches, probes=probes)
        return
    if args.write:
        commit = _commit()
        figures = {
            "measured": {"machine": f"{_cpu_model()}, {os.cpu_count()} cores", "device": "cpu", "threads": 1,
                         "torch": torch.__version__, "dataset": "adult", "train_rows": n_train,
                         "pack": args.pack, "epochs": args.epochs, "precisions": precisions, "commit": commit,
                         "batch_size": batches[0], "batches": batches,
                         "date": datetime.date.today().isoformat()},
            "unit": "seconds per 1,000 training rows",
            "methods": methods,
            "probes": probes,
        }
        with open(REFERENCE_PATH, "w") as f:
            json.dump(figures, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"written to {REFERENCE_PATH}")


def _commit() -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                      text=True).stdout.strip():
        commit += "-dirty"  # measured with uncommitted changes
    return commit


def _update(methods: dict, args, precisions: list[str], batches: list[int], probes: dict | None = None) -> None:
    """--write with --methods (or --probes-only): replace those methods' figures (or the
    probes') in the stored file, which says under ``updated`` when, where, at which commit and
    in which precisions each was measured (the others keep ``measured``'s). A precision not
    measured here is dropped from the method's figure: the estimate then uses float32's for
    it, and says so."""
    with open(REFERENCE_PATH) as f:
        figures = json.load(f)
    where = {"commit": _commit(), "date": datetime.date.today().isoformat(),
             "machine": f"{_cpu_model()}, {os.cpu_count()} cores", "epochs": args.epochs}
    for name, figure in methods.items():
        figures["methods"][name] = figure
        figures.setdefault("updated", {})[name] = {**where, "batches": batches, "precisions": precisions}
    if probes is not None:
        figures["probes"] = probes
        figures.setdefault("updated", {})["probes"] = {**where, "pack": args.pack}
    label = ", ".join([*methods, *(["the probes"] if probes is not None else [])])
    with open(REFERENCE_PATH, "w") as f:
        json.dump(figures, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"updated {label} in {REFERENCE_PATH}")


if __name__ == "__main__":
    main()
