"""The planner's data model: nodes, jobs, assignments, snapshots and round plans.

Everything here is a frozen dataclass: one state in (:class:`Snapshot`), one decision
out (:class:`RoundPlan`). The JSON form of these types is the contract README.md documents ("Contracts");
:mod:`planner.core.codec` converts between the two and validates untrusted input.

Conventions
-----------
* A GPU is addressed by a :data:`GpuSlot` ``(node name, node-local GPU index)``.
* ``Assignment.cpus`` and ``Assignment.mem_gb`` are totals for the job. A job that
  spans nodes gets them on each node in proportion to its GPUs there
  (:meth:`Assignment.node_shares`), the rule Synergy uses for split jobs (§4.2).
* Times are seconds; ``time_s`` in a snapshot is the planner's "now".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from planner.core.errors import InputError

GpuSlot = tuple[str, int]
"""A physical GPU: ``(node name, GPU index on that node)``."""


class JobState(StrEnum):
    """Where a job stands when the snapshot is taken."""

    PENDING = "pending"
    RUNNING = "running"


@dataclass(frozen=True, slots=True)
class Node:
    """One server: its GPUs (all of one type), CPUs and memory.

    ``gpu_mem_gb`` is the memory of one of its GPUs when known to differ from, or be given
    beside, its type's in the GPU catalog (``profiles/builtin/gpus.toml``); ``None``: the
    catalog's (:func:`planner.cluster.gpu_mem_gb_of`).
    """

    name: str
    gpus: int
    gpu_type: str
    cpus: int
    mem_gb: float
    intra_gbps: float | None = None
    inter_gbps: float | None = None
    gpu_mem_gb: float | None = None


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where and with what a job runs this round.

    ``gpus`` is kept sorted so two assignments of the same GPU set compare equal.
    ``plan`` is the execution plan the job runs with (``None``: as submitted) and
    ``shares_with`` lists jobs that share at least one of these GPUs.
    """

    gpus: tuple[GpuSlot, ...]
    cpus: int
    mem_gb: float
    plan: Mapping[str, Any] | None = None
    shares_with: tuple[str, ...] = ()
    per_node: tuple[tuple[str, int], ...] = field(init=False, repr=False, compare=False)
    """GPU count per node, in node-name order (derived from ``gpus``)."""

    def __post_init__(self) -> None:
        gpus = self.gpus
        if any(gpus[k] > gpus[k + 1] for k in range(len(gpus) - 1)):
            gpus = tuple(sorted(gpus))
            object.__setattr__(self, "gpus", gpus)
        counts: dict[str, int] = {}
        for node, _ in gpus:
            counts[node] = counts.get(node, 0) + 1
        object.__setattr__(self, "per_node", tuple(counts.items()))

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    def gpus_per_node(self) -> dict[str, int]:
        """GPU count per node, in node-name order."""
        return dict(self.per_node)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(node for node, _ in self.per_node)

    def node_shares(self) -> tuple[tuple[str, int, float], ...]:
        """(node, CPUs, memory GB) this job holds on each of its nodes.

        Proportional to the job's GPUs there. CPUs are split with the remainder going
        to the first nodes in name order, so the per-node integers add up to ``cpus``.
        """
        if len(self.per_node) == 1:
            return ((self.per_node[0][0], self.cpus, self.mem_gb),)
        total = len(self.gpus)
        cpus = [self.cpus * g // total for _, g in self.per_node]
        for k in range(self.cpus - sum(cpus)):
            cpus[k] += 1
        return tuple(
            (node, c, self.mem_gb * g / total) for (node, g), c in zip(self.per_node, cpus, strict=True)
        )

    def share_on(self, node: str) -> tuple[int, float]:
        """(CPUs, memory GB) this job holds on ``node`` (see :meth:`node_shares`)."""
        for name, cpus, mem in self.node_shares():
            if name == node:
                return cpus, mem
        return 0, 0.0

    def same_resources(self, other: Assignment) -> bool:
        """True when the job would not notice a difference (no relaunch needed)."""
        return (
            self.gpus == other.gpus
            and self.cpus == other.cpus
            and abs(self.mem_gb - other.mem_gb) < 1e-6
            and (self.plan or None) == (other.plan or None)
        )


@dataclass(frozen=True, slots=True)
class Job:
    """A training job as the planner sees it at one instant.

    Fields beyond the required Snapshot keys are optional knowledge a scheduler may use:
    ``duration_s`` (isolated run time, SJF/FTF), ``remaining_s`` (SRTF),
    ``pending_since_s`` (when it last became pending: Tiresias starvation promotion),
    ``gpu_type`` (a requested GPU type), ``tenant``/``guaranteed``/``deadline_s``
    (quotas and SLAs), ``time_limit_s`` (the wall-clock run time the job declared,
    Slurm's ``--time``: an upper bound on its run time that, unlike ``duration_s``, a live
    scheduler knows; ``None``: not declared or unlimited), ``plan`` (submitted execution
    plan), ``candidate_plans`` (the plans the job allows Mosaic to choose from; empty: only
    its own) and ``preemptible``.
    ``restarts`` is how often the job was stopped and started again so far, what a restart
    rule charges it for (Rubick's, Mosaic's bound): in the simulator, its restarts as
    :func:`planner.relaunch.classify` counts them (relaunches, and resumes after a
    preemption); live, Slurm's requeue count (``RestartCnt``,
    :attr:`slurm_plugin.slurm.parse.SlurmJob.requeues`), which counts a preemption at its
    stop rather than at its resume, and also requeues Mosaic did not ask for. The two agree
    on a running job that only Mosaic stopped.
    ``policy_state`` is what the scheduling policy attached to the job in the previous
    round (e.g. its Tiresias queue); the world keeps it and hands it back unchanged.

    Elastic demand: ``min_gpus``/``max_gpus`` bound the GPU counts the job accepts
    (``None``: ``num_gpus``, the count it asked for and its duration was measured with),
    and ``gpu_types`` lists the GPU types it accepts (empty: ``gpu_type`` alone when that
    is set, else any). A job that gives none of them is *rigid*: ``num_gpus`` GPUs of
    ``gpu_type``, exactly as before these fields existed. A job whose demand is
    inconsistent (see :func:`demand_problem`) cannot be built.
    """

    id: str
    num_gpus: int
    model: str
    submit_time_s: float
    state: JobState = JobState.PENDING
    attained_gpu_s: float = 0.0
    progress: float | None = None
    remaining_s: float | None = None
    duration_s: float | None = None
    batch_size: int | None = None
    tenant: str | None = None
    guaranteed: bool = False
    deadline_s: float | None = None
    time_limit_s: float | None = None
    gpu_type: str | None = None
    plan: Mapping[str, Any] | None = None
    candidate_plans: tuple[Mapping[str, Any], ...] = ()
    preemptible: bool = True
    restarts: int = 0
    pending_since_s: float | None = None
    assignment: Assignment | None = None
    policy_state: Mapping[str, Any] | None = None
    min_gpus: int | None = None
    max_gpus: int | None = None
    gpu_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.min_gpus is not None or self.max_gpus is not None or self.gpu_types:
            problem = demand_problem(
                self.num_gpus, self.min_gpus, self.max_gpus, self.gpu_type, self.gpu_types
            )
            if problem is not None:
                raise InputError(f"job '{self.id}': key '{problem[0]}': {problem[1]}")

    def with_policy_state(self, state: Mapping[str, Any] | None) -> Job:
        """This job with ``state`` as its policy state. Copied slot by slot, without the
        demand check (the fields it reads are this job's, which passed it): an ordering
        stage calls it for every job whose state moved, and ``dataclasses.replace`` costs
        several times as much."""
        job: Job = object.__new__(Job)
        for name in _JOB_SLOTS:
            _set_slot(job, name, getattr(self, name))
        _set_slot(job, "policy_state", state)
        return job

    @property
    def gpu_range(self) -> tuple[int, int]:
        """The fewest and the most GPUs the job accepts (both ``num_gpus`` when rigid)."""
        low = self.num_gpus if self.min_gpus is None else self.min_gpus
        high = self.num_gpus if self.max_gpus is None else self.max_gpus
        return low, high

    def accepts_gpus(self, count: int) -> bool:
        """True when the job can run on ``count`` GPUs."""
        low, high = self.gpu_range
        return low <= count <= high

    @property
    def accepted_types(self) -> tuple[str, ...]:
        """The GPU types the job may run on; empty: any type."""
        if self.gpu_types:
            return self.gpu_types
        return () if self.gpu_type is None else (self.gpu_type,)

    def accepts_type(self, gpu_type: str) -> bool:
        """True when the job may run on GPUs of ``gpu_type``."""
        if self.gpu_types:
            return gpu_type in self.gpu_types
        return self.gpu_type is None or gpu_type == self.gpu_type

    @property
    def elastic(self) -> bool:
        """True when the job accepts another GPU count or more than one GPU type."""
        return self.gpu_range != (self.num_gpus, self.num_gpus) or len(self.gpu_types) > 1

    @property
    def is_running(self) -> bool:
        return self.state is JobState.RUNNING and self.assignment is not None

    def waiting_since(self) -> float:
        """When the job last became pending (its submission if it never ran)."""
        return self.submit_time_s if self.pending_since_s is None else self.pending_since_s


def demand_problem(
    num_gpus: int,
    min_gpus: int | None,
    max_gpus: int | None,
    gpu_type: str | None,
    gpu_types: tuple[str, ...],
) -> tuple[str, str] | None:
    """What is inconsistent in a job's GPU demand, as ``(key, message)``; ``None`` if nothing.

    The rules: ``1 <= min_gpus <= num_gpus <= max_gpus`` (an absent bound is
    ``num_gpus``), ``gpu_types`` names each type once with no empty name, and a given
    ``gpu_type`` is one of the ``gpu_types`` (the type ``duration_s`` refers to must be
    one the job accepts).
    """
    if min_gpus is not None and not 1 <= min_gpus <= num_gpus:
        return "min_gpus", f"expected an integer in [1, num_gpus {num_gpus}], got {min_gpus}"
    if max_gpus is not None and max_gpus < num_gpus:
        return "max_gpus", f"expected an integer >= num_gpus {num_gpus}, got {max_gpus}"
    seen: set[str] = set()
    for name in gpu_types:
        if not name.strip():
            return "gpu_types", "a GPU type name must not be empty"
        if name in seen:
            return "gpu_types", f"lists {name!r} twice"
        seen.add(name)
    if gpu_types and gpu_type is not None and gpu_type not in seen:
        return "gpu_types", f"gpu_type {gpu_type!r} is not among the accepted types {', '.join(gpu_types)}"
    return None


_JOB_SLOTS = tuple(f.name for f in fields(Job) if f.name != "policy_state")
_set_slot = object.__setattr__  # a frozen dataclass's own __setattr__ refuses


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The cluster and its queue at ``time_s``: everything a round is planned from."""

    time_s: float
    nodes: tuple[Node, ...]
    jobs: tuple[Job, ...]
    _nodes_by_name: Mapping[str, Node] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_nodes_by_name", MappingProxyType({n.name: n for n in self.nodes}))

    def node(self, name: str) -> Node:
        return self._nodes_by_name[name]

    @property
    def nodes_by_name(self) -> Mapping[str, Node]:
        return self._nodes_by_name


class Outcome(StrEnum):
    """Why a job is (or is not) in this round's assignments.

    ``Unschedulable`` outcomes are data, not errors: the job waits.
    """

    KEPT = "kept"  # runs on exactly the GPUs it had
    PLACED = "placed"  # starts (it was pending)
    MOVED = "moved"  # keeps running on other GPUs (a migration)
    NO_CAPACITY = "no-capacity"  # not enough free GPUs after higher-priority jobs
    NO_CONSOLIDATED_SLOT = "no-consolidated-slot"  # enough GPUs, but not on one node
    NO_GPU_TYPE = "no-gpu-type"  # no node of the requested GPU type
    INFEASIBLE = "infeasible"  # can never fit this cluster as described
    BLOCKED = "blocked"  # an earlier job waits and the round does not backfill
    NO_RESOURCES = "no-resources"  # GPUs free, but not the CPUs/memory its demand needs (§3.3)


@dataclass(frozen=True, slots=True)
class RoundPlan:
    """The decision for one round.

    A job absent from ``assignments`` does not run this round. ``preempted`` ran before
    and stops; ``migrated`` keeps running on a different GPU set (Tesserae's
    definition, what relabelling minimises); ``started`` was pending and starts;
    ``reshaped`` keeps its GPUs but changes CPUs, memory or plan. These are the plan's
    GPU-level view, :func:`planner.relaunch.gpu_set_change`: what a round costs, counted as
    restarts and migrations by the simulator, the controller and ``mosaic report``, is
    :func:`planner.relaunch.classify` (GPUs renumbered on the same nodes are ``migrated``
    here, yet no relaunch). ``order`` is the priority order and
    ``reasons`` says, for every job in the snapshot, why it is where it is.
    ``stage_times_s`` breaks ``decision_time_s`` down per stage when a clock was given.
    ``policy_state`` is per-job policy state to store and hand back in the next
    snapshot (the planner itself remembers nothing between rounds). ``gpu_type_of``
    states, per assigned job, the type of the GPUs it was given (``None`` when they are
    of several types); with the assignment's GPU count and plan, that is the shape the
    round chose for the job.
    """

    assignments: Mapping[str, Assignment]
    preempted: tuple[str, ...] = ()
    migrated: tuple[str, ...] = ()
    started: tuple[str, ...] = ()
    reshaped: tuple[str, ...] = ()
    order: tuple[str, ...] = ()
    reasons: Mapping[str, Outcome] = field(default_factory=dict)
    decision_time_s: float = 0.0
    stage_times_s: Mapping[str, float] = field(default_factory=dict)
    policy_state: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    gpu_type_of: Mapping[str, str | None] = field(default_factory=dict)
