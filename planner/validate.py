"""Invariants every RoundPlan must satisfy, checked in one place.

A job's assignment has a GPU count the job accepts (``num_gpus`` for a rigid job, any
count in ``[min_gpus, max_gpus]`` for an elastic one), GPUs only of types it accepts,
and an execution plan whose ``dp x tp x pp`` layout fits the GPUs given; no GPU holds
more jobs than the scheduler allows and no node gives more CPUs or memory than it has.

The simulator checks every plan that changes anything (a violation is a bug in a stage,
so it stops) with :class:`PlanChecker`, which gives :func:`plan_violations`' answer for a
sequence of plans at the cost of what changed since the last plan it checked; property
tests check random snapshots.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from planner.core.execplan import PlanError, plan_from_mapping, resolve
from planner.core.model import Assignment, GpuSlot, Job, Node, RoundPlan, Snapshot

MEM_TOLERANCE_GB = 1e-6


def node_usage(assignments: Iterable[Assignment]) -> tuple[dict[str, int], dict[str, float]]:
    """CPUs and memory (GB) the assignments hold on each node (:meth:`Assignment.node_shares`)."""
    cpus: dict[str, int] = {}
    mem: dict[str, float] = {}
    for a in assignments:
        for node, c, m in a.node_shares():
            cpus[node] = cpus.get(node, 0) + c
            mem[node] = mem.get(node, 0.0) + m
    return cpus, mem


def over_committed(nodes: Mapping[str, Node], assignments: Iterable[Assignment]) -> list[str]:
    """The nodes whose CPUs or memory the assignments exceed, by name."""
    cpus, mem = node_usage(assignments)
    return [n for n in sorted(cpus) if cpus[n] > nodes[n].cpus or mem[n] > nodes[n].mem_gb + MEM_TOLERANCE_GB]


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
        for slot in _job_problems(job_id, job, a, nodes, problems):
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


def _job_problems(
    job_id: str, job: Job, a: Assignment, nodes: Mapping[str, Node], problems: list[str]
) -> list[GpuSlot]:
    """Append what is wrong with one job's assignment to ``problems``; the GPUs that count
    towards the per-GPU totals (those that exist and are of a type the job accepts)."""
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
    counted = []
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
            counted.append(slot)
    return counted


class PlanChecker:
    """:func:`plan_violations` for a sequence of plans, at the cost of what changed.

    It remembers the assignments of the last plan it checked with their per-GPU, per-node
    CPU and per-node memory totals. A plan's assignment that *is* (the same object) the one
    the same job had in that plan was checked then against that job: it skips the per-job
    checks again, as ``checked`` does in :func:`plan_violations`. The totals are updated by
    the assignments that left or came, and only the GPUs and nodes those touch are checked
    (the others passed last time and did not change). A node's memory total is summed
    afresh from its jobs' shares each time it is touched, so no rounding error builds up
    (the order of that sum may differ from :func:`plan_violations`', by the last bits of
    a float against a tolerance of 1e-6 GB). A plan on another node tuple starts over.
    The answer is :func:`plan_violations`' for the same plan, provided every plan checked
    before passed (a failing plan stops the simulation).
    """

    def __init__(self) -> None:
        self._reset(None)

    def _reset(self, nodes: tuple[Node, ...] | None) -> None:
        self._nodes = nodes
        self._given: dict[str, tuple[Assignment, list[GpuSlot]]] = {}
        self._gpu_users: dict[GpuSlot, int] = {}
        self._cpus: dict[str, dict[str, int]] = {}  # node -> job -> CPUs there
        self._mem: dict[str, dict[str, float]] = {}  # node -> job -> GB there

    def violations(
        self,
        snapshot: Snapshot,
        plan: RoundPlan,
        max_jobs_per_gpu: int = 1,
        jobs: Mapping[str, Job] | None = None,
    ) -> list[str]:
        """Every broken invariant of ``plan`` against ``snapshot`` (``jobs``: its jobs by id,
        when the caller has them), as :func:`plan_violations` says them."""
        if snapshot.nodes is not self._nodes:
            self._reset(snapshot.nodes)
        given, assignments = self._given, plan.assignments
        gpu_users, cpus_on, mem_on = self._gpu_users, self._cpus, self._mem
        slots: set[GpuSlot] = set()
        touched: set[str] = set()
        for job_id in [j for j, (a, _) in given.items() if assignments.get(j) is not a]:
            a, counted = given.pop(job_id)
            for slot in counted:
                gpu_users[slot] -= 1
            for node_name, _, _ in a.node_shares():
                del cpus_on[node_name][job_id], mem_on[node_name][job_id]
                touched.add(node_name)
        problems: list[str] = []
        nodes = snapshot.nodes_by_name
        lookup = jobs if jobs is not None else {j.id: j for j in snapshot.jobs}
        for job_id, a in assignments.items():
            if job_id in given:  # the very object checked before (the others just left)
                continue
            job = lookup.get(job_id)
            if job is None:
                problems.append(f"job '{job_id}' is assigned but not in the snapshot")
                continue
            counted = _job_problems(job_id, job, a, nodes, problems)
            for slot in counted:
                gpu_users[slot] = gpu_users.get(slot, 0) + 1
            slots.update(counted)
            for node_name, cpus, mem in a.node_shares():
                cpus_on.setdefault(node_name, {})[job_id] = cpus
                mem_on.setdefault(node_name, {})[job_id] = mem
                touched.add(node_name)
            given[job_id] = (a, counted)
        for slot in sorted(slots):
            users = gpu_users[slot]
            if users > max_jobs_per_gpu:
                holders = [j for j, a in assignments.items() if slot in a.gpus]
                problems.append(f"GPU {slot[1]} of '{slot[0]}' holds {users} jobs ({', '.join(holders)})")
        for node_name in sorted(touched):
            node = nodes.get(node_name)
            if node is None:
                continue
            cpus_used = sum(cpus_on[node_name].values())
            if cpus_used > node.cpus:
                problems.append(f"node '{node_name}' is given {cpus_used} CPUs of {node.cpus}")
            mem_used = sum(mem_on[node_name].values())
            if mem_used > node.mem_gb + MEM_TOLERANCE_GB:
                problems.append(f"node '{node_name}' is given {mem_used:.3f} GB of {node.mem_gb}")
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
