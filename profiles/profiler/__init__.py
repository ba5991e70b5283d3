"""``mosaic profile``'s decisions, pure: which runs, in which order, when to stop, what to write.

* ``search.py``: Synergy's optimistic CPU search (§3.1) one run at a time
  (:func:`next_cpu_count`), and the error of its curve against a full sweep;
* ``runs.py``: the runs of a profile (CPU search, Rubick's plan samples, co-location pairs),
  :func:`next_run` and what a budget left out (:func:`remaining`);
* ``measure.py``: a run's throughput from the job's heartbeats;
* ``state.py``: the resumable state, as data;
* ``output.py``: the ``mosaic-profiles/1`` document, the plan samples as perfmodel CSV rows
  and Rubick's model fitted on them.

The side effects (starting runs on the cluster or locally, reading the heartbeat files,
the progress bar, the state file) are ``slurm_plugin/profiler.py``'s.
"""

from profiles.profiler.measure import Throughput, throughput
from profiles.profiler.output import CacheSpec, profile_document, sample_rows
from profiles.profiler.runs import PlanSample, Request, RunSpec, default_plan_samples, next_run, remaining
from profiles.profiler.search import CurveError, curve_error, next_cpu_count
from profiles.profiler.state import RunResult, State

__all__ = [
    "CacheSpec",
    "CurveError",
    "PlanSample",
    "Request",
    "RunResult",
    "RunSpec",
    "State",
    "Throughput",
    "curve_error",
    "default_plan_samples",
    "next_cpu_count",
    "next_run",
    "profile_document",
    "remaining",
    "sample_rows",
    "throughput",
]
