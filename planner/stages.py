"""The round pipeline's extension points (Tesserae's composition: order, place, pack, shape, plan, migrate).

A round runs these stages in order; each is a small protocol with one method and a
contract. Stages never mutate their inputs: each returns a new :class:`Draft`.

1. :class:`Ordering`        - priority order of the snapshot's jobs;
2. :class:`Placement`       - admission and GPU placement without sharing (it may name the
                               times at which it plans differently, :class:`Wakeups`);
3. :class:`Packing`         - pending jobs onto placed jobs' GPUs (optional);
4. :class:`Shaping`         - CPUs and memory of each placed job;
5. :class:`Reconfiguration` - joint allocation: GPUs, CPUs, memory and plan of elastic jobs
                               (optional; it may also shape the demand the others see,
                               :class:`Demand`, and hold jobs back from them, :class:`HoldBack`);
6. :class:`Migration`       - relabelling onto physical GPUs to avoid moves (optional).

Implementations register by name in the registries below and are composed by
:mod:`planner.config`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, runtime_checkable

from planner.core.model import Assignment, Job, Outcome, Snapshot
from planner.registry import Registry


@dataclass(frozen=True, slots=True)
class Draft:
    """A round in the making: assignments so far (in priority order) and outcomes.

    ``outcomes`` holds the reason for every job the placement considered; jobs in
    ``assignments`` are the ones that run.
    """

    assignments: Mapping[str, Assignment] = field(default_factory=dict)
    outcomes: Mapping[str, Outcome] = field(default_factory=dict)


class Ordering(Protocol):
    """Ranks jobs, highest priority first.

    Contract: returns every job of ``snapshot.jobs`` exactly once; deterministic, with
    ties broken by submit time and then job id; depends on nothing but the snapshot.
    A stateful policy returns jobs with an updated ``policy_state`` (the plan carries it
    back to the world); all other fields are unchanged. ``preemptive_by_default`` says
    whether the policy, as published, preempts. An ordering may read the tenants' GPU quotas
    (``StageContext.tenants``): Rubick and AntMan rank a tenant's guaranteed jobs within its
    quota ("privileged") above every other job, so the placement preempts best-effort jobs first.
    """

    preemptive_by_default: ClassVar[bool]

    def order(self, snapshot: Snapshot) -> Sequence[Job]: ...


class Placement(Protocol):
    """Admits jobs in the given order and gives each admitted job GPUs, one job per GPU.

    Contract: every job of ``ordered`` ends up either in ``assignments`` or with a
    non-running outcome saying why it waits. A running job kept on its GPUs keeps its
    assignment object as it is; any other job's assignment has CPUs and memory 0 until
    shaping sets them. A GPU is never given twice and never beyond its node's count.
    Deterministic.
    """

    def place(self, snapshot: Snapshot, ordered: Sequence[Job]) -> Draft: ...


class Packing(Protocol):
    """Adds pending jobs onto GPUs already holding a placed job (GPU sharing).

    Contract: only adds assignments for jobs without one (and may change the plan of
    a job it packs); at most ``max_jobs_per_gpu`` jobs per GPU; records sharing in
    ``Assignment.shares_with`` both ways.
    """

    max_jobs_per_gpu: int

    def pack(self, snapshot: Snapshot, ordered: Sequence[Job], draft: Draft) -> Draft: ...


class Shaping(Protocol):
    """Sets CPUs and memory of every assignment.

    Contract: changes only ``cpus`` and ``mem_gb``; per node, the sum over jobs never
    exceeds the node's CPUs and memory.
    """

    def shape(self, snapshot: Snapshot, draft: Draft) -> Draft: ...


class Reconfiguration(Protocol):
    """Joint allocation: each elastic job's GPUs, CPUs, memory and execution plan, together.

    Runs after placement, packing and shaping, so it sees the whole draft and may decide a
    job's resources and plan as one choice (Rubick §3-5: ZeRO-Offload needs host memory
    and CPUs; a plan needs ``dp x tp x pp`` GPUs; Crius §4: a Cell is a GPU type, a count
    and a plan). Contract:

    * a rigid job's assignment is unchanged, except that its plan may be chosen among its
      ``candidate_plans``;
    * an elastic job may be admitted (an outcome ``placed``), resized, moved to another
      GPU type it accepts, given other CPUs/memory or another plan; its GPU count stays in
      ``[min_gpus, max_gpus]``, its GPUs of types it accepts, its plan's ``dp x tp x pp``
      equal to its GPUs, its global batch unchanged;
    * per node, no GPU beyond ``max_jobs_per_gpu`` jobs, CPUs and memory within the node's;
      jobs keep the draft's priority order in ``assignments``;
    * a waiting job (a rigid one at ``num_gpus``) may be admitted on free GPUs or on GPUs the
      stage takes back from elastic jobs above their minimum;
    * a privileged guaranteed job (see :class:`Ordering`) is never given resources on which its
      best plan runs slower than its submitted plan on the GPUs it asked for (Rubick §5.1);
    * deterministic; re-planning the plan it produced (applied) changes nothing.
    """

    def reconfigure(self, snapshot: Snapshot, ordered: Sequence[Job], draft: Draft) -> Draft: ...


@runtime_checkable
class Demand(Protocol):
    """Optional, for a reconfiguration stage: the jobs as the stage plans them.

    ``demand(snapshot)`` may widen what jobs accept (``min_gpus``/``max_gpus``/``gpu_types``)
    and nothing else, and returns the same object when it changes nothing; applied twice it
    gives what it gives once. :meth:`planner.pipeline.Scheduler.view` applies it before the
    round is planned, and a plan is checked against that view (Crius's ``scale`` option: jobs
    that may run on half to twice their GPUs on any type, §6.1).
    """

    def demand(self, snapshot: Snapshot) -> Snapshot: ...


@runtime_checkable
class Lens(Protocol):
    """Optional, for an ordering stage: what the whole scheduler may know of the jobs.

    ``lens(snapshot)`` returns the snapshot every stage of the round plans from (the
    ``mosaic`` ordering's: declared time limits instead of the true run times, and running
    jobs at their restart bound made non-preemptible, :mod:`planner.policies.mosaic.view`).
    It changes no job's demand, returns the same object when it changes nothing, and is
    deterministic; :meth:`planner.pipeline.Scheduler.view` applies it before the
    reconfiguration stage's :class:`Demand`.
    """

    def lens(self, snapshot: Snapshot) -> Snapshot: ...


@runtime_checkable
class HoldBack(Protocol):
    """Optional, for a reconfiguration stage: waiting jobs the placement must not draft.

    ``hold_back(snapshot, ordered)`` names the waiting jobs the stage would not run at the
    shape they ask for (Rubick: no execution plan of the job fits GPU memory on its requested
    GPUs), each with the reason it waits meanwhile. :func:`planner.pipeline.plan_round` leaves
    them out of what the placement and the packing see, so they neither take a GPU nor displace
    a running job for a shape nobody will run; the stage itself may still admit such a job at
    another shape it accepts (an outcome ``placed``). Deterministic; a running job is never held
    back.
    """

    def hold_back(self, snapshot: Snapshot, ordered: Sequence[Job]) -> Mapping[str, Outcome]: ...


@runtime_checkable
class Wakeups(Protocol):
    """Optional, for a placement stage: times at which it plans differently.

    ``next_wakeup_s(time_s)`` is the first time after ``time_s`` at which a round may be
    planned differently from one at ``time_s`` on the same cluster and queue (the
    ``consolidated`` placement's ``backfill_interval_s``: its next backfill time), or None
    when there is none. The simulator plans at those times too
    (:meth:`planner.pipeline.Scheduler.next_wakeup_s`). Deterministic.
    """

    def next_wakeup_s(self, time_s: float) -> float | None: ...


class Migration(Protocol):
    """Relabels the draft's placement onto physical GPUs to keep running jobs in place.

    Contract: a bijection of GPUs within nodes of the same shape; each job keeps its GPU
    count per node (consolidation preserved); CPUs, memory and plans move with the job.
    """

    def relabel(self, snapshot: Snapshot, draft: Draft) -> Draft: ...


ORDERINGS: Registry[Ordering] = Registry("ordering policy")
PLACEMENTS: Registry[Placement] = Registry("placement")
PACKINGS: Registry[Packing] = Registry("packing")
SHAPINGS: Registry[Shaping] = Registry("shaping")
RECONFIGURATIONS: Registry[Reconfiguration] = Registry("reconfiguration")
MIGRATIONS: Registry[Migration] = Registry("migration")
