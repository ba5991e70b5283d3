"""The day-of-load benchmark's memory probe: what it samples, and that its heap diff names a leak."""

from __future__ import annotations

import tracemalloc

import pytest

from benchmarks.soak import memory_probe

_kept: list[bytes] = []


def _leak(blocks: int) -> None:
    _kept.extend(bytes(1000) + str(i).encode() for i in range(blocks))


@pytest.fixture
def probe():
    probe = memory_probe.Probe()
    yield probe
    tracemalloc.stop()
    _kept.clear()


def test_a_sample_separates_the_python_heap_the_allocator_and_the_kernel(probe):
    row = probe.sample(1)
    assert row["py_blocks"] > 0 and row["gc_objects"] > 0
    assert row["py_traced_mb"] >= 0
    assert row["smaps_rss_mb"] >= row["smaps_anonymous_mb"] > 0
    assert {"malloc_arena_mb", "malloc_uordblks_mb", "malloc_fordblks_mb"} <= set(row)  # glibc (Debian)


def test_the_heap_diff_names_the_line_that_keeps_memory(probe):
    for tick in range(1, memory_probe.BASELINE_TICK + 1):
        probe.sample(tick)
    _leak(3000)
    probe.sample(memory_probe.BASELINE_TICK + 1)
    diff = probe.diff()
    base = memory_probe.BASELINE_TICK
    assert (diff["from_tick"], diff["to_tick"]) == (base, base + 1)
    top = diff["top_growth"][0]
    assert top["size_diff_kb"] > 2900
    line = f"test_memory_probe.py:{_leak.__code__.co_firstlineno + 1}"
    assert any(where.endswith(line) for where in top["where"])


def test_no_diff_before_the_baseline_tick(probe):
    probe.sample(1)
    assert "note" in probe.diff()


def test_a_baseline_set_later_leaves_out_what_grew_before_it(probe):
    for tick in range(1, memory_probe.BASELINE_TICK + 3):
        probe.sample(tick)
    _leak(3000)  # grows before the baseline: not in the diff
    probe.baseline()
    probe.sample(memory_probe.BASELINE_TICK + 3)
    diff = probe.diff()
    assert diff["from_tick"] == memory_probe.BASELINE_TICK + 2
    assert diff["py_heap_growth_kb"] < 1000
    assert all(t["size_diff_kb"] < 1000 for t in diff["top_growth"])
