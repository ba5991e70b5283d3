"""One interface for iteration-time models, and the simplest one: a table of measurements.

:class:`IterationTimeModel` is what the planner asks: the seconds one iteration of a
query takes, or ``None`` when the model cannot say (not measured, or the plan does not
fit the GPU). The fitted Rubick model (:class:`~profiles.perfmodel.fit.PerfModel`)
answers every query; :class:`MeasuredTable` answers only what was measured, exactly.
Other systems' measured tables (Crius, Gavel) fit behind the same interface.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from profiles.names import normalise
from profiles.perfmodel.fit import Measurement
from profiles.perfmodel.query import Query


class IterationTimeModel(Protocol):
    """Predicts one iteration's time; ``None`` means "unknown or infeasible", not zero."""

    def iteration_time_s(self, query: Query) -> float | None:
        """Seconds per iteration (one global batch) of ``query``, or ``None``."""
        ...


# What makes two measurements the same configuration: model (by normalised name), global
# batch, nodes, the resolved plan and the CPUs per GPU (which only ZeRO-Offload reads).
Key = tuple[object, ...]


def key_of(query: Query) -> Key:
    plan = query.plan
    cpus = query.cpus_per_gpu if plan.offload_optimizer else None
    return (
        normalise(query.model.name),
        query.global_batch,
        query.nodes,
        query.gpus,
        plan.dp,
        plan.tp,
        plan.pp,
        plan.zero_stage,
        plan.offload_optimizer,
        plan.offload_param,
        plan.grad_accum,
        plan.activation_checkpointing,
        cpus,
    )


@dataclass(frozen=True, slots=True)
class MeasuredTable:
    """Exact lookup over measured rows; a configuration measured twice gives the mean."""

    times: dict[Key, float]

    @classmethod
    def of(cls, measurements: Iterable[Measurement]) -> MeasuredTable:
        grouped: dict[Key, list[float]] = {}
        for m in measurements:
            grouped.setdefault(key_of(m.query), []).append(m.iter_time_s)
        return cls({k: sum(v) / len(v) for k, v in grouped.items()})

    def iteration_time_s(self, query: Query) -> float | None:
        return self.times.get(key_of(query))

    def __len__(self) -> int:
        return len(self.times)
