"""The package's layers: the one definition of who may import whom inside ``fairdp``.

tests/test_layers.py enforces it on the source, and docs/hooks.py draws the layer table of
docs/architecture.md from it (``<!-- fairdp:layers -->``), so the page and the rule cannot
disagree; tests/test_docs_match_code.py checks that the page shows exactly these layers.

A unit is a module or subpackage directly under ``fairdp`` (``fairdp.study``, ``fairdp.errors``),
or ``fairdp`` itself (its ``__init__``); a unit's own subpackages (``fairdp.study.store``) are part
of it, and share its private modules. Inside ``fairdp.study`` its parts have layers of their own
(``STUDY_LAYERS``). Plain data: no imports, so the docs build can load this file by its path.
"""

# unit -> rank: a unit imports only units of lower or equal rank
LAYERS = {
    "errors": 0, "schema": 0, "fairness": 0, "_atomic": 0, "_malloc": 0, "_imports": 0, "_lazy": 0, "_rng": 0, "_philox": 0, "constraints": 0,
    "data": 1,
    "privacy": 2,
    "engine": 3,
    "metrics": 4,
    "analysis": 5,
    "methods": 5,
    "tracking": 5,  # loggers of stored rows: over schema and errors; the study drives them
    "study": 6,
    "cli": 7, "testing": 7,  # testing: the method contract a plugin author runs, over the whole package
    "__main__": 8, "fairdp": 8,  # fairdp: the package's own __init__, lazy re-exports
}

# imports that cross a layer upwards: (importer, imported) -> the reason
ALLOWED_UP = {
    ("analysis", "methods"): "a method's privacy scope (local or central eps) is registry metadata; "
                             "imported lazily, as importing the methods loads torch",
}

# fairdp.study's parts -> rank: a subpackage, a module at its top, or "__init__" (the package's
# public names); a part imports only parts of lower or equal rank (tests/test_layers.py)
STUDY_LAYERS = {
    "spec": 0,  # the spec file read and checked, the precision rule
    "store": 1, "_context": 1,  # the results directory's files; a study's protocol and store (StudyContext)
    "run": 2, "executors": 2,  # a run prepared and planned, and where its packs run: each calls the other
    "ray": 3, "search": 3,  # Ray and Tune's driver and trainables; the Optuna search
    "__init__": 4, "_shared": 4,  # the public surface; what the study shares with the CLI
}

# imports inside fairdp.study that cross its layers upwards, as (importer, imported) named under
# fairdp.study -> the reason
STUDY_ALLOWED_UP = {
    ("store._rows", "run._plan"): "a pack's rows are built from its Pack and its tuning draws",
    ("store._selection", "run._prepare"): "a type annotation only (Prepared), under TYPE_CHECKING",
    ("executors", "search._generations"): "Generation and GenerationPlanner are part of the executor author's API",
    ("executors._executors", "search._generations"): "an executor's run_search is handed a GenerationPlanner",
    ("executors._local", "search._generations"): "the local executor runs a search's generations",
    ("executors._executors", "ray._ray"): "the registry's Ray executor connects to Ray or starts it",
    ("executors._executors", "ray._tune"): "the registry's Ray executor runs the packs through Tune",
    ("executors._executors", "ray._ray_search"): "the registry's Ray executor runs a search through Tune "
                                                 "(imported lazily: Tune's search modules load only for a search)",
}

# The modules whose ``__all__`` is a public surface (docs/api/index.md, "Levels"): the
# subpackages (user and method-author names), the method author's step contract and the
# executor author's module. Each ``__all__`` name is documented on a docs/api page.
PUBLIC_SURFACES = (
    "fairdp", "fairdp.data", "fairdp.privacy", "fairdp.engine", "fairdp.engine.contract", "fairdp.metrics",
    "fairdp.analysis", "fairdp.methods", "fairdp.tracking", "fairdp.study", "fairdp.study.executors",
)

# The private modules a test may import, each for one reason: an internal rule or constant
# pinned by value, or an internal replaced to inject a fault or spy on it. Anything else a
# test imports comes from a public surface, or a unit's ``_shared`` module (what it shares within fairdp).
TEST_PRIVATE_IMPORTS = {
    "fairdp.analysis._pareto": "every run's front and hypervolume in one pass, held to the per-run functions; the blocked front held to the pairwise definition",
    "fairdp.analysis._select": "every RT of a sweep picked from one ordering, held to each RT's own selection",
    "fairdp.analysis._groups": "one row's rates from its counts: the definition the whole-table computation is held to",
    "fairdp.analysis._private": "the methods a private pick covers, held to the registry, and a run's coverage rule",
    "fairdp.privacy._selection": "the exact discrete Gaussian sampler and the count release's cells and calibration, each held to its definition",
    "fairdp.study.store._compact": "compaction's steps interrupted one by one (fault injection), and its store-level call",
    "fairdp.methods._describe": "a hyperparameter's range in words, checked against its validation",
    "fairdp._imports": "the record of imported plugins and model files, reset per test",
    "fairdp._atomic": "atomic writes and the unwritable-path check, called directly",
    "fairdp._philox": "the Philox generator, pinned against its reference values",
    "fairdp._rng": "the streams' internals: seeded per-config generators, CUDA graphs, tail mass",
    "fairdp.analysis._dashboard": "the dashboard's data, server and page, driven directly (fairdp dashboard's)",
    "fairdp.analysis._intervals": "the t half-width and the 'not distinguishable' rule, pinned",
    "fairdp.analysis._papers": "the published tables and the checks of their claims",
    "fairdp.analysis._plots": "a figure's series-per-panel limit",
    "fairdp.analysis._predictions": "the constant-model rule: its threshold, per-seed rates and selections",
    "fairdp.analysis._release": "the release summary's rows and labels; the scopes and their stats in arrays, held to the per-selection definition",
    "fairdp.analysis._report": "a report's pruning sentence; its Pareto figure's inputs spied on; the picks it lists past its limit",
    "fairdp.analysis._rows": "the guarantee labels and hyperparameter columns read from rows; row guarantees and config keys per distinct value, held to the row-by-row definitions",
    "fairdp.analysis._search_progress": "hypervolume bounds and histories, pinned",
    "fairdp.analysis._style": "each method's figure style",
    "fairdp.analysis._tables": "table cells' number format and marks",
    "fairdp.data._cache": "the cache's file digest",
    "fairdp.data._dataset": "the intersection of sensitive attributes and its option check, held to encode by property",
    "fairdp.data._census": "the KDD loader's pinned files and columns, replaced by small files of the test's own",
    "fairdp.data._fetch": "downloads replaced by local files",
    "fairdp.data._synthetic": "the synthetic data generator, called directly",
    "fairdp.data._tabular": "the tabular loaders' pinned files and columns",
    "fairdp.data._text": "the text loaders, their downloads replaced",
    "fairdp.engine._checkpoint": "checkpoint timing replaced; the local data fingerprint",
    "fairdp.engine._functional": "the functional pack's parts (instances, dropout, refusals) built directly",
    "fairdp.engine._models": "the model registry, reset per test",
    "fairdp.engine._loop": "the pruning rule replaced at a rung",
    "fairdp.engine._memory": "the memory model's constants and chunk rules, pinned",
    "fairdp.engine._packed": "the hand-packed MLP that the functional path is compared with",
    "fairdp.engine._per_sample": "the hand-packed chain's clipping step spied on (train.clipping reaches it)",
    "fairdp.engine._prune": "the pruning rule (dominators, configs to stop), pinned",
    "fairdp.engine._settings": "bf16 autocast and the precision names",
    "fairdp.methods._lagrangian": "the Lagrangian steps' internals (constraint masks, h)",
    "fairdp.methods._nullspace": "INLP's projections, pinned",
    "fairdp.methods._registry": "the method registry, reset per test",
    "fairdp.metrics._probes": "MDL's blocks and code lengths; the probes' training spied on",
    "fairdp.privacy._accounting": "PF-LD's published constants; the PLD discretisation interval",
    "fairdp.privacy._discrete": "the discrete Laplace tables, pinned",
    "fairdp.privacy._grid_kernel": "the compiled release's build, cache and fallback; its scalar path beside its vector one",
    "fairdp.privacy._rdp_guide": "the noise search's guide curve against dp-accounting, order by order",
    "fairdp.privacy._mechanisms": "FEDERATE's code's L2 variant to audit; the host and device release paths",
    "fairdp.privacy._release": "the RDP orders and the negative binomial's gamma; its sampler switch",
    "fairdp.study._context": "a study's protocol and store, built directly",
    "fairdp.study.executors._executors": "a fake cluster executor; the workers' bf16 check replaced",
    "fairdp.study.executors._worker": "the folder of the packs' prediction files, checked gone after a run",
    "fairdp.study.ray._ray": "Ray connection errors, loggers and the loopback setting",
    "fairdp.study.ray._ray_reaper": "the orphan reaper's polling interval",
    "fairdp.study.ray._ray_trainables": "the Tune trial's internals, run in this process",
    "fairdp.study.ray._tune": "the Tune driver's internals: slots, node checks, stale dirs, logging",
    "fairdp.study.run._estimate": "the cost model and reference costs, pinned",
    "fairdp.study.run._plan": "the backlog and the plan: configs to run, tuning draws, pack sizes",
    "fairdp.study.run._prepare": "the settings lines and the slow-step message",
    "fairdp.study.run._progress": "the ETA model and its trace",
    "fairdp.study.run._resume_checks": "the resume check on stored rows, without a study run",
    "fairdp.study.run._runner": "the run's progress replaced (a Ctrl-C, a recorder); the estimate line",
    "fairdp.study.search._generations": "the sampler's state replaced; the ask record's attribute",
    "fairdp.study.search._optuna": "the Optuna journal opened directly",
    "fairdp.study.spec._precision": "the default precision's rule, pinned",
    "fairdp.study.spec._spec": "the spec's limits, its YAML reader and sampler names",
    "fairdp.study.store._lease": "the object-store lease's internals",
    "fairdp.study.store._lock": "the results lock and its file names",
    "fairdp.study.store._rows": "a failed pack's error rows, written directly",
    "fairdp.study.store._selection": "the stored selection's table and its change rule; writing one",
    "fairdp.study.store._store": "the pack file names and key types; the store's reads replaced",
    "fairdp.tracking._base": "a fake tracker registered (trackers have no public API yet)",
    "fairdp.tracking._wandb": "the W&B login check",
}
