"""Observed throughput: a running job's measurements refine its model's profile (pure).

The controller reads each running job's heartbeats (samples/s at the allocation it holds)
and keeps :class:`ObservedPoint` records; this module merges them into the profile the
planner uses next round. Only the CPU axis of the sensitivity matrix W[c, m] (Synergy
§3.1) is refined: that is what the heartbeats of a job at a known CPU count measure.

Observed rates are absolute (samples/s per GPU on this cluster's hardware, at the job's
batch size and plan) while a prior matrix holds *ratios* (normalised at a reference
allocation, on someone else's hardware). So points are compared only within one *shape*
(GPU type, GPU count, batch size, plan): among points of one shape the ratio of two rates
is the ratio of W at their CPU counts, whatever the hardware. A shape observed at a
single CPU count says nothing about the curve and leaves the prior as it is; from two CPU
counts on, the observed ratios replace the prior's:

* the anchor is the lowest observed CPU count ``c0``, where the prior is kept
  (W'(c0) = W(c0)); every other observed count gets W'(c) = W(c0) x rate(c) / rate(c0);
* below ``c0`` the prior stands (nothing was measured there);
* between two observed counts the prior's shape is scaled to pass through both:
  W'(c) = W'(a) + (W(c) - W(a)) x g with g = (W'(b) - W'(a)) / (W(b) - W(a)) (linear
  between them where the prior is flat);
* above the highest observed count the prior's further gain is scaled by the share of
  its gain the last observed stretch confirmed (``g`` clamped to [0, 1]): CPU curves
  saturate (§3.1's search interpolates flat stretches for the same reason), so a curve
  observed flat stays flat beyond, and observations never promise more than the prior.

The corrected row factor W'(c) / W(c) (at the observed memory per GPU) multiplies every
memory column of the row; observed CPU counts that are not rows of the prior's grid are
added as rows (interpolated first). A model without a matrix (neutral, or unknown) gets
a one-column matrix from its observed points alone. Of each (CPU count) the median of its
points counts, so a single outlier does not move the curve.

A *profiled* prior (an ``optimistic`` block, measured by ``mosaic profile`` on this
cluster) is absolute already: the observed rates become points of its measured CPU curve,
replacing the measured rate at the same CPU count or adding one (:func:`merge_absolute`
keeps the curve non-decreasing through them), and the matrix is derived again with its
cache model; so a single observed CPU count corrects it (a profile measured
without contention, a job slower at many CPUs than its profile says). That assumes the
profile was measured on this cluster's hardware, with the GPU count its ``gpus`` says, at
the jobs' batch size and plan, which is what a site's ``profiled`` document is; and it is
done only for jobs whose memory lets the cache hold the whole data set (the curve was
measured that way) and that hold whole CPUs per GPU.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from profiles.document import OBSERVED
from profiles.optimistic import OptimisticProfile, cpu_curve
from profiles.schema import Profile, SensitivityMatrix
from profiles.store import ProfileStore

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Shape:
    """What a rate is comparable within: GPU type and count, batch size, execution plan, nodes."""

    gpu_type: str
    num_gpus: int
    batch_size: int | None = None
    plan: str | None = None  # :func:`profiles.schema.plan_key` text; None: as submitted
    nodes: int | None = None  # nodes the GPUs were on; None: not recorded


@dataclass(frozen=True, slots=True)
class ObservedPoint:
    """One run's measured throughput at the allocation it held."""

    model: str  # the profile's canonical name (or the job's label for an unknown model)
    shape: Shape
    cpus_per_gpu: float
    mem_gb_per_gpu: float
    samples_per_s_per_gpu: float
    time_s: float
    job_id: str = ""

    def __post_init__(self) -> None:
        for name in ("cpus_per_gpu", "samples_per_s_per_gpu"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"observed point of {self.model!r}: {name} must be positive, got {value}")
        if not (math.isfinite(self.mem_gb_per_gpu) and self.mem_gb_per_gpu >= 0):
            raise ValueError(f"observed point of {self.model!r}: mem_gb_per_gpu must be >= 0")


@dataclass(frozen=True, slots=True)
class CpuCurve:
    """Observed per-GPU samples/s by CPUs per GPU, for one model and shape."""

    shape: Shape
    rates: Mapping[float, float]  # CPUs per GPU -> median samples/s per GPU
    mem_gb_per_gpu: float  # median memory per GPU of the points (the column it was seen at)
    newest_s: float


def curves(points: Iterable[ObservedPoint]) -> list[CpuCurve]:
    """The points grouped by shape, as curves (most CPU counts first, then newest, then shape)."""
    groups: dict[Shape, list[ObservedPoint]] = {}
    for p in points:
        groups.setdefault(p.shape, []).append(p)
    out = []
    for shape, group in groups.items():
        by_cpus: dict[float, list[float]] = {}
        for p in group:
            by_cpus.setdefault(round(p.cpus_per_gpu, 3), []).append(p.samples_per_s_per_gpu)
        out.append(
            CpuCurve(
                shape,
                {c: statistics.median(v) for c, v in sorted(by_cpus.items())},
                statistics.median(p.mem_gb_per_gpu for p in group),
                max(p.time_s for p in group),
            )
        )
    out.sort(key=lambda c: (-len(c.rates), -c.newest_s, repr(c.shape)))
    return out


def corrected_cpu_values(
    prior: Sequence[float], cpus: Sequence[float], observed: Mapping[float, float]
) -> list[float]:
    """W' at ``cpus`` (increasing) from the prior W there and observed rates (module docstring).

    ``observed`` maps CPU counts that are among ``cpus`` to absolute rates; it needs two.

    >>> corrected_cpu_values([0.5, 1.0, 2.0, 2.2], [1, 3, 9, 12], {3: 100.0, 9: 100.0})
    [0.5, 1.0, 1.0, 1.0]
    """
    if len(observed) < 2:
        raise ValueError("a curve correction needs rates at two CPU counts")
    at = {c: k for k, c in enumerate(cpus)}
    anchors = sorted(observed)
    c0 = anchors[0]
    base = prior[at[c0]]
    target = {c: base * observed[c] / observed[c0] for c in anchors}
    out = list(prior)
    top, previous = anchors[-1], anchors[-2]
    # Beyond the highest observation: the prior's further gain, times the share of its gain
    # the last observed stretch confirmed (at most all of it, at least none).
    share = min(1.0, max(0.0, _gain(prior[at[top]] - prior[at[previous]], target[top] - target[previous])))
    for k, c in enumerate(cpus):
        if c <= c0:
            continue
        if c in target:
            out[k] = target[c]
        elif c > top:
            out[k] = target[top] + (prior[k] - prior[at[top]]) * share
        else:
            a = max(x for x in anchors if x < c)
            b = min(x for x in anchors if x > c)
            out[k] = _between(prior, at, target, a, b, c)
    return out


def _gain(prior_step: float, observed_step: float) -> float:
    """The share of the prior's gain the observations show (1.0 where the prior is flat)."""
    if abs(prior_step) <= _EPS:
        return 1.0 if abs(observed_step) <= _EPS else 0.0
    return observed_step / prior_step


def _between(
    prior: Sequence[float],
    at: Mapping[float, int],
    target: Mapping[float, float],
    a: float,
    b: float,
    c: float,
) -> float:
    step = prior[at[b]] - prior[at[a]]
    if abs(step) <= _EPS:  # the prior is flat here: interpolate the observations linearly
        t = (c - a) / (b - a)
        return target[a] * (1 - t) + target[b] * t
    return target[a] + (prior[at[c]] - prior[at[a]]) * (target[b] - target[a]) / step


def refine_matrix(prior: SensitivityMatrix | None, curve: CpuCurve) -> SensitivityMatrix:
    """The matrix with its CPU axis corrected by ``curve`` (which has two CPU counts or more)."""
    if prior is None:
        cols: tuple[float, ...] = (curve.mem_gb_per_gpu,)
        rows = tuple(sorted(curve.rates))
        prior = SensitivityMatrix(rows, cols, tuple((1.0,) for _ in rows))
    rows = tuple(sorted(set(prior.cpus_per_gpu) | set(curve.rates)))
    cols = prior.mem_gb_per_gpu
    grid = [[prior.at(c, m) for m in cols] for c in rows]
    at_mem = [prior.at(c, curve.mem_gb_per_gpu) for c in rows]
    corrected = corrected_cpu_values(at_mem, rows, curve.rates)
    # A corrected value at or below zero (a rate that fell) keeps the curve positive: the
    # schedulers divide by W.
    factors = [max(w, _EPS) / p if p > 0 else 1.0 for w, p in zip(corrected, at_mem, strict=True)]
    values = tuple(tuple(max(v * f, _EPS) for v in row) for row, f in zip(grid, factors, strict=True))
    return SensitivityMatrix(rows, cols, values)


def refine_profile(profile: Profile, points: Iterable[ObservedPoint]) -> Profile:
    """``profile`` refined by the points (module docstring): a profiled ``optimistic`` curve
    takes the observed rates as points; any other prior, the best observed curve's ratios
    (the shape observed at the most CPU counts). Unchanged when nothing applies."""
    observed = curves(points)
    if profile.optimistic is not None:
        refined = _refine_optimistic(profile, profile.optimistic, observed)
        if refined is not None:
            return refined
    best = next((c for c in observed if len(c.rates) >= 2), None)
    if best is None:
        return profile
    return _observed(profile, refine_matrix(profile.sensitivity, best), best)


def _refine_optimistic(
    profile: Profile, block: OptimisticProfile, observed: list[CpuCurve]
) -> Profile | None:
    """The observed rates merged into the profile's measured CPU curve (:func:`merge_absolute`):
    of the first curve of the profiled job's GPU count, observed at whole CPUs per GPU and with
    memory enough for the cache to hold the whole data set (as the profile was measured)."""
    for curve in observed:
        if curve.shape.num_gpus != block.cache.gpus or block.cache.hit_fraction(curve.mem_gb_per_gpu) < 1:
            continue
        rates = {int(c): r for c, r in curve.rates.items() if c == int(c)}
        if rates:
            refined = block.with_curve(merge_absolute(block.cpu_samples_per_s, rates))
            return replace(_observed(profile, refined.matrix(), curve), optimistic=refined)
    return None


def merge_absolute(measured: Mapping[int, float], observed: Mapping[int, float]) -> dict[int, float]:
    """A measured CPU curve (absolute rates) with observed rates taking over (pure).

    The observed rates replace or add points; the curve stays non-decreasing through them
    (Synergy §3.1's curves saturate): a measured point below an observation is capped at
    its rate; above the highest observation the measured further gain counts in the share
    the observation confirmed of the measured gain up to it from the point below (between
    0 and 1), as :func:`corrected_cpu_values` does for ratios; with no point below it (an
    observation at the lowest count) the measured points above keep their ratios to it.

    >>> merge_absolute({1: 50.0, 2: 95.0, 4: 150.0, 8: 190.0}, {8: 150.0})
    {1: 50.0, 2: 95.0, 4: 150.0, 8: 150.0}
    >>> merge_absolute({1: 50.0, 2: 95.0, 4: 150.0, 8: 190.0}, {4: 100.0})
    {1: 50.0, 2: 95.0, 4: 100.0, 8: 103.63636363636364}
    >>> merge_absolute({1: 248.0, 2: 257.0}, {1: 186.0})
    {1: 186.0, 2: 192.75}
    """
    if not observed:
        return dict(measured)
    prior = cpu_curve(measured)
    top = max(observed)
    out: dict[int, float] = {}
    for c, rate in measured.items():
        if c in observed:
            continue
        above = [o for o in observed if o > c]
        out[c] = min(rate, *(observed[o] for o in above)) if above else rate
    out.update(observed)
    below = [c for c in out if c < top]
    base = max(below) if below else None
    if base is not None:
        share = min(1.0, max(0.0, _gain(prior(top) - out[base], observed[top] - out[base])))
        for c in [c for c in measured if c > top]:
            out[c] = observed[top] + (measured[c] - prior(top)) * share
    elif prior(top) > 0:
        # Observed only at (or below) the lowest measured count: nothing says how the gain
        # above changed, so the measured curve keeps its ratios and moves by the observed
        # level. Replacing that one point would make a job slowed by neighbours at few CPUs
        # look sensitive (the measured higher points untouched) and the next round would
        # give it CPUs it then turns out not to use, round after round.
        level = observed[top] / prior(top)
        for c in [c for c in measured if c > top]:
            out[c] = measured[c] * level
    return dict(sorted(out.items()))


def _observed(profile: Profile, matrix: SensitivityMatrix, curve: CpuCurve) -> Profile:
    before = profile.provenance.get("sensitivity", "built-in") if profile.sensitivity is not None else None
    kind = OBSERVED if before is None else before if before.endswith(OBSERVED) else f"{before}+{OBSERVED}"
    return replace(
        profile,
        sensitivity=matrix,
        provenance={**profile.provenance, "sensitivity": kind},
        sources=(*profile.sources, f"observed: {_describe(curve)}"),
    )


def refine_store(store: ProfileStore, points: Iterable[ObservedPoint]) -> ProfileStore:
    """``store`` where every model with observations answers with its refined profile and
    that carries the points (:meth:`ProfileStore.with_observations`); ``store`` itself when
    there are none."""
    points = tuple(points)
    if not points:
        return store
    by_model: dict[str, list[ObservedPoint]] = {}
    for p in points:
        by_model.setdefault(store.model_key(p.model), []).append(p)
    refined = []
    for model, group in sorted(by_model.items()):
        prior = store.resolve(model) if model in store else Profile(name=model)
        profile = refine_profile(prior, group)
        if profile is not prior:
            refined.append(profile)
    return (store.with_profiles(refined) if refined else store).with_observations(points)


def _describe(curve: CpuCurve) -> str:
    s = curve.shape
    points = ", ".join(f"{c:g}: {r:.4g}" for c, r in curve.rates.items())
    return f"{s.gpu_type} x{s.num_gpus}, samples/s per GPU by CPUs per GPU {{{points}}}"
