"""Invariants every RoundPlan must satisfy, checked in one place.

The simulator checks every plan that changes anything with :func:`plan_violations` (a
violation is a bug in a stage, so it stops), and property tests check random snapshots.
"""

from __future__ import annotations

from planner.model import GpuSlot, RoundPlan, Snapshot

MEM_TOLERANCE_GB = 1e-6


def plan_violations(snapshot: Snapshot, plan: RoundPlan, max_jobs_per_gpu: int = 1) -> list[str]:
    """Every broken invariant of ``plan`` against ``snapshot``, as readable lines."""
    problems: list[str] = []
    jobs = {j.id: j for j in snapshot.jobs}
    nodes = snapshot.nodes_by_name
    gpu_users: dict[GpuSlot, int] = {}
    cpus_used: dict[str, int] = {}
    mem_used: dict[str, float] = {}
    for job_id, a in plan.assignments.items():
        job = jobs.get(job_id)
        if job is None:
            problems.append(f"job '{job_id}' is assigned but not in the snapshot")
            continue
        if len(set(a.gpus)) != len(a.gpus):
            problems.append(f"job '{job_id}' lists a GPU twice")
        if a.num_gpus != job.num_gpus:
            problems.append(f"job '{job_id}' asks for {job.num_gpus} GPUs but is given {a.num_gpus}")
        if a.cpus < 0 or a.mem_gb < 0:
            problems.append(f"job '{job_id}' has negative CPUs or memory")
        for slot in a.gpus:
            node = nodes.get(slot[0])
            if node is None:
                problems.append(f"job '{job_id}' is on unknown node '{slot[0]}'")
            elif not 0 <= slot[1] < node.gpus:
                problems.append(f"job '{job_id}' is on GPU {slot[1]} of '{slot[0]}', which has {node.gpus}")
            elif job.gpu_type is not None and node.gpu_type != job.gpu_type:
                problems.append(
                    f"job '{job_id}' wants {job.gpu_type} GPUs but is on {node.gpu_type} '{slot[0]}'"
                )
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
