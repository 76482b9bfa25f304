"""After `make demo` a clone's tree is clean: every file the main job writes beside its rows
(the plan, the selection, the per-epoch history, ...) is ignored, not only results/demo/. It
used to leave results/demo.history/ and results/demo.selection.parquet untracked."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from .conftest import REPO, run_main

TINY_DEMO = {
    "name": "demo",
    "dataset": {"name": "synthetic", "rows": 300, "features": 4},
    "seeds": [0],
    "train": {"epochs": 1, "batch_size": 100},
    "evaluate": {"leakage": False, "mdl": False},
    "methods": {"unconstrained": {}},
}


@pytest.mark.slow  # a run of a study: the slow set's
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_tree_is_clean_after_the_main_job_writes_its_results(tmp_path):
    clone = tmp_path / "clone"
    clone.mkdir()
    shutil.copy(REPO / ".gitignore", clone / ".gitignore")

    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=clone,
                              capture_output=True, text=True, check=True).stdout

    git("init", "-q")
    git("add", ".gitignore")
    git("commit", "-q", "-m", "the repository's ignore rules")
    study = tmp_path / "demo.yaml"  # the main job's study name, so its side tables are named as make demo's
    study.write_text(yaml.safe_dump(TINY_DEMO))
    proc = run_main("run", str(study), "--results", str(clone / "results" / "demo"), "--executor", "local")
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = sorted(p.name for p in (clone / "results").iterdir())
    assert {"demo", "demo.plan.parquet", "demo.selection.parquet", "demo.history"} <= set(written), written
    assert git("status", "--porcelain", "--untracked-files=all") == ""
