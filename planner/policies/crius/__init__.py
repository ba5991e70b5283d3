"""Crius (EuroSys'26): heterogeneous GPU types, Cells, scaling search with a depth, deadlines.

* :mod:`.cell`: a Cell (GPU type x count x pipeline stages) and the :class:`CellModel`
  interface the scheduler prices Cells through.
* :mod:`.cells`: the Cell models, :class:`~.cells.AgileCells` (agile estimation, §5) and
  :class:`~.cells.MeasuredCells` (the measured best-plan table as an oracle), and the
  candidate GPU counts / types / stage counts of §6.1.
* :mod:`.search`: the depth-bounded greedy search of §6.1 (one decision, and the growth of
  running jobs into idle GPUs); :mod:`.policy`: the ``crius`` reconfiguration stage;
  :mod:`.deadline`: ``crius-ddl``'s deadline rule and ElasticFlow-style admission (§8.5).
"""

from planner.policies.crius import cell, cells, deadline, policy, search
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
    "deadline",
    "plan_mapping",
    "policy",
    "search",
    "stage_choices",
]
