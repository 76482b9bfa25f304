"""The in-process executor: a study's packs run one after another in this process, without Ray.

For a single machine without Ray (a GPU box that cannot install it) or a debugging run. The
packs, the store, resume and error rows are those of the Ray Tune driver (``_tune``); only
who runs the packs differs. A pack is retried ``resources.max_failures`` times, as Tune
would; a Ctrl-C stops after the pack in flight, leaving the rest to the next run.
"""

from __future__ import annotations

import time

from fairdp.errors import last_line
from fairdp.study._plan import Pack
from fairdp.study._progress import Progress
from fairdp.study._spec import StudySpec
from fairdp.study._trial import StudyContext, error_rows, run_pack, store_pack

EXECUTORS = ("ray", "local")
EPOCH_LINE_EVERY_S = 10.0  # a pack can train for many minutes: say where it is, not too often


def _epoch_lines(progress: Progress, index: int, total: int):
    """A training callback printing the pack in flight's epoch, at most every few seconds."""
    last = [time.monotonic()]

    def report(epoch) -> None:
        now = time.monotonic()
        if now - last[0] >= EPOCH_LINE_EVERY_S or epoch.epoch == epoch.epochs:
            last[0] = now
            print(f"fairdp {progress.label}: pack {index + 1}/{total} ({epoch.configs} configs) epoch "
                  f"{epoch.epoch}/{epoch.epochs}", file=progress.stream, flush=True)

    return report


def run_packs_locally(ctx: StudyContext, packs: list[Pack], spec: StudySpec, progress: Progress) -> tuple[int, int]:
    """Run ``packs`` in this process: (failed, unfinished) pack counts, as ``_tune.run_packs``."""
    failed = 0
    for done, pack in enumerate(packs):
        try:
            for attempt in range(spec.resources.max_failures + 1):
                try:
                    rows = run_pack(ctx, pack, _epoch_lines(progress, done, len(packs)))
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # noqa: BLE001 - a failing pack becomes error rows, as under Tune
                    if attempt < spec.resources.max_failures:
                        progress.update(retries=1)
                        continue
                    message = last_line(str(exc), type(exc).__name__)
                    store_pack(ctx, pack, error_rows(ctx, pack, f"{type(exc).__name__}: {message}"))
                    failed += 1
                    progress.update(failures=1)
                else:
                    progress.update(packs=1, configs=len(rows))
                break
        except KeyboardInterrupt:
            return failed, len(packs) - done
    return failed, 0
