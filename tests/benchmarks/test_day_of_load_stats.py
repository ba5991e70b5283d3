"""The day-of-load benchmark's trend statistics: a plateau with transient spikes reads flat."""

from __future__ import annotations

from benchmarks.day_of_load import _median_last, median_slope, slope


def test_median_slope_recovers_a_line() -> None:
    xs = [0.0, 0.5, 1.0, 1.5, 2.0]
    assert median_slope(xs, [3 + 2 * x for x in xs]) == 2.0
    assert median_slope([1.0, 1.0], [0.0, 5.0]) is None


def test_a_flat_rss_with_transient_spikes_near_the_end_reads_flat_to_theil_sen() -> None:
    hours = [t / 60 for t in range(120)]
    rss = [174.3] * 120
    for t in (100, 101, 110, 111, 112, 118):  # glibc mmap'd blocks, returned a tick later
        rss[t] = 191.0
    assert median_slope(hours, rss) == 0.0
    assert slope(hours, rss) > 2.0  # least squares follows the late spikes


def test_a_steady_leak_reads_as_one_to_both() -> None:
    hours = [t / 60 for t in range(120)]
    rss = [150 + 5 * h for h in hours]
    assert abs(median_slope(hours, rss) - 5) < 1e-9
    assert abs(slope(hours, rss) - 5) < 1e-9


def test_median_last_takes_the_span_before_the_end() -> None:
    hours = [t / 60 for t in range(181)]  # 3 hours
    values = [float(t) for t in range(181)]
    assert _median_last(hours, values, 1.0) == 150.5  # ticks 121..180
    assert _median_last(hours, values, 2.0, 1.0) == 90.5  # ticks 61..120
    assert _median_last(hours[:30], values[:30], 1.0) is None
