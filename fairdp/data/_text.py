"""Raw text encoded once with a local sentence-transformers model, then cached."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from fairdp.data._cache import atomic_path, data_dir, sha256_file
from fairdp.data._dataset import Dataset, encode, intersect, intersection_name, sensitive_attributes
from fairdp.data._encoded import PathLike, column, existing_file, int_option, read_table, reason
from fairdp.data._registry import register
from fairdp.data._splits import stratified_split
from fairdp.errors import InputError


def _model_identity(model: str) -> str:
    """What the cache key records of the model: a local directory by path and config, else the name.

    A directory's ``config.json`` digest changes when the model is swapped for another
    architecture or size in place; hashing the weights too would cost seconds per load.
    """
    local = Path(model).expanduser()
    if local.is_dir():
        config = local / "config.json"
        digest = sha256_file(config) if config.is_file() else "no config.json"
        return f"dir:{local.resolve()}:{digest}"
    return f"name:{model}"


def _encode(texts: list[str], model: str, batch_size: int, device: str | None) -> np.ndarray:
    """Embed ``texts`` with a model that must already be on disk: nothing is fetched at run time."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # read before huggingface_hub's first import
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise InputError(
            "dataset.model: sentence-transformers is not installed; pip install 'fairdp[text]'"
        ) from None
    try:
        encoder = SentenceTransformer(model, device=device, local_files_only=True)
    except Exception as exc:  # hub, tokenizer and torch loaders raise many unrelated types
        raise InputError(
            f"dataset.model: cannot load sentence-transformers model '{model}' from local files "
            f"({reason(exc)})"
        ) from None
    out = encoder.encode(
        texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False
    )
    return np.asarray(out, dtype=np.float32)


@register(
    "text",
    kind="user files",
    description="A .csv or .parquet of (text, label, sensitive), encoded once with a local "
    "sentence-transformers model",
)
def load_text(
    path: PathLike,
    model: str,
    text: str = "text",
    label: str = "label",
    sensitive: str | list[str] = "sensitive",
    seed: int = 0,
    batch_size: int = 64,
    device: str | None = None,
) -> Dataset:
    """Embed column ``text`` of a table with ``model`` (a local directory or an already cached name).

    Encoding is the slow step, so its result is cached under ``data_dir()/text/`` keyed by
    the file's sha256, the model's identity and the three column names; a later load with the
    same inputs reads the cache. The cache is written only after the Dataset has been built
    and validated, so a failed load leaves nothing behind. Splits are 60/20/20 stratified by
    label only, with ``seed``.
    """
    file = existing_file(path)
    seed = int_option("seed", seed, 0)
    batch_size = int_option("batch_size", batch_size, 1)
    if not isinstance(model, str) or not model:
        raise InputError(f"dataset.model: must be a model name or directory, got {model!r}")
    table = read_table(file)
    texts = column(file, table, text, "text")
    origin = str(file)
    y, class_names = encode(column(file, table, label, "label"), origin=origin, column=label)
    attributes = sensitive_attributes(sensitive)  # 2 or more: their intersection
    s, group_names = intersect([column(file, table, a, "sensitive") for a in attributes], attributes, origin=origin)
    sensitive = intersection_name(attributes)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InputError(f"{file}: column '{text}' has a non-text value {t!r} at row {i}")
    # Checked here, not left to the Dataset, so that bad labels cost no encoding.
    if len(class_names) < 2:
        raise InputError(f"{file}: label column '{label}' has a single class; a task needs at least 2")
    if len(group_names) < 2:
        raise InputError(
            f"{file}: sensitive column '{sensitive}' has a single group; fairness needs at least 2"
        )

    digest = sha256_file(file)
    # the embeddings depend on the text column alone; the key keeps the other names it always had
    key_source = {"file": digest, "model": _model_identity(model), "columns": [text, label, sensitive]}
    key = hashlib.sha256(json.dumps(key_source, sort_keys=True).encode()).hexdigest()
    cache = data_dir() / "text" / f"{key}.npz"
    cached = cache.is_file()
    if cached:
        with np.load(cache, allow_pickle=False) as npz:
            X = npz["X"]
    else:
        X = _encode(list(texts), model, batch_size, device)

    dataset = Dataset(
        name="text",
        X=X,
        y=y,
        s=s,
        splits=stratified_split(y, seed=seed),
        feature_names=tuple(f"emb_{j}" for j in range(X.shape[1])),
        class_names=class_names,
        group_names=group_names,
        label_name=label,
        sensitive_name=sensitive,
        source=origin,
        sha256={file.name: digest},
        preprocessing=(
            f"Column '{text}' embedded with sentence-transformers model '{model}' into "
            f"{X.shape[1]}-d float32 vectors, as the model's own pipeline outputs them; cached as "
            f"text/{key}.npz in the data directory. Label '{label}' and sensitive '{sensitive}' "
            f"integer-coded in sorted order; 60/20/20 split stratified by label only, seed {seed}."
        ),
    )
    if not cached:
        with atomic_path(cache) as tmp, open(tmp, "wb") as f:
            np.savez(f, X=X)
    return dataset
