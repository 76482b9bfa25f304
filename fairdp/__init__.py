"""fairdp: hyperparameter studies of fair and differentially private learning.

The names a notebook needs are here, imported on first use so that ``import fairdp`` stays
fast (torch, pandas and Ray load only when a name that needs them is touched)::

    import fairdp
    spec = fairdp.load_spec("studies/demo.yaml")
    fairdp.run_study(spec, executor="local")
    rows = fairdp.read_results("results/demo")
    selected = fairdp.select_by_rt(rows, rt=1.0)

Subpackages hold the rest: ``fairdp.study`` (specs, runs, search, the store),
``fairdp.analysis`` (selection, aggregation, fronts, plots, reports), ``fairdp.methods``
(the registry), ``fairdp.engine`` (packed training; ``fairdp.engine.contract`` is what a
method implements), ``fairdp.privacy`` (mechanisms and accounting), ``fairdp.data``.
"""

from __future__ import annotations

import logging

from fairdp._lazy import lazy_names as _lazy_names

__version__ = "0.3.0"

# a library's logger: records go to the application's handlers, and without any configured
# nothing reaches stderr through Python's last-resort handler (the CLI installs its own)
logging.getLogger("fairdp").addHandler(logging.NullHandler())

# name -> the public module that defines it (docs/api/index.md, "Levels")
_EXPORTS = {
    # user API
    "load_spec": "fairdp.study",
    "run_study": "fairdp.study",
    "search_study": "fairdp.study",
    "read_results": "fairdp.study",
    "read_history": "fairdp.study",
    "select_by_rt": "fairdp.analysis",
    "aggregate_seeds": "fairdp.analysis",
    "pareto_front": "fairdp.analysis",
    "write_report": "fairdp.analysis",
    "load_dataset": "fairdp.data",
    # method-author API, here for a plugin's convenience
    "Method": "fairdp.methods",
    "register_method": "fairdp.methods",
}

__all__ = ["__version__", *_EXPORTS]


__getattr__, __dir__ = _lazy_names(__name__, _EXPORTS)
