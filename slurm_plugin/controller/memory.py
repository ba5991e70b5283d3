"""Hand the memory a tick freed back to the kernel.

Each tick parses every job Slurm lists (squeue output of tens of MB at 10,000 jobs) and
frees it again. glibc keeps freed memory in its heap for reuse; pages in the middle of the
heap stay resident until something asks for them back, so a long-running controller's RSS
rose in small steps with fragmentation although the objects it holds did not grow (the
day-of-load benchmark's diagnosis: Python heap flat, glibc's free bytes growing).
``malloc_trim(0)`` returns the free pages of every arena (``MADV_DONTNEED``, glibc >= 2.8)
and the top of the heap; its cost is part of the tick time `benchmarks/soak/day_of_load.py` records.

The C libraries are reached here only (the memory probes of the benchmarks use :func:`libc`
and :func:`sqlite_memory_mb` too).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def libc() -> ctypes.CDLL | None:
    """The C library this process runs on (``None`` where ctypes cannot find it)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    lib = libc()
    try:
        trim = lib.malloc_trim if lib is not None else None
    except AttributeError:  # not glibc (musl has no malloc_trim)
        return None
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


@functools.cache
def _sqlite_memory_used() -> Callable[[], int] | None:
    """SQLite's ``sqlite3_memory_used`` from the library Python's ``sqlite3`` module is linked
    with (``None`` where it is not reachable, e.g. SQLite built into the module)."""
    try:
        import _sqlite3

        used = ctypes.CDLL(_sqlite3.__file__).sqlite3_memory_used
    except (ImportError, OSError, AttributeError):
        return None
    used.restype = ctypes.c_int64
    used.argtypes = []
    return used


def sqlite_memory_mb() -> float | None:
    """MB SQLite holds now in this process (page caches, prepared statements, schema): the
    state store's share of the controller's memory. ``None`` where it cannot be read."""
    used = _sqlite_memory_used()
    return None if used is None else round(used() / 2**20, 3)


def release_free_memory() -> bool:
    """Return the allocator's free pages to the kernel; False where the C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
