"""The driver's check before a run adds rows to stored ones: were they trained the same way?
(``prepare`` calls it under the results' lock; a search compares its settings with it too.)"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pandas as pd

from fairdp.errors import InputError
from fairdp.methods import get_method
from fairdp.metrics import ProbeSettings
from fairdp.schema import LEGACY_MIN_GROUP_COUNT, MIN_GROUP_COUNT_KEY
from fairdp.study._context import StudyContext, training_provenance
from fairdp.study.spec._spec import StudySpec

if TYPE_CHECKING:
    from fairdp.engine import TrainSettings

# protocol keys as a study file spells them
_SETTING_NAMES = {"dataset_options": "dataset", "leakage": "evaluate.leakage", "mdl": "evaluate.mdl",
                  "train.prune": "prune", "train.min_group_count": "evaluate.min_group_count"}


def _setting_name(key: str) -> str:
    for prefix, name in _SETTING_NAMES.items():
        if key == prefix or key.startswith(prefix + "."):
            return name + key[len(prefix):]
    return key


def protocol_difference(have: dict, want: dict, path: str = "") -> tuple[str, object, object] | None:
    """The first setting (dotted path) where two protocols differ, with both values."""
    for key in sorted(set(have) | set(want)):
        a, b, where = have.get(key), want.get(key), f"{path}.{key}" if path else key
        if isinstance(a, dict) and isinstance(b, dict):
            found = protocol_difference(a, b, where)
            if found:
                return found
        elif a != b:
            return where, a, b
    return None


def _without_keywords(architecture: str, keywords) -> str:
    """An architecture's JSON without the module keywords ``keywords`` (``encoder.width``)."""
    arch = json.loads(architecture)
    for role, ref in arch.get("models", []):
        ref["kwargs"] = [[k, v] for k, v in ref["kwargs"] if f"{role}.{k}" not in keywords]
    return json.dumps(arch)


def _refuse_changed_file(location: str, method: str, have: str, want: str) -> None:
    """InputError when two architectures differ only in a model file's digest: its code changed."""
    stored, asked = json.loads(have), json.loads(want)

    def without_digests(arch: dict) -> dict:
        return {**arch, "models": [[role, {**ref, "digest": None}] for role, ref in arch.get("models", [])]}

    if without_digests(stored) != without_digests(asked):
        return
    for (role, old), (_, new) in zip(stored["models"], asked["models"]):
        if old.get("digest") != new.get("digest"):
            raise InputError(f"{location}: holds {method} runs of {old['factory']} (the {role}) at digest "
                             f"{old.get('digest')}, and the file now has digest {new.get('digest')}: its code "
                             f"changed, and a table would mix two versions of the module; restore the file or "
                             f"pass another --results")


def check_same_training(ctx: StudyContext, stored, location: str, methods) -> None:
    """Refuse to resume a method whose stored rows were trained or probed otherwise: a table
    would mix two protocols. Rows from before these columns existed are not checked."""
    if not len(stored):
        return
    ok = stored[stored["status"] == "ok"]
    for name in methods:
        rows = ok[ok["method"] == name]
        ms = ctx.method_settings.get(name)
        swept = ms.swept if ms is not None else ()
        for key, want in training_provenance(ctx, name).items():
            if key not in rows.columns or key in swept:  # a swept setting is part of each config
                continue
            if key == "sampler":  # followed when left open, else compared: ``choose_sampler``
                continue
            have = rows[key].dropna()
            if key == "architecture" and want is not None and ms is not None and ms.swept_keywords:
                # each config trains the study's architecture with its own swept keywords
                keywords = ms.swept_keywords
                have = have.map(lambda a, keywords=keywords: _without_keywords(a, keywords))
                want = _without_keywords(want, keywords)
            if key == "probe" and want is not None:
                # as settings, so that keys recorded since (alpha, max_epochs, ...) read as their
                # defaults in older rows, which were probed with those defaults
                have = have.map(lambda p: json.dumps(ProbeSettings.from_protocol(p).protocol()))
            if key in ("lr", "batch_size") and want is not None:
                differs = have[(have.astype(float) - want).abs() > 1e-12 * want]
            else:
                differs = have[have != want]
            if len(differs):
                if key == "architecture":
                    _refuse_changed_file(location, name, differs.iloc[0], want)
                raise InputError(f"{location}: holds {name} runs with {key} {differs.iloc[0]}, this run asks for "
                                 f"{want} (methods.{name}); pass another --results")
    # bf16 rows and full-precision rows in one table would be two protocols; TF32 and
    # float32 are one request whose effective value depends on the worker's device. No
    # precision given follows the stored rows (``choose_precision``): nothing to refuse.
    if "precision" in ok.columns and ctx.train.precision is not None:
        have = ok.loc[ok["method"].isin(list(methods)), "precision"].dropna()
        clash = have[(have == "bf16") != (ctx.train.precision == "bf16")]
        if len(clash):
            raise InputError(f"{location}: holds runs computed in {clash.iloc[0]}, this run's train.precision is "
                             f"{ctx.train.precision}; pass another --results")
    # every other setting that changes what a row means
    if ctx.protocol and "protocol" in ok.columns:
        want = json.loads(ctx.protocol)
        for text in ok.loc[ok["method"].isin(list(methods)), "protocol"].dropna().unique():
            have = json.loads(text)
            section, key = MIN_GROUP_COUNT_KEY  # stored before it existed: its gaps were computed at the legacy value
            if isinstance(have.get(section), dict) and key not in have[section]:
                have[section] = {**have[section], key: LEGACY_MIN_GROUP_COUNT}
            # a named setting first: other options also give other data
            found = protocol_difference({k: v for k, v in have.items() if k != "data"},
                                        {k: v for k, v in want.items() if k != "data"})
            found = found or protocol_difference({"data": have.get("data", want.get("data"))},
                                                 {"data": want.get("data")})
            if found:
                key, have, asked = found
                if key == "data":
                    raise InputError(f"{location}: holds rows trained on other data than this run's {ctx.dataset} "
                                     f"(same options, other labels, groups, splits or features: its files or "
                                     f"loader changed); a table would mix two datasets: pass another --results")
                raise InputError(f"{location}: holds rows made with {_setting_name(key)} {json.dumps(have)}, this run "
                                 f"asks for {json.dumps(asked)}; a table would mix two protocols: pass another "
                                 f"--results")


def check_compatible(spec: StudySpec, stored: pd.DataFrame, location: str) -> None:
    """Refuse to resume into results made by a different study or training length."""
    if not len(stored):
        return
    ok = stored[stored["status"] == "ok"]
    studies = sorted(set(stored["study"].dropna()))
    if studies and studies != [spec.name]:
        raise InputError(f"{location}: holds results of study '{studies[0]}', not '{spec.name}'; "
                         f"pass another --results")
    datasets = sorted(set(stored["dataset"].dropna()))
    if datasets and datasets != [spec.dataset]:
        raise InputError(f"{location}: holds results on dataset '{datasets[0]}', not '{spec.dataset}'")
    # a release bound composes a run's rows under one trial-count distribution
    if "tuning" in ok.columns and len(ok):
        want = spec.tuning.to_dict() if spec.tuning is not None else None
        for record in {r if isinstance(r, str) else None for r in ok["tuning"]}:
            have = None if record is None else {k: v for k, v in json.loads(record).items() if k in ("count", "mean", "shape")}
            if have != want:
                raise InputError(f"{location}: holds runs with tuning {have or 'none (whole grids)'}, this run asks for "
                                 f"{want or 'none (whole grids)'}; pass another --results")
    epochs = sorted(set(ok["epochs"].dropna().astype(int)))
    if epochs and epochs != [spec.train.epochs]:
        raise InputError(f"{location}: holds runs of {epochs[0]} epochs, this run asks for "
                         f"{spec.train.epochs} (train.epochs / --epochs); pass another --results")


def stored_samplers(stored: pd.DataFrame) -> set[str]:
    """The Poisson samplers the stored rows of methods that draw one were drawn with: the rows'
    ``sampler``, "coins" where they predate the column (fairdp's only sampler then)."""
    if not len(stored):
        return set()
    sampling = [name for name in stored["method"].dropna().unique()
                if _method_or_none(name) is not None and _method_or_none(name).poisson_sampled]
    rows = stored[(stored["status"] == "ok") & stored["method"].isin(sampling)]
    if "sampler" not in rows.columns:
        return {"coins"} if len(rows) else set()
    return set(rows["sampler"].fillna("coins").unique())


def _method_or_none(name: str):
    try:
        return get_method(name)
    except InputError:  # a plugin's method not loaded here: it cannot be a built-in sampler's
        return None


def choose_sampler(train: TrainSettings, stored: pd.DataFrame, location: str) -> str:
    """The Poisson sampler a run draws with: ``train.sampler`` if set, else the stored rows'
    (a study resumes with the sampler its rows were drawn by), else gaps. InputError when the
    setting differs from the stored rows', naming both: one table would mix two samplers."""
    have = stored_samplers(stored)
    if train.sampler is not None and have - {train.sampler}:
        raise InputError(f"{location}: holds rows whose Poisson samples were drawn by {', '.join(sorted(have))}, "
                         f"this run's train.sampler is {train.sampler}; leave train.sampler out to resume with "
                         f"theirs, or pass another --results")
    if train.sampler is not None:
        return train.sampler
    if len(have) > 1:
        raise InputError(f"{location}: holds rows drawn by two Poisson samplers ({', '.join(sorted(have))}); "
                         f"set train.sampler to the one to go on with, or pass another --results")
    return have.pop() if have else train.poisson_sampler
