"""One row of a trace."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TraceJob:
    """A job as a trace describes it.

    ``duration_s`` is the job's isolated run time with the GPU-proportional CPU/memory
    share and its submitted plan (on ``gpu_type`` when given, else on any GPU type).
    ``min_gpus``/``max_gpus``/``gpu_types`` are the elastic demand of
    :class:`planner.core.model.Job` (absent: rigid, ``num_gpus`` of ``gpu_type``).
    ``time_limit_s`` is the run time the job declared (Slurm's ``--time``), an upper bound
    a scheduler may use where it may not read ``duration_s``; ``None``: not declared.
    """

    job_id: str
    submit_time_s: float
    num_gpus: int
    duration_s: float
    model: str
    batch_size: int | None = None
    iterations: int | None = None
    gpu_type: str | None = None
    tenant: str | None = None
    guaranteed: bool = False
    deadline_s: float | None = None
    time_limit_s: float | None = None
    plan: Mapping[str, Any] | None = None
    plans: tuple[Mapping[str, Any], ...] = ()
    min_gpus: int | None = None
    max_gpus: int | None = None
    gpu_types: tuple[str, ...] = ()
