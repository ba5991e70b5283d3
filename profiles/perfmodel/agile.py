"""Crius's agile Cell estimation (EuroSys'26, §4.2 and §5), from measured best-plan times.

A *Cell* is a model on ``n`` GPUs of one type in ``S`` pipeline stages. Crius estimates it in
four steps, which this module follows:

1. **Stage partition (Fig. 7).** The model's operators (here: its layers, with their
   FLOPs, parameters and activations, from the model's shape) are cut into ``S`` contiguous
   stages of FLOPs as equal as possible (GPUs mapped to operators by FLOPs share, so equal
   FLOPs means equal time), ties broken by the smaller boundary traffic; each stage gets
   ``n / S`` GPUs.
2. **Per-stage computation, DP-only and TP-only.** Crius profiles each stage on one GPU
   with a distributed-equivalent compilation. Without the GPUs, a stage's compute time is
   its training FLOPs over an *effective rate* ``eta x peak`` of the GPU type (dense fp16
   tensor-core peak), the same for both plans (each of the ``k`` GPUs does ``1/k`` of the
   work); ``eta`` comes from the measurements (below). (Wide-ResNet trains in fp32, so its
   ``eta`` is small; against the fp16 peak the peak-FLOPs bound stays a valid lower bound.)
3. **Communication, interpolated from traffic.** Crius interpolates pre-profiled
   collectives by traffic volume; here every collective is ``alpha + bytes / beta`` on its
   link (the two ends of such a traffic curve: latency and bandwidth), with ring
   all-reduce traffic ``2 (k-1)/k x V``. DP-only stages all-reduce their gradients once per
   iteration (fp16; fp32 for Wide-ResNet, as the artifact trains it); TP-only stages
   all-reduce activations per micro-batch (Megatron: four per transformer layer, forward
   and backward); stages pass boundary activations (and their gradients back) by
   send/recv. A group within one node uses the node's link, one across nodes its share of
   the node's network link (GPUs placed consolidated, stage after stage).
4. **Assembly of the 2^S plans.** Each stage DP-only or TP-only; GPipe's ``B = 4S``
   micro-batches (one, without a pipeline); the iteration is the first micro-batch through
   all stages plus ``B - 1`` more at the pace of the slowest stage (whose inter-stage
   communication overlaps), plus the slowest stage's gradient all-reduce. The best of the
   ``2^S`` plans (found exactly without enumerating them: see :func:`assemble`) is the
   estimate. A stage plan whose memory exceeds the GPU's is dropped (§5.1, last paragraph).

**Memory** (per stage, per GPU): ``W x pi / t + A x alpha x b x a(t)`` with ``pi`` / ``alpha``
the stage's share of parameters / activations, ``t`` its tensor-parallel degree, ``b`` the
samples in flight per data-parallel replica (``S`` of the ``4S`` micro-batches under 1F1B;
without a pipeline the batch over the fewest gradient-accumulation steps, up to 16, that
fit, as Alpa's micro-batching does) and ``a(t)`` the activations TP shards (Korthikanti et al.:
``(10 + 24/t) / 34`` for a transformer layer; ``1/t`` for convolutions). ``W`` (model states)
and ``A`` (activation GB per sample) are fitted per model to the measured data-parallel-only
memory (``builtin/data/crius/dp_mem.json``: ``W + A x batch / n`` at ``n`` = 1..16), or from
the family's bytes per parameter and activation per unit of model width where a model has no
such data. A plan fits when ``1.2 x need <= 0.8 x GPU memory`` (the artifact's rule; XLA
pre-allocates 80 %). GPU memory: A100 40 GB, V100 32, A40 48, A10 24. (This check calls no
usable measured point out of memory, and none of the 11 points measured out of memory either:
those are Alpa failures no monotone memory model reproduces, e.g. ``moe_2.4B`` fails at batch
256 on 16 V100s but runs at 512 and 1024.)

**Where ``eta`` comes from (leave-one-out).** Each measured best-plan time of the model
(Crius's table: other GPU counts, batches and types) is inverted: the ``eta`` at which this
estimator reproduces it (``eta`` at most 1, the peak). The estimate for ``(model, batch,
type, n)`` fits ``log eta`` to the model's points *other than that key* by weighted least
squares, linear in ``log2 n`` and ``log2 batch``, and reads it at ``(n, batch)``. The slopes
are the family's (fitted over the family's *other* models, each model and GPU type with its
own intercept) plus the model's own deviation, ridge-regularised toward 0 (``RIDGE``) and
not extrapolated beyond the model's points (the family's slopes are). Weights:
``2^-|log2 n'/n| x 2^-|log2 b'/b|``; a point of another GPU type counts
``OTHER_TYPE_WEIGHT`` (0.01: in effect only when the type has no point of its own) and is
shifted by the family's typical ``log eta`` ratio between the two types, learnt from the
family's *other* models. A model with no other point takes the family's other models'
median ``eta`` on that type. So no estimate reads the table's value at the key it estimates.
The two constants were chosen on this same table (grid ``RIDGE`` in {0.05, 0.2, 0.5, 5} x
``OTHER_TYPE_WEIGHT`` in {0.001, 0.01, 0.05, 0.2, 1}, and with or without the family's
slopes; mean accuracy 0.79-0.91), a mild selection the accuracy benchmark
(``benchmarks/papers/crius_estimate.py``) reports with.

**Cell-guided tuning (§5.2).** The estimate's per-stage choices are the stages' favours;
the plan space is cut at the half-hybrid point (``t = sqrt(k)``) to the favoured half (the
majority of the stages; the execution plan has one ``tp`` for all stages), and the best
uniform ``dp x tp x pp`` plan there that fits (by the same cost model, hybrid stages
included) is the Cell's plan: :meth:`AgileEstimator.tuned`.

Bandwidths (assumed from the parts' specifications, not measured here): A100-40G PCIe, 4
per node, 20 GB/s inside a node; V100 16 per node, NVLink 100 GB/s; A40 and A10, 2 per node,
PCIe 20 GB/s; 100 Gb/s InfiniBand (12.5 GB/s) per node between nodes; latency 10 us inside a
node, 20 us across. Model shapes are the Crius artifact's benchmark configurations
(``sjtu-epcc/arena``, ``runtime/crius_worker/jax/configs.py``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from statistics import median

import numpy as np
import numpy.typing as npt

from planner.core.errors import InputError
from profiles.names import normalise
from profiles.perfmodel.agile_model import (
    CANONICAL_NAMES,
    GB,
    GPU_SPECS,
    GpuSpec,
    MemoryModel,
    ModelSpec,
    dp_memory_points,
    family_of,
    fit_memory,
    model_spec,
    normalise_model,
    partition,
    stage_counts,
)
from profiles.perfmodel.crius import CriusRecord, CriusTable, builtin_crius

__all__ = [
    "GPU_SPECS",
    "AgileEstimator",
    "GpuSpec",
    "MemoryModel",
    "ModelSpec",
    "StagePlan",
    "allreduce_s",
    "assemble",
    "dp_memory_points",
    "model_spec",
    "normalise_model",
    "partition",
    "peak_bound_s",
    "stage_counts",
]

MEMORY_HEADROOM = 1.2
"""The artifact multiplies a plan's memory by 1.2 before comparing it with the usable memory."""
USABLE_FRACTION = 0.8
"""XLA pre-allocates 80 % of the GPU's memory (the artifact's ``pre_alloc_memory_fraction``)."""
MICRO_BATCHES_PER_STAGE = 4
"""GPipe's rule Crius follows (Fig. 10): ``B = 4 x S`` micro-batches."""
ETA_BOUNDS = (1e-4, 1.0)


# -- the estimator ------------------------------------------------------------------------------


FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class StagePlan:
    """The assembled plan of a Cell: time, each stage's tensor-parallel degree and memory (GB),
    and the micro-batches per iteration (``4S`` with a pipeline; without one, the gradient
    accumulation steps the memory needs)."""

    time_s: float
    tp: tuple[int, ...]
    memory_gb: tuple[float, ...]
    micro_batches: int


@dataclass(frozen=True, slots=True)
class _Costs:
    """Per stage (rows) and option (columns: tensor-parallel degrees ``tps``), seconds and GB."""

    tps: tuple[int, ...]
    compute_s: FloatArray  # per micro-batch at eta = 1 (divide by eta)
    comm_s: FloatArray  # per micro-batch, on the stage's critical path
    sync_s: FloatArray  # per iteration (gradient all-reduce)
    send_s: float  # inter-stage send/recv of one micro-batch through the pipeline
    memory_gb: FloatArray
    fits: npt.NDArray[np.bool_]
    micro_batches: tuple[int, ...]  # per option (differs only without a pipeline)


def allreduce_s(spec: GpuSpec, k: int, first_gpu: int, volume: float) -> float:
    """Ring all-reduce of ``volume`` bytes over ``k`` consecutive GPUs from ``first_gpu``."""
    if k <= 1 or volume <= 0:
        return 0.0
    node = spec.gpus_per_node
    if first_gpu // node == (first_gpu + k - 1) // node:
        bandwidth, latency = spec.intra_gb_s * GB, spec.intra_latency_s
    else:
        bandwidth, latency = spec.inter_gb_s * GB / min(k, node), spec.inter_latency_s
    return 2.0 * (k - 1) * latency + 2.0 * (k - 1) / k * volume / bandwidth


def assemble(
    time_s: FloatArray, sync_s: FloatArray, fits: npt.NDArray[np.bool_], fixed_s: float, micro_batches: int
) -> tuple[float, tuple[int, ...]] | None:
    """The best of the plans that give each stage one option (the ``2^S`` plans of §5.1).

    ``time_s[s, o]``: stage ``s``'s time per micro-batch under option ``o``; ``sync_s``: its
    once-per-iteration gradient all-reduce; ``fixed_s``: what every plan adds (the first
    micro-batch's inter-stage sends). A plan costs
    ``sum(time) + fixed + (B - 1) x max(time) + max(sync)`` (§5.1: the first micro-batch
    through every stage, ``B - 1`` more at the slowest stage's pace, its communication
    overlapped). Exact without enumerating the plans: for every pair of bounds on
    ``max(time)`` and ``max(sync)`` (values that occur), each stage takes its fastest option
    within both; the best of those plans is optimal (the optimum's own maxima are one such
    pair). ``None`` when some stage has no option that fits. Returns the time and each
    stage's option.
    """
    ok_t = np.where(fits, time_s, np.inf)
    if not np.isfinite(ok_t).any(axis=1).all():
        return None
    if time_s.shape[1] == 1 or time_s.shape[0] == 1:
        if time_s.shape[1] == 1:
            choice = np.zeros(time_s.shape[0], dtype=np.int64)
        else:
            per = micro_batches * ok_t[0] + fixed_s + np.where(fits[0], sync_s[0], np.inf)
            choice = np.array([int(per.argmin())])
        rows = np.arange(time_s.shape[0])
        t, y = time_s[rows, choice], sync_s[rows, choice]
        value = float(t.sum() + fixed_s + (micro_batches - 1) * t.max() + y.max())
        return value, tuple(int(c) for c in choice)
    t_bounds = np.unique(time_s[fits])
    s_bounds = np.unique(sync_s[fits])
    ok = (
        fits[None, None]
        & (time_s[None, None] <= t_bounds[:, None, None, None])
        & (sync_s[None, None] <= s_bounds[None, :, None, None])
    )
    masked = np.where(ok, time_s[None, None], np.inf)
    choice4 = masked.argmin(axis=3)
    chosen = np.take_along_axis(masked, choice4[..., None], axis=3)[..., 0]
    valid = np.isfinite(chosen).all(axis=2)
    if not valid.any():
        return None
    chosen = np.where(valid[..., None], chosen, 0.0)
    chosen_sync = np.take_along_axis(np.broadcast_to(sync_s, masked.shape), choice4[..., None], axis=3)[
        ..., 0
    ]
    total = chosen.sum(axis=2) + fixed_s + (micro_batches - 1) * chosen.max(axis=2) + chosen_sync.max(axis=2)
    total = np.where(valid, total, np.inf)
    i, j = np.unravel_index(int(total.argmin()), total.shape)
    return float(total[i, j]), tuple(int(o) for o in choice4[i, j])


class AgileEstimator:
    """Crius's agile estimate of a model's Cells (see the module docstring for the method).

    ``table`` supplies the measured best-plan times ``eta`` is inverted from (never the key
    being estimated); ``dp_memory`` the data-parallel-only memory; ``gpus`` the GPU types.
    Deterministic and memoised: every answer depends only on its arguments and these three.
    Models are named as Crius names them (``bert_760M``; case and punctuation ignored).
    """

    def __init__(
        self,
        table: CriusTable | None = None,
        dp_memory: Mapping[str, tuple[tuple[int, int, float], ...]] | None = None,
        gpus: Mapping[str, GpuSpec] | None = None,
    ) -> None:
        self.table = builtin_crius() if table is None else table
        self.dp_memory = dp_memory_points() if dp_memory is None else dp_memory
        self.gpus = dict(GPU_SPECS if gpus is None else gpus)
        points: dict[str, dict[tuple[int, str, int], CriusRecord]] = {}
        for r in self.table.records:  # consolidated layout (fewest nodes) per key, as the table answers
            spec = model_spec(r.model)
            if spec is None or r.gpu_type not in self.gpus:
                continue
            mine = points.setdefault(spec.name, {})
            key = (r.batch_size, r.gpu_type, r.gpus)
            if key not in mine or r.nodes < mine[key].nodes:
                mine[key] = r
        self._points = {
            m: tuple(r for r in v.values() if r.iter_time_s is not None) for m, v in points.items()
        }
        self._family_memory = self._fit_family_memory()
        self._memory = lru_cache(maxsize=None)(self._memory_of)
        self._costs = lru_cache(maxsize=8192)(self._stage_costs)
        self._point_etas = lru_cache(maxsize=None)(self._etas_of_points)
        self._type_level = lru_cache(maxsize=None)(self._family_type_level)
        self._slopes = lru_cache(maxsize=None)(self._family_slopes)
        self._eta = lru_cache(maxsize=65536)(self._eta_at)
        self._estimate = lru_cache(maxsize=65536)(self._estimate_at)

    # -- memory --

    def _fit_family_memory(self) -> dict[str, tuple[float, float]]:
        per_family: dict[str, list[tuple[float, float]]] = {}
        for name in CANONICAL_NAMES.values():
            spec = model_spec(name)
            assert spec is not None
            fit = fit_memory(self.dp_memory.get(normalise(name), ()))
            if fit is not None:
                per_family.setdefault(spec.family, []).append(
                    (fit[0] * GB / spec.params, fit[1] / spec.act_units)
                )
        return {f: (median(w for w, _ in v), median(a for _, a in v)) for f, v in per_family.items()}

    def memory(self, model: str) -> MemoryModel | None:
        """``W`` and ``A`` of ``model``: fitted to its DP-only memory, else the family's ratios."""
        return self._memory(normalise_model(model))

    def _memory_of(self, model: str) -> MemoryModel | None:
        spec = model_spec(model)
        if spec is None:
            return None
        fit = fit_memory(self.dp_memory.get(normalise(spec.name), ()))
        if fit is not None:
            return MemoryModel(fit[0], fit[1], fitted=True)
        family = self._family_memory.get(spec.family)
        if family is None:
            return None
        return MemoryModel(family[0] * spec.params / GB, family[1] * spec.act_units, fitted=False)

    # -- costs --

    def _stage_costs(
        self, model: str, batch: int, gpu_type: str, gpus: int, stages: int, tps: tuple[int, ...] | None
    ) -> _Costs | None:
        spec, gpu, memory = model_spec(model), self.gpus.get(gpu_type), self._memory(model)
        if spec is None or gpu is None or memory is None or batch < 1 or gpus < 1 or stages < 1:
            return None
        if gpus % stages or stages > len(spec.layers):
            return None
        k = gpus // stages
        options = tps if tps is not None else tuple(sorted({1, k}))
        if any(t < 1 or k % t for t in options):
            return None
        peak = gpu.peak_tflops * 1e12
        usable = USABLE_FRACTION * gpu.mem_gb / MEMORY_HEADROOM
        pipeline_micro = MICRO_BATCHES_PER_STAGE * stages
        shape = (stages, len(options))
        compute, comm, sync, mem = (np.zeros(shape) for _ in range(4))
        micro_of = [1] * len(options)
        send = 0.0
        bounds = partition(spec.name, stages)
        for o, t in enumerate(options):
            d = k // t
            if stages > 1:
                micro, in_flight = pipeline_micro, batch * stages / pipeline_micro  # 1F1B: S in flight
            else:
                # No pipeline: gradient accumulation (up to MAX_ACCUMULATION steps) when the
                # whole batch's activations do not fit, as Alpa's micro-batching does.
                micro = 1
                while micro < MAX_ACCUMULATION and micro * 2 <= batch / d:
                    if self._need(spec, memory, bounds[0], t, d, batch / micro) <= usable:
                        break
                    micro *= 2
                in_flight = batch / micro
            micro_of[o] = micro
            m = batch / micro
            for s, bound in enumerate(bounds):
                lo, hi = bound
                layers = spec.layers[lo:hi]
                flops = sum(layer.flops for layer in layers)
                params = sum(layer.params for layer in layers)
                first = s * k
                compute[s, o] = flops * m / (k * peak)
                # Tensor-parallel all-reduces inside a replica of t consecutive GPUs.
                comm[s, o] = allreduce_s(gpu, t, first, sum(layer.tp_bytes for layer in layers) * m / d)
                # Gradient all-reduce over the d replicas of each shard.
                sync[s, o] = allreduce_s(gpu, d, first, params * spec.grad_bytes / t)
                mem[s, o] = self._need(spec, memory, bound, t, d, in_flight)
        m = batch / pipeline_micro
        for s, (lo, _) in enumerate(bounds[1:], start=1):
            # Boundary activations forward and their gradients back, each GPU its share.
            first = s * k
            same_node = (first - 1) // gpu.gpus_per_node == first // gpu.gpus_per_node
            bandwidth = gpu.intra_gb_s * GB if same_node else gpu.inter_gb_s * GB / min(k, gpu.gpus_per_node)
            latency = gpu.intra_latency_s if same_node else gpu.inter_latency_s
            send += latency + 2.0 * m * spec.layers[lo - 1].boundary_bytes / k / bandwidth
        return _Costs(options, compute, comm, sync, send, mem, mem <= usable, tuple(micro_of))

    @staticmethod
    def _need(
        spec: ModelSpec, memory: MemoryModel, bound: tuple[int, int], t: int, d: int, in_flight: float
    ) -> float:
        """GB per GPU of the layers ``bound`` at TP degree ``t``, ``d`` replicas, ``in_flight`` samples."""
        layers = spec.layers[bound[0] : bound[1]]
        params = sum(layer.params for layer in layers) / spec.params
        acts = sum(layer.act_units for layer in layers) / spec.act_units
        act_tp = 1.0 / t if spec.conv else (10.0 + 24.0 / t) / 34.0
        return memory.states_gb * params / t + memory.act_gb_per_sample * acts * in_flight / d * act_tp

    def _plan(self, costs: _Costs, eta: float) -> StagePlan | None:
        time_s = costs.compute_s / eta + costs.comm_s
        micro = costs.micro_batches
        best: tuple[float, tuple[int, ...]] | None
        if len(set(micro)) > 1:  # no pipeline: one stage, each option its own accumulation
            options = [
                (m * float(time_s[0, o]) + float(costs.sync_s[0, o]) + costs.send_s, (o,))
                for o, m in enumerate(micro)
                if costs.fits[0, o]
            ]
            best = min(options, default=None)
        else:
            best = assemble(time_s, costs.sync_s, costs.fits, costs.send_s, micro[0])
        if best is None:
            return None
        total, choice = best
        return StagePlan(
            time_s=total,
            tp=tuple(costs.tps[o] for o in choice),
            memory_gb=tuple(float(costs.memory_gb[s, o]) for s, o in enumerate(choice)),
            micro_batches=micro[choice[0]],
        )

    def plan_at(
        self,
        model: str,
        batch: int,
        gpu_type: str,
        gpus: int,
        stages: int,
        eta: float,
        tps: tuple[int, ...] | None = None,
    ) -> StagePlan | None:
        """The best assembled plan at efficiency ``eta`` (``None``: nothing fits, or unknown).

        ``tps``: the tensor-parallel degrees every stage may take (default DP-only and
        TP-only, the ``2^S`` plans of §5.1; one degree: that uniform plan).
        """
        costs = self._costs(normalise_model(model), batch, gpu_type.lower(), gpus, stages, tps)
        return None if costs is None else self._plan(costs, eta)

    # -- eta, inverted from the measured points --

    def _invert(self, r: CriusRecord) -> float | None:
        """The ``eta`` at which the best Cell over the stage counts takes the measured time.

        The best time falls with ``eta``; it is evaluated on a geometric grid of ``eta`` (all
        plans of all stage counts at once) and, between the two grid points that bracket the
        measurement, taken as ``a / eta + b`` through them. ``None`` when no Cell fits (no
        information); the bounds of :data:`ETA_BOUNDS` when the measurement lies outside.
        """
        assert r.iter_time_s is not None
        model = normalise_model(r.model)
        best = np.full(_ETA_GRID.size, np.inf)
        for s in stage_counts(r.gpus):
            costs = self._costs(model, r.batch_size, r.gpu_type, r.gpus, s, None)
            if costs is not None:
                best = np.minimum(best, _times_over_eta(costs, _ETA_GRID))
        if not np.isfinite(best[-1]):
            return None
        measured = r.iter_time_s
        if best[-1] >= measured:
            return ETA_BOUNDS[1]
        if best[0] <= measured:
            return ETA_BOUNDS[0]
        i = int(np.argmax(best <= measured))  # first grid point at or below the measurement
        e0, e1, t0, t1 = _ETA_GRID[i - 1], _ETA_GRID[i], best[i - 1], best[i]
        a = (t0 - t1) / (1.0 / e0 - 1.0 / e1)
        b = t1 - a / e1
        return float(min(e1, max(e0, a / (measured - b)))) if measured > b and a > 0 else float(e1)

    def _etas_of_points(self, model: str) -> tuple[tuple[CriusRecord, float], ...]:
        """Every measured point of ``model`` with its inverted ``eta`` (points the memory model
        calls out of memory carry no information on ``eta`` and are left out)."""
        return tuple((r, eta) for r in self._points.get(model, ()) if (eta := self._invert(r)) is not None)

    def _family_type_level(self, family: str, gpu_type: str, exclude: str) -> float | None:
        """The family's median log-``eta`` on ``gpu_type`` over models other than ``exclude``."""
        values = [
            math.log(eta)
            for name in self._points
            if name != exclude and family_of(name) == family
            for r, eta in self._point_etas(name)
            if r.gpu_type == gpu_type
        ]
        return median(values) if values else None

    def _family_slopes(self, family: str, exclude: str) -> tuple[float, float]:
        """How ``log eta`` moves with ``log2 n`` and ``log2 batch`` across the family's other
        models: least squares over their points, each (model, GPU type) its own intercept."""
        xs, ys = [], []
        for name in self._points:
            if name == exclude or family_of(name) != family:
                continue
            groups: dict[str, list[tuple[float, float, float]]] = {}
            for r, eta in self._point_etas(name):
                groups.setdefault(r.gpu_type, []).append(
                    (math.log2(r.gpus), math.log2(r.batch_size), math.log(eta))
                )
            for rows in groups.values():
                if len(rows) < 2:
                    continue
                a = np.asarray(rows)
                a = a - a.mean(axis=0)
                xs.append(a[:, :2])
                ys.append(a[:, 2])
        if not xs:
            return 0.0, 0.0
        x, y = np.concatenate(xs), np.concatenate(ys)
        coef = np.linalg.solve(x.T @ x + 1e-6 * np.eye(2), x.T @ y)
        return float(coef[0]), float(coef[1])

    def eta(self, model: str, batch: int, gpu_type: str, gpus: int) -> float | None:
        """The efficiency the estimate of ``(model, batch, gpu_type, gpus)`` uses (leave-one-out).

        A weighted least-squares fit of ``log eta = c0 + c1 log2(n'/n) + c2 log2(b'/b)`` over
        the model's other measured points (slopes ridge-regularised toward 0; weights and the
        cross-type shift in the module docstring), read at ``(n, b)``: ``c0``. The table's
        value at this very key is never used. ``None`` for an unknown model or GPU type.
        """
        return self._eta(normalise_model(model), batch, gpu_type.lower(), gpus)

    def _eta_at(self, model: str, batch: int, gpu_type: str, gpus: int) -> float | None:
        family = family_of(model)
        if family is None or gpu_type not in self.gpus or batch < 1 or gpus < 1:
            return None
        here = self._type_level(family, gpu_type, model)
        rows, values, weights = [], [], []
        for r, eta in self._point_etas(model):
            if (r.batch_size, r.gpu_type, r.gpus) == (batch, gpu_type, gpus):
                continue  # leave one out: never the key being estimated
            dn, db = math.log2(r.gpus / gpus), math.log2(r.batch_size / batch)
            weight = 2.0 ** -abs(dn) * 2.0 ** -abs(db)
            value = math.log(eta)
            if r.gpu_type != gpu_type:
                there = self._type_level(family, r.gpu_type, model)
                if here is not None and there is not None:
                    value += here - there
                weight *= OTHER_TYPE_WEIGHT
            rows.append((1.0, dn, db))
            values.append(value)
            weights.append(weight)
        if not rows or sum(weights) <= 0:
            return None if here is None else min(ETA_BOUNDS[1], math.exp(here))
        x, y, w = np.asarray(rows), np.asarray(values), np.asarray(weights)
        # Slopes are the family's plus this model's own deviation (ridge-regularised toward 0).
        slope_n, slope_b = self._slopes(family, model)
        y = y - slope_n * x[:, 1] - slope_b * x[:, 2]
        gram = x.T @ (w[:, None] * x) + np.diag([0.0, RIDGE, RIDGE]) * w.sum()
        coef = np.linalg.solve(gram, x.T @ (w * y))
        # Read the fit at the query; outside the model's points only the family's slopes carry
        # the trend there, the model's own deviation is read at the nearest edge.
        at_n = min(max(0.0, x[:, 1].min()), x[:, 1].max())
        at_b = min(max(0.0, x[:, 2].min()), x[:, 2].max())
        log_eta = coef[0] + coef[1] * at_n + coef[2] * at_b
        return float(min(ETA_BOUNDS[1], max(ETA_BOUNDS[0], math.exp(log_eta))))

    # -- the estimate --

    def estimate(self, model: str, batch: int, gpu_type: str, gpus: int, stages: int) -> StagePlan | None:
        """The agile estimate of one Cell: the best of its ``2^S`` assembled plans (§5.1).

        ``None`` when the model, GPU type or stage count is unknown or impossible
        (``stages`` must divide ``gpus``), or when no assembled plan fits in memory.
        """
        return self._estimate(normalise_model(model), batch, gpu_type.lower(), gpus, stages)

    def _estimate_at(self, model: str, batch: int, gpu_type: str, gpus: int, stages: int) -> StagePlan | None:
        eta = self._eta(model, batch, gpu_type, gpus)
        return None if eta is None else self.plan_at(model, batch, gpu_type, gpus, stages, eta)

    def best(self, model: str, batch: int, gpu_type: str, gpus: int) -> tuple[int, StagePlan] | None:
        """The fastest stage count of the Cells on ``gpus`` GPUs and its estimate."""
        found = [(s, p) for s in stage_counts(gpus) if (p := self.estimate(model, batch, gpu_type, gpus, s))]
        return min(found, key=lambda sp: (sp[1].time_s, sp[0]), default=None)

    def tuned(
        self, model: str, batch: int, gpu_type: str, gpus: int, stages: int
    ) -> tuple[int, StagePlan] | None:
        """Cell-guided tuning (§5.2): the tensor-parallel degree of the Cell's uniform plan.

        The estimate's stage favours (TP-only or DP-only; the majority, DP on a tie) keep one
        half of the space, cut at the half-hybrid point ``sqrt(k)`` (both halves include the
        degrees next to it); the fastest uniform ``tp`` there that fits is returned with its
        plan. The other half when nothing in the favoured one fits; ``None`` when nothing fits.
        """
        name = normalise_model(model)
        estimate = self.estimate(name, batch, gpu_type, gpus, stages)
        eta = self.eta(name, batch, gpu_type, gpus)
        if estimate is None or eta is None:
            return None
        k = gpus // stages
        degrees = [t for t in range(1, k + 1) if k % t == 0]
        half = math.sqrt(k)
        dp_half = [t for t in degrees if t <= half or t == min(d for d in degrees if d >= half)]
        tp_half = [t for t in degrees if t >= half or t == max(d for d in degrees if d <= half)]
        tp_votes = sum(1 for t in estimate.tp if t > 1)
        favoured, other = (tp_half, dp_half) if 2 * tp_votes > len(estimate.tp) else (dp_half, tp_half)
        for space in (favoured, other):
            plans = [
                (t, p) for t in space if (p := self.plan_at(name, batch, gpu_type, gpus, stages, eta, (t,)))
            ]
            if plans:
                return min(plans, key=lambda tp: (tp[1].time_s, tp[0]))
        return None

    def knows(self, model: str) -> bool:
        """True when ``model`` has a shape and a memory model (so it can be estimated)."""
        return self.memory(model) is not None


_ETA_GRID = np.geomspace(ETA_BOUNDS[0], ETA_BOUNDS[1], 97)


def _times_over_eta(costs: _Costs, etas: FloatArray) -> FloatArray:
    """The best assembled plan's time at each ``eta`` (every plan enumerated; small cells only
    need this, the inversion's: measured points have at most 16 GPUs)."""
    stages, options = costs.compute_s.shape
    plans = np.array(list(itertools.product(range(options), repeat=stages)), dtype=np.int64)
    rows = np.arange(stages)
    fits = costs.fits[rows, plans].all(axis=1)
    if not fits.any():
        return np.full(etas.size, np.inf)
    plans = plans[fits]
    compute = costs.compute_s[rows, plans]  # (plans, stages)
    comm = costs.comm_s[rows, plans]
    sync = costs.sync_s[rows, plans].max(axis=1)
    micro = np.array([costs.micro_batches[p[0]] for p in plans], dtype=np.float64)
    time_s = compute[None] / etas[:, None, None] + comm[None]  # (etas, plans, stages)
    total = time_s.sum(axis=2) + costs.send_s + (micro - 1.0) * time_s.max(axis=2) + sync
    best: FloatArray = total.min(axis=1)
    return best


MAX_ACCUMULATION = 16
"""Most gradient-accumulation steps the estimate gives a stage without a pipeline."""
OTHER_TYPE_WEIGHT = 0.01
RIDGE = 0.05


def peak_bound_s(
    model: str, batch: int, gpu_type: str, gpus: int, specs: Mapping[str, GpuSpec] | None = None
) -> float:
    """The shortest iteration physics allows: the batch's training FLOPs at every GPU's peak."""
    spec = model_spec(model)
    if spec is None:
        raise InputError(f"agile estimate: unknown model {model!r}")
    gpu = (GPU_SPECS if specs is None else specs)[gpu_type]
    return spec.flops_per_sample * batch / (gpus * gpu.peak_tflops * 1e12)
