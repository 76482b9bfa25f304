"""Loaders for data the user supplies: published encodings (Twitter, Bios, CelebA) and any table.

Licences forbid redistributing these sets, so fairdp never fetches them: the user points a
loader at the files researchers share, in the exact layout they are shared in. Every loader
checks what it reads and reports bad input as an :class:`InputError` naming the file.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from fairdp.data._cache import sha256_file
from fairdp.data._dataset import (
    SPLITS,
    Dataset,
    encode,
    intersect,
    intersection_name,
    sensitive_attributes,
)
from fairdp.data._registry import register
from fairdp.data._splits import stratified_split
from fairdp.errors import InputError

PathLike = str | os.PathLike


# --- helpers shared by the user-file loaders (and by _text) --------------------------------


def existing_file(path: PathLike) -> Path:
    """The absolute path of a file that must exist, so messages name it in full."""
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise InputError(f"{p}: file not found")
    return p


def existing_dir(path: PathLike) -> Path:
    p = Path(path).expanduser().resolve()
    if not p.is_dir():
        raise InputError(f"{p}: directory not found")
    return p


def int_option(name: str, value: object, minimum: int) -> int:
    """An integer loader option (YAML may hand over anything), named ``dataset.<name>`` if bad."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InputError(f"dataset.{name}: must be an integer >= {minimum}, got {value!r}")
    return int(value)


def reason(exc: BaseException) -> str:
    """A library's error as one line: the CLI prints single-line messages only."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def read_table(file: Path) -> pd.DataFrame:
    """A .csv or .parquet file as a DataFrame; any other extension is an input error."""
    ext = file.suffix.lower()
    try:
        if ext == ".csv":
            return pd.read_csv(file)
        if ext == ".parquet":
            return pd.read_parquet(file)
    except (OSError, ValueError, UnicodeDecodeError, ImportError) as exc:
        raise InputError(f"{file}: cannot read as {ext[1:]} ({reason(exc)})") from None
    raise InputError(f"{file}: unknown extension '{file.suffix}'; expected .csv or .parquet")


def column(file: Path, table: pd.DataFrame, name: str, option: str) -> np.ndarray:
    if name not in table.columns:
        raise InputError(f"{file}: no column '{name}' (dataset.{option})")
    return table[name].to_numpy()


def _read_npy(file: Path, width: int) -> np.ndarray:
    """A 2-D numeric array with ``width`` columns, memory-mapped: loaders read only the rows they use."""
    try:
        arr = np.load(file, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"{file}: not a readable .npy array ({reason(exc)})") from None
    if not isinstance(arr, np.ndarray) or arr.ndim != 2 or arr.shape[1] != width:
        shape = getattr(arr, "shape", "not an array")
        raise InputError(f"{file}: expected a 2-D array with {width} columns, got shape {shape}")
    if arr.dtype.kind not in "iuf":
        raise InputError(f"{file}: expected a numeric array, got dtype {arr.dtype}")
    return arr


def _check_finite(block: np.ndarray, file: Path, first_row: int) -> None:
    """Name the file, column and row of the first NaN/inf (the Dataset would only name a directory)."""
    bad = ~np.isfinite(block)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise InputError(
            f"{file}: column {col} has NaN or inf values (first at row {first_row + int(row)})"
        )


def _file_sha(files: Sequence[Path]) -> dict[str, str]:
    return {f.name: sha256_file(f) for f in files}


# --- Twitter sentiment by race (DeepMoji encodings) ------------------------------------------

DEEPMOJI_WIDTH = 2304
# file -> (label, group): first token sentiment (pos = happy), second race (pos = AAE).
TWITTER_FILES = {
    "pos_pos.npy": (1, 0),
    "pos_neg.npy": (1, 1),
    "neg_pos.npy": (0, 0),
    "neg_neg.npy": (0, 1),
}


@register(
    "twitter",
    kind="user files",
    description="Twitter sentiment (sad/happy) by race (AAE/SAE): DeepMoji encodings of "
    "Elazar & Goldberg (2018), training set skewed 40/10/10/40",
)
def load_twitter(
    path: PathLike,
    train_size: int = 40000,
    dev_size: int = 2000,
    test_size: int = 2000,
    ratio: float = 0.8,
) -> Dataset:
    """Read ``pos_pos.npy``, ``pos_neg.npy``, ``neg_pos.npy``, ``neg_neg.npy`` from ``path``.

    Follows Elazar & Goldberg's ``make_data`` (and FEDERATE, appendix D.2) so results compare
    with theirs: in each file the first ``train_size`` rows are the training pool, the next
    ``dev_size`` rows dev and the next ``test_size`` test, in file order. Each class takes
    ``train_size`` training rows: happy ``ratio`` from AAE (pos_pos) and ``1 - ratio`` from SAE
    (pos_neg), sad the reverse, which with the defaults gives 40/10/10/40% of 80,000 rows;
    dev and test are balanced. Every file needs ``train_size + dev_size + test_size`` rows.

    Unlike every other loader's split, this published protocol picks training rows by group
    (the file a row is in names its race): the split reads the attribute, so the
    attribute-level guarantees (PF-LD, the private reductions) do not cover it.
    """
    root = existing_dir(path)
    train_size = int_option("train_size", train_size, 1)
    dev_size = int_option("dev_size", dev_size, 1)
    test_size = int_option("test_size", test_size, 1)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
        raise InputError(f"dataset.ratio: must be a number in [0, 1], got {ratio!r}")
    major = round(ratio * train_size)
    minor = train_size - major
    take = {"pos_pos.npy": major, "pos_neg.npy": minor, "neg_pos.npy": minor, "neg_neg.npy": major}
    need = train_size + dev_size + test_size
    files = [existing_file(root / name) for name in TWITTER_FILES]
    arrays = [_read_npy(f, DEEPMOJI_WIDTH) for f in files]
    for file, arr in zip(files, arrays, strict=True):
        if len(arr) < need:
            raise InputError(
                f"{file}: has {len(arr)} rows, needs train_size + dev_size + test_size = {need}"
            )

    ranges = {  # split -> file name -> (first row, end row)
        "train": {name: (0, take[name]) for name in TWITTER_FILES},
        "valid": {name: (train_size, train_size + dev_size) for name in TWITTER_FILES},
        "test": {name: (train_size + dev_size, need) for name in TWITTER_FILES},
    }
    n = 2 * train_size + 4 * (dev_size + test_size)
    X = np.empty((n, DEEPMOJI_WIDTH), dtype=np.float32)  # filled in place: the real X is ~0.9 GB
    y = np.empty(n, dtype=np.int64)
    s = np.empty(n, dtype=np.int64)
    splits: dict[str, np.ndarray] = {}
    at = 0
    for split in SPLITS:
        start = at
        for file, arr in zip(files, arrays, strict=True):
            a, b = ranges[split][file.name]
            X[at : at + b - a] = arr[a:b]
            _check_finite(X[at : at + b - a], file, a)
            y[at : at + b - a], s[at : at + b - a] = TWITTER_FILES[file.name]
            at += b - a
        splits[split] = np.arange(start, at)

    return Dataset(
        name="twitter",
        X=X,
        y=y,
        s=s,
        splits=splits,
        feature_names=tuple(f"deepmoji_{j}" for j in range(DEEPMOJI_WIDTH)),
        class_names=("sad", "happy"),
        group_names=("AAE", "SAE"),
        label_name="sentiment",
        sensitive_name="race",
        source=str(root),
        sha256=_file_sha(files),
        preprocessing=(
            f"Elazar & Goldberg's split in file order: rows 0-{train_size - 1} of each file are "
            f"its training pool, the next {dev_size} valid (dev), the next {test_size} test. "
            f"Training set with ratio {ratio}: happy = first {major} rows of pos_pos (AAE) + "
            f"first {minor} of pos_neg (SAE), sad = first {minor} of neg_pos (AAE) + first "
            f"{major} of neg_neg (SAE); valid and test balanced. Features: the 2304-d DeepMoji "
            "encodings as float32."
        ),
    )


# --- Bios: profession by gender (BERT [CLS] encodings) ---------------------------------------

BERT_WIDTH = 768
BIOS_SPLITS = {"train": "train", "dev": "valid", "test": "test"}  # file stem -> our split


class _PlainDataUnpickler(pickle.Unpickler):
    """Unpickles plain data only (lists, dicts, strings, numbers): any reference to a module's
    name is refused, so no code from the file can run (a pickle calls code only through such
    references)."""

    def find_class(self, module: str, name: str):
        raise _UntrustedPickle(f"{module}.{name}")


class _UntrustedPickle(Exception):
    pass


def _read_records(file: Path, keys: Sequence[str], trust_pickle: bool = False) -> dict[str, list]:
    """The values of ``keys`` in a pickled list of dicts, checked record by record. Without
    ``trust_pickle`` only plain data is unpickled (``_PlainDataUnpickler``)."""
    try:
        with open(file, "rb") as f:
            records = pickle.load(f) if trust_pickle else _PlainDataUnpickler(f).load()  # noqa: S301
    except _UntrustedPickle as ref:
        raise InputError(f"{file}: the pickle refers to {ref}, i.e. runs code when loaded; fairdp reads plain-data "
                         f"pickles only, unless the dataset option trust_pickle: true says you trust this file") from None
    except Exception as exc:  # unpickling can raise anything the pickled code raises
        raise InputError(f"{file}: not a readable pickle ({reason(exc)})") from None
    if not isinstance(records, list):
        raise InputError(f"{file}: expected a pickled list of dicts, got {type(records).__name__}")
    values: dict[str, list] = {k: [] for k in keys}
    for i, rec in enumerate(records):
        if not isinstance(rec, Mapping):
            raise InputError(f"{file}: record {i} is a {type(rec).__name__}, expected a dict")
        for k in keys:
            if k not in rec:
                raise InputError(f"{file}: record {i} has no key '{k}'")
            values[k].append(rec[k])
    return values


@register(
    "bios",
    kind="user files",
    description="Bias in Bios: profession by gender, BERT [CLS] encodings (De-Arteaga et al. 2019, "
    "as shared by Ravfogel et al. 2020)",
)
def load_bios(path: PathLike, trust_pickle: bool = False) -> Dataset:
    """Read ``{train,dev,test}.pickle`` and ``{train,dev,test}.pickle_bert_cls.npy`` from ``path``.

    Each pickle is a list of dicts with keys ``p`` (profession) and ``g`` (gender); the .npy
    beside it holds one 768-d encoding per dict, in the same order. The dataset's own split is
    kept (dev becomes valid) so results compare with published ones. Unpickling can run code
    from the file, so by default only plain data (lists, dicts, strings, numbers) is read and a
    pickle that refers to any module is refused; ``trust_pickle=True`` (a spec's
    ``dataset: {name: bios, trust_pickle: true}``) reads it fully, for files you trust.
    """
    if not isinstance(trust_pickle, bool):
        raise InputError(f"trust_pickle: must be true or false, got {trust_pickle!r}")
    root = existing_dir(path)
    files: list[Path] = []
    blocks: list[np.ndarray] = []
    professions: list = []
    genders: list = []
    splits: dict[str, np.ndarray] = {}
    at = 0
    for stem, split in BIOS_SPLITS.items():
        records_file = existing_file(root / f"{stem}.pickle")
        enc_file = existing_file(root / f"{stem}.pickle_bert_cls.npy")
        values = _read_records(records_file, ("p", "g"), trust_pickle)
        enc = _read_npy(enc_file, BERT_WIDTH)
        if len(enc) != len(values["p"]):
            raise InputError(
                f"{enc_file}: has {len(enc)} rows but {records_file} has {len(values['p'])} "
                "records; they must match one to one"
            )
        block = np.asarray(enc, dtype=np.float32)
        _check_finite(block, enc_file, 0)
        files += [records_file, enc_file]
        blocks.append(block)
        professions += values["p"]
        genders += values["g"]
        splits[split] = np.arange(at, at + len(block))
        at += len(block)

    origin = str(root)
    y, class_names = encode(np.array(professions, dtype=object), origin=origin, column="p")
    s, group_names = encode(np.array(genders, dtype=object), origin=origin, column="g")
    return Dataset(
        name="bios",
        X=np.concatenate(blocks),
        y=y,
        s=s,
        splits=splits,
        feature_names=tuple(f"bert_cls_{j}" for j in range(BERT_WIDTH)),
        class_names=class_names,
        group_names=group_names,
        label_name="profession",
        sensitive_name="gender",
        source=origin,
        sha256=_file_sha(files),
        preprocessing=(
            "The dataset's own split (train -> train, dev -> valid, test -> test). Features: the "
            "768-d BERT [CLS] encodings as float32; classes: the professions ('p') in sorted "
            "order; groups: the gender values ('g') in sorted order."
        ),
    )


# --- CelebA attributes --------------------------------------------------------------------------


def _celeba_attributes(file: Path) -> tuple[list[str], np.ndarray]:
    """Attribute names and the -1/1 matrix from either published layout of the attribute list."""
    if file.suffix.lower() == ".csv":
        table = read_table(file)
        if "image_id" not in table.columns:
            raise InputError(f"{file}: no column 'image_id'; expected the Kaggle CelebA layout")
        names = [str(c) for c in table.columns if c != "image_id"]
        values = table[names].to_numpy()
        if values.dtype.kind not in "iuf":
            raise InputError(f"{file}: attribute columns must be -1/1 numbers")
    else:
        with open(file, encoding="utf-8", errors="replace") as f:
            lines = [line.split() for line in f]
        if len(lines) < 2 or len(lines[0]) != 1 or not lines[0][0].isdigit():
            raise InputError(
                f"{file}: line 1 must be the number of images (list_attr_celeba.txt layout)"
            )
        names = lines[1]
        rows = [r for r in lines[2:] if r]
        for i, r in enumerate(rows):
            if len(r) != len(names) + 1:
                raise InputError(
                    f"{file}: line {i + 3} has {len(r)} fields, expected a file name and "
                    f"{len(names)} attributes"
                )
        if len(rows) != int(lines[0][0]):
            raise InputError(f"{file}: line 1 says {lines[0][0]} images but {len(rows)} follow")
        try:
            values = np.array([r[1:] for r in rows], dtype=np.int64)
        except ValueError as exc:
            raise InputError(f"{file}: attribute values must be -1/1 ({reason(exc)})") from None
    for j, name in enumerate(names):
        if not np.isin(values[:, j], (-1, 1)).all():
            raise InputError(f"{file}: column '{name}' has values other than -1 and 1")
    return names, values


@register(
    "celeba",
    kind="user files",
    description="CelebA attributes: one attribute (Smiling) predicted from the other 38, "
    "grouped by another (Male)",
)
def load_celeba(
    path: PathLike, seed: int = 0, label: str = "Smiling", sensitive: str | list[str] = "Male"
) -> Dataset:
    """Read ``list_attr_celeba.txt`` (original layout) or the Kaggle ``.csv`` (``image_id`` + attributes).

    Attributes are -1/1; features are the attributes other than ``label`` and ``sensitive``
    mapped to 0/1. Splits are 60/20/20 stratified by label only with ``seed`` rather than the
    official partition, as in FEDERATE (never by the sensitive attribute: see ``stratified_split``).
    ``sensitive`` may list 2 or more attributes: their intersection (``intersect``), each one's
    groups named as it alone names them ("male × Young").
    """
    file = existing_file(path)
    seed = int_option("seed", seed, 0)
    attributes = sensitive_attributes(sensitive)
    names, values = _celeba_attributes(file)
    for option, col in (("label", label), *(("sensitive", a) for a in attributes)):
        if col not in names:
            raise InputError(f"{file}: no attribute column '{col}' (dataset.{option})")
    if label in attributes:
        raise InputError(f"dataset.sensitive: same column as dataset.label ('{label}')")
    features = [c for c in names if c != label and c not in attributes]
    binary = values == 1
    y = binary[:, names.index(label)].astype(np.int64)

    def groups(attribute: str) -> np.ndarray:  # each row's group named as the attribute alone names it
        own = ("female", "male") if attribute == "Male" else (f"not {attribute}", attribute)
        return np.asarray(own, dtype=object)[binary[:, names.index(attribute)].astype(np.int64)]

    if len(attributes) == 1:  # both groups named, present or not
        s = binary[:, names.index(sensitive)].astype(np.int64)
        group_names = ("female", "male") if sensitive == "Male" else (f"not {sensitive}", sensitive)
    else:
        s, group_names = intersect([groups(a) for a in attributes], attributes, origin=str(file))
    sensitive_name = intersection_name(attributes)
    return Dataset(
        name="celeba",
        X=binary[:, [names.index(c) for c in features]].astype(np.float32),
        y=y,
        s=s,
        splits=stratified_split(y, seed=seed),
        feature_names=tuple(features),
        class_names=(f"not {label}", label),
        group_names=group_names,
        label_name=label,
        sensitive_name=sensitive_name,
        source=str(file),
        sha256=_file_sha([file]),
        preprocessing=(
            f"Attributes -1/1 mapped to 0/1; features: the {len(features)} attributes other than "
            f"{label} (label) and {', '.join(attributes)} (sensitive); 60/20/20 split stratified by label "
            f"only, seed {seed} (not the official partition)."
        ),
    )


# --- any table or array file --------------------------------------------------------------------

SPLIT_VALUES = {"train": "train", "valid": "valid", "dev": "valid", "test": "test"}


def _table_features(
    file: Path, table: pd.DataFrame, features: object, exclude: Sequence[str]
) -> tuple[np.ndarray, list[str], str]:
    """The feature matrix, its column names, and how they were chosen (for ``preprocessing``)."""
    if features is None:
        names = [
            c for c in table.columns if c not in exclude and pd.api.types.is_numeric_dtype(table[c])
        ]
        if not names:
            raise InputError(f"{file}: no numeric feature columns besides {', '.join(exclude)}")
        skipped = [str(c) for c in table.columns if c not in exclude and c not in names]
        how = "every numeric column other than " + ", ".join(exclude)
        if skipped:
            how += f" (non-numeric columns ignored: {', '.join(skipped)})"
    else:
        names = [features] if isinstance(features, str) else list(features)
        for c in names:
            if c in exclude:
                raise InputError(f"dataset.features: '{c}' is the label, sensitive or split column")
            if c not in table.columns:
                raise InputError(f"{file}: no column '{c}' (dataset.features)")
            if not pd.api.types.is_numeric_dtype(table[c]):
                raise InputError(f"{file}: feature column '{c}' is not numeric (dtype {table[c].dtype})")
        how = "the columns given by dataset.features"
    X = table[names].to_numpy(dtype=np.float64, na_value=np.nan)
    return X, [str(c) for c in names], how


def _npz_arrays(
    file: Path, keys: Mapping[str, str | None], features: object
) -> tuple[np.ndarray, list[str], str, dict[str, np.ndarray]]:
    """The features array and the 1-D label/sensitive/split arrays (keyed by option) of a .npz."""
    if features is None:
        features = "X"
    if not isinstance(features, str):
        raise InputError(f"dataset.features: a .npz file takes one array name, got {features!r}")
    try:
        npz = np.load(file, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"{file}: not a readable .npz file ({reason(exc)})") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise InputError(f"{file}: not a .npz archive (a single .npy array?)")
    with npz:
        wanted = {"features": features, **{k: v for k, v in keys.items() if v is not None}}
        for option, key in wanted.items():
            if key not in npz.files:
                raise InputError(f"{file}: no array '{key}' (dataset.{option})")
        try:
            arrays = {option: npz[key] for option, key in wanted.items()}
        except ValueError as exc:  # object arrays, which would need unpickling
            raise InputError(f"{file}: cannot read its arrays ({reason(exc)})") from None
    X = arrays.pop("features")
    if X.ndim != 2:
        raise InputError(f"{file}: array '{features}' must be 2-D (rows x features), got shape {X.shape}")
    if X.dtype.kind not in "biuf":
        raise InputError(f"{file}: array '{features}' must be numeric, got dtype {X.dtype}")
    for option, arr in arrays.items():
        if arr.shape != (len(X),):
            raise InputError(
                f"{file}: array '{keys[option]}' must be 1-D with one value per row of "
                f"'{features}' ({len(X)}), got shape {arr.shape}"
            )
    names = [f"{features}_{j}" for j in range(X.shape[1])]
    return X, names, f"the columns of array '{features}'", arrays


def _named_splits(file: Path, split_column: str, values: np.ndarray) -> dict[str, np.ndarray]:
    canon = [SPLIT_VALUES.get(str(v).strip().lower()) for v in values]
    for i, c in enumerate(canon):
        if c is None:
            raise InputError(
                f"{file}: column '{split_column}' has '{values[i]}' at row {i}; expected train, "
                "valid (or dev) or test"
            )
    canon_arr = np.array(canon, dtype=object)
    return {k: np.flatnonzero(canon_arr == k) for k in SPLITS}


@register(
    "generic",
    kind="user files",
    description="Any .csv, .parquet or .npz file: name the label, sensitive and feature columns",
)
def load_generic(
    path: PathLike,
    label: str,
    sensitive: str | list[str],
    features: str | list[str] | None = None,
    seed: int = 0,
    split_column: str | None = None,
) -> Dataset:
    """Read a table (.csv, .parquet) or arrays (.npz) the user prepared.

    Tables: ``label``, ``sensitive`` and ``split_column`` are column names, ``features`` a
    list of columns (default: every other numeric column). .npz: they are array names, and
    ``features`` (default ``X``) names one 2-D array. Label and sensitive values may be
    strings or numbers; they are integer-coded in sorted order. ``split_column`` holds
    train/valid/test (dev = valid) per row; without it the split is 60/20/20 stratified by
    label only (never by the sensitive attribute), with ``seed``. ``sensitive`` may list 2 or
    more columns (arrays): the groups are then their intersections present (``intersect``).
    """
    file = existing_file(path)
    seed = int_option("seed", seed, 0)
    attributes = sensitive_attributes(sensitive)
    if label in attributes:
        raise InputError(f"dataset.sensitive: same column as dataset.label ('{label}')")
    # each attribute's array, keyed by the option it came from (one key per attribute)
    options = ["sensitive"] if len(attributes) == 1 else [f"sensitive[{i}]" for i in range(len(attributes))]
    ext = file.suffix.lower()
    if ext == ".npz":
        keys = {"label": label, **dict(zip(options, attributes)), "split_column": split_column}
        X, names, how, arrays = _npz_arrays(file, keys, features)
    elif ext in (".csv", ".parquet"):
        table = read_table(file)
        arrays = {"label": column(file, table, label, "label"),
                  **{o: column(file, table, a, "sensitive") for o, a in zip(options, attributes)}}
        if split_column is not None:
            arrays["split_column"] = column(file, table, split_column, "split_column")
        exclude = [c for c in (label, *attributes, split_column) if c is not None]
        X, names, how = _table_features(file, table, features, exclude)
    else:
        raise InputError(f"{file}: unknown extension '{file.suffix}'; expected .csv, .parquet or .npz")

    origin = str(file)
    y, class_names = encode(arrays["label"], origin=origin, column=label)
    s, group_names = intersect([arrays[o] for o in options], attributes, origin=origin)
    if split_column is not None:
        splits = _named_splits(file, split_column, arrays["split_column"])
        split_how = f"split given by column '{split_column}'"
    else:
        splits = stratified_split(y, seed=seed)
        split_how = f"60/20/20 split stratified by label only, seed {seed}"
    return Dataset(
        name="generic",
        X=X,
        y=y,
        s=s,
        splits=splits,
        feature_names=tuple(names),
        class_names=class_names,
        group_names=group_names,
        label_name=label,
        sensitive_name=intersection_name(attributes),
        source=origin,
        sha256=_file_sha([file]),
        preprocessing=(
            f"Read {file.name}; features: {how}, as float32; label '{label}' and sensitive "
            + (f"'{sensitive}' integer-coded in sorted order" if len(attributes) == 1 else
               f"{', '.join(repr(a) for a in attributes)} each integer-coded in sorted order, the "
               "groups their intersections present (in the order of those codes)")
            + f"; {split_how}."
        ),
    )
