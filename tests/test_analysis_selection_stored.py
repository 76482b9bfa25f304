"""One selection from run to report (issue 40): the study's selection is stored beside its
results, and analyze, report and compare use it unless a flag overrides it, saying which."""

import io
import os
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml

from fairdp.analysis import aggregate_seeds, select_by_rt
from fairdp.cli import main
from fairdp.errors import InputError
from fairdp.study import (
    ResultStore,
    StoredSelection,
    choose_selection,
    parse_spec,
    read_selection,
    read_selections,
)
from fairdp.study.store._selection import SELECTION_TABLE, selection_change, write_selection
from tests.test_store_contract import location  # noqa: F401 - the store contract's locations, as a fixture

from .conftest import whole_report

SEEDS = (0, 1, 2)
# one (eps) group's four configs; per group and seed, RT selection picks:
#   tpr_gap, rt 1 -> c1 (the defaults)    dp_gap, rt 1 -> c0
#   tpr_gap, rt 2 -> c1                   dp_gap, rt 2 -> c2 (the study's)
ACCURACY = (80.0, 79.5, 78.5, 77.0)
TPR_GAP = (10.0, 5.0, 7.0, 1.0)
DP_GAP = (4.0, 6.0, 2.0, 8.0)


def _rows(seeds=SEEDS) -> pd.DataFrame:
    rows = []
    for seed in seeds:
        for eps, shift in ((1.0, 0.0), (8.0, 3.0)):  # eps 8's configs are 3 points better: one pick without by
            for k in range(4):
                acc = ACCURACY[k] + shift + 0.1 * seed
                rows.append({
                    "study": "sel", "dataset": "synthetic", "method": "federate", "seed": seed,
                    "config_id": f"e{eps:g}c{k}", "eps": eps, "lam": 1.0, "status": "ok",
                    "valid_accuracy": acc, "test_accuracy": acc - 0.3 * k,
                    "valid_tpr_gap": TPR_GAP[k], "test_tpr_gap": TPR_GAP[k] + 0.5 * seed,
                    "valid_dp_gap": DP_GAP[k], "test_dp_gap": DP_GAP[k] + 0.25 * seed,
                    "valid_grms": 1.0, "test_grms": 1.0, "leakage": 60.0 + k, "mdl": np.nan, "eps_formal": eps, "epochs": 2,
                })
    return pd.DataFrame(rows)


def _spec(**selection):
    raw = {"name": "sel", "dataset": "synthetic",
           "methods": {"federate": {"grid": {"eps": [1, 8], "lam": [1.0]}}}}
    if selection:
        raw["selection"] = selection
    return parse_spec(raw)


STUDY_SELECTION = {"fairness": "dp_gap", "rt": 2.0, "by": ["eps"], "rts": [0, 2]}


def _store_rows(results_dir, df: pd.DataFrame) -> ResultStore:
    store = ResultStore(results_dir)
    for (method, seed), part in df.groupby(["method", "seed"]):
        store.write_pack(part.to_dict("records"), "synthetic", method, int(seed), f"p{seed}")
    return store


@pytest.fixture()
def results(tmp_path):
    """A study's rows with its selection (dp_gap, rt 2, by eps) stored beside them."""
    df = _rows()
    store = _store_rows(tmp_path / "sel", df)
    write_selection(store, _spec(**STUDY_SELECTION))
    return str(tmp_path / "sel"), df


def _picks(df, rt, fairness, by=()):
    return sorted(select_by_rt(df, rt=rt, fairness=fairness, by=list(by))["config_id"])


def _analyze_picks(capsys, *args) -> tuple[list[str], str]:
    assert main(["analyze", *args, "--selected", "--format", "csv"]) == 0
    out = capsys.readouterr()
    return sorted(pd.read_csv(io.StringIO(out.out))["config_id"]), out.err


def test_the_constructed_rows_pick_differently_under_the_study_selection_and_the_defaults():
    df = _rows()
    study = _picks(df, 2.0, "dp_gap", ["eps"])
    assert set(study) == {"e1c2", "e8c2"} and len(study) == 6
    assert _picks(df, 1.0, "tpr_gap") == ["e8c1"] * 3
    assert study != _picks(df, 1.0, "tpr_gap", ["eps"]) != _picks(df, 1.0, "dp_gap", ["eps"])


def test_the_selection_side_table_round_trips_beside_the_results(results):
    results_dir, _ = results
    store = ResultStore(results_dir)
    assert os.path.isfile(f"{results_dir}.{SELECTION_TABLE}")
    assert not any(SELECTION_TABLE in p for p in store.pack_files())  # beside the rows, never among them
    stored = read_selection(store)
    assert stored == StoredSelection("sel", "dp_gap", 2.0, ("eps",), (0.0, 2.0), None)
    table = pd.read_parquet(f"{results_dir}.{SELECTION_TABLE}")  # any Parquet reader: JSON text for lists
    assert table.loc[0, "fairness"] == "dp_gap" and table.loc[0, "by"] == '["eps"]'
    assert read_selections(results_dir, f"{results_dir}/synthetic/federate/part-s0-p0.parquet") == {
        results_dir: stored, f"{results_dir}/synthetic/federate/part-s0-p0.parquet": None}


def test_the_selection_is_stored_in_every_kind_of_results_location(location):  # noqa: F811 - the fixture
    """A directory, a file:// URI, an s3:// store (moto's server) and an fsspec filesystem:
    the selection is written and read as the plan is, and its writer's changes replace it."""
    store = location.store
    assert read_selection(store) is None
    new, old = write_selection(store, _spec(**STUDY_SELECTION))
    assert old is None and read_selection(store) == new == StoredSelection.of_spec(_spec(**STUDY_SELECTION))
    changed, _ = write_selection(store, _spec(fairness="grms"))
    assert read_selection(store) == changed and changed.fairness == "grms" and changed.by == ()


def test_analyze_without_flags_uses_the_stored_selection_and_says_so(results, capsys):
    results_dir, df = results
    picks, err = _analyze_picks(capsys, results_dir)
    assert picks == _picks(df, 2.0, "dp_gap", ["eps"])
    assert picks != _picks(df, 1.0, "tpr_gap")
    assert "fairdp analyze: selection from the study sel: fairness dp_gap, rt 2, by eps (override with " \
           "--fairness/--rt/--by)" in err
    # the aggregate table too: per eps, on DP-gap
    assert main(["analyze", results_dir, "--format", "csv"]) == 0
    got = pd.read_csv(io.StringIO(capsys.readouterr().out))
    want = aggregate_seeds(select_by_rt(df, rt=2.0, fairness="dp_gap", by=["eps"]), fairness="dp_gap", by=["eps"])
    assert list(got.columns) == list(want.columns) and "test_dp_gap_mean" in got.columns
    np.testing.assert_allclose(got["test_dp_gap_mean"], want["test_dp_gap_mean"])


def test_analyze_flags_override_the_stored_selection(results, capsys):
    results_dir, df = results
    picks, err = _analyze_picks(capsys, results_dir, "--fairness", "tpr_gap", "--rt", "1", "--by", "")
    assert picks == _picks(df, 1.0, "tpr_gap")
    assert "selection from the flags: fairness tpr_gap, rt 1, by none" in err
    picks, err = _analyze_picks(capsys, results_dir, "--rt", "1")  # one flag: the rest from the study
    assert picks == _picks(df, 1.0, "dp_gap", ["eps"])
    assert "selection: fairness dp_gap, by eps from the study sel; rt 1 from --rt (override with " \
           "--fairness/--by)" in err


def test_results_without_a_stored_selection_fall_back_to_the_defaults_and_say_so(results, capsys):
    results_dir, df = results
    os.remove(f"{results_dir}.{SELECTION_TABLE}")  # as results written before fairdp stored one
    picks, err = _analyze_picks(capsys, results_dir)
    assert picks == _picks(df, 1.0, "tpr_gap")
    assert (f"fairdp analyze: no selection stored with {results_dir} (results written before fairdp stored the "
            f"study's): fairdp's defaults fairness tpr_gap, rt 1, by none (override with --fairness/--rt/--by)") in err
    picks, err = _analyze_picks(capsys, results_dir, "--fairness", "dp_gap")
    assert picks == _picks(df, 1.0, "dp_gap")
    assert "stored the study's): fairness dp_gap from --fairness; fairdp's defaults rt 1, by none (override with " \
           "--rt/--by)" in err


def test_pooled_results_whose_stored_selections_differ_need_the_flags(results, tmp_path, capsys):
    results_dir, df = results
    more = _rows(seeds=(3, 4, 5))  # the same study's other seeds, run elsewhere
    other = _store_rows(tmp_path / "other", more)
    write_selection(other, _spec(fairness="tpr_gap", rt=2.0, by=["eps"]))
    both = pd.concat([df, more], ignore_index=True)
    assert main(["analyze", results_dir, str(other.root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fairdp: error: --fairness: the results' stored selections differ (fairness dp_gap in "
                          f"{results_dir}, fairness tpr_gap in {other.root}); pass --fairness") and err.count("\n") == 1
    picks, err = _analyze_picks(capsys, results_dir, str(other.root), "--fairness", "dp_gap")
    assert picks == _picks(both, 2.0, "dp_gap", ["eps"]) and len(picks) == 12
    # results without a stored selection pooled with results with one: the stored one, said so
    os.remove(f"{other.root}.{SELECTION_TABLE}")
    picks, err = _analyze_picks(capsys, results_dir, str(other.root))
    assert picks == _picks(both, 2.0, "dp_gap", ["eps"])
    assert "selection from the study sel: fairness dp_gap, rt 2, by eps" in err
    assert f"{other.root} has no stored selection" in err


def test_a_corrupt_selection_side_table_is_one_line_naming_it(results, capsys):
    results_dir, _ = results
    with open(f"{results_dir}.{SELECTION_TABLE}", "wb") as f:
        f.write(b"not parquet")
    assert main(["analyze", results_dir]) == 2
    err = capsys.readouterr().err
    assert f"{results_dir}.{SELECTION_TABLE}: corrupt or foreign" in err and err.count("\n") == 1


def test_report_without_flags_uses_the_stored_selection_and_its_rt_sweep(results, tmp_path, capsys):
    results_dir, df = results
    assert main(["report", results_dir, "-o", str(tmp_path / "rep"), "--no-ci"]) == 0
    err = capsys.readouterr().err
    assert "fairdp report: selection from the study sel: fairness dp_gap, rt 2, by eps, rts 0,2 (override with " \
           "--fairness/--rt/--by/--rts)" in err
    table = pd.read_csv(tmp_path / "rep/table.csv")
    want = aggregate_seeds(select_by_rt(df, rt=2.0, fairness="dp_gap", by=["eps"]), fairness="dp_gap", by=["eps"])
    np.testing.assert_allclose(table["test_dp_gap_mean"], want["test_dp_gap_mean"])
    md = whole_report(tmp_path / "rep")
    assert "| selection | selection from the study sel: fairness dp_gap, rt 2" in md
    assert "Test results at RT = 2" in md and "| Metric | RT 0 | RT 2 |" in md  # the study's sweep, 0 and 2
    assert main(["report", results_dir, "-o", str(tmp_path / "rep2"), "--no-ci", "--fairness", "tpr_gap", "--rt", "1",
                 "--by", "", "--rts", "1"]) == 0
    assert "selection from the flags" in capsys.readouterr().err
    table = pd.read_csv(tmp_path / "rep2/table.csv")
    assert "test_tpr_gap_mean" in table.columns and "eps" not in table.columns


def test_compare_without_flags_picks_by_the_stored_selection(results, tmp_path, capsys):
    results_dir, df = results
    copy = tmp_path / "copy"
    shutil.copytree(results_dir, copy)
    shutil.copy(f"{results_dir}.{SELECTION_TABLE}", f"{copy}.{SELECTION_TABLE}")
    assert main(["compare", results_dir, str(copy)]) == 0
    out = capsys.readouterr()
    assert "fairdp compare: selection from the study sel: fairness dp_gap, rt 2, by eps" in out.err
    assert "## RT picks (rt 2, dp_gap, per eps)" in out.out
    want = set(_picks(df, 2.0, "dp_gap", ["eps"]))
    assert {c for c in want if c in out.out} == want and "e8c1" not in out.out
    assert main(["compare", results_dir, str(copy), "--fairness", "tpr_gap", "--rt", "1", "--by", ""]) == 0
    out = capsys.readouterr()
    assert "## RT picks (rt 1, tpr_gap):" in out.out and "e8c1" in out.out and "e1c2" not in out.out
    # two runs whose studies stored other selections: the flag decides
    write_selection(ResultStore(copy), _spec(fairness="dp_gap", rt=1.0, by=["eps"]))
    assert main(["compare", results_dir, str(copy)]) == 2
    assert "--rt: the results' stored selections differ (rt 2 in" in capsys.readouterr().err
    assert main(["compare", results_dir, str(copy), "--rt", "2"]) == 0


def test_compare_lists_only_differing_picks_past_its_limit_unless_asked(results, tmp_path, capsys, monkeypatch):
    """A store of a hundred thousand picks is not printed pick by pick: past ``PICKS_LISTED``
    the table holds only the picks that differ (none, against a copy) and says how many it
    leaves out; ``--all-picks`` lists them all."""
    import fairdp.cli as cli

    results_dir, df = results
    copy = tmp_path / "copy"
    shutil.copytree(results_dir, copy)
    want = _picks(df, 1.0, "tpr_gap", [])
    flags = ["--fairness", "tpr_gap", "--rt", "1", "--by", ""]
    monkeypatch.setattr(cli, "PICKS_LISTED", 0)
    assert main(["compare", results_dir, str(copy), *flags]) == 0
    out = capsys.readouterr().out
    assert f"{len(want)} of {len(want)} picks are the same config in both runs and are not listed" in out
    assert not any(c in out for c in want)
    assert main(["compare", results_dir, str(copy), *flags, "--all-picks"]) == 0
    out = capsys.readouterr().out
    assert all(c in out for c in want) and "are not listed" not in out


def test_a_run_keeps_the_search_it_finds_and_a_changed_selection_is_reported():
    spec = _spec(**STUDY_SELECTION)
    searched = parse_spec({**spec.raw, "search": {
        "method": "federate", "objectives": {"valid_accuracy": "max", "valid_dp_gap": "min"},
        "space": {"eps": {"low": 1, "high": 8}, "lam": {"low": 0.5, "high": 2}},
        "constraints": ["valid_accuracy >= 79"]}})
    search_only = StoredSelection.of_spec(searched, searched=True)
    assert search_only.search.objectives == {"valid_accuracy": "max", "valid_dp_gap": "min"}
    assert search_only.search.constraints == ("valid_accuracy >= 79",)
    assert StoredSelection.of_spec(searched).search is None  # a run of it stores no search
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        store = ResultStore(f"{tmp}/r")
        write_selection(store, searched, searched=True)
        new, old = write_selection(store, _spec(fairness="tpr_gap", rt=2.0, by=["eps"]))
        assert old == search_only and new.search == search_only.search  # the search's rows are still there
        assert selection_change(old, new) == "fairness dp_gap -> tpr_gap; rts 0,2 -> none"
        assert read_selection(store) == new


def _record_pareto_figure(monkeypatch) -> dict:
    """The rows and pairs the report draws its Pareto figure from (the figure itself not drawn)."""
    import fairdp.analysis._plots as plots

    drawn = {}

    def record(rows, *args, **kwargs):
        drawn.update(rows=rows.copy(), pairs=[tuple(p) for p in next(a for a in args if isinstance(a, list))],
                     directions=next((a for a in args if isinstance(a, dict)), kwargs.get("directions")))

    monkeypatch.setattr(plots, "figure_pareto_fronts", record)  # the report imports it when it draws
    return drawn


def test_a_search_report_draws_its_front_on_its_objectives_over_its_feasible_rows(tmp_path, monkeypatch, capsys):
    """The front is the search's: on its objectives (not TPR-gap), without the rows that fail its
    constraints, and the caption says so."""
    df = _rows()
    store = _store_rows(tmp_path / "search", df)
    spec = parse_spec({**_spec().raw, "search": {
        "method": "federate", "objectives": {"valid_accuracy": "max", "valid_dp_gap": "min", "eps_formal": "min"},
        "space": {"eps": {"low": 1, "high": 8}, "lam": {"low": 0.5, "high": 2}},
        "constraints": ["valid_accuracy >= 79"]}})
    write_selection(store, spec, searched=True)
    drawn = _record_pareto_figure(monkeypatch)
    assert main(["report", str(store.root), "-o", str(tmp_path / "rep"), "--no-ci", "--rts", "1"]) == 0
    err = capsys.readouterr().err
    assert ("fairdp report: Pareto fronts on the search's objectives, from the study: valid_accuracy (max), "
            "valid_dp_gap (min), eps_formal (min), feasible under valid_accuracy >= 79") in err
    assert drawn["pairs"] == [("valid_accuracy", "valid_dp_gap"), ("valid_accuracy", "eps_formal"),
                              ("valid_dp_gap", "eps_formal")]
    assert drawn["directions"] == {"valid_accuracy": "max", "valid_dp_gap": "min", "eps_formal": "min"}
    feasible = df[df["valid_accuracy"] >= 79]
    assert len(drawn["rows"]) == len(feasible) < len(df)
    assert (drawn["rows"]["valid_accuracy"] >= 79).all()
    md = whole_report(tmp_path / "rep")
    section = md[md.index("## Pareto fronts"):].replace("&gt;", ">")  # as the Markdown may escape it
    assert (f"under its objectives, valid_accuracy (max), valid_dp_gap (min), eps_formal (min), among only the "
            f"{len(feasible)} of {len(df)} rows that meet its constraints (valid_accuracy >= 79)") in section
    assert "valid_dp_gap ↓" in section and "TPR-gap" not in section.split("##")[1]


def test_a_study_selection_rts_is_validated():
    assert _spec(rts=[0, 1.5]).rts == (0.0, 1.5)
    assert _spec().rts is None
    with pytest.raises(InputError, match=r"^selection\.rts\[1\]: must be >= 0"):
        _spec(rts=[0, -1])
    with pytest.raises(InputError, match=r"^selection\.rts: must be a non-empty list"):
        _spec(rts=[])


def test_choose_selection_refuses_searches_with_different_objectives():
    a = StoredSelection("a", search=StoredSelection.of_spec(parse_spec({**_spec().raw, "search": {
        "method": "federate", "objectives": {"valid_accuracy": "max", "valid_dp_gap": "min"},
        "space": {"eps": {"low": 1, "high": 8}, "lam": {"low": 0.5, "high": 2}}}}), searched=True).search)
    b = StoredSelection("b", search=type(a.search)("federate", {"valid_accuracy": "max", "leakage": "min"}))
    with pytest.raises(InputError, match="different objectives or constraints"):
        choose_selection({"x": a, "y": b}, {}, {"rt": "--rt"})
    chosen = choose_selection({"x": a, "y": None}, {}, {"rt": "--rt"})
    assert chosen.search == a.search and chosen.values == {"rt": 1.0}


def test_fairdp_run_prints_the_table_fairdp_analyze_prints(tmp_path, capsys):
    """End to end on the local executor: the run stores its study's selection (DP-gap, rt 0.5,
    by eps), says so, and its table is the one analyze prints for its results without flags."""
    study = tmp_path / "tiny.yaml"
    study.write_text(yaml.safe_dump({
        "name": "tiny-sel", "dataset": {"name": "synthetic", "rows": 400, "features": 4}, "seeds": [0, 1],
        "train": {"epochs": 1, "batch_size": 200}, "evaluate": {"leakage": False, "mdl": False},
        "selection": {"fairness": "dp_gap", "rt": 0.5, "by": ["eps"]},
        "methods": {"unconstrained": {}, "federate": {"grid": {"eps": [1, 10], "lam": [0.5, 1.5]}}}}))
    results = str(tmp_path / "r")
    assert main(["run", str(study), "--results", results, "--executor", "local"]) == 0
    run = capsys.readouterr()
    assert "fairdp run: selection from the study tiny-sel: fairness dp_gap, rt 0.5, by eps" in run.err
    assert read_selection(ResultStore(results)) == StoredSelection("tiny-sel", "dp_gap", 0.5, ("eps",))
    assert main(["analyze", results]) == 0
    analyzed = capsys.readouterr()
    assert "fairdp analyze: selection from the study tiny-sel: fairness dp_gap, rt 0.5, by eps" in analyzed.err
    table = analyzed.out.strip()
    assert "DP-gap ↓" in table and "| ε |" in table.splitlines()[0]  # per eps, on DP-gap
    assert run.out.rstrip().endswith(table)


def test_fairdp_search_stores_its_objectives_and_its_report_draws_them(tmp_path, monkeypatch, capsys):
    """End to end on the local executor: a search stores the study's selection with its
    objectives and constraints, and its report's front is drawn on them, feasible rows only."""
    study = tmp_path / "search.yaml"
    objectives = {"valid_accuracy": "max", "valid_dp_gap": "min"}
    study.write_text(yaml.safe_dump({
        "name": "tiny-search", "dataset": {"name": "synthetic", "rows": 400, "features": 4}, "seeds": [0],
        "train": {"epochs": 1, "batch_size": 200}, "evaluate": {"leakage": False, "mdl": False},
        "selection": {"fairness": "dp_gap"}, "methods": {"federate": {}},
        "search": {"method": "federate", "population": 2, "trials": 2, "seed": 0, "objectives": objectives,
                   "space": {"eps": {"low": 1, "high": 20}, "lam": {"low": 0.1, "high": 3.0}},
                   "constraints": ["valid_accuracy >= 0"]}}))
    results = str(tmp_path / "r")
    assert main(["search", str(study), "--results", results, "--executor", "local"]) == 0
    assert ("fairdp search: stored with the results: the study's selection (fairness dp_gap, rt 1, by none) and "
            "the search's objectives, valid_accuracy (max), valid_dp_gap (min), feasible under valid_accuracy >= 0"
            ) in capsys.readouterr().err
    stored = read_selection(ResultStore(results))
    assert (stored.fairness, stored.search.method, stored.search.objectives, stored.search.constraints) == \
        ("dp_gap", "federate", objectives, ("valid_accuracy >= 0",))
    drawn = _record_pareto_figure(monkeypatch)
    assert main(["report", results, "-o", str(tmp_path / "rep"), "--no-ci", "--rts", "1"]) == 0
    err = capsys.readouterr().err
    assert "fairdp report: selection: fairness dp_gap, rt 1, by none from the study tiny-search; rts 1 from --rts" in err
    assert "Pareto fronts on the search's objectives, from the study: valid_accuracy (max), valid_dp_gap (min), " \
           "feasible under valid_accuracy >= 0" in err
    assert drawn["pairs"] == [("valid_accuracy", "valid_dp_gap")]
