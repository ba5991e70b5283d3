"""Turn a RoundPlan into Slurm actions and apply them idempotently.

:func:`diff` (pure) compares what Slurm runs with what the plan wants:

* a running managed job absent from the plan is **stopped** (preempted);
* a running job whose nodes, GPU count per node, CPUs, memory or execution plan differ
  is **stopped and started** again (a migration, resize or reshape is a relaunch:
  Slurm refuses to change a running job's resources); which change is which is
  :func:`planner.relaunch.classify`, the simulator's and ``mosaic report``'s definition too;
* a pending job in the plan is **started**; a pending job outside it that Slurm could
  start on its own is **held**.

Slurm chooses GPU indices inside a node, so a plan that only renumbers a job's GPUs on
the same node is not a relaunch; the planner reads the real indices back next round.

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
import math
import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from planner import relaunch
from planner.errors import MosaicError
from planner.model import Assignment
from planner.relaunch import Change, Shape, classify, mem_mb_per_node
from slurm_plugin import planfile
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.layout import TaskLayout, expressible_cpus, layout_fields, layout_problem
from slurm_plugin.controller.observe import Observation
from slurm_plugin.slurm.backend import SlurmClient
from slurm_plugin.slurm.parse import SlurmJob, SlurmNode
from slurm_plugin.slurm.runner import SlurmError
from slurm_plugin.store import Store

log = logging.getLogger(__name__)

# slurmd revokes a job's credential when its run ends and refuses every credential of that
# job created in the same second or earlier (Slurm's cred.c compares whole seconds,
# ``ctime <= revoked``): the relaunch is then killed at once and the job ends FAILED
# ("Killing non-startable batch JobId=J: Job credential revoked"). Slurm's own requeue waits
# out ``cred_expire``; ``StartTime=now`` skips that wait, so a requeued job is released no
# earlier than this margin into the second after its run ended: after the later of its
# requeue (Slurm resets a requeued job's SubmitTime to the requeue time, on slurmctld's
# clock) and the moment this actuator saw it leave its nodes. The margin covers a small
# clock skew between this host and slurmctld.
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
    """How long to wait before releasing a job whose last run ended at ``ended_at`` (wall clock)."""
    return max(0.0, math.floor(ended_at) + 1 + CREDENTIAL_MARGIN_S - now)


class Kind(StrEnum):
    STOP = "stop"
    START = "start"
    HOLD = "hold"


@dataclass(frozen=True)
class Action:
    kind: Kind
    job_id: str
    request_id: str
    reason: str
    assignment: Assignment | None = None


def request_id(round_id: int, kind: Kind, job_id: str) -> str:
    return f"r{round_id}-{kind.value}-{job_id}"


def slurm_shape(a: Assignment, layout: TaskLayout | None = None) -> Shape:
    """What Slurm can tell apart: GPUs per node, total CPUs, memory per node (MB).

    With the job's ``layout``, the CPUs are those Slurm would really allocate for ``a`` (a
    whole number per task), so a plan whose CPUs do not divide into the tasks is not
    relaunched every round for a difference Slurm cannot express.
    """
    return relaunch.slurm_shape(as_allocated(a, layout))


def as_allocated(a: Assignment, layout: TaskLayout | None) -> Assignment:
    """``a`` with the CPUs Slurm would allocate for it under the job's ``layout``."""
    if layout is None:
        return a
    cpus = expressible_cpus(a, layout)
    return a if cpus == a.cpus else replace(a, cpus=cpus)


def diff(obs: Observation, assignments: Mapping[str, Assignment], round_id: int) -> list[Action]:
    """The actions that take Slurm from ``obs`` to ``assignments`` (stops first, then starts).

    Whether a running job is relaunched, and why, is :func:`planner.relaunch.classify` of
    what it runs as and the target as Slurm would run it: the definition the simulator and
    ``mosaic report`` count restarts and migrations with.
    """
    stops: list[Action] = []
    starts: list[Action] = []
    holds: list[Action] = []
    by_id = {j.id: j for j in obs.snapshot.jobs}
    for job_id, sj in obs.managed.items():
        job = by_id.get(job_id)
        target = assignments.get(job_id)
        current = job.assignment if job is not None else None
        if current is not None:
            if target is None:
                why = Change.PREEMPTED.value
                stops.append(Action(Kind.STOP, job_id, request_id(round_id, Kind.STOP, job_id), why))
                continue
            change = classify(current, as_allocated(target, obs.layouts.get(job_id)))
            if change is Change.NONE and sj.shards_per_node > wanted_shards(target, sj.shards_per_node):
                # Slurm cannot take shards from a running job: one alone on its GPU (all the
                # GPU's shards) is relaunched with one shard to share it. The simulator has
                # no shards; its count agrees wherever sharing also halves CPUs/memory.
                change = Change.SHARED
            if change.relaunch:
                why = change.value
                stops.append(Action(Kind.STOP, job_id, request_id(round_id, Kind.STOP, job_id), why))
                starts.append(
                    Action(Kind.START, job_id, request_id(round_id, Kind.START, job_id), why, target)
                )
        elif sj.state == "PENDING":
            if target is not None:
                rid = request_id(round_id, Kind.START, job_id)
                starts.append(Action(Kind.START, job_id, rid, "placed", target))
            elif not sj.held:
                holds.append(Action(Kind.HOLD, job_id, request_id(round_id, Kind.HOLD, job_id), "waits"))
    return stops + starts + holds


def wanted_shards(a: Assignment, whole_gpu: int) -> int:
    """The ``gres/shard`` count per node a shard job gets for ``a`` (pure).

    On a shard cluster every job of a packing preset runs on shards (README, "Sharing
    GPUs on the live path"): alone on its GPU it holds all of them (``whole_gpu``, so
    Slurm can put nothing beside it), sharing it holds one, so two partners fill the GPU
    (SJF-BSBF §IV: at most two jobs per GPU). A job without shards (``whole_gpu`` 0)
    gets none.
    """
    if whole_gpu <= 0:
        return 0
    return 1 if a.shares_with else whole_gpu


def start_fields(
    a: Assignment, audit: str, shards: int = 0, layout: TaskLayout | None = None
) -> dict[str, str]:
    """``scontrol update`` fields that give a pending job exactly ``a`` (pure).

    ``Gres`` is per node, so a job spread over nodes must have the same GPU count on
    each (checked by :func:`infeasible`). ``MinMemoryNode`` takes integer MB only.
    ``shards`` > 0: the job was submitted with ``gres/shard`` and gets ``shard:<shards>``
    (one GPU per node; Slurm 22.05 refuses to turn a ``gpu`` request into shards or back).
    The tasks and CPUs per task follow the job's ``layout`` (:mod:`.layout`: Slurm leaves a
    job whose ``NumCPUs`` disagrees with its tasks in ``BadConstraints``); a job whose GPUs
    were asked per task or per job keeps its ``Gres`` (Slurm refuses to change it).
    """
    layout = layout or TaskLayout()
    counts = {g for _, g in a.per_node}
    (per_node,) = counts
    nodes = len(a.per_node)
    fields = {"NumNodes": f"{nodes}-{nodes}"}
    if layout.fixed_gpus is None:
        fields["Gres"] = f"shard:{shards}" if shards > 0 else f"gpu:{per_node}"
    fields.update(layout_fields(a, layout))
    fields.update(
        {
            "MinMemoryNode": str(mem_mb_per_node(a)),
            "ReqNodeList": ",".join(a.nodes),
            "StartTime": "now",
            "AdminComment": audit,
        }
    )
    return fields


def retyped_features(features: str, gpu_type: str | None, gpu_types: Collection[str]) -> str | None:
    """The job's constraint with its GPU-type feature replaced by ``gpu_type`` (pure).

    GPU types are node features (a pending job's typed GRES cannot be changed in Slurm
    22.05: the new request is merged with the old into ``BadConstraints``), so a job asked
    with ``-C a100`` and planned onto v100 nodes needs ``Features=v100``. ``None``: nothing
    to change (no GPU-type feature, or already the planned type). Other features are kept;
    an alternative of GPU types (``a100|v100``) becomes the planned one.
    """
    if not features or gpu_type is None:
        return None
    tokens = re.split(r"([&|,\[\]()])", features)
    named = [t for t in tokens if t.strip().lower() in gpu_types]
    if not named or {t.strip().lower() for t in named} == {gpu_type}:
        return None
    kept = [t for t in tokens if t.strip() and t.strip().lower() not in gpu_types and t not in "&|,[]()"]
    return "&".join([gpu_type, *kept])


def _gpu_type(obs: Observation, a: Assignment) -> str | None:
    types = {obs.snapshot.node(n).gpu_type for n in a.nodes if n in obs.snapshot.nodes_by_name}
    return types.pop() if len(types) == 1 else None


def infeasible(a: Assignment, nodes: Mapping[str, SlurmNode]) -> str | None:
    """Why Slurm could never run ``a`` (``None``: it can); checked before any update."""
    if len({g for _, g in a.per_node}) != 1:
        return f"uneven GPUs per node {dict(a.per_node)} cannot be expressed as per-node Gres"
    cpus_per_node = max(1, a.cpus // len(a.per_node))
    mem = mem_mb_per_node(a)
    for name, gpus in a.per_node:
        node = nodes.get(name)
        if node is None:
            return f"node {name} is not a usable node of the managed partitions"
        if gpus > node.gpus or cpus_per_node > node.cpus or mem > node.mem_mb:
            return (
                f"node {name} has {node.gpus} GPUs, {node.cpus} CPUs, {node.mem_mb} MB; "
                f"asked {gpus} GPUs, {cpus_per_node} CPUs, {mem} MB"
            )
    return None


def shard_infeasible(a: Assignment, sj: SlurmJob, nodes: Mapping[str, SlurmNode]) -> str | None:
    """Why Slurm could not run ``a`` as ``sj`` was submitted, where GPUs are shared (``None``: it can).

    Measured on Slurm 22.05 (the test cluster's ``shard``
    shape): ``scontrol update`` rejects ``Gres=shard:N`` on a job submitted with
    ``--gres=gpu`` ("Invalid generic resource specification") and ``Gres=gpu:N`` on one
    submitted with shards, while a shard count can change; ``shard:N`` lands on one GPU,
    and more shards than a GPU has never run.
    """
    if sj.shards_per_node == 0:
        if a.shares_with:
            return (
                f"job {sj.id} shares a GPU with {', '.join(a.shares_with)} but was submitted with "
                "--gres=gpu; Slurm cannot turn it into gres/shard: "
                "submit it with --gres=shard:<shards per GPU>"
            )
        return None
    for name, gpus in a.per_node:
        node = nodes.get(name)
        if node is not None and node.shards_per_gpu == 0:
            return f"job {sj.id} asks gres/shard but node {name} offers none (GresTypes=gpu,shard)"
        if gpus > 1:
            return (
                f"job {sj.id} runs on shards but is planned on {gpus} GPUs of {name}: "
                "Slurm puts all of a job's shards on a node on one GPU"
            )
    whole = max((n.shards_per_gpu for n in nodes.values()), default=0)
    if wanted_shards(a, whole) > min((nodes[n].shards_per_gpu for n in a.nodes if n in nodes), default=0):
        return f"job {sj.id}: shard:{wanted_shards(a, whole)} exceeds a GPU's shards on {', '.join(a.nodes)}"
    return None


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
        # The jobs the last apply released, until Slurm is seen to have started them.
        self._released: set[str] = set()
        # Starts Slurm refused (never runnable), by job: the update's fields and the reason.
        self._refused: dict[str, tuple[tuple[tuple[str, str], ...], str]] = {}

    def apply(self, obs: Observation, actions: Sequence[Action], round_id: int) -> ApplyResult:
        result = ApplyResult()
        now = self.clock()
        self._stopped_at = {j: t for j, t in self._stopped_at.items() if t > now - 10.0}
        for a in actions:
            self.store.log_action(a.request_id, round_id, a.job_id, a.kind, "planned", a.reason, self.clock())
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

    def _skip(self, a: Action, round_id: int, result: ApplyResult, why: str, failed: bool = False) -> None:
        status = "failed" if failed else "skipped"
        self.store.log_action(a.request_id, round_id, a.job_id, a.kind, status, why, self.clock())
        (result.failed if failed else result.skipped).append((a.request_id, why))
        log.warning("round %d: %s job %s %s: %s", round_id, a.kind, a.job_id, status, why)

    def _rate_limited(self, stops: Sequence[Action], round_id: int, result: ApplyResult) -> set[str]:
        """Jobs stopped ``max_restarts_per_hour`` times in the last hour keep running."""
        since = self.clock() - 3600
        blocked = set()
        for a in stops:
            if self.store.stops_since(a.job_id, since) >= self.config.max_restarts_per_hour:
                blocked.add(a.job_id)
                why = f"rate limit: {self.config.max_restarts_per_hour} restarts in the last hour"
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
                log.warning("job %s: checkpoint signal failed: %s", a.job_id, e)
            running.append(a)
        self._wait_checkpoints([a.job_id for a in running], signalled_at)
        states = self._states()
        # A job may keep running after its checkpoint, or exit once it is saved (mosaic-run
        # does). Slurm requeues a finished batch job too, so one that exited *after writing
        # its marker for this signal* is requeued like a running one; one that exited without
        # it finished on its own and is left alone.
        to_requeue = [
            a
            for a in running
            if a.job_id in states
            and (states[a.job_id].holds_resources or self._checkpointed_since(a.job_id, signalled_at))
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
                        self._skip(a, round_id, result, f"requeuehold failed: {e}", failed=True)
        self._wait_pending([a.job_id for a in running])
        failed = {rid for rid, _ in result.failed}
        for a in running:
            if a.request_id not in failed:
                self._audit(a, round_id, f"{a.reason}: stopped")
                self._done(a, round_id, result)

    def _checkpointed_since(self, job_id: str, since: float) -> bool:
        marked = planfile.checkpoint_time(self.config.spool_dir, job_id)
        return marked is not None and marked >= since - 1.0

    def _wait_checkpoints(self, job_ids: list[str], since: float) -> None:
        """Until every job wrote a checkpoint marker newer than ``since``, exited, or the grace ran out."""
        deadline = self.clock() + self.config.checkpoint_grace_s
        waiting = set(job_ids)
        while waiting:
            for job_id in list(waiting):
                if self._checkpointed_since(job_id, since):
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
        if sj.restarts > 0:
            ends.append(sj.submit_time)  # the requeue time
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
                    self._done(a, round_id, result, f"{a.reason} (already running as planned)")
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
            shards = wanted_shards(a.assignment, obs.shards_per_gpu if sj.shards_per_node else 0)
            fields = start_fields(a.assignment, self._audit_text(a, round_id), shards, layout)
            features = retyped_features(sj.features, _gpu_type(obs, a.assignment), self.config.gpu_types)
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
                self.client.update([a.job_id], fields)
                self._wait_for_a_fresh_credential(sj)
                # One release per job: a crash between two starts leaves each job either
                # started (and logged) or untouched, so re-applying the round is exact.
                self.client.release([a.job_id])
            except (MosaicError, OSError) as e:
                self._skip(a, round_id, result, f"start failed: {e}", failed=True)
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
            if not waiting or self.clock() >= deadline:
                break
            self.sleep(0.1)
        for job_id, (a, _) in waiting.items():
            self._released.add(job_id)
            sj = states.get(job_id)
            reason = sj.reason if sj is not None else "gone"
            self._done(a, round_id, result, f"{a.reason} (released; Slurm: pending, {reason})")

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
            self.client.update([a.job_id], {"AdminComment": f"mosaic {a.request_id} refused: {why}"})
        except SlurmError as e:
            why += f" (and holding it again failed: {e})"
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
        try:
            self.client.update([a.job_id], {"AdminComment": f"mosaic {a.request_id} {text}"})
        except SlurmError as e:
            log.debug("job %s: audit comment not written: %s", a.job_id, e)


def _runs_as(sj: SlurmJob, a: Assignment) -> bool:
    per_node = dict(a.per_node)
    return (
        set(sj.nodes) == set(per_node)
        and all(sj.gpus_held_per_node == g for g in per_node.values())
        and sj.cpus == a.cpus
        and (sj.memory_mb_per_node() or 0) == mem_mb_per_node(a)
    )


def describe(actions: Sequence[Action]) -> list[dict[str, Any]]:
    """Actions as JSON-ready dicts (``--dry-run`` output, status)."""
    out = []
    for a in actions:
        item: dict[str, Any] = {
            "request_id": a.request_id,
            "kind": a.kind.value,
            "job": a.job_id,
            "reason": a.reason,
        }
        if a.assignment is not None:
            item["nodes"] = dict(a.assignment.per_node)
            item["cpus"] = a.assignment.cpus
            item["mem_mb_per_node"] = mem_mb_per_node(a.assignment)
        out.append(item)
    return out
