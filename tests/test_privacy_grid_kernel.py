"""The grid Laplace mechanism's compiled CPU kernel against the NumPy path and the tensor path it
replaces: the same released values bit for bit on any input a user's rows can hold (any eps the
tables reach, float32 and float64, NaN, infinities, values past int64, draws cut between
threads anywhere), and a machine without a compiler falls back to the NumPy path with one
log line."""

from __future__ import annotations

import logging
import platform

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairdp import _rng
from fairdp.privacy import (
    _grid_kernel,
    _mechanisms,
    l1_normalize,
    laplace_privatize,
    minmax_privatize,
)

# skipped only without a compiler: with one, a kernel that fails to build or load is a failure here
# (the mechanism would fall back to the NumPy path, the same values 4x slower, and nothing else notices)
pytestmark = pytest.mark.skipif(_grid_kernel._compiler() is None, reason="no C compiler here: the kernel cannot be built")


def _scalar_kernel() -> _grid_kernel.GridKernel:
    """The built kernel with its vector path off: the scalar release every CPU runs."""
    return _grid_kernel.GridKernel(_grid_kernel.kernel().path, simd=False)


def _three_ways(x: torch.Tensor, tables, names: list[str]):
    """(kernel, NumPy path, tensor path) releases of ``x`` (K, n) from fresh streams of ``names``;
    the kernel's vector path (where the CPU has one) is checked equal to its scalar path."""
    kernel = _mechanisms._released_by_kernel(x, tables, _rng.PackStream.from_names(names), _grid_kernel.kernel())
    scalar = _mechanisms._released_by_kernel(x, tables, _rng.PackStream.from_names(names), _scalar_kernel())
    assert torch.equal(kernel.view(torch.uint8), scalar.view(torch.uint8))
    numpy = _mechanisms._released_by_numpy(x, tables, _rng.PackStream.from_names(names))
    tensor = _mechanisms._released(x, tables, _rng.PackStream.from_names(names))
    return kernel, numpy, tensor


# NaN, infinities and values past int64 become INT64_MIN on x86-64, as NumPy's and torch's casts
# give them there (cvttsd2si); an Arm CPU's casts saturate instead, so there only finite values
# within int64 are compared
X86 = platform.machine().lower() in ("x86_64", "amd64")
special = st.sampled_from([0.0, -0.0, 3.0e-45, 0.5, -1.0]
                          + ([float("nan"), float("inf"), -float("inf"), 1e30, -1e30] if X86 else []))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.integers(1, 4), rows=st.integers(1, 9), dim=st.integers(1, 37),
       eps=st.lists(st.sampled_from([0.05, 0.5, 1.0, 3.0, 8.0, 12.0, 16.0, 20.0, 23.9]), min_size=1, max_size=4),
       double=st.booleans(), normalise=st.booleans(), seed=st.integers(0, 2**31 - 1),
       planted=st.lists(st.tuples(st.integers(0, 10**6), special), max_size=6))
def test_kernel_releases_what_the_numpy_and_tensor_paths_release(k, rows, dim, eps, double, normalise, seed,
                                                                  planted):
    """Any shape (lengths not a multiple of the four values three Philox blocks hold), eps across
    the tables' range (each its own t and alias table), either float width, rows normalised or
    raw, and planted values the grid rounding must treat as NumPy does (NaN, infinities, values
    whose grid index overflows int64, subnormals)."""
    dtype = torch.float64 if double else torch.float32
    h = torch.randn(k, rows, dim, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    x = (l1_normalize(h) if normalise else h).reshape(k, -1).clone()
    for index, value in planted:
        x.view(-1)[index % x.numel()] = value
    values = tuple((eps * k)[:k])
    tables = _mechanisms._l1_tables(values, dim, _mechanisms._mantissa_bits(dtype), torch.device("cpu"))
    with np.errstate(invalid="ignore"):
        kernel, numpy, tensor = _three_ways(x, tables, [f"{seed}/{i}/noise" for i in range(k)])
    assert kernel.dtype == dtype
    assert torch.equal(kernel.view(torch.int64 if double else torch.int32),
                       numpy.view(torch.int64 if double else torch.int32))  # bits, signed zeros included
    assert torch.equal(kernel, tensor)


@pytest.mark.parametrize("threads, k", [(1, 3), (2, 1), (3, 1), (4, 3)])
def test_a_draw_cut_between_threads_releases_the_same_values(threads, k):
    """Large enough that the draw is split between CPU threads; with more threads than configs
    each config's row is cut too, a part starting on a Philox block inside the row (at the
    three words per value a whole number of blocks holds, so a half or a third of the row is
    rounded to 4 values): the parts' words continue one stream."""
    firsts = []

    class Recording:  # the built kernel, noting where in its row each part starts
        def release(self, dtype):
            fn = _grid_kernel.kernel().release(dtype)
            return lambda *args: (firsts.append(args[3]), fn(*args))[1]

    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        h = torch.randn(k, 2001, 30, generator=torch.Generator().manual_seed(threads))  # 60030 values: not cut on a multiple of 4
        x = l1_normalize(h).reshape(k, -1)
        tables = _mechanisms._l1_tables((8.0, 12.0, 20.0)[:k], 30, 24, torch.device("cpu"))
        names = [f"cut/{i}/noise" for i in range(k)]
        kernel, numpy, tensor = _three_ways(x, tables, names)
        recorded = _mechanisms._released_by_kernel(x, tables, _rng.PackStream.from_names(names), Recording())
    finally:
        torch.set_num_threads(saved)
    assert torch.equal(kernel, numpy) and torch.equal(kernel, tensor) and torch.equal(recorded, kernel)
    assert (max(firsts) > 0) == (threads > k)  # the rows were cut where there are more threads than rows


def test_minmax_tables_release_the_same_values():
    """DPNR/CAPE's tables (scale 1/eps, entries in [0, 1]) through the public function."""
    h = torch.randn(2, 300, 17, generator=torch.Generator().manual_seed(4))
    names = ["mm/0/noise", "mm/1/noise"]
    kernel = minmax_privatize(h, (0.5, 4.0), _rng.PackStream.from_names(names))
    x = _mechanisms.minmax_normalize(h).reshape(2, -1)
    numpy = _mechanisms._released_by_numpy(x, _mechanisms._minmax_tables((0.5, 4.0), torch.device("cpu")),
                                           _rng.PackStream.from_names(names))
    assert torch.equal(kernel.reshape(2, -1), numpy)


def test_without_a_compiler_the_numpy_path_runs_after_one_log_line(tmp_path, monkeypatch, caplog):
    """No compiler on PATH and no built kernel cached: the mechanism says so once and releases
    exactly what the kernel would."""
    h = torch.randn(2, 50, 12, generator=torch.Generator().manual_seed(9))
    names = ["nocc/0/noise", "nocc/1/noise"]
    with_kernel = laplace_privatize(h, (8.0, 16.0), _rng.PackStream.from_names(names))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("FAIRDP_KERNEL_DIR", str(tmp_path / "kernels"))
    monkeypatch.setattr(_grid_kernel, "_loaded", False)
    with caplog.at_level(logging.WARNING, logger="fairdp"):
        first = laplace_privatize(h, (8.0, 16.0), _rng.PackStream.from_names(names))
        second = laplace_privatize(h, (8.0, 16.0), _rng.PackStream.from_names(names))
    lines = [r for r in caplog.records if "grid Laplace kernel" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0].getMessage() and "no-such-compiler" in lines[0].getMessage()
    assert _grid_kernel._loaded is None
    assert torch.equal(first, with_kernel) and torch.equal(second, with_kernel)
    assert not any((tmp_path / "kernels").glob("*.so"))


def test_the_vector_path_is_the_one_this_cpu_runs_where_it_has_avx2():
    """Where the CPU reports AVX2 the kernel runs its vector path (the speed comes from it);
    the scalar path is what the comparisons above hold it to."""
    flags = open("/proc/cpuinfo").read() if platform.system() == "Linux" else ""
    if X86 and " avx2" in flags:
        assert _grid_kernel.kernel().simd
    assert not _scalar_kernel().simd


def test_a_build_is_cached_by_source_and_compiler_and_never_left_half_written(tmp_path):
    """The first build writes one library under a name holding the source's and compiler's hash;
    the next finds it (no second build); no temporary file stays behind."""
    first = _grid_kernel.build(tmp_path)
    mtime = first.stat().st_mtime_ns
    assert _grid_kernel.build(tmp_path) == first and first.stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [first.name]
    assert _grid_kernel.GridKernel(first).release(np.float32) is not None


def test_a_failed_build_leaves_nothing_and_raises(tmp_path):
    """A compiler that fails (here: `false`) raises, and leaves no library to be loaded later,
    in a cache folder made for it (its parents too)."""
    import shutil
    import subprocess

    with pytest.raises(subprocess.CalledProcessError):
        _grid_kernel.build(tmp_path / "cache" / "kernels", compiler=shutil.which("false"))
    assert list((tmp_path / "cache" / "kernels").iterdir()) == []


def test_kernels_are_cached_where_the_environment_says(tmp_path, monkeypatch):
    """$FAIRDP_KERNEL_DIR first, then $XDG_CACHE_HOME/fairdp/kernels, then ~/.cache/fairdp/kernels."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("FAIRDP_KERNEL_DIR", raising=False)
    assert _grid_kernel.cache_dir() == tmp_path / "home" / ".cache" / "fairdp" / "kernels"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _grid_kernel.cache_dir() == tmp_path / "xdg" / "fairdp" / "kernels"
    monkeypatch.setenv("FAIRDP_KERNEL_DIR", str(tmp_path / "mine"))
    assert _grid_kernel.cache_dir() == tmp_path / "mine"


def test_fairdp_grid_kernel_0_turns_the_kernel_off_and_nothing_else_does(monkeypatch):
    monkeypatch.setenv(_grid_kernel.DISABLE_ENV, "0")
    assert _grid_kernel.kernel() is None
    monkeypatch.setenv(_grid_kernel.DISABLE_ENV, "1")
    assert isinstance(_grid_kernel.kernel(), _grid_kernel.GridKernel)


def test_a_compiler_error_is_logged_as_its_first_line(tmp_path, monkeypatch, caplog):
    """A compiler that fails prints its error on stderr: the one log line quotes its first line
    (the reason a user can act on), not the whole output."""
    compiler = tmp_path / "cc"
    compiler.write_text("#!/bin/sh\necho 'cc: error: no such architecture' >&2\necho 'second line' >&2\nexit 1\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("CC", str(compiler))
    monkeypatch.setenv("FAIRDP_KERNEL_DIR", str(tmp_path / "kernels"))
    monkeypatch.setattr(_grid_kernel, "_loaded", False)
    with caplog.at_level(logging.WARNING, logger="fairdp"):
        assert _grid_kernel.kernel() is None
    (line,) = [r.getMessage() for r in caplog.records if "grid Laplace kernel" in r.getMessage()]
    assert "CalledProcessError: cc: error: no such architecture" in line and "second line" not in line
