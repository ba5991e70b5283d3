"""Packing pending jobs onto placed jobs' GPUs (Tesserae §4.2, Algorithm 4).

After placement has given as many high-priority jobs as possible GPUs of their own, the
packing stage builds the bipartite graph placed_jobs x pending_jobs:

* an edge only where both jobs need the same number of GPUs, neither is protected
  (guaranteed jobs and jobs with a deadline get no edges: §4.3 "Fairness"), the placed
  job is alone on its GPUs (at most two jobs per GPU), the pair fits in GPU memory (a
  measured ``(0, 0)`` pair never shares) and the pending job accepts the GPU type;
* weight = the pair's normalised combined throughput (packed / isolated, summed), from
  :class:`profiles.colocation.ColocationModel`; an edge exists only when the weight
  exceeds 1 + ``min_gain``, i.e. the pair does more work than the placed job alone;
* for jobs with candidate execution plans (3D-parallel LLM jobs), the weight is the best
  over the pair's plans, and the chosen plans go into the assignments (§4.2
  "Parallelism Strategy").

``tesserae`` solves the maximum-weight matching with the Hungarian algorithm;
``gavel`` is the greedy baseline: pending jobs in priority order each take the best
remaining partner. Two small terms break ties without changing which total is optimal:
a pending job's priority rank (1e-9 per rank) and ``keep_bonus`` for a pair already
sharing these GPUs, which spares both jobs a relaunch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, Self

import numpy as np

from planner.core.model import Assignment, Job, Outcome, Snapshot
from planner.matching import assign, assign_by_kind
from planner.policies.common import options_reader
from planner.registry import StageContext
from planner.stages import PACKINGS, Draft
from profiles.colocation import ColocationModel, Side
from profiles.schema import plan_key

_RANK_TIE = 1e-9
# Up to this many matrix entries the Hungarian runs on the full matrix (milliseconds), so
# its choice among equal-weight matchings stays what it always was; above, the kind-level
# flow finds a matching of the same total weight in a fraction of the time.
_FULL_MATRIX_MAX = 200_000
_NEVER_PACKED = (Outcome.INFEASIBLE, Outcome.NO_GPU_TYPE)

PlanChoice = tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]


@dataclass(frozen=True)
class PackingOptions:
    max_gpus: int | None = None  # only jobs of at most this many GPUs (tiresias-single: 1)
    min_gain: float = 0.0  # an edge needs combined normalised throughput > 1 + min_gain
    keep_bonus: float = 0.05  # weight added to a pair that already shares these GPUs

    @classmethod
    def read(cls, options: Mapping[str, Any], component: str) -> PackingOptions:
        f = options_reader(options, component, ["max_gpus", "min_gain", "keep_bonus"])
        return cls(
            max_gpus=f.opt_int("max_gpus", minimum=1),
            min_gain=f.opt_float("min_gain", minimum=0.0) or 0.0,
            keep_bonus=cls.keep_bonus if not f.has("keep_bonus") else f.req_float("keep_bonus", minimum=0.0),
        )


def _plans(job: Job, current: Mapping[str, Any] | None) -> tuple[Mapping[str, Any] | None, ...]:
    """The plans a job may run with: its candidates, or just the one it has."""
    if not job.candidate_plans:
        return (current,)
    ordered = list(job.candidate_plans)
    # The current plan first, so ties keep it (no relaunch for nothing).
    ordered.sort(key=lambda p: plan_key(p) != plan_key(current))
    return tuple(ordered)


@dataclass(frozen=True)
class ClassGraph:
    """One GPU-count class: placed jobs (rows) x pending jobs (columns), by kind.

    Row r and column c have weight ``kind_weights[row_kind[r], col_kind[c]] - col_tie[c]``
    (plus ``keep_bonus`` for the pairs in ``keep``), allowed where ``kind_allowed`` holds.
    :attr:`weights` and :attr:`forbidden` spell that out as full matrices.
    """

    rows: list[Job]
    cols: list[Job]
    kind_weights: np.ndarray
    kind_allowed: np.ndarray
    row_kind: np.ndarray
    col_kind: np.ndarray
    col_tie: np.ndarray
    keep: tuple[tuple[int, int], ...]
    keep_bonus: float
    kind_plans: dict[tuple[int, int], PlanChoice]

    @cached_property
    def weights(self) -> np.ndarray:
        """The full (rows x columns) weight matrix, clipped at 0."""
        weights = self.kind_weights[np.ix_(self.row_kind, self.col_kind)]
        weights -= self.col_tie[None, :]
        for r, c in self.keep:
            weights[r, c] += self.keep_bonus
        clipped: np.ndarray = np.maximum(weights, 0.0)
        return clipped

    @cached_property
    def forbidden(self) -> np.ndarray:
        """The full (rows x columns) mask of pairs that may not share."""
        mask: np.ndarray = ~self.kind_allowed[np.ix_(self.row_kind, self.col_kind)]
        return mask

    def pair(self, r: int, c: int) -> tuple[Job, Job, PlanChoice]:
        """(placed, pending, their plans) for matrix entry (r, c)."""
        return self.rows[r], self.cols[c], self.kind_plans[(int(self.row_kind[r]), int(self.col_kind[c]))]


@dataclass
class _Class:
    """Rows (placed jobs) and columns (pending jobs) needing the same GPU count."""

    rows: list[Job] = field(default_factory=list)
    cols: list[Job] = field(default_factory=list)


class PackingGraph:
    """The weighted bipartite graph of one round, per GPU-count class.

    Weights are computed per (row type, column type) and broadcast, since thousands of
    jobs come in a few dozen kinds; columns of one kind beyond the number of rows can
    never be matched and are dropped, highest priority kept.
    """

    def __init__(
        self,
        snapshot: Snapshot,
        ordered: Sequence[Job],
        draft: Draft,
        model: ColocationModel,
        options: PackingOptions,
    ) -> None:
        self.snapshot = snapshot
        self.draft = draft
        self.model = model
        self.options = options
        self.rank = {job.id: k for k, job in enumerate(ordered)}
        self.classes: dict[int, _Class] = {}
        limit = options.max_gpus
        for job in ordered:
            if job.guaranteed or job.deadline_s is not None or (limit is not None and job.num_gpus > limit):
                continue
            a = draft.assignments.get(job.id)
            if a is not None:
                if not a.shares_with:
                    self.classes.setdefault(job.num_gpus, _Class()).rows.append(job)
            elif draft.outcomes.get(job.id) not in _NEVER_PACKED:
                self.classes.setdefault(job.num_gpus, _Class()).cols.append(job)

    def largest_node(self, job: Job) -> int:
        """GPUs of the largest node ``job`` may use (one of a type it accepts)."""
        return max((n.gpus for n in self.snapshot.nodes if job.accepts_type(n.gpu_type)), default=0)

    def _row_kind(self, job: Job) -> tuple[object, ...]:
        a = self.draft.assignments[job.id]
        node = self.snapshot.node(a.gpus[0][0])
        spread = len(a.per_node) > 1
        return (
            job.model,
            job.batch_size,
            job.num_gpus,
            plan_key(a.plan),
            _plan_keys(job),
            node.gpu_type,
            spread,
        )

    @staticmethod
    def _col_kind(job: Job) -> tuple[object, ...]:
        current = job.assignment.plan if job.assignment is not None else job.plan
        return (
            job.model,
            job.batch_size,
            job.num_gpus,
            plan_key(current),
            _plan_keys(job),
            job.accepted_types,
        )

    def solve_class(self, g: int) -> ClassGraph:
        """The weighted graph of one class, ready to match."""
        cls = self.classes[g]
        rows = cls.rows
        row_kinds = [self._row_kind(j) for j in rows]
        kept: list[Job] = []
        per_kind: dict[tuple[object, ...], int] = {}
        for job in cls.cols:  # already in priority order
            kind = self._col_kind(job)
            sticky = job.is_running
            if sticky or per_kind.get(kind, 0) < len(rows):
                per_kind[kind] = per_kind.get(kind, 0) + (0 if sticky else 1)
                kept.append(job)
        cols = kept
        col_kinds = [self._col_kind(j) for j in cols]
        row_index = {k: i for i, k in enumerate(dict.fromkeys(row_kinds))}
        col_index = {k: i for i, k in enumerate(dict.fromkeys(col_kinds))}
        row_rep = {row_index[k]: j for k, j in zip(row_kinds, rows, strict=True)}
        col_rep = {col_index[k]: j for k, j in zip(col_kinds, cols, strict=True)}
        kind_w = np.zeros((len(row_index), len(col_index)))
        kind_ok = np.zeros((len(row_index), len(col_index)), dtype=bool)
        kind_plans: dict[tuple[int, int], PlanChoice] = {}
        for r, p in row_rep.items():
            for c, q in col_rep.items():
                w, ok, plans = self._edge(p, q)
                kind_w[r, c], kind_ok[r, c], kind_plans[(r, c)] = w, ok, plans
        ri = np.array([row_index[k] for k in row_kinds], dtype=int)
        ci = np.array([col_index[k] for k in col_kinds], dtype=int)
        tie = _RANK_TIE * np.array([self.rank[q.id] for q in cols], dtype=float)
        row_of_gpus: dict[tuple[object, ...], list[int]] = {}
        for r, p in enumerate(rows):
            row_of_gpus.setdefault(tuple(self.draft.assignments[p.id].gpus), []).append(r)
        keep = tuple(
            (r, c)
            for c, q in enumerate(cols)
            if q.is_running and q.assignment is not None
            for r in row_of_gpus.get(tuple(q.assignment.gpus), [])
        )
        return ClassGraph(rows, cols, kind_w, kind_ok, ri, ci, tie, keep, self.options.keep_bonus, kind_plans)

    def _edge(self, p: Job, q: Job) -> tuple[float, bool, PlanChoice]:
        """Best combined normalised throughput of p and q over their plans."""
        a = self.draft.assignments[p.id]
        gpu_type = self.snapshot.node(a.gpus[0][0]).gpu_type
        if not all(q.accepts_type(self.snapshot.node(n).gpu_type) for n in a.nodes):
            return 0.0, False, (a.plan, q.plan)
        if len(a.per_node) > 1 and q.num_gpus <= self.largest_node(q):
            # Consolidation: a job that some node could hold never runs spread out, not
            # even on a spread partner's GPUs.
            return 0.0, False, (a.plan, q.plan)
        q_current = q.assignment.plan if q.assignment is not None else q.plan
        best: tuple[float, PlanChoice] | None = None
        for plan_p in _plans(p, a.plan):
            for plan_q in _plans(q, q_current):
                est = self.model.estimate(
                    Side(p.model, p.batch_size, p.num_gpus, plan_p),
                    Side(q.model, q.batch_size, q.num_gpus, plan_q),
                    gpu_type,
                )
                if est.fits and (best is None or est.combined > best[0]):
                    best = (est.combined, (plan_p, plan_q))
        if best is None:
            return 0.0, False, (a.plan, q_current)
        return best[0], best[0] > 1.0 + self.options.min_gain, best[1]


def _plan_keys(job: Job) -> tuple[str | None, ...]:
    return tuple(plan_key(p) for p in job.candidate_plans)


def _packed(ordered: Sequence[Job], draft: Draft, pairs: list[tuple[Job, Job, PlanChoice]]) -> Draft:
    """The draft with each pending job sharing its partner's GPUs, in priority order."""
    partner: dict[str, tuple[Job, Mapping[str, Any] | None]] = {}
    for p, q, (plan_p, plan_q) in pairs:
        partner[p.id] = (q, plan_p)
        partner[q.id] = (p, plan_q)
    assignments: dict[str, Assignment] = {}
    for job in ordered:
        a = draft.assignments.get(job.id)
        if job.id not in partner:
            if a is not None:
                assignments[job.id] = a
            continue
        other, plan = partner[job.id]
        if a is not None:  # the placed job: same GPUs, now shared
            assignments[job.id] = Assignment(a.gpus, a.cpus, a.mem_gb, plan, (other.id,))
        else:  # the packed job: its partner's GPUs
            host = draft.assignments[other.id]
            assignments[job.id] = Assignment(host.gpus, 0, 0.0, plan, (other.id,))
    outcomes = dict(draft.outcomes)
    for _, q, _ in pairs:
        outcomes[q.id] = Outcome.PLACED
    return Draft(assignments=assignments, outcomes=outcomes)


@dataclass(frozen=True)
class _PackingStage(ABC):
    """What both packings share: the graph; they differ in how they match it."""

    options: PackingOptions
    model: ColocationModel
    max_jobs_per_gpu: ClassVar[int] = 2
    component: ClassVar[str] = "packing"

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        return cls(
            PackingOptions.read(options, cls.component),
            ColocationModel(context.profiles, noise=context.profile_noise, seed=context.seed),
        )

    def pack(self, snapshot: Snapshot, ordered: Sequence[Job], draft: Draft) -> Draft:
        graph = PackingGraph(snapshot, ordered, draft, self.model, self.options)
        pairs: list[tuple[Job, Job, PlanChoice]] = []
        for g, cls in graph.classes.items():
            if cls.rows and cls.cols:
                pairs.extend(self.match(graph.solve_class(g)))
        return _packed(ordered, draft, pairs) if pairs else draft

    @abstractmethod
    def match(self, graph: ClassGraph) -> list[tuple[Job, Job, PlanChoice]]:
        """(placed, pending, plans) pairs of one GPU-count class."""


@PACKINGS.register("tesserae")
@dataclass(frozen=True)
class TesseraePacking(_PackingStage):
    """Maximum-weight matching of pending onto placed jobs (Tesserae Algorithm 4).

    Options: ``max_gpus`` (pack only jobs this small; 1 = Tiresias-Single), ``min_gain``,
    ``keep_bonus``.
    """

    component: ClassVar[str] = "tesserae packing"

    def match(self, graph: ClassGraph) -> list[tuple[Job, Job, PlanChoice]]:
        if len(graph.rows) * len(graph.cols) <= _FULL_MATRIX_MAX:
            pairs = assign(graph.weights, maximize=True, forbidden=graph.forbidden)
            return [graph.pair(r, c) for r, c in pairs]
        bonus = dict.fromkeys(graph.keep, graph.keep_bonus)
        pairs = assign_by_kind(
            graph.kind_weights, graph.kind_allowed, graph.row_kind, graph.col_kind, graph.col_tie, bonus
        )
        return [graph.pair(r, c) for r, c in pairs]


@PACKINGS.register("gavel")
@dataclass(frozen=True)
class GavelPacking(_PackingStage):
    """Greedy same-scale pairing in priority order (the Gavel-style baseline).

    Each pending job, highest priority first, takes the placed job of its GPU count with
    which it does the most work, if the pair beats the placed job alone.
    """

    component: ClassVar[str] = "gavel packing"

    def match(self, graph: ClassGraph) -> list[tuple[Job, Job, PlanChoice]]:
        # Each column takes the free usable row of the highest weight, the first such row
        # on ties (argmax over the full matrix). Rows of one kind weigh the same for every
        # column, so only each kind's first free row and the column's keep rows compete.
        n_kinds = graph.kind_weights.shape[0]
        members: list[list[int]] = [[] for _ in range(n_kinds)]
        for r, a in enumerate(graph.row_kind):
            members[int(a)].append(r)
        head = [0] * n_kinds  # index into members[a] of its first row that may be free
        taken = np.zeros(len(graph.rows), dtype=bool)
        keep_rows: dict[int, list[int]] = {}
        for r, c in graph.keep:
            keep_rows.setdefault(c, []).append(r)
        pairs = []
        for c in range(len(graph.cols)):  # columns are in priority order
            b = int(graph.col_kind[c])
            values = np.maximum(graph.kind_weights[:, b] - graph.col_tie[c], 0.0)
            special = [r for r in keep_rows.get(c, []) if not taken[r]]
            best: tuple[float, int] | None = None  # (weight, -row): max weight, then first row
            for r in special:
                a = int(graph.row_kind[r])
                if graph.kind_allowed[a, b]:
                    w = max(graph.kind_weights[a, b] - graph.col_tie[c] + graph.keep_bonus, 0.0)
                    if best is None or (w, -r) > best:
                        best = (w, -r)
            for a in np.flatnonzero(graph.kind_allowed[:, b]):
                rows = members[a]
                k = head[a]
                while k < len(rows) and taken[rows[k]]:
                    k += 1
                head[a] = k
                while k < len(rows) and (taken[rows[k]] or rows[k] in special):
                    k += 1
                if k < len(rows) and (best is None or (values[a], -rows[k]) > best):
                    best = (float(values[a]), -rows[k])
            if best is None:
                continue
            r = -best[1]
            taken[r] = True
            pairs.append(graph.pair(r, c))
        return pairs
