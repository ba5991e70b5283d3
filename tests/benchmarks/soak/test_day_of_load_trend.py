"""The day-of-load trend tool tells memory that follows the jobs with service from memory that
grows in time."""

from __future__ import annotations

from benchmarks.soak.day_of_load_trend import joint_fit, run_trends


def _run(rss: list[float], service: list[int]) -> dict:
    ticks = [
        {"tick": k, "rss_mb": r, "jobs_with_service": s, "listed": 10000}
        for k, (r, s) in enumerate(zip(rss, service, strict=True), start=1)
    ]
    return {"tick_s": 60, "window_filled_at_tick": 1, "per_tick": ticks, "fates": {"lost": 0}}


def test_memory_that_follows_the_jobs_with_service_leaves_no_trend_in_time_beside_them() -> None:
    # The jobs with service rise, stall, then rise again; memory is 2 KB per such job.
    service = [100 + min(k, 60) * 5 + max(0, k - 120) * 8 for k in range(240)]
    rss = [150 + 0.002 * s for s in service]
    fit = joint_fit([k / 60 for k in range(240)], [float(s) for s in service], rss)
    assert abs(fit["per_hour"]) < 1e-9 and abs(fit["per_job_with_service"] - 0.002) < 1e-9
    assert fit["r2"] == 1.0 and fit["hours_service_correlation"] < 0.99


def test_a_leak_in_time_is_left_in_time() -> None:
    service = [100 + min(k, 60) * 5 + max(0, k - 120) * 8 for k in range(240)]
    rss = [150 + 0.5 * k / 60 for k in range(240)]  # +0.5 MB per controller-hour, whatever runs
    fit = joint_fit([k / 60 for k in range(240)], [float(s) for s in service], rss)
    assert abs(fit["per_hour"] - 0.5) < 1e-9 and abs(fit["per_job_with_service"]) < 1e-9


def test_segments_are_cut_at_the_splits_after_the_window() -> None:
    out = run_trends(_run([150.0 + k for k in range(100)], list(range(100))), None, [40, 500])
    assert [s["ticks"] for s in out["segments"]] == [[1, 100], [1, 40], [40, 100]]
    whole = out["segments"][0]["rss_mb"]
    assert whole["first"] == 150.0 and whole["theil_sen_per_hour"] == 60.0  # a MB a tick
    assert "with_service" in whole and "with_service" not in out["segments"][0]["jobs_with_service"]


def test_a_count_rising_in_step_with_time_is_flagged() -> None:
    hours = [k / 60 for k in range(100)]
    fit = joint_fit(hours, [100.0 + 9 * k + (k % 3) for k in range(100)], [150 + 0.1 * h for h in hours])
    assert fit["hours_service_correlation"] > 0.999
