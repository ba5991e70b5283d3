"""Finish-time fairness (Themis, NSDI'20), as Synergy (§2) and Tesserae (§6.4) use it.

A job's finish-time fairness is rho = T_shared / T_ideal: its completion time in the
shared cluster over its completion time running alone on a 1/N share of the cluster.
Each round the policy serves the jobs whose *estimated* rho is worst first:

    T_shared ~= (now - submit) + remaining isolated time
    T_ideal   = duration * max(1, g * N / C)

with g the job's GPUs, C the cluster's GPUs (of the types the job accepts, if it names any) and
N the jobs active when it arrived, itself included: on a 1/N share a job needing more
than C/N GPUs runs proportionally slower. N is the contention the metric uses
(:mod:`planner.metrics`); the policy counts it when it first sees a job (the active
jobs submitted no later than it) and keeps it in ``policy_state`` (``{"n": N}``).
Where the duration is unknown, rho is estimated as the job's age over its executed
time (its slowdown so far).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from planner.core.model import Job, Snapshot
from planner.policies.common import arrival_key, options_reader, remaining_estimate_s
from planner.registry import StageContext
from planner.stages import ORDERINGS


def estimated_rho(job: Job, now_s: float, active_jobs: int, cluster_gpus: int) -> float:
    age = max(0.0, now_s - job.submit_time_s)
    if job.duration_s is not None and job.duration_s > 0:
        remaining = remaining_estimate_s(job)
        if math.isinf(remaining):
            remaining = job.duration_s
        share = max(1.0, job.num_gpus * active_jobs / max(cluster_gpus, 1))
        return (age + remaining) / (job.duration_s * share)
    executed = job.attained_gpu_s / job.num_gpus
    return math.inf if executed <= 0 else age / executed


@ORDERINGS.register("ftf")
@dataclass(frozen=True)
class FinishTimeFairness:
    """Worst estimated finish-time fairness rho first (Themis)."""

    preemptive_by_default: ClassVar[bool] = True

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        options_reader(options, "ftf", [])
        return cls()

    def order(self, snapshot: Snapshot) -> Sequence[Job]:
        now = snapshot.time_s
        gpus_by_type: dict[str, int] = {}
        for node in snapshot.nodes:
            gpus_by_type[node.gpu_type] = gpus_by_type.get(node.gpu_type, 0) + node.gpus
        total = sum(gpus_by_type.values())
        submits = sorted(j.submit_time_s for j in snapshot.jobs)
        keyed = []
        for job in snapshot.jobs:
            state = job.policy_state or {}
            n = state.get("n")
            if not isinstance(n, int) or n < 1:
                n = bisect.bisect_right(submits, job.submit_time_s)
                job = job.with_policy_state({"n": n})  # noqa: PLW2901 (the job, with its state)
            accepted = job.accepted_types
            cluster = sum(gpus_by_type.get(t, 0) for t in accepted) if accepted else total
            keyed.append(((-estimated_rho(job, now, n, cluster), arrival_key(job)), job))
        keyed.sort(key=lambda kv: kv[0])
        return [job for _, job in keyed]
