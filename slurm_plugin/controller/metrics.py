"""Prometheus text-format metrics, rewritten atomically after every tick.

Point node_exporter's textfile collector (or any scraper of files) at the file. What it
holds (docs/admin-guide.md, "Metrics"; ``contrib/grafana/mosaic-dashboard.json`` charts them):

* the ticks (``mosaic_ticks_total``, ``mosaic_tick_failures_total``, ``mosaic_last_tick_*``)
  and the last round (``mosaic_managed_jobs``, ``mosaic_round_actions``,
  ``mosaic_decision_seconds``), as before;
* the cluster after the tick's round (:class:`ClusterState`): managed jobs by state
  (``mosaic_jobs``), GPUs in use per tenant against its quota (``mosaic_tenant_gpus_in_use``,
  ``mosaic_tenant_gpu_quota``), the managed GPUs allocated, their capacity and the ratio
  (``mosaic_gpus_allocated``, ``mosaic_gpus_capacity``, ``mosaic_gpu_utilization_ratio``);
* counters of what the rounds applied (:data:`COUNTERS`) and a histogram of the planner's
  decision time (``mosaic_round_decision_seconds``), kept in the state store's ``counters``
  table and added to in the transaction that finishes each round, so a controller restart
  (or ``mosaic controller --once`` from cron) carries on from where they were.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from planner.core.model import Assignment
from planner.relaunch import Change
from slurm_plugin.controller.observe import OUTSIDE_PREFIX, RUNNING_STATES, Observation
from slurm_plugin.files import write_atomic
from slurm_plugin.store import Store

if TYPE_CHECKING:
    from slurm_plugin.controller.loop import TickReport
    from slurm_plugin.controller.rounddiff import Action

JOB_STATES = ("running", "pending", "held")
"""``mosaic_jobs``' states: running, pending that Slurm could start, pending and held (priority
0: held by Mosaic, which releases a job when it places it, or submitted held)."""

COUNTERS: Mapping[str, tuple[str, str]] = {
    "starts": (
        "mosaic_job_starts_total",
        "Starts the controller applied (first starts, resumes and the start half of relaunches).",
    ),
    "stops": (
        "mosaic_job_stops_total",
        "Stops the controller applied (checkpoint + requeuehold: preemptions and relaunches).",
    ),
    "resizes": ("mosaic_job_resizes_total", "Running jobs relaunched on another GPU count."),
    "type_moves": (
        "mosaic_job_type_moves_total",
        "Running jobs relaunched on GPUs of another type.",
    ),
    "restarts": (
        "mosaic_job_restarts_total",
        "Restarts: relaunches of running jobs (moved, resized, shared, reshaped) and resumes "
        "of jobs that ran before (planner.relaunch's definition).",
    ),
}
"""The store's counter name -> (metric, help)."""

DECISION_BUCKETS_S = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
"""Upper bounds of ``mosaic_round_decision_seconds``' buckets (``+Inf`` is the count)."""
_DECISION = "decision_s"  # the store's counter names of the histogram: _DECISION + ":sum" etc.


@dataclass(frozen=True)
class ClusterState:
    """Managed jobs and GPUs as the tick's round left them: what Slurm showed, with the
    round's applied actions on top (a started job runs, a stopped or held one is held)."""

    jobs: Mapping[str, int]  # JOB_STATES -> managed jobs
    tenant_gpus: Mapping[str, int]  # tenant -> GPUs of its running jobs
    gpus_capacity: int  # GPUs of the usable nodes of the managed partitions
    gpus_allocated: int  # of those, GPUs some job (managed or not) runs on


def cluster_state(obs: Observation, actions: Sequence[Action], done: Collection[str]) -> ClusterState:
    """What :class:`ClusterState` says after applying the actions in ``done`` (request ids)
    to ``obs`` (pure). ``done`` empty: the cluster as observed."""
    by_id = {j.id: j for j in obs.snapshot.jobs}
    state: dict[str, str] = {}
    running: dict[str, Assignment] = {}
    for job_id, sj in obs.managed.items():
        job = by_id.get(job_id)
        if sj.state in RUNNING_STATES:
            state[job_id] = "running"
            if job is not None and job.assignment is not None:
                running[job_id] = job.assignment
        else:
            state[job_id] = "held" if sj.held else "pending"
    for a in actions:
        if a.request_id not in done or a.job_id not in state:
            continue
        if a.kind.value == "start" and a.assignment is not None:
            state[a.job_id] = "running"
            running[a.job_id] = a.assignment
        else:  # a stop (requeuehold) or a hold
            state[a.job_id] = "held"
            running.pop(a.job_id, None)
    jobs = dict.fromkeys(JOB_STATES, 0)
    for s in state.values():
        jobs[s] += 1
    tenant_gpus: dict[str, int] = {}
    for job_id, assignment in running.items():
        job = by_id.get(job_id)
        if job is not None and job.tenant:
            tenant_gpus[job.tenant] = tenant_gpus.get(job.tenant, 0) + assignment.num_gpus
    nodes = obs.snapshot.nodes_by_name
    outside = (j.assignment for j in obs.snapshot.jobs if j.id.startswith(OUTSIDE_PREFIX) and j.assignment)
    used = {gpu for a in (*running.values(), *outside) for gpu in a.gpus if gpu[0] in nodes}
    return ClusterState(jobs, tenant_gpus, sum(n.gpus for n in obs.snapshot.nodes), len(used))


def round_counts(
    obs: Observation, actions: Sequence[Action], done: Collection[str], decision_time_s: float | None
) -> dict[str, float]:
    """What one applied round adds to the store's counters (pure): the actions in ``done``
    counted as :data:`COUNTERS` describes, and the round's decision time in the histogram."""
    by_id = {j.id: j for j in obs.snapshot.jobs}
    counts = dict.fromkeys(COUNTERS, 0.0)
    relaunches = {c.value for c in Change if c.relaunch}
    for a in actions:
        if a.request_id not in done:
            continue
        if a.kind.value == "stop":
            counts["stops"] += 1
        if a.kind.value != "start":
            continue
        counts["starts"] += 1
        sj = obs.managed.get(a.job_id)
        if a.reason in relaunches or (sj is not None and sj.requeues > 0 and a.reason == "placed"):
            counts["restarts"] += 1
        if a.reason == Change.RESIZED.value:
            counts["resizes"] += 1
        before = job.assignment if (job := by_id.get(a.job_id)) is not None else None
        if a.reason in relaunches and before is not None and a.assignment is not None:
            counts["type_moves"] += _gpu_types(obs, before) != _gpu_types(obs, a.assignment)
    if decision_time_s is not None:
        counts[f"{_DECISION}:count"] = 1.0
        counts[f"{_DECISION}:sum"] = decision_time_s
        for le in DECISION_BUCKETS_S:
            if decision_time_s <= le:
                counts[f"{_DECISION}:le={le:g}"] = 1.0
    return counts


def _gpu_types(obs: Observation, a: Assignment) -> set[str]:
    nodes = obs.snapshot.nodes_by_name
    return {nodes[n].gpu_type for n in a.nodes if n in nodes}


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.6f}"


def render(store: Store, report: TickReport, quotas: Mapping[str, float] | None = None) -> str:
    ticks, failed = store.tick_counts()
    done = len(report.result.done) if report.result else 0
    skipped = len(report.result.skipped) if report.result else 0
    failed_actions = len(report.result.failed) if report.result else 0
    lines = [
        "# HELP mosaic_ticks_total Controller ticks since the state store was created.",
        "# TYPE mosaic_ticks_total counter",
        f"mosaic_ticks_total {ticks}",
        "# HELP mosaic_tick_failures_total Ticks that could not read Slurm or failed.",
        "# TYPE mosaic_tick_failures_total counter",
        f"mosaic_tick_failures_total {failed}",
        "# HELP mosaic_last_tick_ok 1 when the last tick observed Slurm and applied its round.",
        "# TYPE mosaic_last_tick_ok gauge",
        f"mosaic_last_tick_ok {int(report.ok)}",
        "# HELP mosaic_last_tick_timestamp_seconds When the last tick started.",
        "# TYPE mosaic_last_tick_timestamp_seconds gauge",
        f"mosaic_last_tick_timestamp_seconds {report.time_s:.3f}",
        "# HELP mosaic_managed_jobs Jobs pending or running in the managed partitions.",
        "# TYPE mosaic_managed_jobs gauge",
        f"mosaic_managed_jobs {report.jobs}",
        "# HELP mosaic_round_actions Actions of the last round by outcome.",
        "# TYPE mosaic_round_actions gauge",
        f'mosaic_round_actions{{outcome="done"}} {done}',
        f'mosaic_round_actions{{outcome="skipped"}} {skipped}',
        f'mosaic_round_actions{{outcome="failed"}} {failed_actions}',
    ]
    if report.decision_time_s is not None:
        lines += [
            "# HELP mosaic_decision_seconds Planner time of the last round.",
            "# TYPE mosaic_decision_seconds gauge",
            f"mosaic_decision_seconds {report.decision_time_s:.6f}",
        ]
    lines += _cluster_lines(report.cluster, quotas or {})
    lines += _counter_lines(store.counters())
    return "\n".join(lines) + "\n"


def _cluster_lines(cluster: ClusterState | None, quotas: Mapping[str, float]) -> list[str]:
    """The cluster's gauges; without a state (the tick could not observe Slurm) only the
    quotas, which are configuration: a gauge Mosaic does not know is left out, not zeroed."""
    lines = [
        "# HELP mosaic_tenant_gpu_quota GPU quota of each tenant ([[tenants]] gpu_quota).",
        "# TYPE mosaic_tenant_gpu_quota gauge",
        *(f'mosaic_tenant_gpu_quota{{tenant="{_label(t)}"}} {_number(q)}' for t, q in sorted(quotas.items())),
    ]
    if cluster is None:
        return lines
    tenants = sorted(set(quotas) | set(cluster.tenant_gpus))
    ratio = cluster.gpus_allocated / cluster.gpus_capacity if cluster.gpus_capacity else 0.0
    return [
        *lines,
        "# HELP mosaic_tenant_gpus_in_use GPUs of each tenant's running jobs after the last round.",
        "# TYPE mosaic_tenant_gpus_in_use gauge",
        *(
            f'mosaic_tenant_gpus_in_use{{tenant="{_label(t)}"}} {cluster.tenant_gpus.get(t, 0)}'
            for t in tenants
        ),
        "# HELP mosaic_jobs Managed jobs after the last round by state (held: pending at priority 0).",
        "# TYPE mosaic_jobs gauge",
        *(f'mosaic_jobs{{state="{s}"}} {cluster.jobs.get(s, 0)}' for s in JOB_STATES),
        "# HELP mosaic_gpus_capacity GPUs of the usable nodes of the managed partitions.",
        "# TYPE mosaic_gpus_capacity gauge",
        f"mosaic_gpus_capacity {cluster.gpus_capacity}",
        "# HELP mosaic_gpus_allocated Of those, GPUs a job runs on after the last round (Mosaic's or not).",
        "# TYPE mosaic_gpus_allocated gauge",
        f"mosaic_gpus_allocated {cluster.gpus_allocated}",
        "# HELP mosaic_gpu_utilization_ratio GPUs allocated / GPUs of the managed partitions (0: none).",
        "# TYPE mosaic_gpu_utilization_ratio gauge",
        f"mosaic_gpu_utilization_ratio {ratio:.6f}",
    ]


def _counter_lines(counters: Mapping[str, float]) -> list[str]:
    lines = []
    for key, (name, text) in COUNTERS.items():
        lines += [
            f"# HELP {name} {text}",
            f"# TYPE {name} counter",
            f"{name} {_number(counters.get(key, 0.0))}",
        ]
    name = "mosaic_round_decision_seconds"
    lines += [
        f"# HELP {name} Planner decision time of each applied round (plan_round).",
        f"# TYPE {name} histogram",
    ]
    for le in DECISION_BUCKETS_S:
        lines.append(f'{name}_bucket{{le="{le:g}"}} {_number(counters.get(f"{_DECISION}:le={le:g}", 0.0))}')
    count = counters.get(f"{_DECISION}:count", 0.0)
    lines += [
        f'{name}_bucket{{le="+Inf"}} {_number(count)}',
        f"{name}_sum {_number(counters.get(f'{_DECISION}:sum', 0.0))}",
        f"{name}_count {_number(count)}",
    ]
    return lines


def write(path: Path, store: Store, report: TickReport, quotas: Mapping[str, float] | None = None) -> None:
    write_atomic(path, render(store, report, quotas))
