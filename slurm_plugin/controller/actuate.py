"""Apply a round's actions to Slurm, idempotently (the imperative half; the pure diff that
produces them is :mod:`.rounddiff`).

:class:`Actuator` applies them (recipes measured on Slurm 22.05): a stop signals the checkpoint to
every process of the job (``scancel --signal=USR1 --full``), waits up to the grace for the
job's checkpoint marker (or its exit), then ``requeuehold``; a start checks feasibility
first (an impossible request would sit in ``BadConstraints`` forever), updates
``Gres``/``NumCPUs``/``MinMemoryNode``/``ReqNodeList`` with ``StartTime=now`` (skipping
the ``cred_expire`` wait, yet never releasing a job in the second it stopped in:
:data:`CREDENTIAL_MARGIN_S`), writes the plan file and releases. Each action has a request
id (``r<round>-<kind>-<job>``) in the action log; each step first checks the job's
current state, so re-applying a half-applied round only does what is left.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from planner.core.errors import MosaicError
from planner.core.model import Assignment
from planner.relaunch import mem_mb_per_node
from slurm_plugin import planfile
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.faults import crash_point
from slurm_plugin.controller.layout import TaskLayout, layout_problem
from slurm_plugin.controller.observe import IN_FLUX_STATES, Observation
from slurm_plugin.controller.rounddiff import (
    Action,
    Kind,
    infeasible,
    node_shards,
    planned_gpu_type,
    retyped_features,
    shard_infeasible,
    start_fields,
    wanted_shards,
)
from slurm_plugin.slurm.backend import SlurmClient
from slurm_plugin.slurm.parse import SlurmJob
from slurm_plugin.slurm.runner import SlurmError
from slurm_plugin.store import ALREADY_RUNNING, Store

log = logging.getLogger(__name__)

# slurmd revokes a job's credential when its run ends and refuses every credential of that
# job created in the same second or earlier (Slurm's cred.c compares whole seconds,
# ``ctime <= revoked``): the relaunch is then killed at once and the job ends FAILED
# ("Killing non-startable batch JobId=J: Job credential revoked"). Slurm's own requeue waits
# out ``cred_expire``; ``StartTime=now`` skips that wait. Both times are on slurmctld's
# clock (the revoke time comes with its terminate request, the credential's with the
# launch), which this host's clock may be seconds off: so a requeued job is released only
# once a whole second plus this margin has passed, on this host's own clock, since a moment
# known to follow the revocation: when this actuator saw the job leave its nodes, or first
# saw it pending after that requeue (the requeue's SubmitTime is only compared with itself).
CREDENTIAL_MARGIN_S = 0.25

# Slurm starts a released job at its next scheduling pass (0.2-0.9 s with the scheduler
# settings of ``etc/slurm.conf.mosaic``). Until it does, the job reads as pending and not held, and a round
# planned meanwhile would plan it as pending again, its GPUs as free: :meth:`Actuator.settle`
# waits up to this long for the jobs the last apply released, before the next observation.
START_SETTLE_S = 3.0


# Pending reasons that mean Slurm will never run the job as it is now (slurm.h's
# ``job_state_reason``); any other reason (Resources, Priority, ReqNodeNotAvail while a
# stopped job leaves its nodes, BeginTime) clears by itself.
NEVER_RUNNABLE = frozenset(
    {
        "BadConstraints",
        "PartitionConfig",
        "PartitionNodeLimit",
        "PartitionTimeLimit",
        "InvalidAccount",
        "InvalidQOS",
        "QOSMaxGRESPerJob",
    }
)


def never_runnable(reason: str) -> bool:
    """Is ``reason`` (``squeue``'s state reason) one Slurm never clears by itself?"""
    return reason.split(",", 1)[0] in NEVER_RUNNABLE


def credential_wait_s(ended_at: float, now: float) -> float:
    """How long to wait before releasing a job seen ended at ``ended_at`` (both on this host's clock)."""
    return max(0.0, ended_at + 1 + CREDENTIAL_MARGIN_S - now)


@dataclass
class ApplyResult:
    done: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.done)


class Actuator:
    """Applies actions through a :class:`SlurmClient`; ``clock``/``sleep`` injectable for tests."""

    def __init__(
        self,
        client: SlurmClient,
        store: Store,
        config: ControllerConfig,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.store = store
        self.config = config
        self.clock = clock
        self.sleep = sleep
        # When each job stopped by this actuator was seen to have left its nodes.
        self._stopped_at: dict[str, float] = {}
        # When this actuator first saw each requeue (job, SubmitTime) of a pending job.
        self._requeue_seen: dict[tuple[str, float], float] = {}
        # The jobs the last apply released, until Slurm is seen to have started them.
        self._released: set[str] = set()
        # Starts Slurm refused (never runnable), by job: the update's fields and the reason.
        self._refused: dict[str, tuple[tuple[tuple[str, str], ...], str]] = {}
        # Slurm refused our AdminComment (an Operator may not set it): audit in the store only.
        self._no_admin_comment = False

    def apply(self, obs: Observation, actions: Sequence[Action], round_id: int) -> ApplyResult:
        result = ApplyResult()
        now = self.clock()
        self._stopped_at = {j: t for j, t in self._stopped_at.items() if t > now - 10.0}
        requeued = {(j, sj.submit_time) for j, sj in obs.managed.items() if sj.requeues and sj.is_pending}
        self._requeue_seen = {k: self._requeue_seen.get(k, now) for k in requeued}
        # A refused job that left Slurm (cancelled, purged) never starts again: forget it.
        self._refused = {j: why for j, why in self._refused.items() if j in obs.managed}
        for a in actions:
            self.store.log_action(a.request_id, round_id, a.job_id, a.kind, "planned", a.reason, self.clock())
        crash_point("actions.logged")
        stops = [a for a in actions if a.kind is Kind.STOP]
        starts = [a for a in actions if a.kind is Kind.START]
        holds = [a for a in actions if a.kind is Kind.HOLD]
        blocked = self._rate_limited(stops, round_id, result)
        stops = [a for a in stops if a.job_id not in blocked]
        starts = [a for a in starts if a.job_id not in blocked]
        self._stop(obs, stops, round_id, result)
        self._start(obs, starts, round_id, result)
        self._hold(holds, round_id, result)
        return result

    # -- completing a round a dead controller left half-applied ------------------------

    def resume_round(self, round_id: int, since: float) -> bool:
        """Bring Slurm to where the dead controller's round ``round_id`` (begun at ``since``)
        can be completed by a diff; ``True`` when Slurm changed (observe again).

        * Jobs of the round's unfinished actions still in flux (``COMPLETING``, ``REQUEUED``:
          the requeuehold was sent, their run is ending) are waited for, at most
          ``stop_timeout_s``: an observation skips them, so the diff would not start them.
        * A job the round was stopping that exited after writing its checkpoint marker for
          the round's signal (as ``mosaic-run`` does), before the dead controller's
          requeuehold, is requeued held now: else it would stay ``COMPLETED``, its training
          unfinished, and be lost. One that ended without such a marker finished on its own
          and is left alone, as :meth:`_stop` does.
        """
        rows = [row for row in self.store.actions(round_id) if row[4] == "planned"]
        planned = {row[2] for row in rows}
        stopping = {row[2] for row in rows if row[3] == Kind.STOP}
        if not planned:
            return False
        states = self._states()
        in_flux = [j for j in planned if j in states and states[j].state in IN_FLUX_STATES]
        if in_flux:
            log.info("round %d: waiting for jobs %s to leave their nodes", round_id, sorted(in_flux))
            waiting, deadline = in_flux, self.clock() + self.config.stop_timeout_s
            while waiting and self.clock() < deadline:
                self.sleep(0.1)
                states = self._states()
                waiting = [j for j in waiting if j in states and states[j].state in IN_FLUX_STATES]
            seen = self.clock()
            for job_id in in_flux:
                self._stopped_at[job_id] = seen  # its run ended: no release in that second
        ended = [
            j
            for j in sorted(stopping)
            if j in states
            and not states[j].is_pending
            and not states[j].holds_resources
            and states[j].state not in IN_FLUX_STATES
            and self._checkpointed_since(j, since, states[j].user_id)
        ]
        for job_id in ended:
            try:
                self.client.requeue_hold([job_id])
            except SlurmError as e:
                log.error(
                    "round %d: job %s checkpointed and ended; requeuehold failed: %s", round_id, job_id, e
                )
                continue
            log.warning(
                "round %d: job %s exited after its checkpoint before the requeuehold; requeued held",
                round_id,
                job_id,
            )
            self._stopped_at[job_id] = self.clock()
        return bool(in_flux or ended)

    def settle_leftovers(self, obs: Observation, actions: Sequence[Action], round_id: int) -> int:
        """Record the actions the dead controller logged 'planned' in ``round_id`` that the
        diff of the round against Slurm now (``actions``) no longer needs; returns how many
        are done.

        The diff asks for no action on a job Slurm shows as the round wants it: the dead
        controller applied it (a stop whose job is requeued, a start whose job runs as
        planned, a hold whose job is held); such an action is 'done'. A job no longer
        pending or running (it ended) has it 'skipped'. A stopped job's AdminComment gets
        its stop line, as :meth:`_stop` writes it, so that it names the store's last action.
        """
        again = {a.request_id for a in actions}
        done = 0
        for request, _, job_id, kind, status, detail, _ in list(self.store.actions(round_id)):
            if status != "planned" or request in again:
                continue
            sj = obs.managed.get(job_id)
            if sj is not None:
                if kind == Kind.STOP and sj.held:
                    self._audit(Action(Kind.STOP, job_id, request, detail), round_id, f"{detail}: stopped")
                outcome, why = "done", f"{detail} (applied before a controller restart)"
                done += 1
            else:
                outcome, why = "skipped", f"{detail} (the job ended before the round was completed)"
            self.store.log_action(request, round_id, job_id, kind, outcome, why, self.clock())
        return done

    def settle(self, timeout_s: float = START_SETTLE_S) -> list[str]:
        """Wait until Slurm started (or dropped) the jobs the last apply released, at most
        ``timeout_s``; the ones still waiting (pending, not held) are returned and logged."""
        waiting = set(self._released)
        self._released = set()
        deadline = self.clock() + timeout_s
        while waiting:
            states = self._states()
            waiting = {j for j in waiting if j in states and states[j].is_pending and not states[j].held}
            if not waiting or self.clock() >= deadline:
                break
            self.sleep(0.1)
        if waiting:
            log.info("released jobs %s not started by Slurm within %g s", sorted(waiting), timeout_s)
        return sorted(waiting)

    # -- bookkeeping ------------------------------------------------------------------

    def _done(self, a: Action, round_id: int, result: ApplyResult, detail: str = "") -> None:
        self.store.log_action(
            a.request_id, round_id, a.job_id, a.kind, "done", detail or a.reason, self.clock()
        )
        result.done.append(a.request_id)

    def _already_running(self, a: Action, round_id: int, result: ApplyResult) -> None:
        """A start Slurm made already, as planned (the job was released earlier, e.g. by a
        controller that died before it saw the job start): done, and, as for every applied
        start, the AdminComment names it."""
        detail = f"{a.reason} {ALREADY_RUNNING}"
        self._audit(a, round_id, detail)
        self._done(a, round_id, result, detail)

    def _skip(self, a: Action, round_id: int, result: ApplyResult, why: str, failed: bool = False) -> None:
        status = "failed" if failed else "skipped"
        self.store.log_action(a.request_id, round_id, a.job_id, a.kind, status, why, self.clock())
        (result.failed if failed else result.skipped).append((a.request_id, why))
        log.warning("round %d: %s job %s %s: %s", round_id, a.kind, a.job_id, status, why)

    def _rate_limited(self, stops: Sequence[Action], round_id: int, result: ApplyResult) -> set[str]:
        """Jobs stopped ``max_restarts_per_hour`` times in the last hour keep running.

        What the limit counts is this controller's stops of the job that Slurm applied
        (:meth:`Store.stops_since`: preemptions and relaunches alike, the setting's and the
        message's "restarts"), not Slurm's requeue count (:attr:`SlurmJob.requeues`) nor
        the simulator's restarts."""
        since = self.clock() - 3600
        max_stops = self.config.max_restarts_per_hour
        blocked = set()
        for a in stops:
            if self.store.stops_since(a.job_id, since) >= max_stops:
                blocked.add(a.job_id)
                why = f"rate limit: {max_stops} restarts in the last hour"
                self._skip(a, round_id, result, why)
        return blocked

    def _states(self) -> dict[str, SlurmJob]:
        return {j.id: j for j in self.client.jobs()}

    # -- stop -------------------------------------------------------------------------

    def _stop(self, obs: Observation, stops: Sequence[Action], round_id: int, result: ApplyResult) -> None:
        if not stops:
            return
        signalled_at = self.clock()
        running: list[Action] = []
        owners: dict[str, int | None] = {}  # whose status directory holds each job's marker
        states = self._states()
        for a in stops:
            sj = states.get(a.job_id)
            if sj is None or sj.state != "RUNNING":
                # Already stopped (a re-applied round) or gone: nothing to do.
                self._done(a, round_id, result, f"{a.reason} (already {sj.state if sj else 'gone'})")
                continue
            try:
                self.client.signal(a.job_id, self.config.checkpoint_signal)
            except SlurmError as e:
                if access_denied(e):  # nor may we requeue it: it keeps running, untouched
                    self._skip(a, round_id, result, f"checkpoint signal refused: {explain(e)}", failed=True)
                    continue
                log.warning("job %s: checkpoint signal failed: %s", a.job_id, e)
            crash_point("stop.signalled")
            running.append(a)
            owners[a.job_id] = sj.user_id
        self._wait_checkpoints(owners, signalled_at)
        crash_point("stop.checkpointed")
        states = self._states()
        # A job may keep running after its checkpoint, or exit once it is saved (mosaic-run
        # does). Slurm requeues a finished batch job too, so one that exited *after writing
        # its marker for this signal* is requeued like a running one; one that exited without
        # it finished on its own and is left alone.
        to_requeue = [
            a
            for a in running
            if a.job_id in states
            and (
                states[a.job_id].holds_resources
                or self._checkpointed_since(a.job_id, signalled_at, owners[a.job_id])
            )
            and not states[a.job_id].is_pending
        ]
        ids = [a.job_id for a in to_requeue]
        if ids:
            try:
                self.client.requeue_hold(ids)
            except SlurmError:
                for a in to_requeue:  # one bad id fails the whole call: retry one by one
                    try:
                        self.client.requeue_hold([a.job_id])
                    except SlurmError as e:
                        self._skip(a, round_id, result, f"requeuehold failed: {explain(e)}", failed=True)
            crash_point("stop.requeue_held")
        self._wait_pending([a.job_id for a in running])
        crash_point("stop.left_nodes")
        failed = {rid for rid, _ in result.failed}
        for a in running:
            if a.request_id not in failed:
                self._audit(a, round_id, f"{a.reason}: stopped")
                crash_point("stop.audited")
                self._done(a, round_id, result)
                crash_point("stop.done")

    def _checkpointed_since(self, job_id: str, since: float, owner_uid: int | None) -> bool:
        """Did the job write a checkpoint marker at ``since`` or later? Only a marker in a
        status directory its user owns counts (``owner_uid``; ``None``: not checked)."""
        marked = planfile.checkpoint_time(self.config.spool_dir, job_id, owner_uid)
        return marked is not None and marked >= since - 1.0

    def _wait_checkpoints(self, owners: Mapping[str, int | None], since: float) -> None:
        """Until every job (by id, with its user's uid) wrote a checkpoint marker newer than
        ``since``, exited, or the grace ran out."""
        deadline = self.clock() + self.config.checkpoint_grace_s
        waiting = set(owners)
        while waiting:
            for job_id in list(waiting):
                if self._checkpointed_since(job_id, since, owners[job_id]):
                    waiting.discard(job_id)
            if not waiting or self.clock() >= deadline:
                break
            states = self._states()
            waiting = {j for j in waiting if j in states and states[j].state == "RUNNING"}
            if waiting:
                self.sleep(0.2)
        if waiting:
            log.info(
                "jobs %s did not checkpoint within %g s", sorted(waiting), self.config.checkpoint_grace_s
            )

    def _wait_pending(self, job_ids: list[str]) -> None:
        """Until the stopped jobs released their nodes (not RUNNING/COMPLETING), or the timeout."""
        deadline = self.clock() + self.config.stop_timeout_s
        while job_ids and self.clock() < deadline:
            states = self._states()
            if all(j not in states or not states[j].holds_resources for j in job_ids):
                break
            self.sleep(0.1)
        else:
            if job_ids:
                log.warning("jobs %s still hold resources after %g s", job_ids, self.config.stop_timeout_s)
        seen = self.clock()
        for job_id in job_ids:
            self._stopped_at[job_id] = seen

    def _wait_for_a_fresh_credential(self, sj: SlurmJob) -> None:
        """Sleep until a relaunch of ``sj`` gets a credential slurmd accepts (CREDENTIAL_MARGIN_S)."""
        ends = [self._stopped_at.pop(sj.id)] if sj.id in self._stopped_at else []
        if sj.requeues > 0:
            ends.append(self._requeue_seen.setdefault((sj.id, sj.submit_time), self.clock()))
        if not ends:
            return  # never ran: no credential was revoked
        wait = credential_wait_s(max(ends), self.clock())
        if wait > 0:
            self.sleep(wait)

    # -- start ------------------------------------------------------------------------

    def _start(self, obs: Observation, starts: Sequence[Action], round_id: int, result: ApplyResult) -> None:
        if not starts:
            return
        states = self._states()
        released: dict[str, tuple[Action, tuple[tuple[str, str], ...]]] = {}
        for a in starts:
            assert a.assignment is not None
            sj = states.get(a.job_id)
            if sj is None or sj.state not in {"PENDING", "COMPLETING"}:
                if sj is not None and sj.state == "RUNNING" and _runs_as(sj, a.assignment):
                    self._already_running(a, round_id, result)
                else:
                    self._skip(a, round_id, result, f"job is {sj.state if sj else 'gone'}, not pending")
                continue
            layout = obs.layouts.get(a.job_id) or TaskLayout()
            why = (
                infeasible(a.assignment, obs.nodes)
                or shard_infeasible(a.assignment, sj, obs.nodes)
                or layout_problem(a.assignment, layout)
            )
            if why is not None:
                self._skip(a, round_id, result, f"infeasible: {why}")
                continue
            shards = wanted_shards(
                a.assignment, node_shards(a.assignment, obs.nodes) if sj.shards_per_node else 0
            )
            fields = start_fields(a.assignment, self._audit_text(a, round_id), shards, layout)
            gpu_type = planned_gpu_type(obs, a.assignment)
            features = retyped_features(sj.features, gpu_type, self.config.gpu_types)
            if features is not None:
                fields["Features"] = features
            signature = tuple(sorted((k, v) for k, v in fields.items() if k != "AdminComment"))
            refused = self._refused.get(a.job_id)
            if refused is not None and refused[0] == signature:
                self._skip(a, round_id, result, f"Slurm refused this start before: {refused[1]}", failed=True)
                continue
            version = self.store.next_plan_version(a.job_id)
            try:
                planfile.write_plan(self.config.spool_dir, a.job_id, version, a.assignment)
                crash_point("start.plan_written")
                self._update_start(a.job_id, fields)
                crash_point("start.updated")
                self._wait_for_a_fresh_credential(sj)
                # One release per job: a crash between two starts leaves each job either
                # started (and logged) or untouched, so re-applying the round is exact.
                self.client.release([a.job_id])
                crash_point("start.released")
            except (MosaicError, OSError) as e:
                # Released earlier, the job may have been started by Slurm between the look
                # above and the update ("no longer pending"): as planned, that start is done.
                now = self._states().get(a.job_id) if isinstance(e, SlurmError) else None
                if now is not None and now.state == "RUNNING" and _runs_as(now, a.assignment):
                    self._already_running(a, round_id, result)
                else:
                    self._skip(a, round_id, result, f"start failed: {explain(e)}", failed=True)
                continue
            released[a.job_id] = (a, signature)
        self._verify_starts(released, round_id, result)

    def _verify_starts(
        self,
        released: Mapping[str, tuple[Action, tuple[tuple[str, str], ...]]],
        round_id: int,
        result: ApplyResult,
    ) -> None:
        """Wait (up to :data:`START_SETTLE_S`) until Slurm runs each released job.

        A job Slurm will never run as updated (:data:`NEVER_RUNNABLE`, e.g. ``BadConstraints``)
        is held again, its AdminComment says why, and the start is reported failed with
        Slurm's reason; the identical start is not retried (:attr:`_refused`). A job still
        waiting for its nodes (``Resources``, ``ReqNodeNotAvail`` while a stopped job leaves
        them) stays released: Slurm starts it when they are free, and the next tick waits for
        it first (:meth:`settle`).
        """
        waiting = dict(released)
        deadline = self.clock() + START_SETTLE_S
        states: dict[str, SlurmJob] = {}
        while waiting:
            states = self._states()
            for job_id in list(waiting):
                sj = states.get(job_id)
                if sj is None or not sj.is_pending or never_runnable(sj.reason):
                    self._settle_start(sj, *waiting.pop(job_id), round_id, result)
                    crash_point("start.done")
            if not waiting or self.clock() >= deadline:
                break
            self.sleep(0.1)
        for job_id, (a, _) in waiting.items():
            self._released.add(job_id)
            sj = states.get(job_id)
            reason = sj.reason if sj is not None else "gone"
            self._done(a, round_id, result, f"{a.reason} (released; Slurm: pending, {reason})")
            crash_point("start.done")

    def _settle_start(
        self,
        sj: SlurmJob | None,
        a: Action,
        signature: tuple[tuple[str, str], ...],
        round_id: int,
        result: ApplyResult,
    ) -> None:
        if sj is None or not sj.is_pending:
            self._refused.pop(a.job_id, None)
            self._done(a, round_id, result, f"{a.reason} ({sj.state.lower() if sj else 'gone'})")
            return
        why = f"Slurm will not run the job as updated: Reason={sj.reason}"
        try:
            self.client.hold([a.job_id])
        except SlurmError as e:
            why += f" (and holding it again failed: {explain(e)})"
        else:
            self._audit(a, round_id, f"refused: {why}")
        self._refused[a.job_id] = (signature, why)
        self._skip(a, round_id, result, why, failed=True)

    # -- hold -------------------------------------------------------------------------

    def _hold(self, holds: Sequence[Action], round_id: int, result: ApplyResult) -> None:
        for a in holds:
            try:
                self.client.hold([a.job_id])
            except SlurmError as e:
                self._skip(a, round_id, result, f"hold failed: {e}", failed=True)
                continue
            crash_point("hold.held")
            self._done(a, round_id, result)

    # -- audit ------------------------------------------------------------------------

    def _audit_text(self, a: Action, round_id: int) -> str:
        """One line per decision, in the job's AdminComment (visible to admins in scontrol/sacct)."""
        x = a.assignment
        what = a.reason
        if x is not None:
            where = "+".join(f"{n}:{g}" for n, g in x.per_node)
            what += f" {where}gpu {x.cpus}cpu {mem_mb_per_node(x)}MB/node"
        return f"mosaic {a.request_id} {what}"

    def _audit(self, a: Action, round_id: int, text: str) -> None:
        if self._no_admin_comment:
            return
        try:
            self.client.update([a.job_id], {"AdminComment": f"mosaic {a.request_id} {text}"})
        except SlurmError as e:
            log.debug("job %s: audit comment not written: %s", a.job_id, e)

    def _update_start(self, job_id: str, fields: Mapping[str, str]) -> None:
        """The start's ``scontrol update``. Slurm 22.05 lets only an Administrator (or root,
        SlurmUser) set ``AdminComment``, and refuses an Operator's whole update that carries
        it: then the update goes again without it, once and for all (warned once). The audit
        line stays in the store's action log; ``mosaic report`` then judges each run by the
        nodes of the run before."""
        if self._no_admin_comment:
            fields = {k: v for k, v in fields.items() if k != "AdminComment"}
        try:
            self.client.update([job_id], fields)
            return
        except SlurmError as e:
            if "AdminComment" not in fields or not access_denied(e):
                raise
            first = e
        fields = {k: v for k, v in fields.items() if k != "AdminComment"}
        self.client.update([job_id], fields)  # refused too: not an Operator (raised, explained)
        self._no_admin_comment = True
        log.warning(
            "Slurm refused the controller's AdminComment (%s): it needs AdminLevel=Administrator; "
            "as an Operator the audit lines stay in the state store only",
            first,
        )


ACCESS_DENIED = "Access/permission denied"


def access_denied(e: BaseException) -> bool:
    """Did Slurm refuse the command for want of privilege?"""
    return ACCESS_DENIED in str(e) or "Invalid user id" in str(e)


def explain(e: BaseException) -> str:
    """The error, and for a privilege Slurm refused, what the controller's user needs."""
    if isinstance(e, SlurmError) and access_denied(e):
        return (
            f"{e} (the controller's user needs Slurm operator rights over other users' jobs: "
            "sacctmgr modify user <name> set AdminLevel=Operator)"
        )
    return str(e)


def _runs_as(sj: SlurmJob, a: Assignment) -> bool:
    per_node = dict(a.per_node)
    return (
        set(sj.nodes) == set(per_node)
        and all(sj.gpus_held_per_node == g for g in per_node.values())
        and sj.cpus == a.cpus
        and (sj.memory_mb_per_node() or 0) == mem_mb_per_node(a)
    )
