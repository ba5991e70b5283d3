"""Slurm's view -> the planner's :class:`~planner.core.model.Snapshot` (pure, plus one I/O helper;
the caller may keep pending jobs' planner records between calls: :class:`PendingJobs`).

* Nodes: those of the managed partitions that are usable (down, drained, draining or
  failing nodes are not capacity); the GPU type is the node feature that names one
  (GPU types are features because Slurm cannot change a pending job's GPU type).
* Managed jobs (in the managed partitions): pending ones (held or not) and running ones
  with their real allocation — GPU indices from ``gres_detail``, CPUs, memory — plus what
  the state store adds: the original GPU request, attained service, progress, pending
  since and the policy state the planner returned last round.
* Jobs outside the managed partitions are occupied capacity, never touched: a running
  GPU job becomes a non-preemptible, guaranteed (never packed with) running job pinned
  to its GPUs; a CPU-only one shrinks its nodes' CPUs and memory.
"""

from __future__ import annotations

import itertools
import logging
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from planner.core.errors import InputError
from planner.core.execplan import plan_from_mapping
from planner.core.model import Assignment, Job, JobState, Node, Snapshot, demand_problem
from profiles.gpus import catalog
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.layout import TaskLayout, layout_of
from slurm_plugin.directives import SUBMISSION, decode_comment
from slurm_plugin.slurm.parse import SlurmJob, SlurmNode
from slurm_plugin.slurm.sacct_trace import named_gpu_mem_gb
from slurm_plugin.store import JobRecord

log = logging.getLogger(__name__)

OUTSIDE_PREFIX = "outside:"
"""Snapshot ids of jobs outside Mosaic's partitions (occupied capacity only)."""

RUNNING_STATES = frozenset({"RUNNING", "CONFIGURING"})
IN_FLUX_STATES = frozenset({"COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "STOPPED"})
"""A job in flux is skipped for one tick: it is about to be pending again or gone."""


@dataclass(frozen=True)
class Observation:
    """One look at Slurm: the Snapshot and the Slurm records behind it."""

    time_s: float
    snapshot: Snapshot
    managed: Mapping[str, SlurmJob]  # managed jobs that are pending or running, by id
    nodes: Mapping[str, SlurmNode]  # usable nodes of the managed partitions
    finished: tuple[str, ...]  # managed jobs Slurm lists as ended
    layouts: Mapping[str, TaskLayout] = field(default_factory=dict)  # managed jobs' task layouts

    @property
    def shards_per_gpu(self) -> int:
        """``gres/shard`` per GPU on the managed nodes (0: not a shard cluster)."""
        return max((n.shards_per_gpu for n in self.nodes.values()), default=0)

    @property
    def running(self) -> dict[str, SlurmJob]:
        return {j: s for j, s in self.managed.items() if s.state == "RUNNING"}


def job_gpus(sj: SlurmJob) -> int:
    """The GPUs a job's Slurm request asks for (all nodes; a shard job holds one GPU per node)."""
    return sj.gpus_held_per_node * max(1, sj.num_nodes)


SUBMITTED_FEATURES = "submitted_features"  # store meta key: the constraint at first sight


def first_sight_meta(sj: SlurmJob) -> dict[str, Any]:
    """What the store records of a job the first time it is seen: its comment's metadata,
    its task layout and its constraint as submitted (Mosaic's own updates change what Slurm
    shows later: a GPU-type change rewrites ``Features``)."""
    return {
        **(decode_comment(sj.comment) or {}),
        "task_layout": layout_of(sj).to_json(),
        SUBMITTED_FEATURES: sj.features,
    }


def reuses_an_earlier_id(sj: SlurmJob, record: JobRecord) -> bool:
    """Whether ``sj`` is a new job that Slurm gave the id of the job ``record`` describes: a
    controller started on fresh state numbers jobs from 1 again (the test cluster after
    ``down``/``up``). Told by the submission token in the comment, and only for a job that has
    never run (pending, no restart): a user who rewrites the comment of a job that ran cannot
    make the controller forget its attained service."""
    # Every listed job is asked every tick: the comment is decoded only for a job that has
    # never run, carries a token, and not the token its record holds.
    if sj.state != "PENDING" or sj.requeues or f'"{SUBMISSION}"' not in sj.comment:
        return False
    stored = (record.meta or {}).get(SUBMISSION)
    if isinstance(stored, str) and stored in sj.comment:
        return False
    token = (decode_comment(sj.comment) or {}).get(SUBMISSION)
    return isinstance(token, str) and token != stored


def task_layout(sj: SlurmJob, record: JobRecord | None) -> TaskLayout:
    """The job's layout as submitted: the store's copy, else what Slurm shows now."""
    stored = TaskLayout.from_json((record.meta or {}).get("task_layout")) if record is not None else None
    return stored if stored is not None else layout_of(sj)


def job_meta(sj: SlurmJob, record: JobRecord | None) -> dict[str, Any]:
    """Mosaic metadata: the store's copy, else the comment's."""
    if record is not None and record.meta:
        return dict(record.meta)
    return decode_comment(sj.comment) or {}


def build_observation(
    now: float,
    slurm_jobs: Sequence[SlurmJob],
    slurm_nodes: Sequence[SlurmNode],
    records: Mapping[str, JobRecord],
    config: ControllerConfig,
    current_plans: Mapping[str, Mapping[str, Any] | None] | None = None,
    pending: PendingJobs | None = None,
) -> Observation:
    """The Snapshot for ``now`` (pure). ``current_plans``: the execution plan each running job
    was started with (from its plan file); ``None`` where it runs as submitted. ``pending``:
    the caller's memo of pending jobs' planner records across ticks (none: built afresh)."""
    if pending is None:
        pending = PendingJobs()
    partitions = set(config.partitions)
    usable = {
        n.name: n for n in slurm_nodes if n.usable and partitions.intersection(n.partitions or partitions)
    }
    cpu_taken: dict[str, int] = {}
    mem_taken: dict[str, float] = {}
    jobs: list[Job] = []
    managed: dict[str, SlurmJob] = {}
    layouts: dict[str, TaskLayout] = {}
    finished: list[str] = []
    assumed = assumed_indices(slurm_jobs)
    for sj in slurm_jobs:
        if sj.partition not in partitions:
            outside = _outside_job(sj, usable, assumed=assumed.get(sj.id))
            if outside is not None:
                jobs.append(outside)
            elif sj.holds_resources:
                for node in sj.nodes:
                    if node in usable:
                        cpu_taken[node] = cpu_taken.get(node, 0) + sj.cpus // max(1, len(sj.nodes))
                        mem_taken[node] = mem_taken.get(node, 0.0) + (sj.memory_mb_per_node() or 0) / 1024
            continue
        if sj.state in IN_FLUX_STATES:
            continue
        if sj.state != "PENDING" and sj.state not in RUNNING_STATES:
            finished.append(sj.id)
            continue
        if job_gpus(sj) == 0:
            continue  # a CPU-only job in a GPU partition: Slurm schedules it, Mosaic has no GPU plan for it
        if sj.state in RUNNING_STATES and running_assignment(sj, usable) is None:
            # Running on a node that is draining or down: let it finish there; what it holds
            # on usable nodes stays occupied.
            pinned = _outside_job(sj, usable, partial=True, assumed=assumed.get(sj.id))
            if pinned is not None:
                jobs.append(pinned)
            continue
        managed[sj.id] = sj
        record = records.get(sj.id)
        if sj.state == "PENDING" and record is not None:
            job, layout = pending.get(sj, record, config)
            jobs.append(job)
            layouts[sj.id] = layout
            continue
        plan = (current_plans or {}).get(sj.id)
        jobs.append(_managed_job(sj, record, usable, config, now, plan, assumed.get(sj.id)))
        layouts[sj.id] = task_layout(sj, record)
    pending.keep(managed)
    nodes = tuple(
        Node(
            name=n.name,
            gpus=n.gpus,
            gpu_type=node_gpu_type(n, config),
            cpus=max(0, n.cpus - cpu_taken.get(n.name, 0)),
            mem_gb=max(0.0, n.mem_mb / 1024 - mem_taken.get(n.name, 0.0)),
            gpu_mem_gb=named_gpu_mem_gb(n),
        )
        for n in sorted(usable.values(), key=lambda n: _natural(n.name))
    )
    # Only shard jobs whose GPU Slurm named (gres_detail) can share: a whole-GPU job whose
    # indices are assumed (no gres_detail yet) must not look like a partner of another.
    on_shards = {sj.id for sj in managed.values() if sj.shards_per_node and sj.gpu_indices}
    snapshot = Snapshot(time_s=now, nodes=nodes, jobs=with_partners(jobs, on_shards))
    return Observation(now, snapshot, managed, usable, tuple(finished), layouts)


class PendingJobs:
    """The planner's view of each pending managed job, reused while its inputs are unchanged.

    A pending job's :class:`Job` and layout depend only on its Slurm record, its state-store
    record and the config (not on the time, the nodes or a plan file), and at thousands of
    queued jobs rebuilding each one every tick costs seconds. Reused only when Slurm's record
    is equal and the store's record and the config are the very objects used last time (the
    store hands back the same record for a row that has not changed): the same inputs, the
    same output, as a pure function's cache. A store record that kept its meta object, GPU
    request and progress only updates the fields taken from the rest of it.
    """

    def __init__(self) -> None:
        self.seen: dict[str, tuple[SlurmJob, JobRecord, ControllerConfig, Job, TaskLayout]] = {}

    def get(self, sj: SlurmJob, record: JobRecord, config: ControllerConfig) -> tuple[Job, TaskLayout]:
        hit = self.seen.get(sj.id)
        if hit is not None and hit[2] is config and hit[0] == sj:
            old, job, layout = hit[1], hit[3], hit[4]
            if old is record:
                return job, layout
            if old.meta is record.meta and (old.num_gpus, old.progress) == (record.num_gpus, record.progress):
                # Only what the store accounts changed (service, pending since, policy state).
                job = replace(
                    job,
                    attained_gpu_s=record.attained_gpu_s,
                    pending_since_s=record.pending_since_s,
                    policy_state=record.policy_state,
                )
                self.seen[sj.id] = (sj, record, config, job, layout)
                return job, layout
        job = _managed_job(sj, record, {}, config, 0.0, None)
        layout = task_layout(sj, record)
        self.seen[sj.id] = (sj, record, config, job, layout)
        return job, layout

    def keep(self, managed: Collection[str]) -> None:
        """Forget jobs no longer managed (ended, or seen by another observer)."""
        if len(self.seen) > len(managed):
            self.seen = {job_id: v for job_id, v in self.seen.items() if job_id in managed}


def with_partners(jobs: Sequence[Job], on_shards: Collection[str]) -> tuple[Job, ...]:
    """Running shard jobs (``on_shards``) Slurm put on the same GPU list each other in
    ``shares_with``, as the planner's sharing stages expect of a pair that already shares."""
    on_gpu: dict[tuple[str, int], list[str]] = {}
    for job in jobs:
        if job.assignment is not None and job.id in on_shards:
            for gpu in job.assignment.gpus:
                on_gpu.setdefault(gpu, []).append(job.id)
    out = []
    for job in jobs:
        a = job.assignment
        if a is not None and job.id in on_shards:
            partners = sorted({p for gpu in a.gpus for p in on_gpu[gpu] if p != job.id})
            if partners:
                out.append(replace(job, assignment=replace(a, shares_with=tuple(partners))))
                continue
        out.append(job)
    return tuple(out)


def sharing_notice(scheduler: str, nodes: Sequence[SlurmNode], partitions: Sequence[str]) -> str:
    """What a packing preset will do on these nodes (logged at start-up; pure)."""
    managed = [n for n in nodes if set(partitions).intersection(n.partitions or partitions)]
    if any(n.shards_per_gpu for n in managed):
        return (
            f"scheduler {scheduler} shares GPUs: jobs submitted with --gres=shard:N run on gres/shard "
            "(all of a GPU's shards alone, one shard beside a partner); a --gres=gpu job planned onto "
            "a shared GPU is refused and waits"
        )
    return (
        f"scheduler {scheduler} shares GPUs but the managed nodes offer no gres/shard "
        "(GresTypes=gpu,shard; docs/user-guide.md 'Sharing GPUs'): a job planned onto a shared "
        "GPU is refused with the reason and waits"
    )


UNKNOWN_GPU_TYPE = "unknown"
_untyped_logged: set[str] = set()  # nodes already logged as having no GPU type


def node_gpu_type(node: SlurmNode, config: ControllerConfig) -> str:
    """A node's GPU type: a feature naming one of ``gpu_types``; else the type its GRES names
    (``gpu:a100:4``, or the known type inside a longer name: ``gpu:nvidia_a100-sxm4-80gb:8`` ->
    ``a100``; another name is kept as it is, lowercased); else ``default_gpu_type`` when the
    operator set one; else ``unknown`` (logged once per node), never a type it may not have."""
    for feature in node.features:
        if feature.lower() in config.gpu_types:
            return catalog().type_named_by(feature)
    gres = node.gres_gpu_type.lower()
    if gres:
        known = [t for t in re.split(r"[^a-z0-9]+", gres) if t in config.gpu_types]
        return known[0] if len(set(known)) == 1 else gres
    if config.default_gpu_type:
        return config.default_gpu_type.lower()
    if node.name not in _untyped_logged:
        _untyped_logged.add(node.name)
        log.warning(
            "node %s: neither its GRES (gpu:TYPE:N) nor its features (%s) name a GPU type of "
            "[controller] gpu_types; planned as type %r (set a feature, or default_gpu_type)",
            node.name,
            ",".join(node.features) or "none",
            UNKNOWN_GPU_TYPE,
        )
    return UNKNOWN_GPU_TYPE


def _natural(name: str) -> tuple[str, int]:
    digits = len(name) - len(name.rstrip("0123456789"))
    return (name[: len(name) - digits], int(name[len(name) - digits :]) if digits else -1)


def assumed_indices(slurm_jobs: Sequence[SlurmJob]) -> dict[str, dict[str, tuple[int, ...]]]:
    """GPU indices for the running jobs whose indices Slurm did not name (no ``gres_detail``
    for a node yet): job id -> node -> the lowest indices that no other job holds there whole,
    named or assumed (in job order). Assuming the first ones would put two jobs on one GPU. A
    job on shards may have a GPU's other shards beside it, so it avoids only GPUs held whole."""
    whole: dict[str, set[int]] = {}  # GPUs held by a job without shards
    any_job: dict[str, set[int]] = {}  # GPUs held by any job
    lacking: list[SlurmJob] = []
    for sj in slurm_jobs:
        if sj.state not in RUNNING_STATES or not sj.nodes:
            continue
        by_node = dict(sj.gpu_indices)
        for node, indices in by_node.items():
            any_job.setdefault(node, set()).update(indices)
            if not sj.shards_per_node:
                whole.setdefault(node, set()).update(indices)
        if any(not by_node.get(node) for node in sj.nodes):
            lacking.append(sj)
    out: dict[str, dict[str, tuple[int, ...]]] = {}
    for sj in lacking:
        by_node = dict(sj.gpu_indices)
        for node in sj.nodes:
            if by_node.get(node):
                continue
            avoid = whole.setdefault(node, set()) if sj.shards_per_node else any_job.setdefault(node, set())
            count = sj.gpus_held_per_node
            free = (k for k in range(max(avoid, default=-1) + 1 + count) if k not in avoid)
            chosen = tuple(itertools.islice(free, count))
            any_job.setdefault(node, set()).update(chosen)
            if not sj.shards_per_node:
                whole.setdefault(node, set()).update(chosen)
            out.setdefault(sj.id, {})[node] = chosen
    return out


def running_assignment(
    sj: SlurmJob,
    usable: Mapping[str, SlurmNode],
    plan: Mapping[str, Any] | None = None,
    assumed: Mapping[str, tuple[int, ...]] | None = None,
) -> Assignment | None:
    """The allocation Slurm gave a running job, or ``None`` when it is not (fully) on usable nodes.
    ``assumed``: the indices to take on nodes Slurm named none for (:func:`assumed_indices`;
    without it, the first ones)."""
    if sj.state not in RUNNING_STATES or not sj.nodes or any(n not in usable for n in sj.nodes):
        return None
    by_node = dict(sj.gpu_indices)
    gpus: list[tuple[str, int]] = []
    for node in sj.nodes:
        indices = (
            by_node.get(node)
            or (assumed or {}).get(node)
            or tuple(range(sj.gpus_held_per_node))  # no gres_detail: assume the first
        )
        gpus += [(node, k) for k in indices]
    if not gpus:
        return None
    mem_gb = (sj.memory_mb_per_node() or 0) * len(sj.nodes) / 1024
    return Assignment(gpus=tuple(gpus), cpus=sj.cpus, mem_gb=mem_gb, plan=plan)


def _outside_job(
    sj: SlurmJob,
    usable: Mapping[str, SlurmNode],
    partial: bool = False,
    assumed: Mapping[str, tuple[int, ...]] | None = None,
) -> Job | None:
    """A job Mosaic must not touch, as occupied capacity (``partial``: its usable nodes only)."""
    assignment = running_assignment(sj, usable, assumed=assumed)
    if assignment is None and partial and sj.state in RUNNING_STATES:
        kept = [n for n in sj.nodes if n in usable]
        if kept:
            by_node = dict(sj.gpu_indices)
            gpus = tuple((n, k) for n in kept for k in by_node.get(n, ()))
            share = len(kept) / max(1, len(sj.nodes))
            mem = (sj.memory_mb_per_node() or 0) * len(kept) / 1024
            if gpus:
                assignment = Assignment(gpus=gpus, cpus=max(1, round(sj.cpus * share)), mem_gb=mem)
    if assignment is None:
        return None
    return Job(
        id=OUTSIDE_PREFIX + sj.id,
        num_gpus=assignment.num_gpus,
        model="unknown",
        submit_time_s=sj.submit_time,
        state=JobState.RUNNING,
        guaranteed=True,  # packing never pairs a pending job with it
        preemptible=False,  # every policy keeps it where it is
        time_limit_s=sj.time_limit_s,  # Slurm ends it that long after it started, at the latest
        assignment=assignment,
    )


def _managed_job(
    sj: SlurmJob,
    record: JobRecord | None,
    usable: Mapping[str, SlurmNode],
    config: ControllerConfig,
    now: float,
    plan: Mapping[str, Any] | None,
    assumed: Mapping[str, tuple[int, ...]] | None = None,
) -> Job:
    meta = job_meta(sj, record)
    num_gpus = record.num_gpus if record is not None else job_gpus(sj)
    assignment = running_assignment(sj, usable, plan, assumed)
    progress = record.progress if record is not None else None
    duration = _positive(meta.get("duration_s"))
    remaining = duration * (1 - progress) if duration is not None and progress is not None else None
    deadline = _positive(meta.get("deadline_s"))
    plans = meta.get("plans")
    gpu_type = _requested_gpu_type(sj, meta, config)
    min_gpus, max_gpus, gpu_types = _elastic_demand(sj.id, num_gpus, gpu_type, meta)
    return Job(
        id=sj.id,
        num_gpus=num_gpus,
        model=str(meta.get("model") or config.default_model),
        submit_time_s=sj.submit_time,
        state=JobState.RUNNING if assignment is not None else JobState.PENDING,
        attained_gpu_s=record.attained_gpu_s if record is not None else 0.0,
        progress=progress,
        remaining_s=remaining,
        duration_s=duration,
        batch_size=meta.get("batch_size") if isinstance(meta.get("batch_size"), int) else None,
        tenant=meta.get("tenant") if isinstance(meta.get("tenant"), str) else None,
        guaranteed=bool(meta.get("guaranteed", False)),
        deadline_s=sj.submit_time + deadline if deadline is not None else None,
        time_limit_s=sj.time_limit_s,
        gpu_type=gpu_type,
        min_gpus=min_gpus,
        max_gpus=max_gpus,
        gpu_types=gpu_types,
        plan=_valid_plan(sj.id, meta.get("plan")),
        candidate_plans=tuple(p for p in plans if _valid_plan(sj.id, p)) if isinstance(plans, list) else (),
        restarts=sj.requeues,
        pending_since_s=record.pending_since_s if record is not None else sj.submit_time,
        assignment=assignment,
        policy_state=record.policy_state if record is not None else None,
    )


def _elastic_demand(
    job_id: str, num_gpus: int, gpu_type: str | None, meta: Mapping[str, Any]
) -> tuple[int | None, int | None, tuple[str, ...]]:
    """``#MOSAIC --min-gpus/--max-gpus/--gpu-types`` as the job's accepted shapes.

    The directives are checked when the script is submitted, but not against its
    ``#SBATCH`` GPU count: a range that leaves out the requested count is logged and the
    job is scheduled rigid, as submitted (one bad job must not fail the tick).
    """

    def count(key: str) -> int | None:
        value = meta.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    raw = meta.get("gpu_types")
    types = tuple(str(t).lower() for t in raw if isinstance(t, str)) if isinstance(raw, list) else ()
    low, high = count("min_gpus"), count("max_gpus")
    problem = demand_problem(num_gpus, low, high, gpu_type, types)
    if problem is not None:
        log.warning("job %s: %s %s; scheduled as submitted (rigid)", job_id, *problem)
        return None, None, ()
    return low, high, types


def _positive(value: Any) -> float | None:
    """A positive finite number from the job's metadata (anything else: not given)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        return None
    try:
        return float(value)
    except OverflowError:  # an integer beyond a float's range
        return None


def _valid_plan(job_id: str, value: Any) -> dict[str, Any] | None:
    """An execution plan from the job's metadata, or ``None`` for one that is not a plan
    (logged: the job runs as submitted instead of failing every start)."""
    if not isinstance(value, dict):
        return None
    try:
        plan_from_mapping(value, f"job {job_id}: plan")
    except InputError as e:
        log.warning("%s; the plan is ignored", e)
        return None
    return value


def _requested_gpu_type(sj: SlurmJob, meta: Mapping[str, Any], config: ControllerConfig) -> str | None:
    """``#MOSAIC --gpu-type``, else a GPU-type feature in the job's constraint as submitted
    (``-C v100``; the one Slurm shows now for a job first seen before this was recorded).
    The request stays the job's reference after the controller moved it to another type, as
    a trace row's ``gpu_type`` does in the simulator."""
    if isinstance(meta.get("gpu_type"), str):
        return str(meta["gpu_type"]).lower()
    submitted = meta.get(SUBMITTED_FEATURES)
    features = submitted if isinstance(submitted, str) else sj.features
    for token in features.replace("|", "&").replace(",", "&").split("&"):
        if token.strip().lower() in config.gpu_types:
            return token.strip().lower()
    return None
