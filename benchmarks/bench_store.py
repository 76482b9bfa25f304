"""How fairdp's results commands (analyze, report, compare) scale with stored rows and pack files.

    .venv/bin/python benchmarks/bench_store.py [--sizes 1000 10000 100000 1000000] [--compacted [--compacted-only]]
                                              [--commands analyze report report-tables compare imports]
                                              [--workdir DIR] [--keep] [--timeout S] [--json out.json]

Each command is set against the floor, a bare pyarrow scan of the same files. For each size N
a store of exactly N rows is generated under the work directory (a fresh temporary one unless
``--workdir``; what the benchmark put there is removed at the end unless ``--keep``): the
committed rows of ``results/pfld-adult`` (5,350 rows in 290 pack files, 6 methods, seeds 0-9) copied again
and again, copy k with seed + 1000 k, each copied pack written as fairdp writes one
(``ResultStore.write_pack``, named by ``pack_id`` of its method, new seed and config ids), with
the original pack sizes, so the pack files grow with N (10^6 rows: ~54,000 files); the last
copy is cut short so that exactly N rows are written. The stored selection is copied beside
each store and the plan replicated as the rows are (analyze, report and compare read both);
the per-epoch curves (``<results>.history``) and stored predictions are not, so report draws
no learning curves. Copies are written seed by seed, so a store cut short holds every method.
Generation runs in a process of its own (``fairdp.study`` imported torch, and this process
imports no fairdp module); its time is printed, and is not among the figures.

Then, per size, each command runs in a subprocess of its own, timed (wall) with that
subprocess's own peak RSS (``os.wait4``):

- ``python -m fairdp analyze STORE``;
- ``python -m fairdp report STORE -o DIR``, figures included;
- ``python -m fairdp report STORE -o DIR --no-figures`` (``report-tables``): the same pages without
  their figures, what the target "report, its figures aside" times;
- ``python -m fairdp compare STORE STORE``: the store against itself (a second store of other
  seeds would double the generation time; compare still reads both sides);
- the floor, always measured as the ratios' reference: ``pyarrow.dataset.dataset(<the pack
  files>, format="parquet").to_table()`` of the same files, all columns, alone and followed by
  ``.to_pandas()``, each a subprocess of its own (``in-proc s`` is the scan's own time, without
  the interpreter's start and pyarrow's import).

``--compacted``: after each size, ``fairdp compact STORE`` is timed (every generated seed is
finished, so each method's seed becomes one file), and the floor and the commands are measured
again on the compacted store, labelled "(compacted)"; ``--compacted-only`` measures only those
(the uncompacted commands at 10^6 rows take minutes each).

``imports`` times ``python -c "import fairdp.cli"`` and runs each chosen command once at the
smallest size under ``-X importtime`` through a wrapper that prints, at exit, which of torch,
ray, optuna, matplotlib and sklearn are in ``sys.modules``, with the chain of modules that
first imported each: the analysis commands should import neither torch nor Ray, and this
reports what they do rather than asserting it.

Prints one table (rows, pack files, command, wall s, rows/s, peak MiB, wall / floor at that
size, the floor being the scan + to_pandas, of the compacted store under ``--compacted-only``)
and, per command, how its time grows between consecutive sizes against the rows (exponent 1:
linear). One run, one timing each: on a shared machine rerun before trusting a difference of
a few percent. A command that fails is reported with its last stderr line and the benchmark
goes on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "results" / "pfld-adult"
SIDE_TABLES = ("selection",)  # copied as they are; the plan is replicated with the rows
PLAN = "plan"
SEED_STEP = 1000
COMMANDS = ("analyze", "report", "report-tables", "compare")
HEAVY = ("torch", "ray", "optuna", "matplotlib", "sklearn")

FLOOR_SCRIPT = """
import json, sys, time
import pyarrow.dataset as ds
paths = open(sys.argv[1]).read().split("\\n")
t = time.perf_counter()
table = ds.dataset(paths, format="parquet").to_table()
scan = time.perf_counter() - t
out = {"scan_s": scan, "rows": table.num_rows, "columns": table.num_columns}
if sys.argv[2] == "pandas":
    t = time.perf_counter()
    table.to_pandas()
    out["to_pandas_s"] = time.perf_counter() - t
print(json.dumps(out))
"""

# runs a fairdp command as `python -m fairdp` does and says, at exit, which heavy modules it imported
IMPORTS_WRAPPER = """
import sys
heavy = {heavy!r}
rc = 1
try:
    from fairdp.cli import main
    rc = main(sys.argv[1:])
finally:
    found = [m for m in heavy if m in sys.modules]
    print("BENCH-HEAVY:" + ",".join(found), file=sys.stderr)
sys.exit(rc)
"""


@dataclass
class Figure:
    size: int
    packs: int
    command: str
    wall_s: float | None
    peak_mib: float | None
    inner_s: float | None = None  # the floor's own time, in its process
    error: str | None = None

    @property
    def rows_per_s(self) -> float | None:
        return self.size / self.wall_s if self.wall_s else None


def say(text: str) -> None:
    print(f"[bench_store {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# -- generation ----------------------------------------------------------------------------
# In a process of its own (``--generate-worker``): fairdp.study imported torch when this was
# written, and this process, which measures what the commands import, imports no fairdp module.
def source_packs() -> list[tuple[str, str, int, list[dict]]]:
    """The committed rows of ``SOURCE`` as packs (dataset, method, seed, rows as fairdp's
    store writes them: one dict per row, columns of the store's schema, nulls as None),
    seed by seed (sorted by seed, dataset, method, pack_id): a store cut short holds whole seeds
    of every method, not every seed of the first methods (at 1,000 rows, DP-SGD's alone, which
    has no fairness notion, and the study's selection by notion fails on it)."""
    import pyarrow as pa

    from fairdp.study import ResultStore, read_results

    columns = ResultStore(SOURCE).schema.names
    df = read_results(str(SOURCE))
    df = df[[c for c in df.columns if c in columns]]  # not the module keywords read_results derives
    packs = []
    for (seed, dataset, method, _), group in df.groupby(["seed", "dataset", "method", "pack_id"], sort=True):
        rows = pa.Table.from_pandas(group, preserve_index=False).to_pylist()  # NaN, NaT -> None
        packs.append((dataset, method, int(seed), rows))
    return packs


def generate(root: Path, n: int, packs, plan) -> list[str]:
    """A store of exactly ``n`` rows at ``root`` (``packs`` copied, copy k at seed + 1000 k, the
    last copy cut short), its selection copied and its plan replicated beside it; returns the
    paths of the pack files written."""
    from fairdp.study import ResultStore
    from fairdp.study.store._store import pack_id

    store = ResultStore(root)
    written, paths, keys = 0, [], []
    copy = 0
    while written < n:
        for dataset, method, seed, rows in packs:
            if written >= n:
                break
            rows = rows[: n - written]
            new_seed = seed + copy * SEED_STEP
            pid = pack_id(method, new_seed, [r["config_id"] for r in rows])
            out = [{**r, "seed": new_seed, "pack_id": pid, "pack_size": len(rows)} for r in rows]
            paths.append(store.write_pack(out, dataset, method, new_seed, pid))
            keys.extend((dataset, method, seed, new_seed, r["config_id"]) for r in rows)
            written += len(rows)
        copy += 1
    for name in SIDE_TABLES:
        src = Path(f"{SOURCE}.{name}.parquet")
        if src.exists():
            shutil.copyfile(src, f"{root}.{name}.parquet")
    if plan is not None:
        import pandas as pd

        done = pd.DataFrame(keys, columns=["dataset", "method", "seed", "new_seed", "config_id"])
        replicated = done.merge(plan, on=["dataset", "method", "seed", "config_id"], how="inner")
        replicated = replicated.drop(columns="seed").rename(columns={"new_seed": "seed"})[list(plan.columns)]
        replicated.to_parquet(f"{root}.{PLAN}.parquet", index=False)
    return paths


def generate_worker(root: Path, n: int, paths_file: Path) -> None:
    """The worker process: the store of ``n`` rows at ``root``; the paths of its pack files
    in ``paths_file``, one a line; on stdout, as JSON, the rows and files per copy and the
    seconds spent reading the source and writing the store."""
    import pandas as pd

    t = time.perf_counter()
    packs = source_packs()
    plan_path = Path(f"{SOURCE}.{PLAN}.parquet")
    plan = pd.read_parquet(plan_path) if plan_path.exists() else None
    read_s = time.perf_counter() - t
    t = time.perf_counter()
    paths = generate(root, n, packs, plan)
    write_s = time.perf_counter() - t
    paths_file.write_text("\n".join(paths))
    print(json.dumps({"copy_rows": sum(len(rows) for *_, rows in packs), "copy_packs": len(packs),
                      "pack_files": len(paths), "read_s": read_s, "write_s": write_s}))


# -- measuring -----------------------------------------------------------------------------
def measure(argv: list[str], cwd: Path, timeout: float | None) -> tuple[float, float, int, str, str]:
    """Run ``argv``; its wall seconds, its own peak RSS in MiB (``os.wait4``: this child's
    alone), exit code, stdout and stderr."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        if timeout is None:
            _, status, usage = os.wait4(proc.pid, 0)
        else:
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() - t > timeout:
                    proc.kill()
                    _, status, usage = os.wait4(proc.pid, 0)
                    break
                time.sleep(0.05)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if timeout is not None and wall > timeout and proc.returncode < 0:
        stderr += f"\ntimed out after {timeout:g} s"
    return wall, usage.ru_maxrss / 1024, proc.returncode, stdout, stderr


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"


def command_argv(command: str, store: Path, out_dir: Path) -> list[str]:
    if command == "analyze":
        return ["analyze", str(store)]
    if command == "report":
        return ["report", str(store), "-o", str(out_dir)]
    if command == "report-tables":
        return ["report", str(store), "-o", str(out_dir), "--no-figures"]
    if command == "compare":
        return ["compare", str(store), str(store)]
    raise ValueError(command)


def run_command(command: str, n: int, n_packs: int, store: Path, work: Path, timeout: float | None) -> Figure:
    out_dir = work / f"report-{n}"
    shutil.rmtree(out_dir, ignore_errors=True)
    argv = [sys.executable, "-m", "fairdp", *command_argv(command, store, out_dir)]
    wall, peak, rc, _, err = measure(argv, work, timeout)
    shutil.rmtree(out_dir, ignore_errors=True)
    if rc != 0:
        return Figure(n, n_packs, label(command), None, peak, error=f"exit {rc}: {last_line(err)}")
    return Figure(n, n_packs, label(command), wall, peak)


def label(command: str) -> str:
    return {"report": "report (with figures)", "report-tables": "report --no-figures",
            "compare": "compare (store vs itself)"}.get(command, command)


def run_floor(n: int, n_packs: int, paths_file: Path, work: Path, timeout: float | None) -> list[Figure]:
    figures = []
    for what, name in (("scan", "floor: pyarrow scan"), ("pandas", "floor: scan + to_pandas")):
        wall, peak, rc, out, err = measure([sys.executable, "-c", FLOOR_SCRIPT, str(paths_file), what], work, timeout)
        if rc != 0:
            figures.append(Figure(n, n_packs, name, None, peak, error=f"exit {rc}: {last_line(err)}"))
            continue
        inner = json.loads(out.strip().splitlines()[-1])
        if inner["rows"] != n:
            figures.append(Figure(n, n_packs, name, None, peak, error=f"scanned {inner['rows']} rows, not {n}"))
            continue
        figures.append(Figure(n, n_packs, name, wall, peak, inner["scan_s"] + inner.get("to_pandas_s", 0.0)))
    return figures


def run_compacted(commands, n: int, store: Path, work: Path, timeout: float | None) -> list[Figure]:
    """``fairdp compact STORE`` timed, then the floor and ``commands`` again on the compacted
    store (labelled "(compacted)"): every seed of a generated store is finished, so each
    (method, seed) becomes one file."""
    say(f"compacting {n:,} rows...")
    wall, peak, rc, _, err = measure([sys.executable, "-m", "fairdp", "compact", str(store)], work, timeout)
    files = sorted(str(p) for p in store.rglob("part-*.parquet"))
    if rc != 0:
        return [Figure(n, len(files), "fairdp compact", None, peak, error=f"exit {rc}: {last_line(err)}")]
    figures = [Figure(n, len(files), "fairdp compact", wall, peak)]
    paths_file = work / f"paths-{n}-compacted.txt"
    paths_file.write_text("\n".join(files))
    say(f"compacted into {len(files):,} files in {wall:.1f} s; the floor and the commands again...")
    figures += run_floor(n, len(files), paths_file, work, timeout)
    figures += [run_command(command, n, len(files), store, work, timeout) for command in commands]
    paths_file.unlink()
    for fig in figures[1:]:
        fig.command += " (compacted)"
    return figures


def import_entries(importtime: str) -> list[tuple[int, str, float]]:
    """``-X importtime``'s stderr as (depth, module, cumulative seconds), in its order (an
    import after the imports it made, indented two spaces deeper per level)."""
    entries = []
    for line in importtime.splitlines():
        if not line.startswith("import time:") or line.count("|") != 2:
            continue
        _, cumulative, name = line[len("import time:"):].split("|")
        if not cumulative.strip().isdigit():  # the header
            continue
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        entries.append((depth, name.strip(), int(cumulative) / 1e6))
    return entries


def import_chains(importtime: str) -> dict[str, list[str]]:
    """For each heavy module imported, the chain of modules that imported it first,
    outermost first."""
    entries = [(depth, name) for depth, name, _ in import_entries(importtime)]
    chains = {}
    for i, (depth, name) in enumerate(entries):
        if name not in HEAVY or name in chains:
            continue
        chain, level = [name], depth
        for d, parent in entries[i + 1:]:
            if d < level:
                chain.append(parent)
                level = d
                if d == 0:
                    break
        chains[name] = chain[::-1]
    return chains


def run_imports(commands, n: int, store: Path, work: Path, timeout: float | None) -> dict:
    """``import fairdp.cli`` timed, and the heavy modules each command imports (at size ``n``)."""
    say("timing python -c 'import fairdp.cli'...")
    wall, peak, rc, _, err = measure([sys.executable, "-c", "import fairdp.cli"], work, timeout)
    result: dict = {"import_fairdp_cli": {"wall_s": wall, "peak_mib": peak,
                                          "error": None if rc == 0 else last_line(err)}, "commands": {}}
    wrapper = IMPORTS_WRAPPER.format(heavy=HEAVY)
    for command in commands:
        say(f"checking the imports of {command} at {n:,} rows...")
        out_dir = work / f"report-imports-{n}"
        argv = [sys.executable, "-X", "importtime", "-c", wrapper, *command_argv(command, store, out_dir)]
        _, _, rc, _, err = measure(argv, work, timeout)
        shutil.rmtree(out_dir, ignore_errors=True)
        found = next((ln.split(":", 1)[1] for ln in err.splitlines() if ln.startswith("BENCH-HEAVY:")), None)
        chains = import_chains(err)
        entries = import_entries(err)
        result["commands"][command] = {
            "heavy": None if found is None else [m for m in found.split(",") if m],
            "chains": chains, "exit": rc,
            # seconds of the imports the command made (outermost ones, cumulative), and of each heavy one
            "import_s": sum(s for d, _, s in entries if d == 0),
            "heavy_import_s": {m: next(s for _, name, s in entries if name == m) for m in chains},
            "error": None if rc == 0 else last_line("\n".join(ln for ln in err.splitlines()
                                                              if not ln.startswith(("import time:", "BENCH-"))))}
    return result


# -- printing ------------------------------------------------------------------------------
def fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_table(figures: list[Figure]) -> None:
    # the floor: the uncompacted scan + to_pandas at that size, else (--compacted-only) the compacted one
    floor = {f.size: f.wall_s for f in figures if f.command == "floor: scan + to_pandas (compacted)"}
    floor.update({f.size: f.wall_s for f in figures if f.command == "floor: scan + to_pandas"})
    print("| rows | pack files | command | wall s | rows/s | peak MiB | in-proc s | / floor |")
    print("|---|---|---|---|---|---|---|---|")
    for f in figures:
        ratio = f.wall_s / floor[f.size] if f.wall_s and floor.get(f.size) else None
        if f.error:
            print(f"| {f.size:,} | {f.packs:,} | {f.command} | failed: {f.error} | - | {fmt(f.peak_mib, '.0f')} | - | - |")
            continue
        print(f"| {f.size:,} | {f.packs:,} | {f.command} | {f.wall_s:.2f} | {f.rows_per_s:,.0f} | "
              f"{f.peak_mib:.0f} | {fmt(f.inner_s, '.2f')} | {fmt(ratio, '.1f')}x |")


def growth(figures: list[Figure]) -> list[dict]:
    """Per command, each pair of consecutive sizes: rows ratio, time ratio and the exponent
    log(time ratio) / log(rows ratio) (1: linear; near 0: a fixed cost dominates)."""
    out = []
    for command in dict.fromkeys(f.command for f in figures):
        ok = sorted((f for f in figures if f.command == command and f.wall_s), key=lambda f: f.size)
        for a, b in zip(ok, ok[1:]):
            rows, t = b.size / a.size, b.wall_s / a.wall_s
            out.append({"command": command, "from": a.size, "to": b.size, "rows_ratio": rows, "time_ratio": t,
                        "peak_ratio": b.peak_mib / a.peak_mib, "exponent": math.log(t) / math.log(rows)})
    return out


def print_growth(rows: list[dict]) -> None:
    if not rows:
        return
    print("\nGrowth between consecutive sizes (exponent = log(time ratio) / log(rows ratio): 1 linear, "
          "0 a fixed cost)")
    print("| command | rows | rows ratio | time ratio | exponent | peak ratio |")
    print("|---|---|---|---|---|---|")
    for g in rows:
        print(f"| {g['command']} | {g['from']:,} -> {g['to']:,} | {g['rows_ratio']:.1f}x | {g['time_ratio']:.2f}x | "
              f"{g['exponent']:.2f} | {g['peak_ratio']:.2f}x |")


def print_imports(imports: dict) -> None:
    cli = imports["import_fairdp_cli"]
    state = f"failed: {cli['error']}" if cli["error"] else f"{cli['wall_s']:.2f} s, peak {cli['peak_mib']:.0f} MiB"
    print(f"\npython -c 'import fairdp.cli': {state}")
    for command, c in imports["commands"].items():
        if c["heavy"] is None:
            print(f"{command}: the wrapper did not report (exit {c['exit']}: {c['error']})")
            continue
        failed = f" (the command failed: exit {c['exit']}: {c['error']})" if c["exit"] else ""
        print(f"{command} imported: {', '.join(c['heavy']) or 'none'} of {', '.join(HEAVY)}{failed}; its imports "
              f"took {c['import_s']:.2f} s under -X importtime")
        for module, chain in c["chains"].items():
            print(f"  {module} ({c['heavy_import_s'][module]:.2f} s) first through: {' -> '.join(chain)}")


def run_generation(n: int, store: Path, paths_file: Path) -> dict:
    """The store of ``n`` rows generated by a worker process (``--generate-worker``)."""
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--generate-worker", str(store), str(n),
                           str(paths_file)], capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"generating {n:,} rows failed: {last_line(proc.stderr)}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "seconds": time.perf_counter() - t}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000, 1000000], help="rows per store")
    ap.add_argument("--commands", nargs="+", choices=[*COMMANDS, "imports"], default=[*COMMANDS, "imports"],
                    help="what to measure besides the floor (the pyarrow scan, always measured)")
    ap.add_argument("--workdir", help="where the stores go (default: a fresh temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (and every store in it)")
    ap.add_argument("--timeout", type=float, help="seconds one command may run before it counts as failed")
    ap.add_argument("--json", help="write the figures here as JSON too")
    ap.add_argument("--compacted", action="store_true",
                    help="after each size, run fairdp compact on its store and measure everything again on it")
    ap.add_argument("--compacted-only", action="store_true",
                    help="with --compacted: measure the compacted stores only (the uncompacted commands take minutes)")
    ap.add_argument("--generate-worker", nargs=3, metavar=("ROOT", "N", "PATHS_FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.generate_worker:
        root, n, paths_file = args.generate_worker
        generate_worker(Path(root), int(n), Path(paths_file))
        return
    if args.compacted_only and not args.compacted:
        ap.error("--compacted-only: needs --compacted")
    sizes = sorted(set(args.sizes))
    if sizes[0] < 1:
        ap.error("--sizes: at least 1 row")
    commands = [c for c in COMMANDS if c in args.commands]
    if args.workdir:
        work = Path(args.workdir).resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="bench_store-"))
    say(f"work directory {work}")
    figures: list[Figure] = []
    generation: dict[int, dict] = {}
    imports = None
    try:
        for n in sizes:
            store = work / f"rows-{n}"
            for old in (store, work / f"rows-{n}.{PLAN}.parquet", *(work / f"rows-{n}.{t}.parquet" for t in SIDE_TABLES)):
                if old.is_dir():
                    shutil.rmtree(old)
                elif old.exists():
                    old.unlink()
            say(f"generating {n:,} rows...")
            paths_file = work / f"paths-{n}.txt"
            gen = generation[n] = run_generation(n, store, paths_file)
            n_packs = gen["pack_files"]
            say(f"generated {n:,} rows in {n_packs:,} pack files in {gen['seconds']:.1f} s")
            if not args.compacted_only:
                say(f"running the floor (pyarrow scan) at {n:,}...")
                figures.extend(run_floor(n, n_packs, paths_file, work, args.timeout))
                for command in commands:
                    say(f"running {command} at {n:,}...")
                    figures.append(run_command(command, n, n_packs, store, work, args.timeout))
                    if figures[-1].error:
                        say(f"{command} at {n:,} failed: {figures[-1].error}")
            if args.compacted:
                figures.extend(run_compacted(commands, n, store, work, args.timeout))
            if "imports" in args.commands and imports is None:
                imports = run_imports(commands, n, store, work, args.timeout)
            if not args.keep:
                shutil.rmtree(store, ignore_errors=True)
    finally:
        if args.keep:
            say(f"kept {work}")
        elif args.workdir:  # the user's folder: only what this run put there
            for n in sizes:
                for made in (work / f"rows-{n}", work / f"paths-{n}.txt", work / f"rows-{n}.{PLAN}.parquet",
                             *(work / f"rows-{n}.{t}.parquet" for t in SIDE_TABLES)):
                    if made.is_dir():
                        shutil.rmtree(made, ignore_errors=True)
                    elif made.exists():
                        made.unlink()
        else:
            shutil.rmtree(work, ignore_errors=True)
    first = next(iter(generation.values()))
    print(f"Stores of the rows of {SOURCE.relative_to(REPO)} ({first['copy_rows']:,} rows in {first['copy_packs']} "
          f"packs) copied to seed + {SEED_STEP} k; python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print("Generation, not among the figures (a process reading the source, then writing): " + "; ".join(
        f"{n:,} rows in {g['pack_files']:,} files {g['seconds']:.1f} s (writing {g['write_s']:.1f} s)"
        for n, g in generation.items()))
    if "report" in commands or "report-tables" in commands:
        print("report: figures included; report --no-figures: the same pages without them (no learning curves "
              "either way: the per-epoch curves are not replicated)")
    if "compare" in commands:
        print("compare: each store against itself (a second store would double the generation)")
    print()
    print_table(figures)
    grown = growth(figures)
    print_growth(grown)
    if imports:
        print_imports(imports)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"source": str(SOURCE), "sizes": sizes, "generation": generation,
                       "figures": [{**asdict(fig), "rows_per_s": fig.rows_per_s} for fig in figures],
                       "growth": grown, "imports": imports}, f, indent=2)


if __name__ == "__main__":
    main()
