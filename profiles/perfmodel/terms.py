"""Rubick §4: the iteration time of a training job from its plan and resources.

``T_iter = T_cc + T_oo + k_const`` (Eq. 1), where

* ``T_cc`` (§4.1) is computation and communication: forward ``T_fwd``, backward
  ``T_bwd = k_bwd·T_fwd`` (plus one more forward under activation checkpointing, the
  recompute), the data-parallel gradient sync overlapped with the last backward pass by
  ``f_overlap^{k_sync}``, and the tensor- and pipeline-parallel traffic on the critical path;
* ``T_oo`` (§4.2) is the optimizer step ``T_opt``, and under ZeRO-Offload its overlap
  with the host-device copies: ``f^{k_off}(T_comm_dp, T_off) + f^{k_swap}(T_opt, T_off)``;
* ``f_overlap^k(x, y) = (x^k + y^k)^(1/k)`` (§4.3): ``x + y`` at ``k = 1``, ``max(x, y)``
  as ``k → ∞``.

Where Mosaic departs from the paper, and why:

* **Forward time.** Rubick takes ``T_fwd`` as a profiled input, for 3D plans one per
  configuration. A query may give it (``fwd_time_s``) and then it is used as is; otherwise
  the forward time of one sample on one GPU is the model's forward FLOPs
  (:meth:`ModelShape.forward_flops_per_sample`) over a per-model *compute rate* that is
  fitted with the ``k``'s (``fit.py``), so that plans never profiled can be predicted.
  A given forward time below the physical floor (the iteration's forward FLOPs at the
  GPUs' dense peak, ``Environment.peak_tflops``) is not a forward time of that
  configuration and is ignored in favour of the estimate (the LLaMA-2-7B ZeRO-Offload
  points of Rubick's validate script feed 3 ms for a forward pass that takes at least
  0.7 s at 312 TFLOP/s).
* **Offload copies.** The paper divides ``T_off`` by ``d`` (every GPU copies its own
  partition over its own PCIe link). The measurements behind the bundled samples show
  an offload cost that does not shrink with more GPUs on a node (BERT: about 0.1 s at
  1, 2, 4 and 8 GPUs), as when the host side is the bottleneck, so ``B_pcie`` is the
  bandwidth of one node, shared by the job's GPUs on it.

The formulas are written on numpy arrays so that a fit evaluates all samples at once;
:func:`iteration_breakdown` is the one-query view.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from planner.core.errors import InputError
from profiles.perfmodel.query import Environment, Query

FloatArray = npt.NDArray[np.float64]

GB = 1e9


@dataclass(frozen=True, slots=True)
class PerfParams:
    """Rubick's seven fittable parameters (Table 1), in seconds, parameters and threads.

    ``k_bwd``: backward over forward time. ``k_sync``, ``k_off``, ``k_swap``: overlap
    exponents (>= 1) of backward/gradient sync, sync/offload copy, optimizer/offload
    copy. ``k_opt``: GPU optimizer seconds per parameter. ``k_opt_off``: CPU optimizer
    seconds per parameter and CPU thread (ZeRO-Offload). ``k_const``: seconds per
    iteration not covered by the other terms.
    """

    k_bwd: float
    k_sync: float
    k_opt: float
    k_opt_off: float
    k_off: float
    k_swap: float
    k_const: float

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not (np.isfinite(value) and value >= 0):
                raise InputError(
                    f"performance parameters: {f.name} must be a finite number >= 0, got {value!r}"
                )
        for key in ("k_sync", "k_off", "k_swap"):
            if getattr(self, key) < 1:
                raise InputError(f"performance parameters: {key} is an overlap exponent, must be >= 1")


PARAM_NAMES: tuple[str, ...] = tuple(f.name for f in fields(PerfParams))


@dataclass(frozen=True, slots=True)
class Breakdown:
    """The parts of one predicted iteration (seconds), named as in Rubick §4."""

    t_fwd: float
    t_bwd: float
    t_comm_dp: float
    t_comm_tp: float
    t_comm_pp: float
    t_cc: float
    t_opt: float
    t_off: float
    t_oo: float
    k_const: float
    total: float


def overlap(x: FloatArray, y: FloatArray, k: FloatArray) -> FloatArray:
    """Rubick §4.3's ``f_overlap^k(x, y) = (x^k + y^k)^(1/k)`` for ``k >= 1``.

    Computed as ``m·((x/m)^k + (y/m)^k)^(1/k)`` with ``m = max(x, y)`` so that a large
    ``k`` does not overflow; ``0`` where both are ``0``.
    """
    m = np.maximum(x, y)
    safe = np.where(m > 0, m, 1.0)
    inner = (x / safe) ** k + (y / safe) ** k
    result: FloatArray = np.where(m > 0, safe * inner ** (1.0 / k), 0.0)
    return result


@dataclass(frozen=True, slots=True)
class Columns:
    """Queries as arrays, one entry per query (the fit's vectorised form)."""

    params: FloatArray
    seq_len: FloatArray
    hidden: FloatArray
    layers: FloatArray
    flops: FloatArray
    batch: FloatArray
    nodes: FloatArray
    gpus_per_node: FloatArray
    cpus: FloatArray
    dp: FloatArray
    tp: FloatArray
    pp: FloatArray
    zero: FloatArray
    offload: FloatArray
    accum: FloatArray
    recompute: FloatArray
    fwd_given: FloatArray  # profiled T_fwd (seconds), NaN where not given

    @classmethod
    def of(cls, queries: Sequence[Query], fwd_times: Sequence[float | None] | None = None) -> Columns:
        """``fwd_times``: a profiled forward time per query (seconds) or ``None``."""
        forwards = list(fwd_times) if fwd_times is not None else [None] * len(queries)
        if len(forwards) != len(queries):
            raise InputError(f"{len(forwards)} forward times for {len(queries)} queries")
        for f in forwards:
            if f is not None and not (math.isfinite(f) and f > 0):
                raise InputError(f"a profiled forward time must be a positive number of seconds, got {f!r}")

        def col(values: Sequence[float]) -> FloatArray:
            return np.asarray(values, dtype=np.float64)

        return cls(
            params=col([q.model.params for q in queries]),
            seq_len=col([q.model.seq_len for q in queries]),
            hidden=col([q.model.hidden for q in queries]),
            layers=col([q.model.layers for q in queries]),
            flops=col([q.model.forward_flops_per_sample() for q in queries]),
            batch=col([q.global_batch for q in queries]),
            nodes=col([q.nodes for q in queries]),
            gpus_per_node=col([q.gpus_per_node for q in queries]),
            # Without offload the CPU count is not an input (Rubick §4.2); 1 keeps it finite.
            cpus=col([q.cpus_per_gpu or 1.0 for q in queries]),
            dp=col([q.plan.dp or 1 for q in queries]),
            tp=col([q.plan.tp for q in queries]),
            pp=col([q.plan.pp for q in queries]),
            zero=col([q.plan.zero_stage for q in queries]),
            offload=col([1.0 if q.plan.offload_optimizer else 0.0 for q in queries]),
            accum=col([q.grad_accum for q in queries]),
            recompute=col([1.0 if q.plan.activation_checkpointing else 0.0 for q in queries]),
            fwd_given=col([math.nan if f is None else f for f in forwards]),
        )


@dataclass(frozen=True, slots=True)
class ParamColumns:
    """One :class:`PerfParams` and compute rate (FLOP/s) per query."""

    k_bwd: FloatArray
    k_sync: FloatArray
    k_opt: FloatArray
    k_opt_off: FloatArray
    k_off: FloatArray
    k_swap: FloatArray
    k_const: FloatArray
    rate: FloatArray

    @classmethod
    def of(cls, params: Sequence[PerfParams], rates: Sequence[float]) -> ParamColumns:
        values = {
            name: np.asarray([getattr(p, name) for p in params], dtype=np.float64) for name in PARAM_NAMES
        }
        return cls(rate=np.asarray(rates, dtype=np.float64), **values)


def _inter_share(env: Environment, c: Columns) -> FloatArray:
    """Per-GPU inter-node bandwidth (bytes/s): the node's RDMA shared by its GPUs of the job."""
    share: FloatArray = env.inter_gb_s * GB / c.gpus_per_node
    return share


def forward_floor(c: Columns, env: Environment) -> FloatArray:
    """The shortest possible forward time of each query's iteration (seconds).

    Every sample of the global batch costs :meth:`ModelShape.forward_flops_per_sample`;
    the job's ``d·t·p`` GPUs cannot do them faster than at their peak rate.
    """
    floor: FloatArray = c.batch * c.flops / (c.dp * c.tp * c.pp * env.peak_tflops * 1e12)
    return floor


def forward_usable(c: Columns, env: Environment) -> npt.NDArray[np.bool_]:
    """Where a profiled forward time is given and not below :func:`forward_floor`."""
    given = np.nan_to_num(c.fwd_given, nan=-1.0)
    usable: npt.NDArray[np.bool_] = given >= forward_floor(c, env)
    return usable


def breakdown_columns(c: Columns, k: ParamColumns, env: Environment) -> dict[str, FloatArray]:
    """Every term of Rubick §4 for every query (seconds); ``total`` is ``T_iter``."""
    d, t, p, a = c.dp, c.tp, c.pp, c.accum
    intra = env.intra_gb_s * GB
    inter = _inter_share(env, c)

    # §4.1 T_fwd: one sample's forward on one GPU, scaled linearly to the micro-batch
    # (global batch / (d·a)) and to the tensor shard (1/t); pipeline parallelism puts l/p
    # layers on each GPU, and the a micro-batches of an iteration fill and drain the
    # pipeline: t_stage·(m + p - 1) with m = a. Without PP this is a·T_fwd (§4.1, GA).
    micro = c.batch / (d * a)
    t_stage = micro * (c.flops / k.rate) / (t * p)
    t_fwd_rate = t_stage * (a + p - 1.0)
    # A profiled forward time of the configuration, where given, replaces the estimate
    # (Rubick's T_fwd is such a measurement); the stage time scales with it. One below
    # the physical floor (the iteration's forward FLOPs at the GPUs' peak) cannot be a
    # forward time of this configuration and is not used (Environment.peak_tflops).
    usable = forward_usable(c, env)
    t_fwd = np.where(usable, c.fwd_given, t_fwd_rate)
    t_stage = t_fwd / (a + p - 1.0)
    # §4.1 T_bwd = k_bwd·T_fwd; activation checkpointing recomputes the forward pass
    # during the backward pass (Chen et al.), one more T_fwd.
    bwd_factor = k.k_bwd + c.recompute
    t_bwd = bwd_factor * t_fwd
    # Only the backward of the last micro-batch overlaps the gradient sync: the first
    # a-1 accumulate locally (§4.1, GA). Without accumulation this is all of T_bwd.
    t_bwd_last = bwd_factor * t_stage * p

    # §4.1 T_comm = V/B with the bottleneck bandwidth of the group. Megatron orders ranks
    # TP first, then DP, then PP: a DP group spans t·d consecutive GPUs, so it stays in one
    # node when t·d fits there; a TP group when t does; PP stages cross nodes when there
    # are several. V_dp = P·2(d-1)/(d·t·p), V_tp = 4·2·(t-1)·b·s·h·l/(d·t),
    # V_pp = 2·p·b·s·h/(d·t) (elements; times bytes per element).
    b_dp = np.where(t * d <= c.gpus_per_node, intra, inter)
    b_tp = np.where(t <= c.gpus_per_node, intra, inter)
    b_pp = np.where(c.nodes > 1, inter, intra)
    v_dp = c.params * env.grad_bytes * 2.0 * (d - 1.0) / (d * t * p)
    v_tp = 8.0 * (t - 1.0) * c.batch * c.seq_len * c.hidden * c.layers * env.activation_bytes / (d * t)
    v_pp = np.where(p > 1, 2.0 * p * c.batch * c.seq_len * c.hidden * env.activation_bytes / (d * t), 0.0)
    t_dp, t_tp, t_pp = v_dp / b_dp, v_tp / b_tp, v_pp / b_pp

    # §4.1 combining: T_cc = T_fwd + (accumulation backwards) + f^{k_sync}(T_bwd, T_dp)
    # + T_tp + T_pp; TP and PP traffic is on the critical path.
    t_cc = t_fwd + (t_bwd - t_bwd_last) + overlap(t_bwd_last, t_dp, k.k_sync) + t_tp + t_pp

    # §4.2 T_opt = k_opt·P/x: x = t·p for 3D (and plain DP), times d under ZeRO, which
    # partitions the optimizer state over the data-parallel ranks. ZeRO-Offload steps on
    # the CPU: k_opt_off·P/(d·c), c threads per GPU working on its partition.
    shard = t * p * np.where(c.zero > 0, d, 1.0)
    t_opt = np.where(c.offload > 0, k.k_opt_off * c.params / (d * t * p * c.cpus), k.k_opt * c.params / shard)
    # §4.2 T_off: gradients to the host, parameters back. The node's host bandwidth is
    # shared by the job's GPUs on it (module docstring), so it is the node's traffic,
    # P/(d·t·p) per GPU times the job's GPUs on the node, over B_pcie.
    per_gpu = c.params * env.offload_bytes / (d * t * p)
    t_off = np.where(c.offload > 0, per_gpu * c.gpus_per_node / (env.pcie_gb_s * GB), 0.0)
    t_oo = np.where(c.offload > 0, overlap(t_dp, t_off, k.k_off) + overlap(t_opt, t_off, k.k_swap), t_opt)
    total = t_cc + t_oo + k.k_const
    return {
        "t_fwd": t_fwd,
        "t_bwd": t_bwd,
        "t_comm_dp": t_dp,
        "t_comm_tp": t_tp,
        "t_comm_pp": t_pp,
        "t_cc": t_cc,
        "t_opt": t_opt,
        "t_off": t_off,
        "t_oo": t_oo,
        "k_const": k.k_const,
        "total": total,
        "t_fwd_rate": t_fwd_rate,
    }


def iteration_breakdown(
    query: Query, params: PerfParams, rate: float, env: Environment, fwd_time_s: float | None = None
) -> Breakdown:
    """Rubick Eq. 1 for one query, with its parts; ``rate`` is the model's FLOP/s.

    ``fwd_time_s``: the configuration's profiled forward time, used instead of the
    rate-based estimate when given.
    """
    if not (np.isfinite(rate) and rate > 0):
        raise InputError(f"model {query.model.name!r}: compute rate must be > 0 FLOP/s, got {rate!r}")
    parts = breakdown_columns(Columns.of([query], [fwd_time_s]), ParamColumns.of([params], [rate]), env)
    parts.pop("t_fwd_rate")
    return Breakdown(**{name: float(values[0]) for name, values in parts.items()})
