"""MkDocs hooks: tables generated from fairdp's own code at build time, so they cannot drift.

A page asks for a table with an HTML comment on a line of its own:

- ``<!-- fairdp:results-schema -->``: every fixed column of a result row, from
  ``fairdp.schema`` (name, type, what it holds), in the store's column order;
- ``<!-- fairdp:hyperparameter-columns -->``: the hyperparameter columns fairdp's own methods
  declare (``fairdp.schema.hyperparameter_columns`` over the registry);
- ``<!-- fairdp:methods -->``: each registered method's grid keys, privacy scope, optimiser;
- ``<!-- fairdp:readme-two-commands -->``: README.md's "Two commands" section, so that the
  set-up and suite figures (minutes, test counts, the GPU the CUDA set passed on) have one
  source and the home page cannot disagree with the README;
- ``<!-- fairdp:executor-members -->``: every public member of ``fairdp.study.executors._executors.Executor``
  (methods, properties, class attributes) in source order, with its kind and the first
  paragraph of its docstring (an attribute's comment on its line);
- ``<!-- fairdp:layers -->``: the package's layers, read from tests/layers.py, the definition
  tests/test_layers.py enforces, each unit with what it holds (``LAYER_ROLES``), and the upward
  imports allowed with their reasons.

A schema column without a description here is a warning, which ``strict: true`` turns into a
failed build: a new column must be described before the docs build again. So is an executor
member without a docstring or comment, and a layer unit without a role in ``LAYER_ROLES``.
tests/test_docs_match_code.py renders the pages through ``on_page_markdown`` and compares the
tables with the code.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import io
import logging
import re
import textwrap
import tokenize
from pathlib import Path

log = logging.getLogger("mkdocs.hooks.fairdp")

MARKER = re.compile(r"^<!-- fairdp:([a-z-]+) -->$", re.MULTILINE)

# What each fixed column holds. Metric columns of the form <split>_<metric> are described
# from their parts (SPLIT_TEXT, METRIC_TEXT) unless listed here.
DESCRIPTIONS = {
    "study": "the study's `name` (names its results directory)",
    "dataset": "the dataset's registered name (`adult`, `compas`, ...)",
    "method": "the registered method's name",
    "seed": "the run's seed; every random stream (initialisation, privacy noise, samples) follows from it "
            "and the config id",
    "config_id": "the config's id, a hash of its hyperparameters (`<config_id>-<draw>` for a config a "
                 "`tuning:` count drew more than once); `(method, seed, config_id)` identifies a row",
    "leakage": "accuracy (percent) of a probe predicting the sensitive attribute from the representation: "
               "trained on the valid split's representations, scored on the test split's; null when "
               "`evaluate.leakage` is false",
    "mdl": "Voita & Titov's online code length (kbits) of the test split's sensitive attribute given its "
           "representation; null when `evaluate.mdl` is false",
    "mdl_uniform": "kbits of the uniform code of the same labels, what `mdl` is compared with (an online "
                   "code can exceed it)",
    "eps_formal": "the config's privacy guarantee, from the method's `privacy` hook (Laplace layer: eps; "
                  "DPNR: D * eps; accountant-based methods: the accountant's eps); inf for a non-private "
                  "method",
    "delta": "the delta of the guarantee (0 for pure eps-DP and non-private methods)",
    "test_confusion": "JSON: the test split's counts per (group, y, y_pred), (G, C, C) nested lists, of which "
                      "every accuracy and gap is a function; what the bootstrap intervals resample, the per-group "
                      "rates (size, selection rate, TPR, FPR, accuracy: `per_group_rates`) are computed from, and "
                      "what says whether the model is constant (`constant_models`)",
    "valid_confusion": "JSON: the valid split's counts per (group, y, y_pred), as `test_confusion`: the per-group "
                       "rates on the split selection reads (`per_group_rates(rows, \"valid\")`); null for rows "
                       "written before it existed",
    "guarantee": "the kind of the config's guarantee, from its method (`Method.guarantee_kind`): scope, "
                 "neighbouring relation and what it protects, e.g. `central, add/remove one record` (DP-SGD), "
                 "`central, replace one record's attribute` (PF-LD), `local, replace one record's "
                 "representation` (FEDERATE, DPNR, CAPE, noise), `local, replace one record's attribute` "
                 "(private reductions); null for a non-private method. eps of different kinds are not "
                 "comparable. Absent from result sets written before it existed: the analysis takes the "
                 "method's kind",
    "privacy_event": "JSON: the config's dp-accounting `DpEvent` and neighbouring relation; null for a "
                     "method without an accountant's guarantee",
    "tuning": "JSON: a tuned study's random trial count (distribution, trials drawn, grid size, the grid's "
              "events); null when every grid config was trained",
    "best_epoch": "1-based epoch of the kept model (best validation accuracy, or the last epoch for Tran "
                  "et al.'s Algorithm 1)",
    "pruned_at": "the rung epoch after which `prune:` stopped the config; null for a config trained every "
                 "epoch",
    "epochs": "`train.epochs` of the run",
    "optimizer": "`adam` or `sgd`; null for a method that does not train by gradient",
    "lr": "the learning rate the config trained at (its own where the grid sweeps `lr`); null without "
          "gradient training",
    "batch_size": "the minibatch size the config trained at (its own where the grid sweeps `batch_size`); "
                  "null without gradient training",
    "precision": "what a neural pack computed in: `float32`, `tf32`, `bf16` or `float64`; null otherwise",
    "accountant": "dp-accounting's accountant that composes the config's `privacy_event`, `rdp` or `pld` "
                  "(`train.accountant`; DP-SGD's and PF-LD's noise is calibrated, and their `eps_formal` "
                  "reported, by it); null for a method without an accountant's guarantee. Absent from result "
                  "sets written before it existed (all `rdp`)",
    "sampler": "how DP-SGD and PF-LD drew each step's Poisson sample of the training rows, `gaps` or `coins` "
               "(`train.sampler`; the same exact rate and law, other samples); null for other methods. Absent "
               "from result sets written before it existed (all `coins`)",
    "architecture": "JSON: the effective architecture (encoder, classifier, adversary sizes, dropout); null "
                    "for a method without a network",
    "packing": "how the pack's network packed its configs: `hand-packed` (fairdp's packed layers), "
               "`functional` (torch.func over K instances of a module: a user's module, or `train.packing: "
               "functional`) or `mixed`; null without a network of fairdp's packed layers, and for rows "
               "written before it existed",
    "probe": "JSON: the probe settings (`evaluate.probe`) when a probe ran; null otherwise",
    "protocol": "JSON: every other setting that changes what a row means (dataset options and a fingerprint "
                "of its data, training settings, which probes ran, pruning); compared on resume",
    "duration_s": "seconds of the pack's wall time per config (`pack_duration_s / pack_size`)",
    "pack_id": "the pack the config trained in",
    "pack_size": "configs in that pack",
    "pack_duration_s": "wall seconds of the whole pack, training before a kill included",
    "status": "`ok`, or `error` for a pack that failed after its retries (only `ok` rows count)",
    "error": "the failure's message on an error row; null otherwise",
    "fairdp_version": "fairdp's version that wrote the row",
    "node": "IP address (on Ray) or host name of the machine the pack ran on",
    "device": "JSON: what decides its float results beyond fairdp's code: CPU model, the instruction-set "
              "features torch's kernels dispatch on, threads per trial, GPU, and the torch, BLAS and oneDNN "
              "builds (absent from result sets written before it existed); rows that differ in it are not "
              "expected to be bit-identical",
    "finished_at": "when the pack's rows were made (UTC)",
}
SPLIT_TEXT = {"valid": "on the valid split (what selection reads)", "test": "on the test split"}
METRIC_TEXT = {
    "accuracy": "accuracy, percent",
    "tpr_gap": "TPR-gap, percent (FEDERATE: the largest pairwise gap over groups)",
    "grms": "GRMS, percent (FEDERATE eq. 5; equals `tpr_gap` for binary tasks)",
    "dp_gap": "demographic-parity violation, percent (Tran et al.: largest difference between groups)",
    "eo_gap": "equalized-odds violation, percent (Tran et al.)",
    "ap_gap": "accuracy-parity violation, percent (Tran et al.)",
}


def describe_column(name: str) -> str | None:
    if name in DESCRIPTIONS:
        return DESCRIPTIONS[name]
    split, _, metric = name.partition("_")
    if split in SPLIT_TEXT and metric in METRIC_TEXT:
        return f"{METRIC_TEXT[metric]}, {SPLIT_TEXT[split]}"
    return None


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def results_schema_table() -> str:
    from fairdp import schema

    groups = [
        ("identity", [c for c in schema.IDENTITY_COLUMNS]),
        ("metric", [(m, "float64") for m in schema.METRIC_COLUMNS]),
        ("counts", list(schema.COUNT_COLUMNS)),
        ("privacy", list(schema.RELEASE_COLUMNS)),
        ("provenance", list(schema.PROVENANCE_COLUMNS)),
    ]
    listed = [name for _, cols in groups for name, _ in cols]
    if listed != list(schema.FIXED_COLUMNS):
        log.warning("docs/hooks.py: the schema's column groups changed; FIXED_COLUMNS is %s, the hook lists %s",
                    schema.FIXED_COLUMNS, listed)
    lines = ["| column | type | group | what it holds |", "|---|---|---|---|"]
    for group, cols in groups:
        for name, kind in cols:
            text = describe_column(name)
            if text is None:
                log.warning("docs/hooks.py: result column %r has no description; add it to DESCRIPTIONS", name)
                text = ""
            lines.append(f"| `{name}` | `{kind}` | {group} | {_cell(text)} |")
    return "\n".join(lines)


def _range(h) -> str:
    if h.choices is not None:
        return "one of " + ", ".join(f"`{c}`" for c in h.choices)
    low = "" if h.low is None else f"{'>' if h.low_open else '>='} {h.low:g}"
    high = "" if h.high is None else f"<= {h.high:g}"
    kind = "integer" if h.integer else "number"
    return ", ".join(p for p in (kind, low, high) if p)


def hyperparameter_columns_table() -> str:
    from fairdp import schema
    from fairdp.methods import builtin_method_names, get_method

    methods = [get_method(n) for n in builtin_method_names()]
    users: dict[str, list[str]] = {}
    for m in methods:
        for h in m.hyperparams:
            users.setdefault(h.name, []).append(m.name)
    lines = ["| column | type | methods |", "|---|---|---|"]
    for name, kind in schema.hyperparameter_columns([h for m in methods for h in m.hyperparams]):
        lines.append(f"| `{name}` | `{kind}` | {', '.join(f'`{u}`' for u in users[name])} |")
    return "\n".join(lines)


def methods_table() -> str:
    from fairdp.methods import builtin_method_names, get_method

    scope = {"local": "local (eps-LDP of each released representation or attribute)",
             "central": "central ((eps, delta)-DP of the training data)", None: "none"}
    lines = ["| method | grid keys (hyperparameters) | privacy | neighbouring relation | guarantee (rows' `guarantee`) "
             "| optimiser, paper step |",
             "|---|---|---|---|---|---|"]
    for name in builtin_method_names():
        m = get_method(name)
        keys = "<br>".join(f"`{h.name}`: {_cell(_range(h))}; {_cell(h.doc)}" for h in m.hyperparams) or "none"
        relation = f"`{m.neighbour_relation}`" if m.privacy_scope else ""
        opt = f"{m.optimizer} {m.default_lr:g}" if m.optimizer else "no gradient training"
        kind = m.guarantee_kind or "none"
        lines.append(f"| `{name}` | {keys} | {scope[m.privacy_scope]} | {relation} | {kind} | {opt} |")
    return "\n".join(lines)


def readme_two_commands() -> str:
    """README.md's "Two commands" section, its links made relative to docs/."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    found = re.search(r"^## Two commands\n.*?(?=^## )", readme, flags=re.MULTILINE | re.DOTALL)
    if found is None:
        log.warning("README.md has no '## Two commands' section for docs/index.md")
        return ""
    return found.group(0).replace("](docs/", "](").rstrip() + "\n"


# -- the executor protocol --------------------------------------------------------------------

# What a public class attribute of ``Executor`` holds, for one whose line has no comment.
EXECUTOR_ATTRIBUTE_TEXT = {
    "name": "the name the executor is registered under (`register_executor`) and chosen by "
            "(`--executor NAME`, `run_study(..., executor=NAME)`)",
}


def _markdown_doc(text: str) -> str:
    """The first paragraph of a docstring as one Markdown line (RST ``x`` becomes `x`)."""
    first = inspect.cleandoc(text).split("\n\n")[0]
    return re.sub(r"``([^`]+)``", r"`\1`", " ".join(first.split()))


def _line_comments(source: str) -> dict[int, str]:
    """line number -> the text of the comment on it, in ``source``."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {t.start[0]: t.string.lstrip("#").strip() for t in tokens if t.type == tokenize.COMMENT}


def class_members(cls) -> list[tuple[str, str, str, str | None]]:
    """(name, how it is written, kind, description) of each public member defined in ``cls``'s
    body, in source order: methods (``abstract method`` or ``method``), properties and class
    attributes (annotated or assigned). The description is a method's or property's docstring's
    first paragraph, an attribute's comment on its line, or None."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments = _line_comments(source)
    (node,) = ast.parse(source).body
    abstract = getattr(cls, "__abstractmethods__", frozenset())
    members = []
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = item.name
            if name.startswith("_"):
                continue
            value = cls.__dict__[name]
            if isinstance(value, property):
                kind, written, doc = "property", name, value.__doc__
            else:
                empty = inspect.Parameter.empty
                params = list(inspect.signature(value).parameters.values())[1:]  # without self
                written = f"{name}({', '.join(str(p.replace(annotation=empty, default=empty)) for p in params)})"
                kind, doc = "method", value.__doc__
            if name in abstract:
                kind = f"abstract {kind}"
            members.append((name, written, kind, _markdown_doc(doc) if doc else None))
        elif isinstance(item, (ast.AnnAssign, ast.Assign)):
            targets = [item.target] if isinstance(item, ast.AnnAssign) else item.targets
            for target in targets:
                if isinstance(target, ast.Name) and not target.id.startswith("_"):
                    comment = comments.get(item.end_lineno)
                    text = comment or EXECUTOR_ATTRIBUTE_TEXT.get(target.id)
                    members.append((target.id, target.id, "class attribute", text))
    return members


def executor_members_table() -> str:
    from fairdp.study.executors._executors import Executor

    lines = ["| member | kind | what it does |", "|---|---|---|"]
    for name, written, kind, text in class_members(Executor):
        if not text:
            log.warning("docs/hooks.py: Executor.%s has no docstring (or comment on its line); give it one", name)
            text = ""
        lines.append(f"| `{written}` | {kind} | {_cell(text)} |")
    return "\n".join(lines)


# -- the package's layers ---------------------------------------------------------------------

LAYERS_FILE = Path(__file__).resolve().parents[1] / "tests" / "layers.py"

# What each unit of tests/layers.py holds (Markdown, links relative to docs/).
LAYER_ROLES = {
    "fairdp": "`import fairdp`: the names of the [API reference](api/index.md) (`run_study`, "
              "`read_results`, ...), re-exported lazily, each imported on first use",
    "__main__": "`python -m fairdp`: the `fairdp` command",
    "cli": "the `fairdp` command (`run`, `search`, `analyze`, `report`, `compare`, `data`, `methods`, `audit`, "
           "`audit-training`, `check-method`, `check-model`) on top of all of them; each command imports what it needs "
           "when it runs, so `--help` answers at once",
    "testing": "what a plugin author runs: the method contract (`fairdp check-method`), the model checks "
               "(`fairdp check-model`), the training audit over the methods, the figure layout checks",
    "study": "specs, the backlog and packs, the executors, the Parquet store, the Optuna search "
             "([Running studies](guide/studies.md))",
    "analysis": "pure functions over result rows (selection, aggregation, Pareto fronts, tables, figures) "
                "and the report writers ([Analysis and reports](guide/analysis.md))",
    "methods": "`Method`, `register_method`, the built-in methods and plugin loading ([Methods](methods.md))",
    "tracking": "loggers of stored rows to MLflow and W&B, which the study drives",
    "metrics": "leakage and MDL probes and the result columns of a trained pack "
               "([Metrics and probes](guide/metrics.md))",
    "engine": "packed models (hand-packed MLPs, any module through torch.func), the one training loop "
              "(`fit_pack`), per-sample clipping, checkpoints, chunk "
              "and memory rules; `fairdp.engine.contract` is what a neural method implements "
              "([API](api/contract.md))",
    "privacy": "the mechanisms (Laplace, min-max, word dropout), the RDP accounting, guarantees and the "
               "empirical audits: of a local mechanism from samples, and the one-run bound of a training "
               "audit",
    "data": "the dataset registry, the download-and-checksum cache, splits ([Datasets](guide/datasets.md))",
    "errors": "`InputError` (a bad input: one line, exit status 2) and `RunAborted`",
    "schema": "the results vocabulary: every column, metric and objective name",
    "fairness": "the fairness gaps as functions of confusion counts",
    "constraints": "search constraints (`valid_accuracy >= 80`): parsing, and a row's violations",
    "_atomic": "writes that never leave half a file: a hidden temporary, then a rename",
    "_malloc": "the C allocator's settings for the commands that analyse a whole results table",
    "_imports": "user code a study names (method plugins, model files), imported once per process",
    "_lazy": "a package's names imported on first use (PEP 562), so that importing it stays light",
    "_rng": "per-config random streams for packed training",
    "_philox": "Philox4x64-10, the counter-based generator behind those streams",
}


def load_layers():
    """tests/layers.py as a module (LAYERS, ALLOWED_UP), loaded by its path: tests/ is no package
    the docs build can import."""
    spec = importlib.util.spec_from_file_location("fairdp_docs_layers", LAYERS_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def unit_name(unit: str) -> str:
    return "fairdp" if unit == "fairdp" else f"fairdp.{unit}"


def layers_table() -> str:
    layers = load_layers()
    order = sorted(layers.LAYERS, key=lambda u: -layers.LAYERS[u])  # stable: the file's order within a rank
    lines = ["| layer | unit | what it holds |", "|---|---|---|"]
    for unit in order:
        role = LAYER_ROLES.get(unit)
        if role is None:
            log.warning("docs/hooks.py: layer unit %r (tests/layers.py) has no role; add it to LAYER_ROLES", unit)
            role = ""
        lines.append(f"| {layers.LAYERS[unit]} | `{unit_name(unit)}` | {_cell(role)} |")
    for unit in LAYER_ROLES.keys() - layers.LAYERS.keys():
        log.warning("docs/hooks.py: LAYER_ROLES describes %r, which tests/layers.py does not define", unit)
    if layers.ALLOWED_UP:
        lines += ["", "Imports allowed across a layer upwards, each for its reason:", ""]
        for (low, high), why in layers.ALLOWED_UP.items():
            lines.append(f"- `{unit_name(low)}` imports `{unit_name(high)}`: {why}")
    return "\n".join(lines)


TABLES = {
    "readme-two-commands": readme_two_commands,
    "results-schema": results_schema_table,
    "hyperparameter-columns": hyperparameter_columns_table,
    "methods": methods_table,
    "executor-members": executor_members_table,
    "layers": layers_table,
}


def on_page_markdown(markdown, page, config, files):
    def fill(match: re.Match) -> str:
        name = match.group(1)
        if name not in TABLES:
            log.warning("%s: unknown fairdp table marker %r; known: %s", page.file.src_path, name, ", ".join(TABLES))
            return match.group(0)
        return TABLES[name]()

    return MARKER.sub(fill, markdown)

