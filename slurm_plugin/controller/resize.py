"""``mosaic resize``: an admin's manual resize of a running job, through the controller's actuator.

By hand a resize takes seven steps (checkpoint signal, wait, ``requeuehold``, ``update``
while pending, a new plan file, the credential-safe wait, ``release``), one of them a timing
trap. Here it is one command that goes the controller's own way: the target shape
(:func:`resize_target`, pure) becomes the job's recorded request, so the controller keeps it
on later rounds, and a stop + start through :class:`~slurm_plugin.controller.actuate.Actuator`,
recorded as a round in the state store (a crash half-way is completed by the controller's
next tick like any half-applied round).

The target keeps the job on its node when the new GPU count fits there, else takes the
node (or the fewest nodes of one GPU type, the same count on each) with the free GPUs, best
fit first: the planner's rule, :func:`planner.slots.consolidated_slots`.
CPUs and memory default to the GPU-proportional share (what the ``proportional`` shaping
gives it next round, so the controller does not reshape it at once); the execution plan to
the job's current one re-resolved for the new GPU count (``dp`` follows the GPUs).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from planner.core.codec import assignment_to_json
from planner.core.errors import InputError
from planner.core.execplan import plan_from_mapping, plan_to_mapping, replan, resolve
from planner.core.model import Assignment, Job, JobState, Snapshot
from planner.policies.shaping import proportional_share
from planner.slots import consolidated_slots, free_gpus
from slurm_plugin.controller.actuate import Actuator
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.loop import Observer
from slurm_plugin.controller.observe import OUTSIDE_PREFIX, Observation
from slurm_plugin.controller.rounddiff import Action, Kind, describe, request_id
from slurm_plugin.controller.roundlock import RoundBusy, round_lock
from slurm_plugin.slurm.backend import SlurmClient
from slurm_plugin.store import Store

# How long a resize waits for the controller's tick in progress (a busy tick with thousands
# of queued jobs takes seconds) before it gives up without touching the job.
RESIZE_LOCK_WAIT_S = 60.0


class ResizeError(InputError):
    """A resize that cannot be done (names the job and why)."""


@dataclass(frozen=True)
class Resize:
    """The resize of one job: its target and the actions that apply it."""

    job_id: str
    current: Assignment
    target: Assignment

    def actions(self, round_id: int) -> list[Action]:
        return [
            Action(Kind.STOP, self.job_id, request_id(round_id, Kind.STOP, self.job_id), "resized"),
            Action(
                Kind.START, self.job_id, request_id(round_id, Kind.START, self.job_id), "resized", self.target
            ),
        ]

    def round_plan(self, obs: Observation) -> dict[str, Any]:
        """The round recorded for the resize: every running job as it is, this one resized."""
        assignments = {
            j.id: assignment_to_json(j.assignment)
            for j in obs.snapshot.jobs
            if j.assignment is not None and not j.id.startswith(OUTSIDE_PREFIX)
        }
        assignments[self.job_id] = assignment_to_json(self.target)
        return {"assignments": assignments, "source": "mosaic resize"}


def resize_target(
    obs: Observation,
    job_id: str,
    gpus: int,
    cpus: int | None = None,
    mem_gb: float | None = None,
    plan: Mapping[str, Any] | None = None,
    global_batch: int | None = None,
) -> Resize:
    """The shape ``job_id`` gets (pure); :class:`ResizeError` says why there is none."""
    job = _running_job(obs, job_id)
    assert job.assignment is not None
    if gpus < 1:
        raise ResizeError(f"job {job_id}: --gpus must be at least 1, got {gpus}")
    if job.elastic and not job.accepts_gpus(gpus):
        low, high = job.gpu_range
        raise ResizeError(
            f"job {job_id} accepts {low} to {high} GPUs (#MOSAIC --min-gpus/--max-gpus), not {gpus}"
        )
    layout = _placement(obs.snapshot, job, gpus)
    draft = Assignment(gpus=layout, cpus=1, mem_gb=1.0)
    share_cpus, share_mem = proportional_share(obs.snapshot.nodes_by_name, draft)
    target = Assignment(
        gpus=layout,
        cpus=cpus if cpus is not None else max(1, share_cpus),
        mem_gb=mem_gb if mem_gb is not None else share_mem,
        plan=_plan_for(job, gpus, plan, global_batch),
    )
    _check_fits(obs.snapshot, job, target)
    return Resize(job_id, job.assignment, target)


def _plan_for(
    job: Job, gpus: int, plan: Mapping[str, Any] | None, global_batch: int | None
) -> dict[str, Any] | None:
    """The execution plan on ``gpus``: the one given, else the job's own re-made for them."""
    assert job.assignment is not None
    where = f"job {job.id}: plan"
    batch = global_batch or job.batch_size
    if plan is not None:
        return plan_to_mapping(resolve(plan_from_mapping(plan, where), gpus, batch, where)) or None
    if job.assignment.plan is None:
        return None  # runs as submitted: mosaic-run resolves its plan for the GPUs it gets
    return plan_to_mapping(replan(plan_from_mapping(job.assignment.plan, where), gpus, batch, where)) or None


def _running_job(obs: Observation, job_id: str) -> Job:
    job = next((j for j in obs.snapshot.jobs if j.id == job_id), None)
    if job is None or job_id not in obs.managed:
        raise ResizeError(
            f"job {job_id} is not a job Mosaic manages (not pending or running in the managed "
            f"partitions {', '.join(sorted({s.partition for s in obs.managed.values()}) or ['-'])}, "
            "or it asks no GPU)"
        )
    if job.state is not JobState.RUNNING or job.assignment is None:
        raise ResizeError(
            f"job {job_id} is {obs.managed[job_id].state.lower()}, not running: "
            "a pending job is started by the controller with the GPUs it asked for"
        )
    return job


def _free_gpus(snapshot: Snapshot, job: Job) -> dict[str, list[int]]:
    """Free GPU indices per node of a type the job accepts, counting this job's own GPUs as free."""
    free = free_gpus(
        snapshot.nodes,
        (
            slot
            for j in snapshot.jobs
            if j.id != job.id and j.assignment is not None
            for slot in j.assignment.gpus
        ),
    )
    return {n.name: free[n.name] for n in snapshot.nodes if job.accepts_type(n.gpu_type)}


def _placement(snapshot: Snapshot, job: Job, gpus: int) -> tuple[tuple[str, int], ...]:
    assert job.assignment is not None
    free = _free_gpus(snapshot, job)
    current = [n for n in job.assignment.nodes if n in free]
    # Stay: the job's own node(s) if the new count splits evenly over them and fits.
    if current and gpus % len(current) == 0 and all(len(free[n]) >= gpus // len(current) for n in current):
        per = gpus // len(current)
        return tuple((n, k) for n in current for k in free[n][:per])
    # Else the planner's rule: one node, best fit; else the fewest nodes of one GPU type, the
    # same count on each (a job never spans two GPU types).
    slots = consolidated_slots(snapshot, job, gpus, free)
    if slots is not None:
        return slots
    summary = ", ".join(f"{n}: {len(ks)}" for n, ks in free.items()) or "no usable node"
    raise ResizeError(
        f"job {job.id}: {gpus} GPUs do not fit anywhere (free GPUs per node: {summary}); "
        "a job spans nodes of one GPU type only"
    )


def _check_fits(snapshot: Snapshot, job: Job, target: Assignment) -> None:
    nodes = snapshot.nodes_by_name
    for name, g in target.per_node:
        node = nodes[name]
        others = [j.assignment for j in snapshot.jobs if j.id != job.id and j.assignment is not None]
        used_cpus = sum(a.cpus * dict(a.per_node).get(name, 0) // a.num_gpus for a in others)
        used_mem = sum(a.mem_gb * dict(a.per_node).get(name, 0) / a.num_gpus for a in others)
        want_cpus = target.cpus * g // target.num_gpus
        want_mem = target.mem_gb * g / target.num_gpus
        if want_cpus > node.cpus - used_cpus or want_mem > node.mem_gb - used_mem + 1e-9:
            raise ResizeError(
                f"job {job.id}: {want_cpus} CPUs and {want_mem:g} GB on {name} do not fit "
                f"(free there: {node.cpus - used_cpus} CPUs, {node.mem_gb - used_mem:g} GB)"
            )


def apply_resize(
    client: SlurmClient,
    store: Store,
    config: ControllerConfig,
    job_id: str,
    gpus: int,
    *,
    cpus: int | None = None,
    mem_gb: float | None = None,
    plan: Mapping[str, Any] | None = None,
    dry_run: bool = False,
    clock: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """Resize a running job now; the report as JSON (``ok`` false when Slurm did not take it).

    The new GPU count is recorded as the job's request before anything is stopped, so the
    controller keeps it (and completes the round after a crash); if the start fails the old
    request is put back and the controller starts the job again as it was. The resize holds
    the spool's round lock from its observation to its last action, so a controller tick
    never acts on the same jobs in between (it waits, or skips its round).
    """
    kwargs: dict[str, Any] = {"cpus": cpus, "mem_gb": mem_gb, "plan": plan, "clock": clock}
    if dry_run:
        return _resize(client, store, config, job_id, gpus, dry_run=True, **kwargs)
    try:
        with round_lock(config.spool_dir, RESIZE_LOCK_WAIT_S):
            return _resize(client, store, config, job_id, gpus, dry_run=False, **kwargs)
    except RoundBusy as e:
        raise ResizeError(f"job '{job_id}': not resized: {e}") from None


def _resize(
    client: SlurmClient,
    store: Store,
    config: ControllerConfig,
    job_id: str,
    gpus: int,
    *,
    cpus: int | None,
    mem_gb: float | None,
    plan: Mapping[str, Any] | None,
    dry_run: bool,
    clock: Callable[[], float],
) -> dict[str, Any]:
    obs = Observer(client, store, config, clock).observe()
    resize = resize_target(obs, job_id, gpus, cpus, mem_gb, plan)
    report: dict[str, Any] = {
        "job": job_id,
        "from": assignment_to_json(resize.current),
        "to": assignment_to_json(resize.target),
    }
    if dry_run:
        report["actions"] = describe(resize.actions(0))
        report["ok"] = True
        return report
    record = store.job(job_id)
    before = record.num_gpus if record is not None else resize.current.num_gpus
    round_id = store.begin_round(clock(), resize.round_plan(obs))
    actions = resize.actions(round_id)
    store.set_request(job_id, gpus)
    result = Actuator(client, store, config, clock=clock).apply(obs, actions, round_id)
    store.finish_round(round_id, result.count)
    started = actions[1].request_id in result.done
    if not started:
        store.set_request(job_id, before)
    report.update(
        round=round_id,
        actions=describe(actions),
        done=result.done,
        skipped=[{"request_id": r, "why": w} for r, w in result.skipped],
        failed=[{"request_id": r, "why": w} for r, w in result.failed],
        ok=started,
    )
    return report


@dataclass(frozen=True)
class RelaunchTimeline:
    """Where the time of one relaunch went, from the job's own records (seconds)."""

    checkpoint_s: float  # resize (or stop) asked -> the ranks saved and stopped (checkpoint.json)
    relaunch_s: float  # -> Slurm ran the job again and mosaic-run started it ('start' record)
    startup_s: float  # -> the first step on the new shape was reported (first heartbeat)
    world_size: int

    @property
    def total_s(self) -> float:
        return self.checkpoint_s + self.relaunch_s + self.startup_s


def relaunch_timeline(
    asked_at: float, marker: Mapping[str, Any] | None, heartbeats: list[dict[str, Any]]
) -> RelaunchTimeline | None:
    """The timeline of the first relaunch after ``asked_at`` (``None`` until it took a step).

    ``marker`` is the job's ``checkpoint.json`` (``mosaic-run`` writes it once its ranks
    stopped); ``heartbeats`` its ``heartbeat.jsonl`` records, in order.
    """
    if marker is None or not isinstance(marker.get("time"), int | float) or marker["time"] < asked_at:
        return None
    stopped = float(marker["time"])
    start = next(
        (r for r in heartbeats if r.get("event") == "start" and float(r.get("time", 0)) >= stopped), None
    )
    if start is None:
        return None
    began = float(start["time"])
    step = next(
        (r for r in heartbeats if r.get("event") == "heartbeat" and float(r.get("time", 0)) >= began), None
    )
    if step is None:
        return None
    return RelaunchTimeline(
        checkpoint_s=stopped - asked_at,
        relaunch_s=began - stopped,
        startup_s=float(step["time"]) - began,
        world_size=int(step.get("world_size", 0)),
    )
