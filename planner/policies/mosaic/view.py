"""The jobs as the ``mosaic`` scheduler may know them: declared limits, never the true run times.

A trace's ``duration_s`` and the simulator's ``remaining_s`` are the truth that the simulator
runs jobs with; a live cluster has neither. Slurm does know each job's time limit (``--time``):
a job is killed when it has run that long, so the limit is an upper bound on its run time that
the user has every reason to keep honest. ``mosaic`` plans with that bound alone:

* ``duration_s`` becomes the job's ``time_limit_s`` (``None`` when it declared none);
* ``remaining_s`` becomes what is left of the bound after the time the job has executed
  (``attained_gpu_s / num_gpus``), never below zero; a job without a limit that has run gets
  Tiresias's attained-service estimate (a job that has run ``t`` is expected to run about ``t``
  more: the heavy-tailed run times that make LAS work, Tiresias §3), and a job without a limit
  that never ran stays unknown (``None``: +inf to every estimate);
* ``progress`` is dropped: in the simulator it is the true fraction done.

So every stage that estimates a remaining time (SJF-BSBF's Theorem 1, Crius's restart charge)
estimates it from what a real cluster knows, and a round is the same whatever the true
``duration_s``/``remaining_s`` are (tests/planner/test_mosaic.py checks it).

:func:`settled` charges and bounds restarts (the ordering acts on it). A running job is
*settled* when a restart would not pay by Rubick's rule (§5.3, "Incorporating reconfiguration
penalty": ``(T - N·δ) / T`` must exceed 0.97, ``T`` its training time so far, ``N`` its
restarts counting the new one, ``δ`` the restart cost,
:func:`planner.policies.rubick.policy.may_reconfigure`), or when it has been restarted
``max_restarts`` times. So restarts cost a job at most 3 % of its run time, a job that has just
(re)started is not stopped again at once, and a short job runs to its end.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from planner.core.model import Job, Snapshot
from planner.policies.rubick.policy import THRESHOLD, may_reconfigure
from planner.registry import DEFAULT_RESTART_COST_S

DEFAULT_MAX_RESTARTS = 8


@dataclass(frozen=True)
class DeclaredView:
    """``snapshot`` as ``mosaic`` plans it (module docstring)."""

    # job id -> (the job handed in, its view): the simulator hands in the very same object
    # while a job does not change, and the orderings keep their work per object (tiresias.py),
    # so an unchanged job must get the very same view back. A pure function's memo.
    _seen: dict[str, tuple[Job, Job]] = field(default_factory=dict, repr=False, compare=False)

    def apply(self, snapshot: Snapshot) -> Snapshot:
        seen = self._seen
        if len(seen) > 4 * len(snapshot.jobs) + 1024:
            live = {j.id for j in snapshot.jobs}
            for job_id in [k for k in seen if k not in live]:
                del seen[job_id]
        jobs = []
        for j in snapshot.jobs:
            memo = seen.get(j.id)
            if memo is None or memo[0] is not j:
                memo = seen[j.id] = (j, self.job(j))
            jobs.append(memo[1])
        if all(a is b for a, b in zip(jobs, snapshot.jobs, strict=True)):
            return snapshot
        return replace(snapshot, jobs=tuple(jobs))

    def job(self, job: Job) -> Job:
        duration = job.time_limit_s
        remaining = declared_remaining_s(job)
        if job.duration_s == duration and job.remaining_s == remaining and job.progress is None:
            return job
        return replace(job, duration_s=duration, remaining_s=remaining, progress=None)


@dataclass(frozen=True)
class RestartRule:
    """When a running job is settled (module docstring)."""

    max_restarts: int = DEFAULT_MAX_RESTARTS
    restart_cost_s: float = DEFAULT_RESTART_COST_S
    threshold: float = THRESHOLD

    def settled(self, job: Job) -> bool:
        if not job.is_running:
            return False
        return job.restarts >= self.max_restarts or not may_reconfigure(
            job, self.restart_cost_s, self.threshold
        )


def declared_remaining_s(job: Job) -> float | None:
    """What is left of the job's time limit, or the attained-service estimate (module docstring)."""
    executed = job.attained_gpu_s / max(1, job.num_gpus)
    if job.time_limit_s is not None:
        return max(0.0, job.time_limit_s - executed)
    return executed if executed > 0 else None
