"""``mosaic report``: what happened on the live cluster, from Slurm's accounting (pure).

``sacct -D -X -P`` lists one row per *run* of a job: a job requeued twice has three
rows (``REQUEUED``, ``REQUEUED``, its final state), each with its own start, end and
allocation. Those runs become the same :class:`planner.metrics.JobRecord` the simulator
produces, so ``mosaic report`` and ``mosaic sim`` print the same summary keys from one
metrics module:

* submit = the first run's ``Submit`` (later rows carry the requeue time);
* start = the first run's ``Start``; finish = the last run's ``End`` when it ``COMPLETED``;
* restarts = preemptions = runs that ended ``REQUEUED``; a migration = a requeued run
  followed by one on another node list (sacct does not record GPU indices);
* attained GPU-s and allocated GPU-/CPU-seconds = each run's ``AllocTRES`` times its length;
  a ``gres/shard`` counts as half a GPU (:data:`SHARDS_PER_GPU`; needs
  ``AccountingStorageTRES=gres/gpu,gres/shard``, else sacct does not record shards).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from planner.metrics import JobRecord, active_at_arrival, summarize
from slurm_plugin.directives import decode_comment
from slurm_plugin.slurm.parse import SlurmParseError, parse_time, tres_map


@dataclass(frozen=True)
class Run:
    job_id: str
    state: str
    submit: float | None
    start: float | None
    end: float | None
    gpus: float  # a shard counts as 1 / SHARDS_PER_GPU of a GPU
    cpus: int
    nodes: str


@dataclass(frozen=True)
class Report:
    records: list[JobRecord]
    runs: dict[str, list[Run]]
    allocated_gpu_s: float
    allocated_cpu_s: float


SHARDS_PER_GPU = 2
"""``gres/shard`` per GPU on a Mosaic shard cluster (``Name=shard Count=2`` per GPU): a job
sharing a GPU holds one shard, so its GPU-hours count half a GPU's, and the two partners
of a pair add up to the GPU (README, "Sharing GPUs on the live path")."""


def gpus_of(tres: Mapping[str, str], shards_per_gpu: int = SHARDS_PER_GPU) -> float:
    """GPUs a TRES list holds: ``gres/gpu`` plus ``gres/shard`` / ``shards_per_gpu``."""
    return _count(tres, "gres/gpu") + _count(tres, "gres/shard") / shards_per_gpu


def _count(tres: Mapping[str, str], key: str) -> int:
    try:
        return int(tres.get(key, "0") or 0)
    except ValueError:
        raise SlurmParseError(f"sacct: {key}={tres.get(key)!r} is not a count") from None


def build_report(rows: Iterable[Mapping[str, str]], partitions: Sequence[str], now: float) -> Report:
    """Per-job records from ``sacct -D -X -P`` rows of the managed partitions."""
    by_job: dict[str, list[Mapping[str, str]]] = {}
    for row in rows:
        if row.get("Partition") in partitions:
            by_job.setdefault(row["JobID"], []).append(row)
    records: list[JobRecord] = []
    runs: dict[str, list[Run]] = {}
    gpu_s = cpu_s = 0.0
    for job_id, job_rows in by_job.items():
        job_runs = [_run(job_id, r) for r in job_rows]
        runs[job_id] = job_runs
        first = job_rows[0]
        # A shard job asks for a share of one GPU per node: it is a 1-GPU-per-node job.
        req_tres = tres_map(first.get("ReqTRES", ""))
        requested = _count(req_tres, "gres/gpu")
        if not requested and _count(req_tres, "gres/shard"):
            requested = _count(req_tres, "node") or 1
        meta = decode_comment(first.get("Comment", "")) or {}
        attained = 0.0
        for run in job_runs:
            if run.start is None:
                continue
            length = max(0.0, (run.end if run.end is not None else now) - run.start)
            attained += run.gpus * length
            gpu_s += run.gpus * length
            cpu_s += run.cpus * length
        last = job_runs[-1]
        requeued = [k for k, run in enumerate(job_runs) if run.state == "REQUEUED"]
        migrations = sum(
            1
            for k in requeued
            if k + 1 < len(job_runs)
            and job_runs[k + 1].start is not None
            and job_runs[k + 1].nodes != job_runs[k].nodes
        )
        starts = [run.start for run in job_runs if run.start is not None]
        finished = last.state == "COMPLETED"
        duration = meta.get("duration_s")
        records.append(
            JobRecord(
                job_id=job_id,
                num_gpus=requested or math.ceil(last.gpus),
                submit_time_s=job_runs[0].submit or now,
                start_time_s=min(starts) if starts else None,
                finish_time_s=last.end if finished else None,
                state="finished" if finished else last.state.lower().split()[0],
                model=str(meta.get("model", "")),
                restarts=len(requeued),
                migrations=migrations,
                preemptions=len(requeued),
                duration_s=float(duration) if isinstance(duration, int | float) else None,
                attained_gpu_s=attained,
            )
        )
    records.sort(key=lambda r: (r.submit_time_s, _numeric(r.job_id)))
    active = active_at_arrival([r.submit_time_s for r in records], [r.finish_time_s for r in records])
    records = [_with_active(r, n) for r, n in zip(records, active, strict=True)]
    return Report(records, runs, gpu_s, cpu_s)


def _with_active(r: JobRecord, n: int) -> JobRecord:
    return replace(r, active_at_arrival=n)


def _numeric(job_id: str) -> int:
    digits = "".join(c for c in job_id if c.isdigit())
    return int(digits) if digits else 0


def _run(job_id: str, row: Mapping[str, str]) -> Run:
    alloc = tres_map(row.get("AllocTRES", ""))
    return Run(
        job_id=job_id,
        state=row.get("State", "").split()[0] if row.get("State") else "",
        submit=parse_time(row.get("Submit", "")),
        start=parse_time(row.get("Start", "")),
        end=parse_time(row.get("End", "")),
        gpus=gpus_of(alloc),
        cpus=_count(alloc, "cpu"),
        nodes=row.get("NodeList", ""),
    )


def summary(
    report: Report,
    *,
    cluster_gpus: int,
    cluster_cpus: int,
    decision_times_s: Sequence[float] = (),
    end_time_s: float | None = None,
) -> dict[str, Any]:
    """The simulator's summary keys, computed by the same :func:`planner.metrics.summarize`."""
    doc = summarize(
        report.records,
        cluster_gpus=cluster_gpus,
        cluster_cpus=cluster_cpus,
        allocated_gpu_s=report.allocated_gpu_s,
        allocated_cpu_s=report.allocated_cpu_s,
        decision_times_s=decision_times_s,
        end_time_s=end_time_s,
    )
    doc["rounds"] = len(decision_times_s)
    doc["end_time_s"] = end_time_s
    doc["gpus"] = cluster_gpus
    doc["source"] = "sacct"
    return doc
