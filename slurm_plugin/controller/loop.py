"""The controller's tick and loop (Ray autoscaler v2's shape: sync from the world, then act).

A tick: observe Slurm -> complete a round a crash left half-applied -> account attained
service -> ``plan_round`` -> diff -> apply -> record. A tick that cannot read Slurm
takes no action at all (never a mass requeue on a blind tick); a failing tick is
logged and recorded, and the loop lives on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import astuple, dataclass, field, replace
from typing import Any

from planner.core.codec import assignment_from_json, round_plan_to_json
from planner.core.model import Assignment
from planner.pipeline import Scheduler, plan_round
from slurm_plugin import planfile
from slurm_plugin.controller import metrics
from slurm_plugin.controller.actuate import Actuator, ApplyResult
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.faults import crash_point
from slurm_plugin.controller.memory import release_free_memory
from slurm_plugin.controller.observe import (
    IN_FLUX_STATES,
    OUTSIDE_PREFIX,
    RUNNING_STATES,
    Observation,
    PendingJobs,
    build_observation,
    first_sight_meta,
    job_gpus,
    reuses_an_earlier_id,
)
from slurm_plugin.controller.refine import Refiner
from slurm_plugin.controller.rounddiff import Action, describe, diff
from slurm_plugin.controller.roundlock import RoundBusy, round_lock
from slurm_plugin.controller.spoolsweep import SpoolSweeper
from slurm_plugin.slurm.backend import SlurmClient
from slurm_plugin.slurm.parse import SlurmJob
from slurm_plugin.slurm.runner import SlurmError
from slurm_plugin.store import JobRecord, Store, StoreError

log = logging.getLogger(__name__)

# How long a tick waits for a round another process is applying (``mosaic resize``, whose
# start verification alone takes up to a few seconds) before it skips this round.
TICK_LOCK_WAIT_S = 30.0
PRUNE_EVERY_S = 3600.0
"""How often (seconds of controller time) the store's history is pruned (``history_days``);
the first tick of a process always does (``mosaic controller --once`` from cron)."""


@dataclass
class TickReport:
    """What one tick did (printed by ``mosaic controller --once``)."""

    time_s: float
    ok: bool
    round_id: int | None = None
    error: str | None = None
    completed_round: int | None = None
    actions: list[dict[str, Any]] = field(default_factory=list)
    result: ApplyResult | None = None
    decision_time_s: float | None = None
    jobs: int = 0
    cluster: metrics.ClusterState | None = None  # jobs and GPUs after the round (metrics file)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "time_s": self.time_s,
            "ok": self.ok,
            "round": self.round_id,
            "error": self.error,
            "completed_round": self.completed_round,
            "jobs": self.jobs,
            "decision_time_s": self.decision_time_s,
            "actions": self.actions,
        }
        if self.result is not None:
            doc["done"] = self.result.done
            doc["skipped"] = [{"request_id": r, "why": w} for r, w in self.result.skipped]
            doc["failed"] = [{"request_id": r, "why": w} for r, w in self.result.failed]
        return doc


class Observer:
    """Reads Slurm and the state store into an :class:`Observation`."""

    def __init__(
        self,
        client: SlurmClient,
        store: Store,
        config: ControllerConfig,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.store = store
        self.config = config
        self.clock = clock
        self.pending = PendingJobs()  # pending jobs' planner records, reused across ticks
        self.listed: list[SlurmJob] = []  # every job of the last listing
        self.listed_at: float | None = None  # wall-clock time just before it was taken

    def observe(self) -> Observation:
        """Read Slurm and the store; record new jobs and account service since the last tick."""
        now = self.clock()
        listed_at = time.time()
        jobs = self.client.jobs()
        self.listed, self.listed_at = jobs, listed_at
        nodes = self.client.nodes()
        partitions = set(self.config.partitions)
        managed = [sj for sj in jobs if sj.partition in partitions]
        ids = [sj.id for sj in managed]
        records = self.store.jobs(ids)
        reused = [sj.id for sj in managed if sj.id in records and reuses_an_earlier_id(sj, records[sj.id])]
        if reused:
            self._forget(reused)
            records = {job_id: r for job_id, r in records.items() if job_id not in reused}
        new = [
            (sj.id, job_gpus(sj), first_sight_meta(sj))
            for sj in managed
            if sj.id not in records and sj.state in {"PENDING", "RUNNING"} and job_gpus(sj) > 0
        ]
        if new:
            self.store.add_jobs(new, now)
            records = self.store.jobs(ids)
        records = self._account(managed, records, now)
        plans = {
            sj.id: planfile.current_exec_plan(self.config.spool_dir, sj.id)
            for sj in managed
            if sj.state in RUNNING_STATES
        }
        return build_observation(now, jobs, nodes, records, self.config, plans, self.pending)

    def _forget(self, job_ids: list[str]) -> None:
        """An earlier job's id given to a new job: its spool files first, then its record (a
        crash in between finds the record again next tick and repeats both)."""
        for job_id in job_ids:
            log.warning(
                "job %s: a new submission with an earlier job's id (Slurm numbers from 1 again after a "
                "fresh start): the earlier job's record, plan file and status are dropped",
                job_id,
            )
            planfile.retire_job_files(self.config.spool_dir, job_id)
        self.store.forget_jobs(job_ids)

    def _account(
        self, managed: list[SlurmJob], records: dict[str, JobRecord], now: float
    ) -> dict[str, JobRecord]:
        """Attained GPU service (Tiresias' 2D-LAS needs it), progress and pending-since per job.

        Only what changed is written: running jobs, and jobs that just became pending.
        """
        updates: dict[str, tuple[float, float | None, float, float | None]] = {}
        finished: list[str] = []
        for sj in managed:
            record = records.get(sj.id)
            if record is None:
                continue
            if sj.state in RUNNING_STATES and sj.start_time is not None:
                since = max(record.accounted_until_s or sj.start_time, sj.start_time)
                gpus = sj.gpus_held_per_node * max(1, len(sj.nodes))
                progress = planfile.last_progress(self.config.spool_dir, sj.id, sj.user_id)
                updates[sj.id] = (
                    record.attained_gpu_s + gpus * max(0.0, now - since),
                    progress if progress is not None else record.progress,
                    now,
                    None,
                )
            elif sj.state == "PENDING" and record.pending_since_s is None:
                updates[sj.id] = (record.attained_gpu_s, record.progress, now, now)
            elif sj.state not in RUNNING_STATES | IN_FLUX_STATES | {"PENDING"} and record.finished_s is None:
                finished.append(sj.id)
        if updates:
            self.store.account(updates)
        if finished:
            self.store.mark_finished(finished, now)
        out = dict(records)
        for job_id, (attained, progress, until, pending_since) in updates.items():
            out[job_id] = replace(
                records[job_id],
                attained_gpu_s=attained,
                progress=progress,
                accounted_until_s=until,
                pending_since_s=pending_since,
            )
        return out


class Controller:
    """One tick at a time: observe, complete a half-applied round, plan, apply, record."""

    def __init__(
        self,
        client: SlurmClient,
        store: Store,
        config: ControllerConfig,
        scheduler: Scheduler,
        clock: Callable[[], float] = time.time,
        actuator: Actuator | None = None,
        refiner: Refiner | None = None,
        sleep: Callable[[float], None] = time.sleep,
        quotas: Mapping[str, float] | None = None,
        trigger: str = "round",
    ) -> None:
        if trigger not in {"round", "event"}:
            raise ValueError(f"trigger must be 'round' or 'event', got {trigger!r}")
        self.trigger = trigger  # "event": also plan at each arrival and completion (run_forever)
        self.store = store
        self.quotas = dict(quotas or {})  # tenants' GPU quotas ([[tenants]]), for the metrics file
        self.refiner = refiner  # None: plan with ``scheduler``'s profiles as they are
        self.config = config
        self.scheduler = scheduler
        self.clock = clock
        self.observer = Observer(client, store, config, clock)
        self.actuator = actuator or Actuator(client, store, config, clock=clock, sleep=sleep)
        self.sweeper = SpoolSweeper(config.spool_dir, config.spool_keep_s)
        self._round_in_progress: int | None = None
        self._pruned_at: float | None = None  # when this process last pruned the store's history

    def observe(self) -> Observation:
        return self.observer.observe()

    def tick(self, dry_run: bool = False) -> TickReport:
        started = time.perf_counter()
        now = self.clock()
        self._round_in_progress = None
        try:
            with round_lock(self.config.spool_dir, TICK_LOCK_WAIT_S):
                report = self._tick(now, dry_run)
                if not dry_run:
                    self._tidy(now)
        except RoundBusy as e:
            log.warning("tick at %.0f skipped: %s", now, e)
            report = TickReport(now, ok=False, error=str(e))
        except SlurmError as e:
            round_id = self._in_progress()
            if round_id is None:
                log.error("tick at %.0f: Slurm unavailable, no action taken: %s", now, e)
            else:
                log.error("round %d left half-applied (completed next tick): %s", round_id, e)
            report = TickReport(now, ok=False, round_id=round_id, error=str(e))
        except StoreError as e:  # a full disk, a damaged file: act on nothing the store cannot record
            log.error("tick at %.0f: %s", now, e)
            report = TickReport(now, ok=False, round_id=self._in_progress(), error=str(e))
        self._log_tick(now, report.ok, report.round_id, report.error, time.perf_counter() - started)
        self._write_metrics(report)
        release_free_memory()  # the tick's parse buffers, so a daemon's RSS tracks what it holds
        return report

    def _log_tick(self, *row: Any) -> None:
        try:
            self.store.log_tick(*row)
        except StoreError as e:
            log.error("tick not recorded: %s", e)

    def _in_progress(self) -> int | None:
        """The round being applied when the tick failed (set by :meth:`_tick`)."""
        return self._round_in_progress

    def _tick(self, now: float, dry_run: bool) -> TickReport:
        # Jobs released last tick and not started yet would be planned as pending again.
        self.actuator.settle()
        obs = self.observe()
        crash_point("tick.observed")
        completed = None
        unfinished = self.store.unfinished_round()
        if unfinished is not None and not dry_run:
            # A crash left this round half-applied: finish it against what Slurm shows now,
            # then plan afresh from the state it leads to.
            log.warning("completing round %d, left half-applied", unfinished.round_id)
            self._round_in_progress = unfinished.round_id
            if self.actuator.resume_round(unfinished.round_id, unfinished.time_s):
                obs = self.observe()
            actions = diff(obs, _assignments(unfinished.plan), unfinished.round_id)
            applied = self.actuator.settle_leftovers(obs, actions, unfinished.round_id)
            result = self.actuator.apply(obs, actions, unfinished.round_id)
            crash_point("round.applied")
            counts = metrics.round_counts(obs, actions, result.done, None)
            self.store.finish_round(unfinished.round_id, applied + result.count, counts=counts)
            crash_point("round.finished")
            completed = unfinished.round_id
            # As before any round: the jobs just released must not be planned as pending again.
            self.actuator.settle()
            obs = self.observe()
        report = TickReport(now, ok=True, completed_round=completed, jobs=len(obs.managed))
        report.cluster = metrics.cluster_state(obs, [], ())
        if obs.running and not obs.nodes:
            report.ok = False
            report.error = "no usable node in the managed partitions; refusing to stop running jobs"
            log.error(report.error)
            return report
        plan = plan_round(obs.snapshot, self._scheduler_for(obs), clock=time.perf_counter)
        document = round_plan_to_json(plan)
        report.decision_time_s = plan.decision_time_s
        report.round_id = self.store.begin_round(now, document, dry_run=dry_run)
        crash_point("round.begun")
        self._round_in_progress = None if dry_run else report.round_id
        actions = diff(obs, _managed_assignments(plan.assignments), report.round_id)
        report.actions = describe(actions)
        if dry_run:
            return report
        self.store.set_policy_state(
            {
                j: s
                for j, s in plan.policy_state.items()
                if not j.startswith(OUTSIDE_PREFIX) and j in obs.managed
            }
        )
        crash_point("round.policy_state")
        report.result = self.actuator.apply(obs, actions, report.round_id)
        crash_point("round.applied")
        report.cluster = metrics.cluster_state(obs, actions, report.result.done)
        counts = metrics.round_counts(obs, actions, report.result.done, plan.decision_time_s)
        self.store.finish_round(report.round_id, report.result.count, counts=counts)
        crash_point("round.finished")
        _log_actions(report.round_id, actions)
        return report

    def _tidy(self, now: float) -> None:
        """Keep the spool from growing with every job and round: remove what ended jobs left
        (:mod:`.spoolsweep`), compact old round plans (:meth:`Store.compact_rounds`) and,
        once an hour, forget what ended more than ``history_days`` ago
        (:meth:`Store.prune_history`). None of them fails a tick."""
        if self.observer.listed_at is not None:
            try:
                listed = (sj.id for sj in self.observer.listed)  # read only when a sweep is due
                self.sweeper.maybe_sweep(listed, self.observer.listed_at)
            except OSError as e:
                log.warning("spool not swept: %s", e)
        try:
            self.store.compact_rounds(self.config.round_plans_kept)
        except StoreError as e:
            log.warning("old round plans not compacted: %s", e)
        days = self.config.history_days
        if days > 0 and (self._pruned_at is None or not 0 <= now - self._pruned_at < PRUNE_EVERY_S):
            try:
                pruned = self.store.prune_history(now - days * 86400.0)
            except StoreError as e:
                log.warning("history older than %g days not pruned: %s", days, e)
            else:
                self._pruned_at = now
                if any(astuple(pruned)):
                    log.info("state store: forgot what ended over %g days ago: %s", days, pruned)

    def _scheduler_for(self, obs: Observation) -> Scheduler:
        """The scheduler for this round: on profiles refined by what running jobs report
        (:mod:`.refine`), or as configured when refinement is off or fails."""
        if self.refiner is None:
            return self.scheduler
        try:
            return self.refiner.scheduler(obs)
        except Exception:  # refinement is an improvement, never a reason to skip a round
            log.exception("online refinement failed; planning with the profiles as configured")
            return self.scheduler

    def _write_metrics(self, report: TickReport) -> None:
        path = self.config.metrics_path()
        if path is None:
            return
        try:
            metrics.write(path, self.store, report, self.quotas)
        except (OSError, StoreError) as e:
            log.warning("metrics not written to %s: %s", path, e)

    # -- loop -------------------------------------------------------------------------

    def run_forever(
        self,
        sleep: Callable[[float], None] = time.sleep,
        ticks: int | None = None,
        *,
        before_tick: Callable[[float], None] | None = None,
        done: Callable[[], bool] | None = None,
    ) -> None:
        """Tick every ``round_s``; a tick that raises is logged and the loop goes on.

        ``ticks`` bounds the loop; ``before_tick(now)`` runs first in each round (``mosaic
        demo`` submits the trace's arrivals there) and ``done()`` after it ends the loop.
        An event-driven controller (``trigger="event"``) also ticks as soon as a job arrives
        in, or a running job leaves, the managed partitions (:meth:`_wait_for_round`).
        """
        count = 0
        while ticks is None or count < ticks:
            started = self.clock()
            if before_tick is not None:
                before_tick(started)
            try:
                self.tick()
            except Exception:  # the tick boundary: one bad tick must not end the controller
                log.exception("tick failed")
                self._log_tick(started, False, None, "unexpected error (see log)", 0.0)
            count += 1
            if (ticks is not None and count >= ticks) or (done is not None and done()):
                break
            self._wait_for_round(started, sleep)

    def _wait_for_round(self, started: float, sleep: Callable[[float], None]) -> list[str]:
        """Wait until ``round_s`` after ``started``; event-driven, only until Slurm lists an
        arrival or a completion (:func:`plan_events`) against the last tick's listing, checked
        every ``event_poll_s`` (``[controller]``). Returns the events (empty: the round's time came)."""
        remaining = self.config.round_s - (self.clock() - started)
        if self.trigger != "event":
            sleep(max(0.0, remaining))
            return []
        baseline = list(self.observer.listed)
        while remaining > 0:
            sleep(min(self.config.event_poll_s, remaining))
            try:
                listed = self.observer.client.jobs()
            except SlurmError as e:  # the next tick reports it; wait for the round
                log.debug("event poll: %s", e)
            else:
                events = plan_events(baseline, listed, self.config.partitions)
                if events:
                    log.info("planning now (event-driven): %s", "; ".join(events))
                    return events
            remaining = self.config.round_s - (self.clock() - started)
        return []


def plan_events(
    before: Sequence[SlurmJob], after: Sequence[SlurmJob], partitions: Collection[str]
) -> list[str]:
    """What an event-driven scheduler plans at, between two listings of Slurm's jobs (pure):
    a GPU job new in the managed partitions (an arrival), and a job running there before
    that has ended or is gone (a completion; one still completing is not yet: its GPUs are
    not free). A job the round stopped is pending again, not ended."""
    parts = set(partitions)
    was = {sj.id: sj for sj in before if sj.partition in parts}
    events = []
    for sj in after:
        if sj.partition not in parts:
            continue
        old = was.pop(sj.id, None)
        if old is None:
            if (sj.state == "PENDING" or sj.state in RUNNING_STATES) and job_gpus(sj) > 0:
                events.append(f"job {sj.id} arrived")
        elif old.state in RUNNING_STATES and sj.state not in RUNNING_STATES | IN_FLUX_STATES | {"PENDING"}:
            events.append(f"job {sj.id} ended ({sj.state.lower()})")
    events += [f"job {job_id} ended" for job_id, sj in was.items() if sj.state in RUNNING_STATES]
    return events


def _assignments(plan: Mapping[str, Any]) -> dict[str, Assignment]:
    raw = plan.get("assignments") or {}
    return {
        job_id: assignment_from_json(a, f"stored round plan: assignments.{job_id}")
        for job_id, a in raw.items()
        if not job_id.startswith(OUTSIDE_PREFIX)
    }


def _managed_assignments(assignments: Mapping[str, Assignment]) -> dict[str, Assignment]:
    return {j: a for j, a in assignments.items() if not j.startswith(OUTSIDE_PREFIX)}


def _log_actions(round_id: int, actions: list[Action]) -> None:
    for a in actions:
        log.info("round %d: %s job %s (%s)", round_id, a.kind.value, a.job_id, a.reason)
