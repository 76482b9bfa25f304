"""fairdp's driver cost per pack at thousands of packs, and planning / resuming a 100,000-config study.

    .venv/bin/python benchmarks/bench_driver.py [--packs 500 2000 10000] [--executors ray local]
                                               [--slots 8] [--sleep 1.0] [--local-packs 300]
                                               [--plan-configs 100000] [--plan-seeds 10] [--plan-pack-rows 32]
                                               [--no-plan] [--no-compact] [--rows 200]
                                               [--workdir DIR] [--keep] [--timeout S] [--json out.json]

In the style of Ray Tune's release test (10,000 trials of 1 s each, measured at 14% over the
ideal): a study of N packs whose packs only sleep, so that whatever the run takes beyond the
sleeps is the cost of the machinery around them. The packs are trained by ``bench_sleep``, a
benchmark-only plugin method (``benchmarks/plugins/sleep_method.py``): each pack sleeps ``--sleep``
seconds once (the sleep is per pack, not per config: ``fit`` gets the whole pack and sleeps
its configs' ``bench_sleep_s``, all equal), then returns label 0 for every row and a zero
representation without training anything. Everything else is fairdp's real path, as
``fairdp run`` takes it: the study file is read by ``fairdp.load_spec`` (the plugin loaded from
``plugins:``), and ``fairdp.study.run_study`` prepares, plans, starts Ray, submits, and each pack
runs ``run_pack`` (evaluation of its predictions, ``ResultStore.write_pack``), the driver draws
the progress (plain lines on a file, as ``fairdp run 2>file``: one per pack's end), relays the
workers' log records and, at the end, compacts the finished seed. The study: the built-in
``synthetic`` dataset at ``--rows`` rows (4 features), one seed, one epoch, ``evaluate:
{leakage: false, mdl: false}`` (no probe), ``pack_size: 1`` and a grid of exactly N configs
(``bench_index`` 0..N-1), hence exactly N packs.

Executors (``--executors``): ``ray``, embedded Ray on 127.0.0.1 started by fairdp with
``num_cpus=--slots`` (``run_study``'s ``num_cpus``; one CPU per trial, so ``--slots`` packs at
once: they only sleep, so more slots than cores is fine), and ``local``, the in-process
executor (one slot), run at ``--local-packs`` packs (default 300) so that it ends in minutes.
Each (executor, N) runs in a process of its own (a fresh Ray, a fresh registry), with the
``fairdp`` logger at info as the CLI sets it (timestamped, to a file). Ray's workers run at
fairdp's default nice 15 unless ``RAY_worker_niceness`` is exported: on a busy machine their
per-pack work then waits for the CPU behind everything else.

Measured per run:

- ``wall``: the ``run_study`` call, from its first line to its return (the interpreter's start,
  the imports and reading the study file are not in it; ``spec_s`` in the JSON is the latter);
- ``ideal`` = N x sleep / slots;
- ``start-up``: from the call to the first pack's start (planning, Ray's start, Tune's first
  trial), the earliest ``finished_at - pack_duration_s`` of the stored rows (``pack_duration_s``
  is timed in the worker from after the data are loaded to after the evaluation); the JSON
  splits it at the log lines "starting an embedded Ray" and "... configs to train in ... packs"
  (written once Ray is up);
- ``end``: from the last pack's end (its ``finished_at``) to the call's return: the compaction of
  the finished seed (its N pack files merged into one; its time from its log line), Tune's result
  grid, Ray's shutdown (``--no-compact``: runs with ``compact=False``, one file per pack kept);
- ``over ideal`` = (wall - ideal) / ideal, and ``driver ms/pack`` = (wall - ideal - start-up) / N,
  the cost per pack of everything that is neither the sleep nor the start-up (the end included);
  ``steady ms/pack`` = (last end - first start - ideal) / N leaves out the end too;
- ``in-pack ms``: the mean ``pack_duration_s`` minus the sleep, the part of the per-pack cost spent
  inside the pack's timing (the evaluation of the predictions), which is in the figures above too;
  writing the pack's file and its Tune report come after its ``finished_at``, so they count as
  the driver's in these figures (on Ray they overlap other slots' sleeps).

Planning and resuming (``--plan-configs``, default 100,000, over ``--plan-seeds`` seeds, 10 by
default, of ``bench_sleep``; no Ray; in a process of its own), each step timed once:

- ``spec``: ``load_spec`` of the study file, which validates and expands the grid;
- with nothing stored: ``Backlog.from_stored`` (``fairdp/study/run/_plan.py``) of an empty frame,
  ``Backlog.plan()`` (the plan table), ``Backlog.packs(--slots)``, ``record_plan`` (writing the plan
  table), and ``run_study(..., dry_run=True)`` end to end (``prepare``: the data load and checks;
  ``plan_run`` of ``fairdp/study/run/_runner.py``: reading the store, the resume checks, the backlog,
  the packs; the dry run's lines and estimate);
- with every config stored: the rows are generated first, from one real row of a pack trained by
  ``trained_pack`` (no sleep) copied to every (seed, config) with its ``config_id``, ``pack_id``,
  ``bench_index`` and ``pack_size``, written by ``ResultStore.write_pack`` in files of
  ``--plan-pack-rows`` rows (default 32, fairdp's largest CPU pack: a store as an interrupted run
  leaves it, one file per pack), with the plan table beside them; its time is printed, not among the figures. Then ``ResultStore.read``
  (what ``Prepared.stored_rows`` reads), the same steps over those rows, the dry run, and a real
  ``run_study`` that finds everything stored (the plan and selection written, nothing trained);
- the same store compacted (``compact_store``: the finished seeds' pack files merged into files
  of up to 2**18 rows, as a run that finishes its seeds leaves it; the compaction's time is printed, not among the figures), then
  every step of the stored case again.

``planning total`` = spec + from_stored + plan + packs (+ the store's read when stored), against
the target of 5 s; the dry run and the resume are the end-to-end figures (a plan's figures
with nothing stored come from the same process, after the data were loaded once).

Prints one table (executor, packs, slots, sleep s, wall s, ideal s, start-up s, over ideal %,
driver ms/pack, then end s, steady ms/pack, in-pack ms), the planning and resume timings, and
writes ``--json OUT`` if given. Everything goes in a temporary work directory (``--workdir`` to
choose it), removed at the end unless ``--keep``. One run, one timing each: on a shared machine
rerun before trusting a difference of a few percent. A run that fails is reported with its
last stderr line and the benchmark goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLUGIN = Path(__file__).resolve().parent / "plugins" / "sleep_method.py"  # beside, not among, the benchmarks
METHOD = "bench_sleep"
STUDY = "bench-driver"
PLAN_TARGET_S = 5.0
RAY_LINE = "starting an embedded Ray"
TRAIN_LINE = "configs to train in"
COMPACT_LINE = "compacted the finished seeds"
CASES = ("empty", "stored", "compacted")  # the planning study: nothing stored, all in pack files, compacted


def say(text: str) -> None:
    print(f"[bench_driver {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def study(configs: int, seeds: int, sleep: float, rows: int, pack_size: int | None) -> dict:
    """The study of ``bench_sleep``: ``configs`` configs per seed (``bench_index`` 0..configs-1),
    ``seeds`` seeds, no probe, one epoch, on ``rows`` rows of synthetic data."""
    spec = {"name": STUDY, "dataset": {"name": "synthetic", "rows": rows, "features": 4},
            "seeds": list(range(seeds)), "train": {"epochs": 1},
            "evaluate": {"leakage": False, "mdl": False}, "plugins": [str(PLUGIN)],
            "methods": {METHOD: {"grid": {"bench_index": {"start": 0, "stop": configs - 1, "step": 1},
                                          "bench_sleep_s": [sleep]}}}}
    if pack_size is not None:
        spec["pack_size"] = pack_size
    return spec


def write_study(path: Path, spec: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def cli_logging(path: Path) -> None:
    """The ``fairdp`` logger at info as ``fairdp run`` sets it, each line with its time, to ``path``."""
    import logging

    log = logging.getLogger("fairdp")
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(created).3f %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)


def compact_seconds(log: Path) -> float | None:
    """The seconds the run's compaction took, as its line says ("... in 0.7 s"), or None."""
    for line in log.read_text(errors="replace").splitlines():
        if COMPACT_LINE in line and line.endswith(" s"):
            try:
                return float(line.rsplit(" in ", 1)[1][:-2])
            except (IndexError, ValueError):
                return None
    return None


def first_line_time(log: Path, needle: str) -> float | None:
    for line in log.read_text(errors="replace").splitlines():
        stamp, _, message = line.partition(" ")
        if needle in message:
            try:
                return float(stamp)
            except ValueError:
                return None
    return None


# -- one run (in its own process: ``--run-worker``) ------------------------------------------
def run_worker(work: Path, executor: str, packs: int, slots: int, sleep: float, rows: int, compact: bool) -> None:
    """Run the study of ``packs`` sleeping packs on ``executor``; its figures as JSON in
    ``work/<executor>-<packs>.json``."""
    name = f"{executor}-{packs}"
    log = work / f"{name}.log"
    cli_logging(log)
    t = time.perf_counter()
    from fairdp.study import load_spec, read_results, run_study

    import_s = time.perf_counter() - t
    import pandas as pd

    path = write_study(work / f"{name}.yaml", study(packs, 1, sleep, rows, pack_size=1))
    t = time.perf_counter()
    spec = load_spec(path)
    spec_s = time.perf_counter() - t
    results = work / name
    with open(work / f"{name}.progress", "w") as progress:
        t0 = time.time()
        summary = run_study(spec, str(results), executor=executor, num_cpus=slots if executor == "ray" else None,
                            progress_stream=progress, compact=compact)
        t1 = time.time()
    df = read_results(str(results))
    ok = df[df["status"] == "ok"]
    ends = (ok["finished_at"] - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy()
    starts = ends - ok["pack_duration_s"].to_numpy()
    ray_at, train_at = first_line_time(log, RAY_LINE), first_line_time(log, TRAIN_LINE)
    out = {"executor": executor, "packs": packs, "slots": slots if executor == "ray" else 1, "sleep_s": sleep,
           "wall_s": t1 - t0, "import_s": import_s, "spec_s": spec_s,
           "startup_s": float(starts.min() - t0) if len(ok) else None,
           "end_s": float(t1 - ends.max()) if len(ok) else None,
           "first_start_to_last_end_s": float(ends.max() - starts.min()) if len(ok) else None,
           "until_ray_line_s": ray_at - t0 if ray_at else None,
           "until_train_line_s": train_at - t0 if train_at else None, "compact_s": compact_seconds(log),
           "mean_pack_duration_s": float(ok["pack_duration_s"].mean()) if len(ok) else None,
           "summary_packs": summary.packs, "failed_packs": summary.failed_packs,
           "unfinished_packs": summary.unfinished_packs, "ok_rows": int(len(ok)), "rows": int(len(df))}
    (work / f"{name}.json").write_text(json.dumps(out))


def figures(run: dict) -> dict:
    """The derived figures of one run: ideal, overhead, per-pack costs."""
    n, sleep, slots = run["packs"], run["sleep_s"], run["slots"]
    ideal = n * sleep / slots
    out = {"ideal_s": ideal, "over_ideal_pct": 100.0 * (run["wall_s"] - ideal) / ideal if ideal else None}
    if run.get("startup_s") is not None:
        out["driver_ms_per_pack"] = 1000.0 * (run["wall_s"] - ideal - run["startup_s"]) / n
        out["steady_ms_per_pack"] = 1000.0 * (run["first_start_to_last_end_s"] - ideal) / n
        out["in_pack_ms"] = 1000.0 * (run["mean_pack_duration_s"] - sleep)
    return out


def kill_group(proc: subprocess.Popen) -> None:
    """End ``proc`` and what it started in its own session (``start_new_session``)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_process(argv: list[str], work: Path, name: str, timeout: float | None) -> tuple[int, str]:
    """Run ``argv`` in a session of its own, stdout and stderr to files in ``work``: exit code and
    the last line of its stderr."""
    out, err = work / f"{name}.stdout", work / f"{name}.stderr"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=o, stderr=e, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            return -9, f"timed out after {timeout:g} s"
        except KeyboardInterrupt:
            kill_group(proc)
            raise
    return rc, last_line(err.read_text(errors="replace"))


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"


def measure_run(work: Path, executor: str, packs: int, slots: int, sleep: float, rows: int, compact: bool,
                timeout: float | None, keep: bool) -> dict:
    name = f"{executor}-{packs}"
    say(f"{executor}: {packs:,} packs of {sleep:g} s on {slots if executor == 'ray' else 1} slot(s)...")
    t = time.perf_counter()
    rc, err = run_process([sys.executable, str(Path(__file__).resolve()), "--run-worker", str(work), executor,
                           str(packs), str(slots), str(sleep), str(rows), str(int(compact))], work, name, timeout)
    process_s = time.perf_counter() - t
    result = work / f"{name}.json"
    base = {"executor": executor, "packs": packs, "slots": slots if executor == "ray" else 1, "sleep_s": sleep,
            "process_s": process_s}
    if rc != 0 or not result.exists():
        say(f"{executor} at {packs:,} packs failed: exit {rc}: {err}")
        return {**base, "error": f"exit {rc}: {err}"}
    run = {**base, **json.loads(result.read_text())}
    run.update(figures(run))
    if run["ok_rows"] != packs or run["failed_packs"] or run["unfinished_packs"]:
        run["error"] = (f"{run['ok_rows']} ok rows of {packs}, {run['failed_packs']} failed, "
                        f"{run['unfinished_packs']} unfinished packs")
    say(f"{executor} at {packs:,} packs: wall {run['wall_s']:.1f} s (ideal {run['ideal_s']:.1f} s)")
    if not keep:  # the next run's disk
        shutil.rmtree(work / name, ignore_errors=True)
    return run


# -- planning and resuming (in its own process: ``--plan-worker``) ---------------------------
def timed(out: dict, key: str, fn):
    t = time.perf_counter()
    value = fn()
    out[key] = time.perf_counter() - t
    return value


def plan_steps(spec, stored, slots: int, store, out: dict, prefix: str) -> None:
    """``Backlog.from_stored``, its plan table, its packs and ``record_plan``, each timed into ``out``."""
    from fairdp.study.run._plan import Backlog, record_plan

    backlog = timed(out, f"{prefix}from_stored_s", lambda: Backlog.from_stored(spec, stored))
    plan = timed(out, f"{prefix}plan_table_s", backlog.plan)
    packs = timed(out, f"{prefix}packs_s", lambda: backlog.packs(slots))
    timed(out, f"{prefix}record_plan_s", lambda: record_plan(store, spec, plan=plan))
    out[f"{prefix}done"] = backlog.done
    out[f"{prefix}packs"] = len(packs)
    out[f"{prefix}plan_rows"] = len(plan)


def generate_stored(spec, results: str, pack_rows: int) -> tuple[int, float]:
    """Every config of ``spec`` stored at ``results`` with status ok, from one real row (a pack
    trained by ``trained_pack``) copied to each (seed, config): files of ``pack_rows`` rows, as
    ``run_pack`` writes them, and the plan table beside them. Returns the files written and
    the seconds it took."""
    from fairdp.methods import get_method
    from fairdp.study.executors._executors import make_executor
    from fairdp.study.executors._worker import trained_pack
    from fairdp.study.run._plan import Pack, plan_table, run_configs
    from fairdp.study.run._prepare import prepare
    from fairdp.study.store._plans import PLAN_TABLE
    from fairdp.study.store._store import pack_id

    t = time.perf_counter()
    prep = prepare(spec, results, make_executor("local"), "run", [METHOD])
    plan = spec.methods[0]
    configs, ids = run_configs(spec, plan, spec.seeds[0])
    template = trained_pack(prep.ctx, Pack(METHOD, spec.seeds[0], (configs[0],), (ids[0],)))[0][0]
    method = get_method(METHOD)
    store, files = prep.store, 0
    for seed in spec.seeds:
        configs, ids = run_configs(spec, plan, seed)
        for start in range(0, len(ids), pack_rows):
            chunk_ids = ids[start:start + pack_rows]
            pid = pack_id(METHOD, seed, chunk_ids)
            rows = []
            for config, cid in zip(configs[start:start + pack_rows], chunk_ids):
                row = dict(template, seed=seed, config_id=cid, pack_id=pid, pack_size=len(chunk_ids))
                row.update({h.name: h.to_column(config[h.name]) for h in method.hyperparams})
                rows.append(row)
            store.write_pack(rows, spec.dataset, METHOD, seed, pid)
            files += 1
    store.write_side_table(plan_table(spec), PLAN_TABLE)
    return files, time.perf_counter() - t


def plan_worker(work: Path, configs: int, seeds: int, slots: int, pack_rows: int, rows: int) -> None:
    """Planning and resuming a study of ``configs`` configs (over ``seeds`` seeds) without Ray;
    the figures as JSON in ``work/plan.json``."""
    per_seed = -(-configs // seeds)
    out: dict = {"configs": per_seed * seeds, "seeds": seeds, "configs_per_seed": per_seed, "slots": slots,
                 "pack_rows": pack_rows}
    cli_logging(work / "plan.log")
    import pandas as pd

    from fairdp.study import load_spec, run_study
    from fairdp.study._context import study_store
    from fairdp.study.store._compact import compact_store

    path = write_study(work / "plan.yaml", study(per_seed, seeds, 0.0, rows, pack_size=None))
    spec = timed(out, "spec_s", lambda: load_spec(path))
    out["methods_configs"] = sum(len(m.configs) for m in spec.methods)

    empty = work / "plan-empty"
    plan_steps(spec, pd.DataFrame(), slots, study_store(spec, str(empty)), out, "empty_")
    shutil.rmtree(empty, ignore_errors=True)
    for p in empty.parent.glob(f"{empty.name}.*.parquet"):
        p.unlink()
    dry = timed(out, "empty_dry_run_s", lambda: run_study(spec, str(empty), executor="local", num_cpus=None,
                                                          dry_run=True))
    out["empty_dry_run_packs"] = dry.packs

    stored_at = work / "plan-stored"
    say(f"plan: generating {out['configs']:,} stored rows in files of {pack_rows} rows...")
    out["generated_files"], out["generation_s"] = generate_stored(spec, str(stored_at), pack_rows)
    say(f"plan: generated {out['generated_files']:,} files in {out['generation_s']:.1f} s")
    store = study_store(spec, str(stored_at))
    stored, corrupt = timed(out, "stored_read_s", lambda: store.read(on_corrupt="collect"))
    out["stored_rows"], out["stored_corrupt"] = len(stored), len(corrupt)
    plan_steps(spec, stored, slots, store, out, "stored_")
    dry = timed(out, "stored_dry_run_s", lambda: run_study(spec, str(stored_at), executor="local", dry_run=True))
    out["stored_dry_run_packs"], out["stored_dry_run_done"] = dry.packs, dry.already_stored
    resumed = timed(out, "stored_resume_s", lambda: run_study(spec, str(stored_at), executor="local"))
    out["stored_resume_packs"], out["stored_resume_done"] = resumed.packs, resumed.already_stored

    # the same store as a finished run leaves it: each seed's pack files merged into one
    compaction = timed(out, "compaction_s", lambda: compact_store(store, seeds=set(spec.seeds)))
    out["compacted_files"] = sum(1 for _ in stored_at.rglob("*.parquet"))
    out["compaction"] = compaction.describe()
    stored, corrupt = timed(out, "compacted_read_s", lambda: store.read(on_corrupt="collect"))
    out["compacted_rows"] = len(stored)
    plan_steps(spec, stored, slots, store, out, "compacted_")
    timed(out, "compacted_dry_run_s", lambda: run_study(spec, str(stored_at), executor="local", dry_run=True))
    resumed = timed(out, "compacted_resume_s", lambda: run_study(spec, str(stored_at), executor="local"))
    out["compacted_resume_done"] = resumed.already_stored
    (work / "plan.json").write_text(json.dumps(out))


def measure_plan(work: Path, configs: int, seeds: int, slots: int, pack_rows: int, rows: int,
                 timeout: float | None) -> dict:
    say(f"planning and resuming {configs:,} configs over {seeds} seeds (no Ray)...")
    rc, err = run_process([sys.executable, str(Path(__file__).resolve()), "--plan-worker", str(work), str(configs),
                           str(seeds), str(slots), str(pack_rows), str(rows)], work, "plan", timeout)
    result = work / "plan.json"
    if rc != 0 or not result.exists():
        say(f"planning failed: exit {rc}: {err}")
        return {"configs": configs, "error": f"exit {rc}: {err}"}
    plan = json.loads(result.read_text())
    for case in CASES:
        total = plan["spec_s"] + sum(plan[f"{case}_{k}_s"] for k in ("from_stored", "plan_table", "packs"))
        plan[f"{case}_total_s"] = total + plan.get(f"{case}_read_s", 0.0)
    return plan


# -- printing ------------------------------------------------------------------------------
def fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_runs(runs: list[dict]) -> None:
    print("| executor | packs | slots | sleep s | wall s | ideal s | start-up s | over ideal % | driver ms/pack "
          "| end s | steady ms/pack | in-pack ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        head = f"| {r['executor']} | {r['packs']:,} | {r['slots']} | {r['sleep_s']:g} |"
        if "wall_s" not in r:
            print(f"{head} failed: {r['error']} | - | - | - | - | - | - | - |")
            continue
        print(f"{head} {r['wall_s']:.1f} | {r['ideal_s']:.1f} | {fmt(r.get('startup_s'), '.1f')} | "
              f"{fmt(r['over_ideal_pct'], '.1f')} | {fmt(r.get('driver_ms_per_pack'), '.1f')} | "
              f"{fmt(r.get('end_s'), '.1f')} | {fmt(r.get('steady_ms_per_pack'), '.1f')} | "
              f"{fmt(r.get('in_pack_ms'), '.1f')} |")
        if r.get("error"):
            print(f"|  | (incomplete: {r['error']}) |||||||||||")
    ray = [r for r in runs if r.get("until_ray_line_s") is not None and r.get("startup_s") is not None]
    if ray:
        print("\nStart-up of the Ray runs, s: (call -> 'starting an embedded Ray' line: preparing and planning) + "
              "(-> Ray up, the progress line) + (-> the first pack's start: Tune)")
        for r in ray:
            until_train = r.get("until_train_line_s") or r["until_ray_line_s"]
            print(f"  {r['packs']:,} packs: {r['until_ray_line_s']:.1f} + {until_train - r['until_ray_line_s']:.1f} + "
                  f"{r['startup_s'] - until_train:.1f} = {r['startup_s']:.1f}")
    ends = [r for r in runs if r.get("end_s") is not None]
    if ends:
        print("\nEnd, s (the last pack's end -> the call's return): the compaction of the finished seed + the rest "
              "(Tune's result grid, Ray's shutdown)")
        for r in ends:
            compact = r.get("compact_s") or 0.0
            print(f"  {r['executor']} {r['packs']:,} packs: {compact:.1f} + {r['end_s'] - compact:.1f} = {r['end_s']:.1f}")


def print_plan(plan: dict) -> None:
    if "error" in plan:
        print(f"\nPlanning {plan['configs']:,} configs: failed: {plan['error']}")
        return
    print(f"\nPlanning and resuming {plan['configs']:,} configs ({plan['seeds']} seeds x {plan['configs_per_seed']:,}, "
          f"{plan['slots']} slots; no Ray), s, each timed once:")
    print(f"| step | nothing stored | all stored ({plan['generated_files']:,} pack files) | all stored, compacted "
          f"({plan['compacted_files']:,} file(s)) |")
    print("|---|---|---|---|")

    def row(label: str, values) -> None:
        print(f"| {label} | " + " | ".join(fmt(v, ".2f") for v in values) + " |")

    row("spec (load_spec: validation, grid expansion)", [plan["spec_s"]] * 3)
    row(f"ResultStore.read ({plan['stored_rows']:,} rows)", [None, plan["stored_read_s"], plan["compacted_read_s"]])
    for key, label in (("from_stored", "Backlog.from_stored"), ("plan_table", "Backlog.plan (the plan table)"),
                       ("packs", "Backlog.packs"), ("record_plan", "record_plan (the plan table written)")):
        row(label, [plan[f"{case}_{key}_s"] for case in CASES])
    verdicts = []
    for case in CASES:
        plan[f"{case}_verdict"] = "ok" if plan[f"{case}_total_s"] <= PLAN_TARGET_S else "over"
        verdicts.append(f"{plan[f'{case}_total_s']:.2f} ({plan[f'{case}_verdict']})")
    print(f"| **planning total** (spec + read + from_stored + plan + packs; target <= {PLAN_TARGET_S:g} s) | "
          + " | ".join(verdicts) + " |")
    row("run_study(dry_run=True), end to end", [plan[f"{case}_dry_run_s"] for case in CASES])
    row("run_study with everything stored (nothing trained)", [None, plan["stored_resume_s"], plan["compacted_resume_s"]])
    print(f"(packs planned: {plan['empty_packs']:,} with nothing stored, {plan['stored_packs']:,} with all stored "
          f"({plan['stored_done']:,} done); not among the figures: generating the stored rows {plan['generation_s']:.1f} s, "
          f"compacting them {plan['compaction_s']:.1f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packs", type=int, nargs="+", default=[2000], help="packs of each ray run (several: growth)")
    ap.add_argument("--executors", nargs="+", choices=["ray", "local"], default=["ray", "local"])
    ap.add_argument("--slots", type=int, default=8, help="embedded Ray's CPUs, one pack each (default 8)")
    ap.add_argument("--sleep", type=float, default=1.0, help="seconds each pack sleeps (default 1)")
    ap.add_argument("--local-packs", type=int, nargs="+", default=[300],
                    help="packs of each local run (one slot; default 300)")
    ap.add_argument("--rows", type=int, default=200, help="rows of the synthetic dataset (default 200)")
    ap.add_argument("--plan-configs", type=int, default=100000, help="configs of the planning study (default 100,000)")
    ap.add_argument("--plan-seeds", type=int, default=10, help="seeds the planning study's configs are spread over")
    ap.add_argument("--plan-pack-rows", type=int, default=32,
                    help="rows per stored pack file of the resumed study (default 32, fairdp's largest CPU pack)")
    ap.add_argument("--no-plan", action="store_true", help="skip the planning and resuming timings")
    ap.add_argument("--no-compact", action="store_true",
                    help="runs keep one file per pack (run_study's compact=False): the end without compaction")
    ap.add_argument("--workdir", help="where the studies go (default: a fresh temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (results, logs, progress files)")
    ap.add_argument("--timeout", type=float, help="seconds one run (or the planning part) may take")
    ap.add_argument("--json", help="write the figures here as JSON too")
    ap.add_argument("--run-worker", nargs=7, metavar=("WORK", "EXECUTOR", "PACKS", "SLOTS", "SLEEP", "ROWS", "COMPACT"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--plan-worker", nargs=6, metavar=("WORK", "CONFIGS", "SEEDS", "SLOTS", "PACK_ROWS", "ROWS"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run_worker:
        work, executor, packs, slots, sleep, rows, compact = args.run_worker
        run_worker(Path(work), executor, int(packs), int(slots), float(sleep), int(rows), compact == "1")
        return
    if args.plan_worker:
        work, configs, seeds, slots, pack_rows, rows = args.plan_worker
        plan_worker(Path(work), int(configs), int(seeds), int(slots), int(pack_rows), int(rows))
        return
    if min(args.packs + args.local_packs) < 1 or args.slots < 1 or args.sleep <= 0:
        ap.error("--packs and --local-packs: at least 1; --slots: at least 1; --sleep: > 0")
    if args.plan_configs < args.plan_seeds or args.plan_configs > 100000 * args.plan_seeds:
        ap.error("--plan-configs: at least one config per seed, at most 100,000 per seed (a method's grid limit)")
    if args.workdir:
        work = Path(args.workdir).resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="bench_driver-"))
    say(f"work directory {work}")
    runs: list[dict] = []
    plan = None
    try:
        for executor in args.executors:
            for n in sorted(set(args.packs if executor == "ray" else args.local_packs)):
                runs.append(measure_run(work, executor, n, args.slots, args.sleep, args.rows, not args.no_compact,
                                        args.timeout, args.keep))
        if not args.no_plan:
            plan = measure_plan(work, args.plan_configs, args.plan_seeds, args.slots, args.plan_pack_rows, args.rows,
                                args.timeout)
    finally:
        if args.keep:
            say(f"kept {work}")
        elif args.workdir:  # the user's folder: only what this run put there
            for p in work.iterdir():
                if p.name.startswith(("ray-", "local-", "plan")):
                    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink()
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"Sleeping packs of {args.sleep:g} s through fairdp's driver ({METHOD}, pack_size 1, synthetic data "
          f"{args.rows} rows, no probes); python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"RAY_worker_niceness={os.environ.get('RAY_worker_niceness', 'unset (15)')}")
    print()
    print_runs(runs)
    if plan is not None:
        print_plan(plan)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sleep_s": args.sleep, "slots": args.slots, "rows": args.rows, "runs": runs, "plan": plan,
                       "plan_target_s": PLAN_TARGET_S}, f, indent=2)


if __name__ == "__main__":
    main()
