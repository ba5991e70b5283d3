"""Deadline-aware Crius (``crius-ddl``, Crius §8.5) with ElasticFlow's admission.

Crius-DDL "provides strict deadline guarantees for each scheduled job while optimizing
cluster-wide performance" and "early drops those jobs that cannot be completed before their
deadlines" (§8.5, following ElasticFlow). Here, as in the artifact (``_is_crius_ddl_satisfied``):

* a Cell of a job with a deadline is *satisfactory* when the job, started (or restarted)
  in it now, finishes by its deadline: ``now + restart + remaining / speed <= deadline``
  (``remaining``: the job's remaining seconds at its reference shape, ``speed`` the Cell's
  normalised speed); every other Cell of it is infeasible for the search, so a running job
  is never shrunk or moved below what its deadline needs;
* admission (ElasticFlow §4.1): a waiting job with a deadline is admitted only in a
  satisfactory Cell, i.e. at least its *minimum satisfactory share* must fit (after the
  depth-bounded scaling of others, themselves kept satisfactory); an admitted job is never
  suspended for an earlier waiting job;
* a waiting job that no Cell can satisfy any more (its deadline is too close even on the
  fastest Cell, alone) is dropped: it is never started.

The deadline-satisfactory ratio (ElasticFlow's metric, §8.5) is :func:`satisfactory_ratio`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from planner.core.model import Job

_EPS = 1e-6


@dataclass(frozen=True)
class DeadlineRule:
    """Whether a job in a Cell of normalised ``speed`` meets its deadline, seen at ``now_s``."""

    now_s: float
    restart_s: float

    def finish_s(self, job: Job, speed: float, restart: bool) -> float | None:
        """When the job would finish at ``speed`` from now; ``None`` when its remaining work
        is unknown."""
        remaining = job.remaining_s if job.remaining_s is not None else job.duration_s
        if remaining is None or not speed > 0:
            return None
        return self.now_s + (self.restart_s if restart else 0.0) + remaining / speed

    def meets(self, job: Job, speed: float, restart: bool) -> bool:
        """True for a job without a deadline (or without a known remaining time)."""
        if job.deadline_s is None:
            return True
        finish = self.finish_s(job, speed, restart)
        return finish is None or finish <= job.deadline_s + _EPS


def min_satisfactory_share(
    job: Job, rule: DeadlineRule, speeds: Iterable[tuple[str, int, float]]
) -> tuple[int, str] | None:
    """ElasticFlow's minimum satisfactory share: the fewest GPUs (then the type name) among
    ``speeds`` (``(gpu_type, count, speed)`` of the job's candidate Cells) whose Cell meets
    the deadline when started now; ``None`` when none does (the job is dropped)."""
    restart = job.attained_gpu_s > 0
    best = [(n, t) for t, n, s in speeds if rule.meets(job, s, restart)]
    return min(best) if best else None


def satisfactory_ratio(jobs: Sequence[tuple[float | None, float | None]]) -> float | None:
    """The deadline-satisfactory ratio (ElasticFlow, Crius §8.5): of the jobs with a
    deadline, the share that finished by it. ``jobs`` are ``(finish_s, deadline_s)`` pairs
    (``finish_s`` ``None``: unfinished); ``None`` when no job has a deadline."""
    with_deadline = [(f, d) for f, d in jobs if d is not None]
    if not with_deadline:
        return None
    met = sum(1 for f, d in with_deadline if f is not None and f <= d + _EPS)
    return met / len(with_deadline)
