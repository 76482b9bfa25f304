"""User-file loaders (twitter, bios, celeba, generic): files in the published layouts, bad input."""

from __future__ import annotations

import json
import pickle
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairdp.data import load_dataset
from fairdp.errors import InputError

from .conftest import assert_input_error, run_main


def describe(name: str, **options) -> subprocess.CompletedProcess:
    """``fairdp data describe NAME --json -o KEY=VALUE ...`` through fairdp's main."""
    pairs = [arg for k, v in options.items() for arg in ("-o", f"{k}={v}")]
    return run_main("data", "describe", name, "--json", *pairs)


def assert_cli_error(proc: subprocess.CompletedProcess, needle: str) -> None:
    """Exit 2 with one line naming ``needle``, and nothing else on stderr."""
    assert_input_error(proc, needle)
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# --- twitter ----------------------------------------------------------------------------------

TW_FILES = ("pos_pos.npy", "pos_neg.npy", "neg_pos.npy", "neg_neg.npy")
TW = {"train_size": 20, "dev_size": 4, "test_size": 4}


def write_twitter(root: Path, rows: int = 28, width: int = 2304) -> Path:
    """Four DeepMoji-like files; column 0 holds ``1000 * file number + row`` to trace rows."""
    root.mkdir()
    rng = np.random.default_rng(0)
    for k, name in enumerate(TW_FILES):
        arr = rng.normal(size=(rows, width)).astype(np.float32)
        arr[:, 0] = 1000 * k + np.arange(rows)
        np.save(root / name, arr)
    return root


def test_twitter_split_and_skew(tmp_path):
    root = write_twitter(tmp_path / "tw")
    d = load_dataset("twitter", path=str(root), **TW)
    assert d.X.dtype == np.float32 and d.X.shape == (2 * 20 + 4 * 8, 2304)
    assert d.y.dtype == np.int64 and d.s.dtype == np.int64
    assert d.class_names == ("sad", "happy") and d.group_names == ("AAE", "SAE")
    assert (d.label_name, d.sensitive_name) == ("sentiment", "race")
    assert set(d.sha256) == set(TW_FILES)

    tr = d.split("train")
    cells = {(int(y), int(s)): int(((tr.y == y) & (tr.s == s)).sum()) for y in (0, 1) for s in (0, 1)}
    # 40% AAE-happy, 10% SAE-happy, 10% AAE-sad, 40% SAE-sad of 40 training rows
    assert cells == {(1, 0): 16, (1, 1): 4, (0, 0): 4, (0, 1): 16}
    for name in ("valid", "test"):
        part = d.split(name)
        assert np.bincount(2 * part.y + part.s).tolist() == [4, 4, 4, 4]

    # file order: training rows are each file's first rows, then dev, then test
    marker = tr.X[:, 0]
    assert sorted(marker[(tr.y == 1) & (tr.s == 0)]) == list(range(16))  # pos_pos rows 0-15
    assert sorted(marker[(tr.y == 1) & (tr.s == 1)]) == [1000 + i for i in range(4)]
    assert sorted(d.split("valid").X[:, 0] % 1000) == sorted(list(range(20, 24)) * 4)
    assert sorted(d.split("test").X[:, 0] % 1000) == sorted(list(range(24, 28)) * 4)


def test_twitter_cli(tmp_path):
    root = write_twitter(tmp_path / "tw")
    proc = describe("twitter", path=root, **TW)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["splits"] == {"train": 40, "valid": 16, "test": 16}
    assert summary["features"] == 2304 and summary["group_names"] == ["AAE", "SAE"]

    (root / "neg_pos.npy").unlink()
    assert_cli_error(describe("twitter", path=root, **TW), str(root / "neg_pos.npy"))


@pytest.mark.parametrize(
    ("corrupt", "needle"),
    [
        (lambda root: (root / "neg_neg.npy").unlink(), "neg_neg.npy"),
        (lambda root: np.save(root / "pos_neg.npy", np.zeros((28, 2303))), "pos_neg.npy"),
        (lambda root: np.save(root / "pos_neg.npy", np.zeros(28)), "pos_neg.npy"),
        (lambda root: np.save(root / "neg_pos.npy", np.zeros((27, 2304))), "neg_pos.npy"),
        (lambda root: (root / "pos_pos.npy").write_bytes(b"not numpy"), "pos_pos.npy"),
    ],
    ids=["missing", "width", "1-D", "too-few-rows", "garbage"],
)
def test_twitter_bad_files(tmp_path, corrupt, needle):
    root = write_twitter(tmp_path / "tw")
    corrupt(root)
    with pytest.raises(InputError, match=needle):
        load_dataset("twitter", path=str(root), **TW)


def test_twitter_nan_names_file_and_column(tmp_path):
    root = write_twitter(tmp_path / "tw")
    arr = np.load(root / "neg_pos.npy")
    arr[21, 7] = np.inf  # a dev row
    np.save(root / "neg_pos.npy", arr)
    with pytest.raises(InputError, match=r"neg_pos\.npy: column 7 has NaN or inf values \(first at row 21\)"):
        load_dataset("twitter", path=str(root), **TW)


def test_twitter_default_sizes_need_large_files(tmp_path):
    root = write_twitter(tmp_path / "tw")
    with pytest.raises(InputError, match="pos_pos.npy: has 28 rows, needs .* = 44000"):
        load_dataset("twitter", path=str(root))


# --- bios ---------------------------------------------------------------------------------------

BIOS_SIZES = {"train": 30, "dev": 10, "test": 12}
PROFESSIONS = ("nurse", "surgeon", "professor")


def write_bios(root: Path) -> dict[str, np.ndarray]:
    root.mkdir()
    rng = np.random.default_rng(1)
    encodings = {}
    for stem, n in BIOS_SIZES.items():
        records = [
            {"p": PROFESSIONS[i % 3], "g": "mf"[i % 2], "text": f"bio {i}", "start": 0}
            for i in range(n)
        ]
        with open(root / f"{stem}.pickle", "wb") as f:
            pickle.dump(records, f)
        encodings[stem] = rng.normal(size=(n, 768)).astype(np.float32)
        np.save(root / f"{stem}.pickle_bert_cls.npy", encodings[stem])
    return encodings


def test_bios_keeps_its_own_split(tmp_path):
    enc = write_bios(tmp_path / "bios")
    d = load_dataset("bios", path=str(tmp_path / "bios"))
    assert d.X.shape == (52, 768) and d.X.dtype == np.float32
    assert {k: len(v) for k, v in d.splits.items()} == {"train": 30, "valid": 10, "test": 12}
    np.testing.assert_array_equal(d.split("valid").X, enc["dev"])
    np.testing.assert_array_equal(d.split("test").X, enc["test"])
    assert d.class_names == ("nurse", "professor", "surgeon")
    assert d.group_names == ("f", "m")
    assert np.bincount(d.y).tolist() == [18, 17, 17]
    assert (d.label_name, d.sensitive_name) == ("profession", "gender")
    assert len(d.sha256) == 6


def _rewrite_pickle(root: Path, stem: str, edit) -> None:
    with open(root / f"{stem}.pickle", "rb") as f:
        records = pickle.load(f)
    with open(root / f"{stem}.pickle", "wb") as f:
        pickle.dump(edit(records), f)


@pytest.mark.parametrize(
    ("corrupt", "needles"),
    [
        (lambda r: (r / "dev.pickle").unlink(), ["dev.pickle"]),
        (lambda r: np.save(r / "test.pickle_bert_cls.npy", np.zeros((11, 768))),
         ["test.pickle_bert_cls.npy", "test.pickle "]),
        (lambda r: np.save(r / "train.pickle_bert_cls.npy", np.zeros((30, 767))),
         ["train.pickle_bert_cls.npy"]),
        (lambda r: _rewrite_pickle(r, "dev", lambda recs: [*recs[:3], {"p": "nurse"}, *recs[4:]]),
         ["dev.pickle", "record 3", "'g'"]),
        (lambda r: _rewrite_pickle(r, "train", lambda recs: {"records": recs}),
         ["train.pickle", "list of dicts"]),
        (lambda r: np.save(r / "dev.pickle_bert_cls.npy", np.full((10, 768), np.nan)),
         ["dev.pickle_bert_cls.npy", "NaN"]),
        (lambda r: [_rewrite_pickle(r, stem, lambda recs: [{**x, "g": "f"} for x in recs])
                    for stem in BIOS_SIZES],
         ["'gender'", "single group"]),
    ],
    ids=["missing", "length-mismatch", "width", "missing-key", "not-a-list", "nan", "one-group"],
)
def test_bios_bad_files(tmp_path, corrupt, needles):
    root = tmp_path / "bios"
    write_bios(root)
    corrupt(root)
    with pytest.raises(InputError) as err:
        load_dataset("bios", path=str(root))
    for needle in needles:
        assert needle in str(err.value)


def test_bios_cli(tmp_path):
    root = tmp_path / "bios"
    write_bios(root)
    proc = describe("bios", path=root)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["splits"] == {"train": 30, "valid": 10, "test": 12}

    _rewrite_pickle(root, "test", lambda recs: [{"g": x["g"]} for x in recs])
    assert_cli_error(describe("bios", path=root), str(root / "test.pickle"))


# --- celeba -------------------------------------------------------------------------------------

CELEBA_ATTRS = (
    "5_o_Clock_Shadow Arched_Eyebrows Attractive Bags_Under_Eyes Bald Bangs Big_Lips Big_Nose "
    "Black_Hair Blond_Hair Blurry Brown_Hair Bushy_Eyebrows Chubby Double_Chin Eyeglasses Goatee "
    "Gray_Hair Heavy_Makeup High_Cheekbones Male Mouth_Slightly_Open Mustache Narrow_Eyes No_Beard "
    "Oval_Face Pale_Skin Pointy_Nose Receding_Hairline Rosy_Cheeks Sideburns Smiling Straight_Hair "
    "Wavy_Hair Wearing_Earrings Wearing_Hat Wearing_Lipstick Wearing_Necklace Wearing_Necktie Young"
).split()


def celeba_values(n: int = 60) -> np.ndarray:
    return np.where(np.random.default_rng(2).random((n, 40)) < 0.5, -1, 1)


def write_celeba_txt(path: Path, values: np.ndarray, count: int | None = None) -> Path:
    """The original list_attr_celeba.txt: count, names (trailing space), padded -1/1 rows."""
    lines = [str(len(values) if count is None else count), " ".join(CELEBA_ATTRS) + " "]
    lines += [f"{i + 1:06d}.jpg " + " ".join(f"{v:2d}" for v in row) for i, row in enumerate(values)]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_celeba_csv(path: Path, values: np.ndarray) -> Path:
    """The Kaggle list_attr_celeba.csv: image_id plus the 40 attribute columns."""
    table = pd.DataFrame(values, columns=CELEBA_ATTRS)
    table.insert(0, "image_id", [f"{i + 1:06d}.jpg" for i in range(len(values))])
    table.to_csv(path, index=False)
    return path


def test_celeba_layouts_agree(tmp_path):
    values = celeba_values()
    txt = load_dataset("celeba", path=str(write_celeba_txt(tmp_path / "list_attr_celeba.txt", values)))
    csv = load_dataset("celeba", path=str(write_celeba_csv(tmp_path / "list_attr_celeba.csv", values)))
    for a, b in ((txt.X, csv.X), (txt.y, csv.y), (txt.s, csv.s)):
        np.testing.assert_array_equal(a, b)
    for k in txt.splits:
        np.testing.assert_array_equal(txt.splits[k], csv.splits[k])
    assert txt.feature_names == csv.feature_names and len(txt.feature_names) == 38
    assert "Smiling" not in txt.feature_names and "Male" not in txt.feature_names
    assert txt.X.shape == (60, 38) and set(np.unique(txt.X)) == {0.0, 1.0}
    np.testing.assert_array_equal(txt.y, values[:, CELEBA_ATTRS.index("Smiling")] == 1)
    np.testing.assert_array_equal(txt.s, values[:, CELEBA_ATTRS.index("Male")] == 1)
    assert txt.group_names == ("female", "male") and txt.class_names == ("not Smiling", "Smiling")
    sizes = [len(txt.splits[k]) for k in ("train", "valid", "test")]
    assert sum(sizes) == 60 and all(abs(a - b) <= 2 for a, b in zip(sizes, (36, 12, 12), strict=True))

    other = load_dataset("celeba", path=str(tmp_path / "list_attr_celeba.txt"), label="Young", seed=3)
    assert other.label_name == "Young" and "Smiling" in other.feature_names


def test_celeba_bad_input(tmp_path):
    values = celeba_values()
    txt = write_celeba_txt(tmp_path / "list_attr_celeba.txt", values)
    with pytest.raises(InputError, match=r"list_attr_celeba\.txt: no attribute column 'Smile'"):
        load_dataset("celeba", path=str(txt), label="Smile")
    with pytest.raises(InputError, match="line 1 says 61 images but 60 follow"):
        load_dataset("celeba", path=str(write_celeba_txt(tmp_path / "short.txt", values, count=61)))
    bad = values.copy()
    bad[5, CELEBA_ATTRS.index("Bangs")] = 0
    with pytest.raises(InputError, match="column 'Bangs' has values other than -1 and 1"):
        load_dataset("celeba", path=str(write_celeba_csv(tmp_path / "zero.csv", bad)))
    no_id = tmp_path / "noid.csv"
    pd.DataFrame(values, columns=CELEBA_ATTRS).to_csv(no_id, index=False)
    with pytest.raises(InputError, match=r"noid\.csv: no column 'image_id'"):
        load_dataset("celeba", path=str(no_id))
    smiling = values.copy()
    smiling[:, CELEBA_ATTRS.index("Smiling")] = 1
    with pytest.raises(InputError, match="label column 'Smiling' has a single class"):
        load_dataset("celeba", path=str(write_celeba_txt(tmp_path / "smile.txt", smiling)))
    with pytest.raises(InputError, match="missing.txt: file not found"):
        load_dataset("celeba", path=str(tmp_path / "missing.txt"))


def test_celeba_cli(tmp_path):
    txt = write_celeba_txt(tmp_path / "list_attr_celeba.txt", celeba_values())
    proc = describe("celeba", path=txt, seed=1)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert (summary["rows"], summary["features"], summary["groups"]) == (60, 38, 2)
    assert_cli_error(describe("celeba", path=txt, sensitive="Gender"), "'Gender'")


# --- generic ------------------------------------------------------------------------------------


def generic_table(n: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    return pd.DataFrame({
        "f1": rng.normal(size=n),
        "target": np.where(np.arange(n) % 2 == 0, "approved", "denied"),
        "f2": rng.normal(size=n),
        "note": [f"row {i}" for i in range(n)],
        "group": 1 + np.arange(n) // 2 % 2,
        "f3": rng.integers(0, 5, size=n).astype(float),
        "part": np.array(["train", "train", "dev", "test"] * (n // 4)),
    })


def write_generic(tmp_path: Path, table: pd.DataFrame) -> dict[str, Path]:
    paths = {ext: tmp_path / f"data.{ext}" for ext in ("csv", "parquet", "npz")}
    table.to_csv(paths["csv"], index=False)
    table.to_parquet(paths["parquet"], index=False)
    np.savez(
        paths["npz"],
        X=table[["f1", "f2", "f3"]].to_numpy(),
        target=table["target"].to_numpy(dtype=str),
        group=table["group"].to_numpy(),
        part=table["part"].to_numpy(dtype=str),
    )
    return paths


def test_generic_formats_agree(tmp_path):
    table = generic_table()
    paths = write_generic(tmp_path, table)
    loaded = {
        ext: load_dataset("generic", path=str(p), label="target", sensitive="group", seed=4)
        for ext, p in paths.items()
    }
    ref = loaded["csv"]
    assert ref.feature_names == ("f1", "f2", "f3")  # numeric, minus label/sensitive; 'note' and 'part' skipped
    assert "note, part" in ref.preprocessing
    assert ref.class_names == ("approved", "denied") and ref.group_names == ("1", "2")
    assert ref.X.dtype == np.float32 and ref.X.shape == (40, 3)
    np.testing.assert_array_equal(ref.X, table[["f1", "f2", "f3"]].to_numpy(np.float32))
    for d in loaded.values():
        for a, b in ((d.X, ref.X), (d.y, ref.y), (d.s, ref.s)):
            np.testing.assert_array_equal(a, b)
        for k in ref.splits:
            np.testing.assert_array_equal(d.splits[k], ref.splits[k])
        assert (d.class_names, d.group_names) == (ref.class_names, ref.group_names)


def test_generic_split_column_and_features(tmp_path):
    table = generic_table()
    paths = write_generic(tmp_path, table)
    for p in paths.values():
        d = load_dataset("generic", path=str(p), label="target", sensitive="group", split_column="part")
        assert {k: len(v) for k, v in d.splits.items()} == {"train": 20, "valid": 10, "test": 10}
        np.testing.assert_array_equal(d.splits["valid"], np.flatnonzero(table["part"] == "dev"))
    d = load_dataset("generic", path=str(paths["parquet"]), label="target", sensitive="group",
                     features=["f3", "f1"])
    assert d.feature_names == ("f3", "f1")
    np.testing.assert_array_equal(d.X, table[["f3", "f1"]].to_numpy(np.float32))


def test_generic_bad_input(tmp_path):
    table = generic_table()
    paths = write_generic(tmp_path, table)
    opts = {"label": "target", "sensitive": "group"}

    def fails(path: Path, needle: str, **extra) -> None:
        with pytest.raises(InputError) as err:
            load_dataset("generic", path=str(path), **{**opts, **extra})
        assert needle in str(err.value)
        assert "\n" not in str(err.value)

    fails(tmp_path / "absent.csv", str(tmp_path / "absent.csv"))
    (tmp_path / "data.txt").write_text("a,b\n1,2\n")
    fails(tmp_path / "data.txt", "data.txt: unknown extension")
    fails(paths["csv"], "no column 'outcome'", label="outcome")
    fails(paths["parquet"], "feature column 'note' is not numeric", features=["f1", "note"])
    fails(paths["npz"], "no array 'target_x'", label="target_x")
    np.savez(tmp_path / "flat.npz", X=np.zeros(40), target=table["target"].to_numpy(str),
             group=table["group"].to_numpy())
    fails(tmp_path / "flat.npz", "flat.npz: array 'X' must be 2-D")
    np.savez(tmp_path / "short.npz", X=np.zeros((40, 2)), target=table["target"].to_numpy(str)[:39],
             group=table["group"].to_numpy())
    fails(tmp_path / "short.npz", "array 'target' must be 1-D with one value per row")

    bad = table.copy()
    bad.loc[7, "f2"] = np.nan
    bad.to_csv(tmp_path / "nan.csv", index=False)
    fails(tmp_path / "nan.csv", "feature column 'f2' has NaN or inf values (first at row 7)")
    bad = table.assign(f3=np.inf)
    bad.to_parquet(tmp_path / "inf.parquet")
    fails(tmp_path / "inf.parquet", "feature column 'f3' has NaN or inf")
    table.assign(target="approved").to_csv(tmp_path / "oneclass.csv", index=False)
    fails(tmp_path / "oneclass.csv", "label column 'target' has a single class")
    table.assign(group=1).to_parquet(tmp_path / "onegroup.parquet")
    fails(tmp_path / "onegroup.parquet", "sensitive column 'group' has a single group")
    table.assign(part=["holdout"] + list(table["part"][1:])).to_csv(tmp_path / "split.csv", index=False)
    fails(tmp_path / "split.csv", "column 'part' has 'holdout' at row 0", split_column="part")


def test_generic_cli(tmp_path):
    paths = write_generic(tmp_path, generic_table())
    proc = describe("generic", path=paths["npz"], label="target", sensitive="group", split_column="part")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["features"] == 3 and summary["class_names"] == ["approved", "denied"]
    assert summary["splits"] == {"train": 20, "valid": 10, "test": 10}

    proc = describe("generic", path=paths["csv"], label="target", sensitive="group", features="[f1,note]")
    assert_cli_error(proc, "'note'")
    assert_cli_error(describe("generic", path=tmp_path / "nope.parquet", label="a", sensitive="b"),
                     str(tmp_path / "nope.parquet"))


def _ran() -> str:
    print("code from a pickle ran")
    return PROFESSIONS[0]


class _Boom:
    """Pickled as a call to ``_ran``: loading it runs code, as a malicious pickle would."""

    def __reduce__(self):
        return (_ran, ())


def test_bios_reads_plain_data_pickles_and_refuses_code_unless_trusted(tmp_path, capsys):
    root = tmp_path / "bios"
    write_bios(root)
    with open(root / "dev.pickle", "rb") as f:
        records = pickle.load(f)
    records[0]["p"] = _Boom()
    with open(root / "dev.pickle", "wb") as f:
        pickle.dump(records, f)
    with pytest.raises(InputError, match="dev.pickle: the pickle refers to .*_ran.*trust_pickle"):
        load_dataset("bios", path=str(root))
    assert "code from a pickle ran" not in capsys.readouterr().out
    load_dataset("bios", path=str(root), trust_pickle=True)  # the user's explicit trust
    assert "code from a pickle ran" in capsys.readouterr().out
