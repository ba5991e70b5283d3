"""Elastic allocation: GPU count, CPUs, memory and plan of elastic jobs, chosen together.

The joint-allocation stage (``reconfiguration`` slot of the pipeline, after placement and
shaping; contract in :class:`planner.stages.Reconfiguration`). Rubick §3-5 and Crius §4-6
both make a job's resources and its execution plan one decision; this stage is the shared
mechanism they build on, with a plain throughput rule (Pollux/Sia-style marginal gain):

1. **Admit** each waiting job (priority order): an elastic one at the largest count in
   ``[min_gpus, num_gpus]`` that fits free GPUs of a type it accepts, consolidated (one
   node when it fits one, else the fewest nodes with the same count on each). If none fits,
   **shrink** elastic jobs on one node to make room: GPUs a job holds beyond the
   ``num_gpus`` it asked for (grown into while they were free) go back to any waiting job;
   below ``num_gpus``, down to ``min_gpus``, only to a job of higher priority.
2. **Grow** placed elastic jobs (priority order) into free GPUs on their own nodes, one
   step at a time (counts the plan's ``tp x pp`` divides), while the fitted scaling model
   (:mod:`profiles.scaling`: global batch fixed; corrected by what running jobs measured,
   :mod:`profiles.scaling_correction`) says the next step raises throughput by more than
   ``min_gain`` (a running job must gain enough to pay its relaunch).
3. Every changed job gets the GPU-proportional CPUs and memory of its new GPUs and its plan
   rescaled to the new count (same global batch: ``dp`` and micro-batch x accumulation
   follow, :func:`planner.core.execplan.rescale`).

Rigid jobs are never resized (a waiting rigid job may be admitted on GPUs freed here).
Re-planning an applied plan changes nothing: a job at a count already chosen has no free
GPU to grow into that it did not have, and shrinking happens only to admit a waiting job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

from planner.core.execplan import PlanError, plan_from_mapping, plan_to_mapping, replan
from planner.core.model import Assignment, GpuSlot, Job, Node, Outcome, Snapshot
from planner.policies.common import options_reader
from planner.policies.shaping import proportional_share
from planner.registry import StageContext
from planner.slots import FreeSlots, consolidated_slots
from planner.stages import RECONFIGURATIONS, Draft
from profiles.scaling import ScalingModel
from profiles.scaling_correction import scaling_for

# Outcomes the placement gave jobs that can never run here: no GPU of their type, too big.
_NEVER = frozenset({Outcome.INFEASIBLE, Outcome.NO_GPU_TYPE})


class _Free(FreeSlots):
    """Free GPUs per node (the shared :class:`~planner.slots.FreeSlots`) and the nodes, whose
    CPUs and memory the stage checks, while the stage works (local, mutable)."""

    def __init__(self, snapshot: Snapshot, assignments: Mapping[str, Assignment]) -> None:
        super().__init__(snapshot.nodes, (slot for a in assignments.values() for slot in a.gpus))
        self.nodes: Mapping[str, Node] = snapshot.nodes_by_name


@RECONFIGURATIONS.register("elastic")
@dataclass(frozen=True)
class ElasticAllocation:
    """Options: ``min_gain`` (0.1): the throughput a step up must add, relative.

    ``preemptive`` (from the stage context: ``False`` when the scheduler is configured
    non-preemptive, ``--non-preemptive``): with ``False`` no running job is shrunk; nor, under
    either, a running job that is not ``preemptible``.
    """

    scaling: ScalingModel
    min_gain: float = 0.1
    preemptive: bool = True

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        f = options_reader(options, "elastic allocation", ["min_gain"])
        gain = f.opt_float("min_gain")
        return cls(scaling_for(context.profiles), 0.1 if gain is None else gain, context.preemptive)

    def reconfigure(self, snapshot: Snapshot, ordered: Sequence[Job], draft: Draft) -> Draft:
        if not any(j.elastic for j in ordered):
            return draft
        assignments = dict(draft.assignments)
        outcomes = dict(draft.outcomes)
        free = _Free(snapshot, assignments)
        rank = {j.id: k for k, j in enumerate(ordered)}
        changed: set[str] = set()
        for job in ordered:
            if job.id in assignments or outcomes.get(job.id) in _NEVER:
                continue
            slots = self._admit(snapshot, job, free) or self._make_room(
                snapshot, job, ordered, rank, assignments, free, changed
            )
            if slots is not None:
                free.take(slots)
                plan = job.assignment.plan if job.assignment is not None else job.plan
                assignments[job.id] = Assignment(slots, 0, 0.0, plan)
                outcomes[job.id] = Outcome.PLACED
                changed.add(job.id)
        for job in ordered:
            a = assignments.get(job.id)
            if job.elastic and a is not None:
                grown = self._grow(snapshot, job, a, free)
                if grown is not None:
                    assignments[job.id] = grown
                    changed.add(job.id)
        for job_id in changed:
            job = ordered[rank[job_id]]
            assignments[job_id] = _reshaped(snapshot, job, assignments[job_id])
        ordered_ids = [j.id for j in ordered if j.id in assignments]
        return Draft({j: assignments[j] for j in ordered_ids}, outcomes)

    # -- admission ---------------------------------------------------------------------
    def _counts(self, job: Job, high: int) -> list[int]:
        """Counts the job accepts up to ``high``, largest first, that its plan can run on
        (``tp x pp`` divides them, the global batch splits over the data-parallel workers)."""
        low, _ = job.gpu_range
        plan = job.assignment.plan if job.assignment is not None else job.plan
        return [g for g in range(high, low - 1, -1) if _plan_on(job, plan, g) is not _NO_PLAN]

    def _admit(self, snapshot: Snapshot, job: Job, free: _Free) -> tuple[GpuSlot, ...] | None:
        counts = self._counts(job, job.num_gpus) if job.elastic else [job.num_gpus]
        for count in counts:
            slots = consolidated_slots(snapshot, job, count, free.gpus)
            if slots is not None:
                return slots
        return None

    def _make_room(
        self,
        snapshot: Snapshot,
        job: Job,
        ordered: Sequence[Job],
        rank: Mapping[str, int],
        assignments: dict[str, Assignment],
        free: _Free,
        changed: set[str],
    ) -> tuple[GpuSlot, ...] | None:
        """Shrink elastic jobs on one node so ``job`` fits there (at its minimum if elastic).

        GPUs an elastic job holds beyond the ``num_gpus`` it asked for were free GPUs it grew
        into: any waiting job may take them back. Below ``num_gpus`` (down to ``min_gpus``)
        only a job of higher priority shrinks it. Lowest priority gives first.
        """
        # An elastic job's smallest count its plan runs on (min_gpus may not split its tp x pp).
        need = min(self._counts(job, job.num_gpus), default=job.num_gpus) if job.elastic else job.num_gpus
        if need > max((n.gpus for n in snapshot.nodes), default=0):
            return None  # spans nodes: not made room for here
        for node in snapshot.nodes:
            if not job.accepts_type(node.gpu_type) or node.gpus < need:
                continue
            donors = sorted(
                (
                    (rank[j], j)
                    for j, a in assignments.items()
                    if ordered[rank[j]].elastic
                    and a.nodes == (node.name,)
                    and not a.shares_with
                    and not keeps_its_gpus(ordered[rank[j]], self.preemptive)
                ),
                reverse=True,
            )
            spare = len(free.gpus[node.name])
            cuts: list[tuple[str, int]] = []
            for _, donor in donors:
                if spare >= need:
                    break
                d = ordered[rank[donor]]
                floor = d.gpu_range[0] if rank[donor] > rank[job.id] else d.num_gpus
                current = assignments[donor].num_gpus
                smaller = [g for g in self._counts(d, current - 1) if g >= floor]
                if not smaller:
                    continue
                target = next((g for g in smaller if spare + current - g >= need), smaller[-1])
                spare += current - target
                cuts.append((donor, target))
            if spare < need:
                continue
            for donor, target in cuts:
                a = assignments[donor]
                free.give(a.gpus[target:])
                assignments[donor] = Assignment(a.gpus[:target], a.cpus, a.mem_gb, a.plan)
                changed.add(donor)
            return tuple((node.name, k) for k in free.gpus[node.name][:need])
        return None

    # -- growth ------------------------------------------------------------------------
    def _grow(self, snapshot: Snapshot, job: Job, a: Assignment, free: _Free) -> Assignment | None:
        """A larger count on the job's own nodes while each step gains enough; ``None``: stay."""
        nodes = a.nodes
        per_node = dict(a.per_node)
        if len(set(per_node.values())) != 1:
            return None
        _, high = job.gpu_range
        gpu_type = snapshot.nodes_by_name[nodes[0]].gpu_type
        batch = _global_batch(job, a)
        current = a.num_gpus
        best = current
        for count in sorted(self._counts(job, high)):
            if count <= best:
                continue
            if count % len(nodes) or count // len(nodes) - per_node[nodes[0]] > min(
                len(free.gpus[n]) for n in nodes
            ):
                continue
            gain = self.scaling.speedup(job.model, gpu_type, batch, count, len(nodes), best)
            if gain - 1.0 <= self.min_gain:
                break
            best = count
        if best == current:
            return None
        extra = best // len(nodes) - per_node[nodes[0]]
        added = tuple((n, k) for n in nodes for k in free.gpus[n][:extra])
        free.take(added)
        return Assignment(tuple(sorted(a.gpus + added)), a.cpus, a.mem_gb, a.plan)


def keeps_its_gpus(job: Job, preemptive: bool) -> bool:
    """A running job no stage may take GPUs from: every running job under a non-preemptive
    scheduler, a job that is not ``preemptible`` under any (:class:`planner.pipeline.Scheduler`)."""
    return job.is_running and not (preemptive and job.preemptible)


def _global_batch(job: Job, a: Assignment) -> int | None:
    plan = a.plan or {}
    value = plan.get("global_batch")
    return int(value) if isinstance(value, int) else job.batch_size


def _reshaped(snapshot: Snapshot, job: Job, a: Assignment) -> Assignment:
    """``a`` with its GPU-proportional CPUs and memory and its plan rescaled to its GPUs."""
    cpus, mem_gb = proportional_share(snapshot.nodes_by_name, a)
    plan = _plan_on(job, a.plan, a.num_gpus)
    assert plan is not _NO_PLAN  # counts were chosen among those the plan runs on
    return Assignment(a.gpus, max(1, cpus), mem_gb, plan, a.shares_with)  # type: ignore[arg-type]


_NO_PLAN = object()


def _plan_on(job: Job, mapping: Mapping[str, Any] | None, gpus: int) -> dict[str, Any] | object | None:
    """The job's plan made for ``gpus`` GPUs with its global batch; :data:`_NO_PLAN` if impossible.

    ``None``: the job runs as submitted (no plan, no known global batch): ``mosaic-run``
    resolves its plan for the GPUs it gets.
    """
    if mapping is None and job.batch_size is None:
        return None
    where = f"job {job.id}: plan"
    try:
        return plan_to_mapping(replan(plan_from_mapping(mapping, where), gpus, job.batch_size, where)) or None
    except PlanError:
        return _NO_PLAN
