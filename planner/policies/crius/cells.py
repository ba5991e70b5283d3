"""The two :class:`~planner.policies.crius.cell.CellModel` implementations (Crius §4-5).

* :class:`AgileCells`: Crius's agile estimation (§5.1) through
  :class:`profiles.perfmodel.agile.AgileEstimator`: per stage count, the Fig. 7 stage
  partition, DP-only / TP-only stage times, interpolated communication, the best of the
  ``2^S`` assembled plans, a memory check per stage; the Cell's plan is the Cell-guided
  tuning of §5.2 (:func:`profiles.perfmodel.agile.tuned_plan`).
* :class:`MeasuredCells`: the measured best-plan table (``CriusTable``) as an oracle, for
  ablations: one Cell per GPU type and count (``stages`` 1, the table does not record the
  plan), its time the measured best plan's, its plan plain data parallelism.

Both know a job by its model (``Job.model``, Crius's ``{family}_{params}`` names, case and
punctuation ignored) and its global batch (``Job.batch_size``); a job without a batch or
of a model they do not know gets ``None`` from :meth:`best_cell` (the scheduler then
treats it as rigid). Answers are memoised on ``(model, batch, GPU type, GPUs)``
(``functools.lru_cache`` over immutable keys; a :class:`~.cell.Cell` and its plan, a
read-only mapping, are immutable), so a scheduler may ask per decision.

:func:`candidate_counts` and :func:`candidate_types` are the candidates of §6.1: GPU counts
``{N/2, N, 2N}`` (within the job's ``min_gpus``/``max_gpus`` when it gives them) and the
GPU types the job accepts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from planner.execplan import ExecPlan, PlanError, plan_to_mapping, resolve
from planner.model import Job
from planner.policies.crius.cell import Cell
from profiles.names import normalise
from profiles.perfmodel.agile import AgileEstimator, normalise_model
from profiles.perfmodel.crius import CriusTable, builtin_crius

_CACHE = 65536
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def candidate_counts(job: Job) -> tuple[int, ...]:
    """The GPU counts Crius considers for ``job`` (§6.1): ``N/2, N, 2N`` for ``N = num_gpus``.

    ``N/2`` only when ``N`` is even (a GPU is not split); counts outside ``min_gpus`` /
    ``max_gpus`` are dropped where the job gives them (a bound it leaves out does not
    constrain). Ascending, without repeats.
    """
    n = job.num_gpus
    counts = {n, 2 * n}
    if n % 2 == 0:
        counts.add(n // 2)
    if job.min_gpus is not None:
        counts = {c for c in counts if c >= job.min_gpus}
    if job.max_gpus is not None:
        counts = {c for c in counts if c <= job.max_gpus}
    return tuple(sorted(counts))


def candidate_types(job: Job, cluster_types: Sequence[str]) -> tuple[str, ...]:
    """The cluster's GPU types ``job`` accepts (``Job.accepts_type``), in the given order."""
    return tuple(t for t in dict.fromkeys(cluster_types) if job.accepts_type(t))


def stage_choices(gpus: int) -> tuple[int, ...]:
    """Pipeline stage counts of a Cell on ``gpus`` GPUs (§6.1): ``1, 2, 4, ...`` up to ``gpus``.

    Powers of two that divide ``gpus``, so every stage gets the same number of GPUs (Fig. 7:
    "the number of GPUs accumulated for each stage approximates a power of 2"): about
    ``log2 N`` choices.
    """
    if gpus < 1:
        return ()
    choices = []
    s = 1
    while s <= gpus and gpus % s == 0:
        choices.append(s)
        s *= 2
    return tuple(choices)


def plan_mapping(
    gpus: int, global_batch: int, tp: int = 1, pp: int = 1, grad_accum: int | None = None
) -> Mapping[str, Any]:
    """The resolved ``dp x tp x pp`` plan on ``gpus`` GPUs as a read-only plan mapping.

    ``grad_accum`` (micro-batches per step, a pipeline's ``B``) is dropped when the batch does
    not split into it; an empty mapping (the job's own plan) when even plain ``dp x tp x pp``
    does not resolve (the global batch does not split over the replicas).
    """
    where = f"Cell plan dp x tp {tp} x pp {pp} on {gpus} GPUs"
    attempts = [ExecPlan(tp=tp, pp=pp, grad_accum=grad_accum)] if grad_accum else []
    attempts.append(ExecPlan(tp=tp, pp=pp))
    for plan in attempts:
        try:
            resolved = resolve(plan, gpus, global_batch, where)
        except PlanError:
            continue
        return MappingProxyType(plan_to_mapping(resolved))
    return _EMPTY


class AgileCells:
    """Cells priced by Crius's agile estimation (§5.1), planned by Cell-guided tuning (§5.2).

    A Cell's ``iteration_time_s`` is :meth:`AgileEstimator.estimate` (the best of its ``2^S``
    assembled plans; ``None`` when none fits in memory) and its ``plan`` the uniform
    ``dp x tp x pp`` plan :meth:`AgileEstimator.tuned` picks in the favoured half of the
    space, resolved for the Cell's GPUs and the job's global batch (``grad_accum`` = the
    pipeline's ``4S`` micro-batches, or the accumulation the memory needs without one).
    :meth:`best_cell` is the fastest stage count. The estimator never reads the measured
    time of the key it estimates (leave-one-out), so these are estimates, not the table.
    """

    def __init__(self, estimator: AgileEstimator | None = None) -> None:
        self.estimator = AgileEstimator() if estimator is None else estimator
        self._cell = lru_cache(maxsize=_CACHE)(self._estimate)
        self._best = lru_cache(maxsize=_CACHE)(self._fastest)

    def knows(self, model: str) -> bool:
        return self.estimator.knows(model)

    def _estimate(self, model: str, batch: int, gpu_type: str, gpus: int, stages: int) -> Cell:
        estimate = self.estimator.estimate(model, batch, gpu_type, gpus, stages)
        if estimate is None:
            return Cell(gpu_type=gpu_type, gpus=gpus, stages=stages, iteration_time_s=None, plan=_EMPTY)
        tuned = self.estimator.tuned(model, batch, gpu_type, gpus, stages)
        if tuned is None:  # no uniform plan fits although an assembled one does: the DP x PP plan
            plan = plan_mapping(gpus, batch, 1, stages, estimate.micro_batches)
        else:
            plan = plan_mapping(gpus, batch, tuned[0], stages, tuned[1].micro_batches)
        return Cell(gpu_type=gpu_type, gpus=gpus, stages=stages, iteration_time_s=estimate.time_s, plan=plan)

    def _fastest(self, model: str, batch: int, gpu_type: str, gpus: int) -> Cell | None:
        cells = [self._cell(model, batch, gpu_type, gpus, s) for s in stage_choices(gpus)]
        fitting = [c for c in cells if c.iteration_time_s is not None]
        return min(fitting, key=lambda c: (c.iteration_time_s, c.stages), default=None)

    def _key(self, job: Job) -> str | None:
        if job.batch_size is None or job.batch_size < 1:
            return None
        model = normalise_model(job.model)
        return model if self.estimator.knows(model) else None

    def best_cell(self, job: Job, gpu_type: str, gpus: int) -> Cell | None:
        model = self._key(job)
        if model is None or gpus < 1:
            return None
        assert job.batch_size is not None
        return self._best(model, job.batch_size, gpu_type.lower(), gpus)

    def cells(self, job: Job, gpu_types: Sequence[str], counts: Sequence[int]) -> list[Cell]:
        model = self._key(job)
        if model is None:
            return []
        assert job.batch_size is not None
        return [
            self._cell(model, job.batch_size, t.lower(), n, s)
            for t in dict.fromkeys(gpu_types)
            for n in dict.fromkeys(counts)
            if n >= 1
            for s in stage_choices(n)
        ]


class MeasuredCells:
    """The measured best-plan times as the Cell estimate: an oracle for ablations.

    ``best_cell`` is the measured time of ``(model, batch, type, gpus)`` in ``table``
    (consolidated layout), ``stages`` 1 and the plain data-parallel plan: the table records
    only the best plan's time, not the plan. A device set measured out of memory (``-1``)
    or not measured gives ``None`` (the artifact's simulator treats both as infeasible);
    :meth:`cells` lists them with ``iteration_time_s`` ``None``.
    """

    def __init__(self, table: CriusTable | None = None) -> None:
        self.table = builtin_crius() if table is None else table
        self._known = frozenset(normalise(m) for m in self.table.models())
        self._cell = lru_cache(maxsize=_CACHE)(self._measure)

    def knows(self, model: str) -> bool:
        return normalise(model) in self._known

    def _measure(self, model: str, batch: int, gpu_type: str, gpus: int) -> Cell:
        seconds = self.table.best_time_s(model, batch, gpu_type, gpus)
        plan = plan_mapping(gpus, batch) if seconds is not None else _EMPTY
        return Cell(gpu_type=gpu_type, gpus=gpus, stages=1, iteration_time_s=seconds, plan=plan)

    def best_cell(self, job: Job, gpu_type: str, gpus: int) -> Cell | None:
        if job.batch_size is None or gpus < 1:
            return None
        key = normalise(job.model)
        if key not in self._known:
            return None
        cell = self._cell(key, job.batch_size, gpu_type.lower(), gpus)
        return cell if cell.fits else None

    def cells(self, job: Job, gpu_types: Sequence[str], counts: Sequence[int]) -> list[Cell]:
        if job.batch_size is None:
            return []
        key = normalise(job.model)
        if key not in self._known:
            return []
        return [
            self._cell(key, job.batch_size, t.lower(), n)
            for t in dict.fromkeys(gpu_types)
            for n in dict.fromkeys(counts)
            if n >= 1
        ]
