"""The in-process executor: a study's packs run one after another in this process, without Ray.

For a single machine without Ray (a GPU box that cannot install it) or a debugging run. The
packs, the store, resume and error rows are those of the Ray Tune driver (``_tune``); only
who runs the packs differs. A pack is retried ``resources.max_failures`` times, as Tune
would; a Ctrl-C stops after the pack in flight, leaving the rest to the next run.
"""

from __future__ import annotations

from fairdp.errors import StoreFault, last_line
from fairdp.study._context import StudyContext
from fairdp.study.executors._worker import run_pack
from fairdp.study.run._plan import Pack
from fairdp.study.run._progress import Progress
from fairdp.study.run._signals import sigterm_as_ctrl_c
from fairdp.study.search._generations import GenerationPlanner
from fairdp.study.spec._spec import StudySpec
from fairdp.study.store._rows import write_error_rows


def attempt_pack(ctx: StudyContext, pack: Pack, key: str, retries: int, progress: Progress) -> list[dict] | None:
    """Train ``pack`` (its progress under ``key``, already started), retried up to ``retries``
    times as Tune would: its rows, or None when every attempt failed, its error rows then stored
    in its place. A Ctrl-C or a store fault is not retried: it propagates."""
    attempt = 0
    while True:
        try:
            rows = run_pack(ctx, pack, lambda epoch: progress.advance(key, epoch.configs))
        except (KeyboardInterrupt, StoreFault):
            raise
        except Exception as exc:  # noqa: BLE001 - a failing pack becomes error rows, as under Tune
            if attempt < retries:
                attempt += 1
                progress.retry_pack(key)
                continue
            message = last_line(str(exc), type(exc).__name__)
            write_error_rows(ctx.store(), ctx, pack, f"{type(exc).__name__}: {message}")
            progress.fail_pack(key)
            return None
        progress.finish_pack(key)
        return rows


def run_packs_locally(ctx: StudyContext, packs: list[Pack], spec: StudySpec, progress: Progress) -> tuple[int, int]:
    """Run ``packs`` in this process: (failed, unfinished) pack counts, as ``_tune.run_packs``."""
    failed = 0
    for done, pack in enumerate(packs):
        key = str(done)
        try:  # a Ctrl-C between two packs leaves this one unfinished too
            progress.start_pack(key, pack.method, len(pack.configs))
            if attempt_pack(ctx, pack, key, spec.resources.max_failures, progress) is None:
                failed += 1
        except KeyboardInterrupt:
            return failed, len(packs) - done
    return failed, 0


def run_search_locally(ctx, spec: StudySpec, planner: GenerationPlanner, mode: str, progress: Progress) -> bool:
    """The search's generations trained in this process, one pack per generation; True if a
    Ctrl-C stopped it (the trials it left running are trained on resume)."""
    search = spec.search
    size = search.population if mode == "packed" else 1
    n = 0
    with progress, sigterm_as_ctrl_c():
        try:
            while True:
                gen = planner.next_generation(size)
                if gen.answered or gen.shared:
                    progress.answered(gen.answered + gen.shared)
                if not gen.groups:
                    return False
                key, n = f"generation-{n}", n + 1
                pack = Pack(search.method, search.seed, tuple(gen.configs), tuple(gen.config_ids))
                progress.start_pack(key, search.method, len(pack.configs))
                rows = attempt_pack(ctx, pack, key, spec.resources.max_failures, progress)
                for i, group in enumerate(gen.groups):
                    planner.tell_group(group, rows[i] if rows else None)
        except KeyboardInterrupt:
            return True
