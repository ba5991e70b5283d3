"""ElasticFlow (ASPLOS'23), ElasticFlow-LS as Crius §8 runs it: deadline-aware admission and
elastic scaling on a homogeneous pool per GPU type.

ElasticFlow admits a job only if every admitted job can still meet its deadline, giving each
its *minimum satisfactory share* (the fewest GPUs with which it finishes in time) in
earliest-deadline-first order, then hands the GPUs left to the jobs whose throughput gains the
most from more (ElasticFlow §4.2-4.3, "progressive filling" and "resource allocation"). It is
heterogeneity-unaware: Crius's artifact runs it per GPU type, each job on the type it asked for.
What it sees are data-parallel profiles (Crius §8.1; :class:`~.view.DpView`), which over-state
the memory, hence the minimum share, of large models (Crius §8.3).

Stages:

* ordering ``elasticflow``: running deadline jobs (already admitted: ElasticFlow guarantees
  them), then waiting deadline jobs, both by deadline, then best-effort jobs (no deadline),
  running ones first, then by arrival. Preemptive.
* placement ``elasticflow``: per type (the job's *home* type: the one it asked for, else the one it
  runs on; a job running on another type moves to it), walking that order:

  1. **Admission**: a deadline job's minimum satisfactory share is the fewest GPUs ``c`` it
     accepts with ``now + slack_s + remaining(c) <= deadline``, ``remaining(c)`` its remaining
     work at ``c`` GPUs by the data-parallel view; a best-effort job's is its fewest feasible
     GPUs. A job is admitted when its share fits what earlier jobs left of the type's GPUs. A
     deadline job that no count can save any more is *late*: it is handled after the
     best-effort jobs, as one (ElasticFlow drops it; the simulator has no drop, and ElasticFlow-LS
     loosens deadlines instead).
  2. **Scaling**: while GPUs are left, the admitted job whose next larger count gains the most
     throughput per added GPU (relative to its current throughput) takes it (ties: arrival).
  3. **Placement** on physical GPUs: running jobs at their target count keep their GPUs; then
     the others, largest first, consolidated (a resized job on its own nodes when they have
     room); a job that does not fit tries smaller counts down to its share, else waits.

Only elastic jobs change count; counts are those the job accepts, its plan runs on, and the
view finds feasible (with Crius's table: the measured powers of two). Options: ``slack_s``
(390: a 360 s round plus a 30 s relaunch before the new shape makes progress), ``dp_check``
(true).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from planner.core.model import Assignment, GpuSlot, Job, Outcome, Snapshot
from planner.policies.baselines.common import (
    FreeGpus,
    assignment_for,
    capacity,
    current_type,
    home_type,
    runs_on,
    slots_on_type,
)
from planner.policies.baselines.view import DpView
from planner.policies.common import arrival_key, id_key, options_reader, remaining_estimate_s
from planner.registry import StageContext
from planner.stages import ORDERINGS, PLACEMENTS, Draft


@ORDERINGS.register("elasticflow")
@dataclass(frozen=True)
class ElasticFlowOrdering:
    """Admitted deadline jobs, then waiting ones, by deadline; then best-effort jobs."""

    preemptive_by_default: ClassVar[bool] = True

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        options_reader(options, "elasticflow ordering", [])
        return cls()

    def order(self, snapshot: Snapshot) -> Sequence[Job]:
        def key(job: Job) -> tuple[int, float, float, tuple[int, int, str]]:
            if job.deadline_s is not None:
                return (0 if job.is_running else 1), job.deadline_s, job.submit_time_s, id_key(job.id)
            return 2, (0.0 if job.is_running else 1.0), *arrival_key(job)

        return sorted(snapshot.jobs, key=key)


@dataclass
class _Entry:
    job: Job
    counts: list[int]  # counts it may run on, ascending
    share: int
    target: int


@PLACEMENTS.register("elasticflow")
@dataclass(frozen=True)
class ElasticFlowPlacement:
    """ElasticFlow's admission, scaling and placement per GPU type (module docstring)."""

    view: DpView
    slack_s: float = 390.0
    dp_check: bool = True

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        f = options_reader(options, "elasticflow placement", ["slack_s", "dp_check"])
        slack = f.opt_float("slack_s")
        if slack is not None and not (slack >= 0 and math.isfinite(slack)):
            f.fail_key("slack_s", f"expected a finite number >= 0, got {slack}")
        return cls(DpView(context.profiles), 390.0 if slack is None else slack, f.flag("dp_check", True))

    def counts(self, snapshot: Snapshot, job: Job, gpu_type: str) -> list[int]:
        """GPU counts of ``gpu_type`` the job accepts, its plan runs on and the view finds feasible
        (its current count while it runs there: it does run)."""
        low, high = job.gpu_range
        here = job.is_running and job.assignment is not None and current_type(snapshot, job) == gpu_type
        held = job.assignment.num_gpus if here and job.assignment is not None else None
        size = capacity(snapshot)[gpu_type]
        return [
            c
            for c in range(low, min(high, size) + 1)
            if c == held or (runs_on(job, c) and self.view.feasible(job, gpu_type, c, dp_check=self.dp_check))
        ]

    def share(self, snapshot: Snapshot, job: Job, gpu_type: str, counts: Sequence[int]) -> int | None:
        """The minimum satisfactory share; ``None``: the deadline cannot be met any more."""
        if job.deadline_s is None:
            return counts[0]
        work = remaining_estimate_s(job)
        if not math.isfinite(work):
            return counts[0]  # nothing known of its remaining work: its fewest GPUs
        for c in counts:
            t = self.view.time_s(job, work, gpu_type, c)
            if t is not None and snapshot.time_s + self.slack_s + t <= job.deadline_s:
                return c
        return None

    def place(self, snapshot: Snapshot, ordered: Sequence[Job]) -> Draft:
        outcomes: dict[str, Outcome] = {}
        placed: dict[str, Assignment] = {}
        free = FreeGpus(snapshot)
        sizes = capacity(snapshot)
        groups: dict[str, list[Job]] = {}
        for job in ordered:
            a = job.assignment
            if job.is_running and a is not None and current_type(snapshot, job) is None and free.has(a.gpus):
                # Spans GPU types (placed so by another scheduler): no pool of its own; it goes on.
                free.take(a.gpus)
                placed[job.id] = a
                outcomes[job.id] = Outcome.KEPT
                for name, count in a.per_node:
                    sizes[snapshot.nodes_by_name[name].gpu_type] -= count
                continue
            gpu_type = home_type(snapshot, job)
            if gpu_type is None:
                outcomes[job.id] = Outcome.NO_GPU_TYPE
            else:
                groups.setdefault(gpu_type, []).append(job)
        for gpu_type, jobs in groups.items():
            entries = self._admit(snapshot, gpu_type, sizes[gpu_type], jobs, outcomes)
            self._scale(gpu_type, entries, sizes[gpu_type] - sum(e.target for e in entries))
            self._realise(snapshot, gpu_type, entries, free, placed, outcomes)
        return Draft({j.id: placed[j.id] for j in ordered if j.id in placed}, outcomes)

    def _admit(
        self, snapshot: Snapshot, gpu_type: str, left: int, jobs: Sequence[Job], outcomes: dict[str, Outcome]
    ) -> list[_Entry]:
        admitted: list[_Entry] = []
        late: list[tuple[Job, list[int]]] = []
        for job in jobs:
            counts = self.counts(snapshot, job, gpu_type)
            if not counts:
                outcomes[job.id] = Outcome.INFEASIBLE
                continue
            share = self.share(snapshot, job, gpu_type, counts)
            if share is None:
                late.append((job, counts))
                continue
            if share <= left:
                left -= share
                admitted.append(_Entry(job, counts, share, share))
            else:
                outcomes[job.id] = Outcome.NO_CAPACITY
        for job, counts in late:  # deadline missed whatever happens: best effort
            if counts[0] <= left:
                left -= counts[0]
                admitted.append(_Entry(job, counts, counts[0], counts[0]))
            else:
                outcomes[job.id] = Outcome.NO_CAPACITY
        return admitted

    def _scale(self, gpu_type: str, entries: list[_Entry], left: int) -> None:
        while left > 0:
            best: tuple[float, tuple[float, tuple[int, int, str]], _Entry, int] | None = None
            for e in entries:
                bigger = [c for c in e.counts if e.target < c <= e.target + left]
                if not bigger:
                    continue
                step = bigger[0]
                now = self.view.throughput(e.job, gpu_type, e.target, dp_check=self.dp_check)
                then = self.view.throughput(e.job, gpu_type, step, dp_check=self.dp_check)
                if then <= now:
                    continue
                gain = (then / now - 1.0 if now > 0 else math.inf) / (step - e.target)
                tie = (-e.job.submit_time_s, id_key(e.job.id))
                if best is None or (gain, tie) > (best[0], best[1]):
                    best = (gain, tie, e, step)
            if best is None:
                return
            _, _, entry, step = best
            left -= step - entry.target
            entry.target = step

    def _realise(
        self,
        snapshot: Snapshot,
        gpu_type: str,
        entries: Sequence[_Entry],
        free: FreeGpus,
        placed: dict[str, Assignment],
        outcomes: dict[str, Outcome],
    ) -> None:
        rest: list[_Entry] = []
        for e in entries:
            a = e.job.assignment
            stays = e.job.is_running and a is not None and a.num_gpus == e.target
            if stays and a is not None and free.has(a.gpus) and current_type(snapshot, e.job) == gpu_type:
                free.take(a.gpus)
                placed[e.job.id] = a
                outcomes[e.job.id] = Outcome.KEPT
                continue
            rest.append(e)
        rest.sort(key=lambda e: (-e.target, e.job.submit_time_s, id_key(e.job.id)))
        for e in rest:
            slots = self._slots(snapshot, e, gpu_type, free)
            if slots is None:
                outcomes[e.job.id] = Outcome.NO_CONSOLIDATED_SLOT
                continue
            free.take(slots)
            placed[e.job.id] = assignment_for(e.job, slots)
            outcomes[e.job.id] = Outcome.PLACED

    def _slots(
        self, snapshot: Snapshot, e: _Entry, gpu_type: str, free: FreeGpus
    ) -> tuple[GpuSlot, ...] | None:
        """GPUs for the target count, else smaller counts down to the share; a running job
        prefers its own nodes (its GPUs there count as free for it)."""
        job, a = e.job, e.job.assignment
        here = (
            job.is_running and a is not None and free.has(a.gpus) and current_type(snapshot, job) == gpu_type
        )
        own = a.gpus if here and a is not None else ()
        for count in [c for c in e.counts if e.share <= c <= e.target][::-1]:
            if own:
                mine = {n: free.gpus[n] for n in {name for name, _ in own}}
                restricted = _on_nodes(snapshot, count, mine, gpu_type)
                if restricted is not None:
                    return restricted
            slots = slots_on_type(snapshot, job, count, free, gpu_type)
            if slots is not None:
                return slots
        return None


def _on_nodes(
    snapshot: Snapshot, count: int, free: Mapping[str, Sequence[int]], gpu_type: str
) -> tuple[GpuSlot, ...] | None:
    """``count`` of the ``free`` GPUs of the listed nodes only (a running job staying where it
    is): on one of them, else the same count on each."""
    nodes = [n for n in snapshot.nodes if n.name in free and n.gpu_type == gpu_type]
    if not nodes:
        return None
    for n in nodes:
        if len(free[n.name]) >= count:
            return tuple((n.name, k) for k in free[n.name][:count])
    if count % len(nodes) == 0 and all(len(free[n.name]) >= count // len(nodes) for n in nodes):
        per = count // len(nodes)
        return tuple((n.name, k) for n in nodes for k in free[n.name][:per])
    return None
