"""``mosaic report``: what happened on the live cluster, from Slurm's accounting (pure).

``sacct -D -X -P`` lists one row per *run* of a job: a job requeued twice has three
rows (``REQUEUED``, ``REQUEUED``, its final state), each with its own start, end and
allocation. Those runs become the same :class:`planner.metrics.JobRecord` the simulator
produces, so ``mosaic report`` and ``mosaic sim`` print the same summary keys from one
metrics module:

* submit = the first run's ``Submit`` (later rows carry the requeue time);
* start = the first run's ``Start``; finish = the last run's ``End`` when it ``COMPLETED``;
* restarts, migrations and preemptions are :func:`planner.relaunch.classify`'s, the
  simulator's definition (:func:`run_change`): every run after the first is a restart; it
  is a migration only when the controller relaunched the job on other nodes while it ran
  (``moved``), never when a preempted job resumes elsewhere; a preemption is a stop the
  job did not come back from in the same round (it resumed later, or has not yet). Why a
  run started is in its ``AdminComment``: the controller's start writes ``mosaic
  r<round>-start-<job> <reason> ...`` there, and sacct keeps each run's own (``placed`` for
  a first start or a resume; ``moved``, ``resized``, ``shared``, ``reshaped`` for a
  relaunch). A run without such a line (not started by the controller) falls back to the
  nodes of consecutive runs: on other nodes it counts as a migration, an upper bound, since
  a resume elsewhere looks the same;
* tenant and guaranteed = the job's ``mosaic:`` comment (``#MOSAIC --tenant NAME
  --guaranteed``), so the summary's guaranteed/best-effort and per-tenant keys are the
  simulator's too (quota use needs the quotas: :func:`summary`'s ``quotas``);
* deadline = submit + the comment's ``deadline_s`` (``#MOSAIC --deadline-s S``: S seconds
  after submission), so the deadline keys are the simulator's too;
* attained GPU-s and allocated GPU-/CPU-seconds = each run's ``AllocTRES`` times its length;
  a ``gres/shard`` counts as 1 / the shards per GPU of the nodes the run held (``gres/shard=8``
  on a 2-GPU node: a quarter of a GPU), from :func:`shards_per_gpu_by_node` (needs
  ``AccountingStorageTRES=gres/gpu,gres/shard``, else sacct does not record shards).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from planner.core.errors import InputError
from planner.core.hostlist import expand_hostlist
from planner.metrics import JobRecord, active_at_arrival, summarize
from planner.relaunch import Change
from slurm_plugin.directives import decode_comment
from slurm_plugin.slurm.parse import SlurmNode, SlurmParseError, parse_time, tres_map
from slurm_plugin.slurm.runner import SlurmCommandError
from slurm_plugin.store import ALREADY_RUNNING

_DBD_REFUSED = re.compile(r"connection to host:(\S+?):(\d+): Connection refused")


def accounting_error(e: SlurmCommandError) -> str:
    """What ``sacct``'s failure means, naming what is down: slurmdbd (its host and port, from
    sacct's own message) or the database behind it (MariaDB/MySQL); else sacct's message."""
    text = e.stderr
    m = _DBD_REFUSED.search(text)
    if m is not None:
        return (
            f"Slurm accounting is down: slurmdbd at {m.group(1)}:{m.group(2)} refused the connection "
            "(is slurmdbd running?); nothing was written"
        )
    if "Connection refused" in text and "database" in text.lower():
        return (
            "Slurm accounting is down: slurmdbd refused the connection (is slurmdbd running?); "
            "nothing was written"
        )
    if "Unable to connect to database" in text:
        return (
            "Slurm accounting is down: slurmdbd answers but cannot reach its database (MariaDB/MySQL: "
            "is it running?); nothing was written"
        )
    return f"sacct failed, nothing was written: {e}"


@dataclass(frozen=True)
class Run:
    job_id: str
    state: str
    submit: float | None
    start: float | None
    end: float | None
    gpus: float  # a shard counts as 1 / its node's shards per GPU of a GPU
    cpus: int
    nodes: str
    admin_comment: str = ""


@dataclass(frozen=True)
class Report:
    records: list[JobRecord]
    runs: dict[str, list[Run]]
    allocated_gpu_s: float
    allocated_cpu_s: float


SHARDS_PER_GPU = 2
"""``gres/shard`` per GPU on Mosaic's shard test cluster (``Name=shard Count=2`` per GPU): the
count a run's shards are divided by when none of its nodes, nor the cluster's, say theirs."""


def shards_per_gpu_by_node(nodes: Iterable[SlurmNode]) -> dict[str, int]:
    """``gres/shard`` per GPU of each node offering shards (``gres/shard=8`` on 2 GPUs: 4)."""
    return {n.name: n.shards_per_gpu for n in nodes if n.shards_per_gpu}


def _run_shards_per_gpu(node_list: str, by_node: Mapping[str, int]) -> float:
    """Shards per GPU of a run on ``node_list``: its nodes' (their mean where they differ),
    else the cluster's when all its nodes agree, else :data:`SHARDS_PER_GPU`."""
    try:
        names = expand_hostlist(node_list)
    except InputError:  # a list Slurm would not write: the cluster's count
        names = ()
    known = [by_node[n] for n in names if n in by_node]
    if known:
        return sum(known) / len(known)
    cluster = set(by_node.values())
    return cluster.pop() if len(cluster) == 1 else SHARDS_PER_GPU


def gpus_of(tres: Mapping[str, str], shards_per_gpu: float = SHARDS_PER_GPU) -> float:
    """GPUs a TRES list holds: ``gres/gpu`` plus ``gres/shard`` / ``shards_per_gpu``."""
    return _count(tres, "gres/gpu") + _count(tres, "gres/shard") / shards_per_gpu


def _count(tres: Mapping[str, str], key: str) -> int:
    try:
        return int(tres.get(key, "0") or 0)
    except ValueError:
        raise SlurmParseError(f"sacct: {key}={tres.get(key)!r} is not a count") from None


def build_report(
    rows: Iterable[Mapping[str, str]],
    partitions: Sequence[str],
    now: float,
    shards_per_gpu: Mapping[str, int] | None = None,
) -> Report:
    """Per-job records from ``sacct -D -X -P`` rows of the managed partitions
    (``shards_per_gpu``: per node, :func:`shards_per_gpu_by_node`)."""
    by_job: dict[str, list[Mapping[str, str]]] = {}
    for row in rows:
        if row.get("Partition") in partitions:
            by_job.setdefault(row["JobID"], []).append(row)
    records: list[JobRecord] = []
    runs: dict[str, list[Run]] = {}
    gpu_s = cpu_s = 0.0
    for job_id, job_rows in by_job.items():
        job_runs = [_run(job_id, r, shards_per_gpu or {}) for r in job_rows]
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
        started = [run for run in job_runs if run.start is not None]
        changes = [run_change(run, started[k - 1] if k else None) for k, run in enumerate(started)]
        # A stop the job did not come back from in the same round: a resume later, or none yet.
        preemptions = sum(c is Change.RESUMED for c in changes)
        if started and started[-1].state == "REQUEUED":
            preemptions += 1
        starts = [run.start for run in started if run.start is not None]
        finished = last.state == "COMPLETED"
        duration = meta.get("duration_s")
        submit = job_runs[0].submit or now
        records.append(
            JobRecord(
                job_id=job_id,
                num_gpus=requested or math.ceil(last.gpus),
                submit_time_s=submit,
                start_time_s=min(starts) if starts else None,
                finish_time_s=last.end if finished else None,
                state="finished" if finished else last.state.lower().split()[0],
                model=str(meta.get("model", "")),
                restarts=sum(c.restart for c in changes),
                migrations=sum(c.migration for c in changes),
                preemptions=preemptions,
                duration_s=float(duration) if isinstance(duration, int | float) else None,
                attained_gpu_s=attained,
                tenant=meta["tenant"] if isinstance(meta.get("tenant"), str) else None,
                guaranteed=meta.get("guaranteed") is True,
                deadline_s=_deadline(meta, submit),
            )
        )
    records.sort(key=lambda r: (r.submit_time_s, _numeric(r.job_id)))
    active = active_at_arrival([r.submit_time_s for r in records], [r.finish_time_s for r in records])
    records = [_with_active(r, n) for r, n in zip(records, active, strict=True)]
    return Report(records, runs, gpu_s, cpu_s)


_START_LINE = re.compile(r"mosaic r\d+-start-\S+ (\S+)")
START_SLACK_S = 2.0
"""How far a run's ``Start`` (whole seconds) may precede the store's record of the start
that made it: the controller records a start once its release returned, and Slurm may have
started the job a moment before."""


def with_store_starts(
    rows: Iterable[Mapping[str, str]], starts: Mapping[str, Sequence[tuple[float, str, str]]]
) -> list[dict[str, str]]:
    """``rows`` with each run's start line filled in from the store's action log where its
    ``AdminComment`` has none of its own (pure).

    Slurm lets only an Administrator set ``AdminComment``: a controller running as an
    Operator (the documented deployment) leaves its start lines in the store only, and
    without them the report judges runs by their nodes (a resume elsewhere would count as a
    migration). ``starts`` are each job's applied starts, oldest first: (time, request id,
    detail) (:meth:`Store.starts_done`). A run takes the newest start recorded at most
    :data:`START_SLACK_S` after it started and after the start the run before it took; a
    start that found the job already running made no run and is not taken.
    """
    out = [dict(row) for row in rows]
    by_job: dict[str, list[dict[str, str]]] = {}
    for row in out:
        by_job.setdefault(row.get("JobID", ""), []).append(row)
    for job_id, job_rows in by_job.items():
        made = [s for s in starts.get(job_id, ()) if not s[2].endswith(ALREADY_RUNNING)]
        taken = 0  # made[:taken] belong to earlier runs
        previous: str | None = None
        for row in job_rows:
            start = parse_time(row.get("Start", ""))
            if start is None:
                continue
            own = row.get("AdminComment", "")
            found = taken
            while found < len(made) and made[found][0] <= start + START_SLACK_S:
                found += 1
            if found > taken:
                taken = found
                if _START_LINE.match(own) is None or own == previous:
                    _, request, detail = made[found - 1]
                    row["AdminComment"] = f"mosaic {request} {detail}"
            previous = own
    return out


_RELAUNCHES = {c.value: c for c in Change if c.relaunch}


def run_change(run: Run, previous: Run | None) -> Change:
    """How ``run`` started, ``previous`` being the job's run before it (``None``: its first run).

    The reason the controller wrote into the run's ``AdminComment`` at its start says it:
    ``placed`` is a resume (the job was pending), a relaunch reason is that relaunch. A run
    with no start line of its own (the same comment as the run before: the controller did
    not start it) is judged by its nodes alone.
    """
    if previous is None:
        return Change.START
    m = _START_LINE.match(run.admin_comment)
    if m is not None and run.admin_comment != previous.admin_comment:
        reason = m.group(1)
        if reason == "placed":
            return Change.RESUMED
        if reason in _RELAUNCHES:
            return _RELAUNCHES[reason]
    return Change.MOVED if run.nodes != previous.nodes else Change.RESUMED


def _deadline(meta: Mapping[str, Any], submit: float) -> float | None:
    """``#MOSAIC --deadline-s S`` (the comment's ``deadline_s``: S seconds after submission) as
    a time on the submission clock; ``None`` without one (or with a malformed one)."""
    value = meta.get("deadline_s")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return submit + float(value) if math.isfinite(value) and value > 0 else None


def _with_active(r: JobRecord, n: int) -> JobRecord:
    return replace(r, active_at_arrival=n)


def _numeric(job_id: str) -> int:
    digits = "".join(c for c in job_id if c.isdigit())
    return int(digits) if digits else 0


def _run(job_id: str, row: Mapping[str, str], shards_per_gpu: Mapping[str, int]) -> Run:
    alloc = tres_map(row.get("AllocTRES", ""))
    per_gpu = _run_shards_per_gpu(row.get("NodeList", ""), shards_per_gpu) if "gres/shard" in alloc else 1
    return Run(
        job_id=job_id,
        state=row.get("State", "").split()[0] if row.get("State") else "",
        submit=parse_time(row.get("Submit", "")),
        start=parse_time(row.get("Start", "")),
        end=parse_time(row.get("End", "")),
        gpus=gpus_of(alloc, per_gpu),
        cpus=_count(alloc, "cpu"),
        nodes=row.get("NodeList", ""),
        admin_comment=row.get("AdminComment", ""),
    )


def summary(
    report: Report,
    *,
    cluster_gpus: int,
    cluster_cpus: int,
    decision_times_s: Sequence[float] = (),
    end_time_s: float | None = None,
    quotas: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The simulator's summary keys, computed by the same :func:`planner.metrics.summarize`
    (``quotas``: GPU quota per tenant, for the tenants' quota use)."""
    doc = summarize(
        report.records,
        cluster_gpus=cluster_gpus,
        cluster_cpus=cluster_cpus,
        allocated_gpu_s=report.allocated_gpu_s,
        allocated_cpu_s=report.allocated_cpu_s,
        decision_times_s=decision_times_s,
        end_time_s=end_time_s,
        quotas=quotas,
    )
    doc["rounds"] = len(decision_times_s)
    doc["end_time_s"] = end_time_s
    doc["gpus"] = cluster_gpus
    doc["source"] = "sacct"
    return doc
