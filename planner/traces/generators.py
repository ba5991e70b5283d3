"""Seeded workload generators matching the papers' trace descriptions.

All generators take a ``seed`` and draw from one ``numpy.random.Generator``, so the
same arguments always give the same trace. Arrivals are a Poisson process at
``jobs_per_hour`` (the first job at t=0), or all at t=0 when ``static`` is set.
Times are rounded to milliseconds so that a trace written to CSV and read back is
identical.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.core.errors import ConfigError
from planner.traces.records import TraceJob

# -- the real Philly GPU-demand distribution ----------------------------------------------
# GPU counts of all 15,264 jobs of the Philly-derived trace bundled with Mosaic
# (planner/sim/bundled/philly_derived_gavel_msr_all.csv.gz, from the Gavel repository's
# MSR traces; see that folder's README). tests/planner/test_traces.py recomputes this
# table from the bundled file, so the two cannot drift apart.
PHILLY_GPU_COUNTS: dict[int, int] = {
    1: 10480, 2: 463, 4: 2044, 7: 2, 8: 1916, 12: 6, 16: 255, 20: 1, 24: 5, 32: 91, 64: 1,
}  # fmt: skip

# -- Synergy (§5.1 "Models", Table 4; "Traces") ------------------------------------------
SYNERGY_MODELS_BY_TASK: dict[str, tuple[str, ...]] = {
    "image": ("shufflenet", "alexnet", "resnet18", "mobilenet", "resnet50"),
    "language": ("gnmt", "lstm", "transformer"),
    "speech": ("m5", "deepspeech"),
}

# -- Tesserae Table 1 models with their batch-size ranges --------------------------------
TESSERAE_MODELS: dict[str, tuple[int, ...]] = {
    "resnet50": (32, 64, 128, 256),
    "vgg19": (16, 32, 64, 128),
    "dcgan": (128, 256, 512, 1024),
    "pointnet": (32, 64, 128, 256),
    "gpt3-medium": (512,),
    "gpt3-xl": (512,),
    "gpt3-3b": (512,),
}

# -- Gavel's job types: model and batch size (its simulation_throughputs.json keys) -----
GAVEL_JOB_TYPES: tuple[tuple[str, int | None], ...] = (
    *(("resnet18", b) for b in (16, 32, 64, 128, 256)),
    *(("resnet50", b) for b in (16, 32, 64, 128)),
    *(("transformer", b) for b in (16, 32, 64, 128, 256)),
    *(("lm", b) for b in (5, 10, 20, 40, 80)),
    *(("recommendation", b) for b in (512, 1024, 2048, 4096, 8192)),
    ("a3c", None),
    ("cyclegan", None),
)


@dataclass(frozen=True)
class SizeClass:
    """A Shockwave-style job size class: probability and total GPU-hours range."""

    name: str
    probability: float
    gpu_hours: tuple[float, float]


# Tesserae §6.1 follows Shockwave: Small/Medium/Large/XL with probability
# 0.72/0.2/0.05/0.03. The text does not print the classes' sizes; we use the
# GPU-hour bands these four classes carry in the Pollux/Shockwave workload family
# (0-1, 1-10, 10-100, 100-1000 GPU-hours), drawn log-uniformly inside a band
# (the lower edge of Small is 0.1 GPU-hours). Override with ``size_classes``.
SHOCKWAVE_SIZE_CLASSES: tuple[SizeClass, ...] = (
    SizeClass("small", 0.72, (0.1, 1.0)),
    SizeClass("medium", 0.20, (1.0, 10.0)),
    SizeClass("large", 0.05, (10.0, 100.0)),
    SizeClass("xlarge", 0.03, (100.0, 1000.0)),
)
SHOCKWAVE_GPU_MIX: dict[int, float] = {1: 0.6, 2: 0.3, 4: 0.09, 8: 0.01}
GAVEL_GPU_MIX: dict[int, float] = {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05}


def _arrivals(rng: np.random.Generator, n: int, jobs_per_hour: float, static: bool) -> np.ndarray:
    if static:
        return np.zeros(n)
    if jobs_per_hour <= 0:
        raise ConfigError(f"jobs_per_hour must be > 0 for a dynamic trace, got {jobs_per_hour}")
    gaps = rng.exponential(3600.0 / jobs_per_hour, size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def _choice(rng: np.random.Generator, table: dict[int, float] | dict[int, int], n: int) -> np.ndarray:
    values = np.array(list(table), dtype=int)
    weights = np.array(list(table.values()), dtype=float)
    return rng.choice(values, size=n, p=weights / weights.sum())


def _gavel_duration_s(rng: np.random.Generator, n: int) -> np.ndarray:
    """10^x minutes, x ~ U[1.5, 3] w.p. 0.8 else U[3, 4] (Gavel; Synergy §5.1 "Duration")."""
    short = rng.random(n) < 0.8
    exponent = np.where(short, rng.uniform(1.5, 3.0, n), rng.uniform(3.0, 4.0, n))
    return 60.0 * np.power(10.0, exponent)


def _ms(x: float) -> float:
    return round(float(x), 3)


def synergy_trace(
    n_jobs: int,
    *,
    jobs_per_hour: float,
    seed: int,
    split: Sequence[float] = (20, 70, 10),
    multi_gpu: bool = True,
    max_gpus: int = 16,
    static: bool = False,
) -> list[TraceJob]:
    """Synergy's Philly-derived trace (Synergy §5.1 "Traces").

    GPU demand follows the real Philly distribution (capped at ``max_gpus``; all 1 when
    ``multi_gpu`` is false), durations are 10^x minutes (x ~ U[1.5,3] w.p. 0.8, else
    U[3,4]), and the model is drawn from Synergy's Table 4 by the workload ``split``
    (image, language, speech percentages).
    """
    if len(split) != 3 or any(s < 0 for s in split) or sum(split) <= 0:
        raise ConfigError(f"split must be three non-negative weights (image,language,speech), got {split}")
    rng = np.random.default_rng(seed)
    arrivals = _arrivals(rng, n_jobs, jobs_per_hour, static)
    durations = _gavel_duration_s(rng, n_jobs)
    gpu_table = {g: c for g, c in PHILLY_GPU_COUNTS.items() if g <= max_gpus}
    if not gpu_table:
        raise ConfigError(f"max_gpus={max_gpus} leaves no GPU count of the Philly distribution")
    gpus = _choice(rng, gpu_table, n_jobs) if multi_gpu else np.ones(n_jobs, dtype=int)
    tasks = ("image", "language", "speech")
    weights = np.array(split, dtype=float)
    task_idx = rng.choice(3, size=n_jobs, p=weights / weights.sum())
    model_pick = rng.random(n_jobs)
    jobs = []
    for i in range(n_jobs):
        models = SYNERGY_MODELS_BY_TASK[tasks[task_idx[i]]]
        model = models[min(int(model_pick[i] * len(models)), len(models) - 1)]
        jobs.append(TraceJob(str(i), _ms(arrivals[i]), int(gpus[i]), _ms(durations[i]), model))
    return jobs


def shockwave_trace(
    n_jobs: int,
    *,
    jobs_per_hour: float = 80.0,
    seed: int,
    static: bool = False,
    size_classes: Sequence[SizeClass] = SHOCKWAVE_SIZE_CLASSES,
    gpu_mix: dict[int, float] | None = None,
    models: str = "tesserae",
) -> list[TraceJob]:
    """Tesserae's default, Shockwave-style trace (Tesserae §6.1 "Traces").

    Size class Small/Medium/Large/XL w.p. 0.72/0.2/0.05/0.03, GPU count 1/2/4/8 w.p.
    0.6/0.3/0.09/0.01, 80 jobs/hour. A job's duration is its class's GPU-hours divided
    by its GPU count. ``models="tesserae"`` draws models and batch sizes from
    Tesserae's Table 1; ``models="gavel"`` from Gavel's 26 job types (the workload
    Shockwave itself inherits from Gavel, and the one with measured co-location data).
    """
    if models not in ("tesserae", "gavel"):
        raise ConfigError(f"models must be 'tesserae' or 'gavel', got {models!r}")
    rng = np.random.default_rng(seed)
    arrivals = _arrivals(rng, n_jobs, jobs_per_hour, static)
    gpus = _choice(rng, gpu_mix or SHOCKWAVE_GPU_MIX, n_jobs)
    probs = np.array([c.probability for c in size_classes], dtype=float)
    classes = rng.choice(len(size_classes), size=n_jobs, p=probs / probs.sum())
    u = rng.random(n_jobs)
    model_names = list(TESSERAE_MODELS)
    model_idx = rng.integers(0, len(model_names), n_jobs)
    batch_pick = rng.random(n_jobs)
    gavel_types = rng.integers(0, len(GAVEL_JOB_TYPES), n_jobs)
    jobs = []
    for i in range(n_jobs):
        low, high = size_classes[classes[i]].gpu_hours
        gpu_hours = math.exp(math.log(low) + u[i] * (math.log(high) - math.log(low)))
        batch: int | None
        if models == "gavel":
            model, batch = GAVEL_JOB_TYPES[gavel_types[i]]
        else:
            model = model_names[model_idx[i]]
            batches = TESSERAE_MODELS[model]
            batch = batches[min(int(batch_pick[i] * len(batches)), len(batches) - 1)]
        duration = gpu_hours * 3600.0 / int(gpus[i])
        jobs.append(TraceJob(str(i), _ms(arrivals[i]), int(gpus[i]), _ms(duration), model, batch_size=batch))
    return jobs


def gavel_trace(
    n_jobs: int,
    *,
    jobs_per_hour: float,
    seed: int,
    static: bool = False,
    gpu_mix: dict[int, float] | None = None,
) -> list[TraceJob]:
    """Gavel's generator as Tesserae §7 describes it.

    70% of jobs ask for 1 GPU, 10% for 2, 15% for 4 and 5% for 8; durations are
    10^x minutes (x ~ U[1.5,3] w.p. 0.8, else U[3,4]); the job type (model and batch
    size) is uniform over Gavel's 26 measured types.
    """
    rng = np.random.default_rng(seed)
    arrivals = _arrivals(rng, n_jobs, jobs_per_hour, static)
    durations = _gavel_duration_s(rng, n_jobs)
    gpus = _choice(rng, gpu_mix or GAVEL_GPU_MIX, n_jobs)
    types = rng.integers(0, len(GAVEL_JOB_TYPES), n_jobs)
    jobs = []
    for i in range(n_jobs):
        model, batch = GAVEL_JOB_TYPES[types[i]]
        jobs.append(
            TraceJob(str(i), _ms(arrivals[i]), int(gpus[i]), _ms(durations[i]), model, batch_size=batch)
        )
    return jobs
