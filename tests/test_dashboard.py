"""`fairdp dashboard RESULTS`: a study's results as a page served read-only on 127.0.0.1.

Over a tiny real study run through the CLI (and a tiny search, for its progress): the data the
page draws is the library's (the picks of every RT are ``select_by_rt``'s, the fronts the
non-dominated configs, the curves the history's rows, the search progress the hypervolume
files); the server answers GET of its page and JSON only, and writes nothing under the results;
a real headless Chromium (Debian's `chromium`; skipped where there is none) loads the page,
moves the RT slider through every stop with real input events and clicks a point.
"""

from __future__ import annotations

import hashlib
import html
import http.client
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pytest
import yaml

from fairdp.analysis import select_by_rt
from fairdp.analysis._dashboard import (
    NO_SEARCH,
    SLIDER_RTS,
    Dashboard,
    DashboardServer,
    dashboard_data,
    dashboard_points,
    history_curves,
    pareto_fronts,
    prepare_dashboard,
    rt_picks,
    search_series,
    slider_rts,
)
from fairdp.errors import InputError
from fairdp.study import (
    choose_selection,
    read_history,
    read_hypervolume_histories,
    read_results,
    read_selections,
)
from tests.conftest import REPO, assert_input_error, run_main

pytestmark = pytest.mark.xdist_group("dashboard")  # one xdist worker runs the module's studies once

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
NEEDS_CHROMIUM = pytest.mark.skipif(BROWSER is None, reason="needs a headless Chromium: apt-get install chromium "
                                                           "(make test-tools does it as root)")

STUDY = {
    "name": "dash", "dataset": {"name": "synthetic", "rows": 600, "features": 6}, "seeds": [0, 1],
    "train": {"epochs": 3, "batch_size": 200}, "evaluate": {"leakage": False, "mdl": False, "min_group_count": 1},
    "selection": {"fairness": "dp_gap", "rt": 1.0, "rts": [0, 1, 3]},
    "methods": {"unconstrained": {}, "noise": {"grid": {"eps": [1, 4, 16]}},
                "federate": {"grid": {"eps": [1, 10], "lam": [0.5, 1.5]}}},
}
SEARCH = {
    "name": "dash-search", "dataset": {"name": "synthetic", "rows": 600, "features": 6}, "seeds": [0],
    "train": {"epochs": 1, "batch_size": 200}, "evaluate": {"leakage": False, "mdl": False, "min_group_count": 1},
    "methods": {"noise": {}},
    "search": {"method": "noise", "sampler": "nsga2", "population": 2, "trials": 4, "seed": 0,
               "objectives": {"valid_accuracy": "max", "valid_tpr_gap": "min"},
               "space": {"eps": {"low": 1, "high": 20, "log": True}}},
}
KEYS = ["dataset", "method", "seed", "config_id"]


def _run(tmp_path_factory, spec: dict, command: str) -> Path:
    root = tmp_path_factory.mktemp(spec["name"])
    (root / "s.yaml").write_text(yaml.safe_dump(spec))
    done = run_main(command, "s.yaml", "--results", "r", "--executor", "local", cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "r"


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """A grid study's results: 3 methods, 8 configs, 2 seeds, 3 epochs; selection dp_gap, rt 1."""
    return _run(tmp_path_factory, STUDY, "run")


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> Path:
    """A search's results: 4 trials of noise in generations of 2, with its hypervolume file."""
    return _run(tmp_path_factory, SEARCH, "search")


def digests(results: Path) -> dict[str, str]:
    """sha256 of every file under ``results`` and its sibling ``<results>.*`` files and folders."""
    out = {}
    for top in [results, *sorted(results.parent.glob(f"{results.name}.*"))]:
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for f in files:
            out[str(f.relative_to(results.parent))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def _load(results: Path) -> Dashboard:
    """What the CLI serves: the rows, the stored selection, the curves and the search histories."""
    rows = read_results(str(results))
    chosen = choose_selection(read_selections(str(results)), {},
                              {"fairness": "--fairness", "rt": "--rt", "by": "--by", "rts": "--rts"})
    v = chosen.values
    return prepare_dashboard(rows, fairness=v["fairness"], rt=v["rt"], by=list(v["by"]), rts=v["rts"],
                             history=read_history(str(results), rows=rows),
                             search_history=read_hypervolume_histories(str(results)), title=str(results),
                             selection=chosen.message)


class Served:
    def __init__(self, results: Path):
        self.results = results
        self.before = digests(results)
        self.dashboard = _load(results)
        self.server = DashboardServer(self.dashboard, 0, reload=lambda: _load(results))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def request(self, method: str, path: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
        try:
            conn.request(method, path, headers=headers or {})
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()

    def get_json(self, path: str):
        status, headers, body = self.request("GET", path)
        assert status == 200 and headers["Content-Type"] == "application/json", (status, body[:200])
        return json.loads(body)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture(scope="module")
def served(study):
    s = Served(study)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def served_search(searched):
    s = Served(searched)
    yield s
    s.stop()


def _library_picks(rows: pd.DataFrame, rt: float, fairness: str = "dp_gap", by=()) -> set[tuple]:
    picked = select_by_rt(rows, rt=rt, fairness=fairness, by=list(by))
    return {(str(d), str(m), str(s), str(c)) for d, m, s, c in picked[KEYS].itertuples(index=False, name=None)}


def _keys(points: pd.DataFrame, ids) -> set[tuple]:
    chosen = points.set_index("point").loc[list(ids), KEYS]
    return {(str(d), str(m), str(s), str(c)) for d, m, s, c in chosen.itertuples(index=False, name=None)}


# -- the data the page draws ------------------------------------------------------------------

@pytest.mark.parametrize("fairness, by", [("dp_gap", ()), ("tpr_gap", ("eps",))])
@pytest.mark.parametrize("rt", [0.0, 0.5, 1.0, 3.0, 4.5, 5.0])
def test_the_picks_of_each_rt_are_select_by_rts(study, rt, fairness, by):
    rows = read_results(str(study))
    points = dashboard_points(rows, fairness)
    (picks,) = rt_picks(rows, points, fairness, by, [rt])
    assert _keys(points, picks) == _library_picks(rows, rt, fairness, by)
    assert len(picks) == len(select_by_rt(rows, rt=rt, fairness=fairness, by=list(by)))
    # and the page's data holds the same picks at that slider stop
    data = dashboard_data(rows, fairness=fairness, rt=1.0, by=by, rts=[rt])
    assert data["picks"][data["rts"].index(rt)] == picks


def test_the_slider_offers_every_quarter_point_to_5_and_the_studys_rts():
    assert slider_rts(1.0) == list(SLIDER_RTS) and SLIDER_RTS[:3] == (0.0, 0.25, 0.5) and SLIDER_RTS[-1] == 5.0
    assert slider_rts(0.1, [7, 1, 0]) == sorted({*SLIDER_RTS, 0.1, 7.0})
    for bad in (float("inf"), -1.0, float("nan")):
        with pytest.raises(InputError, match="rt"):
            slider_rts(bad)


def test_the_initial_stop_is_the_studys_rt_and_the_picks_change_along_the_slider(study):
    rows = read_results(str(study))
    data = _load(study).payload()
    assert data["rts"][data["rt_index"]] == 1.0 and data["study_rts"] == [0.0, 1.0, 3.0]
    points = dashboard_points(rows, "dp_gap")
    for rt, picks in zip(data["rts"], data["picks"]):
        assert _keys(points, picks) == _library_picks(rows, rt)
    assert data["picks"][0] != data["picks"][-1]  # the study has a pick that moves with the RT


def test_each_config_is_a_point_with_its_hyperparameters_and_metrics(study):
    rows = read_results(str(study))
    data = _load(study).payload()
    ok = rows[rows["status"] == "ok"]
    assert len(data["points"]) == len(ok) == 16 and data["x"] == "test_dp_gap" and data["y"] == "test_accuracy"
    by_key = ok.set_index(KEYS)
    for p in data["points"]:
        d, m, s, c = p["key"]
        row = by_key.loc[(d, m, int(s), c)]
        assert p["x"] == pytest.approx(row["test_dp_gap"]) and p["y"] == pytest.approx(row["test_accuracy"])
        assert f"config {c}" in p["hover"] and f"test accuracy {row['test_accuracy']:.4g}" in p["hover"]
        if m == "federate":
            assert f"eps={row['eps']:g}, lam={row['lam']:g}" in p["hover"]


def test_the_front_points_are_the_non_dominated_configs(study):
    rows = read_results(str(study))
    points = dashboard_points(rows, "dp_gap")
    fronts = pareto_fronts(points, "dp_gap")
    assert sorted(f["method"] for f in fronts) == ["federate", "noise", "unconstrained"]
    for f in fronts:
        mine = points[points["label"] == f["method"]]
        xy = list(zip(mine["test_dp_gap"], mine["test_accuracy"], mine["point"]))
        dominated = {p for x, y, p in xy
                     if any(x2 <= x and y2 >= y and (x2 < x or y2 > y) for x2, y2, _ in xy)}
        assert set(f["points"]) == {p for *_, p in xy} - dominated
        # the staircase passes through every front point, and only steps in one axis at a time
        corners = {(round(a, 9), round(b, 9)) for a, b in f["steps"]}
        for p in f["points"]:
            row = mine[mine["point"] == p].iloc[0]
            assert (round(row["test_dp_gap"], 9), round(row["test_accuracy"], 9)) in corners
        for (a, b), (c, d) in zip(f["steps"], f["steps"][1:]):
            assert a == c or b == d


def test_the_curves_are_the_historys_rows(study):
    rows = read_results(str(study))
    history = read_history(str(study), rows=rows)
    points = dashboard_points(rows, "dp_gap")
    curves = history_curves(history, points)
    assert len(curves) == len(points) and sum(len(c["epoch"]) for c in curves.values()) == len(history)
    for _, p in points.iterrows():
        mine = history[(history[KEYS] == p[KEYS].to_numpy()).all(axis=1)].sort_values("epoch")
        c = curves[int(p["point"])]
        assert c["epoch"] == mine["epoch"].tolist() == [1, 2, 3]
        for column, values in c["series"].items():
            assert values == pytest.approx(mine[column].tolist())
        assert {"valid_accuracy", "valid_loss", "valid_dp_gap"} <= set(c["series"])
        assert c["kept_epoch"] == int(mine.loc[mine["kept"], "epoch"].iloc[0]) == int(p["best_epoch"])
    assert history_curves(None, points) == {}


def test_a_search_is_drawn_from_its_hypervolume_files_and_a_grid_says_it_has_none(study, searched):
    series = search_series(read_hypervolume_histories(str(searched)))
    stored = pd.read_parquet(f"{searched}.hypervolume-noise-seed0.parquet")
    assert len(series) == 1 and series[0]["method"] == "noise" and series[0]["seed"] == 0
    assert series[0]["trials"] == stored["trials"].tolist() == [2, 4]
    assert series[0]["hypervolume"] == pytest.approx(stored["hypervolume"].tolist())
    assert "valid_accuracy (max)" in series[0]["objectives"]
    data = _load(searched).payload()
    assert data["search"] == series and data["search_note"] == ""
    grid = _load(study).payload()
    assert grid["search"] is None and grid["search_note"] == NO_SEARCH == "no search in these results"


# -- the server -------------------------------------------------------------------------------

def test_the_page_and_its_json_are_served_on_loopback(served):
    assert served.server.server_address[0] == "127.0.0.1" and served.server.url.startswith("http://127.0.0.1:")
    status, headers, page = served.request("GET", "/?selftest=1")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    text = page.decode()
    assert 'id="fronts"' in text and 'id="rt"' in text and 'type="range"' in text
    # nothing from elsewhere: no script, style or image loaded, no address but SVG's namespace
    assert not re.search(r"\b(src|href)\s*=", text)
    assert set(re.findall(r"https?://[^\s\"'<>`]+", text)) == {"http://www.w3.org/2000/svg"}
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert served.get_json("/api/data") == served.dashboard.payload()
    point = next(p["id"] for p in served.dashboard.payload()["points"] if p["curves"])
    assert served.get_json(f"/api/history/{point}") == json.loads(served.dashboard.curves[point])
    assert served.request("GET", "/api/history/999999")[0] == 404


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "BREW"])
def test_any_method_but_get_is_405(served, method):
    status, headers, _ = served.request(method, "/api/data")
    assert status == 405 and headers["Allow"] == "GET"


@pytest.mark.parametrize("path", ["/../../etc/passwd", "/results/x.parquet", "/etc/passwd", "/api/data/../../x",
                                  "/api/history/../../../etc/passwd", "/api/history/-1", "/index.html/..",
                                  "/%2e%2e/%2e%2e/etc/passwd", "/synthetic/noise", "/r.selection.parquet"])
def test_no_path_reaches_a_file(served, path):
    status, _, body = served.request("GET", path)
    assert status == 404 and b"root:" not in body and b"PAR1" not in body


def test_a_page_of_another_host_is_refused(served):
    """DNS rebinding: a site whose name resolves to 127.0.0.1 sends its own Host."""
    assert served.request("GET", "/api/data", {"Host": "evil.example:80"})[0] == 403
    assert served.request("GET", "/api/data", {"Host": f"localhost:{served.server.port}"})[0] == 200


def test_reload_reads_the_results_again_and_a_failed_one_keeps_the_page(served, study):
    assert served.get_json("/api/data?reload=1") == served.dashboard.payload()

    def broken():
        raise InputError("r: no result rows found")

    server = DashboardServer(served.dashboard, 0, reload=broken)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("GET", "/api/data?reload=1")
        r = conn.getresponse()
        assert r.status == 503 and "no result rows found" in json.loads(r.read())["error"]
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("GET", "/api/data")
        assert conn.getresponse().read() == served.dashboard.data
        conn.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_serving_and_clicking_every_config_writes_nothing_under_the_results(served, study):
    data = served.get_json("/api/data")
    served.get_json("/api/data?reload=1")
    for p in data["points"]:
        assert served.request("GET", f"/api/history/{p['id']}")[0] == (200 if p["curves"] else 404)
    for method in ("POST", "PUT", "DELETE"):
        assert served.request(method, "/api/data")[0] == 405
    assert served.request("GET", "/../r/synthetic")[0] == 404
    assert digests(study) == served.before
    assert any(name.startswith("r.history/") for name in served.before)  # the curves were hashed too


# -- the command --------------------------------------------------------------------------------

def test_the_command_prints_its_url_serves_and_stops_on_ctrl_c(study):
    before = digests(study)
    # Ctrl-C as a terminal's user has it: a suite run as a background job of a script inherits
    # SIGINT ignored (POSIX shells ignore it for `cmd &`), and Python then keeps it ignored
    proc = subprocess.Popen([sys.executable, "-m", "fairdp", "dashboard", str(study), "--port", "0"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        url = proc.stdout.readline().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", url), (url, proc.stderr.read() if proc.poll() else "")
        port = int(url.rsplit(":", 1)[1].strip("/"))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", "/api/data")
        data = json.loads(conn.getresponse().read())
        conn.close()
        assert data["title"] == str(study) and data["fairness"] == "dp_gap" and len(data["points"]) == 16
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "selection from the study dash" in err and "fairdp dashboard: stopped" in err and "Traceback" not in err
    assert digests(study) == before


@pytest.fixture
def no_serving(monkeypatch):
    """A command that should have been refused fails the test instead of serving forever."""
    def serve_forever(self, *a, **k):
        raise AssertionError("the command served instead of refusing its input")

    monkeypatch.setattr(DashboardServer, "serve_forever", serve_forever)


@pytest.mark.parametrize("rt", ["-1", "nan", "inf", "x"])
def test_a_bad_rt_is_one_line_naming_it(study, rt, no_serving):
    assert_input_error(run_main("dashboard", str(study), "--rt", rt), "--rt")


def test_bad_results_and_ports_are_one_line_naming_them(study, tmp_path, no_serving):
    assert_input_error(run_main("dashboard", str(tmp_path / "missing")), "RESULTS", "missing")
    (tmp_path / "empty").mkdir()
    assert_input_error(run_main("dashboard", str(tmp_path / "empty")), "RESULTS", "empty")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("not results")
    assert_input_error(run_main("dashboard", str(tmp_path / "notes")), "RESULTS", "notes")
    assert_input_error(run_main("dashboard", str(study), "--port", "70000"), "--port")
    assert_input_error(run_main("dashboard", str(study), "--rts", "0,x"), "--rts")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert_input_error(run_main("dashboard", str(study), "--port", str(port)), "--port", str(port), "in use")


def test_the_cli_imports_the_dashboard_only_when_it_runs():
    code = "import sys, fairdp.cli; print('fairdp.analysis._dashboard' in sys.modules, 'matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.split() == ["False", "False"]


# -- in a browser -------------------------------------------------------------------------------

def _selftest(url: str) -> dict:
    """The page at ``url`` with ``?selftest=1`` in headless Chromium: its own script moves the RT
    slider through every stop (an input event each, as a drag does), clicks a point, and writes
    what the page then showed into ``<pre id="selftest">``, which --dump-dom returns."""
    dom = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900",
                          "--virtual-time-budget=20000", "--dump-dom", url + "?selftest=1"],
                         capture_output=True, text=True, timeout=180)
    found = re.search(r'<pre id="selftest"[^>]*>(.*?)</pre>', dom.stdout, flags=re.S)
    assert found and found.group(1), dom.stderr[-3000:]
    return json.loads(html.unescape(found.group(1)))


@NEEDS_CHROMIUM
def test_in_chromium_the_slider_moves_the_picks_as_select_by_rt_does(served, study):
    before = digests(study)
    result = _selftest(served.server.url)
    rows = read_results(str(study))
    assert result["points"] == (rows["status"] == "ok").sum() == 16  # one circle per config and seed
    assert result["fronts"] == 3
    steps = result["steps"]
    assert [s["rt"] for s in steps] == served.dashboard.payload()["rts"]
    for s in steps:  # what the page ringed at each stop is the library's pick
        expected = _library_picks(rows, s["rt"])
        assert {tuple(k) for k in s["picks"]} == expected and s["rows"] == len(expected)
    changed = [(a, b) for a, b in zip(steps, steps[1:]) if _library_picks(rows, a["rt"]) != _library_picks(rows, b["rt"])]
    assert changed, "the study has no pick that moves with the RT"
    for a, b in changed:
        assert {tuple(k) for k in a["picks"]} != {tuple(k) for k in b["picks"]}, (a["rt"], b["rt"])
    # the clicked point's curves: one line per valid metric, a point per epoch of its history
    history = read_history(str(study), rows=rows)
    d, m, s_, c = result["curves"]["key"]
    mine = history[(history["dataset"] == d) & (history["method"] == m) & (history["seed"] == int(s_))
                   & (history["config_id"] == c)]
    expected = {col: int(mine[col].notna().sum()) for col in mine.columns
                if col.startswith("valid_") and mine[col].notna().any()}
    assert dict(result["curves"]["paths"]) == expected and expected["valid_accuracy"] == 3
    assert NO_SEARCH in result["search"] and result["searchPaths"] == 0
    assert digests(study) == before


@NEEDS_CHROMIUM
def test_in_chromium_a_search_draws_its_hypervolume_line(served_search, searched):
    result = _selftest(served_search.server.url)
    assert result["searchPaths"] == 1 and NO_SEARCH not in result["search"]
    assert result["points"] == len(read_results(str(searched)))
    assert digests(searched) == served_search.before
