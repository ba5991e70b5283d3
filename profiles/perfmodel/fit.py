"""Fitting Rubick's performance model to measured iteration times (Rubick §4.3).

Rubick fits its seven parameters per model by minimising the RMSLE between Eq. 1 and at
least seven measured points. Mosaic fits all models' samples at once, hierarchically,
because some models have only three or four samples and some none:

* the seven ``k``'s have **shared** values for all models: they describe the framework
  and the cluster (backward/forward ratio, overlap degrees, optimizer cost per
  parameter), not one network;
* every model has its own **compute rate** (FLOP/s), the forward time's stand-in for
  plans never profiled (``terms.py``), and the parameters in ``FitOptions.pooled`` (by
  default ``k_bwd``, ``k_opt_off`` and ``k_const``) may differ per model;
* per-model values are *partially pooled*, a prior in log space: the fit pays
  ``weight × (log deviation)`` (one least-squares row) for moving a model away from the
  shared value (``pooling``, per parameter ``pooling_by``, ``rate_pooling`` for rates), so
  a model with few samples stays near what the others share and a well-sampled one
  follows its data. ``k_bwd`` gets its own, stronger weight (``pooling_by``): the
  backward/forward ratio is a property of the layer type and kernels, and a model whose
  samples are all one plan (LLaMA-2-7B: ZeRO-Offload+GC only) cannot separate it from the
  offload terms. The weights were chosen by leave-one-out cross-validation on the samples
  (:func:`leave_one_out`; ``benchmarks/papers/perfmodel.py`` reports it), never on validation
  points;
* the samples' **profiled forward times** (``Measurement.fwd_time_s``) are used twice, as
  Rubick's own fit uses its profiled times: as each sample's ``T_fwd`` input
  (``fwd_as_input``) and as a second target that calibrates the model's compute rate
  (``fwd_weight``); a forward time below the physical floor (``Environment.peak_tflops``)
  is not used;
* ``k_bwd`` carries a weak prior at 2 (backward = twice the forward FLOPs);
* a model **without samples**, asked with its configuration's profiled forward time, takes the
  fitted parameters of its *family* (the same architecture at another size, :func:`family`:
  LLaMA-30B those of LLaMA-2-7B in the bundled data); without a forward time, or without a
  fitted family member, the shared ones (:meth:`PerfModel.parameters_for`). The evidence is
  the samples' one pair of models of one architecture, BERT-large and RoBERTa-large (the same
  24 x 1024 encoder; their names differ, so :func:`family` does not pair them): fitted without
  all of one model's samples, that model's samples are predicted better from its sibling's
  parameters than from the shared ones when their forward times are given, Rubick's way
  (RoBERTa 3.6 against 9.7 % average error, BERT 6.2 against 17.6 %), but worse without them,
  from the compute rate (RoBERTa 4.6 against 3.1 %, BERT 4.8 against 2.8 %), hence the rule
  depends on whether a forward time is given; while GPT-2's and T5's parameters (different
  architectures) do worse than the shared ones for each other, with and without forward times
  (``benchmarks/papers/perfmodel.py``, ``family_evidence``).

The fit is ``scipy.optimize.least_squares`` on log errors (RMSLE) with those penalty rows,
started from three fixed points (deterministic); the best one wins.

No tensor- or pipeline-parallel samples exist in the bundled data, so the 3D terms
(``terms.py``) use hardware constants (``Environment``), not fitted ones; the shared
``k``'s carry over to 3D plans.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import least_squares

from planner.core.errors import InputError
from profiles.names import normalise
from profiles.perfmodel.memory import fits
from profiles.perfmodel.query import Environment, ModelShape, Query
from profiles.perfmodel.terms import (
    PARAM_NAMES,
    Breakdown,
    Columns,
    FloatArray,
    ParamColumns,
    PerfParams,
    breakdown_columns,
    forward_usable,
    iteration_breakdown,
)

MIN_SAMPLES = 7  # Rubick §4.3: a 7-tuple needs at least seven data points
_OVERLAP = frozenset({"k_sync", "k_off", "k_swap"})
# Units of the fitted logarithms, so that every one starts near 0: seconds per parameter
# in nanoseconds, the constant in milliseconds, rates in TFLOP/s.
_SCALE = {"k_bwd": 1.0, "k_opt": 1e-9, "k_opt_off": 1e-9, "k_const": 1e-3}
_RATE_SCALE = 1e12
_START = {"k_bwd": 2.0, "k_opt": 0.07, "k_opt_off": 2.0, "k_const": 10.0}
_START_RATE = 60.0
_BOUNDS = {
    "k_bwd": (1.0, 4.0),
    "k_opt": (1e-6, 1e3),
    "k_opt_off": (1e-6, 1e3),
    "k_const": (1e-6, 1e5),
}
_OVERLAP_BOUNDS = (1e-3, 50.0)  # k - 1: from "no overlap" (sum) to practically max()
_RATE_BOUNDS = (0.1, 5000.0)
_DEVIATION = 10.0  # per-model log deviations stay within e^±10
_SIZE = re.compile(r"\d+[bm]?$")


def family(name: str) -> str:
    """A model's family: its normalised name without the trailing size (``llama30`` -> ``llama``).

    ``llama7`` and ``llama30`` (LLaMA-2-7B, LLaMA-30B) are one family; ``gpt2`` is
    ``gpt``, ``t5`` ``t``; a name that is all size is its own family.
    """
    key = normalise(name)
    return _SIZE.sub("", key) or key


@dataclass(frozen=True, slots=True)
class Measurement:
    """One measured configuration: the query, its iteration time and where it came from."""

    query: Query
    iter_time_s: float
    source: str = ""
    fwd_time_s: float | None = None

    def __post_init__(self) -> None:
        where = self.source or f"model {self.query.model.name!r}"
        if not (math.isfinite(self.iter_time_s) and self.iter_time_s > 0):
            raise InputError(f"{where}: iter_time_s must be a positive number, got {self.iter_time_s!r}")
        if self.fwd_time_s is not None and not (
            math.isfinite(self.fwd_time_s) and 0 < self.fwd_time_s < self.iter_time_s
        ):
            raise InputError(
                f"{where}: fwd_time_s must be a positive number below iter_time_s, got {self.fwd_time_s!r}"
            )


@dataclass(frozen=True, slots=True)
class FitOptions:
    """How the fit shares parameters across models (module docstring)."""

    pooled: tuple[str, ...] = ("k_bwd", "k_opt_off", "k_const")
    pooling: float = 0.03
    rate_pooling: float = 0.1
    # Per-parameter pooling weights that override ``pooling``; ``k_bwd``'s was chosen by
    # leave-one-out on the bundled samples (module docstring, benchmarks/papers/perfmodel.py).
    pooling_by: tuple[tuple[str, float], ...] = (("k_bwd", 0.3),)
    k_bwd_prior: float = 2.0
    k_bwd_prior_weight: float = 1.0
    # Measured forward times of the samples (``Measurement.fwd_time_s``): ``fwd_weight``
    # weighs a residual of the rate-based forward against them (it calibrates the compute
    # rate), ``fwd_as_input`` feeds them to the sample's own Eq. 1 as Rubick's fit does.
    # Samples without one are fitted on the rate-based estimate.
    fwd_weight: float = 1.0
    fwd_as_input: bool = True
    environment: Environment = field(default_factory=Environment)

    def __post_init__(self) -> None:
        unknown = [k for k in (*self.pooled, *(k for k, _ in self.pooling_by)) if k not in PARAM_NAMES]
        if unknown:
            raise InputError(f"fit options: unknown parameter(s) {unknown}; valid: {', '.join(PARAM_NAMES)}")
        for key in ("pooling", "rate_pooling", "k_bwd_prior_weight", "fwd_weight"):
            if not getattr(self, key) >= 0:
                raise InputError(f"fit options: {key} must be >= 0, got {getattr(self, key)!r}")
        for key, weight in self.pooling_by:
            if not weight >= 0:
                raise InputError(f"fit options: pooling weight of {key} must be >= 0, got {weight!r}")
        if not self.k_bwd_prior > 0:
            raise InputError(f"fit options: k_bwd_prior must be > 0, got {self.k_bwd_prior!r}")


@dataclass(frozen=True, slots=True)
class ModelFit:
    """A model's fitted parameters, its compute rate (FLOP/s), shape and sample count."""

    shape: ModelShape
    params: PerfParams
    rate: float
    samples: int


@dataclass(frozen=True, slots=True)
class PerfModel:
    """Fitted Rubick model: shared parameters plus per-model ones; predicts any query.

    A model that was fitted uses its own parameters and rate; a model that was not, those
    of a fitted model of its :func:`family` when the query comes with a profiled forward
    time (with ``family_sharing``, the default), else the shared ones (its shape comes with
    the query). With ``gpu_mem_gb`` set, a plan whose memory
    estimate does not fit the GPU is infeasible: :meth:`iteration_time_s` returns
    ``None``.
    """

    shared: PerfParams
    shared_rate: float
    models: Mapping[str, ModelFit]
    environment: Environment = field(default_factory=Environment)
    rmsle: float | None = None
    gpu_mem_gb: float | None = None
    family_sharing: bool = True

    def model_fit(self, name: str) -> ModelFit | None:
        return self.models.get(normalise(name))

    def family_fit(self, name: str) -> ModelFit | None:
        """The fit ``name`` uses: its own, else (``family_sharing``) a fitted model of its family.

        Of several fitted family members, the one with the most samples (then the first
        name in sorted order); ``None`` when there is none.
        """
        own = self.model_fit(name)
        if own is not None or not self.family_sharing:
            return own
        wanted = family(name)
        members = sorted((-f.samples, key) for key, f in self.models.items() if family(key) == wanted)
        return self.models[members[0][1]] if members else None

    def parameters_for(self, name: str, forward_given: bool = True) -> tuple[PerfParams, float]:
        """The ``k``'s and compute rate used for ``name``: its own fit; else, with a profiled
        forward time given, its family's (:meth:`family_fit`); else the shared ones."""
        fitted = self.family_fit(name) if forward_given else self.model_fit(name)
        return (fitted.params, fitted.rate) if fitted else (self.shared, self.shared_rate)

    def breakdown(self, query: Query, fwd_time_s: float | None = None) -> Breakdown:
        """Eq. 1's parts; ``fwd_time_s`` is the configuration's profiled forward time, if any."""
        params, rate = self.parameters_for(query.model.name, fwd_time_s is not None)
        return iteration_breakdown(query, params, rate, self.environment, fwd_time_s)

    def iteration_time_s(self, query: Query, fwd_time_s: float | None = None) -> float | None:
        """Predicted seconds per iteration, or ``None`` when the plan does not fit the GPU."""
        if self.gpu_mem_gb is not None and not fits(query, self.gpu_mem_gb, self.environment):
            return None
        return self.breakdown(query, fwd_time_s).total

    def predict_many(
        self, queries: Sequence[Query], fwd_times: Sequence[float | None] | None = None
    ) -> list[float]:
        """Eq. 1 for many queries at once (no memory check); ``fwd_times`` as in :meth:`breakdown`."""
        if not queries:
            return []
        given = [False] * len(queries) if fwd_times is None else [t is not None for t in fwd_times]
        chosen = [self.parameters_for(q.model.name, g) for q, g in zip(queries, given, strict=True)]
        k = ParamColumns.of([p for p, _ in chosen], [r for _, r in chosen])
        columns = Columns.of(queries, fwd_times)
        return [float(x) for x in breakdown_columns(columns, k, self.environment)["total"]]

    def unusable_forwards(self, queries: Sequence[Query], fwd_times: Sequence[float | None]) -> list[int]:
        """Indices of given forward times below the physical floor, which predictions ignore.

        See ``Environment.peak_tflops``: such a time cannot be the forward pass of its
        configuration; the rate-based estimate is used instead.
        """
        if not queries:
            return []
        columns = Columns.of(queries, fwd_times)
        usable = forward_usable(columns, self.environment)
        given = ~np.isnan(columns.fwd_given)
        return [int(i) for i in np.flatnonzero(given & ~usable)]

    def with_gpu_memory(self, gpu_mem_gb: float | None) -> PerfModel:
        return replace(self, gpu_mem_gb=gpu_mem_gb)


# -- the fit --------------------------------------------------------------------------


class _Layout:
    """Where each fitted number sits in the parameter vector, and its transform."""

    def __init__(self, names: Sequence[str], options: FitOptions) -> None:
        self.names = list(names)
        self.pooled = [PARAM_NAMES.index(k) for k in options.pooled]
        self.rate_at = len(PARAM_NAMES)
        self.dev_at = self.rate_at + 1
        self.per_model = len(self.pooled) + 1
        self.size = self.dev_at + self.per_model * len(self.names)

    def deviations(self, theta: FloatArray) -> FloatArray:
        block: FloatArray = theta[self.dev_at :].reshape(len(self.names), self.per_model)
        return block

    def logs(self, theta: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Per-model log-parameters (models x 7) and log-rates (models)."""
        dev = self.deviations(theta)
        k = np.tile(theta[: len(PARAM_NAMES)], (len(self.names), 1))
        if self.pooled:
            k[:, self.pooled] += dev[:, :-1]
        rates: FloatArray = theta[self.rate_at] + dev[:, -1]
        return k, rates


def _to_value(name: str, log_value: float) -> float:
    if name in _OVERLAP:
        return 1.0 + math.exp(log_value)
    return math.exp(log_value) * _SCALE[name]


def _to_columns(logs: FloatArray) -> dict[str, FloatArray]:
    out: dict[str, FloatArray] = {}
    for i, name in enumerate(PARAM_NAMES):
        col = logs[..., i]
        out[name] = 1.0 + np.exp(col) if name in _OVERLAP else np.exp(col) * _SCALE[name]
    return out


def _bounds(layout: _Layout) -> tuple[FloatArray, FloatArray]:
    lo = np.full(layout.size, -_DEVIATION)
    hi = np.full(layout.size, _DEVIATION)
    for i, name in enumerate(PARAM_NAMES):
        low, high = _OVERLAP_BOUNDS if name in _OVERLAP else _BOUNDS[name]
        lo[i], hi[i] = math.log(low), math.log(high)
    lo[layout.rate_at], hi[layout.rate_at] = (math.log(b) for b in _RATE_BOUNDS)
    return lo, hi


def _start(layout: _Layout, overlap_start: float) -> FloatArray:
    theta = np.zeros(layout.size)
    for i, name in enumerate(PARAM_NAMES):
        theta[i] = math.log(overlap_start if name in _OVERLAP else _START[name])
    theta[layout.rate_at] = math.log(_START_RATE)
    return theta


def _to_log(name: str, value: float) -> float:
    return math.log(max(value - 1.0, 1e-12)) if name in _OVERLAP else math.log(value / _SCALE[name])


def _warm_start(layout: _Layout, model: PerfModel) -> FloatArray:
    """The parameter vector of an earlier fit (models it does not know start at the shared values)."""
    theta = np.zeros(layout.size)
    for i, name in enumerate(PARAM_NAMES):
        theta[i] = _to_log(name, getattr(model.shared, name))
    theta[layout.rate_at] = math.log(model.shared_rate / _RATE_SCALE)
    dev = theta[layout.dev_at :].reshape(len(layout.names), layout.per_model)
    for row, key in enumerate(layout.names):
        fitted = model.models.get(key)
        if fitted is None:
            continue
        for col, j in enumerate(layout.pooled):
            name = PARAM_NAMES[j]
            dev[row, col] = _to_log(name, getattr(fitted.params, name)) - theta[j]
        dev[row, -1] = math.log(fitted.rate / _RATE_SCALE) - theta[layout.rate_at]
    return theta


def fit_perfmodel(
    measurements: Sequence[Measurement], options: FitOptions | None = None, *, start: PerfModel | None = None
) -> PerfModel:
    """Fit Rubick's model to measured iteration times (at least seven).

    ``start``: an earlier fit to start from (one start instead of three fixed ones; the
    leave-one-out refits of :func:`leave_one_out` use the fit on all samples).

    Raises :class:`InputError` with fewer than seven measurements or when one model's
    rows disagree on its shape (parameters, sequence, hidden size, layers).
    """
    options = options or FitOptions()
    if len(measurements) < MIN_SAMPLES:
        raise InputError(
            f"need at least {MIN_SAMPLES} measurements to fit the {MIN_SAMPLES} parameters "
            f"(Rubick §4.3), got {len(measurements)}"
        )
    shapes = _shapes(measurements)
    names = sorted(shapes)
    layout = _Layout(names, options)
    queries = [m.query for m in measurements]
    forwards = [m.fwd_time_s for m in measurements]
    columns = Columns.of(queries, forwards if options.fwd_as_input else None)
    given = Columns.of(queries, forwards).fwd_given
    index = np.array([names.index(normalise(q.model.name)) for q in queries])
    target = np.log(np.array([m.iter_time_s for m in measurements]))
    env = options.environment
    prior = math.log(options.k_bwd_prior)
    by = dict(options.pooling_by)
    weights = np.array([by.get(k, options.pooling) for k in options.pooled] + [options.rate_pooling])

    # Measured forward times, where given and weighted, are a second target (Rubick fits its
    # parameters to the profiled forward, backward+sync and optimizer times and the total).
    has_fwd = forward_usable(Columns.of(queries, forwards), env)
    fwd_target = np.log(given[has_fwd])

    def parts(theta: FloatArray) -> dict[str, FloatArray]:
        logs, rates = layout.logs(theta)
        cols = _to_columns(logs[index])
        k = ParamColumns(rate=np.exp(rates[index]) * _RATE_SCALE, **cols)
        return breakdown_columns(columns, k, env)

    def predict(theta: FloatArray) -> FloatArray:
        return parts(theta)["total"]

    def residuals(theta: FloatArray) -> FloatArray:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            got = parts(theta)
            errors = np.log(got["total"]) - target
            fwd_errors = options.fwd_weight * (np.log(got["t_fwd_rate"][has_fwd]) - fwd_target)
            errors = np.concatenate([errors, fwd_errors])
        # A parameter vector that makes a time non-finite is far off, not an error.
        errors = np.where(np.isfinite(errors), errors, 50.0)
        penalties = (layout.deviations(theta) * weights).ravel()
        k_bwd = options.k_bwd_prior_weight * (theta[0] - prior)
        out: FloatArray = np.concatenate([errors, penalties, [k_bwd]])
        return out

    lo, hi = _bounds(layout)
    best = None
    starts = (
        [_warm_start(layout, start)]
        if start is not None
        else [_start(layout, overlap_start) for overlap_start in (0.01, 1.0, 10.0)]
    )
    for theta_start in starts:
        theta0 = np.clip(theta_start, lo + 1e-9, hi - 1e-9)
        solution = least_squares(residuals, theta0, bounds=(lo, hi), method="trf", x_scale=1.0)
        if best is None or solution.cost < best.cost:
            best = solution
    assert best is not None
    theta = np.asarray(best.x, dtype=np.float64)
    logs, rates = layout.logs(theta)
    shared = PerfParams(**{n: _to_value(n, float(theta[i])) for i, n in enumerate(PARAM_NAMES)})
    counts = {name: int(np.sum(index == i)) for i, name in enumerate(names)}
    models = {
        name: ModelFit(
            shape=shapes[name],
            params=PerfParams(**{n: _to_value(n, float(logs[i, j])) for j, n in enumerate(PARAM_NAMES)}),
            rate=math.exp(float(rates[i])) * _RATE_SCALE,
            samples=counts[name],
        )
        for i, name in enumerate(names)
    }
    with np.errstate(all="ignore"):
        log_errors = np.log(predict(theta)) - target
    return PerfModel(
        shared=shared,
        shared_rate=math.exp(float(theta[layout.rate_at])) * _RATE_SCALE,
        models=models,
        environment=env,
        rmsle=float(np.sqrt(np.mean(log_errors**2))),
    )


def _shapes(measurements: Sequence[Measurement]) -> dict[str, ModelShape]:
    shapes: dict[str, tuple[ModelShape, str]] = {}
    for m in measurements:
        key = normalise(m.query.model.name)
        shape = m.query.model
        if key not in shapes:
            shapes[key] = (shape, m.source)
            continue
        first, where = shapes[key]
        for attr in ("params", "seq_len", "hidden", "layers"):
            if getattr(first, attr) != getattr(shape, attr):
                raise InputError(
                    f"{m.source or 'measurement'}: model {shape.name!r} has {attr} {getattr(shape, attr)}, "
                    f"but {getattr(first, attr)} in {where or 'an earlier row'}"
                )
    return {k: v[0] for k, v in shapes.items()}


def leave_one_out(
    measurements: Sequence[Measurement], options: FitOptions | None = None, feed_forward: bool | None = None
) -> list[float]:
    """Relative error of each measurement predicted by a fit on all the others.

    Each refit starts from the fit on all measurements (``fit_perfmodel(start=...)``); a
    held-out measurement's profiled forward time is fed to its prediction when
    ``feed_forward`` is true (default: as the fit's own samples are,
    ``FitOptions.fwd_as_input``). This is how the pooling weights are chosen: on the
    samples only, never on held-out validation points.
    """
    options = options or FitOptions()
    feed = options.fwd_as_input if feed_forward is None else feed_forward
    full = fit_perfmodel(measurements, options)
    errors = []
    for i, held in enumerate(measurements):
        rest = [m for j, m in enumerate(measurements) if j != i]
        model = fit_perfmodel(rest, options, start=full)
        forward = held.fwd_time_s if feed else None
        predicted = model.predict_many([held.query], [forward])[0]
        errors.append(abs(predicted - held.iter_time_s) / held.iter_time_s)
    return errors
