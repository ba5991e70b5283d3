"""Gavel, heterogeneity-aware (OSDI'20): an LP over time fractions, realised round by round.

Crius §8.1's "Gavel" baseline: heterogeneity-aware, but a job keeps its GPU count (Gavel
does not scale counts; the artifact fixes it too). Two stages:

* ordering ``gavel-het`` (:class:`GavelHetOrdering`): the **allocation** ``X[j][t]``, the
  fraction of time job ``j`` should spend on GPU type ``t`` (:func:`gavel_allocation`,
  ``scipy.optimize.linprog(method="highs")``), then the **round**: Gavel's mechanism gives
  each (job, type) the priority ``X[j][t] / f[j][t]``, ``f`` the fraction of the job's time
  in the system it has received on ``t`` (infinite while 0), walks the pairs by priority and
  gives a job the type while that type has GPUs left for it (Gavel §5: "jobs with the largest
  priority get the type"). Time received per type is kept in ``Job.policy_state``; the jobs
  come out in the order the round chose them, then the ones it did not choose.
* placement ``gavel-het`` (:class:`GavelHetPlacement`): realises that choice on physical
  GPUs: running jobs that keep their type keep their GPUs, then in order each job takes free
  GPUs of its chosen type (consolidated), and where that fails (fragmentation), or for a job
  the round did not choose, another type it can use, by priority (work conservation).

Throughputs are what the baseline can know (:class:`~.view.DpView`, data-parallel profiles,
Crius §8.1). A running job moves to another type only if it is elastic (accepts several
types, the pipeline's rule for moving running jobs); a rigid job that accepts any type picks
its type when it starts.

**The LP** (Gavel §4.1, heterogeneity-aware LAS): with ``T[j][t]`` the job's throughput on
its ``s_j`` GPUs of type ``t``, normalised so jobs of different models compare by its throughput
under the proportional allocation (time on each type in proportion to the type's share of the
cluster's GPUs, Gavel's ``ProportionalPolicy``, the normaliser of its water-filling policy;
Gavel's plain ``MaxMinFairnessPolicyWithPerf`` normalises by an equal-share LP's allocation
instead, which is not unique), ``max-min`` solves::

    maximise z  s.t.  z <= s_j * sum_t T[j][t] X[j][t]        for every job j
                      sum_t X[j][t] <= 1                        (time fractions)
                      sum_j s_j X[j][t] <= capacity_t           (GPUs of each type)
                      0 <= X[j][t] <= 1, X[j][t] = 0 where the job cannot run on t

then, keeping every job at ``z`` or more, maximises ``sum_j s_j sum_t T[j][t] X[j][t]`` (one
step of Gavel's water filling: without it the LP is indifferent to GPUs left idle).
``max-throughput`` (the objective Crius's artifact gives Gavel) maximises that sum alone.
Options of both stages: ``objective`` (``max-min``), ``dp_check`` (true: the data-parallel
memory check).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Self

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from planner.core.model import Assignment, Job, Outcome, Snapshot
from planner.policies.baselines.common import (
    FreeGpus,
    assignment_for,
    capacity,
    cluster_types,
    current_type,
    slots_on_type,
)
from planner.policies.baselines.view import DpView
from planner.policies.common import arrival_key, choice, options_reader
from planner.registry import StageContext
from planner.stages import ORDERINGS, PLACEMENTS, Draft

OBJECTIVES = ("max-min", "max-throughput")
_STATE = "gavel"
_TINY = 1e-9


def gavel_allocation(
    throughputs: np.ndarray, scale: np.ndarray, capacity: np.ndarray, objective: str = "max-min"
) -> np.ndarray:
    """Gavel's allocation ``X`` (jobs x types, time fractions) by linear programming (HiGHS).

    Parameters
    ----------
    throughputs : (m, n) array
        Job ``j``'s throughput on its ``scale[j]`` GPUs of type ``t``; 0 where it cannot run.
    scale : (m,) array
        GPUs per job (Gavel's scale factor).
    capacity : (n,) array
        GPUs per type.
    objective : ``"max-min"`` or ``"max-throughput"`` (module docstring).

    Returns
    -------
    (m, n) array with rows summing to at most 1 and ``sum_j scale[j] X[j][t] <= capacity[t]``;
    a job that can run nowhere gets a row of zeros.

    >>> x = gavel_allocation(np.array([[2.0, 1.0]]), np.array([1.0]), np.array([1.0, 1.0]))
    >>> [round(v, 6) for v in x[0]]
    [1.0, 0.0]
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    thr = np.asarray(throughputs, dtype=float)
    scale = np.asarray(scale, dtype=float)
    cap = np.asarray(capacity, dtype=float)
    m, n = thr.shape if thr.ndim == 2 else (0, 0)
    if thr.ndim != 2 or scale.shape != (m,) or cap.shape != (n,):
        raise ValueError(f"shapes: throughputs {thr.shape}, scale {scale.shape}, capacity {cap.shape}")
    if np.any(thr < 0) or np.any(scale <= 0) or np.any(cap < 0) or not np.all(np.isfinite(thr)):
        raise ValueError("throughputs and capacities must be finite and >= 0, scale factors > 0")
    x = np.zeros((m, n))
    # A job runs on a type only where its s_j GPUs exist there.
    thr = np.where(scale[:, None] <= cap[None, :], thr, 0.0)
    share = cap / cap.sum() if cap.sum() > 0 else cap
    norm = thr @ share
    live = np.flatnonzero(norm > 0)
    if live.size == 0:
        return x
    value = thr[live] / norm[live, None] * scale[live, None]  # s_j * T[j][t]
    k = live.size
    nv = k * n
    gains = value.reshape(nv)
    bounds = [(0.0, 1.0 if g > 0 else 0.0) for g in gains]
    var = np.arange(nv)
    job_of, type_of = var // n, var % n
    # sum_t X[j][t] <= 1 (rows 0..k-1); sum_j s_j X[j][t] <= capacity_t (rows k..k+n-1).
    a_base = sparse.coo_matrix(
        (
            np.concatenate([np.ones(nv), scale[live][job_of]]),
            (np.concatenate([job_of, k + type_of]), np.concatenate([var, var])),
        ),
        shape=(k + n, nv),
    ).tocsr()
    b_base = np.concatenate([np.ones(k), cap])
    # -s_j T_j . X_j per job (rows of the fairness constraints).
    a_fair = sparse.coo_matrix((-gains, (job_of, var)), shape=(k, nv)).tocsr()
    if objective == "max-min":
        # Variables [X..., z]: minimise -z with z - s_j T_j . X_j <= 0.
        z_col = sparse.coo_matrix((np.ones(k), (np.arange(k), np.zeros(k, dtype=int))), shape=(k, 1))
        a_ub = sparse.vstack(
            [sparse.hstack([a_base, sparse.csr_matrix((k + n, 1))]), sparse.hstack([a_fair, z_col])]
        ).tocsr()
        b_ub = np.concatenate([b_base, np.zeros(k)])
        c = np.zeros(nv + 1)
        c[nv] = -1.0
        first = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=[*bounds, (0.0, None)], method="highs")
        if first.status != 0:
            raise ArithmeticError(f"Gavel's max-min LP failed: {first.message}")
        floor = first.x[nv] * (1.0 - 1e-7)
        # Keep every job at the fair level, then use what is left (water filling's first step).
        a_ub2 = sparse.vstack([a_base, a_fair]).tocsr()
        b_ub2 = np.concatenate([b_base, np.full(k, -floor)])
    else:
        a_ub2, b_ub2 = a_base, b_base
    second = linprog(-gains, A_ub=a_ub2, b_ub=b_ub2, bounds=bounds, method="highs")
    if second.status != 0:
        raise ArithmeticError(f"Gavel's LP failed: {second.message}")
    x[live] = np.clip(second.x[:nv].reshape(k, n), 0.0, 1.0)
    return x


@dataclass(frozen=True)
class _Round:
    """One job's Gavel state, as kept in ``policy_state["gavel"]``."""

    x: dict[str, float]
    received: dict[str, float]
    since: float
    at: float
    chosen: str | None

    def to_state(self) -> dict[str, Any]:
        return {"x": self.x, "recv": self.received, "since": self.since, "at": self.at, "type": self.chosen}

    @classmethod
    def of(cls, job: Job) -> _Round | None:
        raw = (job.policy_state or {}).get(_STATE)
        if not isinstance(raw, Mapping):
            return None
        try:
            x = {str(t): float(v) for t, v in dict(raw.get("x") or {}).items()}
            received = {str(t): float(v) for t, v in dict(raw.get("recv") or {}).items()}
            chosen = raw.get("type")
            return cls(
                x, received, float(raw["since"]), float(raw["at"]), None if chosen is None else str(chosen)
            )
        except (KeyError, TypeError, ValueError):
            return None  # state from elsewhere: start afresh

    def priority(self, gpu_type: str, now: float) -> float:
        """``X / fraction received`` (Gavel §5); infinite while nothing was received there."""
        x = self.x.get(gpu_type, 0.0)
        elapsed = now - self.since
        got = self.received.get(gpu_type, 0.0)
        if x <= _TINY:
            return 0.0
        if elapsed <= 0 or got <= 0:
            return math.inf
        return x / (got / elapsed)


def _options(options: Mapping[str, Any], component: str) -> tuple[str, bool]:
    f = options_reader(options, component, ["objective", "dp_check"])
    objective = choice(f, "objective", OBJECTIVES, "max-min")
    return objective, f.flag("dp_check", True)


@ORDERINGS.register("gavel-het")
@dataclass(frozen=True)
class GavelHetOrdering:
    """Gavel's LP and round mechanism (module docstring). Options: ``objective``, ``dp_check``."""

    view: DpView
    objective: str = "max-min"
    dp_check: bool = True
    preemptive_by_default: ClassVar[bool] = True

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        objective, dp_check = _options(options, "gavel-het ordering")
        return cls(DpView(context.profiles), objective, dp_check)

    def throughputs(self, snapshot: Snapshot, jobs: Sequence[Job]) -> np.ndarray:
        types = cluster_types(snapshot)
        return np.array(
            [
                [
                    self.view.throughput(j, t, j.num_gpus, dp_check=self.dp_check)
                    if j.accepts_type(t)
                    else 0.0
                    for t in types
                ]
                for j in jobs
            ]
        ).reshape(len(jobs), len(types))

    def order(self, snapshot: Snapshot) -> Sequence[Job]:
        jobs = sorted(snapshot.jobs, key=arrival_key)
        if not jobs:
            return []
        now = snapshot.time_s
        types = cluster_types(snapshot)
        sizes = capacity(snapshot)
        x = gavel_allocation(
            self.throughputs(snapshot, jobs),
            np.array([float(j.num_gpus) for j in jobs]),
            np.array([float(sizes[t]) for t in types]),
            self.objective,
        )
        rounds: dict[str, _Round] = {}
        for row, job in enumerate(jobs):
            old = _Round.of(job)
            received = dict(old.received) if old is not None else {}
            held = current_type(snapshot, job)
            if old is not None and held is not None and now > old.at:
                received[held] = received.get(held, 0.0) + (now - old.at)
            since = old.since if old is not None else now
            fractions = {t: float(x[row, c]) for c, t in enumerate(types) if x[row, c] > _TINY}
            rounds[job.id] = _Round(fractions, received, since, now, None)
        # The round: (job, type) pairs by priority, a type given while it has GPUs left.
        pairs = [
            (rounds[j.id].priority(t, now), rounds[j.id].x[t], -k, j, t)
            for k, j in enumerate(jobs)
            for t in types
            if t in rounds[j.id].x
        ]
        pairs.sort(key=lambda p: (p[0], p[1], p[2]), reverse=True)
        left = dict(sizes)
        chosen: dict[str, str] = {}
        for _, _, _, job, t in pairs:
            if job.id not in chosen and job.num_gpus <= left[t]:
                left[t] -= job.num_gpus
                chosen[job.id] = t
        ranked = [j for j in jobs if j.id in chosen]
        ranked.sort(key=lambda j: list(chosen).index(j.id))
        best = {
            j.id: max((rounds[j.id].priority(t, now) for t in rounds[j.id].x), default=-1.0) for j in jobs
        }
        rest = sorted((j for j in jobs if j.id not in chosen), key=lambda j: -best[j.id])  # stable: arrival
        out = []
        for job in ranked + rest:
            state = replace(rounds[job.id], chosen=chosen.get(job.id)).to_state()
            out.append(replace(job, policy_state={**(job.policy_state or {}), _STATE: state}))
        return out


@PLACEMENTS.register("gavel-het")
@dataclass(frozen=True)
class GavelHetPlacement:
    """Realises the round the ``gavel-het`` ordering chose (module docstring)."""

    view: DpView
    dp_check: bool = True

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        _, dp_check = _options(options, "gavel-het placement")
        return cls(DpView(context.profiles), dp_check)

    def _candidates(self, snapshot: Snapshot, job: Job, state: _Round | None) -> list[str]:
        """Types to try, in order: the chosen one, then the others it can run on by priority."""
        usable = [
            t
            for t in cluster_types(snapshot)
            if job.accepts_type(t) and self.view.feasible(job, t, job.num_gpus, dp_check=self.dp_check)
        ]
        if state is None:
            return usable
        now = snapshot.time_s
        ranked = sorted(usable, key=lambda t: (-state.priority(t, now), -state.x.get(t, 0.0)))
        return sorted(ranked, key=lambda t: t != state.chosen)  # the chosen type first (stable)

    def place(self, snapshot: Snapshot, ordered: Sequence[Job]) -> Draft:
        states = {j.id: _Round.of(j) for j in ordered}
        assignments: dict[str, Assignment] = {}
        outcomes: dict[str, Outcome] = {}
        free = FreeGpus(snapshot)
        # Pass 1: running jobs the round keeps on their type keep their GPUs.
        for job in ordered:
            state = states[job.id]
            held = current_type(snapshot, job)
            if held is None or state is None or state.chosen is None or job.assignment is None:
                continue
            if (state.chosen == held or not job.elastic) and free.has(job.assignment.gpus):
                free.take(job.assignment.gpus)
                assignments[job.id] = job.assignment
                outcomes[job.id] = Outcome.KEPT
        # Pass 2: the others, in order.
        for job in ordered:
            if job.id in assignments:
                continue
            state = states[job.id]
            held = current_type(snapshot, job)
            a = job.assignment
            move_to = state.chosen if state is not None and job.elastic else None
            if job.is_running and a is not None and free.has(a.gpus) and move_to in (None, held):
                free.take(a.gpus)  # not chosen this round, but its GPUs are idle: it goes on
                assignments[job.id] = a
                outcomes[job.id] = Outcome.KEPT
                continue
            types = self._candidates(snapshot, job, state)
            if not types:
                accepted = any(job.accepts_type(n.gpu_type) for n in snapshot.nodes)
                outcomes[job.id] = Outcome.INFEASIBLE if accepted else Outcome.NO_GPU_TYPE
                continue
            for t in types:
                slots = slots_on_type(snapshot, job, job.num_gpus, free, t)
                if slots is not None:
                    free.take(slots)
                    assignments[job.id] = assignment_for(job, slots)
                    outcomes[job.id] = Outcome.PLACED
                    break
            else:
                if job.is_running and a is not None and free.has(a.gpus):
                    free.take(a.gpus)  # its chosen type had no room after all: it stays
                    assignments[job.id] = a
                    outcomes[job.id] = Outcome.KEPT
                else:
                    outcomes[job.id] = Outcome.NO_CAPACITY
        return Draft({j.id: assignments[j.id] for j in ordered if j.id in assignments}, outcomes)
