"""A Crius *Cell* and the interface that estimates Cells (Crius §4).

A Cell is a job's candidate allocation at a coarse grain: one GPU type, a GPU count and a
number of pipeline stages. Its estimated iteration time (agile estimation, §5) prices it for
the scheduler (§6), and the best data x tensor plan inside it becomes the job's execution plan
("Cell-guided tuning"). The scheduler reads Cells only through :class:`CellModel`, so the
estimate behind it (the agile estimator, or the measured best-plan table as an oracle for
ablations) can be swapped without touching the search.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from planner.core.model import Job


@dataclass(frozen=True, slots=True)
class Cell:
    """One candidate of a job: ``gpus`` GPUs of ``gpu_type`` in ``stages`` pipeline stages.

    ``iteration_time_s`` is the estimate at the job's global batch (``None``: it does not fit
    in memory, or nothing is known). ``plan`` is the execution-plan mapping the job runs with
    in this Cell (``planner.core.execplan``'s JSON form: ``dp``, ``tp``, ``pp``, ...).
    """

    gpu_type: str
    gpus: int
    stages: int
    iteration_time_s: float | None
    plan: Mapping[str, Any] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.iteration_time_s is not None and self.iteration_time_s > 0

    def throughput(self, global_batch: int) -> float:
        """Samples per second at ``global_batch`` (0 when the Cell does not fit)."""
        if self.iteration_time_s is None or self.iteration_time_s <= 0:
            return 0.0
        return global_batch / self.iteration_time_s


class CellModel(Protocol):
    """Estimates a job's Cells. Pure and deterministic; cheap enough to ask per decision."""

    def best_cell(self, job: Job, gpu_type: str, gpus: int) -> Cell | None:
        """The fastest Cell of ``job`` on ``gpus`` GPUs of ``gpu_type`` over its stage counts,
        or ``None`` when no Cell there fits (or the model is unknown)."""
        ...

    def cells(self, job: Job, gpu_types: Sequence[str], counts: Sequence[int]) -> list[Cell]:
        """Every candidate Cell of ``job`` over the given types and counts (each stage count),
        including the ones that do not fit (``iteration_time_s`` ``None``)."""
        ...
