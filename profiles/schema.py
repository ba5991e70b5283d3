"""Per-model knowledge: the in-memory profile types.

A :class:`Profile` answers "how fast does this model train" as a function of the
things Mosaic decides: GPU type and count, consolidation, CPUs and memory per GPU
(through a :class:`SensitivityMatrix`), execution plan and co-located job. A profile
with no measurements is *neutral*: every ratio it reports is 1.0, so an unknown
model is scheduled as if resources other than its GPUs did not matter.
The on-disk format that builds these is documented in ``profiles/README.md``.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from profiles.optimistic import OptimisticProfile


def plan_key(plan: Mapping[str, Any] | None) -> str | None:
    """Canonical text of an execution plan, used as a dictionary key (``None``: as submitted)."""
    return None if plan is None else json.dumps(dict(plan), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class ThroughputKey:
    """One measured configuration of a model."""

    gpu_type: str
    num_gpus: int
    batch_size: int | None = None
    consolidated: bool = True
    plan: str | None = None


@dataclass(frozen=True, slots=True)
class ColocationKey:
    """Job A (model, batch, GPUs, plan) sharing its GPUs with job B, on one GPU type.

    Models are canonical names; plans are :func:`plan_key` texts (``None``: as submitted).
    A table maps keys to (A's steps/s, B's steps/s) when packed; ``(0, 0)`` records a
    pair that cannot share (e.g. it does not fit in GPU memory).
    """

    gpu_type: str
    model_a: str
    batch_a: int | None
    gpus_a: int
    model_b: str
    batch_b: int | None
    gpus_b: int
    plan_a: str | None = None
    plan_b: str | None = None

    def swapped(self) -> ColocationKey:
        return ColocationKey(
            self.gpu_type, self.model_b, self.batch_b, self.gpus_b,
            self.model_a, self.batch_a, self.gpus_a, self.plan_b, self.plan_a,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ColocationEntry:
    """A measurement of this profile's model packed with another (a profile document row)."""

    with_model: str
    gpu_type: str
    num_gpus: int
    steps_per_s: float
    with_steps_per_s: float
    batch_size: int | None = None
    with_batch_size: int | None = None
    with_num_gpus: int | None = None
    plan: str | None = None
    with_plan: str | None = None


@dataclass(frozen=True, slots=True)
class SensitivityMatrix:
    """Normalised throughput W[c, m] at CPUs and memory per GPU (Synergy §3.1).

    ``values[i][j]`` is the throughput with ``cpus_per_gpu[i]`` CPUs and
    ``mem_gb_per_gpu[j]`` GB per GPU, relative to a reference allocation (Synergy's
    data: 3 CPUs and 62.5 GB per GPU = 1.0). Between grid points the value is
    interpolated bilinearly; outside the grid it is clamped to the edge.
    """

    cpus_per_gpu: tuple[float, ...]
    mem_gb_per_gpu: tuple[float, ...]
    values: tuple[tuple[float, ...], ...]

    def at(self, cpus_per_gpu: float, mem_gb_per_gpu: float) -> float:
        i0, i1, ti = _bracket(self.cpus_per_gpu, cpus_per_gpu)
        j0, j1, tj = _bracket(self.mem_gb_per_gpu, mem_gb_per_gpu)
        v = self.values
        top = v[i0][j0] * (1 - tj) + v[i0][j1] * tj
        bottom = v[i1][j0] * (1 - tj) + v[i1][j1] * tj
        return top * (1 - ti) + bottom * ti


def _bracket(axis: tuple[float, ...], x: float) -> tuple[int, int, float]:
    if x <= axis[0]:
        return 0, 0, 0.0
    if x >= axis[-1]:
        last = len(axis) - 1
        return last, last, 0.0
    hi = bisect.bisect_right(axis, x)
    lo = hi - 1
    return lo, hi, (x - axis[lo]) / (axis[hi] - axis[lo])


@dataclass(frozen=True, slots=True)
class Profile:
    """What Mosaic knows about one model.

    ``throughput`` maps measured configurations to steps per second. ``ideal_cpus_per_gpu``
    and ``ideal_mem_gb_per_gpu`` are Synergy's best-case demand where profiled.
    """

    name: str
    task: str = "unknown"
    aliases: tuple[str, ...] = ()
    batch_size: int | None = None
    throughput: Mapping[ThroughputKey, float] = field(default_factory=dict)
    sensitivity: SensitivityMatrix | None = None
    ideal_cpus_per_gpu: float | None = None
    ideal_mem_gb_per_gpu: float | None = None
    colocation: tuple[ColocationEntry, ...] = ()
    sources: tuple[str, ...] = ()
    # Where each block's numbers came from ("throughput", "sensitivity", "colocation" ->
    # "built-in" | "profiled" | "observed", or "built-in+observed" once observations refine
    # it); a block not listed is built-in (:meth:`profiles.store.ProfileStore.provenance`).
    provenance: Mapping[str, str] = field(default_factory=dict)
    # The ``optimistic`` block the matrix was derived from (absolute measurements).
    optimistic: OptimisticProfile | None = None

    @property
    def is_neutral(self) -> bool:
        return not self.throughput and self.sensitivity is None

    def batch_sizes(self) -> tuple[int | None, ...]:
        return tuple(sorted({k.batch_size for k in self.throughput}, key=lambda b: (b is None, b or 0)))

    def nearest_batch(self, batch_size: int | None) -> int | None:
        """The measured batch size closest to ``batch_size`` (in ratio), or the profile's default."""
        measured = [b for b in self.batch_sizes() if b is not None]
        if not measured:
            return None
        target = batch_size if batch_size is not None else self.batch_size
        if target is None:
            return measured[len(measured) // 2]
        return min(measured, key=lambda b: (abs(math.log(b / target)), b))

    def steps_per_s(
        self,
        gpu_type: str,
        num_gpus: int,
        batch_size: int | None = None,
        *,
        consolidated: bool = True,
        plan: Mapping[str, Any] | None = None,
    ) -> float | None:
        """Measured (or linearly estimated) steps/s, or ``None`` when nothing applies.

        The batch size falls back to the nearest measured one. A GPU count that was not
        measured is estimated from the 1-GPU measurement by linear data-parallel scaling,
        the estimate Tesserae §4.3 uses to cut profiling cost.
        """
        if not self.throughput:
            return None
        batch = batch_size if self._has_batch(batch_size) else self.nearest_batch(batch_size)
        pkey = plan_key(plan)
        key = ThroughputKey(gpu_type, num_gpus, batch, consolidated, pkey)
        value = self.throughput.get(key)
        if value is not None:
            return value
        one = self.throughput.get(ThroughputKey(gpu_type, 1, batch, True, pkey))
        if one is not None:
            return one * num_gpus
        return None

    def _has_batch(self, batch_size: int | None) -> bool:
        return any(k.batch_size == batch_size for k in self.throughput)
