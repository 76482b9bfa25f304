"""The executor author's surface: what a new executor implements and what it may use.

An executor decides where and when a study's packs run; fairdp trains, evaluates and stores
each pack itself. A new one subclasses ``Executor``, implements its abstract members and
registers under its ``name`` with ``register_executor`` (docs/extending.md, "An executor"). Its
``run`` is handed the study's ``StudyContext``, the ``Pack`` list and a ``Progress`` to report
to; each pack is trained and stored by ``run_pack`` where it runs (``attempt_pack`` adds the
retries and the error rows of a pack that keeps failing, as the built-in executors do). Its
``capacity`` answers a ``Capacity`` once per command (the workers' CPUs asked only when
``reads_workers``); ``run_search``, handed it, asks a ``GenerationPlanner`` for each
``Generation`` and tells it the rows.

This is the executor-author API: it may change between minor versions, and such a change is
said in docs/api/executors.md and docs/extending.md.
"""

from fairdp.study._context import StudyContext
from fairdp.study.executors._executors import (
           EXECUTORS,
           Capacity,
           Executor,
           make_executor,
           register_executor,
)
from fairdp.study.executors._local import attempt_pack
from fairdp.study.executors._worker import run_pack
from fairdp.study.run._plan import Pack
from fairdp.study.run._progress import Progress
from fairdp.study.search._generations import Generation, GenerationPlanner
from fairdp.study.spec._precision import reads_workers

__all__ = ["EXECUTORS", "Capacity", "Executor", "Generation", "GenerationPlanner", "Pack", "Progress", "StudyContext",
           "attempt_pack", "make_executor", "reads_workers", "register_executor", "run_pack"]
