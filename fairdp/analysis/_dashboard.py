"""``fairdp dashboard RESULTS``: a study's results as a page in the browser, served read-only on
127.0.0.1 by Python's standard library (``http.server``), with no file from the internet.

Two halves, apart:

- Data preparation: pure functions from the rows, per-epoch curves and search histories the
  caller has read (``fairdp.study``'s readers; the CLI reads them) to plain JSON-ready values.
  Every number the page shows is computed here with the library's own functions: the Pareto
  fronts with ``pareto_front`` and the report's staircase ``attainment_steps``, the picks of
  each relaxation threshold (RT) with ``select_by_rt``, the search progress with
  ``search_progress``. The page's script only draws them; it does no selection maths.
- The server (``DashboardServer``): answers GET only (405 for any other method), serves only
  its page (``/``) and JSON (``/api/data``, ``/api/history/<point>``), 404 for every other
  path (nothing in a URL names a file), and binds 127.0.0.1. It opens no file: what it serves
  was read before it started, or is read again by the ``reload`` function its caller passes
  (the page's Reload button), which reads and never writes.

A *point* is one ok row (one config in one seed; under ``notion_gap`` a baseline row once per
fairness notion, as ``per_notion`` repeats it), numbered from 0 in (dataset, method, seed,
config_id) order: the page's circles, the picks and ``/api/history/<point>`` all use that number.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import re
import socketserver
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pandas as pd

from fairdp.analysis._pareto import pareto_front
from fairdp.analysis._rows import (
    check_rt,
    hyperparameter_columns,
    numeric_columns,
    ok_rows,
    require_columns,
)
from fairdp.analysis._search_progress import SEARCH_KEYS, search_progress
from fairdp.analysis._select import per_notion, select_by_rt
from fairdp.analysis._style import method_style
from fairdp.analysis._tables import FAIRNESS_LABELS
from fairdp.errors import InputError
from fairdp.schema import NOTION_GAP

logger = logging.getLogger("fairdp")

HOST = "127.0.0.1"
"""The only address the dashboard binds: it serves results to this machine alone."""

SLIDER_RTS = tuple(k / 4 for k in range(21))
"""The RTs the slider stops at (0, 0.25, ..., 5 accuracy points), beside the study's own."""

POINT_KEYS = ("dataset", "method", "seed", "config_id")
"""What names a point's config; under ``notion_gap`` its ``fairness_notion`` too."""

NO_SEARCH = "no search in these results"


# -- data preparation ------------------------------------------------------------------------


def slider_rts(rt: float, rts: Iterable[float] | None = None) -> list[float]:
    """The RTs the page's slider offers: ``SLIDER_RTS``, the study's sweep ``rts`` and its
    ``rt``, sorted, each once."""
    values = {check_rt(rt, "rt")} | {check_rt(r, "rts") for r in (rts or ())}
    if not all(math.isfinite(v) for v in values):
        raise InputError(f"rt, rts: relaxation thresholds must be finite, got {sorted(values)}")
    return sorted(values | set(SLIDER_RTS))


def dashboard_points(rows: pd.DataFrame, fairness: str) -> pd.DataFrame:
    """The points the page draws: the ok rows (``per_notion``'s under ``notion_gap``, each
    notion's violation its own), sorted by (dataset, method, seed, config_id), with ``point``
    (their number), ``label`` (the method, "pfld [dp]" under ``notion_gap``) and ``panel`` (the
    dataset, with the notion under ``notion_gap``). The drawn axes are ``test_<fairness>``
    and ``test_accuracy``; NaN there is kept (a pick may be such a row) but not drawn."""
    view = ok_rows(rows, "rows")
    notion = fairness == NOTION_GAP
    if notion:
        view = per_notion(view)
    columns = ["test_accuracy", f"test_{fairness}", "valid_accuracy", f"valid_{fairness}"]
    require_columns(view, [*POINT_KEYS, *columns], "rows")
    view = numeric_columns(view, columns, "rows")
    view = view.sort_values(list(POINT_KEYS) + (["fairness_notion"] if notion else []), kind="mergesort")
    view = view.reset_index(drop=True)
    view["point"] = np.arange(len(view))
    suffix = (" [" + view["fairness_notion"].astype(str) + "]") if notion else ""
    view["label"] = view["method"].astype(str) + suffix
    view["panel"] = view["dataset"].astype(str) + suffix
    return view


def _key(values: Iterable[object]) -> tuple[str, ...]:
    """A point's key as text: ints and floats of one seed read alike (0 and 0.0)."""
    out = []
    for v in values:
        if isinstance(v, (float, np.floating)) and float(v).is_integer():
            v = int(v)
        out.append(str(v))
    return tuple(out)


def _point_index(points: pd.DataFrame, keys: Sequence[str]) -> dict[tuple[str, ...], int]:
    return {_key(k): int(p) for k, p in zip(points[list(keys)].itertuples(index=False, name=None), points["point"])}


def rt_picks(rows: pd.DataFrame, points: pd.DataFrame, fairness: str, by: Sequence[str],
             rts: Sequence[float]) -> list[list[int]]:
    """For each RT of ``rts``, the points ``select_by_rt(rows, rt, fairness, by)`` picks (one
    per dataset, method, seed and value of ``by``), as sorted point numbers of ``points``
    (``dashboard_points(rows, fairness)``)."""
    keys = list(POINT_KEYS) + (["fairness_notion"] if fairness == NOTION_GAP else [])
    index = _point_index(points, keys)
    out, notes = [], []  # the same note at every RT: said once
    for rt in rts:
        picked = select_by_rt(rows, rt=rt, fairness=fairness, by=list(by), notes=notes)
        out.append(sorted({index[k] for k in (_key(t) for t in picked[keys].itertuples(index=False, name=None))
                           if k in index}))
    for message in notes:
        logger.warning("fairdp dashboard: %s", message)
    return out


def pareto_fronts(points: pd.DataFrame, fairness: str) -> list[dict]:
    """Per panel and method (all seeds pooled, as the report's Pareto figure): the points on
    the front of test accuracy (max) against ``test_<fairness>`` (min), by ``pareto_front``,
    and the staircase through them that bounds what the front attains (the report's
    ``attainment_steps``) as [x, y] pairs."""
    # matplotlib loads with _plots, the home of the report's staircase: only when fronts are drawn
    from fairdp.analysis._plots import attainment_steps

    x, y = f"test_{fairness}", "test_accuracy"
    objectives = {x: "min", y: "max"}
    fronts = []
    for (panel, label), group in points.groupby(["panel", "label"], sort=True):
        pts = group[[x, y, "point"]].dropna(subset=[x, y])
        if pts.empty:
            continue
        front = pareto_front(pts, objectives)
        xs, ys = attainment_steps(front[x], front[y], "min", "max")
        fronts.append({"panel": str(panel), "method": str(label), "color": method_style(str(label)).color,
                       "points": sorted(int(p) for p in front["point"]),
                       "steps": [[_num(a), _num(b)] for a, b in zip(xs, ys)]})
    return fronts


def history_curves(history: pd.DataFrame | None, points: pd.DataFrame) -> dict[int, dict]:
    """Each point's per-epoch validation curves: the rows of ``history`` (``read_history``)
    of its (dataset, method, seed, config_id), by epoch, as {"epoch": [...], "series":
    {column: [...]} for every ``valid_*`` column, "kept_epoch": the epoch its row reports or
    None}. Points without curves (a baseline not trained by epochs) are absent."""
    if history is None or history.empty or not set(POINT_KEYS) <= set(history.columns):
        return {}
    index: dict[tuple[str, ...], list[int]] = {}
    for k, p in zip(points[list(POINT_KEYS)].itertuples(index=False, name=None), points["point"]):
        index.setdefault(_key(k), []).append(int(p))
    history = history.sort_values([*POINT_KEYS, "epoch"], kind="mergesort").reset_index(drop=True)
    columns = [c for c in history.columns if c.startswith("valid_")]
    values = {c: pd.to_numeric(history[c], errors="coerce").to_numpy(float) for c in columns}
    epochs = pd.to_numeric(history["epoch"]).to_numpy()
    kept = history["kept"].eq(True).to_numpy() if "kept" in history.columns else np.zeros(len(history), dtype=bool)
    out: dict[int, dict] = {}
    for k, pos in history.groupby(list(POINT_KEYS), sort=False).indices.items():
        ids = index.get(_key(k))
        if not ids:
            continue
        at = np.flatnonzero(kept[pos])
        curves = {"epoch": [int(e) for e in epochs[pos]],
                  "series": {c: [_num(v) for v in values[c][pos]] for c in columns if np.isfinite(values[c][pos]).any()},
                  "kept_epoch": int(epochs[pos][at[0]]) if len(at) else None}
        for p in ids:
            out[p] = curves
    return out


def search_series(histories: pd.DataFrame | None) -> list[dict] | None:
    """The hypervolume per generation of each search in ``histories`` (the stacked
    ``<results>.hypervolume-<method>-seed<s>.parquet`` tables; None: no search), by
    ``search_progress``: per (dataset, method, seed), its trials and normalised hypervolume,
    and the objectives and constraints it was searched under."""
    if histories is None or len(histories) == 0:
        return None
    progress = search_progress(histories)
    out = []
    for (dataset, method, seed), g in progress.groupby(list(SEARCH_KEYS), sort=True):
        g = g.sort_values("trials", kind="mergesort")
        out.append({"dataset": str(dataset), "method": str(method), "seed": _plain(seed),
                    "color": method_style(str(method)).color,
                    "objectives": _objectives_text(g["objectives"].iloc[0]),
                    "constraints": _constraints_text(g["constraints"].iloc[0]),
                    "trials": [int(t) for t in g["trials"]], "hypervolume": [_num(h) for h in g["hypervolume"]]})
    return out


def _objectives_text(raw: object) -> str:
    try:
        objectives = json.loads(raw) if isinstance(raw, str) else dict(raw)
        return ", ".join(f"{k} ({v})" for k, v in objectives.items())
    except (TypeError, ValueError):
        return str(raw)


def _constraints_text(raw: object) -> str:
    try:
        constraints = json.loads(raw) if isinstance(raw, str) else list(raw)
        return "; ".join(str(c) for c in constraints)
    except (TypeError, ValueError):
        return "" if raw is None else str(raw)


def _num(v: object) -> float | None:
    """A finite float, or None (JSON's null) for NaN, inf or no number."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _plain(v: object) -> object:
    """``v`` as a JSON value: numpy scalars as Python's, NaN as None."""
    if v is None or v is pd.NA:
        return None
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return _num(v)
    return str(v)


def _cell(v: object) -> str:
    """A value as the page shows it: numbers to 4 significant digits, NaN as an empty cell."""
    v = _plain(v)
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _metric_label(column: str) -> str:
    split, _, metric = column.partition("_")
    return f"{split} {FAIRNESS_LABELS.get(metric, metric.replace('_', ' '))}"


@dataclass(frozen=True)
class Dashboard:
    """What the server serves: ``data`` (the JSON of ``/api/data``) and each point's curves
    (``/api/history/<point>``), as encoded JSON."""

    data: bytes
    curves: dict[int, bytes] = field(default_factory=dict)

    def payload(self) -> dict:
        """``data`` decoded (for tests and callers that inspect it)."""
        return json.loads(self.data)


def dashboard_data(rows: pd.DataFrame, *, fairness: str, rt: float, by: Sequence[str] = (),
                   rts: Sequence[float] | None = None, history: pd.DataFrame | None = None,
                   search_history: pd.DataFrame | None = None, title: str = "",
                   selection: str = "") -> dict:
    """Everything the page draws, as JSON-ready values: the points (with each one's hover
    text and table cells), the fronts, the slider's RTs with each one's picks, the search
    progress (None: no search), and which selection and results they are. ``history`` only
    says which points have curves; ``history_curves`` gives them."""
    points = dashboard_points(rows, fairness)
    return _data(rows, points, history_curves(history, points), fairness=fairness, rt=rt, by=by, rts=rts,
                 search_history=search_history, title=title, selection=selection)


def _data(rows: pd.DataFrame, points: pd.DataFrame, curves: dict[int, dict], *, fairness: str, rt: float,
          by: Sequence[str], rts: Sequence[float] | None, search_history: pd.DataFrame | None, title: str,
          selection: str) -> dict:
    rt = check_rt(rt, "rt")
    stops = slider_rts(rt, rts)
    picks = rt_picks(rows, points, fairness, by, stops)
    x, y, vx = f"test_{fairness}", "test_accuracy", f"valid_{fairness}"
    hyper = [c for c in hyperparameter_columns(ok_rows(rows, "rows")) if c in points.columns]
    by = [c for c in by if c in points.columns]
    columns = ["Dataset", "Method", "Seed", *by, "Config", "Hyperparameters", "valid accuracy", _metric_label(vx),
               "test accuracy", _metric_label(x)]
    out_points = []
    for r in points.to_dict("records"):
        hp = ", ".join(f"{c}={_cell(r[c])}" for c in hyper if _cell(r[c]) != "")
        metrics = (f"valid accuracy {_cell(r['valid_accuracy'])}, {_metric_label(vx)} {_cell(r[vx])}\n"
                   f"test accuracy {_cell(r[y])}, {_metric_label(x)} {_cell(r[x])}")
        hover = f"{r['label']} · seed {_cell(r['seed'])} · config {r['config_id']}\n" + (hp + "\n" if hp else "") + metrics
        p = int(r["point"])
        out_points.append({
            "id": p, "panel": str(r["panel"]), "method": str(r["label"]),
            "key": [_cell(r[c]) for c in POINT_KEYS] + ([_cell(r["fairness_notion"])] if fairness == NOTION_GAP else []),
            "x": _num(r[x]), "y": _num(r[y]), "color": method_style(str(r["label"])).color, "hover": hover,
            "cells": [_cell(r["dataset"]), str(r["label"]), _cell(r["seed"]), *(_cell(r[c]) for c in by),
                      str(r["config_id"]), hp, _cell(r["valid_accuracy"]), _cell(r[vx]), _cell(r[y]), _cell(r[x])],
            "curves": p in curves,
        })
    search = search_series(search_history)
    studies = sorted(rows["study"].dropna().astype(str).unique()) if "study" in rows.columns else []
    return {
        "title": title, "studies": studies, "selection": selection, "fairness": fairness, "by": list(by),
        "x": x, "y": y, "x_label": f"{_metric_label(x)} (points, lower is fairer)", "y_label": "test accuracy (%)",
        "panels": sorted(points["panel"].unique().tolist()),
        "points": out_points, "fronts": pareto_fronts(points, fairness),
        "rts": stops, "rt_index": stops.index(rt), "study_rts": sorted({rt, *map(float, rts or ())}),
        "picks": picks, "columns": columns,
        "search": search, "search_note": NO_SEARCH if search is None else "",
    }


def prepare_dashboard(rows: pd.DataFrame, *, fairness: str, rt: float, by: Sequence[str] = (),
                      rts: Sequence[float] | None = None, history: pd.DataFrame | None = None,
                      search_history: pd.DataFrame | None = None, title: str = "",
                      selection: str = "") -> Dashboard:
    """``dashboard_data`` and ``history_curves`` encoded for the server."""
    points = dashboard_points(rows, fairness)
    curves = history_curves(history, points)
    data = _data(rows, points, curves, fairness=fairness, rt=rt, by=by, rts=rts, search_history=search_history,
                 title=title, selection=selection)
    return Dashboard(_encode(data), {p: _encode({"point": p, **c}) for p, c in curves.items()})


def _encode(value: object) -> bytes:
    return json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# -- the server ------------------------------------------------------------------------------


class DashboardServer(ThreadingHTTPServer):
    """The dashboard's HTTP server on ``HOST``:``port`` (0: a free port, ``port`` says which).

    ``dashboard``: what it serves; ``reload`` (optional): a function that reads the results
    again and returns a new ``Dashboard``, called when the page asks (``/api/data?reload=1``).
    An ``OSError`` (the port in use) is raised by the constructor, nothing bound."""

    daemon_threads = True  # a browser's open connection does not hold up a Ctrl-C

    def __init__(self, dashboard: Dashboard, port: int = 0,
                 reload: Callable[[], Dashboard] | None = None) -> None:
        self.dashboard = dashboard
        self._reload = reload
        self._lock = threading.Lock()
        super().__init__((HOST, port), _Handler)

    def server_bind(self) -> None:
        # HTTPServer's own looks the host's name up (socket.getfqdn), which may wait on DNS
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = HOST, self.server_address[1]

    def handle_error(self, request, client_address) -> None:
        # socketserver's own prints a traceback (a browser that closed its connection, mostly)
        logger.debug("fairdp dashboard: request from %s failed", client_address, exc_info=True)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/"

    def reload(self) -> Dashboard:
        """The results read again by the caller's ``reload`` (the same dashboard without one)."""
        if self._reload is None:
            return self.dashboard
        with self._lock:
            self.dashboard = self._reload()
            return self.dashboard


_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px 32px;color:#222}
h1{font-size:20px;margin:16px 0 2px}h2{font-size:16px;margin:22px 0 6px;border-bottom:1px solid #ddd}
.note{color:#555;font-size:12px}.charts{display:flex;flex-wrap:wrap;gap:12px}
svg.chart{background:#fff;border:1px solid #e3e3e3;max-width:100%;height:auto}
svg text{font:11px system-ui,sans-serif;fill:#333}.axis line,.axis path{stroke:#999}
circle.pt{cursor:pointer;opacity:.4;stroke:none}circle.pt.front{opacity:.9}
circle.pt.pick{opacity:1;stroke:#111;stroke-width:2}circle.pt.chosen{stroke:#d00;stroke-width:3;opacity:1}
.scroll{overflow-x:auto}table{border-collapse:collapse;font-size:12px}
th,td{border-bottom:1px solid #eee;padding:3px 8px;text-align:left;white-space:nowrap}
tbody tr{cursor:pointer}tbody tr:hover,tbody tr.chosen{background:#fff4d6}
.legend span{display:inline-block;margin-right:12px}.sw{display:inline-block;width:10px;height:10px;margin-right:4px}
#rtbox{display:flex;align-items:center;gap:10px;margin:6px 0}#rt{width:360px}#rt-value{font-weight:600;min-width:3em}
button{font:inherit}
"""

_SCRIPT = r"""
"use strict";
const NS = "http://www.w3.org/2000/svg";
const W = 560, H = 360, M = {l: 56, r: 14, t: 14, b: 42};
const state = {data: null, selected: null, pending: Promise.resolve()};

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function sv(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function niceTicks(lo, hi, n, whole) {
  if (!(hi > lo)) { hi = lo + 1; lo = lo - 1; }
  const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  let step = [1, 2, 5, 10].map(s => s * mag).find(s => s >= raw);
  if (whole) step = Math.max(1, Math.round(step));
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
  return out;
}
function extent(values) {
  const vs = values.filter(v => v !== null && Number.isFinite(v));
  if (!vs.length) return [0, 1];
  let lo = Math.min(...vs), hi = Math.max(...vs);
  const pad = (hi - lo) * 0.05 || Math.abs(hi) * 0.05 || 1;
  return [lo - pad, hi + pad];
}
function frame(xs, ys, xlabel, ylabel, w, h, cls, wholeX) {
  w = w || W; h = h || H;
  const svg = sv("svg", {viewBox: `0 0 ${w} ${h}`, width: w, height: h, class: "chart " + (cls || "")});
  const [x0, x1] = extent(xs), [y0, y1] = extent(ys);
  const sx = v => M.l + (v - x0) / (x1 - x0) * (w - M.l - M.r);
  const sy = v => h - M.b - (v - y0) / (y1 - y0) * (h - M.t - M.b);
  const g = sv("g", {class: "axis"});
  g.appendChild(sv("path", {d: `M${M.l},${M.t}V${h - M.b}H${w - M.r}`, fill: "none"}));
  for (const t of niceTicks(x0, x1, 6, wholeX)) {
    g.appendChild(sv("line", {x1: sx(t), x2: sx(t), y1: h - M.b, y2: h - M.b + 4}));
    g.appendChild(sv("text", {x: sx(t), y: h - M.b + 16, "text-anchor": "middle"}, String(t)));
  }
  for (const t of niceTicks(y0, y1, 5)) {
    g.appendChild(sv("line", {x1: M.l - 4, x2: M.l, y1: sy(t), y2: sy(t)}));
    g.appendChild(sv("text", {x: M.l - 6, y: sy(t) + 4, "text-anchor": "end"}, String(t)));
  }
  g.appendChild(sv("text", {x: (M.l + w - M.r) / 2, y: h - 6, "text-anchor": "middle"}, xlabel));
  g.appendChild(sv("text", {x: 14, y: (M.t + h - M.b) / 2, "text-anchor": "middle",
                            transform: `rotate(-90 14 ${(M.t + h - M.b) / 2})`}, ylabel));
  svg.appendChild(g);
  return {svg, sx, sy};
}
function legend(items) {
  const d = el("div", {class: "legend"});
  for (const [name, color, dash] of items) {
    const s = el("span");
    const sw = el("span", {class: "sw"});
    sw.style.background = dash ? "repeating-linear-gradient(90deg," + color + " 0 3px,transparent 3px 5px)" : color;
    s.appendChild(sw);
    s.appendChild(document.createTextNode(name));
    d.appendChild(s);
  }
  return d;
}

function drawFronts() {
  const data = state.data, host = document.getElementById("fronts");
  host.textContent = "";
  const onFront = new Set(data.fronts.flatMap(f => f.points));
  for (const panel of data.panels) {
    const box = el("div");
    box.appendChild(el("div", {class: "note"}, panel));
    const pts = data.points.filter(p => p.panel === panel && p.x !== null && p.y !== null);
    const fronts = data.fronts.filter(f => f.panel === panel);
    const steps = fronts.flatMap(f => f.steps);
    const {svg, sx, sy} = frame(pts.map(p => p.x).concat(steps.map(s => s[0])),
                                pts.map(p => p.y).concat(steps.map(s => s[1])), data.x_label, data.y_label,
                                W, H, "fronts");
    svg.setAttribute("data-panel", panel);
    for (const f of fronts) {
      svg.appendChild(sv("polyline", {points: f.steps.map(s => sx(s[0]) + "," + sy(s[1])).join(" "),
                                      fill: "none", stroke: f.color, "stroke-width": 1.5, class: "front",
                                      "data-method": f.method}));
    }
    for (const p of pts) {
      const c = sv("circle", {cx: sx(p.x), cy: sy(p.y), r: 4, fill: p.color,
                              class: "pt" + (onFront.has(p.id) ? " front" : ""),
                              "data-id": p.id, "data-key": JSON.stringify(p.key)});
      c.appendChild(sv("title", {}, p.hover));
      c.addEventListener("click", () => selectPoint(p.id));
      svg.appendChild(c);
    }
    box.appendChild(svg);
    const methods = [...new Map(pts.map(p => [p.method, p.color])).entries()];
    box.appendChild(legend(methods));
    host.appendChild(box);
  }
}

function setRt(index) {
  const data = state.data;
  index = Math.max(0, Math.min(data.rts.length - 1, index));
  document.getElementById("rt-value").textContent = String(data.rts[index]);
  const picks = new Set(data.picks[index]);
  for (const c of document.querySelectorAll("circle.pt")) {
    const on = picks.has(Number(c.getAttribute("data-id")));
    c.classList.toggle("pick", on);
    c.setAttribute("r", on ? 6 : 4);
    if (on) c.parentNode.appendChild(c);  // drawn on top
  }
  const body = document.getElementById("picks-body");
  body.textContent = "";
  for (const id of data.picks[index]) {
    const p = data.points[id];
    const tr = el("tr", {"data-id": id});
    for (const cell of p.cells) tr.appendChild(el("td", {}, cell));
    tr.addEventListener("click", () => selectPoint(id));
    body.appendChild(tr);
  }
  document.getElementById("picks-count").textContent =
    `${data.picks[index].length} picks at RT ${data.rts[index]}` +
    (data.study_rts.includes(data.rts[index]) ? " (one of the study's RTs)" : "");
}

function selectPoint(id) {
  state.selected = id;
  for (const c of document.querySelectorAll("circle.pt")) c.classList.toggle("chosen", Number(c.getAttribute("data-id")) === id);
  for (const tr of document.querySelectorAll("#picks-body tr")) tr.classList.toggle("chosen", Number(tr.getAttribute("data-id")) === id);
  const p = state.data.points[id], host = document.getElementById("curves");
  host.textContent = "";
  host.appendChild(el("div", {class: "note"}, p.hover));
  if (!p.curves) {
    host.appendChild(el("p", {id: "curves-none"}, "no per-epoch curves for this config (a baseline not trained by epochs, or results written without them)"));
    state.pending = Promise.resolve();
    return state.pending;
  }
  state.pending = fetch(`/api/history/${id}`).then(r => r.json()).then(c => drawCurves(c, host));
  return state.pending;
}

function lineChart(title, epochs, series, kept) {
  const all = Object.values(series).flat();
  const {svg, sx, sy} = frame(epochs, all, "epoch", title, 380, 260, "curve-chart", true);
  const colors = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#999999"];
  const items = [];
  Object.entries(series).forEach(([name, ys], i) => {
    const color = colors[i % colors.length];
    let d = "";
    ys.forEach((v, k) => { if (v !== null) d += (d && ys[k - 1] !== null ? "L" : "M") + sx(epochs[k]) + "," + sy(v); });
    svg.appendChild(sv("path", {d, fill: "none", stroke: color, "stroke-width": 1.5, class: "curve",
                                "data-name": name, "data-n": ys.filter(v => v !== null).length}));
    items.push([name, color]);
  });
  if (kept !== null) {
    svg.appendChild(sv("line", {x1: sx(kept), x2: sx(kept), y1: M.t, y2: 260 - M.b, stroke: "#888",
                                "stroke-dasharray": "4 3", class: "kept"}));
  }
  const box = el("div");
  box.appendChild(svg);
  box.appendChild(legend(items.concat(kept !== null ? [[`kept epoch ${kept}`, "#888", true]] : [])));
  return box;
}

function drawCurves(c, host) {
  const charts = el("div", {class: "charts"});
  const groups = {"valid accuracy (%)": {}, "valid fairness gaps (points)": {}, "valid loss": {}};
  for (const [name, ys] of Object.entries(c.series)) {
    if (name === "valid_accuracy") groups["valid accuracy (%)"][name] = ys;
    else if (name === "valid_loss") groups["valid loss"][name] = ys;
    else groups["valid fairness gaps (points)"][name] = ys;
  }
  for (const [title, series] of Object.entries(groups)) {
    if (Object.keys(series).length) charts.appendChild(lineChart(title, c.epoch, series, c.kept_epoch));
  }
  host.appendChild(charts);
}

function drawSearch() {
  const data = state.data, host = document.getElementById("search");
  host.textContent = "";
  if (!data.search) {
    host.appendChild(el("p", {id: "no-search"}, data.search_note));
    return;
  }
  const xs = data.search.flatMap(s => s.trials), ys = data.search.flatMap(s => s.hypervolume).concat([0]);
  const {svg, sx, sy} = frame(xs, ys, "trials", "normalised hypervolume", W, 300, "search-chart", true);
  const items = [];
  for (const s of data.search) {
    let d = "";
    s.trials.forEach((t, k) => { if (s.hypervolume[k] !== null) d += (d ? "L" : "M") + sx(t) + "," + sy(s.hypervolume[k]); });
    svg.appendChild(sv("path", {d, fill: "none", stroke: s.color, "stroke-width": 1.5, class: "hv"}));
    s.trials.forEach((t, k) => {
      if (s.hypervolume[k] === null) return;
      const c = sv("circle", {cx: sx(t), cy: sy(s.hypervolume[k]), r: 3, fill: s.color});
      c.appendChild(sv("title", {}, `${s.method} seed ${s.seed}: ${t} trials, hypervolume ${s.hypervolume[k]}`));
      svg.appendChild(c);
    });
    items.push([`${s.dataset} · ${s.method} · seed ${s.seed}`, s.color]);
  }
  host.appendChild(svg);
  host.appendChild(legend(items));
  const objectives = [...new Set(data.search.map(s => s.objectives + (s.constraints ? "; feasible under " + s.constraints : "")))];
  host.appendChild(el("p", {class: "note"}, "objectives: " + objectives.join(" | ")));
}

function render() {
  const data = state.data;
  document.getElementById("title").textContent = "fairdp dashboard: " + data.title +
    (data.studies.length ? " (study " + data.studies.join(", ") + ")" : "");
  document.getElementById("selection").textContent = data.selection;
  const head = document.getElementById("picks-head");
  head.textContent = "";
  const tr = el("tr");
  for (const c of data.columns) tr.appendChild(el("th", {}, c));
  head.appendChild(tr);
  const slider = document.getElementById("rt");
  slider.max = String(data.rts.length - 1);
  slider.value = String(data.rt_index);
  drawFronts();
  setRt(data.rt_index);
  drawSearch();
  if (state.selected !== null && state.selected < data.points.length) selectPoint(state.selected);
}

async function load(reload) {
  const r = await fetch("/api/data" + (reload ? "?reload=1" : ""));
  const body = await r.json();
  if (!r.ok) { document.getElementById("status").textContent = body.error || r.statusText; return; }
  state.data = body;
  document.getElementById("status").textContent = reload ? "reloaded " + new Date().toLocaleTimeString() : "";
  render();
}

async function selftest() {
  // what a user does, replayed: the slider moved to each RT by an input event, a point clicked
  const slider = document.getElementById("rt"), out = [];
  for (let i = 0; i < state.data.rts.length; i++) {
    slider.value = String(i);
    slider.dispatchEvent(new Event("input", {bubbles: true}));
    out.push({rt: Number(document.getElementById("rt-value").textContent),
              picks: [...document.querySelectorAll("circle.pt.pick")].map(c => JSON.parse(c.getAttribute("data-key"))),
              rows: document.querySelectorAll("#picks-body tr").length});
  }
  const first = [...document.querySelectorAll("circle.pt")].find(c => state.data.points[Number(c.getAttribute("data-id"))].curves);
  let curves = null;
  if (first) {
    first.dispatchEvent(new MouseEvent("click", {bubbles: true}));
    await state.pending;
    curves = {key: JSON.parse(first.getAttribute("data-key")),
              paths: [...document.querySelectorAll("#curves path.curve")].map(p => [p.getAttribute("data-name"), Number(p.getAttribute("data-n"))])};
  }
  document.getElementById("selftest").textContent = JSON.stringify({
    points: document.querySelectorAll("circle.pt").length, fronts: document.querySelectorAll("polyline.front").length,
    steps: out, curves, search: document.getElementById("search").textContent.slice(0, 200),
    searchPaths: document.querySelectorAll("#search path.hv").length});
}

document.getElementById("rt").addEventListener("input", e => setRt(Number(e.target.value)));
document.getElementById("reload").addEventListener("click", () => load(true));
load(false).then(() => {
  if (new URLSearchParams(location.search).get("selftest") === "1") return selftest();
}).catch(e => { document.getElementById("status").textContent = String(e); });
"""

_BODY = """<h1 id="title">fairdp dashboard</h1>
<div class="note"><span id="selection"></span> <button id="reload" type="button">Reload results</button>
<span id="status"></span></div>
<p class="note">Read-only and local: served on 127.0.0.1 from the results as they were read; Reload reads them again.</p>
<h2>Pareto fronts</h2>
<p class="note">Every config in every seed is a point (hover: its hyperparameters and metrics; click: its curves).
The steps are each method's front (all seeds pooled): what it attains. Ringed: the configs the relaxation threshold
picks.</p>
<div id="fronts" class="charts"></div>
<h2>Relaxation threshold</h2>
<div id="rtbox"><label for="rt">RT (accuracy points)</label><input id="rt" type="range" min="0" max="0" step="1" value="0">
<output id="rt-value" for="rt"></output><span id="picks-count" class="note"></span></div>
<p class="note">Per dataset, method, seed (and the selection's <i>by</i> columns): among the configs within RT points of the
best validation accuracy, the lowest validation fairness gap (<code>select_by_rt</code>).</p>
<div class="scroll"><table id="picks"><thead id="picks-head"></thead><tbody id="picks-body"></tbody></table></div>
<h2>Validation curves</h2>
<div id="curves"><p class="note">Click a point or a pick to see its per-epoch validation curves.</p></div>
<h2>Search progress</h2>
<div id="search"></div>
<pre id="selftest" hidden></pre>
"""


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


PAGE = ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<title>fairdp dashboard</title><style>" + _STYLE + "</style></head>\n<body>\n" + _BODY
        + "<script>" + _SCRIPT + "</script>\n</body></html>\n").encode("utf-8")
"""The page: its script draws what ``/api/data`` gives; nothing loads from elsewhere."""

_PAGE_CSP = ("default-src 'none'; script-src " + _csp_hash(_SCRIPT) + "; style-src " + _csp_hash(_STYLE)
             + " 'unsafe-inline'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; "
             "frame-ancestors 'none'")
_HISTORY_PATH = re.compile(r"/api/history/(\d{1,9})")


class _Handler(BaseHTTPRequestHandler):
    """GET of the page and its JSON; 405 for every other method, 404 for every other path."""

    server: DashboardServer
    server_version = "fairdp-dashboard"

    def version_string(self) -> str:
        return self.server_version

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if not self._host_ok():
            self._send(403, b"unexpected Host header: the dashboard answers 127.0.0.1 and localhost only\n")
            return
        url = urlsplit(self.path)
        if url.path in ("/", "/index.html"):
            self._send(200, PAGE, "text/html; charset=utf-8", {"Content-Security-Policy": _PAGE_CSP})
            return
        if url.path == "/api/data":
            dashboard = self.server.dashboard
            if parse_qs(url.query).get("reload") == ["1"]:
                try:
                    dashboard = self.server.reload()
                except Exception as e:  # noqa: BLE001 - any reader's error: said on the page, the old data kept
                    logger.warning("fairdp dashboard: reading the results again failed: %s", e)
                    self._send(503, _encode({"error": f"reading the results again failed: {e}"}), "application/json")
                    return
            self._send(200, dashboard.data, "application/json")
            return
        found = _HISTORY_PATH.fullmatch(url.path)
        curves = self.server.dashboard.curves.get(int(found.group(1))) if found else None
        if curves is not None:
            self._send(200, curves, "application/json")
            return
        self._send(404, b"not found: the dashboard serves / and /api/data only\n")

    def __getattr__(self, name: str):
        if name.startswith("do_"):  # POST, PUT, DELETE, HEAD, any other method
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        self._send(405, b"method not allowed: the dashboard is read-only (GET)\n", extra={"Allow": "GET"})

    def _host_ok(self) -> bool:
        """A page of another site that a DNS name pointed at 127.0.0.1 sends its own Host:
        refused, so that no page but the dashboard's reads the results."""
        host = self.headers.get("Host")
        if host is None:
            return True
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name in (HOST, "localhost", "[::1]")

    def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8",
              extra: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        logger.debug("fairdp dashboard: %s " + format, self.address_string(), *args)
