"""The results vocabulary: every column a result row has, and the metric names that study
specs, the CLI and the analysis accept.

The store's Parquet schema, a spec's search objectives and fairness metric, the metrics a
pack is evaluated on, the analysis checks and the CLI's choices are all read from here.
Hyperparameter columns are not listed: they come from the methods' declared
hyperparameters (``hyperparameter_columns``), so a new method's hyperparameter reaches the
rows with no other edit. Plain data, no imports from the rest of the package.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

SPLITS = ("valid", "test")
FAIRNESS_METRICS = ("tpr_gap", "grms", "dp_gap", "eo_gap", "ap_gap")
"""Fairness gaps, percent: FEDERATE's TPR-gap and GRMS, Tran et al.'s DP, EO and AP violations."""

NOTION_METRICS = {"dp": "dp_gap", "eo": "eo_gap", "ap": "ap_gap"}
"""Tran et al.'s fairness notions (a method's ``fairness_notion``) and the violation of each."""
NOTION_GAP = "notion_gap"
"""A selection metric, not a column: each row's violation of its own fairness notion."""
SELECTION_FAIRNESS = (*FAIRNESS_METRICS, NOTION_GAP)
"""What a study's or the analysis' selection may minimise."""

ACCURACY_COLUMNS = tuple(f"{split}_accuracy" for split in SPLITS)
FAIRNESS_COLUMNS = tuple(f"{split}_{m}" for m in FAIRNESS_METRICS for split in SPLITS)
PROBE_COLUMNS = ("leakage", "mdl")
PRIVACY_COLUMNS = ("eps_formal", "delta")
# kbits of sending the test split's attribute with a uniform code: what MDL is compared with
# (an online code can exceed it: probes trained on the first small blocks are overconfident)
MDL_UNIFORM = "mdl_uniform"
METRIC_COLUMNS = (*ACCURACY_COLUMNS, *FAIRNESS_COLUMNS, *PROBE_COLUMNS, MDL_UNIFORM, *PRIVACY_COLUMNS)

# Columns a search may optimise: every method reports these (leakage / mdl when evaluated).
OBJECTIVES = (
    *ACCURACY_COLUMNS,
    *(f"{split}_{m}" for split in SPLITS for m in FAIRNESS_METRICS),
    *PROBE_COLUMNS,
    "eps_formal",
)

# (name, type); types are pyarrow's names: "string", "int64", "float64", "timestamp[ms, UTC]".
# architecture and probe are JSON objects (the effective Architecture, ProbeSettings.protocol());
# optimizer, lr, batch_size and architecture are null for a method without gradient training or
# network (lr and batch_size are each row's own where its method's grid sweeps them);
# precision is what a neural pack computed in (float32, tf32, bf16 or float64), null otherwise;
# accountant is dp-accounting's accountant that composes the row's privacy_event (rdp or pld,
# ``train.accountant``; DP-SGD's and PF-LD's noise is calibrated and their eps_formal reported by
# it), null for a method without an accountant's guarantee, and absent from result sets written
# before it existed (all rdp's);
# sampler is how DP-SGD and PF-LD drew each step's Poisson sample (gaps or coins,
# ``train.sampler``), null for other methods, and absent from result sets written before it
# existed (all coins');
# packing how its network packed the configs (hand-packed, functional or mixed; null without
# fairdp's packed layers, and absent from result sets written before it existed);
# device is what decides a row's float results beyond fairdp's code (JSON, engine.device_record:
# CPU model and kernel features, threads, GPU, torch/BLAS/oneDNN builds), absent from result sets
# written before it existed;
# protocol is every other study setting that changes what a row means (JSON: the dataset, its
# options and a fingerprint of its data, the training settings, which probes ran), compared
# when a run resumes into stored rows.
IDENTITY_COLUMNS = (("study", "string"), ("dataset", "string"), ("method", "string"), ("seed", "int64"),
                    ("config_id", "string"))
# Per (group, y, y_pred) counts of a split, JSON (G, C, C) nested lists: every accuracy and
# fairness metric, and every per-group rate (size, selection rate, TPR, FPR, accuracy), is a
# function of them, so a row can be bootstrapped and broken down by group without its
# predictions. valid_confusion is absent from result sets written before it existed (null
# when read with newer ones); test_confusion is too, in sets older still.
TEST_CONFUSION = "test_confusion"
VALID_CONFUSION = "valid_confusion"
CONFUSION_COLUMNS = {"valid": VALID_CONFUSION, "test": TEST_CONFUSION}
"""Each split's counts column."""
COUNT_COLUMNS = ((TEST_CONFUSION, "string"), (VALID_CONFUSION, "string"))
# The kind of the row's guarantee (its method's ``Method.guarantee_kind``): scope, neighbouring
# relation and the unit protected, e.g. "central, add/remove one record", "central, replace one
# record's attribute", "local, replace one record's representation"; null for a method without
# privacy. eps of different kinds are not comparable. Absent from result sets written before
# it existed: the analysis takes the method's kind for them (``analysis._rows.row_guarantees``).
GUARANTEE = "guarantee"
# The config's dp-accounting DpEvent and neighbouring relation, JSON (null for a method without
# an accountant's guarantee), and the study's random trial count (null: every grid config was
# trained): what ``eps_released``, the guarantee of releasing a selection, is composed from.
PRIVACY_EVENT = "privacy_event"
TUNING = "tuning"
RELEASE_COLUMNS = ((GUARANTEE, "string"), (PRIVACY_EVENT, "string"), (TUNING, "string"))

# pruned_at: the rung epoch after which a study's ``prune:`` stopped the config (its metrics
# are its best epoch up to there); null for a config trained every epoch, and absent from
# result sets written before pruning existed.
PROVENANCE_COLUMNS = (
    ("best_epoch", "int64"), ("pruned_at", "int64"), ("epochs", "int64"), ("optimizer", "string"),
    ("lr", "float64"), ("batch_size", "int64"), ("precision", "string"), ("accountant", "string"),
    ("sampler", "string"), ("architecture", "string"), ("packing", "string"), ("probe", "string"), ("protocol", "string"), ("duration_s", "float64"),
    ("pack_id", "string"),
    ("pack_size", "int64"), ("pack_duration_s", "float64"), ("status", "string"), ("error", "string"),
    ("fairdp_version", "string"), ("node", "string"), ("device", "string"), ("finished_at", "timestamp[ms, UTC]"),
)
FIXED_COLUMNS = (
    *(name for name, _ in IDENTITY_COLUMNS), *METRIC_COLUMNS, *(name for name, _ in COUNT_COLUMNS),
    *(name for name, _ in RELEASE_COLUMNS), *(name for name, _ in PROVENANCE_COLUMNS),
)
"""Every column that is not a hyperparameter; a hyperparameter may not take one of these names."""

# The protocol's key of ``evaluate.min_group_count`` (the fewest rows a group's rate is
# estimated from), and its value in protocols written before it existed, whose gaps left out
# only the groups with no row in a rate's conditioning set.
MIN_GROUP_COUNT_KEY = ("train", "min_group_count")
LEGACY_MIN_GROUP_COUNT = 1

RUN_KEYS = ("dataset", "method", "seed")
"""A run: the unit in which the papers select one config before averaging over seeds."""
ROW_KEY = ("method", "seed", "config_id")
"""What identifies a row within a study's results."""

STATUS_OK = "ok"


class Hyperparameter(NamedTuple):
    """A hyperparameter's column: what ``hyperparameter_columns`` reads of a ``HyperParam``."""

    name: str
    column_type: str


BUILTIN_HYPERPARAMETERS = {
    "bound": "float64", "clip_dual": "float64", "clip_primal": "float64", "eps": "float64",
    "fairness_notion": "string", "iterations": "float64", "lam": "float64", "lam_ort": "float64",
    "private_group": "float64",
    "count_noise_ratio": "float64", "strict_clip": "float64", "strict_clip_lr": "float64",
    "strict_clip_tolerance": "float64",
    "lr_w": "float64",
}
"""The column type of every hyperparameter of fairdp's own methods: what reading stored rows
needs to know of them without loading the methods (torch). A test holds it equal to the
registry's."""


def hyperparameter_columns(hyperparams: Iterable) -> list[tuple[str, str]]:
    """(name, type) of each distinct hyperparameter, sorted by name; ``hyperparams`` are
    objects with ``name`` and ``column_type`` (``fairdp.methods.HyperParam``). Two
    hyperparameters of one name must have one column type."""
    types: dict[str, str] = {}
    for h in hyperparams:
        if h.name in FIXED_COLUMNS:
            raise ValueError(f"hyperparameter {h.name!r}: the name of a result column")
        if types.setdefault(h.name, h.column_type) != h.column_type:
            raise ValueError(f"hyperparameter {h.name!r}: declared as {types[h.name]} and as {h.column_type}")
    return sorted(types.items())


def result_columns(hyperparams: Iterable) -> list[tuple[str, str]]:
    """(name, type) of every column of a result row, in order: identity, hyperparameters,
    metrics (float64), the test and valid splits' confusion counts, the guarantee's kind, the privacy
    event and trial count, provenance."""
    return [*IDENTITY_COLUMNS, *hyperparameter_columns(hyperparams),
            *((m, "float64") for m in METRIC_COLUMNS), *COUNT_COLUMNS, *RELEASE_COLUMNS, *PROVENANCE_COLUMNS]
