"""What a job asks for along each resource: Synergy's job demand vector (§3.2).

GPU demand is fixed (the user's request). The best-case CPU and memory are the
*smallest* values on the job's sensitivity matrix that reach its saturated throughput,
within ``tolerance`` (5 % by default: a plateau measured with noise still counts as
one). A job with no sensitivity profile asks for its GPU-proportional share: with
nothing known, Mosaic neither takes resources away from it nor gives it more.

Everything here is per GPU; a job's totals are these times its GPU count (Synergy's
simulator applies the 1-GPU profile to every GPU count, and so does Mosaic).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from planner.core.errors import ConfigError
from planner.core.model import Node
from profiles.schema import SensitivityMatrix

DEFAULT_TOLERANCE = 0.05
_EPS = 1e-9


@dataclass(frozen=True, slots=True, order=True)
class PerGpu:
    """CPUs and memory (GB) per GPU. CPUs are whole cores."""

    cpus: int
    mem_gb: float

    def covers(self, other: PerGpu) -> bool:
        """At least ``other`` along both dimensions."""
        return self.cpus >= other.cpus and self.mem_gb >= other.mem_gb - _EPS

    def exceeds(self, other: PerGpu) -> bool:
        """More than ``other`` along at least one dimension."""
        return self.cpus > other.cpus or self.mem_gb > other.mem_gb + _EPS

    def capped(self, other: PerGpu) -> PerGpu:
        """The component-wise minimum."""
        return PerGpu(min(self.cpus, other.cpus), min(self.mem_gb, other.mem_gb))


def check_tolerance(tolerance: float) -> float:
    if not 0.0 <= tolerance < 1.0 or math.isnan(tolerance):
        raise ConfigError(f"demand tolerance must be in [0, 1), got {tolerance}")
    return tolerance


def proportional_per_gpu(nodes: list[Node] | tuple[Node, ...]) -> PerGpu:
    """The GPU-proportional share per GPU on these nodes (the least generous one).

    A job spanning nodes must get the same share on each (Synergy §4.2: its processes
    synchronise, so it runs at the pace of the worst-fed one).
    """
    return PerGpu(min(n.cpus // n.gpus for n in nodes), min(n.mem_gb / n.gpus for n in nodes))


@lru_cache(maxsize=1024)
def best_case_per_gpu(matrix: SensitivityMatrix, tolerance: float = DEFAULT_TOLERANCE) -> PerGpu:
    """Fewest CPUs, then least memory, on the matrix grid reaching (1 - tolerance) x the peak.

    CPUs come first because they are the scarcer dimension (3 per GPU on Synergy's
    servers against 62.5 GB) and the one most models are sensitive to.
    """
    peak = max(max(row) for row in matrix.values)
    target = (1.0 - tolerance) * peak - _EPS
    best: PerGpu | None = None
    for i, cpus in enumerate(matrix.cpus_per_gpu):
        for j, mem in enumerate(matrix.mem_gb_per_gpu):
            if matrix.values[i][j] >= target:
                candidate = PerGpu(math.ceil(cpus), mem)
                if best is None or candidate < best:
                    best = candidate
    assert best is not None  # the peak itself qualifies
    return best
