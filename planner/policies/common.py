"""Small helpers shared by the policies (ordering keys, options).

The consolidated GPU choice lives in :mod:`planner.slots` (re-exported here for the stages
that import it from this module)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from planner.core.errors import ConfigError
from planner.core.fields import Fields
from planner.core.model import Job
from planner.slots import consolidated_slots

__all__ = ["arrival_key", "choice", "consolidated_slots", "id_key", "options_reader", "remaining_estimate_s"]


def id_key(job_id: str) -> tuple[int, int, str]:
    """Numeric ids sort numerically ("9" before "10"), others after them, by text."""
    return (0, int(job_id), "") if job_id.isdigit() else (1, 0, job_id)


def arrival_key(job: Job) -> tuple[float, tuple[int, int, str]]:
    """The tie-break every policy ends with: earlier submission, then smaller id."""
    return job.submit_time_s, id_key(job.id)


def remaining_estimate_s(job: Job) -> float:
    """Best knowledge of a job's remaining isolated run time; +inf when unknown.

    ``remaining_s`` when the snapshot has it, else ``duration_s * (1 - progress)``,
    else ``duration_s`` for a job that never ran.
    """
    if job.remaining_s is not None:
        return job.remaining_s
    if job.duration_s is not None:
        if job.progress is not None:
            return job.duration_s * (1.0 - job.progress)
        if job.attained_gpu_s == 0:
            return job.duration_s
    return math.inf


def options_reader(options: Mapping[str, Any], component: str, allowed: list[str]) -> Fields:
    """Fields over a component's options, rejecting unknown keys."""
    f = Fields(options, f"options of {component}", ConfigError)
    f.only(allowed)
    return f


def choice(f: Fields, key: str, allowed: tuple[str, ...], default: str) -> str:
    value = f.opt_str(key) or default
    if value not in allowed:
        f.fail_key(key, f"expected one of {', '.join(allowed)}, got {value!r}")
    return value
