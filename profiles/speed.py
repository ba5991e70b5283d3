"""Relative speed: how much faster or slower a job runs than its reference allocation.

A trace's ``duration_s`` is measured at a *reference* allocation (its GPU-proportional
CPU/memory share, its submitted plan, and its ``gpu_type`` when given). The simulator
advances a job by ``dt * relative_speed`` seconds of that reference work. Each factor
is 1.0 when the profile has no data for it, so the neutral profile never changes a
job's speed.
"""

from __future__ import annotations

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
