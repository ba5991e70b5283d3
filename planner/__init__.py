"""Mosaic's planner: pure scheduling rounds for DL training on GPU clusters.

Data in (:class:`Snapshot`), decision out (:class:`RoundPlan`); no subprocess, no clock,
no file writes. The simulator (:mod:`planner.sim`) and the live controller both call
:func:`plan_round`.
"""

from planner.config import PRESETS, SchedulerConfig, build_scheduler, preset
from planner.model import Assignment, GpuSlot, Job, JobState, Node, Outcome, RoundPlan, Snapshot
from planner.pipeline import Scheduler, plan_round

__all__ = [
    "PRESETS",
    "Assignment",
    "GpuSlot",
    "Job",
    "JobState",
    "Node",
    "Outcome",
    "RoundPlan",
    "Scheduler",
    "SchedulerConfig",
    "Snapshot",
    "build_scheduler",
    "plan_round",
    "preset",
]
