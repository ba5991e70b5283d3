"""Optimistic profiling (Synergy §3.1): a full W[c, m] from a handful of measurements.

Profiling every (CPU, memory) pair of a 24-CPU, 500 GB server takes hours. Synergy
measures throughput only along the CPU axis, with memory large enough to cache the
whole dataset, and derives the memory axis analytically from a DNN-aware cache
(MinIO/CoorDL): such a cache keeps a *fixed* set of samples, so every epoch hits it for
``cached bytes / dataset bytes`` of the data and fetches the rest from storage. Fetches
overlap preprocessing (a prefetching loader), so a sample costs the slower of the two:

    W[c, m] = min( T_cpu(c),  B / ((1 - hit(m)) * s) ),   hit(m) = min(1, cache(m) / D)

with T_cpu(c) the measured per-GPU samples/s at ``c`` CPUs, ``B`` the storage bandwidth
per GPU, ``s`` the mean sample size, ``D`` the dataset size and ``cache(m)`` the memory
left for the cache after the job's own working set, summed over the job's GPUs.

Which CPU counts to measure is chosen by the search of §3.1: measure the ends, then
split an interval only where the throughput still changes by more than ``threshold``
(10 % in the paper) across it; flat stretches are interpolated. The search takes the
measurement as a callable, so the same code drives a real profiler and the tests.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from planner.core.errors import ProfileError
from profiles.schema import SensitivityMatrix

DEFAULT_THRESHOLD = 0.10


def cpu_points_to_measure(
    max_cpus: int, measure: Callable[[int], float], threshold: float = DEFAULT_THRESHOLD, min_cpus: int = 1
) -> dict[int, float]:
    """Measured samples/s by CPU count, at the points the §3.1 search visits."""
    if min_cpus < 1 or max_cpus < min_cpus:
        raise ProfileError(f"CPU range must satisfy 1 <= min <= max, got {min_cpus}..{max_cpus}")
    if not 0 <= threshold < 1:
        raise ProfileError(f"profiling threshold must be in [0, 1), got {threshold}")
    measured: dict[int, float] = {}

    def at(c: int) -> float:
        if c not in measured:
            value = float(measure(c))
            if not value > 0 or math.isinf(value):
                raise ProfileError(
                    f"measured throughput at {c} CPUs must be positive and finite, got {value}"
                )
            measured[c] = value
        return measured[c]

    intervals = [(min_cpus, max_cpus)]
    while intervals:
        lo, hi = intervals.pop()
        if hi - lo <= 1:
            at(lo), at(hi)
            continue
        if at(hi) <= at(lo) * (1 + threshold):  # flat enough: no point profiling inside
            continue
        mid = (lo + hi) // 2
        at(mid)
        intervals += [(lo, mid), (mid, hi)]
    return dict(sorted(measured.items()))


def cpu_curve(points: Mapping[int, float]) -> Callable[[float], float]:
    """Piecewise-linear T_cpu(c) through the measured points, flat beyond both ends."""
    if not points:
        raise ProfileError("a CPU curve needs at least one measured point")
    xs = sorted(points)
    ys = [points[x] for x in xs]

    def curve(c: float) -> float:
        if c <= xs[0]:
            return ys[0]
        if c >= xs[-1]:
            return ys[-1]
        k = bisect.bisect_right(xs, c)
        t = (c - xs[k - 1]) / (xs[k] - xs[k - 1])
        return ys[k - 1] * (1 - t) + ys[k] * t

    return curve


@dataclass(frozen=True, slots=True)
class CacheModel:
    """A DNN-aware cache in front of remote storage (all sizes in GB, bandwidth in MB/s)."""

    dataset_gb: float
    sample_kb: float
    storage_mb_per_s_per_gpu: float
    working_set_gb_per_gpu: float = 0.0
    gpus: int = 1

    def __post_init__(self) -> None:
        for name in ("dataset_gb", "sample_kb", "storage_mb_per_s_per_gpu"):
            if not getattr(self, name) > 0:
                raise ProfileError(f"cache model: {name} must be positive, got {getattr(self, name)}")
        if self.working_set_gb_per_gpu < 0 or self.gpus < 1:
            raise ProfileError("cache model: working_set_gb_per_gpu must be >= 0 and gpus >= 1")

    def hit_fraction(self, mem_gb_per_gpu: float) -> float:
        cache = max(0.0, mem_gb_per_gpu - self.working_set_gb_per_gpu) * self.gpus
        return min(1.0, cache / self.dataset_gb)

    def io_samples_per_s(self, mem_gb_per_gpu: float) -> float:
        """Per-GPU samples/s the storage sustains when misses are fetched at its bandwidth."""
        miss = 1.0 - self.hit_fraction(mem_gb_per_gpu)
        if miss <= 0:
            return math.inf
        return self.storage_mb_per_s_per_gpu * 1024 / (miss * self.sample_kb)


def optimistic_matrix(
    cpu_samples_per_s: Mapping[int, float],
    cache: CacheModel,
    cpus_per_gpu: Sequence[float],
    mem_gb_per_gpu: Sequence[float],
    reference: tuple[float, float],
) -> SensitivityMatrix:
    """W[c, m] on the given grid, normalised to 1.0 at ``reference`` (CPUs, GB per GPU)."""
    curve = cpu_curve(cpu_samples_per_s)

    def w(c: float, m: float) -> float:
        return min(curve(c), cache.io_samples_per_s(m))

    base = w(*reference)
    if not base > 0:
        raise ProfileError(f"throughput at the reference allocation {reference} is not positive")
    values = tuple(tuple(w(c, m) / base for m in mem_gb_per_gpu) for c in cpus_per_gpu)
    return SensitivityMatrix(
        tuple(float(c) for c in cpus_per_gpu), tuple(float(m) for m in mem_gb_per_gpu), values
    )


@dataclass(frozen=True, slots=True)
class OptimisticProfile:
    """An ``optimistic`` block as measured: the CPU curve (absolute samples/s per GPU by CPUs
    per GPU, the data set cached) and what turns it into W (the cache model, the grid, the
    reference allocation). Kept beside the matrix so that a measurement taken later (the
    controller's observation of a running job) can replace or add a point of the curve."""

    cpu_samples_per_s: Mapping[int, float]
    cache: CacheModel
    cpus_per_gpu: tuple[float, ...]
    mem_gb_per_gpu: tuple[float, ...]
    reference: tuple[float, float]

    def matrix(self) -> SensitivityMatrix:
        return optimistic_matrix(
            self.cpu_samples_per_s, self.cache, self.cpus_per_gpu, self.mem_gb_per_gpu, self.reference
        )

    def with_curve(self, points: Mapping[int, float]) -> OptimisticProfile:
        """The same block with ``points`` as its measured CPU curve."""
        return OptimisticProfile(
            dict(sorted(points.items())), self.cache, self.cpus_per_gpu, self.mem_gb_per_gpu, self.reference
        )
