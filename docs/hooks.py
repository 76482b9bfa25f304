"""MkDocs hooks: tables generated from fairdp's own code at build time, so they cannot drift.

A page asks for a table with an HTML comment on a line of its own:

- ``<!-- fairdp:results-schema -->``: every fixed column of a result row, from
  ``fairdp.schema`` (name, type, what it holds), in the store's column order;
- ``<!-- fairdp:hyperparameter-columns -->``: the hyperparameter columns fairdp's own methods
  declare (``fairdp.schema.hyperparameter_columns`` over the registry);
- ``<!-- fairdp:methods -->``: each registered method's grid keys, privacy scope, optimiser;
- ``<!-- fairdp:readme-two-commands -->``: README.md's "Two commands" section, so that the
  set-up and suite figures (minutes, test counts, the GPU the CUDA set passed on) have one
  source and the home page cannot disagree with the README.

A schema column without a description here is a warning, which ``strict: true`` turns into a
failed build: a new column must be described before the docs build again.
"""

from __future__ import annotations

import logging
import re

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
    "architecture": "JSON: the effective architecture (encoder, classifier, adversary sizes, dropout); null "
                    "for a method without a network",
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


TABLES = {
    "readme-two-commands": readme_two_commands,
    "results-schema": results_schema_table,
    "hyperparameter-columns": hyperparameter_columns_table,
    "methods": methods_table,
}


def on_page_markdown(markdown, page, config, files):
    def fill(match: re.Match) -> str:
        name = match.group(1)
        if name not in TABLES:
            log.warning("%s: unknown fairdp table marker %r; known: %s", page.file.src_path, name, ", ".join(TABLES))
            return match.group(0)
        return TABLES[name]()

    return MARKER.sub(fill, markdown)

