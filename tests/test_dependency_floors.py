"""The floors of pyproject.toml's direct dependencies are true: fairdp installed with each at its
lowest allowed version (``uv pip install --resolution lowest-direct``) passes a smoke subset of
the suite (slow), and no floor is below the release whose API or fix the code relies on (fast:
the table below, each entry with its reason).

The floors were found that way (docs/development.md, "Dependency floors"): optuna 3.5 has no
``optuna.storages.journal``; Ray 2.9 imports ``pkg_resources``, which today's setuptools no
longer has, and before 2.41 has no ``tune.RunConfig``; and so on down the table."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]

# direct dependency -> (the lowest floor pyproject.toml may give it, why)
FLOORS = {
    "optuna": ("4.4", "optuna.storages.journal (JournalFileBackend) is 4.0's; 4.3 gave JournalFileOpenLock and "
                      "JournalFileSymlinkLock a grace period (optuna#5971), without which a search resumed after a "
                      "SIGKILL that left the journal's lock file waits forever (tests/test_search_journal_lock.py); "
                      "4.4 fixed NSGA-II's parent population, read by trial id as a list index (optuna#6066): "
                      "IndexError once a journal holds a second study, as a search of two seeds' does"),
    "ray": ("2.59", "tune.RunConfig and tune.report(dict) are 2.41's (ray.tune has no RunConfig before; 2.9-2.9.3 "
                    "also import pkg_resources, gone from setuptools); 2.59 turns token authentication on for an "
                    "embedded ray.init(), which fairdp promises (docs/guide/studies.md) and test_study_run checks "
                    "(~/.ray/auth_token, made 0600)"),
    "numpy": ("1.24.4", "the lowest fairlearn 0.10 installs with (it requires numpy>=1.24.4)"),
    "pandas": ("2.0.3", "the lowest fairlearn 0.10 installs with (it requires pandas>=2.0.3)"),
    "pyarrow": ("17", "the lowest ray[tune] 2.59 installs with (it requires pyarrow>=17.0.0)"),
    "scikit-learn": ("1.3", "passes the smoke subset at 1.3.0 (MLPClassifier probes, LogisticRegression, LinearSVC)"),
    "scipy": ("1.10", "passes the smoke subset at 1.10.0 (stats.t, nct, special, optimize)"),
    "fairlearn": ("0.10", "passes the smoke subset at 0.10.0 (ExponentiatedGradient, DemographicParity, "
                          "EqualizedOdds, ErrorRateParity)"),
    "matplotlib": ("3.7", "passes the smoke subset at 3.7.0 (the report's figures as PNG, PDF and SVG)"),
    "tqdm": ("4.60", "passes the smoke subset at 4.60.0 (the progress bar on a terminal)"),
    "pyyaml": ("6", "passes the smoke subset at 6.0 (study files)"),
    "dp-accounting": ("0.6", "RepeatAndSelect through its RDP module (eps_released); passes at 0.6.0"),
    "torch": ("2.1", "a range on purpose (pyproject.toml): the set-up pins the build, so no floors run tests it"),
}

# The smoke subset the lowest-direct environment runs, each file for what it exercises
SMOKE = [
    # an embedded Ray run from the CLI (Ray Tune, token auth), pandas/pyarrow rows
    "tests/test_study_run.py::test_a_tiny_study_stores_every_row_once_and_a_rerun_adds_nothing",
    # Optuna's NSGA-II in a journal holding two seeds' studies, a dry run, resume checks
    "tests/test_search_like_a_run.py::test_a_local_search_runs_without_ray_and_a_dry_run_writes_nothing",
    "tests/test_store_contract.py",  # the results store: Parquet through pyarrow and pandas
    "tests/test_analysis_select.py",  # selection over stored rows (pandas)
    "tests/test_privacy_accounting.py",  # dp-accounting's RDP and PLD accountants (scipy)
    "tests/test_methods_reductions.py",  # fairlearn's reductions
    "tests/test_metrics_probes.py",  # scikit-learn's MLP probes
    "tests/test_cli_figure.py::test_the_report_saves_each_figure_in_each_format",  # matplotlib: png, pdf, svg
    "tests/test_study_progress.py",  # tqdm's bar
]
PROBE = "tqdm==4.60.0"  # an old release, small: found on a package index only
SMOKE_ARGS = [*SMOKE, "-m", "not slow", "-q", "-p", "no:cacheprovider"]


def _pyproject() -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _requirements() -> dict[str, Requirement]:
    return {Requirement(text).name.lower(): Requirement(text) for text in _pyproject()["project"]["dependencies"]}


def _floor(req: Requirement) -> Version | None:
    floors = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
    return max(floors) if floors else None


def test_every_direct_dependency_has_a_floor_with_a_reason():
    reqs = _requirements()
    assert set(reqs) == set(FLOORS), ("each direct dependency needs a floor and its reason in FLOORS: "
                                      f"missing {sorted(set(reqs) - set(FLOORS))}, stale {sorted(set(FLOORS) - set(reqs))}")
    assert all(_floor(r) is not None for r in reqs.values()), [str(r) for r in reqs.values() if _floor(r) is None]


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_no_floor_is_below_what_the_code_needs(name):
    req = _requirements()[name]
    least, why = FLOORS[name]
    assert _floor(req) >= Version(least), f"pyproject.toml has {req}; {name} needs >= {least}: {why}"


# -- the floors installed for real ----------------------------------------------------------------

def _uv() -> list[str] | None:
    """uv beside this interpreter (make setup installs it), or on PATH."""
    here = Path(sys.executable).parent / "uv"
    found = str(here) if here.exists() else shutil.which("uv")
    return [found] if found else None


def _sources() -> list[str]:
    """pip's package sources (local wheels, local indexes, constraints) as uv's options: what
    make setup passes (tools/uv_sources.py)."""
    out = subprocess.run([sys.executable, str(REPO / "tools" / "uv_sources.py")], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    return ["--index-strategy", "unsafe-best-match", *out.split()]


def _torch_pin() -> str:
    """make setup's TORCH_SPEC, made exact: under --resolution lowest-direct, `torch==2.13.0` picks
    the plain release (a CUDA build with GBs of nvidia wheels) over the local `2.13.0+cpu` that make
    setup's highest resolution takes, so the pin names the build this environment has when it is the
    same release."""
    spec = os.environ.get("TORCH_SPEC") or re.search(r"^TORCH_SPEC \?= (\S+)", (REPO / "Makefile").read_text(),
                                                     re.M).group(1)
    try:
        from importlib.metadata import version

        here = Version(version("torch"))
    except Exception:  # noqa: BLE001 - no torch here: the spec as make setup gives it
        return spec
    pinned = Requirement(spec)
    if here.local and pinned.specifier.contains(here.public) and str(pinned.specifier).startswith("=="):
        return f"torch=={here}"
    return spec


def _dev_spec(name: str) -> str:
    """The dev extra's requirement of ``name`` (pytest's cap matters: tests/test_suite_grouping.py)."""
    return next(t for t in _pyproject()["project"]["optional-dependencies"]["dev"] if Requirement(t).name == name)


def _run(args: list[str], timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)


@pytest.mark.slow  # a fresh environment (a minute from the caches, more on a cold one) and the subset (~4 min)
def test_fairdp_at_its_lowest_direct_versions_passes_the_smoke_subset(tmp_path):
    venv = tmp_path / "floors"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    uv = _uv()
    if uv is None:  # make setup installs uv beside the interpreter; else into the new environment, as it does
        spec = re.search(r"^UV_SPEC \?= (\S+)", (REPO / "Makefile").read_text(), re.M).group(1)
        if _run([python, "-m", "pip", "install", "--quiet", spec], 600).returncode != 0:
            pytest.skip(f"no uv here and pip could not install {spec}: no package index reachable?")
        uv = [str(venv / "bin" / "uv")]
    install = [*uv, "pip", "install", "--python", python, *_sources()]
    env = dict(os.environ, UV_HTTP_TIMEOUT="15")
    # the floors' old releases are on no local wheel folder or index: without a package index, skip
    try:
        probe = _run([*install, "--dry-run", "--no-cache", "--no-deps", PROBE], 120, env)
        said = probe.stderr.strip().splitlines()[-1] if probe.returncode and probe.stderr.strip() else ""
    except subprocess.TimeoutExpired:
        probe, said = None, "no answer in 120 s"
    if probe is None or probe.returncode != 0:
        pytest.skip(f"no package index reachable: uv could not resolve {PROBE} (tqdm's floor): {said}")
    started = time.monotonic()
    lowest = _run([*install, "--resolution", "lowest-direct", _torch_pin(), "-e", str(REPO)], 1800, env)
    assert lowest.returncode == 0, lowest.stderr[-3000:]
    tools = _run([*install, _dev_spec("pytest"), _dev_spec("hypothesis")], 600, env)
    assert tools.returncode == 0, tools.stderr[-3000:]
    listed = _run([*uv, "pip", "list", "--python", python], 120).stdout
    installed = {re.sub(r"[-_.]+", "-", line.split()[0].lower()): line.split()[1]
                 for line in listed.splitlines()[2:] if len(line.split()) >= 2}
    # each direct dependency at its floor (or the lowest release above it the resolver can have)
    for name, req in _requirements().items():
        assert Version(installed[name]) >= _floor(req), (name, installed[name], str(req))
    print(f"installed in {time.monotonic() - started:.0f} s:",
          ", ".join(f"{n} {installed[n]}" for n in sorted(_requirements())))

    inner = dict(os.environ, VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    inner.pop("PYTHONPATH", None)
    started = time.monotonic()
    smoke = _run([python, "-m", "pytest", *SMOKE_ARGS, "--basetemp", str(tmp_path / "smoke")], 1800, inner)
    summary = smoke.stdout.strip().splitlines()[-1] if smoke.stdout.strip() else ""
    print(f"smoke subset in {time.monotonic() - started:.0f} s: {summary}")
    assert smoke.returncode == 0, smoke.stdout[-6000:] + smoke.stderr[-2000:]
    assert re.search(r"\d+ passed", summary) and "failed" not in summary, summary
