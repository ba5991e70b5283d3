"""Rubick's scheduling policy, the ordering half (§5.1-5.2, Algorithm 1 lines 1-6), and AntMan's.

Algorithm 1's ``Schedule`` first serves the *privileged* jobs: "the guaranteed jobs whose
resource demands are within the tenant's remaining quota", a job's quota usage being its
minimum demand ``minRes`` (§5.2); then "SortBySlope(jobs.bestEffort ∪ jobs.running)": the other
jobs, highest resource-sensitivity slope first, comparing "the slopes of GPUs and then CPUs".
"To prevent job starvation ... best-effort jobs get scheduled occasionally when the queuing
delay exceeds a threshold" (§5.2): a job waiting longer than ``starvation_s`` goes right after
the privileged ones.

The ``rubick`` ordering expresses that order for the pipeline; the placement then admits jobs
in it, preempting the lowest-ranked running jobs first (best-effort ones: privileged jobs rank
above every other job), and the ``rubick`` reconfiguration stage (:mod:`.allocation`) does the
slope-driven shrinking, growing and plan choice.

A preemption is a reconfiguration too ("shrinking a job to 0 results in a preemption", §5.2),
so §5.3's penalty rule holds for it: a running best-effort job is preempted for another
best-effort job only if ``(T - N·δ) / T`` exceeds 0.97 (:func:`may_reconfigure`). The ordering
ranks every running best-effort job that fails the rule right after the privileged jobs,
ahead of the starving ones, so only a guarantee stops it. Without the rule, a job preempted
while still paying its restart (δ = 260 s in Rubick's artifact) was preempted again at each
resume by the next higher-slope arrival and hardly progressed. A job's slope is taken at the GPU count it
asked for (the gain of its last requested GPU), so the order does not depend on what a job
happens to hold and re-planning an applied plan changes nothing.

``antman`` (AntMan, OSDI'20, as Rubick §7 compares with it): guaranteed jobs within their
tenant's quota of *requested* GPUs first (a resource, not a performance, guarantee), then
best-effort jobs opportunistically in arrival order; they are preempted first.

Tenants and quotas come from the scheduler configuration's ``[[tenants]]`` (``planner.config``).
A guaranteed job of a tenant without a quota is scheduled as best-effort.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, ClassVar, Self

from planner.core.model import Job, Snapshot
from planner.policies.common import arrival_key, options_reader
from planner.policies.rubick.curves import CurveBook, JobCurve, Shape, job_curve, layout
from planner.registry import DEFAULT_RESTART_COST_S, StageContext
from planner.stages import ORDERINGS
from profiles.plan_correction import PlanTime, corrected, plan_times
from profiles.plan_pricing import builtin_pricer
from profiles.store import ProfileStore

DEFAULT_STARVATION_S = 3600.0
THRESHOLD = 0.97  # §5.3
SLOPE_DIGITS = 9
"""Decimal places the ordering compares slopes (normalised throughput per GPU or CPU, ~0-2) to."""
# ``policy_state`` key: the job was privileged (within its tenant's quota) when last planned.
PRIVILEGED = "privileged"


@lru_cache(maxsize=1)
def shared_book() -> CurveBook:
    """One memo of best plans per process (answers depend only on their arguments)."""
    return CurveBook(builtin_pricer)


def book_for(profiles: ProfileStore) -> CurveBook:
    """The memo of best plans priced with what running jobs measured (``profiles``'s
    observations, :mod:`profiles.plan_correction`); :func:`shared_book` when they measured
    no priced model at a known plan."""
    if not profiles.observations:
        return shared_book()
    times = plan_times(profiles.observations, builtin_pricer())
    return _corrected_book(tuple(sorted(times, key=repr))) if times else shared_book()


@lru_cache(maxsize=4)
def _corrected_book(times: tuple[PlanTime, ...]) -> CurveBook:
    """One memo per set of observations: a controller re-plans many rounds between new ones."""
    return CurveBook(lambda: corrected(builtin_pricer(), times))


def may_reconfigure(job: Job, restart_cost_s: float, threshold: float = THRESHOLD) -> bool:
    """Rubick §5.3's rule for a running job: ``(T - N·δ) / T > threshold``.

    ``T`` is the job's training time so far (its attained GPU-seconds over its GPUs), ``N`` its
    restarts counting the one this reconfiguration would add. A job that is not running costs
    nothing to (re)configure.
    """
    if not job.is_running or job.assignment is None:
        return True
    trained = job.attained_gpu_s / max(1, job.assignment.num_gpus)
    if trained <= 0:
        return False
    return (trained - (job.restarts + 1) * restart_cost_s) / trained > threshold


def quotas_of(context: StageContext) -> Mapping[str, int]:
    return dict(context.tenants)


def privileged(
    jobs: Iterable[Job], quotas: Mapping[str, int], usage: Callable[[Job], int | None]
) -> set[str]:
    """Guaranteed jobs whose ``usage`` fits their tenant's remaining quota (Algorithm 1 line 2).

    Running jobs are counted first (their guarantee holds "throughout their execution"), then
    waiting ones in arrival order; a job that does not fit is skipped and later, smaller ones
    may still fit. A job without a usage (it cannot run at any shape it accepts) takes no quota.
    """
    used: dict[str, int] = {}
    out: set[str] = set()
    candidates = [j for j in jobs if j.guaranteed and j.tenant is not None and j.tenant in quotas]
    for job in sorted(candidates, key=holders_first):
        assert job.tenant is not None
        need = usage(job)
        if need is not None and used.get(job.tenant, 0) + need <= quotas[job.tenant]:
            used[job.tenant] = used.get(job.tenant, 0) + need
            out.add(job.id)
    return out


def running_first(job: Job) -> tuple[bool, tuple[float, tuple[int, int, str]]]:
    return (not job.is_running, arrival_key(job))


def holds_privilege(job: Job) -> bool:
    """A running job that was privileged when the previous round planned it keeps its place
    in the quota: the guarantee holds "throughout its execution" (Rubick §5.1). Without this,
    a guaranteed job that started beyond the quota (while GPUs were free) but arrived earlier
    would take the quota from one already running within it, and the plan would oscillate."""
    return job.is_running and was_privileged(job)


def was_privileged(job: Job) -> bool:
    """The previous round planned the job as privileged (running or not)."""
    return bool((job.policy_state or {}).get(PRIVILEGED))


def holders_first(job: Job) -> tuple[bool, bool, bool, tuple[float, tuple[int, int, str]]]:
    """Quota order: running jobs that were privileged, then waiting ones that were (a job
    promised the quota last round keeps it over a guaranteed job that started beyond the
    quota meanwhile, while GPUs were free: otherwise the privilege would pass to that one
    once it runs, and back), then running jobs, then waiting ones by arrival."""
    return (not holds_privilege(job), not was_privileged(job), not job.is_running, arrival_key(job))


def with_privilege(jobs: Sequence[Job], chosen: set[str]) -> list[Job]:
    """``jobs`` with ``policy_state`` recording whether each was privileged this round
    (unchanged objects where the record already says so)."""
    out = []
    for job in jobs:
        flag = job.id in chosen
        if bool((job.policy_state or {}).get(PRIVILEGED)) != flag:
            job = replace(job, policy_state={**(job.policy_state or {}), PRIVILEGED: flag})  # noqa: PLW2901
        out.append(job)
    return out


def rubick_usage(curves: Mapping[str, JobCurve | None]) -> Callable[[Job], int | None]:
    """Quota usage = ``minRes`` in GPUs (§5.2); the requested count when the job cannot be
    priced; ``None`` for a waiting job none of whose plans fits GPU memory at any count it
    accepts (it cannot run, so it must not hold quota another guaranteed job could use)."""

    def usage(job: Job) -> int | None:
        curve = curves.get(job.id)
        if curve is None:
            return job.num_gpus
        low, high = job.gpu_range
        if (
            not job.is_running
            and curve.target is None
            and layout(job.num_gpus, curve.gpus_per_node) is not None
            and not curve.counts(high, low)
        ):
            return None
        return curve.min_gpus(low)

    return usage


def neutral_slope(job: Job) -> float:
    """Slope of a job the model cannot price: linear scaling (each GPU adds 1/num_gpus)."""
    return 1.0 / job.num_gpus


@ORDERINGS.register("rubick")
@dataclass(frozen=True)
class RubickOrdering:
    """Options: ``starvation_s`` (3600), ``plans`` (true: slopes with plan search), ``guarantees``
    (true: privileged guaranteed jobs first; false: every job is best-effort, as in Sia),
    ``restart_cost_s`` (δ of the penalty rule; the scheduler's, 30 unless set) and
    ``threshold`` (0.97; 0 only asks that a job's training so far exceed its restarts)."""

    preemptive_by_default: ClassVar[bool] = True
    book: CurveBook = field(repr=False)
    quotas: Mapping[str, int] = field(default_factory=dict)
    starvation_s: float = DEFAULT_STARVATION_S
    plans: bool = True
    guarantees: bool = True
    restart_cost_s: float = DEFAULT_RESTART_COST_S
    threshold: float = THRESHOLD

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        keys = ["starvation_s", "plans", "guarantees", "restart_cost_s", "threshold"]
        f = options_reader(options, "rubick ordering", keys)
        starvation = f.opt_float("starvation_s")
        if starvation is not None and starvation < 0:
            f.fail_key("starvation_s", f"must be >= 0, got {starvation}")
        cost = f.opt_float("restart_cost_s", minimum=0.0)
        threshold = f.opt_float("threshold")
        if threshold is not None and not 0 <= threshold < 1:
            f.fail_key("threshold", f"must be in [0, 1), got {threshold}")
        return cls(
            book_for(context.profiles),
            quotas_of(context),
            DEFAULT_STARVATION_S if starvation is None else starvation,
            f.flag("plans", True),
            f.flag("guarantees", True),
            context.restart_cost_s if cost is None else cost,
            THRESHOLD if threshold is None else threshold,
        )

    def order(self, snapshot: Snapshot) -> Sequence[Job]:
        shapes: dict[tuple[str, ...], Shape] = {}
        curves = {j.id: job_curve(self.book, j, snapshot, self.plans, shapes) for j in snapshot.jobs}
        chosen = privileged(snapshot.jobs, self.quotas, rubick_usage(curves)) if self.guarantees else set()
        first = sorted((j for j in snapshot.jobs if j.id in chosen), key=running_first)
        starving = sorted(
            (
                j
                for j in snapshot.jobs
                if j.id not in chosen
                and not j.is_running
                and snapshot.time_s - j.waiting_since() >= self.starvation_s
            ),
            key=arrival_key,
        )
        settled = {j.id for j in snapshot.jobs if j.id not in chosen and self.settled(j)}
        early = chosen | {j.id for j in starving} | settled

        def slope_key(job: Job) -> tuple[float, float, tuple[float, tuple[int, int, str]]]:
            curve = curves[job.id]
            if curve is None:
                return (-neutral_slope(job), 0.0, arrival_key(job))
            # Rounded: two jobs of one model and count have the same slope, but reached by
            # different paths (one's reference is its running plan's) it can differ in the last
            # bit, by a margin that depends on the CPU's floating-point kernels; arrival decides.
            gpu = round(curve.gpu_slope(job.num_gpus), SLOPE_DIGITS)
            cpu = round(curve.cpu_slope(job.num_gpus), SLOPE_DIGITS)
            return (-gpu, -cpu, arrival_key(job))

        stay = sorted((j for j in snapshot.jobs if j.id in settled), key=slope_key)
        rest = sorted((j for j in snapshot.jobs if j.id not in early), key=slope_key)
        return with_privilege(first + stay + starving + rest, chosen)

    def settled(self, job: Job) -> bool:
        """A running job whose preemption §5.3's penalty rule forbids (module docstring); one
        that is not ``preemptible`` keeps its GPUs anyway."""
        return (
            job.is_running
            and job.preemptible
            and not may_reconfigure(job, self.restart_cost_s, self.threshold)
        )


@ORDERINGS.register("antman")
@dataclass(frozen=True)
class AntManOrdering:
    """Guaranteed jobs within their tenant's quota of requested GPUs first, then the others by arrival."""

    preemptive_by_default: ClassVar[bool] = True
    quotas: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        options_reader(options, "antman ordering", [])
        return cls(quotas_of(context))

    def order(self, snapshot: Snapshot) -> Sequence[Job]:
        chosen = privileged(snapshot.jobs, self.quotas, lambda j: j.num_gpus)
        first = sorted((j for j in snapshot.jobs if j.id in chosen), key=running_first)
        rest = sorted((j for j in snapshot.jobs if j.id not in chosen), key=arrival_key)
        return with_privilege(first + rest, chosen)
