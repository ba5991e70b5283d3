"""Scheduling policies (the ordering stage) and the baseline placement and shaping stages.

Importing this package registers every built-in component in the registries of
:mod:`planner.stages`.
"""

from planner.policies import (
    baselines,
    basic,
    crius,
    elastic,
    ftf,
    migration,
    mosaic,
    packing,
    placement,
    rubick,
    shaping,
    sharing,
    synergy,
    tiresias,
)

__all__ = [
    "baselines",
    "basic",
    "crius",
    "elastic",
    "ftf",
    "migration",
    "mosaic",
    "packing",
    "placement",
    "rubick",
    "shaping",
    "sharing",
    "synergy",
    "tiresias",
]
