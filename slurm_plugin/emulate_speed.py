"""The emulated job's speed: the simulator's speed model on what Slurm gave the job.

``mosaic demo`` compares a live run with ``mosaic sim`` on the same trace; the two agree
only if an emulated job advances at the pace the simulator assumes for the same
resources. So the job rebuilds its :class:`planner.core.model.Assignment` from inside Slurm
and asks :class:`planner.sim.progress.SpeedModel` (GPU type, Synergy §3.1 CPU/memory
sensitivity, SJF-BSBF Eq. 7 gradient accumulation, Tesserae co-location):

* nodes: ``SLURM_JOB_NODELIST`` (Slurm's hostlist syntax, ``n[1-3,5]``);
* GPUs: ``SLURM_JOB_GPUS`` (the node's GPU indices), else ``CUDA_VISIBLE_DEVICES``;
  every node of a multi-node job holds as many as the batch node, unless the plan file
  names the same nodes with that many GPUs on the first (then its slots are used);
* CPUs and memory: ``SLURM_CPUS_ON_NODE`` and ``SLURM_MEM_PER_NODE`` (MB; or
  ``SLURM_MEM_PER_CPU`` x CPUs) per node, times the nodes;
* execution plan and GPU partners: the job's plan file (``<spool>/plans/<job>.json``);
  a partner's model is what that partner's emulator recorded in its status directory;
* node shapes: the cluster TOML the demo wrote (the test cluster's shape).

The job's Slurm environment is its only truth about resources: a plan file that asks
for something else is used only for the execution plan and the partners.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from planner.cluster import cluster_from_toml
from planner.core import hostlist
from planner.core.errors import InputError
from planner.core.model import Assignment, Node
from planner.core.plandoc import parse_plan_document
from planner.sim.progress import Partner, SpeedModel
from planner.traces.records import TraceJob
from profiles.store import ProfileStore
from slurm_plugin.files import read_text, write_atomic
from slurm_plugin.planfile import read_plan

IDENTITY_FILE = "emulated_job.json"
"""In the job's status directory: the model an emulated job runs, for its GPU partners."""

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class EmulationError(InputError):
    """The job's Slurm environment or cluster file cannot say what it runs on."""


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed hostlist (``n[1-3,05],gpu7``) as names, in order (:mod:`planner.core.hostlist`)."""
    try:
        names = list(hostlist.expand_hostlist(text))
    except hostlist.HostlistError as e:
        raise EmulationError(f"SLURM_JOB_NODELIST: {e}") from e
    if not names:
        raise EmulationError(f"SLURM_JOB_NODELIST {text!r} names no node")
    return names


def gpu_indices(env: Mapping[str, str]) -> list[int]:
    """The batch node's GPU indices Slurm gave the job."""
    for key in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        raw = (env.get(key) or "").strip()
        if raw:
            try:
                return sorted(int(d) for d in raw.split(",") if d.strip())
            except ValueError:
                raise EmulationError(f"{key}={raw!r}: expected GPU indices like 0,1") from None
    raise EmulationError("neither SLURM_JOB_GPUS nor CUDA_VISIBLE_DEVICES names a GPU: the job holds none")


def _number(env: Mapping[str, str], key: str) -> float:
    raw = env.get(key)
    if raw is None or not raw.strip():
        raise EmulationError(f"{key} is not set (is this running inside a Slurm job?)")
    try:
        value = float(raw.split("(")[0])  # SLURM_CPUS_ON_NODE has no suffix; be lenient anyway
    except ValueError:
        raise EmulationError(f"{key}={raw!r} is not a number") from None
    if value <= 0:
        raise EmulationError(f"{key}={raw!r} must be positive")
    return value


def assignment_from_env(env: Mapping[str, str], plan_document: Mapping[str, Any] | None) -> Assignment:
    """What Slurm gave the job, with the plan file's execution plan and partners."""
    nodes = expand_hostlist(env.get("SLURM_JOB_NODELIST") or env.get("SLURMD_NODENAME") or "")
    indices = gpu_indices(env)
    cpus_per_node = _number(env, "SLURM_CPUS_ON_NODE")
    if env.get("SLURM_MEM_PER_NODE"):
        mem_mb_per_node = _number(env, "SLURM_MEM_PER_NODE")
    else:
        mem_mb_per_node = _number(env, "SLURM_MEM_PER_CPU") * cpus_per_node
    gpus = tuple((n, i) for n in nodes for i in indices)
    plan: Mapping[str, Any] | None = None
    shares_with: tuple[str, ...] = ()
    if plan_document is not None:
        planned = parse_plan_document(plan_document, "plan file").assignment
        plan, shares_with = planned.plan, planned.shares_with
        per_node = dict(planned.per_node)
        if set(per_node) == set(nodes) and per_node.get(nodes[0]) == len(indices):
            gpus = planned.gpus  # the plan's exact slots on the other nodes
    return Assignment(
        gpus=gpus,
        cpus=round(cpus_per_node * len(nodes)),
        mem_gb=mem_mb_per_node * len(nodes) / 1024.0,
        plan=plan,
        shares_with=shares_with,
    )


def nodes_from_cluster_file(path: str | Path) -> dict[str, Node]:
    nodes = cluster_from_toml(read_text(path), source=str(path))
    return {n.name: n for n in nodes}


def write_identity(status_dir: Path, job: TraceJob) -> None:
    """Record the model this job runs (its GPU partners read it to know whom they share with;
    atomically, as a partner reading a half-written file would take the job for not started
    and keep the wrong speed for its whole run)."""
    record = {"model": job.model, "batch_size": job.batch_size, "num_gpus": job.num_gpus}
    write_atomic(status_dir / IDENTITY_FILE, json.dumps(record) + "\n")


def _partner(spool: Path, job_id: str) -> Partner | None:
    """A GPU partner as the simulator sees it; ``None`` while it has not started (unknown model)."""
    try:
        identity = json.loads((spool / "status" / job_id / IDENTITY_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    document = read_plan(spool, job_id)
    if not isinstance(identity, dict) or not isinstance(identity.get("model"), str) or document is None:
        return None
    assignment = parse_plan_document(document, f"plan file of job {job_id}").assignment
    batch = identity.get("batch_size")
    trace = TraceJob(job_id, 0.0, assignment.num_gpus, 1.0, identity["model"], batch)
    return trace, assignment


def job_speed(
    env: Mapping[str, str],
    spool: Path,
    job: TraceJob,
    nodes: Mapping[str, Node],
    profiles: ProfileStore | None = None,
    requested_gpus: int | None = None,
) -> tuple[float, Assignment]:
    """The simulator's speed for ``job`` on what Slurm gave it (and the assignment read).

    ``requested_gpus``: the GPU count the job's duration refers to (an elastic job on
    another count runs at the scaling model's ratio, as in the simulator); without it, the
    count Slurm gave is taken as the reference.
    """
    job_id = env.get("SLURM_JOB_ID") or job.job_id
    assignment = assignment_from_env(env, read_plan(spool, job_id))
    job = replace(job, num_gpus=requested_gpus or assignment.num_gpus)
    unknown = sorted({name for name, _ in assignment.gpus} - set(nodes))
    if unknown:
        raise EmulationError(
            f"node(s) {', '.join(unknown)} from SLURM_JOB_NODELIST are not in the cluster file"
        )
    partners = [p for p in (_partner(spool, other) for other in assignment.shares_with) if p is not None]
    model = SpeedModel(profiles or ProfileStore.builtin(), nodes)
    return model.speed(job, assignment, partners), assignment
