"""The ``mosaic`` ordering: guarantees first, then 2D-LAS, with declared time limits as a bound.

Five keys, in this order:

1. **Privileged guaranteed jobs** (Rubick §5.1-5.2, AntMan): a tenant's guaranteed jobs whose
   minimum demand fits what is left of its GPU quota go before every other job, running ones
   first, then by arrival. The set is the one Rubick's reconfiguration stage guarantees
   (:func:`planner.policies.rubick.policy.privileged`, quota use = ``minRes``), so the order and
   the stage that keeps the guarantee agree on who holds it. Every other job is best-effort:
   it runs on what the privileged ones leave and is preempted first.
2. **Settled running jobs** (:class:`.view.RestartRule`): a running job whose restart would not
   pay yet (Rubick §5.3's penalty rule: at most 3 % of its training time so far goes to
   restarts) or that reached its restart bound goes next, so only a privileged job may stop it.
   The other running jobs may be preempted by the next two keys.
3. **Attained service**, for jobs that declare no time limit (Tiresias' discretised 2D-LAS
   with starvation promotion, as the ``tiresias`` ordering, on three queues split at 4 and 16
   GPU-hours, :data:`MOSAIC_THRESHOLDS_GPU_S`): a job's queue comes from the GPU-seconds it
   has received. It needs no run time, which a real cluster does not know. A job
   that declares a limit is in the first queue: its bound is better evidence of its length than
   the service it has had, and demoting it would let every arrival preempt it.
4. **Declared time limit**, within a queue: a job's upper bound on its remaining run time
   (``time_limit_s`` less what it has executed, :mod:`.view`), in powers of two of minutes,
   shortest first. Slurm kills a job at its limit, so the bound is honest; a job that declares
   a short one gets SRTF's benefit without its need for true run times. A running best-effort
   job counts ``preemption_gap`` (5) buckets lower: a waiting job preempts it only with a bound
   32 times shorter, since a bound is up to a few times the true run time and a restart is
   paid in full. On the mixed workloads (``benchmarks/papers/mosaic.py``, 200 jobs, 4 seeds at 20
   and 40 jobs/h) this cut restarts from 1.5 to 0.55 per job at the same average JCT. Jobs
   without a limit (or whose limits fall in one bucket) keep Tiresias' order; a running job's
   bound only falls, so it never moves below a job that waits. Within a bucket, Tiresias'
   order (queue entry, then arrival).
5. **Guaranteed jobs beyond their tenant's quota** are best-effort (Rubick §5.1: the quota
   bounds the guarantee), but go ahead of the other best-effort jobs that wait: a guaranteed job
   the quota does not cover ranks first in its bound bucket, and among the waiting jobs below
   the lowest-ranked running job it moves up to the top. It never moves above a running job it
   ranked below, so it stops no job the order above would not (``over_quota_first``).

A waiting privileged job that accepts several GPU types is handed on accepting only its
fastest ones (:mod:`.fastest`): no other stage chooses a guaranteed job's type by its speed.

The ordering is also the scheduler's :class:`~planner.stages.Lens`: every stage of a ``mosaic``
round plans from :class:`.view.DeclaredView` (declared limits, never the true run times;
restarts bounded per job).

The state carried between rounds is Tiresias' (queue and entry time) plus Rubick's
``privileged`` flag (a guarantee holds throughout the job's execution) and ``settled``, which
the joint allocation reads (:func:`.rules.crius_decides`: Crius does not move a settled job).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from planner.core.model import Job, Snapshot
from planner.policies.baselines.view import DpView
from planner.policies.common import options_reader
from planner.policies.mosaic.fastest import on_fastest_types
from planner.policies.mosaic.view import (
    DEFAULT_MAX_RESTARTS,
    DeclaredView,
    RestartRule,
)
from planner.policies.rubick.curves import CurveBook, JobCurve, Shape, job_curve
from planner.policies.rubick.policy import (
    book_for,
    privileged,
    quotas_of,
    rubick_usage,
    running_first,
    shared_book,
    with_privilege,
)
from planner.policies.tiresias import DEFAULT_THRESHOLDS_GPU_S, Tiresias
from planner.registry import StageContext
from planner.stages import ORDERINGS


def bound_bucket(job: Job, cap_minutes: float) -> int:
    """The job's remaining-bound bucket: ``ceil(log2(minutes left))``, 0 for a minute or less.

    A job without a declared limit, or whose bound exceeds ``cap_minutes``, is in the last
    bucket: an undeclared limit is no evidence of a long job, and a limit far beyond the queue's
    jobs says nothing either (Slurm partitions default to days)."""
    limit = job.time_limit_s
    last = math.ceil(math.log2(max(1.0, cap_minutes)))
    if limit is None:
        return last
    executed = job.attained_gpu_s / max(1, job.num_gpus)
    minutes = max(0.0, limit - executed) / 60.0
    if minutes >= cap_minutes:
        return last
    return 0 if minutes <= 1.0 else math.ceil(math.log2(minutes))


DEFAULT_PREEMPTION_GAP = 5
"""Buckets (powers of two) by which a waiting job's declared bound must be shorter than a
running best-effort job's for the waiting one to rank above it: 32 times (module docstring)."""


# The 2D-LAS queues' thresholds (GPU-seconds) for jobs that declare no time limit: three
# queues, split at 4 and 16 GPU-hours (a factor of four apart), where Tiresias' default has one
# split at one GPU-hour. For these jobs the queue is the order's first key after the settled
# ones, and every demotion is a chance for an arrival to preempt the job, whose restart is paid
# in full; demoting only at hours of service (geometrically, as multi-level feedback queues
# space their quanta) keeps the short-first order for short jobs and stops preempting a long one
# every hour. On Tesserae's trace (400 rigid jobs without time limits, 5 seeds) the average JCT
# is 11 % lower and the restarts 45 % fewer than with [3600]; from 10,800 to 28,800 s for the
# first split the result is the same within 1 %.
MOSAIC_THRESHOLDS_GPU_S: tuple[float, ...] = (14_400.0, 57_600.0)


@dataclass(frozen=True)
class DeclaredLas(Tiresias):
    """Tiresias' 2D-LAS in which jobs that declare a time limit keep their own thresholds.

    A declared job's LAS queue only breaks ties within its bound bucket (key 4 of the module
    docstring), where Tiresias' one-hour split orders the jobs with less service first; the
    demotions it makes preempt nothing by themselves. ``declared_thresholds_gpu_s`` None: every
    job has ``thresholds_gpu_s`` (the ordering does not read declared limits)."""

    declared_thresholds_gpu_s: tuple[float, ...] | None = DEFAULT_THRESHOLDS_GPU_S

    def thresholds_for(self, job: Job) -> tuple[float, ...]:
        if job.time_limit_s is not None and self.declared_thresholds_gpu_s is not None:
            return self.declared_thresholds_gpu_s
        return self.thresholds_gpu_s


@ORDERINGS.register("mosaic")
@dataclass(frozen=True)
class MosaicOrdering:
    """Options: ``queue_thresholds_gpu_s`` (``[14400, 57600]``, :data:`MOSAIC_THRESHOLDS_GPU_S`:
    for jobs without a declared time limit; declared ones keep Tiresias' ``[3600]``,
    :class:`DeclaredLas`) and ``promote_knob`` (Tiresias'), ``guarantees``
    (true), ``time_limits`` (true: the bound orders jobs within a queue),
    ``bound_cap_minutes`` (a week: bounds at or above it are all in the last bucket) and
    ``max_restarts`` (8: a running job restarted that often is not stopped again) and
    ``restart_cost_s`` (the scheduler's, 30 unless set: what a restart costs, charged by
    :mod:`.view`),
    ``las_preemption`` (true; false: every running best-effort job is settled),
    ``preemption_gap`` (5: the buckets a running job's declared bound counts lower) and
    ``over_quota_first`` (true: guaranteed jobs beyond their tenant's quota go ahead of the
    other best-effort jobs that wait) and ``fastest_types`` (true: a waiting privileged job
    that accepts several GPU types is placed on its fastest ones, :mod:`.fastest`)."""

    preemptive_by_default: ClassVar[bool] = True
    las: DeclaredLas
    view: DeclaredView = field(default_factory=DeclaredView)
    restarts: RestartRule = field(default_factory=RestartRule)
    quotas: Mapping[str, int] = field(default_factory=dict)
    guarantees: bool = True
    time_limits: bool = True
    bound_cap_minutes: float = 7 * 24 * 60.0
    las_preemption: bool = True
    preemption_gap: int = DEFAULT_PREEMPTION_GAP
    book: CurveBook = field(default_factory=shared_book)
    over_quota_first: bool = True
    # None: privileged jobs keep every type they accept (option fastest_types=false).
    speeds: DpView | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        las_keys = ("queue_thresholds_gpu_s", "promote_knob")
        f = options_reader(
            options,
            "mosaic ordering",
            [
                *las_keys,
                "guarantees",
                "time_limits",
                "bound_cap_minutes",
                "max_restarts",
                "restart_cost_s",
                "las_preemption",
                "preemption_gap",
                "over_quota_first",
                "fastest_types",
            ],
        )
        las_options = {k: v for k, v in options.items() if k in las_keys}
        las_options.setdefault("queue_thresholds_gpu_s", list(MOSAIC_THRESHOLDS_GPU_S))
        tiresias = Tiresias.from_options(las_options, context)
        time_limits = f.flag("time_limits", True)
        las = DeclaredLas(
            tiresias.thresholds_gpu_s,
            tiresias.promote_knob,
            DEFAULT_THRESHOLDS_GPU_S if time_limits else None,
        )
        cap = f.opt_float("bound_cap_minutes")
        if cap is not None and cap < 1:
            f.fail_key("bound_cap_minutes", f"must be >= 1, got {cap}")
        restarts = f.opt_int("max_restarts", minimum=0)
        cost = f.opt_float("restart_cost_s", minimum=0.0)
        rule = RestartRule(
            DEFAULT_MAX_RESTARTS if restarts is None else restarts,
            context.restart_cost_s if cost is None else cost,
        )
        return cls(
            las,
            DeclaredView(),
            rule,
            quotas_of(context),
            f.flag("guarantees", True),
            time_limits,
            7 * 24 * 60.0 if cap is None else cap,
            f.flag("las_preemption", True),
            _or(f.opt_int("preemption_gap", minimum=0), DEFAULT_PREEMPTION_GAP),
            book_for(context.profiles),
            f.flag("over_quota_first", True),
            DpView(context.profiles) if f.flag("fastest_types", True) else None,
        )

    def lens(self, snapshot: Snapshot) -> Snapshot:
        return self.view.apply(snapshot)

    def order(self, snapshot: Snapshot) -> Sequence[Job]:
        chosen: set[str] = set()
        if self.guarantees and self.quotas and any(j.guaranteed for j in snapshot.jobs):
            chosen = privileged(snapshot.jobs, self.quotas, rubick_usage(_Curves(snapshot, self.book)))
        ordered = list(self.las.order(snapshot))
        first = sorted((j for j in ordered if j.id in chosen), key=running_first)
        settled = {j.id for j in snapshot.jobs if j.id not in chosen and self.restarts.settled(j)}
        stays = settled
        if not self.las_preemption:
            stays = {j.id for j in snapshot.jobs if j.is_running and j.id not in chosen}
        rest = [j for j in ordered if j.id not in chosen]
        # Guaranteed jobs beyond their tenant's quota (key 5 of the module docstring).
        beyond: set[str] = set()
        if self.guarantees and self.over_quota_first:
            beyond = {j.id for j in rest if j.guaranteed and j.tenant in self.quotas}
        if self.time_limits and any(j.time_limit_s is not None for j in rest):
            cap = self.bound_cap_minutes
            queue = {j.id: k for k, j in enumerate(rest)}
            gap = self.preemption_gap
            rest.sort(
                key=lambda j: (
                    0 if j.time_limit_s is not None else _queue_of(j),
                    bound_bucket(j, cap) - (gap if j.is_running else 0),
                    j.id not in beyond,
                    queue[j.id],
                )
            )
        if beyond:
            rest = _waiting_beyond_first(rest, beyond)
        if stays:
            rest = [j for j in rest if j.id in stays] + [j for j in rest if j.id not in stays]
        out = rest if not chosen and not any(_was_flagged(j) for j in snapshot.jobs) else None
        if out is None:
            out = with_privilege(first + rest, chosen)
        if chosen and self.speeds is not None:
            out = on_fastest_types(snapshot, out, chosen, self.speeds)
        return _with_flag(out, SETTLED, settled)


class _Curves(Mapping[str, JobCurve | None]):
    """Rubick's curve of a job, worked out only for the jobs the quota rule asks about."""

    def __init__(self, snapshot: Snapshot, book: CurveBook) -> None:
        self._snapshot = snapshot
        self._book = book
        self._jobs = {j.id: j for j in snapshot.jobs}
        self._memo: dict[str, JobCurve | None] = {}
        self._shapes: dict[tuple[str, ...], Shape] = {}

    def __getitem__(self, job_id: str) -> JobCurve | None:
        if job_id not in self._memo:
            job = self._jobs[job_id]
            self._memo[job_id] = job_curve(self._book, job, self._snapshot, True, self._shapes)
        return self._memo[job_id]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)


SETTLED = "settled"


def _waiting_beyond_first(rest: list[Job], beyond: set[str]) -> list[Job]:
    """``rest`` with the jobs of ``beyond`` moved up to just below the lowest-ranked running job
    of the others, where they ranked below it: ahead of every other waiting job, above no
    running job they were not already above (so they stop no job the order would not). One
    that this started keeps its rank once it runs (its attained service would rank it below
    the waiting jobs it went ahead of, which would stop it in the next round)."""
    last = max((k for k, j in enumerate(rest) if j.is_running and j.id not in beyond), default=-1)
    tail = rest[last + 1 :]
    return rest[: last + 1] + [j for j in tail if j.id in beyond] + [j for j in tail if j.id not in beyond]


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def _with_flag(jobs: list[Job], key: str, chosen: set[str]) -> list[Job]:
    """``jobs`` with ``policy_state[key]`` saying whether each is in ``chosen`` (the same
    objects where it already says so; no key for a job that never was)."""
    out = []
    for job in jobs:
        state = job.policy_state or {}
        flag = job.id in chosen
        if bool(state.get(key)) != flag:
            job = job.with_policy_state({**state, key: flag})  # noqa: PLW2901
        out.append(job)
    return out


def is_settled(job: Job) -> bool:
    """The ordering ranked the running job as settled this round (its restart does not pay)."""
    return bool((job.policy_state or {}).get(SETTLED))


def _queue_of(job: Job) -> int:
    state = job.policy_state or {}
    queue = state.get("q")
    return queue if isinstance(queue, int) else 0


def _was_flagged(job: Job) -> bool:
    return "privileged" in (job.policy_state or {})
