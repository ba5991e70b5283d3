"""Step time of data-parallel ranks made of CPU threads: the profiler's model of its own runs.

Rubick's iteration-time model (§4, :mod:`profiles.perfmodel.terms`) is built for GPU steps,
where a forward pass scales with the micro-batch and a GPU's speed is fixed. A rank of CPU
threads breaks three of its assumptions, measured with ``benchmarks/tools/profiler_fit.py`` on the
bundled text-transformer (2 cores; milliseconds per step of global batch 16: one rank of one
thread 36.9 at accumulation 1 and 62.1 at 16; one rank of two threads 24.1 and 61.2):

* every micro-step costs a fixed time besides its samples (the framework's calls; about
  1.3-2 ms on one rank), which a forward time linear in the micro-batch cannot express, so
  gradient accumulation looks free to Rubick's model and is not;
* the rank's threads set its speed (two threads: 1.5-1.6x), where Rubick has CPU threads only
  in ZeRO-Offload's optimizer step;
* ranks sharing a node's cores slow each other's micro-steps (5-9 ms per micro-step with two
  ranks on two cores).

So, per configuration (``d`` data-parallel ranks, ``r`` of them on a node, ``t`` threads each,
``a`` accumulation steps, micro-batch ``m = B/(d·a)``), without ZeRO::

    T = a · (c_micro · (1 + c_share · (r - 1)) + c_sample · m / t^theta) + [d > 1] · c_sync

Rubick's terms, re-read for a CPU rank: ``c_sample`` is T_fwd + T_bwd per sample on one
thread; ``c_sync`` the gradient all-reduce, once per iteration; ``theta`` how far threads are
devices (1: two threads are one rank twice as fast). There is no per-iteration constant
(Rubick's ``k_const``, the optimizer step): every sampled run has the job's global batch, so a
constant cannot be told from the per-sample time (with one, the seven defaults leave a family
of fits, and a run of accumulation 16 on two threads was predicted 5 % off from noiseless
samples); on the measured runs it is small (the fit with it: 6.7 % on 14 other configurations,
without: 6.3 %). Five parameters per model, fitted like Rubick's seven by minimising RMSLE
(``scipy.optimize.least_squares``) over the sampled runs: the profiler's seven defaults vary
ranks, threads and accumulation (:func:`profiles.profiler.runs.default_plan_samples`). Only
data parallelism is modelled (the profiler samples no TP/PP).

``c_zero``, a sixth parameter, is what a DeepSpeed ZeRO engine adds, and where it is paid
follows how the stages treat gradients (Rajbhandari et al., ZeRO, §5; DeepSpeed's
``stage_1_and_2.py``). ZeRO-2 and -3 partition the gradients: a hook copies each gradient into
a reduce bucket at every backward, so ``c_zero`` is paid at every micro-step. ZeRO-1 keeps
whole gradients, accumulates them as plain data parallelism does and reduces them at the
accumulation boundary, so its ``c_zero`` is paid once per iteration. With ``P = c_micro ·
(1 + c_share · (r - 1)) + c_sample · m / t^theta`` (a micro-step without ZeRO)::

    ZeRO-2/3:  T = a · (P + c_zero) + [d > 1] · c_sync
    ZeRO-1:    T = a · P + c_zero + [d > 1] · c_sync

ZeRO-2 also reduce-scatters at every micro-step, but paying ``c_sync`` per micro-step (it is
fitted from a data-parallel run's one all-reduce per iteration) put two ranks with
accumulation 27-30 % too slow on measured runs, so the sync stays once per iteration. On CPU
ranks the optimizer's offload is a copy within host memory, too small to tell apart (ZeRO-2
and ZeRO-Offload steps measured within 2 % of each other), so offload is ZeRO-2 here.
``c_zero`` is fitted only where some sampled run has a ZeRO stage (the DeepSpeed defaults), and
is 0, and left out of the document, otherwise, so a torch job's fit and document are those of
the five parameters. How this form was chosen, and its errors before and after, are in
BENCHMARKS.md ("Profiler", DeepSpeed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from planner.core.errors import InputError, ProfileError
from planner.core.fields import Fields, json_document
from profiles.names import normalise
from profiles.perfmodel.docparts import FORMAT, SHAPE_KEYS, fit_block, read_rmsle, read_shape, shape_entry
from profiles.perfmodel.fit import Measurement
from profiles.perfmodel.query import ModelShape, Query

KIND = "cpu-step"


@dataclass(frozen=True, slots=True)
class CpuStepParams:
    """The five parameters (seconds, except ``theta`` and ``c_share``, dimensionless)."""

    c_micro: float
    c_sample: float
    theta: float
    c_sync: float
    c_share: float
    c_zero: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not (math.isfinite(value) and value >= 0):
                raise InputError(f"cpu-step parameters: {f.name} must be a finite number >= 0, got {value!r}")


PARAM_NAMES: tuple[str, ...] = tuple(f.name for f in fields(CpuStepParams))
_START = CpuStepParams(c_micro=1e-3, c_sample=2e-3, theta=1.0, c_sync=1e-3, c_share=1.0, c_zero=1e-3)
_UPPER = CpuStepParams(c_micro=10.0, c_sample=10.0, theta=1.5, c_sync=100.0, c_share=20.0, c_zero=10.0)


def _columns(queries: Sequence[Query]) -> dict[str, np.ndarray]:
    d = np.array([q.plan.dp for q in queries], dtype=np.float64)
    a = np.array([q.grad_accum for q in queries], dtype=np.float64)
    return {
        "d": d,
        "a": a,
        "m": np.array([q.global_batch for q in queries], dtype=np.float64) / (d * a),
        "t": np.array([q.cpus_per_gpu or 1.0 for q in queries], dtype=np.float64),
        "r": np.array([q.gpus_per_node for q in queries], dtype=np.float64),
        # ZeRO-2/3: partitioned gradients, reduced at every micro-step; ZeRO-1: once per iteration.
        "z_micro": np.array([1.0 if q.plan.zero_stage >= 2 else 0.0 for q in queries], dtype=np.float64),
        "z_iter": np.array([1.0 if q.plan.zero_stage == 1 else 0.0 for q in queries], dtype=np.float64),
    }


def _times(p: Sequence[float], c: Mapping[str, np.ndarray]) -> np.ndarray:
    c_micro, c_sample, theta, c_sync, c_share, c_zero = p
    a, z_micro = c["a"], c["z_micro"]
    per_micro = (
        c_micro * (1.0 + c_share * (c["r"] - 1.0)) + c_zero * z_micro + c_sample * c["m"] / c["t"] ** theta
    )
    result: np.ndarray = a * per_micro + c_zero * c["z_iter"] + np.where(c["d"] > 1, c_sync, 0.0)
    return result


@dataclass(frozen=True, slots=True)
class CpuStepFit:
    shape: ModelShape
    params: CpuStepParams
    samples: int


@dataclass(frozen=True, slots=True)
class CpuStepModel:
    """Fitted per model (keys: normalised names); answers as :class:`PerfModel` does."""

    models: Mapping[str, CpuStepFit]
    rmsle: float | None = None

    def _fit_of(self, query: Query) -> CpuStepFit:
        fitted = self.models.get(normalise(query.model.name))
        if fitted is None:
            known = ", ".join(sorted(f.shape.name for f in self.models.values()))
            raise InputError(f"model {query.model.name!r}: not in this cpu-step fit (fitted: {known})")
        if query.plan.tp != 1 or query.plan.pp != 1:
            raise InputError(f"model {query.model.name!r}: the cpu-step model covers data parallelism only")
        return fitted

    def predict_many(
        self, queries: Sequence[Query], fwd_times: Sequence[float | None] | None = None
    ) -> list[float]:
        """Seconds per iteration of each query; a model not fitted here, or a plan with tensor
        or pipeline parallelism, is an error naming it. Forward times are not used: a CPU
        step's parts are fitted, not given."""
        out = []
        for q in queries:
            params = [getattr(self._fit_of(q).params, n) for n in PARAM_NAMES]
            out.append(float(_times(params, _columns([q]))[0]))
        return out

    def iteration_time_s(self, query: Query, fwd_time_s: float | None = None) -> float | None:
        return self.predict_many([query])[0]

    def unusable_forwards(self, queries: Sequence[Query], fwd_times: Sequence[float | None]) -> list[int]:
        return []  # forward times are never used

    def with_gpu_memory(self, gpu_mem_gb: float | None) -> CpuStepModel:
        return self  # no GPU memory to check


def fit_cpu_step(measurements: Sequence[Measurement]) -> CpuStepModel:
    """Each model's parameters from its measured runs: five, and ``c_zero`` where some run has
    a ZeRO stage (at least as many runs as parameters, per model)."""
    by_model: dict[str, list[Measurement]] = {}
    for m in measurements:
        by_model.setdefault(normalise(m.query.model.name), []).append(m)
    if not by_model:
        raise InputError("cpu-step fit: no measurements")
    models: dict[str, CpuStepFit] = {}
    residuals: list[np.ndarray] = []
    for key, rows in sorted(by_model.items()):
        name = rows[0].query.model.name
        zero = any(m.query.plan.zero_stage for m in rows)
        free = PARAM_NAMES if zero else tuple(n for n in PARAM_NAMES if n != "c_zero")
        if len(rows) < len(free):
            raise InputError(
                f"cpu-step fit: model {name!r} has {len(rows)} measured run(s); its {len(free)} "
                "parameters need at least as many"
            )
        for m in rows:
            if m.query.plan.tp != 1 or m.query.plan.pp != 1:
                raise InputError(f"{m.source or name}: the cpu-step model covers data parallelism only")
        c = _columns([m.query for m in rows])
        y = np.log([m.iter_time_s for m in rows])

        def every(p: np.ndarray, fixed: bool = not zero) -> list[float]:
            return [*p, 0.0] if fixed else list(p)  # c_zero is the last parameter

        result = least_squares(
            lambda p, c=c, y=y: np.log(_times(every(p), c)) - y,
            [getattr(_START, n) for n in free],
            bounds=([0.0] * len(free), [getattr(_UPPER, n) for n in free]),
        )
        params = CpuStepParams(**{n: float(v) for n, v in zip(PARAM_NAMES, every(result.x), strict=True)})
        models[key] = CpuStepFit(rows[0].query.model, params, len(rows))
        residuals.append(result.fun)
    all_residuals = np.concatenate(residuals)
    return CpuStepModel(models, float(np.sqrt(np.mean(all_residuals**2))))


def to_document(model: CpuStepModel, samples: int | None = None) -> dict[str, Any]:
    entries = {
        key: {**shape_entry(fitted.shape), "samples": fitted.samples, **_params_entry(fitted.params)}
        for key, fitted in sorted(model.models.items())
    }
    document: dict[str, Any] = {"format": FORMAT, "model": KIND, "models": entries}
    if fit := fit_block(samples, model.rmsle):
        document["fit"] = fit
    return document


def _params_entry(params: CpuStepParams) -> dict[str, float]:
    """The parameters, less ``c_zero`` when it is 0 (a fit without ZeRO runs: the document of
    the five parameters)."""
    entry = asdict(params)
    if entry["c_zero"] == 0.0:
        del entry["c_zero"]
    return entry


def from_document(document: Any, source: str = "perfmodel") -> CpuStepModel:
    """A ``mosaic-perfmodel/1`` document of ``"model": "cpu-step"``; errors name the key."""
    f = Fields(json_document(document, source, ProfileError), source, ProfileError)
    f.only(("format", "model", "models", "fit"))
    models_fields = f.child("models")
    models: dict[str, CpuStepFit] = {}
    for key in models_fields.data:
        m = models_fields.child(key)
        m.only((*SHAPE_KEYS, "samples", *PARAM_NAMES))
        shape = read_shape(m, source, key)
        try:
            values = {n: m.req_float(n, minimum=0.0) for n in PARAM_NAMES if n != "c_zero"}
            params = CpuStepParams(**values, c_zero=m.opt_float("c_zero", minimum=0.0) or 0.0)
        except ProfileError:
            raise
        except InputError as e:
            raise ProfileError(f"{source}: models.{key}: {e}") from e
        models[key] = CpuStepFit(shape, params, m.opt_int("samples", 0) or 0)
    return CpuStepModel(models, read_rmsle(f, source))
