"""The C allocator's settings for the commands that analyse a results table.

glibc's malloc serves each array above its mmap threshold (128 KiB at first, adjusted up to
32 MiB) with pages of its own, hands them back to the kernel when the array is freed, and the
next array is faulted in page by page again. A report at a million rows makes thousands of
column-sized temporaries (8 MB a float column), and at glibc's defaults spends a third of its
time in the kernel doing so (``docs/benchmarks.md``). Freed memory is kept for the next array
instead, at the same peak: arrays up to the largest threshold glibc allows come from its heap,
which is trimmed only above 4 GiB free and grows 256 MiB at a time.
"""

from __future__ import annotations

import ctypes
import logging
import sys

_log = logging.getLogger("fairdp")

# mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 * 2**20  # glibc's largest on 64-bit systems (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 4 * 2**30
TOP_PAD = 256 * 2**20


def reuse_freed_memory() -> bool:
    """Set glibc's malloc to keep freed memory for the next array (see the module's text);
    False where the C library is not glibc (nothing is changed) or refuses a setting."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")  # glibc's name (find_library would start a process)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = all(mallopt(param, value) == 1 for param, value in (
        (M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD)))
    if not ok:
        _log.debug("mallopt refused a setting; the allocator keeps its defaults for it")
    return ok
