"""A job's task layout, and the ``scontrol update`` fields that give it a planned shape (pure).

Slurm 22.05 accepts a start only when the update is consistent with how the job was
submitted; measured on the test cluster (``scontrol update`` of a held job, then
``release``):

* A job with an explicit task count (``--ntasks``, ``--ntasks-per-node``, ``-N`` with
  tasks) sits in ``BadConstraints`` forever ("never runnable in partition") unless
  ``NumCPUs = NumTasks x CPUsPerTask`` and, when ``--ntasks-per-node`` was given, the tasks
  per node match (``TasksPerNode=``; ``NtasksPerNode=`` is refused as an update).
* A job submitted with ``--cpus-per-task`` and no task count silently runs with
  ``NumTasks x CPUsPerTask`` CPUs, whatever ``NumCPUs`` said.
* ``NumTasks``, ``CPUsPerTask`` and ``TasksPerNode`` of a pending job can be updated.
* A job whose GPUs were asked per task or per job (``--gpus-per-task``, ``--gpus``) refuses
  every GPU update ("Invalid generic resource (gres) specification"): it can be started
  where it fits with the GPUs it asked for, never resized.

So every start sets the layout explicitly: ``T`` tasks with ``CPUsPerTask = C // T`` and
``NumCPUs = T x CPUsPerTask``. ``T`` is one task per node for a job submitted without a
per-GPU task count (the batch script is one process per node; ``mosaic-run`` starts the
ranks), and keeps the job's tasks per GPU otherwise (a ``--ntasks=2 --gres=gpu:2`` job
gets 4 tasks on 4 GPUs, so a plain ``srun`` in its script still starts one rank per GPU).
A CPU count that does not divide into the tasks is rounded down
(:func:`expressible_cpus`); the diff compares against that rounded shape so such a job is
not relaunched every round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from planner.core.model import Assignment
from slurm_plugin.slurm.parse import SlurmJob


class LayoutError(ValueError):
    """The planned shape cannot be expressed for the job's task layout (the reason)."""


@dataclass(frozen=True)
class TaskLayout:
    """How a job's tasks relate to its GPUs, as it was submitted."""

    tasks_per_gpu: Fraction | None = None  # None: one task per node
    tasks_per_node_set: bool = False  # submitted with --ntasks-per-node (or --gpus-per-task)
    fixed_gpus: str | None = None  # how the GPUs were asked when Slurm refuses to change them
    fixed_gpus_per_node: int = 0
    fixed_nodes: int = 0
    fixed_tasks: int = 0

    def to_json(self) -> dict[str, object]:
        """The layout as stored with the job's metadata (key ``task_layout``)."""
        doc: dict[str, object] = {}
        if self.tasks_per_gpu is not None:
            doc["tasks_per_gpu"] = str(self.tasks_per_gpu)
        if self.tasks_per_node_set:
            doc["tasks_per_node_set"] = True
        if self.fixed_gpus is not None:
            doc["fixed_gpus"] = self.fixed_gpus
            doc["fixed_gpus_per_node"] = self.fixed_gpus_per_node
            doc["fixed_nodes"] = self.fixed_nodes
            doc["fixed_tasks"] = self.fixed_tasks
        return doc

    @classmethod
    def from_json(cls, doc: object) -> TaskLayout | None:
        """The stored layout; ``None`` when absent or unreadable (the caller reads Slurm again)."""
        if not isinstance(doc, dict):
            return None
        try:
            ratio = doc.get("tasks_per_gpu")
            return cls(
                tasks_per_gpu=Fraction(str(ratio)) if ratio is not None else None,
                tasks_per_node_set=bool(doc.get("tasks_per_node_set", False)),
                fixed_gpus=str(doc["fixed_gpus"]) if doc.get("fixed_gpus") else None,
                fixed_gpus_per_node=int(doc.get("fixed_gpus_per_node", 0)),
                fixed_nodes=int(doc.get("fixed_nodes", 0)),
                fixed_tasks=int(doc.get("fixed_tasks", 0)),
            )
        except (TypeError, ValueError, ZeroDivisionError):
            return None


def layout_of(sj: SlurmJob) -> TaskLayout:
    """The layout of a job as Slurm shows it *before* Mosaic changed it (first sight)."""
    gpus = sj.gpus_held_per_node * max(1, sj.num_nodes)
    ratio = None
    if sj.tasks > max(1, sj.num_nodes) and gpus > 0:
        ratio = Fraction(sj.tasks, gpus)
    fixed = None
    if sj.gpus_per_task:
        fixed = "--gpus-per-task"
    elif sj.gpus_per_job:
        fixed = "--gpus"
    return TaskLayout(
        tasks_per_gpu=ratio,
        tasks_per_node_set=sj.tasks_per_node > 0,
        fixed_gpus=fixed,
        fixed_gpus_per_node=sj.gpus_held_per_node if fixed else 0,
        fixed_nodes=max(1, sj.num_nodes) if fixed else 0,
        fixed_tasks=sj.tasks if fixed else 0,
    )


def tasks_for(a: Assignment, layout: TaskLayout) -> int:
    """The number of tasks the job gets for ``a`` (raises :class:`LayoutError`)."""
    nodes = max(1, len(a.per_node))
    if layout.fixed_gpus is not None:
        return max(1, layout.fixed_tasks)
    if layout.tasks_per_gpu is None:
        return nodes
    tasks = layout.tasks_per_gpu * a.num_gpus
    if tasks.denominator != 1 or tasks.numerator % nodes:
        raise LayoutError(
            f"the job runs {layout.tasks_per_gpu} task(s) per GPU (as submitted with --ntasks); "
            f"{a.num_gpus} GPUs on {nodes} node(s) is not a whole number of tasks per node"
        )
    return max(nodes, int(tasks))


def layout_problem(a: Assignment, layout: TaskLayout) -> str | None:
    """Why ``a`` cannot be given to a job of this layout (``None``: it can)."""
    nodes = max(1, len(a.per_node))
    if layout.fixed_gpus is not None:
        per_node = {g for _, g in a.per_node}
        if per_node != {layout.fixed_gpus_per_node} or nodes != layout.fixed_nodes:
            return (
                f"submitted with {layout.fixed_gpus}, so Slurm refuses to change its GPUs "
                f"('Invalid generic resource specification'): it runs only as asked, "
                f"{layout.fixed_nodes} node(s) x {layout.fixed_gpus_per_node} GPUs "
                "(submit with --gres=gpu:N to let Mosaic resize it)"
            )
    try:
        tasks = tasks_for(a, layout)
    except LayoutError as e:
        return str(e)
    if a.cpus < tasks:
        return f"{a.cpus} CPUs cannot give each of the job's {tasks} tasks a CPU"
    return None


def expressible_cpus(a: Assignment, layout: TaskLayout | None) -> int:
    """The CPUs Slurm will really allocate for ``a``: a whole number per task."""
    try:
        tasks = tasks_for(a, layout or TaskLayout())
    except LayoutError:
        return a.cpus
    return max(1, a.cpus // tasks) * tasks if a.cpus >= tasks else a.cpus


def layout_fields(a: Assignment, layout: TaskLayout) -> dict[str, str]:
    """``NumNodes``/``Gres``-free task and CPU fields of a start (call :func:`layout_problem` first)."""
    nodes = max(1, len(a.per_node))
    tasks = tasks_for(a, layout)
    per_task = max(1, a.cpus // tasks)
    fields = {
        "NumTasks": str(tasks),
        "CPUsPerTask": str(per_task),
        "NumCPUs": str(per_task * tasks),
        "MinCPUsNode": str(per_task * math.ceil(tasks / nodes)),
    }
    if layout.tasks_per_node_set:
        fields["TasksPerNode"] = str(tasks // nodes)
    return fields
