"""The day-of-load benchmark's trend statistics: a plateau with transient spikes reads flat."""

from __future__ import annotations

from benchmarks.soak.day_of_load import _median_last, _sqlite_summary, median_slope, slope


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


def test_the_rss_the_store_page_cache_explains_is_taken_out_of_the_slope() -> None:
    hours = [t / 60 for t in range(120)]
    sqlite = [min(2.0, 0.5 + h) for h in hours]  # the page cache fills to its cap, then holds
    ticks = [{"rss_mb": 180.0 + s, "sqlite_mb": s} for s in sqlite]
    summary = _sqlite_summary(hours, ticks, 30)
    assert summary["sqlite_mb_first"] == 0.5 and summary["sqlite_mb_last"] == 2.0
    assert summary["rss_minus_sqlite_median_slope_mb_per_hour_after_window"] == 0.0
    assert summary["sqlite_median_slope_mb_per_hour_after_window"] > 0
    assert _sqlite_summary(hours, [{"rss_mb": 1.0, "sqlite_mb": None}] * 120, 30) == {}
