"""Mosaic's planner: pure scheduling rounds for DL training on GPU clusters.

Data in (:class:`Snapshot`), decision out (:class:`RoundPlan`); no subprocess, no clock,
no file writes. The simulator (:mod:`planner.sim`) and the live controller both call
:func:`plan_round`.

The names below are loaded on first use (PEP 562): this file runs whenever any module of
:mod:`planner.core` (the shared vocabulary, the lowest layer, which :mod:`profiles` builds
on) is imported, so it imports nothing of the pipeline when it runs, and the layers stay
one-way (``tests/test_boundaries.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.config import PRESETS, SchedulerConfig, build_scheduler, preset
    from planner.core.model import Assignment, GpuSlot, Job, JobState, Node, Outcome, RoundPlan, Snapshot
    from planner.pipeline import Scheduler, plan_round

_HOME = {
    "PRESETS": "planner.config",
    "SchedulerConfig": "planner.config",
    "build_scheduler": "planner.config",
    "preset": "planner.config",
    "Assignment": "planner.core.model",
    "GpuSlot": "planner.core.model",
    "Job": "planner.core.model",
    "JobState": "planner.core.model",
    "Node": "planner.core.model",
    "Outcome": "planner.core.model",
    "RoundPlan": "planner.core.model",
    "Snapshot": "planner.core.model",
    "Scheduler": "planner.pipeline",
    "plan_round": "planner.pipeline",
}

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


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'planner' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
