"""What report.md says, read as a reviewer would: names from the rows cannot inject HTML into
a Markdown viewer, a probe that was off is no column and no '?' comparison, counts are
grammatical, and one config's ε is explained where it is shown."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from fairdp.analysis import ReportOptions, write_report
from tests.test_analysis_report import synthetic_results

from .conftest import whole_report


def _report(tmp_path, df, **kw) -> str:
    write_report(df, tmp_path / "r", ReportOptions(rts=(0, 1), **kw))
    return whole_report(tmp_path / "r")


def test_names_from_the_rows_are_inert_in_report_md(tmp_path):
    df = synthetic_results(datasets=("adult",), methods=("unconstrained", "federate"), configs=4)
    df["method"] = df["method"].replace({"federate": "<script>alert(1)</script>"})
    df["dataset"] = "a&b<img src=x onerror=alert(2)>"
    md = _report(tmp_path, df)
    assert "<script" not in md and "<img" not in md
    assert "&lt;script>alert(1)&lt;/script>" in md and "a&b&lt;img" in md  # shown as written
    html = whole_report(tmp_path / "r", "html")
    assert "<script>alert(1)" not in html  # the HTML report always escaped them


def test_a_probe_that_was_off_is_no_column_and_no_comparison(tmp_path):
    df = synthetic_results(datasets=("adult",), methods=("unconstrained", "adversarial", "federate"), configs=4)
    df["mdl"] = np.nan  # evaluate.mdl: false
    md = _report(tmp_path, df)
    main = md.split("## Test results")[1].split("\n## ")[0]
    assert "MDL" not in main and "Leakage" in main
    differences = md.split("## Differences the intervals support")[1].split("\n## ")[0]
    assert not re.search(r"^\*\*MDL", differences, flags=re.M)
    assert re.search(r"^\*\*Leakage", differences, flags=re.M)


def test_counts_in_the_overview_agree_in_number(tmp_path):
    df = synthetic_results(datasets=("adult",), methods=("unconstrained", "federate"), configs=8, seeds=(0,))
    df = df[(df["status"] == "ok") | (df["method"] == "federate")]  # the unconstrained row stays
    md = _report(tmp_path, df, ci=None)
    runs = next(line for line in md.splitlines() if line.startswith("| runs |"))
    assert "adult/unconstrained: 1 seed × 1 config |" in runs
    assert re.search(r"adult/federate: 1 seed × [2-8] configs;", runs), runs
    assert "1 configs" not in md and "1 seeds" not in md


@pytest.mark.parametrize("mdl", [20.0, math.nan])
def test_the_differences_caption_says_what_a_question_mark_means(tmp_path, mdl):
    df = synthetic_results(datasets=("adult",), methods=("unconstrained", "random", "federate"), configs=3)
    df["mdl"] = mdl
    md = _report(tmp_path, df)
    assert "? where a method has a single seed or no value of the metric" in md


def test_link_and_image_syntax_in_names_from_the_rows_is_shown_not_followed(tmp_path):
    """A model keyword, a method or a dataset holding Markdown image or link syntax: shown as
    written in report.md, never an image a viewer would fetch nor a link; the report's own
    interval brackets are untouched."""
    import markdown

    df = synthetic_results(datasets=("adult",), methods=("unconstrained", "federate"), configs=4)
    df["method"] = df["method"].replace({"federate": "[click](http://evil.example/a)"})
    df["dataset"] = "![p](http://evil.example/x.png)"
    df["architecture"] = '{"models": [["encoder", {"factory": "m.py:f", "kwargs": [["w", "![q][r]"]]}]]}'
    md = _report(tmp_path, df, by=("architecture",))
    rendered = markdown.markdown(md, extensions=["tables"])
    assert "evil.example" in rendered
    assert not re.search(r"<img[^>]*evil", rendered) and not re.search(r"<a [^>]*evil", rendered)
    assert "![p](http://evil.example/x.png)" in rendered and "[click](http://evil.example/a)" in rendered
    assert re.search(r"\[\d+\.\d, \d+\.\d\]", md)  # intervals as they were


def test_past_its_limit_the_selected_table_lists_the_lowest_seeds_and_says_so():
    import pandas as pd

    from fairdp.analysis._report import _first_seeds

    picks = pd.DataFrame({"seed": [3, 0, 1, 0, 2, 1, 0], "method": list("abcdefg")})
    same, sentence = _first_seeds(picks, limit=7)
    assert same is picks and sentence == ""
    shown, sentence = _first_seeds(picks, limit=5)  # seeds 0 and 1: five picks
    assert sorted(shown["seed"]) == [0, 0, 0, 1, 1]
    assert "seeds 0-1, 5 of the 7 picks" in sentence and "fairdp analyze --selected" in sentence
    shown, sentence = _first_seeds(picks, limit=2)  # seed 0 alone is three picks: one seed at least
    assert sorted(shown["seed"]) == [0, 0, 0] and "seed 0, 3 of the 7" in sentence
    gaps = picks.assign(seed=picks["seed"] * 10)
    assert "the lowest 2 seeds" in _first_seeds(gaps, limit=5)[1]
