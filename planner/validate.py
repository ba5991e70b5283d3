"""Invariants every RoundPlan must satisfy, checked in one place.

A job's assignment has a GPU count the job accepts (``num_gpus`` for a rigid job, any
count in ``[min_gpus, max_gpus]`` for an elastic one), GPUs only of types it accepts,
and an execution plan whose ``dp x tp x pp`` layout fits the GPUs given; no GPU holds
more jobs than the scheduler allows and no node gives more CPUs or memory than it has.

The simulator checks every plan that changes anything with :func:`plan_violations` (a
violation is a bug in a stage, so it stops), and property tests check random snapshots.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.execplan import PlanError, plan_from_mapping, resolve
from planner.model import Assignment, GpuSlot, RoundPlan, Snapshot

MEM_TOLERANCE_GB = 1e-6
LAYOUT_KEYS = ("dp", "tp", "pp")


def plan_violations(
    snapshot: Snapshot,
    plan: RoundPlan,
    max_jobs_per_gpu: int = 1,
    checked: Mapping[str, Assignment] | None = None,
) -> list[str]:
    """Every broken invariant of ``plan`` against ``snapshot``, as readable lines.

    ``checked``: assignments a caller already checked against the same jobs (the
    simulator's running jobs); an assignment that *is* the one there skips the per-job
    checks and still counts towards every GPU's, CPU's and memory total.
    """
    problems: list[str] = []
    jobs = {j.id: j for j in snapshot.jobs}
    nodes = snapshot.nodes_by_name
    gpu_users: dict[GpuSlot, int] = {}
    cpus_used: dict[str, int] = {}
    mem_used: dict[str, float] = {}
    for job_id, a in plan.assignments.items():
        if checked is not None and checked.get(job_id) is a and job_id in jobs:
            for slot in a.gpus:
                gpu_users[slot] = gpu_users.get(slot, 0) + 1
            for node_name, cpus, mem in a.node_shares():
                cpus_used[node_name] = cpus_used.get(node_name, 0) + cpus
                mem_used[node_name] = mem_used.get(node_name, 0.0) + mem
            continue
        job = jobs.get(job_id)
        if job is None:
            problems.append(f"job '{job_id}' is assigned but not in the snapshot")
            continue
        if len(set(a.gpus)) != len(a.gpus):
            problems.append(f"job '{job_id}' lists a GPU twice")
        low, high = job.gpu_range
        if low == high and a.num_gpus != low:
            problems.append(f"job '{job_id}' asks for {job.num_gpus} GPUs but is given {a.num_gpus}")
        elif not low <= a.num_gpus <= high:
            problems.append(f"job '{job_id}' accepts {low} to {high} GPUs but is given {a.num_gpus}")
        layout = plan_layout_problem(a.plan, a.num_gpus, f"job '{job_id}': plan")
        if layout is not None:
            problems.append(layout)
        if a.cpus < 0 or a.mem_gb < 0:
            problems.append(f"job '{job_id}' has negative CPUs or memory")
        for slot in a.gpus:
            node = nodes.get(slot[0])
            if node is None:
                problems.append(f"job '{job_id}' is on unknown node '{slot[0]}'")
            elif not 0 <= slot[1] < node.gpus:
                problems.append(f"job '{job_id}' is on GPU {slot[1]} of '{slot[0]}', which has {node.gpus}")
            elif not job.accepts_type(node.gpu_type):
                wanted = " or ".join(job.accepted_types)
                problems.append(f"job '{job_id}' wants {wanted} GPUs but is on {node.gpu_type} '{slot[0]}'")
            else:
                gpu_users[slot] = gpu_users.get(slot, 0) + 1
        for node_name, cpus, mem in a.node_shares():
            cpus_used[node_name] = cpus_used.get(node_name, 0) + cpus
            mem_used[node_name] = mem_used.get(node_name, 0.0) + mem
    for slot, users in gpu_users.items():
        if users > max_jobs_per_gpu:
            holders = [j for j, a in plan.assignments.items() if slot in a.gpus]
            problems.append(f"GPU {slot[1]} of '{slot[0]}' holds {users} jobs ({', '.join(holders)})")
    for node_name, cpus in cpus_used.items():
        node = nodes.get(node_name)
        if node is not None and cpus > node.cpus:
            problems.append(f"node '{node_name}' is given {cpus} CPUs of {node.cpus}")
    for node_name, mem in mem_used.items():
        node = nodes.get(node_name)
        if node is not None and mem > node.mem_gb + MEM_TOLERANCE_GB:
            problems.append(f"node '{node_name}' is given {mem:.3f} GB of {node.mem_gb}")
    return problems


def plan_layout_problem(plan: Mapping[str, Any] | None, gpus: int, where: str) -> str | None:
    """Why ``plan``'s ``dp x tp x pp`` layout cannot run on ``gpus`` GPUs; ``None`` if it can.

    Only the layout keys are read: a plan that states none of them runs on any count
    (``dp`` is derived), one that states ``tp``/``pp`` needs a multiple of ``tp x pp``
    GPUs, and one that states ``dp`` needs exactly ``dp x tp x pp``.
    """
    if not plan or not any(key in plan for key in LAYOUT_KEYS):
        return None
    try:
        layout = plan_from_mapping({k: plan[k] for k in LAYOUT_KEYS if k in plan}, where)
        resolve(layout, gpus, where=where)
    except PlanError as e:
        return str(e)
    return None
