"""The two :class:`~planner.policies.crius.cell.CellModel` implementations (Crius §4-5).

* :class:`AgileCells`: Crius's agile estimation (§5.1) through
  :class:`profiles.perfmodel.agile.AgileEstimator`: per stage count, the Fig. 7 stage
  partition, DP-only / TP-only stage times, interpolated communication, the best of the
  ``2^S`` assembled plans, a memory check per stage; the Cell's plan is the Cell-guided
  tuning of §5.2 (:meth:`profiles.perfmodel.agile.AgileEstimator.tuned`).
* :class:`MeasuredCells`: the measured best-plan table (``CriusTable``) as an oracle, for
  ablations: one Cell per GPU type and count, its time the measured best plan's; the table
  does not record the plan, so the plan is plain data parallelism where a data-parallel
  replica fits, else the agile estimate's (see the class).

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
from dataclasses import replace
from functools import cache, lru_cache
from types import MappingProxyType
from typing import Any

from planner.core.errors import ConfigError
from planner.core.execplan import ExecPlan, PlanError, plan_to_mapping, resolve
from planner.core.model import Job
from planner.policies.crius.cell import Cell
from profiles.names import normalise
from profiles.observed import ObservedPoint
from profiles.perfmodel.agile import (
    GPU_SPECS,
    AgileEstimator,
    normalise_model,
    stage_counts,
)
from profiles.perfmodel.crius import CriusTable, builtin_crius
from profiles.perfmodel.dp_memory import builtin_dp_memory
from profiles.plan_correction import Config, correction

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
    return stage_counts(gpus)


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


@cache
def shared_estimator() -> AgileEstimator:
    """One agile estimator over the bundled data, shared (with its memo) by every default
    :class:`AgileCells`: its first questions about a model family invert that family's
    measured points (about a second), later ones are memoised."""
    return AgileEstimator()


@cache
def shared_agile_cells() -> AgileCells:
    """One default :class:`AgileCells` (its Cell memo shared), e.g. for :class:`MeasuredCells`' plans."""
    return AgileCells()


def dp_fits(model: str, batch: int, gpu_type: str, gpus: int) -> bool:
    """True when one data-parallel replica fits a GPU by the measured DP-only memory: the
    artifact's rule as :meth:`profiles.perfmodel.dp_memory.DpMemory.fits` states it, on the
    agile estimator's GPU memory; where the table cannot say (a model, count or GPU type it
    does not know), it does not fit, as in the artifact.
    """
    spec = GPU_SPECS.get(gpu_type)
    if spec is None:
        return False
    return builtin_dp_memory().fits(model, batch, gpu_type, gpus, spec.mem_gb) is True


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
        self.estimator = shared_estimator() if estimator is None else estimator
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

    def best_cell_of(self, model: str, batch: int, gpu_type: str, gpus: int) -> Cell | None:
        """:meth:`best_cell` by model name and global batch instead of a job."""
        if batch < 1 or gpus < 1 or not self.estimator.knows(model):
            return None
        return self._best(normalise_model(model), batch, gpu_type.lower(), gpus)

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
    (consolidated layout). The table records only the best plan's time, not the plan, so the
    Cell's plan is chosen: plain data parallelism (``stages`` 1) where one data-parallel
    replica fits the GPU by the measured DP-only memory (``dp_mem.json``, the artifact's rule
    ``1.2 x need <= 0.8 x memory``); elsewhere (no DP-only run fits: ``bert_6.7B``,
    ``moe_10B``...) the plan and stage count of the agile estimate's fastest Cell there
    (:class:`AgileCells`, Cell-guided tuning), when it has one, else still plain DP.
    ``plans="dp"`` keeps plain DP everywhere. A device set measured out of memory (``-1``) or
    not measured gives ``None`` (the artifact's simulator treats both as infeasible);
    :meth:`cells` lists them with ``iteration_time_s`` ``None``.
    """

    def __init__(self, table: CriusTable | None = None, plans: str = "agile") -> None:
        if plans not in ("agile", "dp"):
            raise ConfigError(f"MeasuredCells: plans must be 'agile' or 'dp', got {plans!r}")
        self.table = builtin_crius() if table is None else table
        self.plans = plans
        self._known = frozenset(normalise(m) for m in self.table.models())
        self._cell = lru_cache(maxsize=_CACHE)(self._measure)

    def knows(self, model: str) -> bool:
        return normalise(model) in self._known

    def _measure(self, model: str, batch: int, gpu_type: str, gpus: int) -> Cell:
        seconds = self.table.best_time_s(model, batch, gpu_type, gpus)
        if seconds is None:
            return Cell(gpu_type=gpu_type, gpus=gpus, stages=1, iteration_time_s=None, plan=_EMPTY)
        if self.plans == "agile" and not dp_fits(model, batch, gpu_type, gpus):
            agile = shared_agile_cells()
            name = normalise_model(model)
            best = agile.best_cell_of(name, batch, gpu_type, gpus) if agile.knows(name) else None
            if best is not None and best.plan:
                return replace(best, iteration_time_s=seconds)
        return Cell(
            gpu_type=gpu_type, gpus=gpus, stages=1, iteration_time_s=seconds, plan=plan_mapping(gpus, batch)
        )

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


_NEUTRAL_PLAN = ExecPlan()
"""Cells are compared by GPU type and count only (a Cell's plan follows from them)."""


class CorrectedCells:
    """A Cell model whose iteration times are corrected by what running jobs measured.

    The heartbeats of a running job give its iteration time on the Cell it holds (GPU type and
    count); against the model's time there that is a ratio, and every Cell of that model is
    priced at the model's time times :func:`profiles.plan_correction.correction` of the
    ratios: the measured time where it was measured, elsewhere a weighted mean that counts
    the same type and nearby counts most (Crius's measured table is another cluster's
    hardware; an estimate's error differs by Cell). Scaling every stage count of a (type,
    count) by one factor keeps the fastest Cell the fastest. Models nobody measured are
    answered as ``inner`` answers them.
    """

    def __init__(self, inner: Any, ratios: Mapping[str, Sequence[tuple[Config, float]]]) -> None:
        self.inner = inner
        self.ratios = ratios

    def knows(self, model: str) -> bool:
        knows = getattr(self.inner, "knows", None)
        return True if knows is None else bool(knows(model))

    def _scaled(self, job: Job, cell: Cell | None) -> Cell | None:
        ratios = self.ratios.get(normalise(job.model))
        if cell is None or cell.iteration_time_s is None or not ratios:
            return cell
        target = Config(_NEUTRAL_PLAN, cell.gpus, 1, gpu_type=cell.gpu_type.lower())
        return replace(cell, iteration_time_s=cell.iteration_time_s * correction(ratios, target))

    def best_cell(self, job: Job, gpu_type: str, gpus: int) -> Cell | None:
        return self._scaled(job, self.inner.best_cell(job, gpu_type, gpus))

    def cells(self, job: Job, gpu_types: Sequence[str], counts: Sequence[int]) -> list[Cell]:
        out = []
        for cell in self.inner.cells(job, gpu_types, counts):
            scaled = self._scaled(job, cell)
            assert scaled is not None
            out.append(scaled)
        return out


def corrected_cells(inner: Any, observed: Sequence[ObservedPoint]) -> Any:
    """``inner`` corrected by ``observed`` (:class:`CorrectedCells`); ``inner`` itself when no
    point measured a model it prices at a known batch size."""
    ratios: dict[str, list[tuple[Config, float]]] = {}
    for p in observed:
        s = p.shape
        if s.batch_size is None:
            continue
        probe = Job(
            id="observed", num_gpus=s.num_gpus, model=p.model, submit_time_s=0.0, batch_size=s.batch_size
        )
        cell = inner.best_cell(probe, s.gpu_type, s.num_gpus)
        if cell is None or cell.iteration_time_s is None or cell.iteration_time_s <= 0:
            continue
        measured = s.batch_size / (p.samples_per_s_per_gpu * s.num_gpus)
        config = Config(_NEUTRAL_PLAN, s.num_gpus, 1, gpu_type=s.gpu_type.lower())
        ratios.setdefault(normalise(p.model), []).append((config, measured / cell.iteration_time_s))
    return CorrectedCells(inner, ratios) if ratios else inner
