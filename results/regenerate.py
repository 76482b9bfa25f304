"""Regenerate the committed reports and their screenshots from the committed rows.

    .venv/bin/python results/regenerate.py [NAME ...]

For each committed result set (all, or the NAMEs given): store its study's selection beside
the rows (``<results>.selection.parquet``, as ``fairdp run`` does today; these rows predate
it), write ``_report/`` with ``fairdp report`` on that selection, check every figure as a
reviewer would (``fairdp.testing.figures.assert_readable``), and shoot the HTML report in
headless Chromium to ``_report/screenshot.png`` (half scale: a reviewer's overview, not the
figures' full resolution, which the PNGs under ``_report/figures/`` have).
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# results read beside a directory's own (`--pool`): its report covers both
POOLED = {"baselines-adult": ["pfld-adult"], "baselines-compas": ["pfld-compas"]}

# results directory -> (the study file its rows were run from, extra `fairdp report` options)
REPORTS = {
    # the baselines' rows are reported pooled with PF-LD's committed rows of one protocol
    "baselines-adult": ("studies/baselines_adult.yaml", ["--pool", "--compare", "dp-fermi-adult", "--compare",
                                                         "global-adapt-adult"]),
    "baselines-compas": ("studies/baselines_compas.yaml", ["--pool", "--compare", "dp-fermi-compas", "--compare",
                                                           "global-adapt-compas"]),
    "demo-reference": ("studies/demo.yaml", []),
    "federate-adult": ("studies/federate_adult.yaml", ["--compare", "federate-table3"]),
    "pfld-adult": ("studies/pfld_adult.yaml", ["--compare", "pfld-adult"]),
    "pfld-compas": ("studies/pfld_compas.yaml", ["--compare", "pfld-compas"]),
    "pfld-adult-sensitivity": ("studies/pfld_adult_sensitivity.yaml", []),
}


def regenerate(name: str) -> None:
    import pandas as pd

    from fairdp.analysis import ReportOptions, report_figures
    from fairdp.cli import main
    from fairdp.study import ResultStore, load_spec, read_history, read_results
    from fairdp.study.store._selection import (
        write_selection,  # not public since fairdp 0.4's smaller surface
    )
    from fairdp.testing.figures import assert_readable
    from tests.test_report_browser import screenshot

    study, options = REPORTS[name]
    results = REPO / "results" / name
    spec = load_spec(REPO / study)
    stored, _ = write_selection(ResultStore(results), spec)
    out = results / "_report"
    pooled = [REPO / "results" / other for other in POOLED.get(name, [])]
    if main(["report", str(results), *map(str, pooled), "-o", str(out), *options]) != 0:
        raise SystemExit(f"{name}: fairdp report failed")
    rows = pd.concat([read_results(d) for d in (results, *pooled)], ignore_index=True)
    figures = report_figures(rows, ReportOptions(rt=stored.rt, fairness=stored.fairness, by=tuple(stored.by),
                                                 history=read_history(results, rows=rows),
                                                 **({"rts": tuple(stored.rts)} if stored.rts else {})))
    for figure_name, fig in figures.items():
        if fig is not None:
            assert_readable(fig, name=f"{name}/{figure_name}")
    screenshot(out / "report.html", out / "screenshot.png", scale=0.5)
    print(f"{name}: {out} ({len([f for f in figures.values() if f is not None])} figures checked), "
          f"{out / 'screenshot.png'}")


if __name__ == "__main__":
    for name in sys.argv[1:] or REPORTS:
        if name not in REPORTS:
            raise SystemExit(f"unknown report {name!r}; known: {', '.join(REPORTS)}")
        regenerate(name)
