"""Small helpers shared by the policies (ordering keys, options, consolidated GPU choice)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from planner.errors import ConfigError
from planner.fields import Fields
from planner.model import GpuSlot, Job, Snapshot


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


def consolidated_slots(
    snapshot: Snapshot, job: Job, count: int, free: Mapping[str, Sequence[int]]
) -> tuple[GpuSlot, ...] | None:
    """``count`` of the ``free`` GPUs (per node) for ``job``: on one node (best fit), else on the
    fewest nodes of one type accepted by the job, the same count on each; ``None`` if neither.

    The joint-allocation stages' consolidation rule (Tesserae §4.1's: a job that fits a node
    never spans nodes, and a spread job has an equal share on each of its nodes).
    """
    nodes = [n for n in snapshot.nodes if job.accepts_type(n.gpu_type)]
    fits = sorted((len(free[n.name]), n.name) for n in nodes if len(free[n.name]) >= count)
    if fits:
        name = fits[0][1]
        return tuple((name, k) for k in free[name][:count])
    for spread in range(2, len(nodes) + 1):
        if count % spread:
            continue
        per = count // spread
        by_type: dict[str, list[tuple[int, str]]] = {}
        for n in nodes:
            if len(free[n.name]) >= per:
                by_type.setdefault(n.gpu_type, []).append((len(free[n.name]), n.name))
        for gpu_type in sorted(by_type):
            group = sorted(by_type[gpu_type])
            if len(group) >= spread:
                chosen = sorted(name for _, name in group[:spread])
                return tuple((name, k) for name in chosen for k in free[name][:per])
    return None
