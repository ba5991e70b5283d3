"""Task layouts: the start fields Slurm 22.05 accepts for each way a job asks for tasks (pure).

The rules were measured on the test cluster (``slurm_plugin/controller/layout.py``); the
live regression tests are in ``test_live_layouts.py``.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from planner.core.model import Assignment
from slurm_plugin.controller.layout import (
    TaskLayout,
    expressible_cpus,
    layout_fields,
    layout_of,
    layout_problem,
)
from slurm_plugin.controller.rounddiff import slurm_shape, start_fields
from tests.builders import make_slurm_job

BASE = make_slurm_job(gpus_per_node=2)


def _a(per_node: dict[str, int], cpus: int) -> Assignment:
    return Assignment(
        gpus=tuple((n, k) for n, g in per_node.items() for k in range(g)), cpus=cpus, mem_gb=8.0
    )


def test_a_job_without_task_options_is_one_task_per_node():
    layout = layout_of(BASE)  # --gres=gpu:2 (Slurm shows tasks=1)
    assert layout == TaskLayout()
    assert layout_fields(_a({"n1": 4}, 7), layout) == {
        "NumTasks": "1", "CPUsPerTask": "7", "NumCPUs": "7", "MinCPUsNode": "7",
    }  # fmt: skip
    assert layout_fields(_a({"n1": 2, "n2": 2}, 8), layout)["NumTasks"] == "2"


def test_ntasks_per_gpu_is_kept_when_the_job_is_resized():
    layout = layout_of(replace(BASE, tasks=2))  # --ntasks=2 --gres=gpu:2
    assert layout.tasks_per_gpu == Fraction(1)
    assert layout_fields(_a({"n1": 4}, 8), layout) == {
        "NumTasks": "4", "CPUsPerTask": "2", "NumCPUs": "8", "MinCPUsNode": "8",
    }  # fmt: skip
    # The reported bug: NumCPUs=8 with 2 tasks of 1 CPU sat in BadConstraints forever.
    fields = layout_fields(_a({"n1": 2}, 8), layout)
    assert int(fields["NumTasks"]) * int(fields["CPUsPerTask"]) == int(fields["NumCPUs"]) == 8


def test_ntasks_per_node_is_updated_with_the_tasks():
    layout = layout_of(replace(BASE, tasks=2, tasks_per_node=2))  # -N1 --ntasks-per-node=2
    fields = layout_fields(_a({"n1": 2, "n2": 2}, 8), layout)
    assert (fields["NumTasks"], fields["TasksPerNode"], fields["CPUsPerTask"]) == ("4", "2", "2")
    assert fields["MinCPUsNode"] == "4"


def test_a_shape_that_splits_tasks_unevenly_is_refused_with_the_reason():
    layout = layout_of(replace(BASE, tasks=2, gpus_per_node=4))  # --ntasks=2 --gres=gpu:4
    assert layout.tasks_per_gpu == Fraction(1, 2)
    assert "not a whole number of tasks per node" in (
        layout_problem(_a({"n1": 1, "n2": 1, "n3": 1}, 6), layout) or ""
    )
    layout = layout_of(replace(BASE, tasks=2))
    assert "cannot give each of the job's 4 tasks a CPU" in (layout_problem(_a({"n1": 4}, 3), layout) or "")


def test_gpus_per_task_jobs_start_as_asked_and_are_never_resized():
    sj = replace(BASE, tasks=2, tasks_per_node=2, gpus_per_task=1)  # --ntasks=2 --gpus-per-task=1
    layout = layout_of(sj)
    assert layout.fixed_gpus == "--gpus-per-task"
    assert layout_problem(_a({"n2": 2}, 8), layout) is None
    fields = start_fields(_a({"n2": 2}, 8), "audit", layout=layout)
    assert "Gres" not in fields  # Slurm: "Invalid generic resource (gres) specification"
    assert (fields["NumTasks"], fields["CPUsPerTask"], fields["TasksPerNode"]) == ("2", "4", "2")
    assert "refuses to change its GPUs" in (layout_problem(_a({"n1": 4}, 8), layout) or "")
    assert layout_of(replace(BASE, tasks=2, gpus_per_job=2)).fixed_gpus == "--gpus"


def test_the_stored_layout_round_trips():
    for layout in (
        TaskLayout(),
        layout_of(replace(BASE, tasks=3, gpus_per_node=2)),
        layout_of(replace(BASE, tasks=2, tasks_per_node=2, gpus_per_task=1)),
    ):
        assert TaskLayout.from_json(layout.to_json()) == layout
    assert TaskLayout.from_json({"tasks_per_gpu": "x/0"}) is None
    assert TaskLayout.from_json("nonsense") is None


@given(
    tasks_per_gpu=st.sampled_from([None, Fraction(1), Fraction(2), Fraction(1, 2)]),
    nodes=st.integers(1, 4),
    gpus_per_node=st.integers(1, 8),
    cpus=st.integers(1, 200),
)
def test_every_accepted_start_is_consistent_and_never_exceeds_the_plan(
    tasks_per_gpu, nodes, gpus_per_node, cpus
):
    layout = TaskLayout(tasks_per_gpu=tasks_per_gpu)
    a = _a({f"n{k}": gpus_per_node for k in range(nodes)}, cpus)
    if layout_problem(a, layout) is not None:
        return
    f = layout_fields(a, layout)
    tasks, per_task, total = int(f["NumTasks"]), int(f["CPUsPerTask"]), int(f["NumCPUs"])
    assert tasks * per_task == total == expressible_cpus(a, layout) <= cpus
    assert tasks % nodes == 0 and int(f["MinCPUsNode"]) * nodes == total
    # The diff compares against what Slurm can express: the job is not relaunched for the rest.
    assert slurm_shape(replace(a, cpus=total)) == slurm_shape(a, layout)
