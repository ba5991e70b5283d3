"""The pure half of applying a round: what Slurm must do to get from what it runs to a plan.

:func:`diff` compares what Slurm runs with what the plan wants:

* a running managed job absent from the plan is **stopped** (preempted);
* a running job whose nodes, GPU count per node, CPUs, memory or execution plan differ
  is **stopped and started** again (a migration, resize or reshape is a relaunch:
  Slurm refuses to change a running job's resources); which change is which is
  :func:`planner.relaunch.classify`, the simulator's and ``mosaic report``'s definition too;
* a pending job in the plan is **started**; a pending job outside it that Slurm could
  start on its own is **held**.

Slurm chooses GPU indices inside a node, so a plan that only renumbers a job's GPUs on
the same node is not a relaunch; the planner reads the real indices back next round.
Also here: the ``scontrol update`` fields of a start (:func:`start_fields`, with the task
layout of :mod:`.layout` and a GPU-type feature change), and the checks that refuse a start
Slurm could never run (:func:`infeasible`, :func:`shard_infeasible`). The imperative half,
which runs the commands, is :mod:`.actuate`.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from planner import relaunch
from planner.core.model import Assignment
from planner.relaunch import Change, Shape, classify, mem_mb_per_node
from slurm_plugin.controller.layout import TaskLayout, expressible_cpus, layout_fields
from slurm_plugin.controller.observe import Observation
from slurm_plugin.slurm.parse import SlurmJob, SlurmNode


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
            if change is Change.NONE and sj.shards_per_node > wanted_shards(
                target, node_shards(target, obs.nodes)
            ):
                # Slurm cannot take shards from a running job: one alone on its GPU (all the
                # GPU's shards) is relaunched with half of them to share it. The simulator has
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
    """The ``gres/shard`` count per node a shard job gets for ``a`` (pure); ``whole_gpu`` is
    the shards of one GPU on its nodes (:func:`node_shards`).

    On a shard cluster every job of a packing preset runs on shards (docs/user-guide.md,
    "Sharing GPUs"): alone on its GPU it holds all of them (``whole_gpu``, so
    Slurm can put nothing beside it), sharing it holds half, so two partners fill the GPU
    (SJF-BSBF §IV: at most two jobs per GPU; with an odd count one shard stays free). A job
    without shards (``whole_gpu`` 0) gets none.
    """
    if whole_gpu <= 0:
        return 0
    return max(1, whole_gpu // 2) if a.shares_with else whole_gpu


def node_shards(a: Assignment, nodes: Mapping[str, SlurmNode]) -> int:
    """The shards of one GPU on ``a``'s nodes (the fewest where they differ; 0: none offer any)."""
    return min((nodes[n].shards_per_gpu if n in nodes else 0 for n in a.nodes), default=0)


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


def planned_gpu_type(obs: Observation, a: Assignment) -> str | None:
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
    whole = node_shards(a, nodes)
    if a.shares_with and whole < 2:
        return (
            f"job {sj.id} shares a GPU, but a GPU of {', '.join(a.nodes)} has {whole} shard: two jobs need 2"
        )
    return None


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
