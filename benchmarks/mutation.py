"""One-token mutation testing of the modules behind every published number (issue 40).

    .venv/bin/python benchmarks/mutation.py                  # DEFAULT_MODULES, the working tree
    .venv/bin/python benchmarks/mutation.py select pareto    # some of them (keys of MODULES)
    .venv/bin/python benchmarks/mutation.py --rev b6471eb    # sources and tests of a commit (the "before" figures)
    .venv/bin/python benchmarks/mutation.py --list select    # the mutants only, nothing run
    .venv/bin/python benchmarks/mutation.py lagrangian --function PrivateLagrangianStep.update

Not part of any test run: it takes minutes to an hour a module on 2 cores (docs/benchmarks.md has
the figures).

What it does. The tree (the working tree's ``fairdp/``, ``tests/`` and ``pyproject.toml``, or
``git archive`` of ``--rev``) is copied to a temporary directory: nothing in the checkout is
ever rewritten, so it can run while others edit it. Each mutant is a change of ONE token of a
module's source, outside docstrings and annotations:

- operators: ``+ -``, ``* /``, ``// -> /``, ``% -> /``, ``** -> *``, ``< <=``, ``> >=``, ``== !=``,
  ``& |``, ``^ -> &``, the augmented forms; a unary ``-``, ``~`` or ``not`` deleted;
  ``and or``, ``is -> is not``, ``in -> not in``;
- names: ``True False``, ``min max`` (and ``minimum maximum``, ``amin amax``, ``argmin argmax``,
  ``nanmin nanmax``, ``idxmin idxmax``), ``any all``, ``floor ceil``;
- numbers: n -> n + 1 (as mutmut does);
- the strings ``"min" "max"`` and ``"first" "last"`` (pandas' aggregation and keep= arguments);
  other strings (column names, messages) are not mutated.

A mutant that does not compile, or compiles to the module's own AST, is dropped. A module's entry
in ``MODULES`` may name the functions to mutate (the rest of the module is not measured). A
mutant runs against the tests that execute its function: one traced run of the module's test
files (below, ``MODULES``; the fast set only, ``-m "not slow"``, what ``make test`` runs)
records which test executes which lines; a mutant in a function runs the tests that executed a
line of that function, a mutant outside any function (module constants), or in a function run
while the module is imported (a table built at import), all of the module's tests. Tests run
fastest first, with ``-x``, in a process forked from one that has
already imported pytest, numpy, pandas, torch and the other libraries (never fairdp: each
mutant imports fairdp afresh, with its module's source replaced in memory). A mutant is killed
when a test fails or errors, or when a test runs past ``--timeout-factor`` times its traced
unmutated time plus 2 s (an endless loop) and again when rerun with limits ``--recheck-factor``
times longer (so that a loaded machine does not turn a survivor into a kill); it survives when
they pass, or when no test executes its function. Mutants listed in ``EQUIVALENT`` (each with why it cannot change a result) are left
out of the rate. Kill rate = killed / (mutants - equivalent).

A test that reaches a function only through a cache (``functools.lru_cache`` on the
calibrations) does not execute it and is not counted as its test: tests of the cached search
call ``__wrapped__``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# module key -> (source file, test files that call it, the functions mutated: None for the whole
# module, else qualified names ("Class.method"), module-level code left out). Test files missing
# from the tree (an older --rev) are skipped. Only the fast set runs (-m "not slow"): the tests
# that would notice a mutant must be ones `make test` runs.
_PRIVACY_TESTS = ("tests/test_privacy_mechanisms.py", "tests/test_privacy_discrete.py", "tests/test_privacy_grid_kernel.py")
_CLIPPING_TESTS = ("tests/test_engine.py", "tests/test_engine_functional.py", "tests/test_privacy_row_mixing.py",
                   "tests/test_methods_dpsgd.py", "tests/test_methods_lagrangian.py")
MODULES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...] | None]] = {
    "fairness": ("fairdp/fairness.py", ("tests/test_metrics_fairness.py", "tests/test_metrics_fairness_rules.py"), None),
    "select": ("fairdp/analysis/_select.py", ("tests/test_analysis_select.py", "tests/test_analysis_select_rules.py"),
               None),
    "accounting": ("fairdp/privacy/_accounting.py", ("tests/test_privacy_accounting.py", "tests/test_methods_dpsgd.py",
                                                     "tests/test_privacy_accounting_rules.py"), None),
    "pareto": ("fairdp/analysis/_pareto.py", ("tests/test_analysis_pareto.py", "tests/test_analysis_pareto_rules.py"),
               None),
    # issue 60: every module behind a published eps
    "mechanisms": ("fairdp/privacy/_mechanisms.py", _PRIVACY_TESTS, None),
    "discrete": ("fairdp/privacy/_discrete.py", _PRIVACY_TESTS, None),
    "grid_kernel": ("fairdp/privacy/_grid_kernel.py", _PRIVACY_TESTS, None),
    "rdp_guide": ("fairdp/privacy/_rdp_guide.py", ("tests/test_privacy_rdp_guide.py", "tests/test_privacy_accounting.py"),
                  None),
    "per_sample": ("fairdp/engine/_per_sample.py", _CLIPPING_TESTS, None),
    # the functional path's per-sample clipping, not its packing (initialisation, dropout, stages)
    "functional": ("fairdp/engine/_functional.py", _CLIPPING_TESTS,
                   ("row_mixing", "FunctionalPack.per_sample_grads", "FunctionalPack._rows_alone",
                    "FunctionalPack.batch_grad", "FunctionalPack.forward_traced", "FunctionalPack.add_clipped",
                    "_trailing")),
    # PF-LD's private steps (clipped private term, its noise and sensitivity, the Poisson sample,
    # the dual release) and DP-SGD's Poisson sample; not F-LD's non-private step
    "lagrangian": ("fairdp/methods/_lagrangian.py", ("tests/test_methods_lagrangian.py", "tests/test_methods_dpsgd.py"),
                   ("h_all", "binary_slopes", "poisson_sample", "PrivateLagrangianStep.__init__",
                    "PrivateLagrangianStep._slots", "PrivateLagrangianStep._count_population",
                    "PrivateLagrangianStep._normalisers", "PrivateLagrangianStep.coefficients",
                    "PrivateLagrangianStep.primal_sensitivity", "PrivateLagrangianStep.poisson_sample",
                    "PrivateLagrangianStep.update", "PrivateLagrangianStep.end_epoch")),
    "guarantee": ("fairdp/privacy/_guarantee.py", ("tests/test_analysis_relations.py", "tests/test_privacy_release.py",
                                                  "tests/test_privacy_pld.py"), None),
    "release": ("fairdp/privacy/_release.py", ("tests/test_privacy_release.py", "tests/test_privacy_pld.py"), None),
    "audit": ("fairdp/privacy/audit.py", ("tests/test_privacy_audit.py",), None),
    "training_audit": ("fairdp/privacy/training_audit.py", ("tests/test_privacy_training_audit.py",), None),
}
# what running the script without module names measures
DEFAULT_MODULES = tuple(MODULES)

# Mutants that cannot change any result, so no test can kill them: (file, enclosing function
# (None: module level), the source line stripped, the token, which occurrence of that token ->
# replacement in the line (0 = first), its replacement ("" = deleted), why).
_AXIS = "the arrays are 2-D (configs, classes), so axis 1 is axis -1"
# step_loss is the log of the largest of its ratios; these mutants lower one that is never the largest
_NOT_MAX = ("lowers (or leaves below 1) a ratio that is never step_loss's largest: for every t the tables use "
            "(8192 < t <= 16400 checked one by one; the lead grows with t) a ratio across two V values leads the Z = 0, "
            "within-U and tail ratios by over 7e-5 of the loss (V's counts are rounded to 1e-8 relative, the others' "
            "to 1e-13)")
_WITHIN = ("ratios += [float(within.max()) * (1 + 2.0 ** -50), float((1 / within).max()) * (1 + 2.0 ** -50)]")
_INVERSION_CHUNKS = ("where the sampler cuts the pmf into chunks: the CDF of each k is the same sum up to the "
                     "rounding of its grouping (within 3 ulps, checked at means 1.0001 to 400 and shapes 1e-5 to "
                     "1), so a draw differs only for a uniform within those few ulps of a CDF step past k = 64 "
                     "(about 1e-15 a draw); no seed is known to reach it")
_INVERSION_STOP = ("when the sampler stops summing the pmf: it matters only for a uniform above the partial sum where "
                   "the chunk's first terms add under half an ulp of it, a gap of a few ulps below the support's float "
                   "total (about 1e-15 a draw; identical totals at means 1.0001 to 400, shapes 1e-5 to 1); no seed is "
                   "known to reach it")
EQUIVALENT: list[tuple[str, str | None, str, str, int, str, str]] = [
    # fairdp/privacy/audit.py
    ("fairdp/privacy/audit.py", "_statistics", "return (torch.clamp(z - centre, -half, half) * sign).sum(dim=-1)",
     "-", 1, "", "the statistic reads a batch of outputs, (rows, D) from _draws: dim 1 is dim -1"),
    # fairdp/privacy/_release.py
    *[("fairdp/privacy/_release.py", f, "@functools.lru_cache(maxsize=4096)", "4096", 0, "4097",
       "the cache's capacity: a curve is the same whether cached or computed") for f in ("_step_rdp", "_leaf_rdp")],
    *[("fairdp/privacy/_release.py", f, "curve.setflags(write=False)", "False", 0, "True",
       "only makes the cached curve writable: its one reader, rdp_curve (through _leaf_steps, private), adds "
       "count * curve into a fresh array and never writes it, and no curve of the cache reaches a caller")
      for f in ("_step_rdp", "_leaf_rdp")],
    ("fairdp/privacy/_release.py", "_truncated_negative_binomial_by_inversion",
     "u, total, first, size = rng.random(), 0.0, 1, 64  # most draws end in the first chunk: start small",
     "64", 0, "65", _INVERSION_CHUNKS),
    ("fairdp/privacy/_release.py", "_truncated_negative_binomial_by_inversion",
     "total, first, size = float(cdf[-1]), first + size, min(size * 2, _MAX_CHUNK)", "2", 0, "3", _INVERSION_CHUNKS),
    ("fairdp/privacy/_release.py", None, "_MAX_CHUNK = 1 << 20", "20", 0, "21", _INVERSION_CHUNKS),
    ("fairdp/privacy/_release.py", None, "_MAX_CHUNK = 1 << 20", "1", 0, "2", _INVERSION_CHUNKS),
    *[("fairdp/privacy/_release.py", "_truncated_negative_binomial_by_inversion", "if cdf[-1] == total:", token, 0, new,
       _INVERSION_STOP) for token, new in (("-", ""), ("1", "2"))],
    ("fairdp/privacy/_release.py", "truncated_negative_binomial_gamma", "lo, hi = 0.0, 1.0", "1.0", 0, "2.0",
     "reached only for mean > 1: the first midpoint is then 1, whose mean is 1 < mean, so hi becomes 1 and the "
     "bisection goes on from (0, 1) as the original starts"),
    ("fairdp/fairness.py", None, "@dataclass(frozen=True)", "True", 0, "False",
     "frozen only forbids assigning to a _Counts field, which nothing does"),
    ("fairdp/fairness.py", "_Counts.classes", "return slice(1, 2) if self.binary else slice(None)", "2", 0, "3",
     "binary means C == 2 (C is at least 2), and on an axis of length 2 slice(1, 3) is slice(1, 2)"),
    ("fairdp/fairness.py", "_confusion", "yp2 = yp.reshape(-1, n)", "1", 0, "2",
     "NumPy's reshape reads any negative size as the inferred one: -2 is -1"),
    ("fairdp/fairness.py", "scores_from_confusion", "c = _from_confusion(conf.reshape(-1, *conf.shape[-3:]))",
     "1", 0, "2", "NumPy's reshape reads any negative size as the inferred one: -2 is -1"),
    ("fairdp/fairness.py", "scores_from_confusion",
     "if conf.ndim < 3 or conf.shape[-1] != conf.shape[-2] or conf.shape[-1] < 2:", "1", 1, "2",
     "reached only when shape[-1] == shape[-2] (the test before it), so shape[-2] < 2 is shape[-1] < 2"),
    ("fairdp/fairness.py", "_from_confusion",
     "def _from_confusion(conf: np.ndarray, packed: bool = True) -> _Counts:", "True", 0, "False",
     "the one caller that takes the default, scores_from_confusion, never reads packed (only _Counts.out does)"),
    *[("fairdp/fairness.py", "_spread",
       "return np.where(defined, hi, 0.0) - np.where(defined, lo, 0.0), defined", "0.0", k, "1.0",
       "the value of an undefined gap: every reader (_max, _ap_gap) masks it with `defined` first") for k in (0, 1)],
    ("fairdp/fairness.py", "_max", "top = np.where(ok, gap, -np.inf).max(axis=-1)", "-", 1, "", _AXIS),
    ("fairdp/fairness.py", "_max", "return np.where(ok.any(axis=-1), top, np.nan)", "-", 0, "", _AXIS),
    ("fairdp/fairness.py", "_grms", "m = ok.sum(axis=-1)", "-", 0, "", _AXIS),
    ("fairdp/fairness.py", "_grms", "mean_sq = np.divide((np.where(ok, gap, 0.0) ** 2).sum(axis=-1), m,", "-", 0, "",
     _AXIS),
    *[("fairdp/fairness.py", "_eo_gap",
       "return _max(np.concatenate([tpr, fpr], -1), np.concatenate([tpr_ok, fpr_ok], -1))", "-", k, "", _AXIS)
      for k in (0, 1)],
    *[("fairdp/fairness.py", "macro_f1", "return c.out(f1.sum(axis=-1) / ok.sum(axis=-1))", "-", k, "",
       "f1 and ok are 2-D (configs, classes), so axis 1 is axis -1") for k in (0, 1)],
    *[("fairdp/analysis/_select.py", "_pick", "return df.iloc[0:0].reset_index(drop=True)", "0", k, "1",
       "reached only when df is empty, where every slice is empty") for k in (0, 1)],
    ("fairdp/analysis/_select.py", "_pick",
     'alpha = df.groupby(keys, sort=False, dropna=False)["valid_accuracy"].transform("max")', "False", 0, "True",
     "transform returns one value per row, aligned to the rows, whatever the order of the groups"),
    ("fairdp/analysis/_select.py", "rt_sweep", "out = pd.concat(parts, ignore_index=True)", "True", 0, "False",
     "the stacked table is sorted (stable mergesort) and its index dropped on the next line"),
    ("fairdp/analysis/_select.py", "fairness_accuracy_bins",
     'best = rows.groupby([*RUN_KEYS, "accuracy_bin"], sort=False)[fcol].min().reset_index()', "False", 0, "True",
     "_aggregate groups best again, sorted: the order of best's rows cannot reach the result"),
    ("fairdp/analysis/_select.py", "privacy_accuracy_by_eps",
     'emax = chosen.groupby(["dataset", "method", "eps"], sort=True)["eps_formal"].max()', "True", 0, "False",
     "chosen comes out of _pick sorted by dataset, method, eps (no NaN eps), so its groups already come in "
     "sorted order"),
    *[("fairdp/privacy/_accounting.py", f, "@functools.lru_cache(maxsize=1024)", "1024", 0, "1025",
       "the cache's capacity: a result is the same whether it was cached or computed")
      for f in ("calibrate_pfld_sigmas", "calibrate_dpsgd_sigma")],
    ("fairdp/privacy/_accounting.py", "_smallest_sigma", "lo, hi = 0.5, 1.0", "1.0", 0, "2.0",
     "the first bisection step of (0.5, 2) is sqrt(0.5 * 2) = 1, which leads to the bracket (0.5, 1) or (1, 2) the "
     "original reaches: the same powers of 2, the same steps after"),
    ("fairdp/privacy/_accounting.py", "_smallest_sigma", "while epsilon_of(hi) > target:", ">", 0, ">=",
     "differs only when eps(hi) == target exactly; the next loop then halves back to the bracket the original has"),
    ("fairdp/privacy/_accounting.py", "_smallest_sigma", "while hi > lo * (1 + _SIGMA_RTOL):", ">", 0, ">=",
     "differs only when hi == lo * 1.001 exactly in floating point (then one more step, whose result still meets the "
     "target within 1e-3 of the smallest); no input is known to reach it"),
    ("fairdp/analysis/_pareto.py", "_as_min", "return values * sign", "*", 0, "/",
     "sign is +1.0 or -1.0, and x / -1.0 is x * -1.0 exactly"),
    ("fairdp/analysis/_pareto.py", "_nondominated_mask",
     "def _nondominated_mask(y: np.ndarray, block: int = 256) -> np.ndarray:", "256", 0, "257",
     "the block size only cuts the dominance test into chunks; no row's answer depends on it"),
    ("fairdp/analysis/_pareto.py", "_hv", "return 0.0", "0.0", 0, "1.0",
     "unreachable: hypervolume returns before calling _hv without points, and each recursion passes one or more"),
    ("fairdp/analysis/_pareto.py", "_hv", "if height > 0:", ">", 0, ">=", "a slice of height 0 adds 0 * a finite volume"),
    ("fairdp/analysis/_pareto.py", "_hv", "if d > 3:  # the 2-D sweep skips dominated points by itself", ">", 0, ">=",
     "dropping dominated points before recursing is a speed-up: they do not change the union of boxes"),
    ("fairdp/analysis/_pareto.py", "_hv", "if d > 3:  # the 2-D sweep skips dominated points by itself", "3", 0, "4",
     "dropping dominated points before recursing is a speed-up: they do not change the union of boxes"),
    ("fairdp/analysis/_pareto.py", "hypervolume", "p = p[(p < r).all(axis=1)]", "<", 0, "<=",
     "a point on the reference plane bounds a box of zero width, and dominates only points on or beyond that plane"),
    ("fairdp/analysis/_pareto.py", "hypervolume", "if d > 2:", ">", 0, ">=",
     "dropping dominated and repeated points first is a speed-up: they do not change the union of boxes"),
    ("fairdp/analysis/_pareto.py", "hypervolume", "if d > 2:", "2", 0, "3",
     "dropping dominated and repeated points first is a speed-up: they do not change the union of boxes"),
    ("fairdp/analysis/_pareto.py", "dto_select", "ratio = up / np.where(best > 0, best, 1.0)", "1.0", 0, "2.0",
     "the divisor where the best is 0, so every value is 0: 0 / 2 is 0 / 1"),
    ("fairdp/analysis/_pareto.py", "dto_minmax_select", "span = np.where(hi > lo, hi - lo, 1.0)", "1.0", 0, "2.0",
     "the divisor where the objective is constant, so y - lo is 0 for every row: 0 / 2 is 0 / 1"),
    ("fairdp/analysis/_pareto.py", "select_per_run", "return rows.iloc[0:0]", "0", 0, "1",
     "rows.iloc[1:0] is empty, as rows.iloc[0:0]"),
    # fairdp/privacy/_mechanisms.py
    ("fairdp/privacy/_mechanisms.py", None, "@dataclass(frozen=True)", "True", 0, "False",
     "frozen only forbids assigning to a _DeviceTables field, which nothing does"),
    ("fairdp/privacy/_mechanisms.py", "_stack", "width = 1 << max(m.u_bits for m in mechs)", "1", 0, "2",
     "only pads each mechanism's row of the stacked alias tables wider: every path reads entry j * width + "
     "bucket, bucket < 2^u_bits[j], with width read back from the table's length"),
    ("fairdp/privacy/_mechanisms.py", "_stack",
     "per(which), torch.as_tensor(table.reshape(-1).view(np.int64), device=device),", "1", 0, "2",
     "NumPy's reshape reads any negative size as the inferred one: -2 is -1"),
    *[("fairdp/privacy/_mechanisms.py", "_released",
       'if flat.device.type == "cuda" and _compiled_release is not False:', token, 0, new,
       "whether the compiled or the eager release runs (speed only): the two compute the same values bit for bit "
       "(integer arithmetic and multiplications by powers of two; tests/test_cuda.py holds them equal)")
      for token, new in (("==", "!="), ("and", "or"), ("not", ""))],
    *[("fairdp/privacy/_mechanisms.py", "_released",
       "_compiled_release = torch.compile(_release_from_words, dynamic=True, fullgraph=True)", "True", k, "False",
       "compiler options: the compiled release computes the eager one's values bit for bit either way") for k in (0, 1)],
    ("fairdp/privacy/_mechanisms.py", "_released", '"computing it eagerly", stacklevel=2)', "2", 0, "3",
     "which caller's line the one warning is attributed to; its text and count are unchanged"),
    ("fairdp/privacy/_mechanisms.py", "_released_by_numpy", "table = u_table[j * width:(j + 1) * width]", "1", 0,
     "2", "the slice's end: buckets index below 2^u_bits <= width, so a longer slice is read at the same entries"),
    ("fairdp/privacy/_mechanisms.py", "_eps_values", "slices = len(values) if len(values) > 1 else 1", ">", 0, ">=",
     "len(values) >= 1 picks len(values), which is 1 where len(values) > 1 does not hold but >= 1 does; with no "
     "value both give 1"),
    ("fairdp/privacy/_mechanisms.py", "_mantissa_bits", "return 53 if dtype == torch.float64 else 24", "53", 0, "54",
     "a float64 row's rounding moves its integer L1 norm, 2^g (1 + (D + 1) 2^-53 / ...), g <= 17, only for D >= "
     "2^36 entries (a 512 GiB row): 53 and 54 bits give the same tables for every row that fits in memory"),
    *[("fairdp/privacy/_mechanisms.py", f, "@functools.lru_cache(maxsize=64)", "64", 0, "65",
       "the cache's capacity: the tables are the same whether cached or built") for f in ("_l1_tables", "_minmax_tables")],
    ("fairdp/privacy/_mechanisms.py", "l1_normalize", "out = h / torch.where(no_direction, 1.0, norm)", "1.0", 0, "2.0",
     "the divisor of rows without direction, whose values (and so gradients) the next where replaces by 1/D"),
    ("fairdp/privacy/_mechanisms.py", "l1_normalize", 'if h.device.type != "cpu" or no_direction.any():', "!=", 0,
     "==", "applies the where that replaces rows without direction on every CPU call and on a GPU only when there is "
     "one: where there is none it changes nothing"),
    ("fairdp/privacy/_mechanisms.py", "minmax_normalize", "out = (h - low) / torch.where(has_range, span, 1)", "1", 0,
     "2", "the divisor of rows without range, whose values (and so gradients) the next where replaces by 0"),
    ("fairdp/privacy/_mechanisms.py", "minmax_normalize",
     'if h.device.type != "cpu" or not has_range.all():  # as in l1_normalize: no host wait on a GPU', "!=", 0, "==",
     "applies the where that zeroes rows without range on every CPU call and on a GPU only when there is one: where "
     "there is none it changes nothing"),
    ("fairdp/privacy/_mechanisms.py", "l2_privatize_like_federate_code",
     "unit = torch.where(nonzero, h / torch.where(nonzero, norm, 1), h.shape[-1] ** -0.5)", "1", 0, "2",
     "the divisor of zero rows, which the outer where replaces by 1/sqrt(D)"),
    # fairdp/privacy/_discrete.py
    ("fairdp/privacy/_discrete.py", "_alias", "left = list(counts) + [0] * (n - len(counts))", "-", 0, "+",
     "pads left past its n buckets: every list and loop reads range(n) only"),
    ("fairdp/privacy/_discrete.py", "_alias", "while small and large:", "and", 0, "or",
     "in exact integers the deficit of small equals the excess of large at every step, so the two lists are "
     "empty together: `or` stops when `and` does"),
    ("fairdp/privacy/_discrete.py", None, "@dataclass(frozen=True)", "True", 0, "False",
     "frozen only forbids assigning to a GridLaplace field, which nothing does (cached_property writes the "
     "instance dict)"),
    *[("fairdp/privacy/_discrete.py", "GridLaplace.step_loss", text, token, k, new, _NOT_MAX) for text, token, k, new in (
        ("nonzero = (1 << 63) - zero  # split evenly between the signs", "<<", 0, ">>"),
        ("nonzero = (1 << 63) - zero  # split evenly between the signs", "-", 0, "+"),
        ("ratios += [_ratio_bound(2 * zero << 128, one), _ratio_bound(one, 2 * zero << 128)]", "<<", 0, ">>"),
        ("ratios += [_ratio_bound(2 * zero << 128, one), _ratio_bound(one, 2 * zero << 128)]", "2", 1, "3"),
        ("ratios += [_ratio_bound(2 * zero << 128, one), _ratio_bound(one, 2 * zero << 128)]", "128", 1, "129"),
        *[(_WITHIN, token, k, new) for k in (0, 1) for token, new in (
            ("max", "min"), ("*", "/"), ("+", "-"), ("2.0", "3.0"), ("**", "*"), ("50", "51"))],
        (_WITHIN, "/", 0, "*"),
        ("for v in range(VMAX - 1):", "1", 0, "2"),
        ("tail = cv[VMAX] << 64", "64", 0, "65"),
        ("last = cv[VMAX - 1] * cu[-1]", "*", 0, "/"),
        ("ratios.append(_ratio_bound(last + tail, tail))", "+", 0, "-"))],
    ("fairdp/privacy/_discrete.py", "_build", "u_bits = max(1, (t - 1).bit_length())", "1", 0, "2",
     "t > 2^13 for every table (the noise scale is over GRID_STEPS / 2 grid steps), so (t - 1).bit_length() >= 14"),
    ("fairdp/privacy/_discrete.py", "laplace_minmax", "t = max(1, math.ceil(bound / eps))", "1", 0, "2",
     "bound / eps = 2^g / eps > GRID_STEPS / 2 = 8192 (g = floor(log2(GRID_STEPS eps))): the max is never 1 or 2"),
    ("fairdp/privacy/_discrete.py", "_check_clamp", "if mech.clamp < mech.bound + 4 * mech.t:", "<", 0, "<=",
     "clamp = 1 + t VMAX - L equals L + 4 t only if 2 L = 1 + 24 t, an even number equal to an odd one"),
    *[("fairdp/privacy/_discrete.py", f, "@functools.lru_cache(maxsize=256)", "256", 0, "257",
       "the cache's capacity: the tables are the same whether cached or built") for f in ("laplace_l1", "laplace_minmax")],
    # fairdp/privacy/_grid_kernel.py: the kernel and the NumPy path release the same values bit for bit
    ("fairdp/privacy/_grid_kernel.py", "build",
     'tag = hashlib.sha256(source + "\\0".join((os.path.realpath(compiler), *FLAGS, sys.platform, '
     'platform.machine())).encode()).hexdigest()[:16]', "16", 0, "17",
     "the length of the cache key in the library's file name: 17 hex digits name the same builds as 16"),
    ("fairdp/privacy/_grid_kernel.py", "build", "capture_output=True, timeout=120)", "120", 0, "121",
     "a build that takes between 120 s and 121 s leaves the mechanism on the kernel or on the NumPy path, which "
     "release the same values bit for bit"),
    ("fairdp/privacy/_grid_kernel.py", "kernel",
     'detail = detail.decode(errors="replace").strip().splitlines()[:1] if detail else []', "1", 0, "2",
     "only detail[0], the first line, is read"),
    # fairdp/engine/_per_sample.py
    ("fairdp/engine/_per_sample.py", "_add_clipped", 'if weight.device.type != "cpu" or not finite.all():', "!=", 0,
     "==", "applies the wheres that drop rows whose gradient is not finite on every CPU call and on a GPU only when "
     "there is one: where there is none they change nothing"),
    *[("fairdp/engine/_per_sample.py", "_add_clipped", text, "0", 0, "1",
       "the value a row whose gradient is not finite gets here meets only its weight, which the next line zeroes "
       "(its coefficient is 0, its input multiplies a zero error, its norm counts nowhere: it is not weighted)")
      for text in ("inputs = [torch.where(keep, a, 0) for a in inputs]",
                   "deltas = [torch.where(keep, d, 0) for d in deltas]",
                   "per_layer_sq = [torch.where(finite, sq, 0) for sq in per_layer_sq]",
                   "norms = torch.where(finite, norms, 0)")],
    # fairdp/engine/_functional.py (the clipping functions)
    ("fairdp/engine/_functional.py", "row_mixing", "torch.manual_seed(1)", "1", 0, "2",
     "the second forward's seed only has to differ from the first's (0) for random numbers drawn outside "
     "nn.Dropout to show"),
    ("fairdp/engine/_functional.py", "FunctionalPack.per_sample_grads", "params, buffers = self._state(detach=True)",
     "True", 0, "False", "vjp differentiates with respect to the primals it is given, detached or not: the same "
     "values (detaching only keeps torch's autograd from recording the call outside no_grad)"),
    *[("fairdp/engine/_functional.py", f, "params, buffers = self._state(detach=True)", "True", 0, "False",
       "the same values from a parameter or its detached copy: forward_traced runs under torch.no_grad, and "
       "batch_grad's vjp differentiates with respect to the primals it is given, inside add_clipped's no_grad")
      for f in ("FunctionalPack.batch_grad", "FunctionalPack.forward_traced")],
    ("fairdp/engine/_functional.py", "FunctionalPack.add_clipped",
     "piece = piece.view(k, *step[n].shape[2:0:-1]).transpose(1, 2)", "2", 0, "3",
     "a linear weight's step is (K, out, in): the slice [3:0:-1] starts at its last axis as [2:0:-1] does, both "
     "(in, out)"),
    ("fairdp/engine/_functional.py", "FunctionalPack.add_clipped",
     'if norms.device.type != "cpu" or not finite.all():', "!=", 0, "==",
     "applies the wheres that drop rows whose gradient is not finite on every CPU call and on a GPU only when "
     "there is one: where there is none they change nothing"),
    *[("fairdp/engine/_functional.py", "FunctionalPack.add_clipped", text, "0", 0, "1",
       "the value a row whose gradient is not finite gets here meets only its weight, which is zeroed with it "
       "(its gradient and norms enter the sums times that weight, and it is not counted as weighted)")
      for text in ("g = {n: torch.where(_trailing(finite, t.dim()), t, 0) for n, t in g.items()}",
                   "sq = {n: torch.where(finite, t, 0) for n, t in sq.items()}",
                   "norms = torch.where(finite, norms, 0)")],
    # fairdp/methods/_lagrangian.py (PF-LD's private steps)
    *[("fairdp/methods/_lagrangian.py", "binary_slopes", "labels = y if y.dim() == 2 else y.expand(z.shape[:2])",
       token, 0, new, "per-config labels (K, B) and shared ones (B,) expanded to (K, B) broadcast against p1 (K, B) "
       "alike: either branch gives the same labels")
      for token, new in (("==", "!="), ("2", "3"))],
    *[("fairdp/methods/_lagrangian.py", "PrivateLagrangianStep._slots",
       "y = y if y.dim() == 2 else y.expand(self.ctx.k, -1)", token, 0, new,
       "per-config labels (K, B) and shared ones (B,) broadcast against is_eo (K, 1) in the next where alike: "
       "either branch gives the same slots")
      for token, new in (("==", "!="), ("2", "3"))],
    ("fairdp/methods/_lagrangian.py", "PrivateLagrangianStep._normalisers",
     "n1 = torch.nan_to_num(self.count1, nan=1.0)", "1.0", 0, "2.0",
     "count1 is NaN only before the first dual step, when every multiplier is still 0: the normaliser then divides "
     "a 0 (the first dual step sets the counts before it reads them)"),
    ("fairdp/methods/_lagrangian.py", "PrivateLagrangianStep.update", "optimizer.zero_grad(set_to_none=True)",
     "True", 0, "False", "the step's gradient is added to .grad, None or zeros: the same sum"),
    ("fairdp/methods/_lagrangian.py", "PrivateLagrangianStep.end_epoch",
     "if torch.isnan(self.count1).all():  # the first dual step also releases the counts", "all", 0, "any",
     "count1 is NaN everywhere until the first dual step sets every entry at once: all and any agree"),
    # fairdp/privacy/_rdp_guide.py
    ("fairdp/privacy/_rdp_guide.py", "_log_a_int", "counts = alphas.astype(np.int64) + 1", "1", 0, "2",
     "adds the term i = alpha + 1, whose log C(alpha, i) is -inf (gammaln(0) is +inf): exp(-inf) adds 0"),
    ("fairdp/privacy/_rdp_guide.py", "_log_a_frac",
     "def _log_a_frac(q: float, sigma: float, alphas: np.ndarray, block: int = 128) -> np.ndarray:", "128", 0, "129",
     "the block only cuts the series into chunks: each order's terms are accumulated one after the other, the "
     "carry and the previous term crossing each cut, and stopped at the same term"),
    *[("fairdp/privacy/_rdp_guide.py", "_log_a_frac",
       "done = (s0 < prev0) & (s1 < prev1) & (np.maximum(s0, s1) < total - 30) & open_[:, None]", "<", k, "<=",
       "moves the stop only at an exact tie (two consecutive terms bit-equal, or a term exactly 30 nats below the "
       "total), and then by one term below e^-30 of the total: under 1e-13 relative, far inside the 1e-9 this "
       "guide is held to (and only a guide: dp-accounting decides every answer near the target)") for k in range(3)],
    ("fairdp/privacy/_rdp_guide.py", "sampled_gaussian_rdp", "integer = orders == np.floor(orders)", "floor", 0,
     "ceil", "x == ceil(x) exactly when x == floor(x): when x is an integer"),
    ("fairdp/privacy/_rdp_guide.py", "epsilon_from_rdp",
     "eps = np.where((rdp < 0) | (delta**2 + np.expm1(-rdp) > 0), 0.0, eps)", "<", 0, "<=",
     "at rdp = 0 the other condition holds too: delta^2 + expm1(-0) = delta^2 > 0"),
    # fairdp/privacy/training_audit.py: the search's brackets are dyadic, so neither moving the
    # cap within (8192, 16384) nor starting from another power of two changes where it stops
    ("fairdp/privacy/training_audit.py", None, "_EPS_CAP = 1e4", "1e4", 0, "10001.0",
     "the doubling hi runs through powers of two: any cap in [8192, 16384) returns at the same hi = 16384"),
    ("fairdp/privacy/training_audit.py", "one_run_epsilon_lower_bound",
     "if hi > _EPS_CAP:  # unreachable (see _EPS_CAP); a guard, not a branch the maths takes", ">", 0, ">=",
     "hi is a power of two and never equals 1e4"),
    ("fairdp/privacy/training_audit.py", "one_run_epsilon_lower_bound", "lo, hi = 0.0, 1.0", "1.0", 0, "2.0",
     "from [0, 2] the first halving gives [0, 1] or [1, 2], the bracket the original has at that point, and from "
     "there both searches take the same steps"),
    ("fairdp/privacy/training_audit.py", "one_run_epsilon_lower_bound", "while hi - lo > EPS_TOLERANCE:", ">", 0,
     ">=", "the bracket's width is a power of two and never equals 1e-9"),
]

_OPS = {"+": "-", "-": "+", "*": "/", "/": "*", "//": "/", "%": "/", "**": "*", "<": "<=", "<=": "<",
        ">": ">=", ">=": ">", "==": "!=", "!=": "==", "&": "|", "|": "&", "^": "&", "<<": ">>", ">>": "<<",
        "+=": "-=", "-=": "+=", "*=": "/=", "/=": "*=", "//=": "/=", "&=": "|=", "|=": "&="}
_NAMES = {"True": "False", "False": "True", "and": "or", "or": "and", "is": "is not", "in": "not in"}
for _a, _b in [("min", "max"), ("minimum", "maximum"), ("amin", "amax"), ("argmin", "argmax"),
               ("nanmin", "nanmax"), ("idxmin", "idxmax"), ("any", "all"), ("floor", "ceil")]:
    _NAMES[_a], _NAMES[_b] = _b, _a
_STRINGS = {"min": "max", "max": "min", "first": "last", "last": "first"}
_UNARY_AFTER = {"return", "and", "or", "not", "in", "is", "if", "else", "elif", "while", "lambda", "yield",
                "assert", "await", "for"}
# Libraries the tests import, imported once before forking (never fairdp).
_PRELOAD = ["pytest", "numpy", "pandas", "scipy", "scipy.stats", "sklearn", "sklearn.metrics", "fairlearn.metrics",
            "dp_accounting", "dp_accounting.rdp", "absl.logging", "pyarrow", "pyarrow.parquet", "yaml", "torch", "hypothesis"]


@dataclasses.dataclass
class Mutant:
    path: str
    line: int
    col: int
    token: str
    new: str
    occurrence: int
    text: str  # the source line, stripped
    function: str | None  # qualified name of the enclosing top-level function or method
    source: str  # the whole mutated module

    @property
    def label(self) -> str:
        new = self.new if self.new else "(deleted)"
        return f"{self.path}:{self.line}:{self.col}  {self.token} -> {new}  | {self.text}"


def _functions(tree: ast.Module) -> list[tuple[str, int, int, int]]:
    """(qualname, first line incl. decorators, first body line, last line) of every top-level
    function and method of a top-level class."""
    out = []

    def add(node, prefix=""):
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        out.append((prefix + node.name, first, node.body[0].lineno, node.end_lineno))

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            add(node)
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    add(sub, node.name + ".")
    return out


def _excluded_spans(tree: ast.Module) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Docstrings and annotations: (start, end) positions whose tokens are never mutated."""
    spans = []

    def span(node):
        spans.append(((node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                span(body[0])
            if not isinstance(node, (ast.Module, ast.ClassDef)):
                if node.returns is not None:
                    span(node.returns)
                args = node.args
                for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                    if a is not None and a.annotation is not None:
                        span(a.annotation)
        elif isinstance(node, ast.AnnAssign):
            span(node.annotation)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            span(node)  # attribute docstrings: a bare string statement
        elif isinstance(node, ast.ImportFrom) and node.module == "__future__":
            span(node)
    return spans


def _replacements(tokens: list[tokenize.TokenInfo], i: int) -> list[str]:
    tok = tokens[i]
    nxt = next((t for t in tokens[i + 1:] if t.type not in (tokenize.NL, tokenize.COMMENT)), None)
    if tok.type == tokenize.OP and tok.string in ("*", "/") and nxt is not None and nxt.string in (",", ")"):
        return []  # a signature's bare * or /, not an operator
    if tok.type == tokenize.OP:
        if tok.string in ("-", "+", "~"):
            prev = next((t for t in reversed(tokens[:i]) if t.type not in (
                tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)), None)
            unary = prev is None or (prev.type == tokenize.OP and prev.string not in (")", "]", "}")) or (
                prev.type == tokenize.NAME and prev.string in _UNARY_AFTER)
            if tok.string == "~" or unary:
                return [""]
        return [_OPS[tok.string]] if tok.string in _OPS else []
    if tok.type == tokenize.NAME:
        if tok.string == "not":
            return [""]
        return [_NAMES[tok.string]] if tok.string in _NAMES else []
    if tok.type == tokenize.NUMBER:
        try:
            value = ast.literal_eval(tok.string)
        except ValueError:
            return []
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return []
        return [str(value + 1) if isinstance(value, int) else repr(value + 1.0)]
    if tok.type == tokenize.STRING and tok.string[:1] in "\"'":  # no prefix: not an f-string
        value = ast.literal_eval(tok.string)
        if value in _STRINGS:
            return [repr(_STRINGS[value])]
    return []


def mutants(path: str, source: str) -> list[Mutant]:
    """Every one-token mutant of ``source`` (the module at ``path``, relative to the tree)."""
    tree = ast.parse(source)
    reference = ast.dump(tree)
    spans = _excluded_spans(tree)
    funcs = _functions(tree)
    lines = source.splitlines(keepends=True)
    starts = [0]
    for text in lines:
        starts.append(starts[-1] + len(text))
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    out, seen = [], {}
    for i, tok in enumerate(tokens):
        if any(a <= tok.start < b for a, b in spans):
            continue
        for new in _replacements(tokens, i):
            (l0, c0), (l1, c1) = tok.start, tok.end
            a, b = starts[l0 - 1] + c0, starts[l1 - 1] + c1
            mutated = source[:a] + new + source[b:]
            try:
                if ast.dump(ast.parse(mutated)) == reference:
                    continue
            except SyntaxError:
                continue
            text = lines[l0 - 1].strip()
            key = (l0, tok.string, new)
            occurrence = seen.get(key, 0)
            seen[key] = occurrence + 1
            function = next((name for name, first, _, last in funcs if first <= l0 <= last), None)
            out.append(Mutant(path, l0, c0, tok.string, new, occurrence, text, function, mutated))
    return out


def _key(m: Mutant) -> tuple:
    return (m.path, m.function, m.text, m.token, m.occurrence, m.new)


def _equivalent_reason(m: Mutant) -> str | None:
    for *key, why in EQUIVALENT:
        if tuple(key) == _key(m):
            return why
    return None


# --- the tree ----------------------------------------------------------------------------------

def make_tree(rev: str | None) -> Path:
    root = Path(tempfile.mkdtemp(prefix="fairdp-mutation-"))
    if rev:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "fairdp", "tests", "pyproject.toml"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    else:
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
        for name in ("fairdp", "tests"):
            shutil.copytree(REPO / name, root / name, ignore=ignore)
        shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    for name in ("results", "studies", "examples"):  # data some tests read (the committed reports): linked, not copied
        if (REPO / name).exists() and not (root / name).exists():
            (root / name).symlink_to(REPO / name)
    return root


# --- running pytest in forked children -----------------------------------------------------------

def _pytest_args(nodeids: list[str]) -> list[str]:
    # --assert=plain: no assertion rewriting (seconds per child); a failing assert still fails.
    # --tb=native: pytest's own traceback rendering fails on frames without a line number (torch.func's)
    return ["-x", "-q", "-m", "not slow", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:hypothesispytest", "--assert=plain",
            "--tb=native", "-o", "addopts=", "--no-header", *nodeids]


def _child_setup(root: Path, log: Path) -> None:
    os.setpgid(0, 0)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.chdir(root)
    sys.path.insert(0, str(root))


def _install_mutant(root: Path, m: Mutant) -> None:
    import importlib.abc
    import importlib.util

    target = str(root / m.path)
    modname = m.path[:-3].replace("/", ".")

    class Loader(importlib.abc.Loader):
        def create_module(self, spec):
            return None

        def exec_module(self, module):
            exec(compile(m.source, target, "exec"), module.__dict__)

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target_=None):
            if fullname == modname:
                return importlib.util.spec_from_file_location(fullname, target, loader=Loader())
            return None

    sys.meta_path.insert(0, Finder())


_CHILD = {"pid": None}


def _fork(root: Path, log: Path, body) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    _CHILD["pid"] = pid
    if pid == 0:
        code = 3
        try:
            _child_setup(root, log)
            code = body()
        except BaseException:  # noqa: BLE001 - report and leave
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(int(code))
    return pid


def _wait(pid: int, timeout: float) -> int | None:
    """The child's exit code, or None after killing it at ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            _CHILD["pid"] = None
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > end:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            _CHILD["pid"] = None
            return None
        time.sleep(0.02)


def trace_tests(root: Path, files: list[str], targets: list[str], out: Path) -> dict:
    """Run ``files`` once, unmutated, recording per test its duration and the lines of
    ``targets`` it executes. Every test must pass."""

    def body():
        import pytest

        paths = {str(root / t) for t in targets}
        hits: dict[str, set] = {}
        durations: dict[str, float] = {}
        failed: list[str] = []
        state = {"test": None}

        def local(frame, event, arg):
            if event == "line":  # outside a test: collecting, importing the module (IMPORT_TIME)
                hits.setdefault(state["test"] or IMPORT_TIME, set()).add((frame.f_code.co_filename, frame.f_lineno))
            return local

        def global_(frame, event, arg):
            return local if frame.f_code.co_filename in paths else None

        class Plugin:
            @pytest.hookimpl(hookwrapper=True)
            def pytest_runtest_protocol(self, item, nextitem):
                state["test"] = item.nodeid
                t0 = time.perf_counter()
                yield
                durations[item.nodeid] = time.perf_counter() - t0
                state["test"] = None

            def pytest_runtest_logreport(self, report):
                if report.failed:
                    failed.append(report.nodeid)

        sys.settrace(global_)
        import threading

        threading.settrace(global_)
        args = [a for a in _pytest_args(files) if a != "-x"]
        code = pytest.main(args, plugins=[Plugin()])
        sys.settrace(None)
        import fairdp

        out.write_text(json.dumps({
            "code": int(code), "failed": failed, "durations": durations, "fairdp": fairdp.__file__,
            "hits": {t: sorted([os.path.relpath(f, root), n] for f, n in h) for t, h in hits.items()},
        }))
        return 0

    log = out.with_suffix(".log")
    code = _wait(_fork(root, log, body), 3600)
    if code != 0 or not out.exists():
        sys.exit(f"mutation: the unmutated test run failed; see {log}")
    data = json.loads(out.read_text())
    if not data["fairdp"].startswith(str(root)):
        sys.exit(f"mutation: fairdp was imported from {data['fairdp']}, not from the copy {root}")
    if data["code"] != 0 or data["failed"]:
        sys.exit(f"mutation: tests fail without any mutant ({', '.join(data['failed'][:5])}); see {log}")
    return data


IMPORT_TIME = "<import>"  # the lines run outside any test: a function called when its module is imported


def tests_for(m: Mutant, funcs: dict[str, tuple[int, int]], data: dict, files: list[str]) -> list[str]:
    """The tests a mutant runs, fastest first."""
    durations = data["durations"]
    first, last = funcs.get(m.function, (0, 0))
    at_import = any(f == m.path and first <= n <= last for f, n in data["hits"].get(IMPORT_TIME, []))
    if m.function is None or at_import:  # module level, or run while importing: every test sees it
        chosen = [t for t in durations if t.split("::")[0] in files]
    else:
        chosen = [t for t, h in data["hits"].items()
                  if t.split("::")[0] in files and any(f == m.path and first <= n <= last for f, n in h)]
    return sorted(chosen, key=lambda t: durations[t])


class MutantTimeout(Exception):
    """A test ran past its limit: the mutant made it loop (or crawl)."""


def run_mutant(root: Path, m: Mutant, nodeids: list[str], limits: dict[str, float], timeout: float,
               log: Path) -> int | None:
    """Run ``nodeids`` (or whole files) against the mutant: pytest's exit code, None past
    ``timeout``. Each test also fails past its own entry in ``limits`` (seconds)."""

    def body():
        _install_mutant(root, m)
        import pytest

        def expire(signum, frame):
            raise MutantTimeout("the test ran past its limit")

        class Limit:
            @pytest.hookimpl(hookwrapper=True)
            def pytest_runtest_call(self, item):
                signal.signal(signal.SIGALRM, expire)
                signal.setitimer(signal.ITIMER_REAL, limits.get(item.nodeid, timeout))
                try:
                    yield
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)

        return int(pytest.main(_pytest_args(nodeids), plugins=[Limit()]))

    return _wait(_fork(root, log, body), timeout)


# --- main ----------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="*", metavar="MODULE",
                    help=f"{', '.join(MODULES)} (default: {', '.join(DEFAULT_MODULES)})")
    ap.add_argument("--rev", help="git revision whose fairdp/, tests/ and pyproject.toml to use (default: working tree)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--function", help="only mutants in this function (qualified name)")
    ap.add_argument("--timeout-factor", type=float, default=3.0,
                    help="a test fails past this many times its traced time plus 2 s (default 3)")
    ap.add_argument("--recheck-factor", type=float, default=5.0,
                    help="a mutant that timed out runs once more with limits this many times longer; it counts "
                         "as a timeout only if it times out again (default 5; 1: no recheck)")
    ap.add_argument("--json", type=Path, help="write every mutant's outcome here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary tree and the per-mutant logs")
    args = ap.parse_args()
    keys = args.modules or list(DEFAULT_MODULES)
    if set(keys) - set(MODULES):
        ap.error(f"unknown module {sorted(set(keys) - set(MODULES))}: expected some of {', '.join(MODULES)}")

    root = make_tree(args.rev)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("mutation: terminated"))
    try:
        per_module = {}
        for key in keys:
            path, files, limit = MODULES[key]
            source = (root / path).read_text()
            funcs = _functions(ast.parse(source))
            missing = sorted(set(limit or ()) - {name for name, *_ in funcs})
            if missing:  # a renamed function would drop out of the measure unnoticed
                sys.exit(f"mutation: {key}: {path} has no function {', '.join(missing)}")
            found = [m for m in mutants(path, source) if args.function in (None, m.function)
                     and (limit is None or m.function in limit)]
            per_module[key] = (path, [f for f in files if (root / f).exists()], found, funcs)
        if args.list:
            for key, (path, files, found, _) in per_module.items():
                only = f" (in {len(MODULES[key][2])} functions)" if MODULES[key][2] else ""
                print(f"# {key}: {path}, {len(found)} mutants{only}, tests {', '.join(files)}")
                for m in found:
                    why = _equivalent_reason(m)
                    print(f"{m.label}" + (f"   [equivalent: {why}]" if why else ""))
            return
        keys_found = {_key(m) for _, _, found, _ in per_module.values() for m in found}
        unused = [e for e in EQUIVALENT if e[0] in {p for p, *_ in per_module.values()} and tuple(e[:6]) not in keys_found]
        if unused and args.function is None:
            print("mutation: EQUIVALENT entries that match no mutant (the source changed?):", file=sys.stderr)
            for e in unused:
                print(f"  {e[:6]}", file=sys.stderr)

        os.environ.setdefault("OMP_NUM_THREADS", "1")
        os.environ.setdefault("MKL_NUM_THREADS", "1")
        for name in _PRELOAD:
            try:
                __import__(name)
            except ImportError:
                pass
        all_files = sorted({f for _, files, _, _ in per_module.values() for f in files})
        targets = sorted({p for p, *_ in per_module.values()})
        t0 = time.monotonic()
        data = trace_tests(root, all_files, targets, root / "trace.json")
        print(f"traced {len(data['durations'])} tests of {', '.join(all_files)} in {time.monotonic() - t0:.0f} s",
              flush=True)

        limits = {t: args.timeout_factor * d + 2 for t, d in data["durations"].items()}
        outcomes, summary = [], []
        for key, (path, files, found, funcs) in per_module.items():
            spans = {name: (body, last) for name, _, body, last in funcs}
            counts = dict(killed=0, timeout=0, survived=0, untested=0, equivalent=0)
            survivors = []
            t1 = time.monotonic()
            for i, m in enumerate(found):
                why = _equivalent_reason(m)
                nodeids = tests_for(m, spans, data, files)
                if why:
                    status = "equivalent"
                elif not nodeids:
                    status = "untested"
                else:
                    budget = sum(data["durations"][t] for t in nodeids)
                    log = root / f"mutant-{key}-{i}.log"
                    timeout = args.timeout_factor * budget + 30
                    code = run_mutant(root, m, files if m.function is None else nodeids, limits, timeout, log)
                    if code == 4 and "ERROR: not found" in log.read_text():  # it renamed a parametrized test
                        code = run_mutant(root, m, files, limits, timeout, log)
                    if (code is None or (code == 1 and "MutantTimeout" in log.read_text())) and args.recheck_factor > 1:
                        # once more with longer limits: a kill by timeout must not be a slow machine's
                        code = run_mutant(root, m, files if m.function is None else nodeids,
                                          {t: args.recheck_factor * v for t, v in limits.items()},
                                          args.recheck_factor * timeout, log)
                    if code is None or (code == 1 and "MutantTimeout" in log.read_text()):
                        status = "timeout"
                    elif code == 0:
                        status = "survived"
                    elif code in (1, 2) or (code == 4 and "ERROR collecting" in log.read_text()):
                        status = "killed"  # a test failed, or errors (a test module that no longer imports)
                    else:
                        sys.exit(f"mutation: pytest exit code {code} for {m.label}; see "
                                 f"{root / f'mutant-{key}-{i}.log'} (--keep keeps it)")
                counts[status] += 1
                if status in ("survived", "untested"):
                    survivors.append((status, m))
                outcomes.append({"module": key, "path": m.path, "line": m.line, "col": m.col, "occurrence": m.occurrence,
                                 "function": m.function,
                                 "token": m.token, "new": m.new, "text": m.text, "status": status, "tests": len(nodeids)})
                print(f"\r{key}: {i + 1}/{len(found)} mutants", end="", flush=True)
            print()
            total = len(found) - counts["equivalent"]
            killed = counts["killed"] + counts["timeout"]
            rate = 100.0 * killed / total if total else float("nan")
            summary.append(f"{key:<15}{path:<34}{len(found):>5} mutants {counts['equivalent']:>3} equivalent "
                           f"{killed:>5} killed ({counts['timeout']} by timeout) {counts['survived']:>4} survived "
                           f"{counts['untested']:>3} untested   {rate:5.1f}% killed   {time.monotonic() - t1:.0f} s")
            for status, m in survivors:
                print(f"  {status:<9}{m.label}" + (f"   [{m.function}]" if m.function else ""))
        print()
        print("\n".join(summary))
        if args.json:
            args.json.write_text(json.dumps(outcomes, indent=1))
    finally:
        if _CHILD["pid"] is not None:
            try:
                os.killpg(_CHILD["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        if args.keep:
            print(f"tree and logs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
