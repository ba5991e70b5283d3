"""Crius's baselines (Crius §8.1) as pipeline stages: Gandiva, Gavel (heterogeneity-aware),
ElasticFlow. Each schedules with what it could know, data-parallel profiles
(:mod:`.view`); the jobs then run at their best plan's speed.

* :mod:`.gavel_het`: Gavel's LP over time fractions per GPU type, realised round by round;
* :mod:`.gandiva`: Gandiva's introspective scheduling as Crius's simulator models it;
* :mod:`.elasticflow`: ElasticFlow's deadline-aware admission and elastic scaling.
"""

from planner.policies.baselines import elasticflow, gandiva, gavel_het, view

__all__ = ["elasticflow", "gandiva", "gavel_het", "view"]
