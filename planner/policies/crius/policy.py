"""The ``crius`` reconfiguration stage: Crius's Cell-based scheduling (§6.1, Algorithm 1).

Each round (the ``crius`` presets are event-driven, so also at every arrival and completion,
as ``SchedArrival``/``SchedDeparture``), for the jobs the Cell model can price (elastic jobs
of a model and global batch it knows; every other job keeps the draft's placement, on GPUs
this stage never touches):

1. Running priced jobs keep their shapes; the waiting ones (a rigid one that the placement
   left waiting too, at the one shape it accepts) are taken in submission order
   (Crius's decision queue is FIFO; with ``queue = "ordered"``, in the round's priority
   order instead, the ordering stage's). Each gets one *decision*
   (:func:`.search.best_choice`): its best Cell on idle GPUs, else the depth-bounded search
   that shrinks or moves up to ``depth`` running jobs to make room, the choice with the
   largest throughput change winning, restarts charged.
2. **Opportunistic execution** (§6.1): a job that finds no choice waits, and the jobs after
   it may start only on idle GPUs (depth 0) while it waits. A waiting job may take the
   GPUs of running jobs submitted after it (they started opportunistically while it
   waited): when it fits only with them, they are suspended and it starts; suspended jobs
   wait again and get their own decision later in the same round. Under ``queue =
   "ordered"`` no running job is suspended for another: the round's order (2D-LAS under
   ``mosaic``) changes from round to round, and suspending by it stopped jobs back and forth
   (on Crius's Venus trace 1,692 restarts for 438 jobs, against 163 without); the search
   still shrinks or moves running jobs to make room.
3. **Extra scheduling** of released resources (Algorithm 1 line 12): when no priced job is
   left waiting, running jobs grow (next larger count) or move to another GPU type onto
   idle GPUs, the largest gain first, one step at a time while a step gains
   (:func:`.search.upgrade`).

A changed or started job gets its Cell's plan (Cell-guided tuning, §5.2; the job's own plan
rescaled when the Cell's does not apply) and the GPU-proportional CPUs and memory.

Options: ``depth`` (3), ``scale_counts`` / ``scale_types`` (true; false: the "no count
scaling" / "no type scaling" ablations of §8.6), ``estimate`` (``agile``, the default: the
agile estimate of §5.1, as Crius schedules; ``measured``: the measured best-plan table itself,
which is the simulator's truth, so an oracle for comparison), ``restart_cost_s`` (the
scheduler's, else 30: the simulator's default checkpoint + relaunch), ``queue``
(``arrival``, Crius's FIFO decision queue; ``ordered``: the round's priority order, as
``mosaic`` runs it, so that the stage follows the order the ordering stage owns),
``deadlines`` (false; true is ``crius-ddl``, :mod:`.deadline`) and ``scale``: ``[low,
high]`` makes every job that gives no ``min_gpus``/``max_gpus`` and no ``gpu_types`` accept
``ceil(low N)`` to ``floor(high N)`` GPUs of any of the cluster's types, where the Cell model
knows it (the jobs Crius is evaluated with: "half or double their GPUs on any type", §6.1),
through :meth:`CriusAllocation.demand`.

Re-planning an applied plan changes nothing: a job placed last round is running now and is
not decided again; a job that waited finds the same idle GPUs plus those of the jobs that
started after it (the same capacity it saw), and the same running jobs to scale, since jobs
started while it waits touch no running job and nothing grows while a job waits; growth
stops where no step gains, and a running job's change pays a restart that a job placed
within the round did not. The search is greedy, though, so where it leaves a job waiting it
may find room from the applied state that it missed from this round's start; the stage
therefore *settles*: while a job waits for capacity, it plans again from its own result
applied, until that changes nothing (at most ``_SETTLE_PASSES`` more passes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Self

from planner.core.errors import ConfigError
from planner.core.execplan import PlanError, plan_from_mapping, plan_to_mapping, replan
from planner.core.model import Assignment, Job, JobState, Outcome, Snapshot
from planner.policies.common import arrival_key, choice, options_reader
from planner.policies.crius.cell import CellModel
from planner.policies.crius.cells import MeasuredCells, candidate_counts, candidate_types, corrected_cells
from planner.policies.crius.deadline import DeadlineRule
from planner.policies.crius.search import Limits, Pricing, Shape, World, best_choice, upgrade
from planner.policies.placement import ConsolidatedPlacement
from planner.policies.shaping import proportional_share
from planner.registry import DEFAULT_RESTART_COST_S, StageContext
from planner.stages import RECONFIGURATIONS, Draft
from planner.validate import plan_layout_problem

ESTIMATES = ("measured", "agile")
_NEVER = frozenset({Outcome.INFEASIBLE, Outcome.NO_GPU_TYPE})
_PLACEMENT = ConsolidatedPlacement()  # the crius presets' placement, for the backfill
_KEYS = ["depth", "scale_counts", "scale_types", "estimate", "restart_cost_s", "deadlines", "scale", "queue"]
QUEUES = ("arrival", "ordered")


def cell_model(estimate: str) -> CellModel:
    """The Cell model behind an ``estimate`` option value."""
    if estimate == "measured":
        return _measured()
    from planner.policies.crius import cells

    agile = getattr(cells, "AgileCells", None)
    if agile is None:
        raise ConfigError("crius: estimate 'agile' needs planner.policies.crius.cells.AgileCells")
    model: CellModel = agile()
    return model


_MEASURED: list[MeasuredCells] = []


def _measured() -> MeasuredCells:
    """One shared measured-table model (its memo serves every scheduler built)."""
    if not _MEASURED:
        _MEASURED.append(MeasuredCells())
    return _MEASURED[0]


@RECONFIGURATIONS.register("crius")
@dataclass(frozen=True)
class CriusAllocation:
    """Crius's scheduling over Cells (module docstring)."""

    cells: CellModel = field(repr=False)
    limits: Limits = field(default_factory=Limits)
    restart_cost_s: float = DEFAULT_RESTART_COST_S
    deadlines: bool = False
    scale: tuple[float, float] | None = None
    queue: str = "arrival"
    # Memos (pure functions of their keys, so they may outlive a round; bounded).
    _known: dict[tuple[str, int | None, int, tuple[str, ...]], bool] = field(
        default_factory=dict, repr=False, compare=False
    )
    _views: dict[str, tuple[Job, Job]] = field(default_factory=dict, repr=False, compare=False)
    _cells: dict[tuple[str, int | None, str, int], Any] = field(
        default_factory=dict, repr=False, compare=False
    )

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        f = options_reader(options, "crius allocation", _KEYS)
        depth = f.opt_int("depth", minimum=0)
        cost = f.opt_float("restart_cost_s", minimum=0.0)
        scale: tuple[float, float] | None = None
        if f.has("scale") and options["scale"] is not False:
            raw = options["scale"]
            if (
                not isinstance(raw, list | tuple)
                or len(raw) != 2
                or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in raw)
                or not 0 < raw[0] <= 1 <= raw[1]
            ):
                f.fail_key("scale", f"expected [low, high] with 0 < low <= 1 <= high, or false; got {raw!r}")
            scale = (float(raw[0]), float(raw[1]))
        cells = cell_model(choice(f, "estimate", ESTIMATES, "agile"))
        if context.profiles.observations:
            cells = corrected_cells(cells, context.profiles.observations)
        return cls(
            cells,
            Limits(
                3 if depth is None else depth,
                f.flag("scale_counts", True),
                f.flag("scale_types", True),
            ),
            context.restart_cost_s if cost is None else cost,
            f.flag("deadlines", False),
            scale,
            choice(f, "queue", QUEUES, "arrival"),
        )

    # -- the jobs as Crius plans them ------------------------------------------------------
    def demand(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with the ``scale`` option's demand (module docstring); the same
        object when it changes no job."""
        if self.scale is None:
            return snapshot
        types = tuple(sorted({n.gpu_type for n in snapshot.nodes}))
        if len(self._views) > 65536:
            self._views.clear()
        jobs = []
        for j in snapshot.jobs:
            seen = self._views.get(j.id)
            if seen is None or seen[0] is not j:
                seen = (j, self._widened(j, types))
                self._views[j.id] = seen
            jobs.append(seen[1])
        if all(a is b for a, b in zip(jobs, snapshot.jobs, strict=True)):
            return snapshot
        return replace(snapshot, jobs=tuple(jobs))

    def _widened(self, job: Job, types: tuple[str, ...]) -> Job:
        if (
            job.min_gpus is not None
            or job.max_gpus is not None
            or job.gpu_types
            or not self._knows(job, types)
        ):
            return job
        assert self.scale is not None
        n = job.num_gpus
        low = max(1, min(n, math.ceil(n * self.scale[0] - 1e-9)))
        high = max(n, math.floor(n * self.scale[1] + 1e-9))
        accepted = types if job.gpu_type is None or job.gpu_type in types else (*types, job.gpu_type)
        return replace(job, min_gpus=low, max_gpus=high, gpu_types=accepted)

    def _knows(self, job: Job, types: tuple[str, ...]) -> bool:
        key = (job.model, job.batch_size, job.num_gpus, types)
        known = self._known.get(key)
        if known is None:
            probe = replace(job, min_gpus=None, max_gpus=None, gpu_types=())
            counts = [c for c in (job.num_gpus // 2, job.num_gpus, 2 * job.num_gpus) if c >= 1]
            known = any(self.cells.best_cell(probe, t, c) is not None for t in types for c in counts)
            if len(self._known) > 65536:
                self._known.clear()
            self._known[key] = known
        return known

    # -- the stage -----------------------------------------------------------------------
    def pricing(self, snapshot: Snapshot) -> Pricing:
        """The round's prices: candidate Cells as the options allow, deadlines when on."""
        cluster_types = tuple(sorted({n.gpu_type for n in snapshot.nodes}))
        limits = self.limits

        def counts(job: Job) -> Sequence[int]:
            if not limits.counts:
                return (job.num_gpus,) if job.accepts_gpus(job.num_gpus) else ()
            return tuple(c for c in candidate_counts(job) if job.accepts_gpus(c))

        def types(job: Job) -> Sequence[str]:
            accepted = candidate_types(job, cluster_types)
            if not limits.types and job.gpu_type is not None and job.gpu_type in accepted:
                return (job.gpu_type,)
            return accepted

        rule = DeadlineRule(snapshot.time_s, self.restart_cost_s) if self.deadlines else None
        if len(self._cells) > 262144:
            self._cells.clear()
        return Pricing(
            self.cells, self.restart_cost_s, counts, types, rule.meets if rule else None, self._cells
        )

    def reconfigure(self, snapshot: Snapshot, ordered: Sequence[Job], draft: Draft) -> Draft:
        snapshot = self.demand(snapshot)
        result = self._round(snapshot, ordered, draft)
        # Settle: while a job is left waiting for capacity (one this stage decides, or one it
        # leaves to the placement, which its backfill may fit where its changes freed GPUs),
        # plan the round again from its own result applied (what the next round will see)
        # and take that when it differs. The depth-bounded search is greedy, so its result
        # depends on the state it starts from: from the applied result (jobs placed this
        # round now running, a change to them priced with a restart) it may find room it
        # missed, and the next round would then start the job, a round late and with real
        # restarts for the jobs it moves. A job started here and changed by a later pass pays
        # nothing: it has not run yet.
        for _ in range(_SETTLE_PASSES):
            if not any(o is Outcome.NO_CAPACITY for o in result.outcomes.values()):
                break
            applied = _applied(snapshot, result.assignments)
            by_id = {j.id: j for j in applied.jobs}
            again = self._round(applied, [by_id[j.id] for j in ordered], result)
            if again.assignments == result.assignments:
                break
            result = _rebased(snapshot, again)
        return result

    def _round(self, snapshot: Snapshot, ordered: Sequence[Job], draft: Draft) -> Draft:
        """One pass of the stage (the module docstring's steps) on the demanded snapshot."""
        jobs = {j.id: j for j in snapshot.jobs}
        pricing = self.pricing(snapshot)
        # Priced elastic jobs, and priced rigid jobs the placement left waiting (the search
        # may make room for them; their only Cell is the shape they asked for). Under
        # crius-ddl every waiting job with a deadline too, placed or not: the search drops one
        # that cannot finish by it (§8.5), which the placement stage does not know to do, and
        # whether the placement placed it depends on where others ran (a job dropped in one
        # round was started in the next, on a GPU the first round's placement had given away).
        handled = [
            jobs[j.id]
            for j in ordered
            if (
                jobs[j.id].elastic
                or (
                    not j.is_running
                    and (j.id not in draft.assignments or (self.deadlines and j.deadline_s is not None))
                )
            )
            and pricing.priced(jobs[j.id])
        ]
        if not handled:
            return draft
        handled.sort(key=self._queue_key(ordered))
        mine = {j.id for j in handled}
        fixed = {i: a for i, a in draft.assignments.items() if i not in mine}
        taken = {slot for a in fixed.values() for slot in a.gpus}
        keep: list[Job] = []
        for job in handled:
            a = job.assignment
            if job.is_running and a is not None and not taken.intersection(a.gpus):
                gpu_type = snapshot.node(a.gpus[0][0]).gpu_type
                if all(snapshot.node(n).gpu_type == gpu_type for n in a.nodes):
                    keep.append(job)
                    taken.update(a.gpus)
        world = World.of(snapshot.nodes, taken)
        for job in keep:
            a = job.assignment
            assert a is not None
            shape = Shape(snapshot.node(a.gpus[0][0]).gpu_type, a.per_node)
            value = pricing.value(job, shape.gpu_type, shape.count, False)
            world.hold(job, a.gpus, shape, 0.0 if value is None else value, True)
        outcomes = dict(draft.outcomes)
        blocked = self._decide(snapshot, handled, jobs, world, pricing, outcomes)
        if not blocked:
            self._upgrade(handled, world, pricing)
        fixed.update(self._backfill(snapshot, ordered, mine, fixed, world, outcomes))
        assignments: dict[str, Assignment] = {}
        for job in ordered:
            if job.id in fixed:
                assignments[job.id] = fixed[job.id]
            elif job.id in world.held:
                assignments[job.id] = self._assignment(snapshot, jobs[job.id], world, pricing, draft)
                outcomes.pop(job.id, None)
                if not jobs[job.id].is_running:
                    outcomes[job.id] = Outcome.PLACED
        return Draft(assignments, outcomes)

    def _queue_key(self, ordered: Sequence[Job]) -> Callable[[Job], Any]:
        """The decision queue's key: submission order (Crius's FIFO), or, with ``queue =
        "ordered"``, the round's priority order (the ordering stage's)."""
        if self.queue == "arrival":
            return arrival_key
        position = {j.id: k for k, j in enumerate(ordered)}
        return lambda job: position[job.id]

    def _decide(
        self,
        snapshot: Snapshot,
        handled: Sequence[Job],
        jobs: Mapping[str, Job],
        world: World,
        pricing: Pricing,
        outcomes: dict[str, Outcome],
    ) -> bool:
        """One decision per waiting job in submission order; True when a job still waits.

        A decision after the first job left waiting may suspend an opportunistic job, which
        then comes back on fewer GPUs or none and frees some: the jobs left waiting before
        it are decided again, in order (a pass only follows one that suspended a job after
        a wait, so each pass is cheap when nothing was freed). Without that, the next round
        (re-planning this one applied) would place them where this one left them waiting.
        """
        largest = {t: sum(snapshot.node(n).gpus for n in names) for t, names in world.by_type.items()}
        waiting: Sequence[Job] = handled
        for _ in range(len(handled) + 1):  # each later pass follows one that suspended a job
            blocked, freed = self._pass(waiting, jobs, world, pricing, outcomes, largest, handled)
            waiting = [
                j for j in handled if j.id not in world.held and outcomes.get(j.id) is Outcome.NO_CAPACITY
            ]
            if not (blocked and freed and waiting):
                break
        return blocked

    def _pass(
        self,
        waiting: Sequence[Job],
        jobs: Mapping[str, Job],
        world: World,
        pricing: Pricing,
        outcomes: dict[str, Outcome],
        largest: Mapping[str, int],
        handled: Sequence[Job],
    ) -> tuple[bool, bool]:
        """One decision per job of ``waiting`` not held; (a job still waits, a decision
        after the first wait suspended a job)."""
        blocked = freed = False
        for job in waiting:
            if job.id in world.held:
                continue
            counts = pricing.counts_of(job)
            ever = [
                (t, n, s)
                for t in pricing.types_of(job)
                for n in counts
                if n <= largest.get(t, 0) and (s := pricing.speed(job, t, n)) is not None
            ]
            restart = job.attained_gpu_s > 0
            if pricing.allowed is not None:
                ever = [e for e in ever if pricing.allowed(job, e[2], restart)]
            if not ever:  # can never run here (or, crius-ddl, never by its deadline): dropped
                outcomes[job.id] = Outcome.INFEASIBLE
                continue
            rank = arrival_key(job)
            opportunistic: dict[str, Shape] = {}
            movable: list[str] = []
            for other in handled:
                held = world.held.get(other.id)
                if held is None:
                    continue
                if (
                    self.queue == "arrival"
                    and arrival_key(other) > rank
                    and other.preemptible
                    and not (self.deadlines and other.deadline_s is not None)
                ):
                    opportunistic[other.id] = held.shape
                else:
                    movable.append(other.id)
            limits = self.limits if not blocked else replace(self.limits, depth=0)
            found = best_choice(world, job, pricing, limits, movable, opportunistic)
            if found is None:
                blocked = True
                outcomes[job.id] = Outcome.NO_CAPACITY
                continue
            world.apply(found, jobs, pricing)
            for c in found.changes:
                if c.shape is None:
                    outcomes[c.job] = Outcome.NO_CAPACITY
                    freed = freed or blocked
        return blocked, freed

    def _backfill(
        self,
        snapshot: Snapshot,
        ordered: Sequence[Job],
        mine: set[str],
        fixed: Mapping[str, Assignment],
        world: World,
        outcomes: dict[str, Outcome],
    ) -> dict[str, Assignment]:
        """The waiting jobs this stage does not scale (not priced, or rigid and its search
        found no room), placed as the next round's
        placement would place them on this round's result (consolidated placement, running
        jobs first, then priority order): so re-planning the applied plan changes nothing
        even where this round's changes freed GPUs they fit."""
        rigid = [
            j
            for j in ordered
            if (not j.elastic or j.id not in mine) and j.id not in fixed and j.id not in world.held
        ]
        if not rigid:
            return {}
        current = {**fixed, **{i: Assignment(world.gpus_of[i], 0, 0.0) for i in world.held}}
        jobs = {
            j.id: replace(j, state=JobState.RUNNING, assignment=current[j.id])
            if j.id in current
            else replace(j, state=JobState.PENDING, assignment=None)
            for j in snapshot.jobs
        }
        # Waiting jobs this stage decided to leave waiting are not in the walk: they would take
        # GPUs here that the round does not give them (a widened job fits types its search may
        # not use), and a job that fits there would wait a round for nothing.
        candidates = {j.id for j in rigid}
        order = [jobs[j.id] for j in ordered if j.id in current] + [
            jobs[j.id] for j in ordered if j.id in candidates
        ]
        placed = _PLACEMENT.place(replace(snapshot, jobs=tuple(jobs.values())), order).assignments
        out: dict[str, Assignment] = {}
        for job in rigid:
            a = placed.get(job.id)
            if a is None or outcomes.get(job.id) in _NEVER:
                continue
            world.take(a.gpus)
            cpus, mem_gb = proportional_share(snapshot.nodes_by_name, a)
            out[job.id] = Assignment(a.gpus, cpus, mem_gb, a.plan)
            outcomes[job.id] = Outcome.PLACED
        return out

    def _upgrade(self, handled: Sequence[Job], world: World, pricing: Pricing) -> None:
        # Each step strictly raises the summed value, so this ends; the bound is a safety net.
        movable = [j.id for j in handled if j.id in world.held]
        upgrade(world, movable, pricing, self.limits, 16 * len(handled) + 16)

    def _assignment(
        self, snapshot: Snapshot, job: Job, world: World, pricing: Pricing, draft: Draft
    ) -> Assignment:
        gpus = world.gpus_of[job.id]
        if job.is_running and job.assignment is not None and job.assignment.gpus == gpus:
            drafted = draft.assignments.get(job.id)
            return drafted if drafted is not None and drafted.gpus == gpus else job.assignment
        shape = world.held[job.id].shape
        cell = pricing.cell(job, shape.gpu_type, shape.count)
        plan: Mapping[str, Any] | None = None
        if cell is not None and cell.plan and plan_layout_problem(cell.plan, len(gpus), "cell") is None:
            plan = dict(cell.plan)
        else:
            plan = _rescaled(job, len(gpus))
        a = Assignment(gpus, 0, 0.0, plan)
        cpus, mem_gb = proportional_share(snapshot.nodes_by_name, a)
        return Assignment(gpus, max(1, cpus), mem_gb, plan)


_SETTLE_PASSES = 4  # each pass is a whole round of this stage; in practice one or two suffice


def _applied(snapshot: Snapshot, assignments: Mapping[str, Assignment]) -> Snapshot:
    """``snapshot`` as the next round sees it once ``assignments`` ran: the jobs assigned are
    running there, every other job waits."""
    jobs = tuple(
        replace(j, state=JobState.RUNNING, assignment=assignments[j.id])
        if j.id in assignments
        else replace(j, state=JobState.PENDING, assignment=None)
        if j.is_running
        else j
        for j in snapshot.jobs
    )
    return replace(snapshot, jobs=jobs)


def _rebased(snapshot: Snapshot, draft: Draft) -> Draft:
    """A later pass's ``draft`` with its outcomes relative to ``snapshot`` (the round's real
    start): a job that was not running there and now runs is placed, whichever pass started
    it."""
    outcomes = dict(draft.outcomes)
    for job in snapshot.jobs:
        if job.id in draft.assignments and not job.is_running:
            outcomes[job.id] = Outcome.PLACED
    return Draft(draft.assignments, outcomes)


def _rescaled(job: Job, gpus: int) -> dict[str, Any] | None:
    """The job's own plan on ``gpus`` GPUs, its global batch kept; ``None``: as submitted."""
    mapping = job.assignment.plan if job.assignment is not None else job.plan
    if mapping is None and job.batch_size is None:
        return None
    try:
        where = f"job {job.id}: plan"
        return plan_to_mapping(replan(plan_from_mapping(mapping, where), gpus, job.batch_size, where)) or None
    except PlanError:
        return None
