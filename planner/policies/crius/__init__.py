"""Crius (EuroSys'26): heterogeneous GPU types, Cells, scaling search with a depth, deadlines.

* :mod:`.cell`: a Cell (GPU type x count x pipeline stages) and the :class:`CellModel`
  interface the scheduler prices Cells through.
"""

from planner.policies.crius import cell

__all__ = ["cell"]
