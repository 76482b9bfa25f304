"""Weights & Biases: one W&B run per stored config, offline by default (``wandb sync`` uploads
them later), through W&B's own client.

A run is named ``<method>/seed<seed>/<config_id>``, grouped by ``<method>/seed<seed>``; its
config holds the hyperparameters, how it trained and its identity (``fairdp_*`` keys), its
history the per-epoch valid curves (``history/valid_<curve>``, the epoch as step) and its
summary the row's metrics. W&B has no query for offline runs, so what is logged is kept in a
ledger beside them, ``<dir>/wandb/fairdp-logged.jsonl``: one line per config, written after
its run finished.
"""

from __future__ import annotations

import json
import netrc
import os
import threading
from pathlib import Path
from urllib.parse import urlsplit

from fairdp.errors import InputError
from fairdp.tracking._base import ConfigRecord, Key, Tracker, finite, register_tracker

MODES = ("offline", "online")
LEDGER = "fairdp-logged.jsonl"


def has_wandb_login() -> bool:
    """Whether W&B's client would find credentials, where it looks for them: the WANDB_API_KEY
    or WANDB_IDENTITY_TOKEN_FILE variables, else the netrc file ($NETRC, else ~/.netrc) entry of
    its host (WANDB_BASE_URL, default api.wandb.ai). Checked before anything runs: without one,
    an online run fails at the first config it logs."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlsplit(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").netloc
    path = Path(os.environ.get("NETRC") or "~/.netrc").expanduser()
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


@register_tracker
class WandbTracker(Tracker):
    name = "wandb"
    options = ("project", "mode", "dir", "entity")
    choices = {"mode": MODES}

    def open(self) -> None:
        try:
            import wandb
        except ImportError:
            raise InputError("tracking.wandb: the W&B client is not installed; pip install 'fairdp[wandb]'") from None
        self.wandb = wandb
        self.mode = self.options_given.get("mode", "offline")
        if self.mode == "online" and not has_wandb_login():
            raise InputError("tracking.wandb.mode: online needs a W&B login, and none was found (no WANDB_API_KEY, "
                             "no WANDB_IDENTITY_TOKEN_FILE, no entry for the W&B host in ~/.netrc): run `wandb login`, "
                             "or use mode offline and `wandb sync` later")
        self.dir = Path(self.options_given.get("dir", ".")).resolve()
        self.project = self.options_given.get("project") or self.study
        try:
            (self.dir / "wandb").mkdir(parents=True, exist_ok=True)
            probe = self.dir / "wandb" / f".fairdp-probe-{os.getpid()}"
            probe.write_text("")
            probe.unlink()
        except OSError as e:
            raise InputError(f"tracking.wandb.dir: cannot write W&B runs under {self.dir} ({e.strerror or e})") \
                from None
        self.ledger = self.dir / "wandb" / LEDGER
        self.lock = threading.Lock()

    def where(self) -> str:
        return f"W&B ({self.mode}) under {self.dir / 'wandb'}"

    def logged(self) -> set[Key]:
        if not self.ledger.exists():
            return set()
        found = set()
        for line in self.ledger.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by a kill: its run is logged again
                continue
            if entry.get("results") == self.results and entry.get("project") == self.project:
                found.add((entry["method"], int(entry["seed"]), entry["config_id"]))
        return found

    def log(self, record: ConfigRecord) -> None:
        identity = {"fairdp_study": record.study, "fairdp_results": self.results, "fairdp_dataset": record.dataset,
                    "fairdp_method": record.method, "fairdp_seed": record.seed, "fairdp_config_id": record.config_id}
        config = {**{k: (v.item() if hasattr(v, "item") else v) for k, v in record.params.items()}, **identity}
        run = self.wandb.init(mode=self.mode, dir=str(self.dir), project=self.project,
                              entity=self.options_given.get("entity"),
                              name=f"{record.method}/seed{record.seed}/{record.config_id}",
                              group=f"{record.method}/seed{record.seed}", job_type=record.method, config=config,
                              reinit="create_new",
                              settings=self.wandb.Settings(silent=True, console="off", x_disable_stats=True))
        try:
            curves = [c for c in record.curves.columns if c.startswith("valid_")]
            for _, point in record.curves.iterrows():
                values = {f"history/{c}": finite(point[c]) for c in curves}
                run.log({k: v for k, v in values.items() if v is not None}, step=int(point["epoch"]))
            summary = {k: finite(v) for k, v in record.metrics.items()}
            run.summary.update({k: v for k, v in summary.items() if v is not None})
            if "eps_formal" in record.metrics and summary.get("eps_formal") is None:
                run.summary["eps_formal"] = str(record.metrics["eps_formal"])  # inf: JSON has no number for it
            if record.error:
                run.summary["error"] = record.error
        finally:
            run.finish(exit_code=0 if record.status == "ok" else 1)
        with self.lock, self.ledger.open("a") as ledger:
            ledger.write(json.dumps({"results": self.results, "project": self.project, "method": record.method,
                                     "seed": record.seed, "config_id": record.config_id, "run_id": run.id}) + "\n")
