"""The live controller: observe Slurm -> ``plan_round`` -> actuate -> record, every round.

:mod:`.config` (the ``[controller]`` table), :mod:`.observe` (Slurm -> Snapshot),
:mod:`.actuate` (RoundPlan diff -> idempotent Slurm actions), :mod:`.loop` (the tick and
the daemon loop), :mod:`.metrics` (Prometheus text).
"""
