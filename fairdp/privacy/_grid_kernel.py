"""The grid Laplace mechanism's fused CPU kernel (``_grid_kernel.c``), built on first use.

The C source ships with the package and is compiled by the machine's C compiler (``$CC``, else
``cc``) into a cache folder the first time a process needs it, then loaded with ctypes; a
compiled library is reused by every later process (its name holds a hash of the source, the
compiler, the flags and the machine's architecture; the vector path is chosen at run time, so
one build serves every CPU of an architecture). Nothing is compiled at set-up. Where there is no compiler, or the build or
load fails, ``kernel()`` logs one line and returns None, and the mechanism runs its NumPy path,
which computes the same values (tests/test_privacy_discrete.py holds both to each other).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("_grid_kernel.c")
FLAGS = ("-O3", "-std=c11", "-shared", "-fPIC", "-ffp-contract=off")
DISABLE_ENV = "FAIRDP_GRID_KERNEL"
"""Set to 0 to run the NumPy path (the comparison a benchmark or a suspicious user makes)."""

_u64, _i64, _ptr = ctypes.c_uint64, ctypes.c_int64, ctypes.c_void_p
_SIGNATURE = [_u64, _u64, _u64, _i64, _i64, _ptr, _ptr, _ptr, _i64, _ptr, _i64, _u64, _i64, _i64, _i64]


def cache_dir() -> Path:
    """Where built kernels live: ``$FAIRDP_KERNEL_DIR``, else ``$XDG_CACHE_HOME/fairdp/kernels``,
    else ``~/.cache/fairdp/kernels``."""
    if os.environ.get("FAIRDP_KERNEL_DIR"):
        return Path(os.environ["FAIRDP_KERNEL_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fairdp" / "kernels"


def _compiler() -> str | None:
    name = os.environ.get("CC") or "cc"
    return shutil.which(name)


def build(directory: Path | None = None, compiler: str | None = None) -> Path:
    """The compiled kernel's path, compiling it unless a build of this source by this compiler
    is cached. Raises OSError or subprocess.CalledProcessError when it cannot be built."""
    compiler = compiler or _compiler()
    if compiler is None:
        raise FileNotFoundError(f"no C compiler ({os.environ.get('CC') or 'cc'}) on PATH")
    source = SOURCE.read_bytes()
    tag = hashlib.sha256(source + "\0".join((os.path.realpath(compiler), *FLAGS, sys.platform, platform.machine())).encode()).hexdigest()[:16]
    directory = directory or cache_dir()
    target = directory / f"grid_kernel-{tag}.so"
    if target.exists():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    # built beside the target and renamed into place: processes that build at once (Ray
    # workers) never load a half-written library
    fd, partial = tempfile.mkstemp(dir=directory, prefix=".grid_kernel-", suffix=".so")
    os.close(fd)
    try:
        subprocess.run([compiler, *FLAGS, "-o", partial, str(SOURCE), "-lm"], check=True,
                       capture_output=True, timeout=120)
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


class GridKernel:
    """The loaded library. ``release(dtype)`` is its release function for float32 or float64,
    called with the vector path where the CPU has it (``simd``; False: the scalar path, which
    computes the same values)."""

    def __init__(self, path: Path, simd: bool | None = None):
        lib = ctypes.CDLL(str(path))
        self.path = path
        lib.grid_simd_supported.restype = ctypes.c_int
        supported = bool(lib.grid_simd_supported())
        self.simd = supported if simd is None else simd and supported
        self._functions = {}
        for dtype, name, real in ((np.float32, "grid_release_f32", ctypes.c_float),
                                  (np.float64, "grid_release_f64", ctypes.c_double)):
            fn = getattr(lib, name)
            fn.argtypes = [*_SIGNATURE, real, real, ctypes.c_int]
            fn.restype = None
            self._functions[np.dtype(dtype)] = fn

    def release(self, dtype: np.dtype):
        fn, simd = self._functions[np.dtype(dtype)], int(self.simd)
        return lambda *args: fn(*args, simd)


_loaded: GridKernel | None | bool = False  # False: not tried yet in this process; None: unavailable


def kernel() -> GridKernel | None:
    """The process's kernel, built or loaded on first call; None (after one log line) where it
    cannot be, or where ``FAIRDP_GRID_KERNEL=0``."""
    global _loaded
    if os.environ.get(DISABLE_ENV) == "0":
        return None
    if _loaded is False:
        try:
            _loaded = GridKernel(build())
        except (OSError, subprocess.SubprocessError, AttributeError) as err:
            detail = getattr(err, "stderr", b"") or b""
            detail = detail.decode(errors="replace").strip().splitlines()[:1] if detail else []
            logger.warning("fairdp: the compiled grid Laplace kernel is unavailable (%s%s); the NumPy path "
                           "computes the same values, about 4x slower", type(err).__name__,
                           f": {detail[0]}" if detail else f": {err}")
            _loaded = None
    return _loaded
