"""Where a long-running process's resident memory goes, sampled tick by tick.

``benchmarks/day_of_load.py --diagnose`` runs one :class:`Probe` inside the controller's
process. Each sample separates the three places a Python daemon's RSS can grow:

* the Python heap: ``tracemalloc``'s traced bytes and ``sys.getallocatedblocks()`` (live
  objects; growth here is a leak in Python code, and the heap diff names the line);
* glibc's allocator: ``mallinfo2()`` — ``arena`` (bytes the main and thread arenas took from
  the kernel with ``brk``/``mmap``), ``uordblks`` (in use), ``fordblks`` (free but kept:
  fragmentation), ``hblkhd`` (large blocks in their own ``mmap``);
* the kernel's view: ``/proc/self/smaps_rollup`` (``Rss``, ``Anonymous``).

:func:`~slurm_plugin.controller.memory.sqlite_memory_mb` (SQLite's own allocations, part of
glibc's in-use bytes) is cheap enough to sample every tick without ``--diagnose``.

If RSS grows while the Python heap and ``uordblks`` stay flat, the growth is memory the
allocator keeps free, not objects anybody holds.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import tracemalloc
from pathlib import Path
from typing import Any

from slurm_plugin.controller.memory import libc

TRACE_FRAMES = 8  # frames kept per allocation (a tick's call chains are deep)
DIFF_TOP = 15
BASELINE_TICK = 5  # the heap diff starts here: the first ticks fill caches and the store


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def _libc() -> Any:
    """glibc with ``mallinfo2`` typed (``None``: not glibc, or glibc older than 2.33)."""
    lib = libc()
    if lib is None:
        return None
    try:
        lib.mallinfo2.restype = _Mallinfo2
    except AttributeError:
        return None
    return lib


def smaps_rollup_mb() -> dict[str, float]:
    """``Rss`` and ``Anonymous`` of this process, MB (empty where the file is not there)."""
    out: dict[str, float] = {}
    try:
        lines = Path("/proc/self/smaps_rollup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        key, _, rest = line.partition(":")
        if key in ("Rss", "Anonymous"):
            out[f"smaps_{key.lower()}_mb"] = round(int(rest.split()[0]) / 1024, 2)
    return out


class Probe:
    """Samples the memory of the process it runs in; started before the first tick.

    ``trace=False`` (``--diagnose-light``) leaves ``tracemalloc`` off: no heap diff and no
    traced bytes, but the block and object counts, glibc's figures and ``smaps`` cost little
    at 10,000 jobs, where tracing makes a tick several times slower."""

    def __init__(self, trace: bool = True) -> None:
        self._libc = _libc()
        self._trace = trace
        if trace:
            tracemalloc.start(TRACE_FRAMES)
        self._baseline: tracemalloc.Snapshot | None = None
        self._baseline_tick: int | None = None
        self._last_tick: int | None = None
        self._baseline_fixed = False  # set by baseline(): the early tick's snapshot is not taken

    def sample(self, tick: int) -> dict[str, Any]:
        row: dict[str, Any] = {}
        if self._trace:
            current, peak = tracemalloc.get_traced_memory()
            row["py_traced_mb"] = round(current / 2**20, 2)
            row["py_traced_peak_mb"] = round(peak / 2**20, 2)
            tracemalloc.reset_peak()
        row["py_blocks"] = sys.getallocatedblocks()
        row["gc_objects"] = len(gc.get_objects())
        row.update(smaps_rollup_mb())
        if self._libc is not None:
            info = self._libc.mallinfo2()
            for field in ("arena", "hblkhd", "uordblks", "fordblks"):
                row[f"malloc_{field}_mb"] = round(getattr(info, field) / 2**20, 2)
        if self._trace and tick == BASELINE_TICK and not self._baseline_fixed:
            self._baseline = tracemalloc.take_snapshot()
            self._baseline_tick = tick
        self._last_tick = tick
        return row

    def baseline(self) -> None:
        """The heap diff starts from now (after the last sampled tick), not from
        :data:`BASELINE_TICK`: e.g. once the process's working set has stopped growing."""
        if not self._trace:
            return
        self._baseline = tracemalloc.take_snapshot()
        self._baseline_tick = self._last_tick
        self._baseline_fixed = True

    def diff(self) -> dict[str, Any]:
        """The Python heap's growth from the baseline tick to now, by allocating traceback."""
        if not self._trace:
            return {"note": "tracemalloc was off (--diagnose-light): no heap diff"}
        if self._baseline is None:
            return {"note": f"fewer than {BASELINE_TICK} ticks: no heap baseline"}
        now = tracemalloc.take_snapshot()
        stats = now.compare_to(self._baseline, "traceback")
        top = []
        for stat in stats[:DIFF_TOP]:
            top.append(
                {
                    "size_diff_kb": round(stat.size_diff / 1024, 1),
                    "count_diff": stat.count_diff,
                    "size_kb": round(stat.size / 1024, 1),
                    "where": [f"{frame.filename}:{frame.lineno}" for frame in stat.traceback][:TRACE_FRAMES],
                }
            )
        total = sum(stat.size_diff for stat in stats)
        return {
            "from_tick": self._baseline_tick,
            "to_tick": self._last_tick,
            "py_heap_growth_kb": round(total / 1024, 1),
            "top_growth": top,
        }
