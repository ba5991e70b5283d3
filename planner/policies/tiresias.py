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
:meth:`Tiresias.order` keeps, per job, the object it last worked out and holds its sort
key while that very object comes back (a waiting one until its promotion wait), and
works out only new objects. A running job's entry is a new object every round (its
service grew), but its place changes only when its service reaches its queue's
threshold: its key is remembered with the state object it was computed from and that
threshold. The order itself is kept as a sorted list and brought up to date by
bisection. All of it is a cache of a pure function of what it checks: the order is the
same as a fresh policy's (tests/planner/test_incremental_exact.py checks it round by
round), and it holds only the last snapshot's jobs.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, ClassVar, Self

from planner.core.model import Job, JobState, Snapshot
from planner.policies.common import arrival_key, options_reader
from planner.registry import StageContext
from planner.stages import ORDERINGS

# The Tiresias simulator's documented two-queue example: one threshold at 3,600
# GPU-seconds (one GPU-hour) between the high and the low queue.
DEFAULT_THRESHOLDS_GPU_S: tuple[float, ...] = (3600.0,)
# Promote once a job has waited 8x as long as it has executed (a STARVELIMIT multiple).
DEFAULT_PROMOTE_KNOB = 8.0


class _Incremental:
    """What :meth:`Tiresias.order` keeps from round to round, to work on what changed only.

    A :class:`Job` is immutable, so a job object handed in again is the job as it was; the
    simulator hands in the very same objects for every job whose state did not change (all
    the waiting ones: at twice a cluster's capacity, thousands every round).

    * ``held``: job id -> the job object whose sort key and output are known to hold: a
      running job below its demotion threshold (for as long as that object is handed in:
      the answer depends only on it), a waiting one until its promotion wait. ``waits``
      has the latter's (tie, waiting since, promotion wait), and ``due`` is a heap of their
      approximate promotion times; each round the ones that may be due are tested exactly
      as ``transition`` tests them, and those due are no longer held. An entry whose tie is
      not the job's in ``waits`` is stale (the job was held again as another object,
      started, or left): skipped when it comes up, and dropped when stale ones outnumber
      the live ones. Entries hold
      no job object: the live controller hands in a new object whenever a job's record
      changes, and entries that kept each old object kept it alive until dropped (thousands
      of jobs' worth at 10,000 queued jobs).
    * ``keys``/``sorted``: each job's sort key and the (key, job id) pairs in order; a round
      changes few keys (arrivals, completions, demotions, promotions), so the order is
      brought up to date by bisection instead of sorting every job again. The keys are
      unique (they end with the job id), so it is the one order they define.
    * ``out``: job id -> the job as ordered (with its state); ``running_memo``: job id ->
      (its policy state object, submission time, sort key, demotion threshold) of a running
      job whose state is already its own: a new object each round (its service grew), with
      the same key while it runs with the same state below the threshold.
    """

    __slots__ = ("counter", "due", "held", "keys", "out", "running_memo", "sorted", "waits")

    def __init__(self) -> None:
        self.held: dict[str, Job] = {}
        self.waits: dict[str, tuple[int, float, float]] = {}  # job id -> (tie, waiting, wait)
        self.due: list[tuple[float, int, str]] = []  # (approximate time, tie, job id)
        self.counter = 0
        self.keys: dict[str, _Key] = {}
        self.sorted: list[tuple[_Key, str]] = []
        self.out: dict[str, Job] = {}
        self.running_memo: dict[str, _RunningMemo] = {}

    def promote_due(self, now: float) -> None:
        """Stop holding the waiting jobs whose promotion wait has passed at ``now``."""
        due, waits = self.due, self.waits
        # The heap's times are waiting + wait, which rounding may put a little after the
        # exact test's moment: everything within a margin is tested exactly.
        margin = max(1.0, abs(now) * 1e-9)
        early = []
        while due and due[0][0] <= now + margin:
            entry = heapq.heappop(due)
            job_id = entry[2]
            w = waits.get(job_id)
            if w is None or w[0] != entry[1]:
                continue  # no longer held as it was when queued
            if now - w[1] >= w[2]:
                del self.held[job_id]
                del waits[job_id]
            else:
                early.append(entry)
        for entry in early:
            heapq.heappush(due, entry)

    def hold(self, job: Job, waiting: float, wait: float) -> None:
        """A waiting ``job``'s key and output hold while ``not now - waiting >= wait``."""
        self.held[job.id] = job
        if math.isinf(wait):
            self.unqueue(job.id)
            return
        self.counter += 1
        self.waits[job.id] = (self.counter, waiting, wait)
        heapq.heappush(self.due, (waiting + wait, self.counter, job.id))
        if len(self.due) > 2 * len(self.waits) + 1024:  # stale entries: drop
            waits = self.waits
            self.due[:] = [e for e in self.due if (w := waits.get(e[2])) is not None and w[0] == e[1]]
            heapq.heapify(self.due)

    def unqueue(self, job_id: str) -> None:
        """``job_id`` is no longer held as a waiting job: its heap entry, if any, is stale."""
        self.waits.pop(job_id, None)

    def forget(self, gone: set[str]) -> None:
        """Drop what is kept for jobs no longer in the snapshot (but their keys: reorder)."""
        for job_id in gone:
            self.held.pop(job_id, None)
            self.unqueue(job_id)
            self.running_memo.pop(job_id, None)
            del self.out[job_id]

    def reorder(self, gone: set[str], changed: Mapping[str, _Key]) -> None:
        """Bring the sorted (key, job id) list from the last order to this one: the jobs
        that left or moved are taken out and the moved and new put in by bisection, or,
        when that is much of the list, it is sorted again."""
        keys, ordered = self.keys, self.sorted
        if 4 * (len(gone) + len(changed)) <= len(ordered):
            for job_id in (*gone, *(job_id for job_id in changed if job_id in keys)):
                item = (keys[job_id], job_id)
                i = bisect.bisect_left(ordered, item)
                if i == len(ordered) or ordered[i][1] != job_id:
                    break  # not where its key says (cannot happen): sort again below
                del ordered[i]
                del keys[job_id]
            else:
                for job_id, key in changed.items():
                    keys[job_id] = key
                    bisect.insort(ordered, (key, job_id))
                return
        for job_id in gone:
            keys.pop(job_id, None)
        keys.update(changed)
        ordered[:] = sorted(zip(keys.values(), keys.keys(), strict=True))


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
    # What the last rounds computed, kept to compute only what changed (see _Incremental).
    _state: _Incremental = field(default_factory=_Incremental, init=False, repr=False, compare=False)

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
            queue = bisect.bisect_right(self.thresholds_for(job), job.attained_gpu_s)
            return queue, job.submit_time_s if queue == 0 else now_s
        thresholds = self.thresholds_for(job)
        earned = bisect.bisect_right(thresholds, job.attained_gpu_s)
        if queue > earned:
            # Only thresholds raised since the state was written put a job below the queue
            # its service earns (a site's new configuration; a job whose declared limit
            # changed which thresholds apply to it, :class:`planner.policies.mosaic.ordering.
            # DeclaredLas`): it goes back up to that queue, in the order it entered the
            # other. Service only grows, so with fixed thresholds a queue never exceeds it.
            return earned, float(since)
        if job.is_running:
            # Demotion: a running job that used up its queue's share moves down (to the
            # queue its service belongs in) and joins the back of it.
            if earned > queue:
                return min(earned, len(thresholds)), now_s
        elif queue > 0 and self.promote_knob > 0 and job.attained_gpu_s > 0:
            executed_s = job.attained_gpu_s / job.num_gpus
            if now_s - job.waiting_since() >= self.promote_knob * executed_s:
                return 0, now_s
        return queue, float(since)

    def thresholds_for(self, job: Job) -> tuple[float, ...]:
        """The queues' thresholds that apply to ``job`` (the same for every job here)."""
        return self.thresholds_gpu_s

    @staticmethod
    def _has_state(job: Job) -> bool:
        """True when the job carries a queue and entry time of ours (not a first sight)."""
        state = job.policy_state or {}
        return isinstance(state.get("q"), int) and isinstance(state.get("since"), int | float)

    def order(self, snapshot: Snapshot) -> Sequence[Job]:
        now = snapshot.time_s
        st = self._state
        jobs = snapshot.jobs
        st.promote_due(now)
        held = st.held
        held_get = held.get
        todo = [job for job in jobs if held_get(job.id) is not job]
        running = JobState.RUNNING
        running_memo, keys, out = st.running_memo, st.keys, st.out
        changed: dict[str, _Key] = {}  # job id -> its new sort key, where it moved
        known = len(jobs) - len(todo)  # jobs of the last order: every held one, and below
        for job in todo:
            job_id = job.id
            state = job.policy_state
            run = running_memo.get(job_id)
            if (
                run is not None
                and run[0] is state
                and job.attained_gpu_s < run[3]
                and job.submit_time_s == run[1]
                and job.state is running
                and job.assignment is not None  # is_running, inline
            ):
                # transition() keeps (queue, since) and the job as it is: same state, below
                # the threshold that would demote it, still running.
                key, updated = run[2], job
                held[job_id] = job  # for as long as this object is handed in
                st.unqueue(job_id)
            else:
                queue, since = self.transition(job, now)
                updated = job
                if state is None or state.get("q") != queue or state.get("since") != since:
                    updated = job.with_policy_state({"q": queue, "since": since})
                key = (queue, since, arrival_key(job))
                old = keys.get(job_id)
                if old is not None and old == key:
                    key = old  # the memos hold the very key object the order holds
                running_memo.pop(job_id, None)
                if updated is job and self._has_state(job):
                    if job.is_running:
                        # Demoted once its service reaches its queue's upper threshold
                        # (never from the last queue).
                        thresholds = self.thresholds_for(job)
                        below = thresholds[queue] if queue < len(thresholds) else math.inf
                        running_memo[job_id] = (state, job.submit_time_s, key, below)
                        held[job_id] = job
                        st.unqueue(job_id)
                    else:
                        # Unchanged until promoted: transition() gives (queue, since) again
                        # as long as the job waits less than the promotion wait (never, if
                        # it cannot be promoted).
                        limit = math.inf
                        if queue > 0 and self.promote_knob > 0 and job.attained_gpu_s > 0:
                            limit = self.promote_knob * (job.attained_gpu_s / job.num_gpus)
                        st.hold(job, job.waiting_since(), limit)
                else:
                    held.pop(job_id, None)
                    st.unqueue(job_id)
            previous = keys.get(job_id)
            if previous is not None:
                known += 1
            if previous is not key:
                changed[job_id] = key
            out[job_id] = updated
        gone: set[str] = set()
        if known < len(keys):  # some jobs of the last order are not in this snapshot
            gone = keys.keys() - {job.id for job in jobs}
            st.forget(gone)
        st.reorder(gone, changed)
        return [out[job_id] for _, job_id in st.sorted]


_Key = tuple[int, float, tuple[float, tuple[int, int, str]]]
_RunningMemo = tuple[Mapping[str, Any] | None, float, _Key, float]
