"""Crius (EuroSys'26): heterogeneous GPU types, Cells, scaling search with a depth, deadlines.

* :mod:`.cell`: a Cell (GPU type x count x pipeline stages) and the :class:`CellModel`
  interface the scheduler prices Cells through.
* :mod:`.cells`: the Cell models, :class:`~.cells.AgileCells` (agile estimation, §5) and
  :class:`~.cells.MeasuredCells` (the measured best-plan table as an oracle), and the
  candidate GPU counts / types / stage counts of §6.1.
"""

from planner.policies.crius import cell, cells
from planner.policies.crius.cells import (
    AgileCells,
    MeasuredCells,
    candidate_counts,
    candidate_types,
    plan_mapping,
    stage_choices,
)

__all__ = [
    "AgileCells",
    "MeasuredCells",
    "candidate_counts",
    "candidate_types",
    "cell",
    "cells",
    "plan_mapping",
    "stage_choices",
]
