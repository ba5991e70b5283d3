"""Guaranteed / best-effort and per-tenant keys of planner.metrics.summarize."""

import pytest

from planner.metrics import CLASS_KEYS, SUMMARY_KEYS, JobRecord, summarize, tenant_summary


def _job(job_id, submit, finish, gpu_s, tenant=None, guaranteed=False):
    return JobRecord(job_id, 1, submit, submit, finish, "finished" if finish is not None else "running",
                     attained_gpu_s=gpu_s, tenant=tenant, guaranteed=guaranteed)  # fmt: skip


RECORDS = [
    _job("a", 0.0, 100.0, 100.0, "A", True),  # JCT 100
    _job("b", 0.0, 300.0, 600.0, "A", False),  # JCT 300, best effort in A's name
    _job("c", 100.0, 200.0, 50.0, "B", False),  # JCT 100
    _job("d", 100.0, None, 40.0, None, True),  # unfinished guaranteed job
]


def test_classes_and_tenants():
    s = summarize(RECORDS, cluster_gpus=4, cluster_cpus=16, allocated_gpu_s=790.0, allocated_cpu_s=0.0,
                  end_time_s=400.0)  # fmt: skip
    assert set(SUMMARY_KEYS) | set(CLASS_KEYS) | {"tenants"} <= set(s)
    assert s["guaranteed_jobs"] == 2
    assert s["guaranteed_avg_jct_s"] == s["guaranteed_p99_jct_s"] == 100.0  # d has not finished
    assert s["best_effort_avg_jct_s"] == 200.0
    assert s["best_effort_p99_jct_s"] == pytest.approx(100.0 + 0.99 * 200.0)
    # Makespan: d is unfinished, so the end of observation (400 s) - the first submit (0 s).
    a, b = s["tenants"]["A"], s["tenants"]["B"]
    assert (a["jobs"], a["finished"], a["guaranteed_jobs"], a["avg_jct_s"], a["gpu_s"]) == (
        2,
        2,
        1,
        200.0,
        700.0,
    )
    assert a["avg_gpus"] == 700.0 / 400.0 and a["quota_use"] is None and a["gpu_quota"] is None
    assert (b["jobs"], b["avg_jct_s"], b["p99_jct_s"]) == (1, 100.0, 100.0)
    assert set(s["tenants"]) == {"A", "B"}  # d names no tenant


def test_quota_use_counts_guaranteed_jobs_only():
    t = tenant_summary(RECORDS, 400.0, {"A": 2, "C": 8})
    assert t["A"]["quota_use"] == 100.0 / (2 * 400.0)  # b is best effort: it uses no quota
    assert t["C"] == {"jobs": 0, "finished": 0, "guaranteed_jobs": 0, "avg_jct_s": None, "p99_jct_s": None,
                      "gpu_s": 0.0, "avg_gpus": 0.0, "gpu_quota": 8, "quota_use": 0.0}  # fmt: skip


def test_without_classes_or_tenants():
    plain = [_job("x", 0.0, 10.0, 10.0)]
    s = summarize(plain, cluster_gpus=1, cluster_cpus=1, allocated_gpu_s=10.0, allocated_cpu_s=0.0)
    assert s["guaranteed_jobs"] == 0 and s["guaranteed_avg_jct_s"] is None
    assert s["best_effort_avg_jct_s"] == s["avg_jct_s"] == 10.0
    assert s["tenants"] == {}
