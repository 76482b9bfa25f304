"""Progress of a study on stderr: packs and configs done / total, failures, retries, elapsed, ETA."""

from __future__ import annotations

import sys
import time


class Progress:
    """Packs and configs done / total, failures, elapsed and ETA, as lines on stderr."""

    def __init__(self, label: str, packs: int, configs: int, stream=None):
        self.label, self.total_packs, self.total_configs = label, packs, configs
        self.packs = self.configs = self.failures = self.retries = 0
        self.t0 = time.monotonic()
        self.stream = stream or sys.stderr

    def update(self, packs: int = 0, configs: int = 0, failures: int = 0, retries: int = 0) -> None:
        self.packs += packs
        self.configs += configs
        self.failures += failures
        self.retries += retries
        print(self.line(), file=self.stream, flush=True)

    def __getstate__(self):  # Tune pickles its callbacks with the experiment state; streams don't pickle
        return {k: v for k, v in self.__dict__.items() if k != "stream"}

    def __setstate__(self, state):
        self.__dict__.update(state, stream=sys.stderr)

    def line(self) -> str:
        elapsed = time.monotonic() - self.t0
        done = self.configs
        eta = "?" if done == 0 else duration(elapsed / done * (self.total_configs - done))
        return (f"fairdp {self.label}: packs {self.packs}/{self.total_packs} | configs "
                f"{self.configs}/{self.total_configs} | failures {self.failures} | retries {self.retries} | "
                f"elapsed {duration(elapsed)} | eta {eta}")


def duration(seconds: float) -> str:
    """'4m05s' or '1h02m03s'."""
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"
