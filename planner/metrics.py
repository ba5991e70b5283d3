"""Cluster and job metrics: one implementation for the simulator and for sacct reports.

Definitions (docs/reference.md, "Metric definitions"):

* JCT = finish - submit; queueing delay = first start - submit;
* makespan = last finish - first submit (or end of observation - first submit while
  jobs are still unfinished);
* finish-time fairness rho = JCT / T_ideal with T_ideal = duration * max(1, g*N/C), the
  job's run time alone on a 1/N share of the C-GPU cluster, N the jobs active at its
  arrival, itself included (Themis; :func:`active_at_arrival`);
* utilisation = allocated GPU- (CPU-) seconds / available GPU- (CPU-) seconds over the
  makespan;
* a migration is a job running in consecutive rounds on a different GPU set; a restart
  is any stop and relaunch (migration, preemption, reconfiguration, resize);
* guaranteed / best-effort (Rubick Table 4, AntMan): the same JCT average and 99th
  percentile over the finished jobs of each class (``None`` when a class has none);
* per tenant (``tenants``: only jobs that name one): jobs, finished, average and p99 JCT,
  the GPU-seconds its jobs held (``gpu_s``), ``avg_gpus`` = ``gpu_s`` / makespan, and, for
  a tenant with a GPU quota, ``quota_use`` = the GPU-seconds its *guaranteed* jobs held /
  (quota x makespan): the average share of its quota in use (a guaranteed job consumes
  quota, a best-effort job does not; Rubick §5.1);
* deadlines (:data:`DEADLINE_KEYS`; Crius §8, ElasticFlow): ``deadline_jobs`` = jobs with a
  deadline, ``deadline_met`` = those finished by it (finish <= deadline, a time on the
  submission clock), ``deadline_satisfactory_ratio`` = met / jobs with a deadline (``None``
  when no job has one). A job unfinished at the end has not met its deadline.
"""

from __future__ import annotations

import bisect
import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

SUMMARY_KEYS = (
    "jobs",
    "finished",
    "avg_jct_s",
    "p50_jct_s",
    "p99_jct_s",
    "makespan_s",
    "avg_queue_s",
    "avg_ftf",
    "max_ftf",
    "migrations",
    "restarts",
    "gpu_util",
    "cpu_util",
    "decision_time_s_mean",
    "decision_time_s_max",
)

# Added to the summary by :func:`summarize` after SUMMARY_KEYS (``tenants`` is a mapping).
CLASS_KEYS = (
    "guaranteed_jobs",
    "guaranteed_avg_jct_s",
    "guaranteed_p99_jct_s",
    "best_effort_avg_jct_s",
    "best_effort_p99_jct_s",
)

# Added to the summary by :func:`summarize` after CLASS_KEYS.
DEADLINE_KEYS = ("deadline_jobs", "deadline_met", "deadline_satisfactory_ratio")

JOB_COLUMNS = (
    "job_id",
    "num_gpus",
    "submit_time_s",
    "start_time_s",
    "finish_time_s",
    "jct_s",
    "queue_s",
    "restarts",
    "migrations",
    "preemptions",
    "state",
    "model",
    "duration_s",
    "attained_gpu_s",
    "ftf",
    "tenant",
)


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What happened to one job. ``state`` is ``finished`` or where it stood at the end."""

    job_id: str
    num_gpus: int
    submit_time_s: float
    start_time_s: float | None = None
    finish_time_s: float | None = None
    state: str = "pending"
    model: str = ""
    restarts: int = 0
    migrations: int = 0
    preemptions: int = 0
    duration_s: float | None = None
    attained_gpu_s: float = 0.0
    active_at_arrival: int | None = None
    tenant: str | None = None
    guaranteed: bool = False
    deadline_s: float | None = None

    @property
    def met_deadline(self) -> bool | None:
        """Finished by its deadline (``None``: the job has no deadline)."""
        if self.deadline_s is None:
            return None
        return self.finish_time_s is not None and self.finish_time_s <= self.deadline_s

    @property
    def jct_s(self) -> float | None:
        return None if self.finish_time_s is None else self.finish_time_s - self.submit_time_s

    @property
    def queue_s(self) -> float | None:
        return None if self.start_time_s is None else self.start_time_s - self.submit_time_s

    def ftf(self, cluster_gpus: int) -> float | None:
        """Themis' finish-time fairness rho (None when unfinished or the duration is unknown)."""
        jct = self.jct_s
        if jct is None or not self.duration_s or not self.active_at_arrival or cluster_gpus <= 0:
            return None
        ideal = self.duration_s * max(1.0, self.num_gpus * self.active_at_arrival / cluster_gpus)
        return jct / ideal


def active_at_arrival(submits: Sequence[float], finishes: Sequence[float | None]) -> list[int]:
    """N for each job: jobs submitted by its submission and not finished before it, itself included.

    A job that finishes exactly when another arrives no longer counts. Sorting both
    lists makes this O(n log n), so it suits traces of any size.
    """
    ordered_submits = sorted(submits)
    ordered_finishes = sorted(f for f in finishes if f is not None)
    return [
        bisect.bisect_right(ordered_submits, s) - bisect.bisect_right(ordered_finishes, s) for s in submits
    ]


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _percentile(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def summarize(
    records: Sequence[JobRecord],
    *,
    cluster_gpus: int,
    cluster_cpus: int,
    allocated_gpu_s: float,
    allocated_cpu_s: float,
    decision_times_s: Sequence[float] = (),
    end_time_s: float | None = None,
    quotas: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The summary keys of docs/reference.md "mosaic sim" (plus ``unfinished`` and ``preemptions``),
    then :data:`CLASS_KEYS`, :data:`DEADLINE_KEYS` and ``tenants`` (:func:`tenant_summary`;
    ``quotas``: GPU quota per tenant name).

    Values that cannot be computed (no finished job, no duration) are ``None``.
    """
    finished = [r for r in records if r.finish_time_s is not None]
    jcts = [r.jct_s for r in finished if r.jct_s is not None]
    queues = [r.queue_s for r in records if r.queue_s is not None]
    ftfs = [f for r in finished if (f := r.ftf(cluster_gpus)) is not None]
    makespan = _makespan(records, end_time_s)
    gpu_capacity = cluster_gpus * makespan if makespan else 0.0
    cpu_capacity = cluster_cpus * makespan if makespan else 0.0
    return {
        "jobs": len(records),
        "finished": len(finished),
        "unfinished": len(records) - len(finished),
        "avg_jct_s": _mean(jcts),
        "p50_jct_s": _percentile(jcts, 50),
        "p99_jct_s": _percentile(jcts, 99),
        "makespan_s": makespan,
        "avg_queue_s": _mean(queues),
        "avg_ftf": _mean(ftfs),
        "max_ftf": max(ftfs) if ftfs else None,
        "migrations": sum(r.migrations for r in records),
        "restarts": sum(r.restarts for r in records),
        "preemptions": sum(r.preemptions for r in records),
        "gpu_util": allocated_gpu_s / gpu_capacity if gpu_capacity > 0 else None,
        "cpu_util": allocated_cpu_s / cpu_capacity if cpu_capacity > 0 else None,
        "decision_time_s_mean": _mean(decision_times_s),
        "decision_time_s_max": max(decision_times_s) if decision_times_s else None,
        **_by_class(finished, len([r for r in records if r.guaranteed])),
        **deadline_summary(records),
        "tenants": tenant_summary(records, makespan, quotas),
    }


def _jcts(records: Iterable[JobRecord]) -> list[float]:
    return [j for r in records if (j := r.jct_s) is not None]


def _by_class(finished: Sequence[JobRecord], guaranteed_jobs: int) -> dict[str, Any]:
    guaranteed = _jcts(r for r in finished if r.guaranteed)
    best_effort = _jcts(r for r in finished if not r.guaranteed)
    return {
        "guaranteed_jobs": guaranteed_jobs,
        "guaranteed_avg_jct_s": _mean(guaranteed),
        "guaranteed_p99_jct_s": _percentile(guaranteed, 99),
        "best_effort_avg_jct_s": _mean(best_effort),
        "best_effort_p99_jct_s": _percentile(best_effort, 99),
    }


def deadline_summary(records: Iterable[JobRecord]) -> dict[str, Any]:
    """:data:`DEADLINE_KEYS` (the module docstring's definitions)."""
    outcomes = [met for r in records if (met := r.met_deadline) is not None]
    return {
        "deadline_jobs": len(outcomes),
        "deadline_met": sum(outcomes),
        "deadline_satisfactory_ratio": sum(outcomes) / len(outcomes) if outcomes else None,
    }


def tenant_summary(
    records: Sequence[JobRecord], makespan_s: float | None, quotas: Mapping[str, float] | None = None
) -> dict[str, dict[str, Any]]:
    """Per tenant (the module docstring's definitions), by name; ``{}`` when no job names one.

    A tenant in ``quotas`` without jobs is listed too (zero use of its quota).
    """
    quotas = quotas or {}
    names = sorted({r.tenant for r in records if r.tenant is not None} | set(quotas))
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        mine = [r for r in records if r.tenant == name]
        jcts = _jcts(mine)
        gpu_s = sum(r.attained_gpu_s for r in mine)
        quota = quotas.get(name)
        guaranteed_gpu_s = sum(r.attained_gpu_s for r in mine if r.guaranteed)
        out[name] = {
            "jobs": len(mine),
            "finished": len(jcts),
            "guaranteed_jobs": sum(r.guaranteed for r in mine),
            "avg_jct_s": _mean(jcts),
            "p99_jct_s": _percentile(jcts, 99),
            "gpu_s": gpu_s,
            "avg_gpus": gpu_s / makespan_s if makespan_s else None,
            "gpu_quota": quota,
            "quota_use": guaranteed_gpu_s / (quota * makespan_s) if quota and makespan_s else None,
        }
    return out


def _makespan(records: Sequence[JobRecord], end_time_s: float | None) -> float | None:
    if not records:
        return None
    first_submit = min(r.submit_time_s for r in records)
    if all(r.finish_time_s is not None for r in records):
        return max(r.finish_time_s for r in records if r.finish_time_s is not None) - first_submit
    return None if end_time_s is None else end_time_s - first_submit


def jobs_csv(records: Iterable[JobRecord], cluster_gpus: int) -> str:
    """Per-job table (``jobs.csv``); empty cells for what did not happen."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(JOB_COLUMNS)
    for r in records:
        writer.writerow(
            [
                r.job_id,
                r.num_gpus,
                _cell(r.submit_time_s),
                _cell(r.start_time_s),
                _cell(r.finish_time_s),
                _cell(r.jct_s),
                _cell(r.queue_s),
                r.restarts,
                r.migrations,
                r.preemptions,
                r.state,
                r.model,
                _cell(r.duration_s),
                _cell(r.attained_gpu_s),
                _cell(r.ftf(cluster_gpus), digits=4),
                r.tenant or "",
            ]
        )
    return out.getvalue()


def _cell(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.{digits}f}"
