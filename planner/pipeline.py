"""One scheduling round: the stages composed, and the plan they produce.

:func:`plan_round` is the function the simulator and the live controller both call.
It is pure: the only outside input is an optional ``clock`` the caller injects to have
the decision time (and its per-stage breakdown) measured and recorded in the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from planner.core.model import Assignment, Job, JobState, Outcome, RoundPlan, Snapshot
from planner.relaunch import GpuSetChange, gpu_set_change
from planner.stages import (
    Demand,
    Draft,
    HoldBack,
    Lens,
    Migration,
    Ordering,
    Packing,
    Placement,
    Reconfiguration,
    Shaping,
    Wakeups,
)

Clock = Callable[[], float]


@dataclass(frozen=True)
class Scheduler:
    """A composed pipeline (build one with :func:`planner.config.build_scheduler`).

    ``preemptive=False`` keeps every running job running: they go first, on their GPUs,
    and only pending jobs compete for what is left. A running job that is not
    ``preemptible`` is kept that way under any policy.
    """

    name: str
    ordering: Ordering
    preemptive: bool
    placement: Placement
    shaping: Shaping
    packing: Packing | None = None
    reconfiguration: Reconfiguration | None = None
    migration: Migration | None = None
    max_jobs_per_gpu: int = 1

    def view(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` as this scheduler plans it: its ordering's :class:`~planner.stages.Lens`
        and its reconfiguration stage's :class:`~planner.stages.Demand` applied, where it has
        them (else ``snapshot`` itself)."""
        lens = self._lens
        if lens is not None:
            snapshot = lens.lens(snapshot)
        stage = self._demand_stage
        return stage.demand(snapshot) if stage is not None else snapshot

    @cached_property
    def _lens(self) -> Lens | None:
        ordering = self.ordering
        return ordering if isinstance(ordering, Lens) else None

    def hold_back(self, snapshot: Snapshot, ordered: Sequence[Job]) -> Mapping[str, Outcome]:
        """Waiting jobs its reconfiguration stage keeps from the placement
        (:class:`~planner.stages.HoldBack`), with their reasons; empty without such a stage."""
        stage = self._hold_back_stage
        return stage.hold_back(snapshot, ordered) if stage is not None else {}

    @cached_property
    def _hold_back_stage(self) -> HoldBack | None:
        stage = self.reconfiguration
        return stage if isinstance(stage, HoldBack) else None

    def next_wakeup_s(self, time_s: float) -> float | None:
        """The first time after ``time_s`` at which its placement plans differently
        (:class:`~planner.stages.Wakeups`), or None: the simulator plans then too."""
        stage = self._wakeups_stage
        return stage.next_wakeup_s(time_s) if stage is not None else None

    @cached_property
    def _wakeups_stage(self) -> Wakeups | None:
        stage = self.placement
        return stage if isinstance(stage, Wakeups) else None

    @cached_property
    def _demand_stage(self) -> Demand | None:
        # Found once: a runtime protocol check costs a fraction of a millisecond, and the
        # simulator asks two or three times a round.
        stage = self.reconfiguration
        return stage if isinstance(stage, Demand) else None


def plan_round(snapshot: Snapshot, scheduler: Scheduler, clock: Clock | None = None) -> RoundPlan:
    """Plan one round for ``snapshot`` with ``scheduler``'s stages."""
    marks: list[tuple[str, float]] = []

    def mark(stage: str) -> None:
        if clock is not None:
            marks.append((stage, clock()))

    mark("start")
    snapshot = scheduler.view(snapshot)
    ordered = _protect_running(scheduler.ordering.order(snapshot), scheduler.preemptive)
    held_back = scheduler.hold_back(snapshot, ordered)
    drafted = [j for j in ordered if j.id not in held_back] if held_back else ordered
    mark("ordering")
    draft = scheduler.placement.place(snapshot, drafted)
    mark("placement")
    if scheduler.packing is not None:
        draft = scheduler.packing.pack(snapshot, drafted, draft)
        mark("packing")
    if held_back:
        draft = Draft(draft.assignments, {**draft.outcomes, **held_back})
    draft = scheduler.shaping.shape(snapshot, draft)
    mark("shaping")
    if scheduler.reconfiguration is not None:
        draft = scheduler.reconfiguration.reconfigure(snapshot, ordered, draft)
        mark("reconfiguration")
    if scheduler.migration is not None:
        draft = scheduler.migration.relabel(snapshot, draft)
        mark("migration")
    stage_times = {stage: t - marks[k][1] for k, (stage, t) in enumerate(marks[1:])}
    total = marks[-1][1] - marks[0][1] if marks else 0.0
    return finalize(snapshot, ordered, draft, total, stage_times)


def _protect_running(ordered: Sequence[Job], preemptive: bool) -> list[Job]:
    """Running jobs that may not be preempted go first, keeping their relative order."""

    if preemptive:
        first = [j for j in ordered if not j.preemptible and j.is_running]
    else:
        first = [j for j in ordered if j.is_running]
    if not first:
        return list(ordered)
    ids = {j.id for j in first}
    return first + [j for j in ordered if j.id not in ids]


def finalize(
    snapshot: Snapshot,
    ordered: Sequence[Job],
    draft: Draft,
    decision_time_s: float = 0.0,
    stage_times_s: dict[str, float] | None = None,
) -> RoundPlan:
    """Turn a finished draft into a RoundPlan: the diff against what runs now
    (:func:`planner.relaunch.gpu_set_change` of each job), and reasons."""
    preempted, migrated, started, reshaped = [], [], [], []
    assignments, outcomes = draft.assignments, draft.outcomes
    # A simulation at twice a cluster's capacity finalizes thousands of waiting jobs every
    # round, nearly all neither running nor given GPUs: their order, policy states and
    # reasons (the placement's outcome) are gathered in comprehensions, and only the jobs
    # that run now or are given GPUs walk the diff, in priority order.
    order = [job.id for job in ordered]
    states = {job.id: state for job in ordered if (state := job.policy_state) is not None}
    reasons: dict[str, Outcome] = dict.fromkeys(order, Outcome.NO_CAPACITY)
    reasons.update(outcomes)
    if len(reasons) != len(order):  # an outcome for a job not in the order: not a reason
        reasons = {job_id: outcomes.get(job_id, Outcome.NO_CAPACITY) for job_id in order}
    running = JobState.RUNNING
    for job in [job for job in ordered if job.state is running or job.id in assignments]:
        job_id = job.id
        new = assignments.get(job_id)
        old = job.assignment if job.state is running else None
        if new is not None and new is old:  # kept as it is (the common case)
            reasons[job_id] = Outcome.KEPT
            continue
        change = gpu_set_change(old, new)
        if change is GpuSetChange.STOPPED:
            preempted.append(job_id)
        elif change is GpuSetChange.STARTED:
            started.append(job_id)
            reasons[job_id] = Outcome.PLACED
        elif change is GpuSetChange.MOVED:
            migrated.append(job_id)
            reasons[job_id] = Outcome.MOVED
        elif new is not None:  # the same GPUs: reshaped, or kept as it was
            if change is GpuSetChange.RESHAPED:
                reshaped.append(job_id)
            reasons[job_id] = Outcome.KEPT
    return RoundPlan(
        assignments=dict(draft.assignments),
        preempted=tuple(preempted),
        migrated=tuple(migrated),
        started=tuple(started),
        reshaped=tuple(reshaped),
        order=tuple(order),
        reasons=reasons,
        decision_time_s=decision_time_s,
        stage_times_s=stage_times_s or {},
        policy_state=states,
        gpu_type_of=_gpu_types(snapshot, draft.assignments),
    )


def _gpu_types(snapshot: Snapshot, assignments: Mapping[str, Assignment]) -> dict[str, str | None]:
    """Each assignment's GPU type; one look for a cluster of one type (the common case: a
    simulation plans thousands of rounds, each with every running job's assignment)."""
    types = {n.gpu_type for n in snapshot.nodes}
    if len(types) == 1:
        return dict.fromkeys(assignments, next(iter(types)))
    return {job_id: gpu_type_of(snapshot, a) for job_id, a in assignments.items()}


def gpu_type_of(snapshot: Snapshot, assignment: Assignment) -> str | None:
    """The type of ``assignment``'s GPUs; ``None`` when they are of several types (or unknown)."""
    types = set()
    for name in assignment.nodes:
        node = snapshot.nodes_by_name.get(name)
        if node is None:
            return None
        types.add(node.gpu_type)
    return types.pop() if len(types) == 1 else None
