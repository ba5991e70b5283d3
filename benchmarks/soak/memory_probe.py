"""Where a long-running process's resident memory goes, sampled tick by tick.

``benchmarks/soak/day_of_load.py --diagnose`` runs one :class:`Probe` inside the controller's
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

Where the Python heap does grow only after hours of ticks (tracing from the start makes each
tick at 10,000 jobs several times slower), :meth:`Probe.start_trace` starts ``tracemalloc`` at a
late tick; a few ticks later (once what a tick rebuilds has been rebuilt under tracing),
:meth:`Probe.baseline` snapshots the heap and takes a census of the process's containers
(dicts, lists, sets, deques and their sizes). :meth:`Probe.diff` then names the allocations
that grew since and the containers that grew, with who holds each.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import sys
import tracemalloc
import types
from pathlib import Path
from typing import Any

from slurm_plugin.controller.memory import libc

TRACE_FRAMES = 8  # frames kept per allocation (a tick's call chains are deep)
DIFF_TOP = 15
BASELINE_TICK = 5  # the heap diff starts here: the first ticks fill caches and the store
CENSUS_MIN_LEN = 16  # containers smaller than this at the census are not remembered
CENSUS_TOP = 12
_CONTAINERS = (dict, list, set, collections.deque)


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
        self._census: dict[int, int] | None = None  # id -> size of the containers at start_trace()
        self._census_tick: int | None = None
        self._late = False  # tracing was started by start_trace()

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
        if self._late:
            self._census = {
                id(o): len(o) for o in gc.get_objects() if _is_container(o) and len(o) >= CENSUS_MIN_LEN
            }
            self._census_tick = self._last_tick
        self._baseline = tracemalloc.take_snapshot()
        self._baseline_tick = self._last_tick
        self._baseline_fixed = True

    def start_trace(self) -> None:
        """Trace allocations from now on (``trace=False``); the next :meth:`baseline` also
        takes a census of the containers for :meth:`diff`."""
        if not self._trace:
            self._trace = True
            self._late = True
            tracemalloc.start(TRACE_FRAMES)

    def container_growth(self) -> dict[str, Any]:
        """The containers that grew most since the census, largest growth first, and apart from
        them the largest made since (what a tick rebuilds, or a new holder): type, size, growth,
        a few of its items and who refers to it."""
        if self._census is None:
            return {}
        census = self._census
        grown: list[tuple[int, Any]] = []
        new: list[tuple[int, Any]] = []
        for o in gc.get_objects():
            if not _is_container(o) or o is census:
                continue
            size = len(o)
            before = census.get(id(o))
            if before is None and size >= CENSUS_MIN_LEN:
                new.append((size, o))
            elif before is not None and size - before >= CENSUS_MIN_LEN:
                grown.append((size - before, o))
        grown.sort(key=lambda g: -g[0])
        new.sort(key=lambda g: -g[0])
        grown, new = grown[:CENSUS_TOP], new[: CENSUS_TOP // 2]
        mine = grown + new  # the diagnosis's own references, not holders

        def describe(growth: int, o: Any) -> dict[str, Any]:
            return {
                "type": type(o).__name__,
                "size": len(o),
                "growth": growth,
                "sample": [_short(x) for x in list(o)[:3]],
                "held_by": _holders(o, exclude=mine),
            }

        return {
            "from_tick": self._census_tick,
            "to_tick": self._last_tick,
            "grown": [describe(g, o) for g, o in grown],
            "new": [describe(g, o) for g, o in new],
        }

    def diff(self) -> dict[str, Any]:
        """The Python heap's growth from the baseline tick to now, by allocating traceback."""
        if not self._trace:
            return {"note": "tracemalloc was off (--diagnose-light): no heap diff"}
        if self._baseline is None:
            return {"note": f"fewer than {BASELINE_TICK} ticks: no heap baseline"}
        # The containers first: the snapshot's own lists would be counted among them.
        containers = self.container_growth() if self._census is not None else None
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
        out: dict[str, Any] = {
            "from_tick": self._baseline_tick,
            "to_tick": self._last_tick,
            "py_heap_growth_kb": round(total / 1024, 1),
            "top_growth": top,
        }
        if containers is not None:
            out["containers"] = containers
        return out


def _is_container(o: object) -> bool:
    return isinstance(o, _CONTAINERS)


def _short(x: object, width: int = 100) -> str:
    try:
        text = repr(x)
    except Exception as e:  # a repr that fails says so instead of failing the diagnosis
        text = f"<repr failed: {type(e).__name__}>"
    return text if len(text) <= width else text[: width - 3] + "..."


def _holders(o: object, exclude: list[tuple[int, Any]], limit: int = 4) -> list[str]:
    """Who refers to ``o``: a module global, an object's attribute, or a container's type."""
    skip = {id(exclude), id(o)} | {id(pair) for pair in exclude}  # the diagnosis's own references
    out: list[str] = []
    for r in gc.get_referrers(o):
        if id(r) in skip or isinstance(r, types.FrameType):
            continue
        out.append(_describe_holder(r, o))
        if len(out) >= limit:
            break
    return out


def _describe_holder(r: object, o: object) -> str:
    if isinstance(r, dict):
        key = next((k for k, v in r.items() if v is o), None)
        for owner in gc.get_referrers(r):
            if isinstance(owner, types.ModuleType) and owner.__dict__ is r:
                return f"module {owner.__name__}.{key}"
            if getattr(owner, "__dict__", None) is r:
                return f"{type(owner).__module__}.{type(owner).__qualname__}.{key}"
        return f"dict[{_short(key, 60)}]" if key is not None else "dict (as a key)"
    if isinstance(r, (list, tuple, set, collections.deque)):
        return f"{type(r).__name__} of {len(r)}"
    if hasattr(r, "__slots__"):
        slot = next((n for n in getattr(type(r), "__slots__", ()) if getattr(r, n, None) is o), None)
        return f"{type(r).__module__}.{type(r).__qualname__}.{slot}"
    attrs = getattr(r, "__dict__", None)  # an instance whose attributes it refers to directly
    attr = next((k for k, v in attrs.items() if v is o), None) if isinstance(attrs, dict) else None
    return f"{type(r).__module__}.{type(r).__qualname__}" + (f".{attr}" if attr else "")
