"""What Slurm really gave the job, checked against its plan file (pure).

The plan file is the controller's decision; Slurm's environment is the fact. They can
disagree: an admin resized the job with ``scontrol`` by hand, a plan write was lost, or a
plan file from an earlier run was left in the spool. Launching the plan's ranks then runs
the wrong world size on GPUs the job does not hold (or leaves some idle), silently. So
``mosaic-run`` compares the two before it launches (:func:`mismatch`) and, loudly, adapts
the launch to what Slurm gave (:func:`adapt`): the same execution plan re-resolved for the
GPUs really held, or a clear refusal when the plan cannot run on them.

Slurm's side, from the batch step's environment: ``SLURM_JOB_NODELIST`` (the nodes),
``SLURMD_NODENAME`` (this node), ``SLURM_JOB_GPUS`` (this node's GPU indices; absent for
a job without GPUs or on shards), ``SLURM_CPUS_ON_NODE`` and ``SLURM_MEM_PER_NODE`` (MB).
Slurm gives every node of a job the same GPU count (``--gres`` is per node).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from planner.core.errors import InputError
from planner.core.execplan import PlanError, plan_to_mapping, replan
from planner.core.hostlist import expand_hostlist
from planner.core.model import Assignment
from planner.core.plandoc import JobPlan


@dataclass(frozen=True)
class SlurmAllocation:
    """The job's allocation as its environment shows it."""

    nodes: tuple[str, ...]
    this_node: str | None
    gpus_per_node: int | None  # None: Slurm does not say (no SLURM_JOB_GPUS)
    cpus_per_node: int | None
    mem_mb_per_node: int | None

    def describe(self) -> str:
        gpus = "?" if self.gpus_per_node is None else str(self.gpus_per_node)
        return f"{len(self.nodes)} node(s) {','.join(self.nodes)} x {gpus} GPU(s)"


def slurm_allocation(env: Mapping[str, str]) -> SlurmAllocation | None:
    """The allocation in ``env``; ``None`` outside a Slurm job (no ``SLURM_JOB_NODELIST``)."""
    nodelist = env.get("SLURM_JOB_NODELIST") or ""
    if not env.get("SLURM_JOB_ID") or not nodelist.strip():
        return None
    try:
        nodes = expand_hostlist(nodelist)
    except InputError as e:
        raise InputError(f"SLURM_JOB_NODELIST: {e}") from e
    gpus = env.get("SLURM_JOB_GPUS")
    return SlurmAllocation(
        nodes=nodes,
        this_node=env.get("SLURMD_NODENAME") or None,
        gpus_per_node=len([g for g in gpus.split(",") if g.strip()]) if gpus is not None else None,
        cpus_per_node=_int(env.get("SLURM_CPUS_ON_NODE")),
        mem_mb_per_node=_int(env.get("SLURM_MEM_PER_NODE")),
    )


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


def mismatch(assignment: Assignment, alloc: SlurmAllocation) -> str | None:
    """How the plan's assignment differs from the allocation (``None``: it matches)."""
    planned = dict(assignment.per_node)
    problems = []
    if set(planned) != set(alloc.nodes):
        problems.append(f"nodes {','.join(sorted(planned))} planned, Slurm gave {','.join(alloc.nodes)}")
    if alloc.gpus_per_node is not None and alloc.this_node is not None:
        here = planned.get(alloc.this_node)
        if here is not None and here != alloc.gpus_per_node:
            problems.append(f"{here} GPU(s) planned on {alloc.this_node}, Slurm gave {alloc.gpus_per_node}")
        elif here is None and len({g for g in planned.values()}) == 1:
            (per_node,) = set(planned.values())
            if per_node != alloc.gpus_per_node:
                problems.append(f"{per_node} GPU(s) per node planned, Slurm gave {alloc.gpus_per_node}")
    return "; ".join(problems) or None


def adapt(job_plan: JobPlan, alloc: SlurmAllocation, global_batch: int | None) -> JobPlan:
    """The plan re-made for what Slurm gave: its nodes, its GPUs, the same execution plan.

    The execution plan keeps every choice but the data-parallel split: ``dp`` follows the
    GPUs, and a ``micro_batch``/``grad_accum`` that no longer divides the global batch is
    derived again. Raises :class:`PlanError` when the plan cannot run on these GPUs (e.g.
    ``tp x pp`` does not divide them).
    """
    per_node = alloc.gpus_per_node
    if per_node is None:
        (per_node,) = {g for _, g in job_plan.assignment.per_node} or {1}
    gpus = tuple((node, k) for node in alloc.nodes for k in range(per_node))
    if not gpus:
        raise PlanError(f"job {job_plan.job_id}: Slurm gave no GPU ({alloc.describe()})")
    cpus = (alloc.cpus_per_node or 0) * len(alloc.nodes) or job_plan.assignment.cpus
    mem_gb = (alloc.mem_mb_per_node or 0) * len(alloc.nodes) / 1024 or job_plan.assignment.mem_gb
    where = f"job {job_plan.job_id}: plan version {job_plan.version} on {alloc.describe()}"
    plan = replan(job_plan.exec_plan, len(gpus), global_batch, where)
    assignment = replace(
        job_plan.assignment, gpus=gpus, cpus=cpus, mem_gb=mem_gb, plan=plan_to_mapping(plan) or None
    )
    return replace(job_plan, assignment=assignment, exec_plan=plan)
