"""Tiresias' discretised two-dimensional LAS (2D-LAS) with starvation promotion.

Tiresias (NSDI'19), as the Tesserae (§6.1 "Baselines") and SJF-BSBF (§VI-A3) texts use
it: a job's priority comes from its attained service in GPUs x time; the service axis
is cut into K queues by K-1 thresholds, and queues are served highest first. Inside a
queue jobs run in the order they *entered* it (FIFO), which is what keeps similar jobs
from preempting one another every round as continuous LAS would.

* A running job whose service passes its queue's threshold is demoted one queue down
  and joins the back of that queue.
* A pending job that has waited ``promote_knob`` times as long as it has executed so
  far (Tiresias' STARVELIMIT) is promoted to the highest queue, at its back; once it
  has run there for a round its service demotes it again, so a starving job gets a
  turn without taking over.

The queue and the time the job entered it are per-job state: the policy returns it
in ``Job.policy_state`` (``{"q": queue, "since": entry time}``), the plan carries it
back to the simulator or controller, and the next snapshot hands it in again.

A pending job's place in the order changes only when it is promoted, and the simulator
hands in the very same :class:`Job` object while nothing about the job changes; so
:meth:`Tiresias.order` remembers, per job object, its sort key and the wait after which
it would be promoted, and recomputes only jobs it has not seen as they are. A running
job's entry is a new object every round (its service grew), but its place changes only
when its service reaches its queue's threshold: its key is remembered with the state
object it was computed from and that threshold, and reused while the job still runs,
carries the very same state, the same submission time, and has less service. That memo
is a cache of a pure function of what it checks: the order is the same with or without
it, and it holds only the last snapshot's jobs.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from operator import itemgetter
from typing import Any, ClassVar, Self

from planner.model import Job, Snapshot
from planner.policies.common import arrival_key, options_reader
from planner.registry import StageContext
from planner.stages import ORDERINGS

# The Tiresias simulator's documented two-queue example: one threshold at 3,600
# GPU-seconds (one GPU-hour) between the high and the low queue.
DEFAULT_THRESHOLDS_GPU_S: tuple[float, ...] = (3600.0,)
# Promote once a job has waited 8x as long as it has executed (a STARVELIMIT multiple).
DEFAULT_PROMOTE_KNOB = 8.0


@ORDERINGS.register("tiresias")
@dataclass(frozen=True)
class Tiresias:
    """2D-LAS over discretised queues; FIFO by queue entry; starvation promotion.

    Options: ``queue_thresholds_gpu_s`` (strictly increasing GPU-second thresholds, K-1
    of them for K queues) and ``promote_knob`` (0 disables promotion).
    """

    thresholds_gpu_s: tuple[float, ...] = DEFAULT_THRESHOLDS_GPU_S
    promote_knob: float = DEFAULT_PROMOTE_KNOB
    preemptive_by_default: ClassVar[bool] = True
    # job id -> (the Job object, (sort key, the job with its state), waiting since, promotion
    # wait): a pending job's entry holds until its wait reaches the promotion wait.
    _memo: dict[str, _Memo] = field(default_factory=dict, init=False, repr=False, compare=False)
    # job id -> (its policy state object, submission time, sort key, demotion threshold) of
    # a running job whose state was already its own (no update): holds below the threshold.
    _running_memo: dict[str, _RunningMemo] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # The last order, as job ids. The next round walks the jobs in it (new jobs after), so
    # the sort meets a list already in order but for new jobs and changed keys, and timsort
    # needs about one comparison per job instead of log2(n). The keys are unique (they end
    # with the job id), so the order does not depend on the walk's.
    _last: list[str] = field(default_factory=list, init=False, repr=False, compare=False)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        f = options_reader(options, "tiresias", ["queue_thresholds_gpu_s", "promote_knob"])
        thresholds = DEFAULT_THRESHOLDS_GPU_S
        if f.has("queue_thresholds_gpu_s"):
            raw = f.req_list("queue_thresholds_gpu_s")
            if not all(isinstance(t, int | float) and not isinstance(t, bool) and t > 0 for t in raw):
                f.fail_key("queue_thresholds_gpu_s", f"expected positive numbers, got {raw!r}")
            thresholds = tuple(float(t) for t in raw)
            if any(b <= a for a, b in pairwise(thresholds)):
                f.fail_key("queue_thresholds_gpu_s", f"must be strictly increasing, got {raw!r}")
        knob = f.opt_float("promote_knob", minimum=0.0)
        return cls(thresholds, DEFAULT_PROMOTE_KNOB if knob is None else knob)

    def transition(self, job: Job, now_s: float) -> tuple[int, float]:
        """The job's (queue, entry time) for this round; queue 0 is the highest."""
        state = job.policy_state or {}
        queue, since = state.get("q"), state.get("since")
        if not isinstance(queue, int) or not isinstance(since, int | float):
            # First sight (or foreign state): the queue its service puts it in.
            queue = bisect.bisect_right(self.thresholds_gpu_s, job.attained_gpu_s)
            return queue, job.submit_time_s if queue == 0 else now_s
        last = len(self.thresholds_gpu_s)
        if job.is_running:
            # Demotion: a running job that used up its queue's share moves down (to the
            # queue its service belongs in) and joins the back of it.
            earned = bisect.bisect_right(self.thresholds_gpu_s, job.attained_gpu_s)
            if earned > queue:
                return min(earned, last), now_s
        elif queue > 0 and self.promote_knob > 0 and job.attained_gpu_s > 0:
            executed_s = job.attained_gpu_s / job.num_gpus
            if now_s - job.waiting_since() >= self.promote_knob * executed_s:
                return 0, now_s
        return queue, float(since)

    @staticmethod
    def _has_state(job: Job) -> bool:
        """True when the job carries a queue and entry time of ours (not a first sight)."""
        state = job.policy_state or {}
        return isinstance(state.get("q"), int) and isinstance(state.get("since"), int | float)

    def order(self, snapshot: Snapshot) -> Sequence[Job]:
        now = snapshot.time_s
        memo, running_memo = self._memo, self._running_memo
        seen: dict[str, _Memo] = {}
        seen_running: dict[str, _RunningMemo] = {}
        keyed: list[tuple[tuple[int, float, tuple[float, tuple[int, int, str]]], Job]] = []
        thresholds = self.thresholds_gpu_s
        last = self._last
        walk: Sequence[Job] = snapshot.jobs
        if last:
            by_id = {job.id: job for job in walk}
            walk = [job for i in last if (job := by_id.pop(i, None)) is not None]
            walk.extend(by_id.values())  # new since the last order, in the snapshot's order
        for job in walk:
            entry = memo.get(job.id)
            if entry is not None and entry[0] is job and not now - entry[2] >= entry[3]:
                seen[job.id] = entry
                keyed.append(entry[1])
                continue
            state = job.policy_state
            run = running_memo.get(job.id)
            if (
                run is not None
                and run[0] is state
                and job.attained_gpu_s < run[3]
                and job.submit_time_s == run[1]
                and job.is_running
            ):
                # transition() keeps (queue, since) and the job as it is: same state, below
                # the threshold that would demote it, still running.
                seen_running[job.id] = run
                keyed.append((run[2], job))
                continue
            queue, since = self.transition(job, now)
            updated = job
            if state is None or state.get("q") != queue or state.get("since") != since:
                updated = job.with_policy_state({"q": queue, "since": since})
            key = (queue, since, arrival_key(job))
            keyed.append((key, updated))
            if updated is job and not job.is_running and self._has_state(job):
                # Unchanged until promoted: transition() gives (queue, since) again as long
                # as the job waits less than the promotion wait (never, if it cannot be).
                waiting, limit = job.waiting_since(), math.inf
                if queue > 0 and self.promote_knob > 0 and job.attained_gpu_s > 0:
                    limit = self.promote_knob * (job.attained_gpu_s / job.num_gpus)
                seen[job.id] = (job, (key, updated), waiting, limit)
            elif updated is job and job.is_running and self._has_state(job):
                # Demoted once its service reaches its queue's upper threshold (never from
                # the last queue).
                below = thresholds[queue] if queue < len(thresholds) else math.inf
                seen_running[job.id] = (state, job.submit_time_s, key, below)
        memo.clear()
        memo.update(seen)
        running_memo.clear()
        running_memo.update(seen_running)
        keyed.sort(key=itemgetter(0))
        ordered = [job for _, job in keyed]
        last[:] = [job.id for job in ordered]
        return ordered


_Key = tuple[int, float, tuple[float, tuple[int, int, str]]]
_Memo = tuple[Job, tuple[_Key, Job], float, float]
_RunningMemo = tuple[Mapping[str, Any] | None, float, _Key, float]
