"""The classic orderings: FIFO, SJF, SRTF and LAS.

Sizes are known to the simulator (the trace's durations) and, on the live cluster, to
the extent users declare them; an unknown size sorts after every known one, and ties
fall back to arrival order, so each policy degrades to FIFO where it knows nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from planner.core.model import Job, Snapshot
from planner.policies.common import arrival_key, choice, options_reader, remaining_estimate_s
from planner.registry import StageContext
from planner.stages import ORDERINGS

_SIZES = ("duration", "gpu_time", "gpus")


@ORDERINGS.register("fifo")
@dataclass(frozen=True)
class Fifo:
    """First in, first out: by submit time (Synergy §2 "Scheduling policy")."""

    preemptive_by_default: ClassVar[bool] = False

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        options_reader(options, "fifo", [])
        return cls()

    def order(self, snapshot: Snapshot) -> Sequence[Job]:
        return sorted(snapshot.jobs, key=arrival_key)


def _size(job: Job, size: str) -> float:
    if size == "gpus":
        return float(job.num_gpus)
    duration = job.duration_s if job.duration_s is not None else math.inf
    return duration * job.num_gpus if size == "gpu_time" else duration


@ORDERINGS.register("sjf")
@dataclass(frozen=True)
class ShortestJobFirst:
    """Shortest job first, by total size.

    ``size`` = ``duration`` (isolated run time, the default), ``gpu_time`` (duration x
    GPUs) or ``gpus`` (Tiresias' "smallest job first" by GPU demand). Non-preemptive by
    default; SJF-BSBF builds on the non-preemptive form (SJF-BSBF §V).
    """

    size: str = "duration"
    preemptive_by_default: ClassVar[bool] = False

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        f = options_reader(options, "sjf", ["size"])
        return cls(size=choice(f, "size", _SIZES, "duration"))

    def order(self, snapshot: Snapshot) -> Sequence[Job]:
        return sorted(snapshot.jobs, key=lambda j: (_size(j, self.size), arrival_key(j)))


@ORDERINGS.register("srtf")
@dataclass(frozen=True)
class ShortestRemainingTimeFirst:
    """Shortest remaining time first (preemptive SJF on what is left).

    ``size`` = ``time`` (remaining run time, the default) or ``gpu_time`` (remaining
    time x GPUs: Tiresias' "shortest remaining GPU time").
    """

    size: str = "time"
    preemptive_by_default: ClassVar[bool] = True

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        f = options_reader(options, "srtf", ["size"])
        return cls(size=choice(f, "size", ("time", "gpu_time"), "time"))

    def order(self, snapshot: Snapshot) -> Sequence[Job]:
        weight = self.size == "gpu_time"
        return sorted(
            snapshot.jobs,
            key=lambda j: (remaining_estimate_s(j) * (j.num_gpus if weight else 1), arrival_key(j)),
        )


@ORDERINGS.register("las")
@dataclass(frozen=True)
class LeastAttainedService:
    """Least attained service: fewest GPU-seconds received so far first.

    Attained service counts GPUs x time (Tiresias' two-dimensional service), so a wide
    job ages as fast as its footprint. Continuous (not discretised): see ``tiresias``
    for the queue-based form that avoids thrashing between similar jobs.
    """

    preemptive_by_default: ClassVar[bool] = True

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        options_reader(options, "las", [])
        return cls()

    def order(self, snapshot: Snapshot) -> Sequence[Job]:
        return sorted(snapshot.jobs, key=lambda j: (j.attained_gpu_s, arrival_key(j)))
