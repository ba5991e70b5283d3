"""Rubick (MLSys'25): execution plans and resources chosen together, with performance guarantees.

* :mod:`.plans`: the candidate execution plans of a job (global batch fixed);
* :mod:`.curves`: resource sensitivity curves, best plan and throughput per resource amount,
  priced by ``profiles.plan_pricing`` (the fitted performance model and memory estimate);
* :mod:`.policy`: the ``rubick`` and ``antman`` orderings (privileged guaranteed jobs within
  their tenant's quota, starvation, SortBySlope);
* :mod:`.allocation`: the ``rubick`` reconfiguration stage (Algorithm 1's ScheduleJob: shrink
  the lowest-slope job above its minimum, grow, GetBestPlan, the 0.97 reconfiguration rule).
"""

from planner.policies.rubick import allocation, curves, plans, policy

__all__ = ["allocation", "curves", "plans", "policy"]
