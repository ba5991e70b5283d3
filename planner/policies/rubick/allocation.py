"""Rubick's joint allocation (§5.2, Algorithm 1 ``ScheduleJob``): GPUs, CPUs and plan together.

The ``rubick`` reconfiguration stage, after placement and shaping (contract in
:class:`planner.stages.Reconfiguration`). The ``rubick`` ordering put the privileged
guaranteed jobs first, starving jobs next, then the rest by slope; the placement admitted what
fits at the requested counts. This stage then, with ``resources`` on:

1. **Admits** each still-waiting job in that order (Algorithm 1 lines 2-6): an elastic one at
   the largest count in ``[floor, num_gpus]`` that fits free GPUs (consolidated) and, for a
   privileged guaranteed job, whose best plan still reaches its target (when no plan fits
   GPU memory at any of those counts, at the fewest GPUs above ``num_gpus`` it accepts on
   which one does; such a job is held back from the placement,
   :meth:`RubickAllocation.hold_back`); the floor is ``minRes`` for a privileged guaranteed
   job (the fewest GPUs whose best plan matches the submitted plan on the requested GPUs,
   §5.2) and ``min_gpus`` otherwise. If nothing fits, it **shrinks** jobs
   on one node (lines 10-22): GetLowestSlopeOverMinJob picks the elastic job on the node with
   the lowest slope that is above its own floor, and a step down is taken while "(1) the job to
   shrink has a slope lower than the job to schedule, ... or (2) the job to schedule has yet to
   reach its minimum demand" (§5.2), until the job's floor fits. A privileged job that
   still does not fit (one spanning nodes, typically) takes, over as many nodes as its floor
   needs, the GPUs of lower-ranked best-effort jobs (evicted, and re-placed right away as the
   placement would, before lower-ranked jobs are admitted) and whole nodes of other privileged
   jobs above their own minimum
   (:meth:`_Work._reclaim`): ScheduleJob walks every node, and quota counted at minimum
   demand is only feasible if every job above its minimum can give way.
2. **Grows** placed elastic jobs, highest slope first (SortBySlope over the running jobs),
   into free GPUs on their own nodes, one valid count at a time, while the step's throughput
   gain exceeds ``min_gain``.
3. **Plans and CPUs** (GetBestPlan, lines 28-30): every job whose plan space is more than its
   own plan (see :func:`.curves.job_curve`) gets the best plan for the GPUs it holds; an elastic
   single-node job may also take CPUs beyond its GPU-proportional share from its node's unused
   CPUs (2x or 4x per GPU) when that raises its throughput by more than ``min_gain`` (ZeRO-Offload
   runs its optimizer on the CPU); memory follows the GPUs (proportional share).

Where the stage knows on which nodes a job runs (admission onto free GPUs, growth on its
nodes, the plan and CPU choice), a plan must fit one GPU of those nodes (their own
``gpu_mem_gb``, else their type's in the GPU catalog; the smallest where they differ);
elsewhere the job's curve prices it on the node it is shaped on (:mod:`.curves`).

A running job is only *reconfigured* (grown, shrunk for another job's gain, given another plan
or other CPUs) when its restart does not eat the gain: Rubick "considers to reconfigure a job
only if the value of (T - N·δ)/T exceeds a threshold", ``T`` the job's training time so far,
``N`` its reconfigurations (the new one included), ``δ`` its checkpoint-resume cost
(``restart_cost_s``), the threshold 0.97 (§5.3, "Incorporating reconfiguration penalty"). A
shrink that a privileged job needs to reach its minimum (case 2) is exempt: the guarantee wins.

With ``resources`` off (Rubick-E) only step 3's plan choice runs, on the draft's resources;
with ``plans`` off (Rubick-R, Sia) every job keeps its plan, rescaled to its GPU count.
A rigid job is never resized and keeps its CPUs; its plan may change only among its
``candidate_plans``. Under a non-preemptive scheduler no running job gives up GPUs (it is
neither shrunk nor evicted for another job), nor, under any, a running job that is not
``preemptible``; they may still grow and change plans.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from planner.cluster import gpu_mem_gb_of
from planner.core.execplan import PlanError, plan_from_mapping, plan_to_mapping, replan
from planner.core.model import Assignment, GpuSlot, Job, Node, Outcome, Snapshot
from planner.policies.common import options_reader
from planner.policies.elastic import keeps_its_gpus
from planner.policies.rubick.curves import CurveBook, JobCurve, Point, Shape, even_nodes, job_curve, layout
from planner.policies.rubick.policy import (
    THRESHOLD,
    book_for,
    may_reconfigure,
    neutral_slope,
    privileged,
    quotas_of,
    rubick_usage,
)
from planner.policies.shaping import proportional_share
from planner.registry import DEFAULT_RESTART_COST_S, StageContext
from planner.slots import FreeSlots, consolidated_slots
from planner.stages import RECONFIGURATIONS, Draft

_NEVER = frozenset({Outcome.INFEASIBLE, Outcome.NO_GPU_TYPE})
_CPU_FACTORS = (1, 2, 4)


class _Free(FreeSlots):
    """Free GPUs per node while the stage works (the shared :class:`~planner.slots.FreeSlots`;
    its ``version`` tells the stage's no-fit cache when GPUs were given back)."""

    def __init__(self, snapshot: Snapshot, assignments: Mapping[str, Assignment]) -> None:
        super().__init__(snapshot.nodes, (slot for a in assignments.values() for slot in a.gpus))


@RECONFIGURATIONS.register("rubick")
@dataclass(frozen=True)
class RubickAllocation:
    """Options: ``plans`` (true), ``resources`` (true), ``cpus`` (true: CPUs beyond the GPU share),
    ``guarantees`` (true), ``min_gain`` (0.05), ``restart_cost_s`` (δ; the scheduler's, 30 unless
    set), ``threshold`` (0.97)."""

    book: CurveBook = field(repr=False)
    quotas: Mapping[str, int] = field(default_factory=dict)
    plans: bool = True
    resources: bool = True
    cpus: bool = True
    guarantees: bool = True
    min_gain: float = 0.05
    restart_cost_s: float = DEFAULT_RESTART_COST_S
    threshold: float = THRESHOLD
    preemptive: bool = True  # the scheduler's (stage context): False, no running job gives up GPUs

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        keys = ["plans", "resources", "cpus", "guarantees", "min_gain", "restart_cost_s", "threshold"]
        f = options_reader(options, "rubick allocation", keys)
        gain = f.opt_float("min_gain")
        cost = f.opt_float("restart_cost_s")
        threshold = f.opt_float("threshold")
        if gain is not None and gain < 0:
            f.fail_key("min_gain", f"must be >= 0, got {gain}")
        if cost is not None and cost < 0:
            f.fail_key("restart_cost_s", f"must be >= 0, got {cost}")
        if threshold is not None and not 0 <= threshold < 1:
            f.fail_key("threshold", f"must be in [0, 1), got {threshold}")
        return cls(
            book_for(context.profiles),
            quotas_of(context),
            f.flag("plans", True),
            f.flag("resources", True),
            f.flag("cpus", True),
            f.flag("guarantees", True),
            0.05 if gain is None else gain,
            context.restart_cost_s if cost is None else cost,
            THRESHOLD if threshold is None else threshold,
            context.preemptive,
        )

    def _may(self, job: Job) -> bool:
        return may_reconfigure(job, self.restart_cost_s, self.threshold)

    def hold_back(self, snapshot: Snapshot, ordered: Sequence[Job]) -> Mapping[str, Outcome]:
        """Waiting jobs none of whose plans fits GPU memory on the GPUs they ask for (the plan
        pricer's memory estimate; Rubick considers only plans that fit, §4-5): the consolidated
        placement knows nothing of plans, so it would draft such a job onto free GPUs, or
        displace a running job for it, and this stage could neither run it there nor give the
        GPUs back in the same round (:class:`planner.stages.HoldBack`). An elastic job with
        another feasible count waits for this stage's admission (step 1); any other can never
        run here."""
        shapes: dict[tuple[str, ...], Shape] = {}
        out: dict[str, Outcome] = {}
        for job in ordered:
            if job.is_running:
                continue
            curve = job_curve(self.book, job, snapshot, self.plans, shapes)
            g = job.num_gpus
            if curve is None or layout(g, curve.gpus_per_node) is None or curve.best(g) is not None:
                continue  # not priced, no even layout to price, or a plan fits
            low, high = job.gpu_range
            elsewhere = curve.counts(g, low) or curve.counts(high, g + 1)
            admissible = self.resources and job.elastic and elsewhere
            out[job.id] = Outcome.NO_CAPACITY if admissible else Outcome.INFEASIBLE
        return out

    def reconfigure(self, snapshot: Snapshot, ordered: Sequence[Job], draft: Draft) -> Draft:
        shapes: dict[tuple[str, ...], Shape] = {}
        curves = {j.id: job_curve(self.book, j, snapshot, self.plans, shapes) for j in ordered}
        if all(c is None for c in curves.values()) and not any(j.elastic for j in ordered):
            return draft
        work = _Work(self, snapshot, ordered, draft, curves)
        if self.resources:
            work.restore_guarantees()
            work.replace_evicted()
            work.admit_waiting()
            work.grow()
        work.settle()
        return work.result()


class _Work:
    """One round of the stage (local, mutable)."""

    def __init__(
        self,
        stage: RubickAllocation,
        snapshot: Snapshot,
        ordered: Sequence[Job],
        draft: Draft,
        curves: Mapping[str, JobCurve | None],
    ) -> None:
        self.stage = stage
        self.snapshot = snapshot
        self.ordered = ordered
        self.jobs = {j.id: j for j in ordered}
        self.rank = {j.id: k for k, j in enumerate(ordered)}
        self.curves = curves
        self.assignments = dict(draft.assignments)
        self.outcomes = dict(draft.outcomes)
        self.free = _Free(snapshot, self.assignments)
        self.changed: set[str] = set()  # GPUs differ from the draft's
        self.privileged = (
            privileged(ordered, stage.quotas, rubick_usage(curves)) if stage.guarantees else set()
        )
        self.floor = {j.id: self._floor(j) for j in ordered}
        self._donors: dict[str, list[str]] | None = None  # node -> elastic single-node jobs
        self._lowest: float | None = None  # lowest donor slope (a bound for case 1)
        self._no_fit: dict[tuple[str, ...], tuple[int, int]] = {}  # types -> (version, failed count)
        self._room_failed: dict[tuple[tuple[str, ...], int, bool], tuple[int, float]] = {}
        self._version = 0  # bumped at every admission and every shrink
        self._may_memo: dict[str, bool] = {}
        self.evicted: list[tuple[str, int]] = []  # (job, GPUs it was drafted with), in eviction order

    # -- demands ----------------------------------------------------------------------
    def _gpu_mem(self, node_names: Sequence[str]) -> float | None:
        """Memory of one GPU on the nodes named (the smallest); ``None``: one of them is of a
        type the catalog does not know (the job's curve prices it as it would anyway)."""
        nodes = self.snapshot.nodes_by_name
        found = [gpu_mem_gb_of(nodes[n]) for n in dict.fromkeys(node_names) if n in nodes]
        if not found or any(m is None for m in found):
            return None
        return min(m for m in found if m is not None)

    def _floor(self, job: Job) -> int:
        """The fewest GPUs the job may hold: minRes for a privileged job, else its minimum."""
        low = job.gpu_range[0]
        curve = self.curves[job.id]
        if job.id in self.privileged and curve is not None:
            return max(low, curve.min_gpus(low))
        return low

    def _meets(self, job: Job, point: Point | None) -> bool:
        """A privileged job's plan reaches its target (every other job: any feasible plan)."""
        if self.curves[job.id] is None:
            return True
        return point is not None and self._meets_at(job, point.throughput)

    def _meets_at(self, job: Job, throughput: float) -> bool:
        """``throughput`` reaches the job's target (a job that is not privileged has none)."""
        curve = self.curves[job.id]
        if curve is None or job.id not in self.privileged or curve.target is None:
            return True
        return throughput >= curve.target * (1 - 1e-9)

    def _slope(self, job: Job, gpus: int) -> float:
        curve = self.curves[job.id]
        return neutral_slope(job) if curve is None else curve.gpu_slope(gpus)

    def _counts(self, job: Job, high: int, low: int) -> list[int]:
        """Counts in ``[low, high]`` (largest first) with a feasible plan (any count if unpriced)."""
        curve = self.curves[job.id]
        if curve is None:
            return [g for g in range(high, low - 1, -1) if _own_plan(job, g) is not None]
        return curve.counts(high, low)

    # -- step 1: admission ------------------------------------------------------------
    def admit_waiting(self) -> None:
        waiting = [
            j for j in self.ordered if j.id not in self.assignments and self.outcomes.get(j.id) not in _NEVER
        ]
        waiting.sort(key=lambda j: (j.id not in self.privileged, self.rank[j.id]))
        for job in waiting:
            floor = self.floor[job.id]
            counts = self._counts(job, job.num_gpus, floor) if job.elastic else [job.num_gpus]
            if job.elastic and not counts:
                # No plan fits at or below the ask: the fewest GPUs it accepts on which one does.
                counts = self._counts(job, job.gpu_range[1], job.num_gpus + 1)[-1:]
            slots = None
            for count in counts:
                slots = self._fit(job, count)
                if slots is not None:
                    break
            if slots is None and counts:
                slots = self._make_room(job, counts[-1])
            reclaimed = False
            if slots is None and counts and job.id in self.privileged:
                slots = self._reclaim(job, counts[-1])
                reclaimed = slots is not None
            if slots is None:
                continue
            self.free.take(slots)
            plan = job.assignment.plan if job.assignment is not None else job.plan
            self.assignments[job.id] = Assignment(slots, 0, 0.0, plan)
            self.outcomes[job.id] = Outcome.PLACED
            self.changed.add(job.id)
            self._add_donor(job.id)
            self._version += 1
            if reclaimed:
                # Its victims take GPUs again before the jobs ranked below them are admitted,
                # as the next round's placement would give them (the walk is by rank).
                self.replace_evicted()

    def _fit(self, job: Job, count: int) -> tuple[GpuSlot, ...] | None:
        types = job.accepted_types
        failed = self._no_fit.get(types)
        if failed is not None and failed[0] == self.free.version and count >= failed[1]:
            return None  # nothing was freed since this count failed for these types
        slots = consolidated_slots(self.snapshot, job, count, self.free.gpus)
        if slots is None:
            self._no_fit[types] = (self.free.version, count)
        if slots is None:
            return None
        curve = self.curves[job.id]
        if curve is not None:
            names = [n for n, _ in slots]
            if not self._meets(job, curve.best(count, len(set(names)), gpu_mem_gb=self._gpu_mem(names))):
                return None
        return slots

    def _make_room(self, job: Job, need: int) -> tuple[GpuSlot, ...] | None:
        """Shrink the lowest-slope jobs above their floor on one node until ``need`` GPUs are free
        (Algorithm 1 lines 10-22); ``None`` (nothing changed) if no node can make room."""
        below_min = job.id in self.privileged
        gain = self._slope(job, need)
        donors = self._donor_index()
        if not below_min and gain <= self._lowest_slope():
            return None  # case (1) needs a donor with a lower slope than the job's
        curve = self.curves[job.id]
        if curve is not None and not self._meets(job, curve.best(need, 1)):
            return None
        # Whether a node can make room depends on the job only through the slope test, which a
        # steeper job passes more easily: a failure holds for less steep jobs until state changes.
        key = (job.accepted_types, need, below_min)
        failed = self._room_failed.get(key)
        if failed is not None and failed[0] == self._version and gain <= failed[1]:
            return None
        for node in self.snapshot.nodes:
            if not donors.get(node.name) or not job.accepts_type(node.gpu_type) or node.gpus < need:
                continue
            cuts = self._cuts_on(node, need, gain, below_min)
            if cuts is None:
                continue
            for donor, target in cuts:
                a = self.assignments[donor]
                self.free.give(a.gpus[target:])
                self.assignments[donor] = Assignment(a.gpus[:target], a.cpus, a.mem_gb, a.plan, a.shares_with)
                self.changed.add(donor)
            self._lowest = None
            self._version += 1
            return tuple((node.name, k) for k in self.free.gpus[node.name][:need])
        self._room_failed[key] = (self._version, gain)
        return None

    def _donor_index(self) -> dict[str, list[str]]:
        if self._donors is None:
            self._donors = {}
            for j in self.assignments:
                self._add_donor(j)
        return self._donors

    def _add_donor(self, job_id: str) -> None:
        if self._donors is None:
            return
        a = self.assignments[job_id]
        job = self.jobs.get(job_id)
        if job is None or not job.elastic or len(a.per_node) != 1 or a.shares_with:
            return
        if keeps_its_gpus(job, self.stage.preemptive):
            return
        if self.curves[job_id] is None:
            return
        self._donors.setdefault(a.nodes[0], []).append(job_id)
        self._lowest = None

    def _lowest_slope(self) -> float:
        if self._lowest is None:
            slopes = [
                self._slope(self.jobs[j], self.assignments[j].num_gpus)
                for ids in self._donor_index().values()
                for j in ids
                if j not in self.privileged and self.assignments[j].num_gpus > self.floor[j]
            ]
            self._lowest = min(slopes, default=float("inf"))
        return self._lowest

    def _may(self, job_id: str) -> bool:
        may = self._may_memo.get(job_id)
        if may is None:
            may = self._may_memo[job_id] = self.stage._may(self.jobs[job_id])
        return may

    def _step_down(self, donor: Job, gpus: int) -> int | None:
        """The next count below ``gpus`` the donor may shrink to (not below its floor, nor, for a
        privileged job, below its target); ``None``: none."""
        curve = self.curves[donor.id]
        assert curve is not None
        for g in range(gpus - 1, self.floor[donor.id] - 1, -1):
            p = curve.best(g, 1)
            if p is not None and (donor.id not in self.privileged or self._meets(donor, p)):
                return g
        return None

    def _cuts_on(self, node: Node, need: int, gain: float, below_min: bool) -> list[tuple[str, int]] | None:
        current: dict[str, int] = {}
        for j in self._donor_index().get(node.name, ()):
            if j in self.privileged and not below_min:
                continue  # a privileged job gives GPUs only to another job's guarantee
            if not below_min and not self._may(j):
                continue  # case (1): its restart would eat the gain
            current[j] = self.assignments[j].num_gpus
        spare = len(self.free.gpus[node.name])
        if spare + sum(g - self.floor[j] for j, g in current.items()) < need:
            return None
        while spare < need:
            # GetLowestSlopeOverMinJob: the lowest slope of a next step down, above the floor.
            best: tuple[float, int, str, int] | None = None
            for j, g in current.items():
                donor = self.jobs[j]
                target = self._step_down(donor, g)
                if target is None:
                    continue
                key = (self._slope(donor, g), -self.rank[j], j, target)
                if best is None or key < best:
                    best = key
            if best is None:
                return None
            slope, _, donor_id, target = best
            if not (slope < gain or below_min):
                return None
            spare += current[donor_id] - target
            current[donor_id] = target
        return [(j, g) for j, g in current.items() if g != self.assignments[j].num_gpus]

    def _reclaim(self, job: Job, need: int) -> tuple[GpuSlot, ...] | None:
        """``need`` GPUs for a privileged job that free GPUs and one node's shrinks cannot give:
        Algorithm 1 case (2) over several nodes (ScheduleJob walks the nodes, §5.2). On each
        node the job may take, besides its free GPUs, those of lower-ranked best-effort jobs
        (evicted: "shrinking a job to 0 results in a preemption (possible only for best-effort
        jobs)"), then whole nodes of other privileged elastic jobs that still meet their own
        target without them ("the job to schedule has yet to reach its minimum demand, then a
        reallocation that decreases total throughput is also acceptable"). The quota counts
        privileged jobs at their minimum demand "to ensure a feasible allocation"; without
        this, one spanning nodes waited while others of its tenant held more than their minimum.
        Nodes needing no privileged GPUs come first, then the fewest taken, then the first;
        ``None`` (nothing changed) when ``need / nodes`` per node cannot be had."""
        curve = self.curves[job.id]
        if curve is None:
            return None
        nodes = layout(need, curve.gpus_per_node)
        if nodes is None:
            return None
        per = need // nodes
        evictable = [other for other in self.assignments if self._evictable(other, job)]
        droppable = [
            other
            for other in sorted(self.privileged)
            if other in self.assignments
            and any(self._node_spare(other, d) for d in range(1, len(self.assignments[other].per_node)))
        ]
        best_effort, guaranteed = self._held_per_node(evictable), self._held_per_node(droppable)
        keyed = []
        for i, node in enumerate(self.snapshot.nodes):
            n = node.name
            if node.gpus < per or not job.accepts_type(node.gpu_type):
                continue
            lack = per - len(self.free.gpus[n])
            if lack > best_effort.get(n, 0) + guaranteed.get(n, 0):
                continue
            from_guaranteed = max(0, lack - best_effort.get(n, 0))
            keyed.append(((from_guaranteed, max(0, lack) - from_guaranteed, i), n))
        if len(keyed) < nodes:
            return None
        chosen = [n for _, n in sorted(keyed)[:nodes]]
        short = {n: per - len(self.free.gpus[n]) for n in chosen}
        victims: list[str] = []
        for other in sorted(evictable, key=lambda o: -self.rank[o]):
            b = self.assignments[other]
            if any(short.get(n, 0) > 0 for n in b.nodes):
                victims.append(other)
                for n, c in b.per_node:
                    if n in short:
                        short[n] -= c
        drops: dict[str, list[str]] = {}
        for n in chosen:
            for other in sorted(droppable, key=lambda o: -self.rank[o]):
                if short[n] <= 0:
                    break
                a = self.assignments[other]
                gone = drops.get(other, [])
                if n not in a.nodes or n in gone:
                    continue
                # The fewest nodes it can give up from here on (a count in between may have no
                # plan that meets its target: GPT-2's global batch of 16 over 3 x 8 GPUs).
                more = next(
                    (d for d in range(len(gone) + 1, len(a.nodes)) if self._node_spare(other, d)), None
                )
                if more is None:
                    continue
                # This node, then others still short, then its last nodes.
                rest = [m for m in a.nodes if m != n and m not in gone]
                rest.sort(key=lambda m: (short.get(m, 0) <= 0, -a.nodes.index(m)))
                for m in [n, *rest][: more - len(gone)]:
                    drops.setdefault(other, []).append(m)
                    if m in short:
                        short[m] -= dict(a.per_node)[m]
        if any(v > 0 for v in short.values()):
            return None
        if victims:
            self._evict(victims)
        for other, gone in drops.items():
            a = self.assignments[other]
            self.free.give([slot for slot in a.gpus if slot[0] in gone])
            kept = tuple(slot for slot in a.gpus if slot[0] not in gone)
            self.assignments[other] = Assignment(kept, a.cpus, a.mem_gb, a.plan, a.shares_with)
            self.changed.add(other)
            self._moved()
        return tuple((n, k) for n in chosen for k in self.free.gpus[n][:per])

    def _held_per_node(self, job_ids: Sequence[str]) -> dict[str, int]:
        """GPUs the listed jobs hold on each node."""
        held: dict[str, int] = {}
        for job_id in job_ids:
            for n, c in self.assignments[job_id].per_node:
                held[n] = held.get(n, 0) + c
        return held

    def _node_spare(self, job_id: str, drop: int = 1) -> bool:
        """Whether a privileged elastic job spread evenly over several nodes may give up
        ``drop`` of them whole and still meet its target (and its floor) on the rest."""
        job = self.jobs.get(job_id)
        a = self.assignments.get(job_id)
        curve = self.curves.get(job_id)
        if job is None or a is None or curve is None or not job.elastic or a.shares_with:
            return False
        if keeps_its_gpus(job, self.stage.preemptive):
            return False
        per_node = dict(a.per_node)
        left = len(per_node) - drop
        if left < 1 or len(set(per_node.values())) != 1:
            return False
        count = left * a.per_node[0][1]
        return count >= self.floor[job_id] and self._meets(job, curve.best(count, left))

    # -- step 0: guarantees ------------------------------------------------------------
    def restore_guarantees(self) -> None:
        """A privileged job drafted on GPUs where no plan reaches its target (an elastic job the
        last rounds shrank) takes back GPUs on its nodes from lower-ranked best-effort jobs,
        lowest first, and grows until it meets its target (§5.1: the guarantee holds throughout
        its execution; best-effort jobs are preempted first). When even that cannot free enough
        there (other privileged jobs hold the rest), it moves to the one node where it can: the
        guarantee is worth a migration, as its growth is worth a restart."""
        for job in self.ordered:
            if not job.elastic or job.id not in self.assignments or not self._below_guarantee(job):
                continue
            a = self.assignments[job.id]
            need = self._guarantee_count(job, len(a.nodes), a.num_gpus + 1)  # a multiple of the nodes
            if need is not None:
                per_node = need // len(a.nodes)
                short = {n: per_node - c - len(self.free.gpus[n]) for n, c in a.per_node}
                evicted = self._evictions(job, short)
                if evicted is not None:
                    self._evict(evicted)
                    grown = self._grow(job, a, floor=need)
                    if grown is not None:
                        self.assignments[job.id] = grown
                        self.changed.add(job.id)
                    continue
            self._relocate(job, a)

    def _evictions(self, job: Job, short: dict[str, int]) -> list[str] | None:
        """The lower-ranked best-effort jobs to evict, lowest first, so that each node of
        ``short`` gains what it lacks; None when evicting all of them would not do."""
        short = dict(short)
        victims = sorted(
            (
                other
                for other, b in self.assignments.items()
                if self._evictable(other, job) and any(n in short for n in b.nodes)
            ),
            key=lambda other: -self.rank[other],
        )
        evicted: list[str] = []
        for other in victims:
            if all(v <= 0 for v in short.values()):
                break
            b = self.assignments[other]
            if not any(short.get(n, 0) > 0 for n in b.nodes):
                continue
            for n, c in b.per_node:
                if n in short:
                    short[n] -= c
            evicted.append(other)
        return None if any(v > 0 for v in short.values()) else evicted

    def _evictable(self, other: str, job: Job) -> bool:
        """Whether ``other`` may be evicted for ``job``: a best-effort job ranked below it that
        holds its GPUs alone and may be preempted (best-effort jobs are preempted first, §5.1)."""
        if other in self.privileged or self.rank.get(other, -1) <= self.rank[job.id]:
            return False
        if self.assignments[other].shares_with:
            return False
        return not (other in self.jobs and keeps_its_gpus(self.jobs[other], self.stage.preemptive))

    def _evict(self, evicted: Sequence[str]) -> None:
        for other in evicted:
            b = self.assignments.pop(other)
            self.free.give(b.gpus)
            self.outcomes[other] = Outcome.NO_CAPACITY
            self.evicted.append((other, b.num_gpus))
            self._moved()

    def replace_evicted(self) -> None:
        """Jobs evicted for a guarantee had a place in the placement's walk, in priority
        order. Each, highest ranked first, takes GPUs again as the placement would have given
        them had the guarantee been known: free ones (best fit), else those of lower-ranked
        best-effort jobs, the lowest ranked first, which then try in turn. Otherwise the next
        round's placement would do it (the evicted job outranks the jobs that kept their GPUs)
        and the applied plan would not be the next round's plan."""
        pending = dict(self.evicted)
        self.evicted.clear()
        while pending:
            job_id = min(pending, key=self.rank.__getitem__)
            count = pending.pop(job_id)
            job = self.jobs[job_id]
            slots = consolidated_slots(self.snapshot, job, count, self.free.gpus)
            if slots is None:
                found = self._displacement(job, count)
                if found is None:
                    continue
                slots, victims = found
                for other in victims:
                    pending[other] = self.assignments[other].num_gpus
                self._evict(victims)
            self.free.take(slots)
            old = job.assignment if job.is_running else None
            self.assignments[job_id] = Assignment(slots, 0, 0.0, old.plan if old is not None else job.plan)
            if old is None:
                self.outcomes[job_id] = Outcome.PLACED
            else:
                self.outcomes[job_id] = Outcome.KEPT if old.gpus == slots else Outcome.MOVED
            self.changed.add(job_id)
            self._moved()
        self.evicted.clear()  # the victims of its own displacements were handled above

    def _displacement(self, job: Job, count: int) -> tuple[tuple[GpuSlot, ...], list[str]] | None:
        """``count`` GPUs on one node for ``job`` by evicting lower-ranked best-effort jobs: per
        node its free GPUs first, then those of the lowest-ranked holders, in GPU order; the
        node whose best-ranked victim ranks lowest, then with the fewest victims, the fewest
        GPUs to choose from, the first (the consolidated placement's displacement rule)."""
        holder: dict[GpuSlot, int] = {}
        for other, b in self.assignments.items():
            if not self._evictable(other, job):
                continue
            for slot in b.gpus:
                holder[slot] = self.rank[other]
        free = len(self.rank)  # a free GPU's "holder" ranks below every job
        best: tuple[tuple[int, int, int, int], tuple[GpuSlot, ...], list[str]] | None = None
        for i, node in enumerate(self.snapshot.nodes):
            if node.gpus < count or not job.accepts_type(node.gpu_type):
                continue
            usable = [(free, k) for k in self.free.gpus[node.name]]
            usable += [(h, k) for (n, k), h in holder.items() if n == node.name]
            if len(usable) < count:
                continue
            chosen = sorted(usable, key=lambda hk: (-hk[0], hk[1]))[:count]
            ranks = sorted({h for h, _ in chosen if h != free})
            key = (-ranks[0] if ranks else -free, len(ranks), len(usable), i)
            if best is None or key < best[0]:
                victims = [j for j, b in self.assignments.items() if self.rank.get(j) in ranks]
                best = (key, tuple(sorted((node.name, k) for _, k in chosen)), victims)
        return None if best is None else (best[1], best[2])

    def _moved(self) -> None:
        """GPUs changed hands: the donor index and slope bound are rebuilt when next asked."""
        self._donors = None
        self._lowest = None
        self._version += 1

    def _relocate(self, job: Job, a: Assignment) -> None:
        """Move a privileged job below its guarantee to one node where the fewest GPUs that
        meet its target are free or held by lower-ranked best-effort jobs: the node needing
        the fewest evictions, then the one with the most of its own GPUs, then the first."""
        need = self._guarantee_count(job, 1, 1)
        if need is None:
            return
        own = dict(a.per_node)
        best: tuple[tuple[int, int, int], str, list[str]] | None = None
        for i, node in enumerate(self.snapshot.nodes):
            if node.gpus < need or not job.accepts_type(node.gpu_type):
                continue
            n = node.name
            evicted = self._evictions(job, {n: need - own.get(n, 0) - len(self.free.gpus[n])})
            if evicted is None:
                continue
            key = (len(evicted), -own.get(n, 0), i)
            if best is None or key < best[0]:
                best = (key, n, evicted)
        if best is None:
            return
        _, n, evicted = best
        self._evict(evicted)
        mine = [k for node, k in a.gpus if node == n]
        self.free.give([slot for slot in a.gpus if slot[0] != n])
        added = tuple((n, k) for k in self.free.gpus[n][: need - len(mine)])
        self.free.take(added)
        self.assignments[job.id] = Assignment(
            tuple(sorted([(n, k) for k in mine] + list(added))), a.cpus, a.mem_gb, a.plan, a.shares_with
        )
        self.changed.add(job.id)
        self._moved()

    def _guarantee_count(self, job: Job, nodes: int, low: int) -> int | None:
        """The fewest GPUs from ``low`` on (spread evenly over ``nodes`` nodes) whose best plan
        meets the job's target."""
        curve = self.curves[job.id]
        assert curve is not None
        for g in range(low, job.gpu_range[1] + 1):
            if g % nodes == 0 and self._meets(job, curve.best(g, nodes)):
                return g
        return None

    # -- step 2: growth -----------------------------------------------------------------
    def grow(self) -> None:
        placed = [
            j
            for j in self.ordered
            if j.elastic and j.id in self.assignments and self.curves[j.id] is not None
        ]

        below = {j.id for j in placed if self._below_guarantee(j)}

        def key(job: Job) -> tuple[bool, float, int]:
            a = self.assignments[job.id]
            return (job.id not in below, -self._next_slope(job, a.num_gpus), self.rank[job.id])

        for job in sorted(placed, key=key):
            # A privileged job below its guarantee grows back whatever the restart costs: the
            # guarantee holds "throughout its execution" (§5.1), the restart rule (§5.3) is for
            # best-effort gains.
            if job.id not in below and not self._relaunching(job) and not self.stage._may(job):
                continue
            grown = self._grow(job, self.assignments[job.id])
            if grown is not None:
                self.assignments[job.id] = grown
                self.changed.add(job.id)

    def _below_guarantee(self, job: Job) -> bool:
        """A privileged job whose best plan on its drafted GPUs misses its target."""
        if job.id not in self.privileged:
            return False
        a = self.assignments[job.id]
        curve = self.curves[job.id]
        return curve is not None and not self._meets(
            job, curve.best(a.num_gpus, len(a.nodes), gpu_mem_gb=self._gpu_mem(a.nodes))
        )

    def _relaunching(self, job: Job) -> bool:
        """The job restarts this round whatever this stage does (new, or on other GPUs than it
        runs on), so growing it adds no restart to pay for."""
        old = job.assignment
        return (
            job.id in self.changed
            or not job.is_running
            or old is None
            or old.gpus != self.assignments[job.id].gpus
        )

    def _next_slope(self, job: Job, gpus: int) -> float:
        curve = self.curves[job.id]
        assert curve is not None
        here = curve.throughput(gpus)
        for g in range(gpus + 1, job.gpu_range[1] + 1):
            there = curve.throughput(g)
            if there > here:
                return (there - here) / (g - gpus) / curve.reference
        return 0.0

    def _grow(self, job: Job, a: Assignment, floor: int | None = None) -> Assignment | None:
        """``a`` grown on its nodes into free GPUs: each larger count taken while it gains more
        than ``min_gain``; with a ``floor`` (a guarantee's count), the first feasible count from
        it on whatever it gains, and larger ones as before."""
        per_node = dict(a.per_node)
        nodes = a.nodes
        if len(set(per_node.values())) != 1:
            return None
        curve = self.curves[job.id]
        assert curve is not None
        have = per_node[nodes[0]]
        room = min(len(self.free.gpus[n]) for n in nodes)
        gpu_mem = self._gpu_mem(nodes)
        best = a.num_gpus
        best_tput = curve.best(best, len(nodes), gpu_mem_gb=gpu_mem)
        current = best_tput.throughput if best_tput is not None else 0.0
        for count in range(a.num_gpus + 1, job.gpu_range[1] + 1):
            if count % len(nodes) or count // len(nodes) - have > room:
                continue
            p = curve.best(count, len(nodes), gpu_mem_gb=gpu_mem)
            if p is None or (floor is not None and count < floor):
                continue
            if (floor is not None and best < floor) or p.throughput > current * (1 + self.stage.min_gain):
                best, current = count, p.throughput
        if best == a.num_gpus:
            return None
        extra = best // len(nodes) - have
        added = tuple((n, k) for n in nodes for k in self.free.gpus[n][:extra])
        self.free.take(added)
        return Assignment(tuple(sorted(a.gpus + added)), a.cpus, a.mem_gb, a.plan, a.shares_with)

    # -- step 3: plans, CPUs, memory ------------------------------------------------------
    def settle(self) -> None:
        nodes = self.snapshot.nodes_by_name
        fixed: list[str] = []
        flexible: list[str] = []
        for job_id, a in self.assignments.items():
            job = self.jobs.get(job_id)
            if job is None or a.shares_with:
                continue  # GPU sharing (packing) decided these resources
            if job.elastic or job_id in self.changed:
                flexible.append(job_id)
            elif self.curves[job_id] is not None:
                fixed.append(job_id)  # rigid: plan among its candidates, resources as drafted
        for job_id in fixed:
            self._choose_plan(self.jobs[job_id])
        if not flexible:
            return
        left = {n.name: float(n.cpus) for n in self.snapshot.nodes}
        flex = set(flexible)
        for job_id, a in self.assignments.items():
            if job_id not in flex:
                for name, cpus, _ in a.node_shares():
                    left[name] -= cpus
        base: dict[str, tuple[int, float]] = {}
        for job_id in flexible:
            a = self.assignments[job_id]
            cpus, mem = proportional_share(nodes, a)
            base[job_id] = (max(1, cpus), mem)
            for name, share, _ in Assignment(a.gpus, base[job_id][0], mem).node_shares():
                left[name] -= share
        for job_id in flexible:
            self._choose(self.jobs[job_id], base[job_id], left)

    def _choose_plan(self, job: Job) -> None:
        """A rigid job's best plan among its own and its candidates, on the drafted resources."""
        curve = self.curves[job.id]
        a = self.assignments[job.id]
        if curve is None or curve.space == curve.own:
            return
        cpus = a.cpus / a.num_gpus if a.cpus else curve.cpus_per_gpu
        point = curve.best(a.num_gpus, len(a.nodes), cpus, self._gpu_mem(a.nodes))
        if point is None:
            return
        self.assignments[job.id] = self._keep_or(job, a, point, a.cpus, cpus)

    def _choose(self, job: Job, share: tuple[int, float], left: dict[str, float]) -> None:
        a = self.assignments[job.id]
        cpus, mem = share
        curve = self.curves[job.id]
        if curve is None:
            self.assignments[job.id] = _as_is(job, a, cpus, mem)
            return
        nodes = len(a.nodes)
        per_gpu = cpus / a.num_gpus
        gpu_mem = self._gpu_mem(a.nodes)
        best = curve.best(a.num_gpus, nodes, per_gpu, gpu_mem)
        total = cpus
        if job.elastic and self.stage.cpus and self.stage.resources and nodes == 1 and best is not None:
            node = a.nodes[0]
            for factor in _CPU_FACTORS[1:]:
                extra = cpus * factor - cpus
                if extra > left[node]:
                    break
                more = curve.best(a.num_gpus, 1, per_gpu * factor, gpu_mem)
                if more is not None and more.throughput > best.throughput * (1 + self.stage.min_gain):
                    best, total = more, cpus * factor
            left[node] -= total - cpus
        if best is None:
            self.assignments[job.id] = _as_is(job, a, cpus, mem)
            return
        chosen = Assignment(a.gpus, total, mem, plan_to_mapping(best.plan), a.shares_with)
        self.assignments[job.id] = self._keep_or(job, chosen, best, total, total / a.num_gpus)

    def _keep_or(self, job: Job, a: Assignment, point: Point, cpus: int, per_gpu: float) -> Assignment:
        """``a`` with ``point``'s plan, unless the job runs on these GPUs already and the change
        gains too little or its restart would eat the gain (§5.3): then as it runs. A privileged
        job running below its target takes the better plan whatever the restart costs (§5.1: the
        guarantee holds throughout its execution; the restart rule is for best-effort gains)."""
        new = Assignment(a.gpus, cpus, a.mem_gb, plan_to_mapping(point.plan), a.shares_with)
        old = job.assignment
        if not job.is_running or old is None or old.gpus != a.gpus or job.id in self.changed:
            return new
        curve = self.curves[job.id]
        assert curve is not None
        current = _price(curve, job, old, self._gpu_mem(old.nodes))
        if current is not None and _same_plan(old, point, job) and old.cpus == cpus:
            return Assignment(a.gpus, old.cpus, a.mem_gb, old.plan, a.shares_with)
        if self.stage._may(job) and (
            current is None or point.throughput > current * (1 + self.stage.min_gain)
        ):
            return new
        if current is not None and point.throughput > current and not self._meets_at(job, current):
            return new
        return Assignment(a.gpus, old.cpus if old.cpus <= cpus else cpus, a.mem_gb, old.plan, a.shares_with)

    def result(self) -> Draft:
        ids = [j.id for j in self.ordered if j.id in self.assignments]
        return Draft({j: self.assignments[j] for j in ids}, self.outcomes)


def _price(curve: JobCurve, job: Job, a: Assignment, gpu_mem_gb: float | None) -> float | None:
    """Throughput of ``job`` as it runs (its plan on its GPUs, nodes and CPUs, GPUs of
    ``gpu_mem_gb``, ``None``: the curve's)."""
    plan = _own_plan(job, a.num_gpus, a.plan)
    if plan is None:
        return None
    per_gpu = a.cpus / a.num_gpus if a.cpus else curve.cpus_per_gpu
    times = curve.book.pricer.iteration_times(
        curve.model,
        [
            (
                replan(plan_from_mapping(plan), a.num_gpus, curve.batch),
                even_nodes(a.num_gpus, len(a.nodes)),
                per_gpu,
            )
        ],
        curve.gpu_mem_gb if gpu_mem_gb is None else gpu_mem_gb,
    )
    return None if times[0] is None else curve.batch / times[0]


def _same_plan(old: Assignment, point: Point, job: Job) -> bool:
    plan = _own_plan(job, old.num_gpus, old.plan)
    return plan is not None and plan == plan_to_mapping(point.plan)


def _as_is(job: Job, a: Assignment, cpus: int, mem_gb: float) -> Assignment:
    """``a`` with these CPUs and memory and its plan rescaled; a job that runs on these GPUs
    already keeps its plan object (nothing to relaunch for)."""
    old = job.assignment
    same = job.is_running and old is not None and old.gpus == a.gpus
    plan = old.plan if same and old is not None else _rescaled(job, a)
    return Assignment(a.gpus, cpus, mem_gb, plan, a.shares_with)


def _rescaled(job: Job, a: Assignment) -> Mapping[str, Any] | None:
    """The assignment's plan made for its GPU count, else the submitted plan made for it (the
    placement re-places a moved job at ``num_gpus`` with the plan it had on its old count)."""
    plan = _own_plan(job, a.num_gpus, a.plan)
    if plan is None:
        plan = _own_plan(job, a.num_gpus, job.plan)
    return a.plan if plan is None else (plan or None)


def _own_plan(job: Job, gpus: int, mapping: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The job's plan (``mapping``, else its submitted one) resolved for ``gpus`` GPUs with its
    global batch; ``None`` when impossible; ``{}`` when nothing is known to resolve."""
    source = mapping if mapping is not None else job.plan
    if source is None and job.batch_size is None:
        return {}
    try:
        return plan_to_mapping(replan(plan_from_mapping(source, f"job {job.id}: plan"), gpus, job.batch_size))
    except PlanError:
        return None
