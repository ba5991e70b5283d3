"""Resource sensitivity curves (Rubick §5.2): each job's best plan and throughput per resource amount.

"Such a curve depicts the performance variation of a job when scaling a certain type of
resource (with other types fixed) ... by only choosing the best plan and the performance for
each resource amount" (§5.2, Fig. 6). :class:`CurveBook` answers, for a job's model, global
batch and plan space, the best plan and its throughput (samples per second) at ``g`` GPUs on
``n`` nodes with ``c`` CPUs per GPU, from the plan pricer (``profiles.plan_pricing``: Rubick's
fitted performance model plus the memory check). Answers are memoised: "the curves can be
computed ... prior to the scheduling, and then cached for reuse" (§5.2).

A plan fits when its memory estimate fits one GPU of the node the job runs on: the curve's
own (:func:`node_shape`: the largest node of a type the job accepts, its own ``gpu_mem_gb`` or
its type's in the GPU catalog), or, where the stage knows the job's nodes, theirs
(``gpu_mem_gb`` of :meth:`JobCurve.best`). A node of a type the catalog does not know is
priced with the pricer's default, the A800's 80 GB its measurements come from.

:class:`JobCurve` is one job's view: its plan space (the plans it lets the scheduler choose,
see :func:`job_curve`), the layout of ``g`` GPUs on its nodes, its reference throughput (the
submitted plan on the requested GPUs: what a guaranteed job is promised, §5.1) and the slopes
(throughput change per GPU or per CPU, normalised by the reference so that jobs of different
models compare). The GPU curve is the envelope of the best plans over the counts the job
accepts (:meth:`JobCurve.envelope`): flat, never falling, where a count runs slower than a
smaller one, and starting from nothing at the job's minimum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planner.cluster import gpu_mem_gb_of
from planner.core.execplan import ExecPlan, PlanError, plan_from_mapping, replan
from planner.core.model import Job, Snapshot
from planner.policies.rubick.plans import candidate_plans
from profiles.plan_pricing import PlanPricer

FrozenPlan = tuple[tuple[str, Any], ...]
Space = tuple[str, tuple[FrozenPlan, ...]]
"""A plan space: ``("search", ())`` (every candidate of :mod:`.plans`) or ``("given", plans)``."""
SEARCH: Space = ("search", ())
TIE = 1e-6
"""Relative throughput difference under which two plans' predictions are a tie."""
Shape = tuple[int, float, float | None]
"""A node's GPUs, CPUs per GPU and GPU memory (``None``: the pricer's default)."""


def given(*plans: Mapping[str, Any] | None) -> Space:
    """The space of the listed plans (``None``: the default plan), duplicates dropped, order kept."""
    seen: list[FrozenPlan] = []
    for p in plans:
        frozen = tuple(sorted((p or {}).items()))
        if frozen not in seen:
            seen.append(frozen)
    return ("given", tuple(seen))


@dataclass(frozen=True, slots=True)
class Point:
    """The best plan at one resource amount and its predicted throughput (samples/s)."""

    gpus: int
    nodes: int
    cpus_per_gpu: float
    plan: ExecPlan
    throughput: float


class CurveBook:
    """Memoised best plans (module docstring). The pricer is made on first use."""

    def __init__(self, pricer: Callable[[], PlanPricer]) -> None:
        self._make = pricer
        self._pricer: PlanPricer | None = None
        self._best: dict[tuple[Any, ...], Point | None] = {}
        self._plans: dict[tuple[Any, ...], list[ExecPlan]] = {}
        self._curves: dict[tuple[Any, ...], JobCurve] = {}
        self._known: dict[str, bool] = {}

    @property
    def pricer(self) -> PlanPricer:
        if self._pricer is None:
            self._pricer = self._make()
        return self._pricer

    def knows(self, model: str) -> bool:
        known = self._known.get(model)
        if known is None:
            known = self._known[model] = self.pricer.model(model) is not None
        return known

    def curve(
        self,
        model: str,
        batch: int,
        space: Space,
        own: Space,
        gpn: int,
        cpus: float,
        requested: int,
        low: int = 1,
        gpu_mem_gb: float | None = None,
    ) -> JobCurve:
        """The (memoised) curves of a job of this model, batch, plan space, request and
        fewest GPUs it accepts (``low``), on GPUs of ``gpu_mem_gb`` (``None``: the pricer's)."""
        key = (model, batch, space, own, gpn, cpus, requested, low, gpu_mem_gb)
        found = self._curves.get(key)
        if found is None:
            draft = JobCurve(self, model, batch, space, own, gpn, cpus, requested, None, low, gpu_mem_gb)
            point = draft.own_at(requested)
            target = None if point is None else point.throughput
            found = JobCurve(self, model, batch, space, own, gpn, cpus, requested, target, low, gpu_mem_gb)
            self._curves[key] = found
        return found

    def best(
        self,
        model: str,
        batch: int,
        space: Space,
        gpus: int,
        nodes: int,
        cpus: float,
        gpu_mem_gb: float | None = None,
    ) -> Point | None:
        """The fastest plan of ``space`` on ``gpus`` GPUs over ``nodes`` nodes that fits GPUs of
        ``gpu_mem_gb`` (``None``: the pricer's); ties: first."""
        nodes = even_nodes(gpus, nodes)
        key = (model, batch, space, gpus, nodes, cpus, gpu_mem_gb)
        if key in self._best:
            return self._best[key]
        plans = self.plans(model, batch, space, gpus, gpus // nodes)
        times = self.pricer.iteration_times(model, [(p, nodes, cpus) for p in plans], gpu_mem_gb)
        best: Point | None = None
        for plan, t in zip(plans, times, strict=True):
            if t is not None and (best is None or batch / t > best.throughput):
                best = Point(gpus, nodes, cpus, plan, batch / t)
        self._best[key] = best
        return best

    def plans(self, model: str, batch: int, space: Space, gpus: int, gpus_per_node: int) -> list[ExecPlan]:
        key = (model, batch, space, gpus, gpus_per_node)
        cached = self._plans.get(key)
        if cached is not None:
            return cached
        if space[0] == "search":
            info = self.pricer.model(model)
            assert info is not None
            plans = candidate_plans(
                gpus,
                batch,
                gpus_per_node=gpus_per_node,
                hidden=info.shape.hidden,
                layers=info.shape.layers,
                params=info.shape.params,
            )
        else:
            plans = []
            for frozen in space[1]:
                try:
                    plans.append(replan(plan_from_mapping(dict(frozen)), gpus, batch))
                except PlanError:
                    continue  # this plan cannot run on ``gpus`` GPUs
        self._plans[key] = plans
        return plans


def even_nodes(gpus: int, nodes: int) -> int:
    """The fewest node count >= ``nodes`` that ``gpus`` spread evenly over (the performance model
    spreads a job's GPUs evenly; a placement may not)."""
    return next(n for n in range(max(1, nodes), gpus + 1) if gpus % n == 0) if gpus >= 1 else nodes


def layout(gpus: int, gpus_per_node: int) -> int | None:
    """Nodes ``gpus`` GPUs take when consolidated (equal counts per node); ``None``: no such layout."""
    if gpus <= gpus_per_node:
        return 1
    nodes = math.ceil(gpus / gpus_per_node)
    return nodes if gpus % nodes == 0 else None


@dataclass(frozen=True, slots=True)
class JobCurve:
    """One job's sensitivity curves (module docstring)."""

    book: CurveBook
    model: str
    batch: int
    space: Space
    own: Space
    gpus_per_node: int
    cpus_per_gpu: float
    requested: int
    target: float | None
    """Throughput of the submitted plan on the requested GPUs; ``None``: it does not fit memory."""
    low: int = 1
    """The fewest GPUs the job accepts: counts below it are not on its curve."""
    gpu_mem_gb: float | None = None
    """Memory of one GPU of the node the curve is shaped on (``None``: the pricer's)."""
    _memo: dict[tuple[Any, ...], Any] = field(default_factory=dict, compare=False, repr=False)

    def best(
        self, gpus: int, nodes: int | None = None, cpus: float | None = None, gpu_mem_gb: float | None = None
    ) -> Point | None:
        """The best plan at ``gpus`` GPUs on ``nodes`` nodes with ``cpus`` per GPU, on GPUs of
        ``gpu_mem_gb`` (each defaults to the curve's own)."""
        nodes = layout(gpus, self.gpus_per_node) if nodes is None else nodes
        if nodes is None or gpus < 1:
            return None
        c = self.cpus_per_gpu if cpus is None else cpus
        mem = self.gpu_mem_gb if gpu_mem_gb is None else gpu_mem_gb
        key = ("best", gpus, nodes, c, mem)
        if key not in self._memo:
            self._memo[key] = self._best(gpus, nodes, c, mem)
        found: Point | None = self._memo[key]
        return found

    def _best(self, gpus: int, nodes: int, c: float, mem: float | None) -> Point | None:
        best = self.book.best(self.model, self.batch, self.space, gpus, nodes, c, mem)
        if self.space == self.own:
            return best
        # The submitted plan is always a candidate (a searched space may lack its exact shape),
        # and wins a tie: a plan the model prices the same (ZeRO-1 and ZeRO-2 move the same
        # volume) is no reason to run otherwise than the user asked, and which of two equal
        # predictions is larger in the last bits depends on the CPU's floating-point kernels.
        own = self.book.best(self.model, self.batch, self.own, gpus, nodes, c, mem)
        if own is not None and (best is None or own.throughput >= best.throughput * (1 - TIE)):
            return own
        return best

    def own_at(self, gpus: int, nodes: int | None = None, cpus: float | None = None) -> Point | None:
        """The submitted plan (rescaled to ``gpus``), not the best one."""
        nodes = layout(gpus, self.gpus_per_node) if nodes is None else nodes
        if nodes is None:
            return None
        c = self.cpus_per_gpu if cpus is None else cpus
        return self.book.best(self.model, self.batch, self.own, gpus, nodes, c, self.gpu_mem_gb)

    def counts(self, high: int, low: int) -> list[int]:
        """Counts in ``[low, high]``, largest first, with a feasible plan (memoised)."""
        key = ("counts", high, low)
        if key not in self._memo:
            self._memo[key] = [g for g in range(high, low - 1, -1) if self.best(g) is not None]
        value: list[int] = self._memo[key]
        return value

    def throughput(self, gpus: int) -> float:
        p = self.best(gpus)
        return 0.0 if p is None else p.throughput

    @property
    def reference(self) -> float:
        """What throughputs are normalised by: the best on the requested GPUs, else the target."""
        return self.throughput(self.requested) or self.target or 1.0

    def gpu_slope(self, gpus: int) -> float:
        """Normalised throughput gained per GPU by the last step up to ``gpus`` (from the largest
        count below it with a feasible plan, or from nothing)."""
        key = ("gpu_slope", gpus)
        if key not in self._memo:
            self._memo[key] = self._gpu_slope(gpus)
        value: float = self._memo[key]
        return value

    def _gpu_slope(self, gpus: int) -> float:
        below = self._below(gpus)
        there = self.envelope(below) if below else 0.0
        return (self.envelope(gpus) - there) / (gpus - below) / self.reference

    def _below(self, gpus: int) -> int:
        """The largest count under ``gpus``, not under the job's minimum, with a feasible plan; 0: none."""
        return next((g for g in range(gpus - 1, self.low - 1, -1) if self.best(g) is not None), 0)

    def envelope(self, gpus: int) -> float:
        """The curve itself: the most throughput any count the job accepts up to ``gpus``
        reaches. "The curve remains flat for invalid GPU numbers as it only considers the
        maximum throughput achievable within the given GPU range" (§5.2), so a count whose best
        plan is slower than a smaller count's (LLaMA-30B with a global batch of 4 on 48 GPUs
        against 32) is flat, not a fall: its slope is 0, never negative."""
        key = ("envelope", gpus)
        if key not in self._memo:
            below = self._below(gpus)
            self._memo[key] = max(self.throughput(gpus), self.envelope(below) if below else 0.0)
        value: float = self._memo[key]
        return value

    def cpu_slope(self, gpus: int) -> float:
        """Normalised throughput gained per extra CPU when the CPUs per GPU double."""
        base = self.best(gpus)
        more = self.best(gpus, cpus=2 * self.cpus_per_gpu)
        if base is None or more is None:
            return 0.0
        return (more.throughput - base.throughput) / (gpus * self.cpus_per_gpu) / self.reference

    def min_gpus(self, low: int) -> int:
        """Rubick's ``minRes`` in GPUs (§5.2): the fewest GPUs in ``[low, requested]`` whose best plan
        reaches the target; the requested count when none does (or the target is unknown)."""
        key = ("min_gpus", low)
        if key not in self._memo:
            self._memo[key] = self._min_gpus(low)
        value: int = self._memo[key]
        return value

    def _min_gpus(self, low: int) -> int:
        if self.target is None:
            return self.requested
        for g in range(low, self.requested + 1):
            p = self.best(g)
            if p is not None and p.throughput >= self.target * (1 - 1e-9):
                return g
        return self.requested


def node_shape(
    snapshot: Snapshot, types: tuple[str, ...], shapes: dict[tuple[str, ...], Shape] | None = None
) -> Shape:
    """GPUs per node, CPUs per GPU and GPU memory of the largest node of one of ``types``
    (empty: any)."""
    if shapes is not None and types in shapes:
        return shapes[types]
    best: Shape = (1, 1.0, None)
    found = False
    for node in snapshot.nodes:
        if (not types or node.gpu_type in types) and (not found or node.gpus > best[0]):
            cpus = max(1.0, float(node.cpus // max(1, node.gpus)))
            best, found = (node.gpus, cpus, gpu_mem_gb_of(node)), True
    if shapes is not None:
        shapes[types] = best
    return best


def job_curve(
    book: CurveBook,
    job: Job,
    snapshot: Snapshot,
    search_plans: bool,
    shapes: dict[tuple[str, ...], Shape] | None = None,
) -> JobCurve | None:
    """The job's curves, or ``None`` when the pricer cannot price it (unknown model or batch).

    The plan space, with ``search_plans``: the job's ``candidate_plans`` (and its own plan) when
    it lists some; otherwise, for an elastic job, every candidate of :mod:`.plans` (Rubick's
    search); a rigid job without candidates keeps its own plan (the stage contract). Without
    ``search_plans`` every job keeps its submitted plan, made for each GPU count.
    """
    plan = job.assignment.plan if job.assignment is not None and job.assignment.plan else job.plan
    batch = job.batch_size
    if plan is not None and isinstance(plan.get("global_batch"), int):
        batch = int(plan["global_batch"])
    if batch is None or not book.knows(job.model):
        return None
    submitted = given(job.plan)
    if not search_plans:
        # The submitted plan made afresh for each count, not the running plan rescaled: a
        # rescaled plan keeps the micro-batch of the count it came from, so the curve (and the
        # ranking by its slope) would depend on where the job ran last round.
        space = submitted
    elif job.candidate_plans:
        space = given(job.plan, *job.candidate_plans)
    elif job.elastic:
        space = SEARCH
    else:
        space = given(plan)
    gpn, cpus, mem = node_shape(snapshot, job.accepted_types, shapes)
    return book.curve(job.model, batch, space, submitted, gpn, cpus, job.num_gpus, job.gpu_range[0], mem)
