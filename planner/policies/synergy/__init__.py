"""Synergy (Mohan et al., OSDI'22): CPU and memory allocation by measured sensitivity.

Shaping stages registered here: ``greedy`` (§3.3), ``tune`` (§4.2), ``opt`` (§4.1,
Appendix A.1), and the big-data baselines ``drf`` and ``tetris`` (§5.7). The baseline,
``proportional``, lives in :mod:`planner.policies.shaping`. Each re-packs the round's
runnable set (chosen by the placement stage on GPU demand) along GPUs, CPUs and memory.
"""

from planner.policies.synergy import greedy, opt, tune

__all__ = ["greedy", "opt", "tune"]
