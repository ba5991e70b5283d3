"""Mosaic's planner: pure scheduling rounds for DL training on GPU clusters.

Data in (:class:`Snapshot`), decision out (:class:`RoundPlan`); no subprocess, no clock,
no file writes. The simulator (:mod:`planner.sim`) and the live controller both call
:func:`plan_round`.

The names below are loaded on first use (PEP 562), so importing a leaf module such as
:mod:`planner.errors`, :mod:`planner.fields` or :mod:`planner.execplan` (which
:mod:`profiles` builds on) does not import the pipeline, and the two packages form no
import cycle (``tests/test_boundaries.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.config import PRESETS, SchedulerConfig, build_scheduler, preset
    from planner.model import Assignment, GpuSlot, Job, JobState, Node, Outcome, RoundPlan, Snapshot
    from planner.pipeline import Scheduler, plan_round

_HOME = {
    "PRESETS": "planner.config",
    "SchedulerConfig": "planner.config",
    "build_scheduler": "planner.config",
    "preset": "planner.config",
    "Assignment": "planner.model",
    "GpuSlot": "planner.model",
    "Job": "planner.model",
    "JobState": "planner.model",
    "Node": "planner.model",
    "Outcome": "planner.model",
    "RoundPlan": "planner.model",
    "Snapshot": "planner.model",
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
