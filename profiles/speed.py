"""Relative speed: how much faster or slower a job runs than its reference allocation.

A trace's ``duration_s`` is measured at a *reference* allocation (its GPU-proportional
CPU/memory share, its submitted plan, and its ``gpu_type`` when given). The simulator
advances a job by ``dt * relative_speed`` seconds of that reference work. Each factor
is 1.0 when the profile has no data for it, so the neutral profile never changes a
job's speed. :func:`table_factor` asks an iteration-time model (the measured Crius or
Gavel tables, or a fitted one) instead, for models the profiles do not measure;
:func:`measured_factor` asks Rubick's A800 measurements, placement by placement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from planner.core.errors import InputError
from planner.core.execplan import plan_from_mapping, resolve
from profiles.perfmodel.query import ModelShape, Query
from profiles.perfmodel.rubick_measured import RubickMeasured, packed
from profiles.perfmodel.table import IterationTimeModel
from profiles.schema import Profile


def gpu_type_factor(
    profile: Profile,
    *,
    gpu_type: str,
    reference_type: str | None,
    num_gpus: int,
    batch_size: int | None,
) -> float:
    """Throughput on ``gpu_type`` relative to ``reference_type`` (Gavel's measurements)."""
    if reference_type is None or reference_type == gpu_type:
        return 1.0
    here = profile.steps_per_s(gpu_type, num_gpus, batch_size)
    there = profile.steps_per_s(reference_type, num_gpus, batch_size)
    if here is None or there is None or there <= 0:
        return 1.0
    return here / there


def cpu_mem_factor(
    profile: Profile,
    *,
    cpus_per_gpu: float,
    mem_gb_per_gpu: float,
    reference_cpus_per_gpu: float,
    reference_mem_gb_per_gpu: float,
) -> float:
    """W(actual) / W(reference) from the sensitivity matrix (Synergy §3.1)."""
    matrix = profile.sensitivity
    if matrix is None:
        return 1.0
    reference = matrix.at(reference_cpus_per_gpu, reference_mem_gb_per_gpu)
    if reference <= 0:
        return 1.0
    return matrix.at(cpus_per_gpu, mem_gb_per_gpu) / reference


def lookup_shape(model: str) -> ModelShape:
    """A :class:`ModelShape` that only names ``model``, for the tables that look models up by
    name (Crius, Gavel); its formula constants are placeholders that they never read."""
    return ModelShape(name=model, params=1.0, seq_len=1, hidden=1, layers=1)


def table_query(
    model: str,
    batch_size: int,
    gpu_type: str,
    gpus: int,
    nodes: int = 1,
    plan: Mapping[str, Any] | None = None,
) -> Query | None:
    """The query of ``model`` at a global batch, GPU type and count and a plan (``None``:
    plain data parallelism); ``None`` when the plan does not resolve for that count."""
    try:
        resolved = resolve(plan_from_mapping(plan), gpus, batch_size, f"model {model!r}")
        return Query(model=lookup_shape(model), plan=resolved, nodes=nodes, gpu_type=gpu_type)
    except InputError:
        return None


def table_factor(
    times: IterationTimeModel,
    *,
    model: str,
    batch_size: int | None,
    reference_type: str,
    reference_gpus: int,
    reference_plan: Mapping[str, Any] | None,
    gpu_type: str,
    gpus: int,
    nodes: int,
    plan: Mapping[str, Any] | None,
) -> float | None:
    """Iteration time at the reference (consolidated, the submitted plan) over the time at
    ``gpus`` GPUs of ``gpu_type`` on ``nodes`` servers with ``plan``: the job's speed there
    relative to its reference, the global batch fixed. ``None`` when either is unknown."""
    if batch_size is None:
        return None
    there = table_query(model, batch_size, reference_type, reference_gpus, 1, reference_plan)
    here = table_query(model, batch_size, gpu_type, gpus, nodes, plan)
    if there is None or here is None:
        return None
    t_ref, t_here = times.iteration_time_s(there), times.iteration_time_s(here)
    if t_ref is None or t_here is None or not (t_ref > 0 and t_here > 0):
        return None
    return t_ref / t_here


def measured_factor(
    times: RubickMeasured,
    *,
    model: str,
    batch_size: int | None,
    reference_gpus: int,
    reference_plan: Mapping[str, Any] | None,
    placement: Sequence[int],
    plan: Mapping[str, Any] | None,
    cpus_per_gpu: float | None = None,
) -> float | None:
    """Rubick's A800 measurements (:mod:`profiles.perfmodel.rubick_measured`): the iteration
    time at the reference (``reference_gpus`` packed 8 to a node, the submitted plan) over
    the time with ``plan`` on ``placement`` (GPUs per node), the global batch fixed; so a
    faster plan or placement runs faster and fewer GPUs slower. ``None`` for a model it
    does not know or when either time is unknown (plan not resolvable, not in memory)."""
    if not times.knows(model):
        return None
    try:
        ref_plan, here_plan = plan_from_mapping(reference_plan), plan_from_mapping(plan)
    except InputError:
        return None
    there = times.time_s(model, ref_plan, packed(reference_gpus), batch_size, cpus_per_gpu)
    here = times.time_s(model, here_plan, placement, batch_size, cpus_per_gpu)
    if there is None or here is None:
        return None
    return there.time_s / here.time_s
