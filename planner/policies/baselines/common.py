"""GPU bookkeeping shared by the baselines' stages: free GPUs, slots on one type, plans.

The consolidation rule is the pipeline's (README "Presets"): a job that fits one node of
a type it accepts never spans nodes; a larger job spans the fewest nodes of one type, the
same count on each. An elastic job (one that accepts other counts or types) may also be
spread when no single node has room, as the joint-allocation stages do
(:func:`planner.slots.consolidated_slots`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from planner.core.execplan import PlanError, plan_from_mapping, plan_to_mapping, replan
from planner.core.model import Assignment, GpuSlot, Job, Snapshot
from planner.slots import FreeSlots, consolidated_counts, first_free


class FreeGpus(FreeSlots):
    """Free GPU indices per node while a stage builds a round: the shared
    :class:`~planner.slots.FreeSlots` over a snapshot's nodes."""

    def __init__(self, snapshot: Snapshot, taken: Iterable[GpuSlot] = ()) -> None:
        super().__init__(snapshot.nodes, taken)


def cluster_types(snapshot: Snapshot) -> tuple[str, ...]:
    """The GPU types of the cluster, in node order."""
    return tuple(dict.fromkeys(n.gpu_type for n in snapshot.nodes))


def capacity(snapshot: Snapshot) -> dict[str, int]:
    """GPUs per type."""
    out: dict[str, int] = {}
    for n in snapshot.nodes:
        out[n.gpu_type] = out.get(n.gpu_type, 0) + n.gpus
    return out


def current_type(snapshot: Snapshot, job: Job) -> str | None:
    """The type of the GPUs a running job holds (``None``: not running, or several types)."""
    if not job.is_running or job.assignment is None:
        return None
    types = {snapshot.nodes_by_name[n].gpu_type for n in job.assignment.nodes if n in snapshot.nodes_by_name}
    return types.pop() if len(types) == 1 else None


def home_type(snapshot: Snapshot, job: Job) -> str | None:
    """The one GPU type a heterogeneity-unaware scheduler runs ``job`` on: the type it asked for
    (when the cluster has it), else the type it holds while running, else (any type accepted)
    the accepted type with the most GPUs, first in node order on a tie. ``None``: the cluster
    has no type it accepts."""
    sizes = capacity(snapshot)
    if job.gpu_type is not None and job.gpu_type in sizes and job.accepts_type(job.gpu_type):
        return job.gpu_type
    held = current_type(snapshot, job)
    if held is not None:
        return held
    accepted = [t for t in sizes if job.accepts_type(t)]
    return max(accepted, key=lambda t: sizes[t]) if accepted else None


def largest_node(snapshot: Snapshot, job: Job, gpu_type: str | None = None) -> int:
    """GPUs of the largest node of ``gpu_type`` (any type ``job`` accepts when ``None``)."""
    return max(
        (
            n.gpus
            for n in snapshot.nodes
            if job.accepts_type(n.gpu_type) and (gpu_type is None or n.gpu_type == gpu_type)
        ),
        default=0,
    )


def slots_on_type(
    snapshot: Snapshot, job: Job, count: int, free: FreeGpus, gpu_type: str
) -> tuple[GpuSlot, ...] | None:
    """``count`` free GPUs of ``gpu_type`` for ``job``, consolidated (module docstring); ``None``
    if there are none. One node: best fit (the fullest node that still has room)."""
    nodes = [n for n in snapshot.nodes if n.gpu_type == gpu_type and job.accepts_type(gpu_type)]
    found = consolidated_counts([(len(free.gpus[n.name]), n.name) for n in nodes], count)
    if found is None or (len(found) > 1 and count <= largest_node(snapshot, job) and not job.elastic):
        return None  # a rigid job that fits a node waits for one
    return first_free(found, free.gpus)


def plan_on(job: Job, mapping: Mapping[str, Any] | None, gpus: int) -> Mapping[str, Any] | bool | None:
    """The job's plan made for ``gpus`` GPUs with its global batch; ``False`` if it cannot be
    (its ``tp x pp`` does not divide them). ``None``: the job runs as submitted (no plan, no
    known global batch; ``mosaic-run`` resolves its plan for the GPUs it gets)."""
    if mapping is None and job.batch_size is None:
        return None
    where = f"job {job.id}: plan"
    try:
        return plan_to_mapping(replan(plan_from_mapping(mapping, where), gpus, job.batch_size, where)) or None
    except PlanError:
        return False


def runs_on(job: Job, gpus: int) -> bool:
    """True when the job's plan can be made for ``gpus`` GPUs."""
    plan = job.assignment.plan if job.assignment is not None else job.plan
    return plan_on(job, plan, gpus) is not False


def assignment_for(job: Job, slots: Sequence[GpuSlot]) -> Assignment:
    """A new assignment on ``slots`` (CPUs and memory 0 until shaping), its plan rescaled."""
    plan = job.assignment.plan if job.assignment is not None else job.plan
    made_for = job.assignment.num_gpus if job.assignment is not None else job.num_gpus
    if len(slots) == made_for:
        return Assignment(tuple(slots), 0, 0.0, plan)
    made = plan_on(job, plan, len(slots))
    assert made is not False, f"job {job.id}: its plan cannot run on {len(slots)} GPUs"
    return Assignment(tuple(slots), 0, 0.0, made if isinstance(made, Mapping) else None)
