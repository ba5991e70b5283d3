"""What happens to a job between two consecutive rounds: the one definition of a restart,
a migration and a preemption (pure).

The simulator (:mod:`planner.sim.engine`), the live controller's diff
(:mod:`slurm_plugin.controller.actuate`) and ``mosaic report`` (:mod:`slurm_plugin.report`)
all count with :func:`classify` and :class:`Change`, so the three agree on a trace.

A running job is compared by its *shape*, what Slurm can express and tell apart
(:func:`slurm_shape`): its GPU count on each node, its CPUs, its memory per node in whole
MB (``scontrol update MinMemoryNode`` takes integer MB), and its execution plan. Slurm
picks the GPU indices inside a node, so a plan that only renumbers a job's GPUs on the
same nodes changes nothing: no relaunch, no restart, no migration.

===========================  ==============================================  =============
before -> after              change                                          counts as
===========================  ==============================================  =============
not running -> running       ``START`` (it never ran before)                 nothing
not running -> running       ``RESUMED`` (it ran before: a resume)           a restart
running -> running           ``NONE``: same shape (renumbered GPUs too)      nothing
running -> running           ``MOVED``: other nodes, or GPUs moved between   a restart and
                             its nodes                                       a migration
running -> running           ``RESIZED``: same nodes, another GPU count      a restart
running -> running           ``SHARED``: same GPUs per node, now sharing a   a restart
                             GPU, other CPUs/memory/plan
running -> running           ``RESHAPED``: same GPUs per node, other CPUs,   a restart
                             memory or plan
running -> not running       ``PREEMPTED``                                   a preemption
===========================  ==============================================  =============

A migration is a job running in both consecutive rounds on other nodes: Tesserae's
definition (running in consecutive rounds on a different GPU set) at the granularity
Slurm can express. A preempted job that later resumes, on its old nodes or on others, is
a preemption and then a restart (``RESUMED``), never a migration: between the two it did
not run.

The plan's own view, :func:`gpu_set_change`, is finer and counts something else: which
GPU *indices* a round gives each job, as the planner drew them (a plan's ``started``,
``preempted``, ``migrated``, ``reshaped``, and the ``moved`` reason; what Tesserae's
relabelling minimises). A renumbering on the same nodes is a new GPU set there, yet no
relaunch here. Restarts, migrations and preemptions are always :func:`classify`'s.
"""

from __future__ import annotations

import math
from enum import StrEnum

from planner.core.model import Assignment

Shape = tuple[tuple[tuple[str, int], ...], int, int]
"""(GPUs per node in node-name order, total CPUs, memory per node in MB)."""


class Change(StrEnum):
    """What happened to one job between two consecutive rounds (see the module's table).

    The values of the four relaunches are the live controller's action reasons
    (``moved``, ``resized``, ``shared``, ``reshaped``; ``preempted`` for a stop).
    """

    NONE = "none"
    START = "start"
    RESUMED = "resumed"
    MOVED = "moved"
    RESIZED = "resized"
    SHARED = "shared"
    RESHAPED = "reshaped"
    PREEMPTED = "preempted"

    @property
    def relaunch(self) -> bool:
        """Running in both rounds, stopped and started again in the same round."""
        return self in _RELAUNCHES

    @property
    def restart(self) -> bool:
        """A stop and relaunch: a relaunch, or a resume after a preemption (costs a restart)."""
        return self is Change.RESUMED or self in _RELAUNCHES

    @property
    def migration(self) -> bool:
        return self is Change.MOVED


_RELAUNCHES = frozenset({Change.MOVED, Change.RESIZED, Change.SHARED, Change.RESHAPED})


def mem_mb_per_node(a: Assignment) -> int:
    """``a``'s memory on each of its nodes in whole MB, rounded up (what Slurm is asked for)."""
    return math.ceil(a.mem_gb * 1024 / max(1, len(a.per_node)) - 1e-6)


def slurm_shape(a: Assignment) -> Shape:
    """What Slurm can tell apart of ``a``: GPUs per node, total CPUs, memory per node (MB)."""
    return a.per_node, a.cpus, mem_mb_per_node(a)


def classify(before: Assignment | None, after: Assignment | None, *, ran_before: bool = False) -> Change:
    """What happens to a job that runs as ``before`` in one round and as ``after`` in the next.

    Parameters
    ----------
    before, after
        The job's assignment in the earlier and the later round; ``None``: not running.
        ``after`` is compared as given: a caller whose cluster rounds the request (the live
        controller rounds CPUs to whole CPUs per task) passes it rounded.
    ran_before
        Whether the job ever ran before ``after`` when ``before`` is ``None`` (a resume,
        not a first start).

    Returns
    -------
    Change
        The row of the module's table; its ``restart``, ``migration`` and ``relaunch``
        properties say what it counts as.

    Examples
    --------
    >>> a = Assignment(gpus=(("n1", 0), ("n1", 1)), cpus=8, mem_gb=32.0)
    >>> classify(a, Assignment(gpus=(("n1", 2), ("n1", 3)), cpus=8, mem_gb=32.0))
    <Change.NONE: 'none'>
    >>> classify(a, Assignment(gpus=(("n2", 0), ("n2", 1)), cpus=8, mem_gb=32.0))
    <Change.MOVED: 'moved'>
    >>> classify(None, a, ran_before=True).restart
    True
    """
    if before is None:
        if after is None:
            return Change.NONE
        return Change.RESUMED if ran_before else Change.START
    if after is None:
        return Change.PREEMPTED
    if before.per_node != after.per_node:
        if before.nodes != after.nodes or before.num_gpus == after.num_gpus:
            return Change.MOVED
        return Change.RESIZED
    if slurm_shape(before) == slurm_shape(after) and (before.plan or None) == (after.plan or None):
        return Change.NONE
    if after.shares_with and not before.shares_with:
        return Change.SHARED
    return Change.RESHAPED


class GpuSetChange(StrEnum):
    """What a plan changes of one job's GPU set, as the planner drew it (:func:`gpu_set_change`)."""

    KEPT = "kept"
    """The same GPUs, CPUs, memory and plan (or not running before nor after)."""
    STARTED = "started"
    """Not running before, given GPUs now (a first start or a resume alike)."""
    STOPPED = "stopped"
    """Running before, given no GPUs now."""
    MOVED = "moved"
    """Running before and now, on another set of GPU indices (a renumbering included)."""
    RESHAPED = "reshaped"
    """The same GPUs, other CPUs, memory (beyond float noise) or execution plan."""


def gpu_set_change(before: Assignment | None, after: Assignment | None) -> GpuSetChange:
    """What the plan changes of a job running as ``before`` when it assigns it ``after``
    (``None``: not running): the plan's GPU-level view, which :func:`planner.pipeline.finalize`
    sorts a round's jobs by. What it costs, in restarts and migrations, is :func:`classify`.

    Examples
    --------
    >>> a = Assignment(gpus=(("n1", 0), ("n1", 1)), cpus=8, mem_gb=32.0)
    >>> gpu_set_change(a, Assignment(gpus=(("n1", 2), ("n1", 3)), cpus=8, mem_gb=32.0))
    <GpuSetChange.MOVED: 'moved'>
    >>> gpu_set_change(a, Assignment(gpus=a.gpus, cpus=4, mem_gb=32.0))
    <GpuSetChange.RESHAPED: 'reshaped'>
    """
    if after is None:
        return GpuSetChange.KEPT if before is None else GpuSetChange.STOPPED
    if before is None:
        return GpuSetChange.STARTED
    if after is before:
        return GpuSetChange.KEPT
    if after.gpus != before.gpus:
        return GpuSetChange.MOVED
    return GpuSetChange.KEPT if after.same_resources(before) else GpuSetChange.RESHAPED
