"""The plan file against Slurm's environment (pure)."""

import pytest

from planner.core.execplan import PlanError, plan_from_mapping
from planner.core.model import Assignment
from planner.core.plandoc import JobPlan
from wrapper.allocation import adapt, mismatch, slurm_allocation

ENV = {"SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[1-2]", "SLURMD_NODENAME": "n1", "SLURM_JOB_GPUS": "0,1"}


def _plan(per_node, plan=None, version=3):
    gpus = tuple((n, k) for n, g in per_node.items() for k in range(g))
    a = Assignment(gpus, 8, 16.0, plan)
    return JobPlan("9", version, a, plan_from_mapping(plan))


def test_outside_slurm_there_is_nothing_to_check():
    assert slurm_allocation({"SLURM_JOB_ID": "9"}) is None and slurm_allocation({}) is None


def test_a_plan_that_matches_is_left_alone():
    alloc = slurm_allocation(ENV)
    assert alloc is not None and mismatch(_plan({"n1": 2, "n2": 2}).assignment, alloc) is None


def test_nodes_and_gpu_counts_that_differ_are_named():
    alloc = slurm_allocation(ENV)
    assert mismatch(_plan({"n1": 4}).assignment, alloc) == (
        "nodes n1 planned, Slurm gave n1,n2; 4 GPU(s) planned on n1, Slurm gave 2"
    )


def test_adapting_keeps_the_plan_but_the_data_parallel_split():
    alloc = slurm_allocation({**ENV, "SLURM_CPUS_ON_NODE": "6", "SLURM_MEM_PER_NODE": "4096"})
    adapted = adapt(
        _plan({"n1": 2}, {"tp": 2, "zero_stage": 1, "micro_batch": 4, "global_batch": 32}), alloc, None
    )
    assert adapted.workers == 4 and adapted.assignment.nodes == ("n1", "n2")
    assert (adapted.assignment.cpus, adapted.assignment.mem_gb) == (12, 8.0)
    p = adapted.exec_plan
    assert (p.dp, p.tp, p.zero_stage, p.micro_batch, p.grad_accum, p.global_batch) == (2, 2, 1, 4, 4, 32)


def test_a_plan_that_cannot_run_on_what_slurm_gave_is_refused():
    alloc = slurm_allocation({**ENV, "SLURM_JOB_NODELIST": "n1", "SLURM_JOB_GPUS": "0,1,2"})
    with pytest.raises(PlanError, match="cannot be split into tp 2"):
        adapt(_plan({"n1": 2}, {"tp": 2}), alloc, None)
