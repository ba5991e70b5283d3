"""The trace-driven simulator: the live controller's loop with a simulated clock.

Every ``round_s`` seconds (and, with ``trigger="event"``, also at every arrival and
completion; and, under either trigger, at the times the scheduler asks for,
:meth:`~planner.pipeline.Scheduler.next_wakeup_s`: a placement's backfill interval) the
simulator builds a :class:`Snapshot` of the simulated cluster, calls
the very same :func:`planner.plan_round` the controller calls, checks the plan's
invariants, and applies it:

* a started job launches; a job that resumes after a preemption, moves to other nodes
  (a migration) or is relaunched with another GPU count, CPUs, memory or plan pays a
  restart cost (``checkpoint_s + relaunch_s``) before it makes progress again (Gavel,
  Tesserae and Synergy all charge such a cost); what counts as a restart or a migration is
  :func:`planner.relaunch.classify`, shared with the live controller and ``mosaic report``
  (GPUs renumbered on the same nodes cost nothing);
* between planning points, running jobs progress at the speed their profile gives
  for their allocation (:class:`~planner.sim.progress.SpeedModel`), and complete at
  the exact time their work runs out, inside the round; their GPUs stay idle until the
  next planning point, as on a cluster with a periodic controller.

The simulator owns no clock and writes nothing: ``clock`` (to time decisions) and
``on_progress`` (for a progress bar) are injected by the caller.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from planner.core.errors import ConfigError, SimulationError
from planner.core.model import Assignment, Job, JobState, Node, RoundPlan, Snapshot
from planner.metrics import JobRecord, active_at_arrival, summarize
from planner.pipeline import Clock, Scheduler, plan_round
from planner.relaunch import Change, classify
from planner.sim.progress import TRUTHS, SpeedModel, check_truth
from planner.traces.records import TraceJob
from planner.validate import PlanChecker
from profiles.store import ProfileStore

log = logging.getLogger(__name__)

TRIGGERS = ("round", "event")
_EPS = 1e-9


@dataclass(frozen=True)
class SimConfig:
    """Simulator settings (defaults: Tesserae's 6-minute rounds, a 30 s restart)."""

    round_s: float = 360.0
    checkpoint_s: float = 10.0
    relaunch_s: float = 20.0
    # A cost at a job's first start too (0: a first start is free). Rubick's artifact
    # simulator charges its 260 s restart at every placement, the first included.
    launch_s: float = 0.0
    trigger: str = "round"
    horizon_s: float | None = None
    check_invariants: bool = True
    interference: float | None = None  # one true ξ for every sharing pair (SJF-BSBF Fig. 6(b))
    # (CPUs, GB) per GPU at which trace durations were measured; None: the proportional share
    reference_share: tuple[float, float] | None = None
    # What prices Rubick's seven models on A800s (planner.sim.progress.TRUTHS): Mosaic's
    # measurements, or "rubick-artifact", the Rubick artifact simulator's rule.
    truth: str = TRUTHS[0]

    def __post_init__(self) -> None:
        if not self.round_s > 0:
            raise ConfigError(f"round_s must be > 0, got {self.round_s}")
        if self.checkpoint_s < 0 or self.relaunch_s < 0 or self.launch_s < 0:
            raise ConfigError("checkpoint_s, relaunch_s and launch_s must be >= 0")
        if self.trigger not in TRIGGERS:
            raise ConfigError(f"trigger must be one of {', '.join(TRIGGERS)}, got {self.trigger!r}")
        if self.horizon_s is not None and self.horizon_s <= 0:
            raise ConfigError(f"horizon_s must be > 0, got {self.horizon_s}")
        if self.interference is not None and not self.interference > 0:
            raise ConfigError(f"interference must be > 0, got {self.interference}")
        if self.reference_share is not None and not all(v > 0 for v in self.reference_share):
            raise ConfigError(
                f"reference_share must be positive (CPUs, GB) per GPU, got {self.reference_share}"
            )
        check_truth(self.truth)

    @property
    def restart_cost_s(self) -> float:
        return self.checkpoint_s + self.relaunch_s


@dataclass(frozen=True)
class TimelinePoint:
    """Cluster state right after one planning point."""

    time_s: float
    busy_gpus: int
    running: int
    pending: int


@dataclass
class SimResult:
    records: list[JobRecord]
    summary: dict[str, Any]
    timeline: list[TimelinePoint] = field(default_factory=list)
    decision_times_s: list[float] = field(default_factory=list)
    end_time_s: float = 0.0
    unknown_models: frozenset[str] = frozenset()


class _SimJob:
    """Mutable state of one job inside the simulator."""

    __slots__ = (
        "assignment",
        "attained_gpu_s",
        "finish_time_s",
        "gpu_weight",
        "migrations",
        "overhead_left_s",
        "pending_since_s",
        "policy_state",
        "preemptions",
        "restarts",
        "speed",
        "start_time_s",
        "trace",
        "validated",
        "view",
        "work_left_s",
    )

    def __init__(self, trace: TraceJob) -> None:
        self.trace = trace
        self.work_left_s = trace.duration_s
        self.assignment: Assignment | None = None
        self.start_time_s: float | None = None
        self.finish_time_s: float | None = None
        self.restarts = 0  # classify's Change.restart: relaunches and resumes (jobs.csv's column)
        self.migrations = 0
        self.preemptions = 0
        self.attained_gpu_s = 0.0
        self.pending_since_s = trace.submit_time_s
        self.overhead_left_s = 0.0
        self.speed = 1.0
        self.gpu_weight = 0.0  # GPUs it holds, each shared GPU counted fractionally
        self.policy_state: Mapping[str, Any] | None = None
        self.view: Job | None = None  # cached snapshot entry, dropped whenever state changes
        self.validated = False  # a first entry went through Job's constructor

    def snapshot_view(self) -> Job:
        if self.view is None:
            t = self.trace
            running = self.assignment is not None
            # In _JOB_FIELDS' order (checked against Job's fields at import). The first
            # entry goes through Job's constructor, which validates the demand; the later
            # ones (a running job's is rebuilt every round) differ from it only in the
            # fields that change, and are set slot by slot, at about half the cost.
            make = _make_job if self.validated else Job
            self.view = make(
                t.job_id,
                t.num_gpus,
                t.model,
                t.submit_time_s,
                JobState.RUNNING if running else JobState.PENDING,
                self.attained_gpu_s,
                1.0 - self.work_left_s / t.duration_s,
                self.work_left_s,
                t.duration_s,
                t.batch_size,
                t.tenant,
                t.guaranteed,
                t.deadline_s,
                t.time_limit_s,
                t.gpu_type,
                t.plan,
                t.plans,
                True,
                self.restarts,
                None if running else self.pending_since_s,
                self.assignment,
                self.policy_state,
                t.min_gpus,
                t.max_gpus,
                t.gpu_types,
            )
            self.validated = True
        return self.view


_JOB_FIELDS = (
    "id",
    "num_gpus",
    "model",
    "submit_time_s",
    "state",
    "attained_gpu_s",
    "progress",
    "remaining_s",
    "duration_s",
    "batch_size",
    "tenant",
    "guaranteed",
    "deadline_s",
    "time_limit_s",
    "gpu_type",
    "plan",
    "candidate_plans",
    "preemptible",
    "restarts",
    "pending_since_s",
    "assignment",
    "policy_state",
    "min_gpus",
    "max_gpus",
    "gpu_types",
)
if tuple(f.name for f in fields(Job)) != _JOB_FIELDS:  # pragma: no cover - a model change
    raise ImportError("planner.sim.engine: Job's fields changed; update _SimJob.snapshot_view")

_new_object = object.__new__
_SET = tuple(getattr(Job, name).__set__ for name in _JOB_FIELDS)  # the slots' setters
(_s0, _s1, _s2, _s3, _s4, _s5, _s6, _s7, _s8, _s9, _s10, _s11) = _SET[:12]
(_s12, _s13, _s14, _s15, _s16, _s17, _s18, _s19, _s20, _s21, _s22, _s23, _s24) = _SET[12:]


def _make_job(*values: Any) -> Job:
    """A :class:`Job` from its field values, in _JOB_FIELDS' order, without the
    constructor's demand check (for values that passed it already)."""
    job: Job = _new_object(Job)
    _s0(job, values[0])
    _s1(job, values[1])
    _s2(job, values[2])
    _s3(job, values[3])
    _s4(job, values[4])
    _s5(job, values[5])
    _s6(job, values[6])
    _s7(job, values[7])
    _s8(job, values[8])
    _s9(job, values[9])
    _s10(job, values[10])
    _s11(job, values[11])
    _s12(job, values[12])
    _s13(job, values[13])
    _s14(job, values[14])
    _s15(job, values[15])
    _s16(job, values[16])
    _s17(job, values[17])
    _s18(job, values[18])
    _s19(job, values[19])
    _s20(job, values[20])
    _s21(job, values[21])
    _s22(job, values[22])
    _s23(job, values[23])
    _s24(job, values[24])
    return job


ProgressCallback = Callable[[float, int, int], None]
RoundCallback = Callable[[float, RoundPlan], None]
"""Called with each round's time and plan (``mosaic sim --record-rounds`` keeps them)."""


class Simulator:
    """Replays a trace on a cluster with one scheduler. Use :meth:`run` once."""

    def __init__(
        self,
        nodes: Sequence[Node],
        trace: Sequence[TraceJob],
        scheduler: Scheduler,
        config: SimConfig | None = None,
        profiles: ProfileStore | None = None,
        clock: Clock | None = None,
        on_progress: ProgressCallback | None = None,
        on_round: RoundCallback | None = None,
    ) -> None:
        if not nodes:
            raise ConfigError("the cluster has no nodes")
        self.nodes = tuple(nodes)
        self.scheduler = scheduler
        self.config = config or SimConfig()
        self.profiles = profiles or ProfileStore.builtin()
        self.clock = clock
        self.on_progress = on_progress
        self.on_round = on_round
        self.jobs = [_SimJob(t) for t in sorted(trace, key=lambda t: t.submit_time_s)]
        seen: set[str] = set()
        for job in self.jobs:
            if job.trace.job_id in seen:
                raise ConfigError(f"the trace has job id {job.trace.job_id!r} twice")
            seen.add(job.trace.job_id)
        self.speed_model = SpeedModel(
            self.profiles,
            {n.name: n for n in self.nodes},
            interference=self.config.interference,
            reference_share=self.config.reference_share,
            truth=self.config.truth,
        )
        self.total_gpus = sum(n.gpus for n in self.nodes)
        self.total_cpus = sum(n.cpus for n in self.nodes)
        self.active: dict[str, _SimJob] = {}  # arrived, unfinished, in arrival order
        # Their snapshot entries, in the same order, kept from round to round: only the
        # entries of jobs whose state changed (``_stale``) are rebuilt before a round.
        self._views: dict[str, Job] = {}
        # The policy state each active job's plan last gave it (the object), by job id.
        self._states: dict[str, Mapping[str, Any]] = {}
        self._stale: dict[str, _SimJob] = {}
        self.finished = 0
        self.allocated_gpu_s = 0.0
        self.allocated_cpu_s = 0.0
        self.timeline: list[TimelinePoint] = []
        self.decision_times: list[float] = []
        self._busy_gpus = 0
        self._finished_since_apply = False
        # The running jobs in arrival order (None: rebuild, after a start, stop or move),
        # whether any of them shares GPUs, and whether the last applied plan had sharing.
        self._running: list[_SimJob] | None = None
        self._running_share = False
        self._plan_shares = False
        self._checker = PlanChecker()

    # -- main loop ----------------------------------------------------------------------
    def run(self) -> SimResult:
        cfg = self.config
        if not self.jobs:
            return self._result(0.0)
        start = self.jobs[0].trace.submit_time_s
        horizon = math.inf if cfg.horizon_s is None else start + cfg.horizon_s
        t = start
        next_arrival = 0
        wake_at: float | None = None  # the scheduler's wakeup (Scheduler.next_wakeup_s) planned for
        while True:
            next_arrival = self._admit(t, next_arrival)
            upcoming = (
                self.jobs[next_arrival].trace.submit_time_s if next_arrival < len(self.jobs) else math.inf
            )
            if not self.active:
                if math.isinf(upcoming):
                    break
                t = self._next_planning_point(start, t, upcoming)
                if t >= horizon:
                    t = horizon
                    break
                continue
            plan = self._plan(t)
            if self.on_round is not None:
                self.on_round(t, plan)
            self._apply(plan, t)
            running = len(self._running_jobs())
            # A scheduler that plans differently at some times (a backfill interval) is asked
            # again then, under either trigger.
            woke = wake_at is not None and abs(t - wake_at) <= _EPS
            wake_at = self.scheduler.next_wakeup_s(t)
            if running == 0:
                # Nothing changes until the next arrival, or the scheduler's next wakeup
                # unless this round was one: the ones after it would plan the same.
                t_next = math.inf if math.isinf(upcoming) else self._next_planning_point(start, t, upcoming)
                if wake_at is not None and not woke:
                    t_next = min(t_next, wake_at)
                if math.isinf(t_next):
                    log.warning(
                        "t=%.0fs: %d job(s) can never start on this cluster; stopping", t, len(self.active)
                    )
                    break
                t = t_next
                if t >= horizon:
                    t = horizon
                    break
                continue
            t_next = t + cfg.round_s
            if cfg.trigger == "event":
                t_next = min(t_next, upcoming, self._next_completion(t))
            if wake_at is not None:
                t_next = min(t_next, wake_at)
            t_next = min(t_next, horizon)
            self._advance(t, t_next)
            t = t_next
            if self.on_progress is not None:
                self.on_progress(t, self.finished, len(self.jobs))
            if t >= horizon:
                break
        return self._result(t)

    def _next_planning_point(self, start: float, t: float, arrival: float) -> float:
        """When an idle cluster plans next: the arrival itself, or its round boundary."""
        if self.config.trigger == "event":
            return max(arrival, t)
        rounds = math.ceil((arrival - start) / self.config.round_s - _EPS)
        return max(start + rounds * self.config.round_s, t)

    def _admit(self, t: float, index: int) -> int:
        while index < len(self.jobs) and self.jobs[index].trace.submit_time_s <= t + _EPS:
            job = self.jobs[index]
            self.active[job.trace.job_id] = job
            self._views[job.trace.job_id] = job.snapshot_view()
            index += 1
        return index

    # -- planning -----------------------------------------------------------------------
    def _plan(self, t: float) -> RoundPlan:
        views = self._views
        for job_id, job in self._stale.items():
            if job_id in views:
                views[job_id] = job.snapshot_view()
        self._stale.clear()
        snapshot = Snapshot(time_s=t, nodes=self.nodes, jobs=tuple(views.values()))
        plan = plan_round(snapshot, self.scheduler, self.clock)
        self.decision_times.append(plan.decision_time_s)
        # A plan that starts, moves and reshapes nothing keeps a subset of last round's
        # (checked) assignments, which cannot break an invariant: skip the check then.
        # Otherwise the checker updates its totals by the assignments that changed since
        # the last plan it checked and checks only those (the others were checked when they
        # were given, against the same job and cluster) and what they touch.
        unchanged = not (plan.started or plan.migrated or plan.reshaped)
        if self.config.check_invariants and not unchanged:
            view = self.scheduler.view(snapshot)  # the jobs as the scheduler planned them
            jobs = views if view is snapshot else None
            problems = self._checker.violations(view, plan, self.scheduler.max_jobs_per_gpu, jobs)
            if problems:
                raise SimulationError(f"t={t:.0f}s: plan breaks invariants: " + "; ".join(problems))
        return plan

    def _apply(self, plan: RoundPlan, t: float) -> None:
        restart = self.config.restart_cost_s
        active = self.active
        # Every job's state comes back every round, nearly all the very objects handed in
        # (thousands at twice a cluster's capacity): those are passed over in one comprehension.
        states, given_states = self._states, plan.policy_state
        for job_id in [job_id for job_id, state in given_states.items() if states.get(job_id) is not state]:
            job, state = active[job_id], given_states[job_id]
            states[job_id] = state
            if job.policy_state is not state and job.policy_state != state:
                job.policy_state = state
                self._changed(job)
        changed = bool(plan.preempted) or self._finished_since_apply
        for job_id in plan.preempted:
            job = active[job_id]
            job.preemptions += 1
            job.pending_since_s = t
            job.assignment = None
            self._changed(job)
        given: list[_SimJob] = []
        for job_id, assignment in plan.assignments.items():
            job = active[job_id]
            if job.assignment is assignment:  # kept as it was: nothing to do
                continue
            changed = True
            # The one definition the live controller and `mosaic report` count with too: a
            # renumbering of GPUs on the same nodes (Change.NONE) is taken over at no cost.
            change = classify(job.assignment, assignment, ran_before=job.start_time_s is not None)
            if change is Change.START:
                job.start_time_s = t
                job.overhead_left_s = self.config.launch_s
            elif change.restart:
                job.restarts += 1
                job.overhead_left_s = restart
                if change.migration:
                    job.migrations += 1
            job.assignment = assignment
            # A job that shares is priced below, once every job holds the plan's assignment:
            # its partner may not have been applied yet, and priced beside the partner's last
            # assignment (another plan or GPU, with which the pair may not fit) it could
            # get speed 0 for a pair the plan never formed.
            if not assignment.shares_with:
                job.speed = self._speed(job)
            self._changed(job)
            given.append(job)
        if changed:
            self._running = None
            shares = any(a.shares_with for a in plan.assignments.values())
            if shares or self._plan_shares:
                for job_id, a in plan.assignments.items():
                    if a.shares_with:  # a partner may have changed plan or left
                        active[job_id].speed = self._speed(active[job_id])
                # Each GPU's time is split among the jobs sharing it, for utilisation.
                occupancy: dict[tuple[str, int], int] = {}
                for a in plan.assignments.values():
                    for slot in a.gpus:
                        occupancy[slot] = occupancy.get(slot, 0) + 1
                self._busy_gpus = len(occupancy)
                for job_id, a in plan.assignments.items():
                    active[job_id].gpu_weight = sum(1.0 / occupancy[slot] for slot in a.gpus)
            else:
                # No GPU holds two jobs, now or in the last plan: each job's weight is its
                # GPU count (what the sum above gives), already set for the jobs kept.
                self._busy_gpus = len({slot for a in plan.assignments.values() for slot in a.gpus})
                for job in given:
                    job.gpu_weight = float(len(job.assignment.gpus))  # type: ignore[union-attr]
            self._plan_shares = shares
            self._finished_since_apply = False
        self.timeline.append(
            TimelinePoint(t, self._busy_gpus, len(plan.assignments), len(self.active) - len(plan.assignments))
        )

    def _running_jobs(self) -> list[_SimJob]:
        """The running jobs in arrival order (rebuilt only after the set or a job's GPUs changed)."""
        if self._running is None:
            self._running = [j for j in self.active.values() if j.assignment is not None]
            self._running_share = any(j.assignment.shares_with for j in self._running)  # type: ignore[union-attr]
        return self._running

    def _changed(self, job: _SimJob) -> None:
        """Drop the job's snapshot entry: it is rebuilt before the next round."""
        job.view = None
        self._stale[job.trace.job_id] = job

    def _speed(self, job: _SimJob) -> float:
        a = job.assignment
        assert a is not None
        partners = [
            (self.active[p].trace, pa)
            for p in a.shares_with
            if p in self.active and (pa := self.active[p].assignment) is not None
        ]
        return self.speed_model.speed(job.trace, a, partners)

    # -- time passing -------------------------------------------------------------------
    def _next_completion(self, t: float) -> float:
        return min(
            (t + j.overhead_left_s + j.work_left_s / j.speed for j in self.active.values() if j.assignment),
            default=math.inf,
        )

    def _advance(self, t0: float, t1: float) -> None:
        """Run every job from t0 to t1; jobs finish at their exact time inside.

        When a job that shares its GPUs finishes, its partner runs alone (and faster)
        for the rest of the interval, so the interval is cut at each such completion.
        """
        t = t0
        while t < t1 - _EPS or t == t0:
            running = self._running_jobs()
            end = t1
            if self._running_share:
                end = min(
                    t1, min((t + j.overhead_left_s + j.work_left_s / j.speed for j in running), default=t1)
                )
            done = self._run(running, t, end)
            if done:
                self._running = None
            for job in done:
                del self.active[job.trace.job_id]
                del self._views[job.trace.job_id]
                self._states.pop(job.trace.job_id, None)
                self.finished += 1
                self._finished_since_apply = True
            for job in done:
                assert job.assignment is not None
                for partner_id in job.assignment.shares_with:
                    partner = self.active.get(partner_id)
                    if partner is not None and partner.assignment is not None:
                        partner.speed = self._speed(partner)
                        partner.gpu_weight = float(partner.assignment.num_gpus)
            if end >= t1 - _EPS:
                break
            t = end

    def _run(self, running: list[_SimJob], t0: float, t1: float) -> list[_SimJob]:
        """Advance the running jobs over [t0, t1]; those that finished (at their exact time).

        One loop for every running job every round, so it is kept tight: the totals are
        summed in locals in the same order (the same floating-point results as one
        update per job), and each job's snapshot entry is dropped for the next round.
        """
        dt = t1 - t0
        stale = self._stale
        gpu_s, cpu_s = self.allocated_gpu_s, self.allocated_cpu_s
        done = []
        for job in running:
            a = job.assignment
            assert a is not None
            overhead = min(job.overhead_left_s, dt)
            job.overhead_left_s -= overhead
            useful = dt - overhead
            need = job.work_left_s / job.speed
            held = dt
            if need <= useful + _EPS:
                held = overhead + need
                job.work_left_s = 0.0
                job.finish_time_s = t0 + held
                done.append(job)
            else:
                job.work_left_s -= useful * job.speed
            job.attained_gpu_s += len(a.gpus) * held
            gpu_s += job.gpu_weight * held
            cpu_s += a.cpus * held
            job.view = None
            stale[job.trace.job_id] = job
        self.allocated_gpu_s, self.allocated_cpu_s = gpu_s, cpu_s
        return done

    # -- results ------------------------------------------------------------------------
    def _record(self, job: _SimJob, active_at_arrival: int) -> JobRecord:
        t = job.trace
        if job.finish_time_s is not None:
            state = "finished"
        elif job.assignment is not None:
            state = "running"
        elif t.job_id in self.active:
            state = "pending"
        else:
            state = "not-arrived"
        return JobRecord(
            job_id=t.job_id,
            num_gpus=t.num_gpus,
            submit_time_s=t.submit_time_s,
            start_time_s=job.start_time_s,
            finish_time_s=job.finish_time_s,
            state=state,
            model=t.model,
            restarts=job.restarts,
            migrations=job.migrations,
            preemptions=job.preemptions,
            duration_s=t.duration_s,
            attained_gpu_s=job.attained_gpu_s,
            active_at_arrival=active_at_arrival,
            tenant=t.tenant,
            guaranteed=t.guaranteed,
            deadline_s=t.deadline_s,
        )

    def _result(self, end_time_s: float) -> SimResult:
        counts = active_at_arrival(
            [j.trace.submit_time_s for j in self.jobs], [j.finish_time_s for j in self.jobs]
        )
        records = [self._record(j, n) for j, n in zip(self.jobs, counts, strict=True)]
        summary = summarize(
            records,
            cluster_gpus=self.total_gpus,
            cluster_cpus=self.total_cpus,
            allocated_gpu_s=self.allocated_gpu_s,
            allocated_cpu_s=self.allocated_cpu_s,
            decision_times_s=self.decision_times,
            end_time_s=end_time_s,
        )
        summary["rounds"] = len(self.decision_times)
        summary["end_time_s"] = end_time_s
        summary["scheduler"] = self.scheduler.name
        return SimResult(
            records=records,
            summary=summary,
            timeline=self.timeline,
            decision_times_s=self.decision_times,
            end_time_s=end_time_s,
            unknown_models=self.profiles.unknown_models,
        )


def simulate(
    nodes: Sequence[Node],
    trace: Sequence[TraceJob],
    scheduler: Scheduler,
    config: SimConfig | None = None,
    **kwargs: Any,
) -> SimResult:
    """Convenience wrapper: ``Simulator(...).run()``."""
    return Simulator(nodes, trace, scheduler, config, **kwargs).run()
