"""``mosaic status``'s table: the managed jobs as squeue lists them, with what Mosaic knows (pure).

One row per job: id, user, tenant, state, GPUs requested / allocated, the execution plan of
the last round, restarts and the reason it is where it is. The jobs and their states,
users, restarts and allocations are Slurm's (``squeue``) when it answers; otherwise the
state store's unfinished jobs as of the last round (state ``running`` when that round ran
them). The request is the store's (what the controller keeps: a resize changes it), the
plan and the reason the last round's (``placed``, ``kept``, ``no-capacity``, ...; a start
that failed or was skipped says so). Then a line per tenant (jobs, GPUs, and with a quota
from the config's ``[[tenants]]`` the share of it its running guaranteed jobs use) and
the cluster's GPUs in use.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurm_plugin.controller.observe import OUTSIDE_PREFIX, RUNNING_STATES, job_gpus
from slurm_plugin.directives import decode_comment
from slurm_plugin.slurm.parse import SlurmJob, SlurmNode
from slurm_plugin.store import JobRecord, RoundRecord

COLUMNS = ("JOBID", "USER", "TENANT", "STATE", "GPUS(REQ/ALLOC)", "PLAN", "RESTARTS", "REASON")

_PLAN_NAMES = {
    "zero_stage": "zero",
    "micro_batch": "mb",
    "grad_accum": "accum",
    "global_batch": "batch",
    "offload_optimizer": "offload-opt",
    "offload_param": "offload-param",
    "activation_checkpointing": "ckpt",
}


@dataclass(frozen=True)
class Row:
    job: str
    user: str
    tenant: str
    state: str
    requested: int | None
    allocated: int
    plan: str
    restarts: str
    reason: str
    guaranteed: bool = False


def plan_text(plan: Mapping[str, Any] | None) -> str:
    """``{"dp": 2, "zero_stage": 2}`` -> ``dp=2,zero=2``; flags by name when set; ``-`` for none."""
    if not plan:
        return "-"
    parts = []
    for key, value in plan.items():
        name = _PLAN_NAMES.get(key, key)
        if isinstance(value, bool):
            if value:
                parts.append(name)
        elif value is not None:
            parts.append(f"{name}={value}")
    return ",".join(parts) or "-"


def rows(
    records: Mapping[str, JobRecord],
    last_round: RoundRecord | None,
    actions: Sequence[Mapping[str, Any]],
    slurm_jobs: Sequence[SlurmJob] | None,
    partitions: Sequence[str],
    user_name: Callable[[int], str] = str,
) -> list[Row]:
    """The table's rows, by job id (numeric ids in numeric order)."""
    plan = last_round.plan if last_round is not None else {}
    assignments: Mapping[str, Any] = plan.get("assignments") or {}
    reasons: Mapping[str, Any] = plan.get("reasons") or {}
    refused = {
        str(a["job"]): f"start-{a['status']}"
        for a in actions
        if a.get("kind") == "start" and a.get("status") in {"failed", "skipped"}
    }
    out: list[Row] = []
    if slurm_jobs is not None:
        for sj in slurm_jobs:
            if sj.partition not in partitions:
                continue
            record = records.get(sj.id)
            meta: Mapping[str, Any] = (record.meta if record is not None else None) or {}
            meta = meta or decode_comment(sj.comment) or {}
            running = sj.state in RUNNING_STATES or sj.state == "COMPLETING"
            slurm_reason = sj.reason if sj.reason and sj.reason != "None" else ""
            out.append(
                Row(
                    job=sj.id,
                    user=user_name(sj.user_id) if sj.user_id is not None else "-",
                    tenant=str(meta.get("tenant") or "-"),
                    state=sj.state,
                    requested=record.num_gpus if record is not None else job_gpus(sj),
                    allocated=job_gpus(sj) if running else 0,
                    plan=plan_text(_plan(assignments.get(sj.id))),
                    restarts=str(sj.requeues),
                    reason=refused.get(sj.id) or str(reasons.get(sj.id) or slurm_reason or "-"),
                    guaranteed=meta.get("guaranteed") is True,
                )
            )
    else:
        started = {j for j in assignments if j not in refused}
        for job_id, record in records.items():
            if record.finished_s is not None or job_id.startswith(OUTSIDE_PREFIX):
                continue
            # A job left to finish on a draining node is planned as occupied capacity.
            assignment = assignments.get(job_id) if job_id in started else None
            assignment = assignment or assignments.get(OUTSIDE_PREFIX + job_id)
            stored: Mapping[str, Any] = record.meta or {}
            out.append(
                Row(
                    job=job_id,
                    user="-",
                    tenant=str(stored.get("tenant") or "-"),
                    state="running" if assignment is not None else "pending",
                    requested=record.num_gpus,
                    allocated=len(assignment.get("gpus") or ()) if assignment is not None else 0,
                    plan=plan_text(_plan(assignment)),
                    restarts="-",
                    reason=refused.get(job_id) or str(reasons.get(job_id) or "-"),
                    guaranteed=stored.get("guaranteed") is True,
                )
            )
    out.sort(key=lambda r: (not r.job.isdigit(), int(r.job) if r.job.isdigit() else 0, r.job))
    return out


def _plan(assignment: Any) -> Mapping[str, Any] | None:
    plan = assignment.get("plan") if isinstance(assignment, Mapping) else None
    return plan if isinstance(plan, Mapping) else None


def table(job_rows: Sequence[Row]) -> list[str]:
    """The rows under :data:`COLUMNS`, each column as wide as its widest cell."""
    cells = [
        (
            r.job,
            r.user,
            r.tenant,
            r.state,
            f"{'-' if r.requested is None else r.requested}/{r.allocated}",
            r.plan,
            r.restarts,
            r.reason,
        )
        for r in job_rows
    ]
    widths = [max(len(c[k]) for c in [COLUMNS, *cells]) for k in range(len(COLUMNS))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in [COLUMNS, *cells]
    ]


def tenant_lines(job_rows: Sequence[Row], quotas: Mapping[str, float] | None) -> list[str]:
    """Per tenant (with jobs, or a quota): its jobs, running GPUs, and the quota its running
    guaranteed jobs use (their GPUs / the quota, as ``mosaic report``'s ``quota_use`` counts)."""
    names = sorted({r.tenant for r in job_rows if r.tenant != "-"} | set(quotas or {}))
    lines = []
    for name in names:
        mine = [r for r in job_rows if r.tenant == name]
        running = [r for r in mine if r.allocated]
        gpus = sum(r.allocated for r in running)
        guaranteed = sum(r.allocated for r in running if r.guaranteed)
        line = f"tenant {name}: {len(mine)} job(s), {len(running)} running on {gpus} GPU(s)"
        quota = (quotas or {}).get(name)
        if quota is not None:
            use = f"{guaranteed / quota:.0%}" if quota > 0 else "-"
            line += f"; quota {quota:g} GPUs, {guaranteed} used by guaranteed jobs ({use})"
        lines.append(line)
    return lines


def cluster_line(
    job_rows: Sequence[Row], nodes: Sequence[SlurmNode] | None, partitions: Sequence[str]
) -> str:
    """The managed nodes' GPUs in use (Slurm's count, jobs outside Mosaic included)."""
    ours = sum(r.allocated for r in job_rows)
    running = sum(1 for r in job_rows if r.allocated)
    jobs = f"{ours} held by the {running} job(s) listed holding GPUs, {len(job_rows) - running} waiting"
    if nodes is None:
        return f"cluster: GPUs unknown (sinfo did not answer); {jobs}"
    managed = [n for n in nodes if set(partitions) & set(n.partitions)]
    total = sum(n.gpus for n in managed)
    used = sum(n.gpus_used for n in managed)
    share = f" ({used / total:.0%})" if total else ""
    usable = sum(n.gpus for n in managed if n.usable)
    return (
        f"cluster: {used} of {total} GPUs in use{share} on {len(managed)} node(s) of {', '.join(partitions)}"
        f" ({usable} usable); {jobs}"
    )


def round_line(last_round: RoundRecord | None, ticks: int, failed: int) -> str:
    if last_round is None:
        return f"controller: no round yet ({ticks} tick(s), {failed} failed)"
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(last_round.time_s))
    return (
        f"controller: round {last_round.round_id} at {when} ({last_round.status}); "
        f"{ticks} tick(s), {failed} failed"
    )


def render(
    records: Mapping[str, JobRecord],
    last_round: RoundRecord | None,
    actions: Sequence[Mapping[str, Any]],
    slurm_jobs: Sequence[SlurmJob] | None,
    nodes: Sequence[SlurmNode] | None,
    partitions: Sequence[str],
    *,
    ticks: int = 0,
    failed_ticks: int = 0,
    quotas: Mapping[str, float] | None = None,
    slurm_error: str | None = None,
    user_name: Callable[[int], str] = str,
) -> str:
    """The whole text of ``mosaic status``."""
    job_rows = rows(records, last_round, actions, slurm_jobs, partitions, user_name)
    lines = []
    if slurm_error is not None:
        lines.append(f"slurm did not answer ({slurm_error}); jobs as of the controller's last round")
    lines += table(job_rows)
    lines.append("")
    lines += tenant_lines(job_rows, quotas)
    lines.append(cluster_line(job_rows, nodes, partitions))
    lines.append(round_line(last_round, ticks, failed_ticks))
    return "\n".join(lines)
