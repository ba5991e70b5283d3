"""Hand the memory a tick freed back to the kernel.

Each tick parses every job Slurm lists (squeue output of tens of MB at 10,000 jobs) and
frees it again. glibc keeps freed memory in its heap for reuse; pages in the middle of the
heap stay resident until something asks for them back, so a long-running controller's RSS
rose in small steps with fragmentation although the objects it holds did not grow (the
day-of-load benchmark's diagnosis: Python heap flat, glibc's free bytes growing).
``malloc_trim(0)`` returns the free pages of every arena (``MADV_DONTNEED``, glibc >= 2.8)
and the top of the heap; its cost is part of the tick time `benchmarks/day_of_load.py` records.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Return the allocator's free pages to the kernel; False where the C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
