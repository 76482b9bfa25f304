"""Live progress of a study on the stream its caller gives (``fairdp run`` and ``search``:
stderr): a bar over config-epochs (plain lines when the stream is not a terminal), packs done /
failed / running, elapsed, and an ETA from ``EtaModel``. Without a stream nothing is drawn: a
library call (``run_study``, ``search_study``) shows a bar only when given a ``progress_stream``.
One-off news (the cluster's slots changed) is not the bar's: it is an info record of the
``fairdp`` logger, as every other message of fairdp's library.

The work unit is the config-epoch: a pack of K configs trained for E epochs is K * E units,
reported epoch by epoch by the trials (through Ray Tune, or directly by the local executor).
A pack that trains without epochs, or whose evaluation (probes) takes a while after its last
epoch, is credited its remaining units when it finishes.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass

logger = logging.getLogger(__name__)

TRACE_ENV = "FAIRDP_PROGRESS_TRACE"
"""When set to a path, a run writes its progress events there as JSON (to test ETA models on)."""

PLAIN_EVERY_S = 10.0      # plain lines: at most this often while work advances ...
PLAIN_HEARTBEAT_S = 60.0  # ... and at least this often while it does not
TICK_S = 1.0              # the bar's refresh period


@dataclass
class _Pack:
    method: str
    units: float
    started: float
    done: float = 0.0
    last: float = 0.0            # time of the last advance (or the start)
    first: float | None = None   # time of the first advance
    first_units: float = 0.0     # units that advance reported

    def rate(self) -> tuple[float, float] | None:
        """(seconds, units) of its training between its first and last report, if it has two."""
        units = self.done - self.first_units
        return (self.last - self.first, units) if self.first is not None and units > 0 else None


class EtaModel:
    """Remaining wall time from the packs' progress, as a pure function of timed events.

    A pack takes a fixed time (start-up, then evaluation and storing after its last epoch)
    plus its config-epochs times its method's cost. Each method's cost (slot-seconds per
    config-epoch) is measured between the first and last epoch reports of its packs; the fixed
    time is what a finished pack took beyond that, averaged. A method not yet measured costs
    its ``reference`` figure (``_estimate.unit_costs``) times how much slower this run measures
    than the reference on the methods it has measured, or, without a figure, their pooled
    cost. A pack that reports no epochs (a method that does not train by epochs) is measured
    by its whole duration. The rest of the running packs plus the packs not yet started,
    spread over ``slots``, give the ETA, never less than the slowest running pack's rest.
    """

    def __init__(self, pending: dict[str, float], slots: int, reference: dict[str, float] | None = None,
                 pending_packs: dict[str, int] | None = None):
        self.pending = dict(pending)   # method -> config-epochs not yet started
        self.pending_packs = dict(pending_packs or {})   # method -> packs not yet started, where known
        self.slots = max(1, slots)
        self.reference = dict(reference or {})
        self.running: dict[str, _Pack] = {}
        self.trained: dict[str, list[float]] = {}   # method -> [seconds, units] between epoch reports
        self.whole: dict[str, list[float]] = {}     # method -> [seconds, units] of packs without reports
        self.fixed: list[float] = []                # per finished pack: duration beyond its training

    def start(self, t: float, key: str, method: str, units: float) -> None:
        restarted = key in self.running  # a retried pack: its work left the pending pool at its first start
        self.running[key] = _Pack(method, units, t, last=t)
        if restarted:
            return
        pool = method if method in self.pending else ""  # "": work of methods not known in advance
        self.pending[pool] = max(0.0, self.pending.get(pool, 0.0) - units)
        if pool in self.pending_packs:
            self.pending_packs[pool] = max(0, self.pending_packs[pool] - 1)

    def advance(self, t: float, key: str, units: float) -> None:
        p = self.running.get(key)
        if p is not None:
            if p.first is None:
                p.first, p.first_units = t, min(p.units, units)
            p.done = min(p.units, p.done + units)
            p.last = t

    def finish(self, t: float, key: str) -> None:
        p = self.running.pop(key, None)
        if p is None:
            return
        rate = p.rate()
        if rate is None:
            w = self.whole.setdefault(p.method, [0.0, 0.0])
            w[0] += t - p.started
            w[1] += p.units
            return
        tr = self.trained.setdefault(p.method, [0.0, 0.0])
        tr[0] += rate[0]
        tr[1] += rate[1]
        self.fixed.append(max(0.0, (t - p.started) - p.units * rate[0] / rate[1]))

    def resize(self, t: float, slots: int) -> None:
        """The executor now runs ``slots`` packs at once (a cluster lost or gained a node)."""
        self.slots = max(1, slots)

    def restart(self, t: float, key: str) -> None:
        """A retried pack: its work starts again."""
        p = self.running.get(key)
        if p is not None:
            self.running[key] = _Pack(p.method, p.units, t, last=t)

    def costs(self) -> tuple[dict[str, float], float | None]:
        """Per-method cost and the pooled cost (None before anything was measured)."""
        seen: dict[str, list[float]] = {m: list(v) for m, v in self.trained.items()}
        for p in self.running.values():
            rate = p.rate()
            if rate is not None:
                s = seen.setdefault(p.method, [0.0, 0.0])
                s[0] += rate[0]
                s[1] += rate[1]
        for m, (sec, units) in self.whole.items():
            if m not in seen:
                seen[m] = [sec, units]
        per = {m: sec / units for m, (sec, units) in seen.items() if units > 0}
        total_units = sum(u for _, u in seen.values())
        pooled = sum(sec for sec, _ in seen.values()) / total_units if total_units > 0 else None
        return per, pooled

    def fixed_time(self) -> float:
        """A pack's time beyond its training: measured on finished packs, else on the start-up
        of running ones (their first report came after start-up and one report's training)."""
        if self.fixed:
            return sum(self.fixed) / len(self.fixed)
        starts = [max(0.0, p.first - p.started - p.first_units * r[0] / r[1])
                  for p in self.running.values() if (r := p.rate()) is not None]
        return sum(starts) / len(starts) if starts else 0.0

    def reference_scale(self, per: dict[str, float]) -> float | None:
        """Measured cost over reference cost, on the methods that have both (``per``: the
        measured costs, from ``costs``)."""
        both = [m for m in per if self.reference.get(m, 0) > 0]
        if not both:
            return None
        return sum(per[m] for m in both) / sum(self.reference[m] for m in both)

    def eta(self, t: float) -> float | None:
        """Seconds left from time ``t``, or None while nothing has been measured."""
        per, pooled = self.costs()
        if pooled is None:
            return None
        scale = self.reference_scale(per)
        fixed = self.fixed_time()

        def cost(method: str) -> float:
            if method in per:
                return per[method]
            if scale is not None and method in self.reference:
                return scale * self.reference[method]
            return pooled

        longest = 0.0
        work = 0.0
        for p in self.running.values():
            overhead = fixed if p.method not in self.whole else 0.0
            rest = max(0.0, p.started + overhead + p.units * cost(p.method) - t)
            longest = max(longest, rest)
            work += rest
        work += sum(units * cost(m) for m, units in self.pending.items())
        work += fixed * sum(n for m, n in self.pending_packs.items() if m not in self.whole)
        return max(work / self.slots, longest)


def replay(trace: dict, model: EtaModel | None = None) -> list[tuple[float, float, float | None]]:
    """Feed a recorded trace to an ETA model: (time, fraction of units done, eta) after each event."""
    model = model or EtaModel(trace["pending"], trace["slots"], trace.get("reference"), trace.get("pending_packs"))
    total = sum(trace["pending"].values())
    done, out = 0.0, []
    for ev in trace["events"]:
        t, kind, key = ev["t"], ev["kind"], ev.get("key")
        if kind == "start":
            model.start(t, key, ev["method"], ev["units"])
        elif kind == "advance":
            model.advance(t, key, ev["units"])
            done += ev["units"]
        elif kind == "finish":
            done += ev.get("units", 0.0)
            model.finish(t, key)
        elif kind == "restart":
            done -= ev.get("units", 0.0)
            model.restart(t, key)
        elif kind == "answered":
            done += ev.get("units", 0.0)
        elif kind == "added":
            total += ev["units"]
            model.pending[ev["method"]] = model.pending.get(ev["method"], 0.0) + ev["units"]
        elif kind == "slots":
            model.resize(t, ev["slots"])
        out.append((t, done / total if total else 1.0, model.eta(t)))
    return out


class Progress:
    """A study's live progress: a bar when ``stream`` is a terminal (or ``bar``), plain lines
    otherwise; nothing at all without a ``stream`` (None, the default: the events are still
    counted and traced, and ``resize`` still logged).

    Use as a context manager (a ticker thread refreshes the bar and the ETA between reports).
    ``pending`` is the work not yet started per method, in config-epochs; ``slots`` how many
    packs run at once; ``reference`` the methods' reference costs (``_estimate.unit_costs``).
    """

    def __init__(self, label: str, packs: int | None, configs: int, *, epochs: int = 1, slots: int = 1,
                 pending: dict[str, float] | None = None, reference: dict[str, float] | None = None,
                 pending_packs: dict[str, int] | None = None, stream=None, bar: bool | None = None):
        self.label, self.total_packs = label, packs
        self.total_units = float(configs * max(1, epochs))
        self.epochs = max(1, epochs)
        self.packs = self.failures = self.retries = self.answered_configs = 0
        self.units = 0.0
        self.t0 = time.monotonic()
        self.stream = stream  # None: counted, not drawn
        self.model = EtaModel(pending if pending is not None else {"": self.total_units}, slots, reference,
                              pending_packs)
        self._pack_units: dict[str, tuple[float, float]] = {}   # key -> (units of the pack, credited so far)
        self.trace = {"slots": self.model.slots, "pending": dict(self.model.pending),
                      "pending_packs": dict(self.model.pending_packs), "reference": dict(self.model.reference),
                      "events": []}
        self._lock = threading.RLock()
        self._last_line = -1e9
        self._last_units = -1.0
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        use_bar = self.stream is not None and (bar if bar is not None else _is_terminal(self.stream))
        self._bar = _make_bar(self) if use_bar else None

    # -- events (from the Tune callback or the local executor) --------------------------------
    def start_pack(self, key: str, method: str, configs: int) -> None:
        with self._lock:
            t = self._now()
            units = float(configs * self.epochs)
            self.units -= self._pack_units.get(key, (0.0, 0.0))[1]  # a retried pack's units start again
            self._pack_units[key] = (units, 0.0)
            self.model.start(t, key, method, units)
            self._record(t, "start", key, method=method, units=units)
            self._show()

    def advance(self, key: str, units: float) -> None:
        """``units`` more config-epochs of pack ``key`` done."""
        with self._lock:
            total, credited = self._pack_units.get(key, (0.0, 0.0))
            units = max(0.0, min(units, total - credited))
            if units <= 0:
                return
            t = self._now()
            self._pack_units[key] = (total, credited + units)
            self.units += units
            self.model.advance(t, key, units)
            self._record(t, "advance", key, units=units)
            self._show()

    def finish_pack(self, key: str) -> None:
        """Pack ``key`` stored its rows: its remaining units are done."""
        self._close(key, "finish", packs=1)

    def fail_pack(self, key: str) -> None:
        """Pack ``key`` failed for good (stored as error rows): no work left in it."""
        self._close(key, "finish", failures=1)

    def retry_pack(self, key: str) -> None:
        """Pack ``key`` failed and starts again."""
        with self._lock:
            t = self._now()
            total, credited = self._pack_units.get(key, (0.0, 0.0))
            self._pack_units[key] = (total, 0.0)
            self.units -= credited
            self.retries += 1
            self.model.restart(t, key)
            self._record(t, "restart", key, units=credited)
            self._show(force=True)

    def resize(self, slots: int) -> None:
        """The executor runs ``slots`` packs at once from now on (a node of the cluster died or
        joined): the ETA spreads the work left over them."""
        with self._lock:
            slots = max(1, slots)
            if slots == self.model.slots:
                return
            t, before = self._now(), self.model.slots
            self.model.resize(t, slots)
            self._record(t, "slots", "", slots=slots)
            logger.info("fairdp %s: %s pack(s) at a time from now on (was %s): the cluster's resources changed",
                        self.label, slots, before)
            self._show(force=True)

    def answered(self, configs: int) -> None:
        """``configs`` configs answered without training (a search's repeats of stored configs):
        their units are done and leave the work still to come."""
        with self._lock:
            units = float(configs * self.epochs)
            t = self._now()
            self.units = min(self.total_units, self.units + units)
            for pool in list(self.model.pending):
                take = min(units, self.model.pending[pool])
                self.model.pending[pool] -= take
                units -= take
            self.answered_configs += configs
            self._record(t, "answered", "", units=float(configs * self.epochs))
            self._show(force=True)

    def add_work(self, method: str, configs: int = 1) -> None:
        """``configs`` more configs of ``method`` to train than the total said: a search trial
        told without a finite objective does not complete, and the sampler asks another in its
        place (without this, a search with such trials ran past 100%)."""
        with self._lock:
            units = float(configs * self.epochs)
            self.total_units += units
            self.model.pending[method] = self.model.pending.get(method, 0.0) + units
            self._record(self._now(), "added", "", method=method, units=units)

    def tick(self) -> None:
        with self._lock:
            self._show()

    # -- output ---------------------------------------------------------------------------------
    def line(self) -> str:
        t = self._now()
        pct = 100.0 * self.units / self.total_units if self.total_units else 100.0
        running = len(self.model.running)
        return (f"fairdp {self.label}: {pct:3.0f}% | {self.units:,.0f}/{self.total_units:,.0f} config-epochs | "
                f"{self.packs_text()}, {running} running | elapsed {duration(t)} | eta {self.eta_text(t)}")

    def packs_text(self) -> str:
        retried = f", {self.retries} retried" if self.retries else ""
        answered = f", {self.answered_configs} configs answered from stored rows" if self.answered_configs else ""
        total = f"/{self.total_packs}" if self.total_packs is not None else ""
        return f"packs {self.packs}{total} done, {self.failures} failed{retried}{answered}"

    def eta_text(self, t: float | None = None) -> str:
        eta = self.model.eta(self._now() if t is None else t)
        return "?" if eta is None else duration(eta)

    def __enter__(self):
        self._ticker = threading.Thread(target=self._tick_loop, name="fairdp-progress", daemon=True)
        self._ticker.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2 * TICK_S)
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
            elif self._last_units != self.units:
                self._print(self.line())
        path = os.environ.get(TRACE_ENV)
        if path:
            with open(path, "w") as f:
                json.dump(self.trace, f)
        return False

    def __getstate__(self):  # Tune pickles its callbacks with the experiment state
        skip = {"stream", "_lock", "_stop", "_ticker", "_bar"}
        return {k: v for k, v in self.__dict__.items() if k not in skip}

    def __setstate__(self, state):
        self.__dict__.update(state, stream=None, _lock=threading.RLock(), _stop=threading.Event(),
                             _ticker=None, _bar=None)

    def _now(self) -> float:
        return time.monotonic() - self.t0

    def _record(self, t: float, kind: str, key: str, **fields) -> None:
        self.trace["events"].append({"t": round(t, 3), "kind": kind, "key": key, **fields})

    def _close(self, key: str, kind: str, packs: int = 0, failures: int = 0) -> None:
        with self._lock:
            t = self._now()
            total, credited = self._pack_units.pop(key, (0.0, 0.0))
            rest = max(0.0, total - credited)
            self.units += rest
            self.packs += packs
            self.failures += failures
            self.model.finish(t, key)
            self._record(t, kind, key, units=rest)
            self._show(force=True)

    def _tick_loop(self) -> None:
        while not self._stop.wait(TICK_S):
            self.tick()

    def _show(self, force: bool = False) -> None:
        t = self._now()
        if self._bar is not None:
            self._bar.n = self.units
            self._bar.set_postfix_str(f"{self.packs_text()} | eta {self.eta_text(t)}", refresh=False)
            self._bar.refresh()
            return
        since = t - self._last_line
        if force or (self.units != self._last_units and since >= PLAIN_EVERY_S) or since >= PLAIN_HEARTBEAT_S:
            self._print(self.line())

    def _print(self, text: str) -> None:
        self._last_line, self._last_units = self._now(), self.units
        if self.stream is not None:
            self.stream.write(text + "\n")
            self.stream.flush()


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _make_bar(progress: Progress):
    from tqdm import tqdm

    return tqdm(total=progress.total_units, desc=f"fairdp {progress.label}", unit=" config-epochs",
                file=progress.stream, dynamic_ncols=True, leave=True, mininterval=0,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:,.0f}/{total:,.0f}{unit} [{elapsed}] {postfix}")


def duration(seconds: float) -> str:
    """'4m05s' or '1h02m03s'."""
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"
