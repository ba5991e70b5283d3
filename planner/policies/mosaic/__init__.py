"""``mosaic``: the five papers' mechanisms composed into one scheduler (the default).

:mod:`.rules` says which stage owns which decision; :mod:`.view` what the scheduler may know
of a job; :mod:`.ordering` the order; :mod:`.stages` the packing and the joint allocation.
"""

from planner.policies.mosaic import ordering, stages

__all__ = ["ordering", "stages"]
