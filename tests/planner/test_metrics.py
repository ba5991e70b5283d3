import csv
import io

import pytest

from planner.metrics import JOB_COLUMNS, SUMMARY_KEYS, JobRecord, active_at_arrival, jobs_csv, summarize


def rec(job_id, submit, start, finish, gpus=1, duration=None, n=None, **kw):
    return JobRecord(
        job_id,
        gpus,
        submit,
        start,
        finish,
        "finished" if finish is not None else "pending",
        duration_s=duration,
        active_at_arrival=n,
        **kw,
    )


def test_summary_arithmetic():
    records = [
        rec("a", 0, 0, 100, duration=100, n=1),  # JCT 100, queue 0, rho 1
        rec("b", 10, 50, 310, gpus=2, duration=100, n=2, restarts=2, migrations=1),  # JCT 300
        rec("c", 20, None, None),
    ]
    s = summarize(
        records,
        cluster_gpus=2,
        cluster_cpus=8,
        allocated_gpu_s=400,
        allocated_cpu_s=800,
        decision_times_s=[0.1, 0.3],
        end_time_s=400,
    )
    assert set(SUMMARY_KEYS) <= set(s)
    assert s["jobs"] == 3 and s["finished"] == 2 and s["unfinished"] == 1
    assert s["avg_jct_s"] == 200 and s["p50_jct_s"] == 200
    assert s["p99_jct_s"] == pytest.approx(100 + 0.99 * 200)
    assert s["avg_queue_s"] == 20  # (0 + 40) / 2; c never started
    # b: 2 GPUs, 2 jobs at arrival on 2 GPUs: share 1 GPU -> T_ideal = 100 * 2*2/2 = 200 -> rho 1.5
    assert s["max_ftf"] == pytest.approx(1.5) and s["avg_ftf"] == pytest.approx(1.25)
    # c is unfinished: makespan runs to the end of observation, 400 s.
    assert s["makespan_s"] == 400
    assert s["gpu_util"] == pytest.approx(400 / (2 * 400)) and s["cpu_util"] == pytest.approx(800 / (8 * 400))
    assert (s["restarts"], s["migrations"]) == (2, 1)
    assert s["decision_time_s_mean"] == pytest.approx(0.2) and s["decision_time_s_max"] == 0.3


def test_makespan_when_all_finished_is_last_finish_minus_first_submit():
    s = summarize(
        [rec("a", 5, 5, 50), rec("b", 7, 7, 90)],
        cluster_gpus=1,
        cluster_cpus=1,
        allocated_gpu_s=0,
        allocated_cpu_s=0,
    )
    assert s["makespan_s"] == 85


def test_nothing_finished_gives_none_not_nan():
    s = summarize(
        [rec("a", 0, None, None)], cluster_gpus=1, cluster_cpus=1, allocated_gpu_s=0, allocated_cpu_s=0
    )
    assert s["avg_jct_s"] is None and s["max_ftf"] is None and s["makespan_s"] is None


def test_jobs_csv_has_a_row_per_record_and_empty_cells_for_what_did_not_happen():
    rows = list(csv.DictReader(io.StringIO(jobs_csv([rec("a", 0, 0, 10), rec("b", 1, None, None)], 4))))
    assert list(rows[0]) == list(JOB_COLUMNS)
    assert [r["job_id"] for r in rows] == ["a", "b"]
    assert rows[1]["finish_time_s"] == "" and rows[1]["jct_s"] == "" and rows[1]["state"] == "pending"


def test_active_at_arrival_counts_jobs_present_at_each_submission():
    # a: [0, 10), b: [5, 20), c arrives at 10 when a has just finished, d arrives with c.
    submits = [0, 5, 10, 10]
    finishes = [10, 20, None, 30]
    assert active_at_arrival(submits, finishes) == [1, 2, 3, 3]
    assert active_at_arrival([0, 0, 0], [1, 2, 3]) == [3, 3, 3]  # a static trace
