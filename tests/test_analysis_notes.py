"""Notes about a result (rows left out for NaN metrics, intervals over few seeds) are passed
explicitly: each function that makes one appends it to ``notes`` when given a list, and warns
only when it is not. The report collects its notes that way, never by catching the process's
warnings, so its Notes page holds exactly what its computations noted, whatever the warning
filters are."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from fairdp.analysis import (
    ReportOptions,
    fairness_accuracy_bins,
    figure_fairness_accuracy_bins,
    figure_rt_sweep,
    privacy_accuracy_by_eps,
    rt_sweep,
    select_by_rt,
    write_report,
)
from tests.test_analysis_report import synthetic_results

from .conftest import whole_report


def _with_a_nan(rows):
    """``rows`` with a NaN valid accuracy in one row of a method with an ε (which every table reads)."""
    rows = rows.copy()
    at = rows.index[rows["eps"].notna()][0]
    rows.loc[at, "valid_accuracy"] = np.nan
    return rows, rows.loc[at, "config_id"]


@pytest.mark.parametrize("compute", [
    lambda rows, notes: select_by_rt(rows, notes=notes),
    lambda rows, notes: rt_sweep(rows, [0, 1], notes=notes),
    lambda rows, notes: fairness_accuracy_bins(rows, notes=notes),
    lambda rows, notes: privacy_accuracy_by_eps(rows, notes=notes),
], ids=["select_by_rt", "rt_sweep", "fairness_accuracy_bins", "privacy_accuracy_by_eps"])
def test_rows_left_out_are_noted_into_the_list_given_and_warned_without_one(compute):
    rows, bad = _with_a_nan(synthetic_results(seeds=(0, 1, 2)))
    notes: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a list given: no warning at all
        noted = compute(rows, notes)
    assert len(notes) == 1 and "excluding 1 row(s) with NaN" in notes[0] and f"config_id={bad}" in notes[0]
    with pytest.warns(UserWarning) as caught:
        warned = compute(rows, None)
    assert [str(w.message) for w in caught] == notes
    assert noted.equals(warned)  # the same table either way


@pytest.mark.parametrize("draw", [
    lambda rows, notes: figure_rt_sweep(rt_sweep(rows, [0, 1], notes=[]), error_bars="t", notes=notes),
    lambda rows, notes: figure_fairness_accuracy_bins(fairness_accuracy_bins(rows, notes=[]), error_bars="t",
                                                      notes=notes),
], ids=["figure_rt_sweep", "figure_fairness_accuracy_bins"])
def test_an_interval_over_two_seeds_is_noted_into_the_list_given(draw):
    rows = synthetic_results(seeds=(0, 1))
    notes: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        draw(rows, notes)
    assert notes and all("t-intervals over 2 seeds say little" in n for n in notes)


def test_the_report_lists_what_its_computations_noted_even_when_warnings_are_ignored(tmp_path):
    """Under an "ignore" filter the old report, which recorded warnings, still listed them (it
    set its own filter); the notes are now handed back, and the page holds each once."""
    rows, bad = _with_a_nan(synthetic_results(seeds=(0, 1)))
    expected: list[str] = []
    select_by_rt(rows, notes=expected)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_report(rows, tmp_path / "r", ReportOptions(rts=(0, 1), error_bars="t"))
    md = whole_report(tmp_path / "r")
    assert expected[0] in md and f"config_id={bad}" in md
    assert md.count("t-intervals over 2 seeds say little") == 1  # four figures note it; the page says it once
