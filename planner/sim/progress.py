"""How fast a simulated job makes progress on the resources it was given.

A trace's ``duration_s`` is the job's run time at its reference allocation (its
GPU-proportional share, consolidated, alone, on its ``gpu_type`` if the trace names
one). A job advances ``dt * speed`` seconds of that work in ``dt`` seconds, where
``speed`` multiplies the profile's factors for what differs from the reference.
"""

from __future__ import annotations

from collections.abc import Mapping

from planner.errors import SimulationError
from planner.model import Assignment, Node
from planner.policies.shaping import proportional_share
from planner.traces.records import TraceJob
from profiles.speed import cpu_mem_factor, gpu_type_factor
from profiles.store import ProfileStore


class SpeedModel:
    """Relative speed of a trace job under an assignment (memoised per configuration)."""

    def __init__(self, profiles: ProfileStore, nodes: Mapping[str, Node]) -> None:
        self.profiles = profiles
        self.nodes = nodes
        self._memo: dict[tuple[object, ...], float] = {}

    def speed(self, job: TraceJob, assignment: Assignment) -> float:
        node = self.nodes[assignment.gpus[0][0]]
        shape = tuple(
            (self.nodes[name].gpus, self.nodes[name].cpus, self.nodes[name].mem_gb, count)
            for name, count in assignment.per_node
        )
        key = (
            job.model,
            job.batch_size,
            job.gpu_type,
            node.gpu_type,
            shape,
            assignment.cpus,
            assignment.mem_gb,
        )
        cached = self._memo.get(key)
        if cached is not None:
            return cached
        profile = self.profiles.resolve(job.model)
        g = assignment.num_gpus
        ref_cpus, ref_mem = proportional_share(self.nodes, assignment)
        factor = gpu_type_factor(
            profile,
            gpu_type=node.gpu_type,
            reference_type=job.gpu_type,
            num_gpus=g,
            batch_size=job.batch_size,
        ) * cpu_mem_factor(
            profile,
            cpus_per_gpu=assignment.cpus / g,
            mem_gb_per_gpu=assignment.mem_gb / g,
            reference_cpus_per_gpu=ref_cpus / g,
            reference_mem_gb_per_gpu=ref_mem / g,
        )
        if not factor > 0:
            raise SimulationError(
                f"profile of {job.model!r} gives speed {factor} for {assignment.cpus} CPUs and "
                f"{assignment.mem_gb:g} GB on {node.gpu_type}: a job there would never finish"
            )
        self._memo[key] = factor
        return factor
