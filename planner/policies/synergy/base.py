"""What every Synergy mechanism starts from, and how its result becomes a draft.

The placement stage chose the round's *runnable set* by GPU demand alone (Synergy-Tune
§4.2: the top jobs whose GPUs the cluster can hold). A Synergy mechanism then re-packs
that set along GPUs, CPUs and memory. Running jobs the placement kept on their GPUs
keep them (the lease renewal of §4.3); only their CPUs and memory may change.

Synergy assumes one job per GPU. In a draft with packed (GPU-sharing) jobs, the jobs
that share split their GPUs' proportional share evenly and keep those GPUs; the mechanism
shapes every other job as it would without them, from the CPUs and memory the pairs leave.
(A pair forming no longer sets every job on the cluster back to its proportional share.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from planner.core.model import Assignment, Job, Outcome, Snapshot
from planner.policies.common import options_reader
from planner.policies.shaping import ProportionalShaping
from planner.policies.synergy.demand import (
    DEFAULT_TOLERANCE,
    PerGpu,
    best_case_per_gpu,
    check_tolerance,
    proportional_per_gpu,
)
from planner.policies.synergy.pool import Counts, Held, Pool, to_assignment
from planner.registry import StageContext
from planner.stages import Draft
from profiles.schema import SensitivityMatrix
from profiles.store import ProfileStore


@dataclass(frozen=True, slots=True)
class Demand:
    """A runnable job, its sensitivity (``None``: unknown) and best-case share per GPU."""

    job: Job
    base: Assignment  # the placement stage's assignment
    kept: bool  # running and kept on its GPUs by the placement
    matrix: SensitivityMatrix | None
    best: PerGpu | None  # None: ask for the proportional share

    @property
    def had(self) -> PerGpu | None:
        """The per-GPU share of the job's current assignment, if it is running and the share is
        one Tune could give (whole CPUs per GPU): a job that another stage or Slurm started with
        fewer CPUs than GPUs, say, would otherwise keep a share of 0 CPUs per GPU."""
        a = self.job.assignment
        if not self.job.is_running or a is None or a.num_gpus == 0 or a.cpus % a.num_gpus:
            return None
        return PerGpu(a.cpus // a.num_gpus, a.mem_gb / a.num_gpus)

    def throughput(self, share: PerGpu) -> float:
        """W_j at ``share`` (1.0 everywhere for a job with no profile)."""
        return 1.0 if self.matrix is None else self.matrix.at(share.cpus, share.mem_gb)

    def wish(self, prop: PerGpu) -> PerGpu:
        """The share to ask for on nodes whose proportional share is ``prop``.

        The best-case share, raised to the proportional one along any dimension where
        it would fall below the proportional throughput (the tolerance could
        otherwise make a job slower than its fair share).
        """
        if self.best is None:
            return prop
        if self.throughput(self.best) >= self.throughput(prop):
            return self.best
        return PerGpu(max(self.best.cpus, prop.cpus), max(self.best.mem_gb, prop.mem_gb))

    def fair(self, current: PerGpu, prop: PerGpu) -> PerGpu:
        """Back to at most the proportional share, never below its throughput."""
        capped = current.capped(prop)
        if self.throughput(capped) >= self.throughput(prop) - 1e-12:
            return capped
        return prop


@dataclass
class Round:
    """One round's mechanism input and output (local, mutable)."""

    snapshot: Snapshot
    demands: list[Demand]  # in the draft's priority order
    pool: Pool
    skipped: dict[str, Outcome] = field(default_factory=dict)
    keep_types: bool = True  # jobs stay on their drafted GPU type (drafted_type)
    # Jobs the placement left waiting for GPUs, in its priority order, that a mechanism
    # packing GPUs more tightly than the placement may start (SynergyShaping.fills_freed_gpus),
    # and those it started. A queue holds thousands of waiting jobs while a round rarely has
    # GPUs left for them: their demands are built only for the jobs tried.
    waiting: list[Job] = field(default_factory=list)
    started: list[Demand] = field(default_factory=list)

    def prop(self, counts: Counts) -> PerGpu:
        return proportional_per_gpu([self.pool.by_name[n] for n, _ in counts])


_WAITING_FOR_GPUS = (Outcome.NO_CAPACITY, Outcome.NO_CONSOLIDATED_SLOT)


class SynergyShaping:
    """Base of the mechanisms: options, the runnable set, and the resulting draft."""

    component: ClassVar[str] = "synergy"
    # Static-demand mechanisms skip jobs that do not fit and try the next ones in the queue
    # (§3.3), beyond the GPU-admitted set; Tune and Opt keep exactly the runnable set.
    beyond_runnable_set: ClassVar[bool] = False
    # Tune and Opt re-pack the runnable set's GPUs by best fit, which can leave room on one
    # server for a job the placement found none for: they start it in the same round
    # (Round.waiting), else the next round's placement would, a start for no new reason.
    fills_freed_gpus: ClassVar[bool] = False
    tolerance: float
    profiles: ProfileStore

    def __init__(self, tolerance: float, profiles: ProfileStore) -> None:
        self.tolerance = check_tolerance(tolerance)
        self.profiles = profiles

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        f = options_reader(options, f"{cls.component} shaping", ["tolerance"])
        return cls(f.opt_float("tolerance", minimum=0.0) or DEFAULT_TOLERANCE, context.profiles)

    def shape(self, snapshot: Snapshot, draft: Draft) -> Draft:
        shared = {i: a for i, a in draft.assignments.items() if a.shares_with}
        if shared:
            return self._beside_pairs(snapshot, draft, shared)
        rnd = self._round(snapshot, draft)
        self.allocate(rnd)
        return self._draft(rnd, draft)

    def _beside_pairs(self, snapshot: Snapshot, draft: Draft, shared: Mapping[str, Assignment]) -> Draft:
        """Jobs that share GPUs split their GPUs' proportional share evenly (SJF-BSBF §IV packs
        them by GPU time; neither paper shapes a pair's CPUs); every other job is shaped as
        without pairs, from what the pairs leave, their GPUs held."""
        split = ProportionalShaping().shape(snapshot, Draft(dict(shared), {})).assignments
        rest = Draft({i: a for i, a in draft.assignments.items() if i not in shared}, draft.outcomes)
        rnd = self._round(snapshot, rest)
        for a in split.values():
            rnd.pool.set_aside(a)
        self.allocate(rnd)
        out = self._draft(rnd, rest)
        merged = {**out.assignments, **split}
        ordered = [i for i in draft.assignments if i in merged]
        ordered += [i for i in merged if i not in draft.assignments]  # started by the shaping
        return Draft({i: merged[i] for i in ordered}, out.outcomes)

    def allocate(self, rnd: Round) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- helpers -------------------------------------------------------------------------
    def _round(self, snapshot: Snapshot, draft: Draft) -> Round:
        jobs = {j.id: j for j in snapshot.jobs}
        pool = Pool(snapshot.nodes)
        demands = []
        for job_id, a in draft.assignments.items():
            job = jobs[job_id]
            kept = job.is_running and job.assignment is not None and job.assignment.gpus == a.gpus
            if kept:
                pool.reserve(job_id, a.gpus)
            demands.append(self.demand(job, a, kept))
        waiting = []
        if self.beyond_runnable_set or self.fills_freed_gpus:
            waiting = [
                jobs[job_id]
                for job_id, outcome in draft.outcomes.items()  # the placement's priority order
                if job_id not in draft.assignments and outcome in _WAITING_FOR_GPUS
            ]
        if self.beyond_runnable_set:
            return Round(snapshot, demands + [self.demand(j) for j in waiting], pool, keep_types=False)
        return Round(snapshot, demands, pool, waiting=waiting)

    def demand(self, job: Job, base: Assignment | None = None, kept: bool = False) -> Demand:
        """``job``'s demand; ``base=None``: a job the placement gave no GPUs."""
        matrix = self.profiles.resolve(job.model).sensitivity
        best = None if matrix is None else best_case_per_gpu(matrix, self.tolerance)
        return Demand(job, Assignment((), 0, 0.0, job.plan) if base is None else base, kept, matrix, best)

    @staticmethod
    def _draft(rnd: Round, draft: Draft) -> Draft:
        assignments: dict[str, Assignment] = {}
        outcomes = dict(draft.outcomes)
        for d in (*rnd.demands, *rnd.started):
            held: Held | None = rnd.pool.held.get(d.job.id)
            if held is None:
                if d.job.id in draft.assignments:  # beyond the runnable set, it keeps its reason
                    outcomes[d.job.id] = rnd.skipped.get(d.job.id, Outcome.NO_RESOURCES)
                continue
            previous = d.job.assignment if d.job.is_running else None
            assignments[d.job.id] = to_assignment(held, d.base, previous)
        return Draft(assignments=assignments, outcomes=outcomes)


ShareRule = Callable[["Round", Demand, Counts], PerGpu]  # the share a job asks for on those nodes


def candidates(rnd: Round, d: Demand) -> list[Counts]:
    """Node sets ``d``'s GPUs may take: its kept GPUs' nodes, or any of its drafted GPU type
    that have room (:func:`drafted_type`)."""
    fixed = rnd.pool.reserved_counts(d.job.id)
    return [fixed] if fixed is not None else rnd.pool.node_sets(d.job, drafted_type(rnd, d))


def drafted_type(rnd: Round, d: Demand) -> str | None:
    """The GPU type the placement gave ``d`` (``None``: none given, one type in the cluster,
    or a static-demand mechanism).

    Tune and Opt re-pack the runnable set along CPUs and memory (§4); they know nothing of GPU
    types (Synergy's cluster is all V100s), so they keep each job on the type the placement
    chose for it. Moving a job that accepts any type onto another one could also leave idle
    the only GPUs of a type a waiting job needs: that job would start in the next round, which
    re-planning the applied round must not do. The static-demand mechanisms (greedy, DRF,
    Tetris) go beyond the runnable set (a job that does not fit gives way to the next), so
    where a job fits is theirs to find on any type it accepts."""
    if not rnd.keep_types or len(rnd.pool.gpu_types) < 2 or not d.base.gpus:
        return None
    return rnd.pool.by_name[d.base.gpus[0][0]].gpu_type


def place_at(rnd: Round, d: Demand, rule: ShareRule, pick: str = "best") -> tuple[Counts, PerGpu] | None:
    """Where ``d`` fits with the share ``rule`` gives it (``pick``: best or first fit), if anywhere."""
    best: tuple[float, Counts, PerGpu] | None = None
    for counts in candidates(rnd, d):
        share = rule(rnd, d, counts)
        if not rnd.pool.fits(counts, share):
            continue
        if pick == "first":
            return counts, share
        score = rnd.pool.leftover(counts, share)
        if best is None or score < best[0]:
            best = (score, counts, share)
    return None if best is None else (best[1], best[2])


def commit(rnd: Round, d: Demand, counts: Counts, share: PerGpu) -> None:
    previous = d.job.assignment.gpus if d.job.assignment is not None else ()
    rnd.pool.commit(d.job.id, counts, share, previous)


def skip(rnd: Round, d: Demand, why: Outcome = Outcome.NO_RESOURCES) -> None:
    """``d`` does not run this round; GPUs kept for it go back to the pool."""
    rnd.pool.unreserve(d.job.id)
    rnd.skipped[d.job.id] = why


def wished(rnd: Round, d: Demand, counts: Counts) -> PerGpu:
    return d.wish(rnd.prop(counts))


def best_case(d: Demand, prop: PerGpu) -> PerGpu:
    """The best-case demand as is (no fairness floor): what Greedy, DRF and Tetris ask for."""
    return prop if d.best is None else d.best


def feasible_best_case(rnd: Round, d: Demand, counts: Counts) -> PerGpu:
    """The best-case demand, capped at what ``counts``'s nodes could hold for this job alone.

    An 8-GPU AlexNet asks for 12 CPUs per GPU, 96 on a 24-CPU server: as is, it could
    never run anywhere, and a static-demand scheduler would starve it forever.
    """
    best = best_case(d, rnd.prop(counts))
    nodes = rnd.pool.by_name
    cap = PerGpu(min(nodes[n].cpus // g for n, g in counts), min(nodes[n].mem_gb / g for n, g in counts))
    return best.capped(cap)
