"""A run's throughput from the heartbeats the job wrote (the runtime API, ``wrapper/status.py``).

Rank 0 appends ``{"event": "heartbeat", "time", "step", "samples", ...}`` at most every
``MOSAIC_HEARTBEAT_S`` seconds. A run's throughput is taken between two heartbeats, never
from the process start: the first ``warmup`` heartbeats are dropped (start-up, data
generation, the first steps' allocations), and the rate is ``(samples_last -
samples_first) / (time_last - time_first)`` over the rest, likewise steps per second.
Records that are not well-formed heartbeats (another event, a missing or non-numeric field,
time or counters going backwards: a restarted job) are not used.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Beat:
    time: float
    step: float
    samples: float


@dataclass(frozen=True, slots=True)
class Throughput:
    """Samples and optimizer steps per second over ``window_s`` seconds of ``beats`` heartbeats."""

    samples_per_s: float
    steps_per_s: float
    beats: int
    window_s: float

    @property
    def samples_per_step(self) -> float:
        return self.samples_per_s / self.steps_per_s if self.steps_per_s > 0 else math.nan


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


def heartbeats(records: Iterable[Any]) -> list[Beat]:
    """The run's usable heartbeats, in order; a restart (counters going back) starts over."""
    beats: list[Beat] = []
    for record in records:
        if not isinstance(record, Mapping) or record.get("event") != "heartbeat":
            continue
        t, step, samples = (_number(record.get(k)) for k in ("time", "step", "samples"))
        if t is None or step is None or samples is None:
            continue
        beat = Beat(t, step, samples)
        if beats and (t <= beats[-1].time or step < beats[-1].step or samples < beats[-1].samples):
            beats = []  # another run of the job wrote into the same log: keep the newest
        beats.append(beat)
    return beats


def usable_beats(records: Iterable[Any], warmup: int) -> int:
    """How many heartbeats count towards the rate (after the ``warmup`` first ones)."""
    return max(0, len(heartbeats(records)) - warmup)


def throughput(records: Iterable[Any], warmup: int = 1) -> Throughput | None:
    """The rate over the heartbeats after the first ``warmup``; ``None`` with fewer than two
    such heartbeats or no progress between them."""
    beats = heartbeats(records)[warmup:]
    if len(beats) < 2:
        return None
    first, last = beats[0], beats[-1]
    window = last.time - first.time
    if window <= 0 or last.samples <= first.samples:
        return None
    return Throughput(
        samples_per_s=(last.samples - first.samples) / window,
        steps_per_s=(last.step - first.step) / window,
        beats=len(beats),
        window_s=window,
    )
