"""Iteration time of a data-parallel job, with gradient accumulation (SJF-BSBF §IV-A).

The model, per model and GPU type, fitted to measured throughputs:

* computation is linear in the per-GPU (micro-)batch ``b`` (Eq. 3):
  ``t_comp(b) = c0 + c1 * b``;
* all-reduce costs ``α + β·M`` (Eq. 2, 4). ``M`` (the gradient size) is fixed for a
  model, so ``β·M`` is one constant; ring all-reduce moves ``2(g-1)/g`` of it, and ``α``
  and ``β·M`` differ between GPUs of one server and GPUs across servers:
  ``t_ar(g, nodes) = a + m * 2(g-1)/g`` (0 for one GPU), with (a, m) intra- or inter-node;
* computation and communication overlap to a degree ``δ >= 1`` (Eq. 7, after Pollux
  [15]): one update with ``s`` accumulation steps of micro-batch ``b/s`` takes
  ``(s-1) * t_comp(b/s) + (t_comp(b/s)^δ + t_ar^δ)^(1/δ)``; only the last step
  communicates. ``s * (b/s) = b``: the user's batch, so convergence is unchanged (§IV-A4).

Gavel's isolated throughputs give steps/s summed over a job's workers (Tesserae §4.3:
k GPUs do k times the 1-GPU steps), so one worker's iteration takes ``g / steps_per_s``.
A model is fitted per (model, GPU type) by least squares on log times; a profile with
fewer than three measured points at one GPU type has no model there, and borrows the
slowdown fitted on another GPU type (v100, p100, k80); with none at all, gradient
accumulation is taken to cost nothing (the neutral profile's rule: no data, no effect).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from profiles.gpus import catalog
from profiles.schema import Profile

# The execution-plan keys mosaic-run renders (planner/core/execplan.py): per-worker batch of one
# forward/backward pass, and how many of them make one optimizer step.
MICRO_BATCH_KEY = "micro_batch"
ACCUM_STEPS_KEY = "grad_accum"
GA_KEYS = (MICRO_BATCH_KEY, ACCUM_STEPS_KEY)
_MIN_POINTS = 3


@dataclass(frozen=True, slots=True)
class IterationModel:
    """Fitted parameters of Eq. 3, 4 and 7 (seconds) for one model on one GPU type."""

    c0: float  # fixed compute per micro-step (kernel launches, optimizer bookkeeping)
    c1: float  # compute per sample
    a_intra: float  # all-reduce latency term inside one server
    m_intra: float  # all-reduce bandwidth term (β·M) inside one server
    a_inter: float  # the same across servers
    m_inter: float
    delta: float  # overlap degree: 1 = none (sum), large = full (max)

    def compute_s(self, micro_batch: float) -> float:
        """Eq. 3: forward and backward of one micro-batch on one GPU."""
        return self.c0 + self.c1 * micro_batch

    def allreduce_s(self, num_gpus: int, nodes: int = 1) -> float:
        """Eq. 4: one all-reduce of the gradients over ``num_gpus`` GPUs on ``nodes`` servers."""
        if num_gpus <= 1:
            return 0.0
        a, m = (self.a_intra, self.m_intra) if nodes <= 1 else (self.a_inter, self.m_inter)
        return a + m * 2.0 * (num_gpus - 1) / num_gpus

    def iteration_s(self, batch: float, num_gpus: int, nodes: int = 1, steps: int = 1) -> float:
        """Eq. 7: one parameter update of per-GPU ``batch`` in ``steps`` accumulation steps."""
        if steps < 1:
            raise ValueError(f"accumulation steps must be >= 1, got {steps}")
        comp = self.compute_s(batch / steps)
        comm = self.allreduce_s(num_gpus, nodes)
        d = self.delta
        last = comp if comm == 0.0 else (comp**d + comm**d) ** (1.0 / d)
        return (steps - 1) * comp + last

    def accumulation_slowdown(self, batch: float, num_gpus: int, nodes: int, steps: int) -> float:
        """Time per update with ``steps`` accumulation steps over time without (>= 1 in practice)."""
        return self.iteration_s(batch, num_gpus, nodes, steps) / self.iteration_s(batch, num_gpus, nodes)


@dataclass(frozen=True, slots=True)
class Sample:
    """One measured configuration: per-GPU batch, GPUs, one server or several, seconds per update."""

    batch: float
    num_gpus: int
    consolidated: bool
    iteration_s: float


def _unpack(p: np.ndarray) -> IterationModel:
    e = np.exp(p)
    return IterationModel(
        c0=float(e[0]),
        c1=float(e[1]),
        a_intra=float(e[2]),
        m_intra=float(e[3]),
        a_inter=float(e[4]),
        m_inter=float(e[5]),
        delta=1.0 + float(e[6]),
    )


def fit_iteration_model(samples: Sequence[Sample]) -> IterationModel:
    """Least-squares fit of Eq. 7 (one step) to measured iteration times, on log scale.

    Parameters are fitted as logarithms so they stay positive; the fit starts from the
    same point every time, so it is deterministic. Without multi-GPU samples the
    all-reduce terms stay at their (tiny) starting values.
    """
    if len(samples) < _MIN_POINTS:
        raise ValueError(f"need at least {_MIN_POINTS} samples to fit an iteration model, got {len(samples)}")
    batch = np.array([s.batch for s in samples], dtype=float)
    gpus = np.array([s.num_gpus for s in samples], dtype=float)
    spread = np.array([not s.consolidated for s in samples])
    target = np.log(np.array([s.iteration_s for s in samples], dtype=float))
    one = [s.iteration_s for s in samples if s.num_gpus == 1] or [s.iteration_s for s in samples]
    scale = min(one)
    ring = np.where(gpus > 1, 2.0 * (gpus - 1) / np.maximum(gpus, 1.0), 0.0)

    def residuals(p: np.ndarray) -> np.ndarray:
        c0, c1, ai, mi, ax, mx, d = np.exp(p)
        comp = c0 + c1 * batch
        a = np.where(spread, ax, ai)
        m = np.where(spread, mx, mi)
        comm = np.where(gpus > 1, a + m * ring, 0.0)
        delta = 1.0 + d
        t = (comp**delta + comm**delta) ** (1.0 / delta)
        result: np.ndarray = np.log(t) - target
        return result

    # Start: half the fastest 1-GPU time fixed, half per sample at the largest batch;
    # all-reduce a tenth of it inside a server, a fifth across; δ = 2.
    per_sample = scale / (2 * max(float(batch.max()), 1.0))
    start = np.log(np.array([scale / 2, per_sample, scale / 10, scale / 10, scale / 5, scale / 5, 1.0]))
    # Times between 1 ns and 3 h; δ - 1 in [1e-6, 20] (beyond that the max is reached).
    lower = np.log(np.array([1e-9] * 6 + [1e-6]))
    upper = np.log(np.array([1e4] * 6 + [20.0]))
    fit = least_squares(residuals, start, method="trf", bounds=(lower, upper))
    return _unpack(fit.x)


def samples_of(profile: Profile, gpu_type: str) -> list[Sample]:
    """The profile's measured iteration times on ``gpu_type`` (plans as submitted only)."""
    samples = []
    for key, steps_per_s in sorted(
        profile.throughput.items(), key=lambda kv: (kv[0].num_gpus, kv[0].batch_size or 0, kv[0].consolidated)
    ):
        if key.gpu_type != gpu_type or key.plan is not None or steps_per_s <= 0:
            continue
        batch = key.batch_size if key.batch_size is not None else profile.batch_size
        if batch is None:
            continue
        samples.append(Sample(float(batch), key.num_gpus, key.consolidated, key.num_gpus / steps_per_s))
    return samples


class IterationModels:
    """Fitted iteration models per (model profile, GPU type), memoised; ``None`` without data."""

    def __init__(self) -> None:
        self._memo: dict[tuple[str, str], IterationModel | None] = {}

    def model(self, profile: Profile, gpu_type: str) -> IterationModel | None:
        key = (profile.name, gpu_type)
        if key not in self._memo:
            samples = samples_of(profile, gpu_type)
            self._memo[key] = fit_iteration_model(samples) if len(samples) >= _MIN_POINTS else None
        return self._memo[key]

    def borrowed(self, profile: Profile, gpu_type: str) -> IterationModel | None:
        """The model on ``gpu_type``, else on another measured type (newest first): a type
        without measurements borrows the curve's shape, as the co-location estimates do
        (generations change absolute speed more than these ratios)."""
        for t in catalog().borrow_order(gpu_type):
            fitted = self.model(profile, t)
            if fitted is not None:
                return fitted
        return None

    def accumulation_slowdown(
        self, profile: Profile, gpu_type: str, batch: float | None, num_gpus: int, nodes: int, steps: int
    ) -> float:
        """How much longer an update takes with ``steps`` accumulation steps (1.0 without a model)."""
        if steps == 1 or batch is None:
            return 1.0
        fitted = self.borrowed(profile, gpu_type)
        return 1.0 if fitted is None else fitted.accumulation_slowdown(batch, num_gpus, nodes, steps)


# -- gradient accumulation in an execution plan ------------------------------------------


def accumulation_plan(batch: int, micro_batch: int, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``base`` plan with ``batch`` run as ``batch // micro_batch`` steps of ``micro_batch``.

    Raises ``ValueError`` unless ``micro_batch`` divides ``batch``: the product must be
    the user's batch exactly (§IV-A4).
    """
    if micro_batch < 1 or batch % micro_batch:
        raise ValueError(f"micro-batch {micro_batch} does not divide the batch {batch}")
    plan = {k: v for k, v in (base or {}).items() if k not in GA_KEYS}
    if micro_batch != batch:
        plan[MICRO_BATCH_KEY] = micro_batch
        plan[ACCUM_STEPS_KEY] = batch // micro_batch
    return plan


def accumulation_of(plan: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """(micro-batch, steps) of a plan that accumulates gradients, else ``None``."""
    if not plan or ACCUM_STEPS_KEY not in plan:
        return None
    return int(plan[MICRO_BATCH_KEY]), int(plan[ACCUM_STEPS_KEY])


def without_accumulation(plan: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The plan minus its accumulation keys (``None`` when nothing else is left)."""
    if not plan:
        return plan
    rest = {k: v for k, v in plan.items() if k not in GA_KEYS}
    return rest or None


def micro_batches(batch: int) -> list[int]:
    """Candidate micro-batches of ``batch``, largest first: ``batch / 2^k`` while whole (Algorithm 2).

    For a power-of-two batch these are all powers of two in [1, batch], the paper's
    search range; otherwise accumulation steps stay powers of two so the product is exact.
    """
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    out = [batch]
    while out[-1] % 2 == 0:
        out.append(out[-1] // 2)
    return out


__all__ = [
    "ACCUM_STEPS_KEY",
    "MICRO_BATCH_KEY",
    "IterationModel",
    "IterationModels",
    "Sample",
    "accumulation_of",
    "accumulation_plan",
    "fit_iteration_model",
    "micro_batches",
    "samples_of",
    "without_accumulation",
]
