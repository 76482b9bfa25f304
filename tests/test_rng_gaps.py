"""DP-SGD's and PF-LD's Poisson sample drawn by geometric gaps (``_rng.gap_sample``): every row
included independently at exactly coins' rate T / 2^64, each gap decided as the exact
definition decides it (floating-point logarithms only where their error cannot matter), two
draws a call; and a study's rows record which sampler drew them, resuming with theirs."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fairdp import _rng
from fairdp.engine import TrainSettings
from fairdp.errors import InputError
from fairdp.methods import get_method
from fairdp.metrics import ProbeSettings
from fairdp.study import ResultStore, parse_spec, study_columns
from fairdp.study.executors import Pack, StudyContext, run_pack
from fairdp.study.run._resume_checks import choose_sampler
from tests.conftest import run_cli

WORD = 2**64


def _reference_gap(u: int, words: list[int], skip: int, cap: int) -> int:
    """max{g <= cap : V < r^g}, r = skip / 2^64, in exact fractions, for V inside the cell that u
    and ``words`` fix (its midpoint: the implementation decides a gap only once V's cell lies on
    one side of every r^g it compares with)."""
    bits = len(words) * 64
    prefix = u
    for w in words:
        prefix = (prefix << 64) | w
    v = Fraction(2 * prefix + 1, 2 ** (64 + bits + 1))
    r = Fraction(skip, WORD)
    g = 0
    while g < cap and v < r ** (g + 1):
        g += 1
    return g


def _decided(u: int, skip: int, cap: int, words: list[int], tolerance: float) -> int:
    taken = iter(words)
    gaps = _rng._gaps(np.array([[u]], dtype=np.uint64), skip, _rng._log_rate(skip), cap, tolerance,
                      np.array([0]), lambda c: next(taken))
    return int(gaps[0, 0])


def _boundary_word(skip: int, g: int, delta: int) -> int:
    """A word whose cell holds, or neighbours, r^g's: where a float decision is in doubt."""
    return min(max((skip**g >> (64 * g - 64)) + delta, 0), WORD - 1)


@st.composite
def _cases(draw):
    skip = draw(st.one_of(st.integers(1, WORD - 1), st.integers(WORD - 2**48, WORD - 1),
                          st.integers(1, 2**20)))  # any rate; rates near 0 (long gaps); near 1
    cap = draw(st.integers(1, 40))
    g = draw(st.integers(1, cap))
    u = draw(st.one_of(st.integers(0, WORD - 1), st.just(0), st.just(WORD - 1),
                       st.builds(_boundary_word, st.just(skip), st.just(g), st.integers(-2, 2))))
    words = draw(st.lists(st.integers(0, WORD - 1), min_size=cap + 2, max_size=cap + 2))
    return skip, cap, u, words


@settings(max_examples=400, deadline=None)
@given(_cases(), st.sampled_from([_rng.GAP_TOLERANCE, 1e9]))
def test_each_gap_is_the_exact_definitions_on_and_off_its_cells_boundaries(case, tolerance):
    """Any rate, any word (boundary cells of r^g on purpose, and the extremes), the float path
    (its tolerance) and the exact path alone (tolerance 1e9 sends every gap there): the gap is
    max{g : V < r^g} computed in fractions, capped."""
    skip, cap, u, words = case
    assert _decided(u, skip, cap, words, tolerance) == _reference_gap(u, words, skip, cap)


def test_a_cell_across_r_squared_takes_the_next_words_to_decide():
    """r^2 has 128 bits: the cell of u = its first 64 holds it, and V's next word decides."""
    skip = WORD - 12345
    u = skip**2 >> 64
    low = skip**2 & (WORD - 1)
    for nxt, gap in ((low - 1, 2), (low, 1), (low + 1, 1)):  # V < r^2 exactly when its next 64 bits are below
        assert _decided(u, skip, 5, [nxt, 0, 0], _rng.GAP_TOLERANCE) == gap


def _subset_counts(samples: list[np.ndarray], n: int) -> np.ndarray:
    counts = np.zeros(2**n)
    for rows in samples:
        counts[int(sum(1 << int(r) for r in rows))] += 1
    return counts


@pytest.mark.parametrize("prob", [0.3, 0.05, 0.9])
@pytest.mark.parametrize("tolerance", [_rng.GAP_TOLERANCE, 1e9])
def test_rows_are_included_independently_at_the_exact_rate(prob, tolerance):
    """The law of the whole sample: over 30,000 configs' draws of 5 rows, each of the 32 subsets
    comes up as often as independent inclusion at p = floor(prob 2^64) / 2^64 says (chi-square,
    p-value above 1e-6), by the float path and by the exact path alone, which draw the same
    samples. A gap off by one row, a rate not the exact one, or rows not independent are
    refused."""
    n, configs = 5, 30_000
    p = _rng.exact_threshold(prob) / WORD
    names = [f"law/{prob}/{i}/sample" for i in range(configs)]
    samples = _rng.gap_sample(n, prob, _rng.PackStream.from_names(names), tolerance=tolerance)
    if tolerance != _rng.GAP_TOLERANCE:
        fast = _rng.gap_sample(n, prob, _rng.PackStream.from_names(names))
        assert all(np.array_equal(a, b) for a, b in zip(samples, fast))
    assert all(np.array_equal(rows, np.unique(rows)) and (rows >= 0).all() and (rows < n).all() for rows in samples)
    expected = np.array([p ** bin(s).count("1") * (1 - p) ** (n - bin(s).count("1")) for s in range(2**n)]) * configs
    observed = _subset_counts(samples, n)
    # pool the subsets expected fewer than 5 times (chi-square's approximation needs it)
    small = expected < 5
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    assert stats.chisquare(obs, exp).pvalue > 1e-6


def test_a_plausible_bug_is_refused_by_the_law_test():
    """The law test's power: gaps one row short (rows = cumsum(gaps), no + 1) fail it."""
    n, configs, prob = 5, 30_000, 0.3
    samples = _rng.gap_sample(n, prob, _rng.PackStream.from_names([f"bug/{i}/sample" for i in range(configs)]))
    # the planted bug: each sampled row moved up by its rank (the gaps' + 1 dropped)
    shifted = [rows - np.arange(len(rows)) for rows in samples]
    shifted = [np.unique(rows) for rows in shifted]
    p = _rng.exact_threshold(prob) / WORD
    expected = np.array([p ** bin(s).count("1") * (1 - p) ** (n - bin(s).count("1")) for s in range(2**n)]) * configs
    assert stats.chisquare(_subset_counts(shifted, n), expected).pvalue < 1e-12


def test_large_samples_hold_the_rate_and_each_row_is_drawn_alike():
    """30,162 rows at B = 256: the sizes over 400 configs are Binomial(n, p) (their sum), and no
    row's inclusion count is far from the others (rows late in the set reached by long gap
    chains are drawn as often as the first)."""
    n, b, configs = 30_162, 256, 400
    q = b / n
    p = _rng.exact_threshold(q) / WORD
    assert p <= q
    samples = _rng.gap_sample(n, q, _rng.PackStream.from_names([f"big/{i}/sample" for i in range(configs)]))
    total = sum(len(rows) for rows in samples)
    assert stats.binomtest(total, n * configs, p).pvalue > 1e-6
    counts = np.bincount(np.concatenate(samples), minlength=n)
    first, last = counts[: n // 2].sum(), counts[n // 2:].sum()
    assert stats.binomtest(int(first), int(first + last), (n // 2) / n).pvalue > 1e-6


def test_two_draws_a_call_and_a_configs_sample_does_not_depend_on_its_pack():
    names = [f"pack/{i}/sample" for i in range(6)]
    pack = _rng.PackStream.from_names(names)
    together = [_rng.gap_sample(500, 0.2, pack) for _ in range(3)]
    assert pack.draws.tolist() == [6] * 6
    for k in range(6):
        alone = _rng.PackStream.from_names([names[k]])
        for step in range(3):
            assert np.array_equal(_rng.gap_sample(500, 0.2, alone)[0], together[step][k])
    sub = _rng.PackStream.from_names(names)[[1, 4]]
    assert np.array_equal(_rng.gap_sample(500, 0.2, sub)[1], together[0][4])


@pytest.mark.parametrize("prob, n, want", [(0.0, 10, 0), (1.0, 10, 10), (0.5, 0, 0), (1e-300, 10, 0)])
def test_rates_zero_and_one_and_an_empty_set(prob, n, want):
    stream = _rng.PackStream.from_names(["edge/0/sample", "edge/1/sample"])
    samples = _rng.gap_sample(n, prob, stream)
    assert [len(rows) for rows in samples] == [want, want] and stream.draws.tolist() == [2, 2]
    if want == n:
        assert all(np.array_equal(rows, np.arange(n)) for rows in samples)
    with pytest.raises(ValueError, match="prob must be in"):
        _rng.gap_sample(10, 1.5, stream)
    with pytest.raises(ValueError, match="prob must be in"):
        _rng.gap_sample(10, math.nan, stream)


# -- the study: rows say which sampler drew them, and a study resumes with its own -----------------

def _context(tmp_path, sampler: str | None) -> StudyContext:
    return StudyContext(study="gaps", dataset="synthetic", dataset_options={"rows": 600, "features": 8, "seed": 1},
                        train=TrainSettings(epochs=1, batch_size=64, dtype="float64", sampler=sampler),
                        leakage=False, mdl=False, probe=ProbeSettings(max_epochs=2), results=str(tmp_path),
                        cpus_per_trial=1, columns=tuple(study_columns(["dpsgd", "unconstrained"])))


def _train(ctx, seed: int = 0) -> None:
    for name, configs in (("dpsgd", ({"eps": 1.0, "clip_primal": 1.0},)), ("unconstrained", ({},))):
        method = get_method(name)
        run_pack(ctx, Pack(name, seed, configs, tuple(method.config_id(c) for c in configs)))


def test_rows_record_the_sampler_the_samplers_differ_and_old_rows_resume_with_coins(tmp_path):
    rows = {}
    for sampler in ("gaps", "coins"):
        _train(_context(tmp_path / sampler, sampler))
        rows[sampler], corrupt = ResultStore(tmp_path / sampler).read()
        assert corrupt == []
        got = rows[sampler].set_index("method")["sampler"]
        assert got["dpsgd"] == sampler and pd.isna(got["unconstrained"])
    a, b = (rows[s].set_index("method").loc["dpsgd"] for s in ("gaps", "coins"))
    assert a["test_confusion"] != b["test_confusion"] or a["valid_accuracy"] != b["valid_accuracy"]
    # left open, a study follows its rows; with none stored, gaps
    train = TrainSettings()
    assert choose_sampler(train, rows["coins"], "r") == "coins"
    assert choose_sampler(train, rows["gaps"], "r") == "gaps"
    assert choose_sampler(train, rows["gaps"].iloc[:0], "r") == "gaps"
    # rows from before the column (every file without it) were drawn by coins
    for path in ResultStore(tmp_path / "coins").pack_files():
        pq.write_table(pq.read_table(path).drop_columns(["sampler"]), path)
    old, _ = ResultStore(tmp_path / "coins").read()
    assert "sampler" not in old.columns and choose_sampler(train, old, "r") == "coins"
    with pytest.raises(InputError, match=r"^r: holds rows whose Poisson samples were drawn by coins, this run's "
                                         r"train\.sampler is gaps"):
        choose_sampler(TrainSettings(sampler="gaps"), old, "r")
    assert choose_sampler(TrainSettings(sampler="coins"), old, "r") == "coins"
    # rows without a Poisson-sampling method say nothing about the sampler
    assert choose_sampler(train, old[old["method"] == "unconstrained"], "r") == "gaps"


@pytest.mark.slow  # an end-to-end study through the CLI, twice: 23 s
def test_a_resumed_coins_study_trains_its_new_seed_as_a_coins_study_does(tmp_path):
    """A result set written before the choice existed (coins, no column) resumed with the sampler
    left open trains the new seed with coins: its rows are those of a study run with coins."""
    study = {"name": "resume", "dataset": {"name": "synthetic", "rows": 500, "features": 6}, "seeds": [0],
             "train": {"epochs": 1, "batch_size": 64, "sampler": "coins"},
             "evaluate": {"leakage": False, "mdl": False},
             "methods": {"dpsgd": {"grid": {"eps": [1.0], "clip_primal": [1.0]}}}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study))
    ref = run_cli("run", str(path), "--results", str(tmp_path / "ref"), "--executor", "local", "--seeds", "0,1")
    assert ref.returncode == 0, ref.stderr[-1500:]
    old = run_cli("run", str(path), "--results", str(tmp_path / "old"), "--executor", "local", "--no-compact")
    assert old.returncode == 0, old.stderr[-1500:]
    for file in ResultStore(tmp_path / "old").pack_files():
        pq.write_table(pq.read_table(file).drop_columns(["sampler"]), file)
    del study["train"]["sampler"]
    path.write_text(yaml.safe_dump(study))
    resumed = run_cli("run", str(path), "--results", str(tmp_path / "old"), "--executor", "local", "--seeds", "0,1")
    assert resumed.returncode == 0, resumed.stderr[-1500:]
    assert "Poisson samples by coins" in resumed.stdout + resumed.stderr
    got, _ = ResultStore(tmp_path / "old").read()
    want, _ = ResultStore(tmp_path / "ref").read()
    got, want = (df[df["seed"] == 1].iloc[0] for df in (got, want))
    assert got["sampler"] == "coins" and got["test_confusion"] == want["test_confusion"]
    assert got["valid_accuracy"] == want["valid_accuracy"]
    # asked for gaps on those rows: refused in one line, exit 2, nothing written
    study["train"]["sampler"] = "gaps"
    path.write_text(yaml.safe_dump(study))
    before = sorted(ResultStore(tmp_path / "old").pack_files())
    refused = run_cli("run", str(path), "--results", str(tmp_path / "old"), "--executor", "local", "--seeds", "2")
    assert refused.returncode == 2 and "train.sampler is gaps" in refused.stderr
    assert sorted(ResultStore(tmp_path / "old").pack_files()) == before


def test_a_bad_sampler_is_refused_naming_the_key():
    with pytest.raises(InputError, match=r"^train\.sampler: must be one of gaps, coins"):
        TrainSettings(sampler="bytes")
    study = {"name": "x", "dataset": {"name": "synthetic", "rows": 200, "features": 4}, "seeds": [0],
             "train": {"epochs": 1, "sampler": "Gaps"}, "methods": {"dpsgd": {}}}
    with pytest.raises(InputError, match=r"^train\.sampler: must be one of gaps, coins"):
        parse_spec(study)
    assert parse_spec({**study, "train": {"sampler": "coins"}}).train.sampler == "coins"
    with pytest.raises(InputError, match=r"^train\.sampler: no method of the study draws a Poisson sample"):
        parse_spec({**study, "train": {"sampler": "gaps"}, "methods": {"unconstrained": {}}})

