"""One running job and one new job on the same GPUs: share now, or wait (SJF-BSBF §V-A).

A running job with ``R`` seconds of solo work left and a new job with ``N`` seconds of
solo work: if the new job starts at ``τ`` in [0, R] and both share the GPUs from then
on, each runs ξ times slower while they overlap (Eq. 16-17) and alone afterwards.
Theorem 1: the pair's average completion time is smallest either at ``τ = 0`` (fully
concurrent) or at ``τ = R`` (fully sequential), never in between. (While the new job
would finish first, the average grows with τ at slope 1/2; once the running job would
finish first it is linear in τ; so the minimum of this continuous piecewise-linear
function is at an end.) The rule therefore compares two numbers.

Algorithm 2 adds the new job's micro-batch: under gradient accumulation its solo time
is ``N`` times the accumulation slowdown and its ξ is the one measured at the
micro-batch (which may fit in GPU memory next to the running job where the full batch
does not). The running job's batch is never changed.

Times are measured from now; arrival times are sunk, so comparing completion times
compares JCTs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class PairTimes:
    """Solo times left (seconds) and interference ratios of a running job and a new job."""

    running_s: float
    new_s: float
    xi_running: float
    xi_new: float

    def __post_init__(self) -> None:
        if not (self.running_s >= 0 and self.new_s >= 0):
            raise ValueError(f"solo times must be >= 0, got {self.running_s} and {self.new_s}")
        if not (self.xi_running > 0 and self.xi_new > 0):
            raise ValueError(f"interference ratios must be > 0, got {self.xi_running} and {self.xi_new}")


def completion_times(t: PairTimes, insert_at_s: float) -> tuple[float, float]:
    """(running job, new job) completion times when the new job starts at ``insert_at_s``.

    ``insert_at_s`` is clamped to [0, R]; at R the jobs run one after the other.
    """
    tau = min(max(insert_at_s, 0.0), t.running_s)
    end_running, end_new = _shared_from_now(t.running_s - tau, t.new_s, t.xi_running, t.xi_new)
    return tau + end_running, tau + end_new


def _shared_from_now(left: float, new: float, xi_running: float, xi_new: float) -> tuple[float, float]:
    """Completion times when both start sharing now (``left``: the running job's solo work)."""
    together_running = xi_running * left  # the running job's rest, shared
    together_new = xi_new * new  # the new job, shared throughout
    if together_running <= together_new:  # Eq. 18-19: the running job finishes first
        return together_running, together_running + (new - together_running / xi_new)
    # Eq. 22-23: the new job finishes first
    return together_new + (left - together_new / xi_running), together_new


def average_completion_s(t: PairTimes, insert_at_s: float) -> float:
    end_running, end_new = completion_times(t, insert_at_s)
    return (end_running + end_new) / 2.0


@dataclass(frozen=True, slots=True)
class SubBatchOption:
    """The new job run as ``steps`` accumulation steps of ``micro_batch`` beside the running job.

    ``slowdown``: the new job's solo time with this accumulation over its time without.
    ``xi_running`` / ``xi_new``: the pair's interference ratios at this micro-batch.
    """

    micro_batch: int | None
    steps: int
    slowdown: float
    xi_running: float
    xi_new: float


@dataclass(frozen=True, slots=True)
class PairDecision:
    """Theorem 1's verdict for one pair, with Algorithm 2's best micro-batch.

    ``concurrent``: start the new job now, sharing; otherwise it should wait for the
    running job. ``avg_completion_s`` is the pair's average completion time under the
    verdict (Algorithm 1 sorts candidate GPUs by it); ``option`` is the best concurrent
    setting (``None`` when no micro-batch fits beside the running job).
    """

    concurrent: bool
    avg_completion_s: float
    sequential_s: float
    concurrent_s: float
    option: SubBatchOption | None


def best_setting(running_s: float, new_s: float, options: Sequence[SubBatchOption]) -> PairDecision:
    """Algorithm 2: the best micro-batch for the new job, and Theorem 1's choice with it.

    ``running_s``: the running job's solo time left; ``new_s``: the new job's solo time
    at its own batch (no accumulation), which is what it runs with when it waits.
    Ties go to waiting: sharing that gains nothing only risks interference. An unknown
    (infinite) solo time cannot show a gain either, so such a pair waits.

    >>> opt = SubBatchOption(micro_batch=None, steps=1, slowdown=1.0, xi_running=1.5, xi_new=1.5)
    >>> d = best_setting(3600.0, 600.0, [opt])
    >>> d.concurrent, round(d.avg_completion_s)
    (True, 2400)
    """
    sequential = (running_s + running_s + new_s) / 2.0
    best: tuple[float, SubBatchOption] | None = None
    if math.isfinite(running_s) and math.isfinite(new_s):
        PairTimes(running_s, new_s, 1.0, 1.0)  # validates the times once
        for option in options:
            end_running, end_new = _shared_from_now(
                running_s, new_s * option.slowdown, option.xi_running, option.xi_new
            )
            value = (end_running + end_new) / 2.0
            if best is None or value < best[0]:
                best = (value, option)
    if best is None:
        return PairDecision(False, sequential, sequential, math.inf, None)
    concurrent = best[0] < sequential
    return PairDecision(concurrent, min(best[0], sequential), sequential, best[0], best[1])


def concurrent_completion_s(
    running_s: np.ndarray,
    new_s: float,
    slowdown: np.ndarray,
    xi_running: np.ndarray,
    xi_new: np.ndarray,
    valid: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`best_setting` for many running jobs beside one new job, with numpy.

    Row i of the (n, k) option arrays holds running job i's options (Algorithm 2's
    micro-batches, ``valid`` where one exists); ``running_s`` is (n,) or (n, 1). Returns
    per running job whether Theorem 1 says share now (``PairDecision.concurrent``) and
    the pair's average completion time under that verdict
    (``PairDecision.avg_completion_s``), computed with the same floating-point
    operations in the same order as :func:`best_setting`, so the numbers are identical.

    >>> one = np.ones((2, 1))
    >>> running = np.array([3600.0, 100.0])
    >>> ok, avg = concurrent_completion_s(running, 600.0, one, 1.5 * one, 1.5 * one, one > 0)
    >>> ok.tolist(), [round(v) for v in avg]
    ([True, False], [2400, 400])
    """
    running = np.asarray(running_s, dtype=float).reshape(-1)
    sequential = (running + running + new_s) / 2.0
    finite = np.isfinite(running) & math.isfinite(new_s)
    if finite.any():
        bad = np.flatnonzero(finite & ~(running >= 0))
        PairTimes(float(running[bad[0]]) if bad.size else 0.0, new_s, 1.0, 1.0)  # raises as best_setting does
    left = running[:, None]
    with np.errstate(invalid="ignore", over="ignore"):
        new = new_s * slowdown
        together_running = xi_running * left
        together_new = xi_new * new
        running_first = together_running <= together_new
        new_first_end = together_new + (left - together_new / xi_running)  # Eq. 22
        running_first_end = together_running + (new - together_running / xi_new)  # Eq. 19
        end_running = np.where(running_first, together_running, new_first_end)
        end_new = np.where(running_first, running_first_end, together_new)
        value = np.where(valid, (end_running + end_new) / 2.0, np.inf)
    best = value.min(axis=1) if value.shape[1] else np.full(len(running), np.inf)
    concurrent = finite & valid.any(axis=1) & (best < sequential)
    return concurrent, np.where(concurrent, best, sequential)
