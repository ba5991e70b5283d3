"""GPU sharing decisions of SJF-BSBF: the pair rule (Theorem 1) and the micro-batch search (Algorithm 2)."""

from planner.sharing.pair import PairDecision, PairTimes, SubBatchOption, best_setting, completion_times

__all__ = ["PairDecision", "PairTimes", "SubBatchOption", "best_setting", "completion_times"]
