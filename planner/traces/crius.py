"""Crius's traces (EuroSys'26 §8.1) as Mosaic traces, and Philly jobs typed as Crius types them.

Crius's artifact (``sjtu-epcc/arena``, branch ``ae-eurosys``) ships two traces derived
from Helios Venus and Alibaba PAI, columns ``job_id, submission_time, num_iteration,
model_name, deadline, batch_size, num_gpu, gpu_type`` (times in Unix seconds, models as
``{family}__{params}``). :func:`parse_crius_trace` turns one row into one
:class:`TraceJob`:

* ``job_id`` as given; ``submit_time_s`` = ``submission_time`` minus the earliest one in
  the file; ``deadline_s`` = ``deadline`` on that same clock (the time by which the job
  should have finished; the artifact wrote ``submission + 1.5 x duration``);
* ``model`` = ``{family}_{params}`` (``moe__2.4B`` -> ``moe_2.4B``), ``batch_size`` = the
  global batch, ``num_gpus``/``gpu_type`` = the job's request, ``iterations`` =
  ``num_iteration``;
* ``duration_s`` = ``num_iteration`` x the best-plan iteration time of the model at that
  batch on ``num_gpus`` GPUs of ``gpu_type`` in the consolidated layout (fewest servers),
  from Crius's measurements (:mod:`profiles.perfmodel.crius`), as
  :func:`iteration_time` finds it.

:func:`iteration_time` answers as the artifact's own look-up does (``db_querier.py``,
``query_db(only_opt=True)``): the measured time of the consolidated layout; when that
shape was not measured, the same family, batch and layout at the next *larger* measured
parameter count, with the throughput multiplied by 1.8 per size step
(``PARAM_NUM_SCALE_FACTOR``), i.e. the time divided by 1.8**k. The first size found
decides: a shape that does not fit in memory there (``-1``) or whose iteration takes more
than a scheduling interval (300 s) has no time. A row without a time is dropped and
counted (:class:`Conversion`), never guessed otherwise.

:func:`random_types` assigns Philly jobs a model, global batch, GPU count and GPU type as
the artifact's ``traces/regenerate_sim_trace.py`` does for Crius's Philly trace (§8.1 "we
randomly generate the GPU amount and GPU type"), drawing again until the drawn shape has
an iteration time (above). The run time stays the Philly job's: ``iterations`` =
``round(duration_s / t)`` (at least 1) and ``duration_s`` = ``iterations x t``, ``t`` the
drawn shape's iteration time (the artifact derives Venus/PAI iterations from durations
this way; its Philly iterations came from ElasticFlow's Philly trace, which has per-job
iteration counts and batch sizes that the bundled Philly file does not have);
``deadline_s`` = submission + 1.5 x ``duration_s`` (the artifact's rule for Venus/PAI).

:func:`elastic` lets every job run on 1/2 to 2x its GPUs (at most 16, the largest count
measured) on any of the four types, the scaling range of Crius's Cells (§4).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from planner.core.errors import TraceError
from planner.traces.artifact_csv import artifact_rows
from planner.traces.records import TraceJob
from profiles.gpus import catalog
from profiles.perfmodel.crius import DEVICES, CriusTable, builtin_crius

ARTIFACT_COLUMNS = (
    "job_id",
    "submission_time",
    "num_iteration",
    "model_name",
    "deadline",
    "batch_size",
    "num_gpu",
    "gpu_type",
)

# resources/hardware_specs.py of the artifact: parameter counts and global batches per family
# (the larger counts, 13B/15B/39B/70B, were not measured: a draw of one is drawn again).
FAMILIES: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = {
    "wide_resnet": (("500M", "1B", "2B", "4B", "6.8B", "13B"), (256, 512, 1024)),
    "bert": (("760M", "1.3B", "2.6B", "6.7B", "15B", "39B"), (128, 256, 512)),
    "moe": (("690M", "1.3B", "2.4B", "10B", "27B", "70B"), (256, 512, 1024)),
}
GPU_TYPES = DEVICES
GPUS_PER_NODE = {t: n for t, n in catalog().gpus_per_node().items() if t in DEVICES}
GPU_COUNTS = (1, 2, 4, 8, 16)

# regenerate_sim_trace.py: cumulative weights of each draw, in its order.
MODEL_WEIGHTS = (15, 40, 100)  # wide_resnet 15 %, bert 25 %, moe 60 %
BATCH_WEIGHTS = (50, 60, 65)  # the family's first, second, third batch: 50/65, 10/65, 5/65
PARAMS_WEIGHTS = (10, 25, 50, 70, 85, 95)
COUNT_WEIGHTS = (10, 25, 45, 65, 80)  # capped at the size index + 2 (larger models, more GPUs)
TYPE_WEIGHTS = (15, 30, 60, 90)  # a100 15/90, v100 15/90, a40 30/90, a10 30/90

SIZE_STEP_SPEEDUP = 1.8  # PARAM_NUM_SCALE_FACTOR: throughput gained per smaller size step
MAX_ITERATION_S = 300.0  # SCHEDULING_INTERVAL: a longer iteration counts as infeasible
DEADLINE_RATIO = 1.5  # deadline = submission + 1.5 x duration
MAX_DRAWS = 10_000


@dataclass(frozen=True, slots=True)
class IterationTime:
    """A best-plan iteration time; ``measured_as`` is the model whose measurement it is
    (another one than asked when found ``size_steps`` sizes larger)."""

    time_s: float
    measured_as: str
    size_steps: int = 0


@dataclass(frozen=True, slots=True)
class Conversion:
    """A converted trace: the jobs kept, the rows dropped (job id, why) and the number of
    jobs whose time was found at a larger model size (:func:`iteration_time`)."""

    jobs: tuple[TraceJob, ...]
    dropped: tuple[tuple[str, str], ...] = ()
    estimated: int = 0


def split_model(name: str) -> tuple[str, str] | None:
    """``moe__2.4B`` / ``moe_2.4B`` -> ``("moe", "2.4B")``; ``None`` if not ``{family}_{params}``."""
    family, _, size = name.strip().replace("__", "_").rpartition("_")
    if not family or not size or size[-1:] not in ("M", "B"):
        return None
    try:
        float(size[:-1])
    except ValueError:
        return None
    return family, size


def consolidated_nodes(gpu_type: str, gpus: int) -> int:
    """Servers of the fewest-server layout of ``gpus`` GPUs of ``gpu_type``."""
    return max(1, math.ceil(gpus / GPUS_PER_NODE.get(gpu_type, gpus)))


def iteration_time(
    table: CriusTable, family: str, size: str, batch: int, gpu_type: str, gpus: int
) -> IterationTime | None:
    """The best-plan iteration time as the artifact looks it up (module docstring)."""
    sizes = FAMILIES.get(family, ((size,), ()))[0]
    start = sizes.index(size) if size in sizes else None
    candidates = [size] if start is None else list(sizes[start:])
    nodes = consolidated_nodes(gpu_type, gpus)
    for steps, candidate in enumerate(candidates):
        model = f"{family}_{candidate}"
        record = table.record(model, batch, gpu_type, gpus, nodes)
        if record is None or record.nodes != nodes:
            continue
        seconds = record.iter_time_s
        if seconds is None or not 0 < seconds <= MAX_ITERATION_S:
            return None
        return IterationTime(seconds / SIZE_STEP_SPEEDUP**steps, model, steps)
    return None


def parse_crius_trace(text: str, source: str = "crius trace", table: CriusTable | None = None) -> Conversion:
    """Convert one of the artifact's trace CSVs (module docstring), sorted by submission."""
    table = builtin_crius() if table is None else table
    rows: list[tuple[str, float, float, int, str, str, int, int, str]] = []
    seen: dict[str, int] = {}
    for c in artifact_rows(text, source, ARTIFACT_COLUMNS):
        job_id = c.text("job_id")
        if job_id in seen:
            raise c.fail("job_id", f"duplicate job id {job_id!r} (first on line {seen[job_id]})")
        seen[job_id] = c.line
        submit, deadline = c.number("submission_time"), c.number("deadline")
        if deadline <= submit:
            raise c.fail("deadline", f"{deadline:g} is not after the submission time {submit:g}")
        parts = split_model(c.text("model_name"))
        if parts is None:
            raise c.fail(
                "model_name", f"expected {{family}}__{{params}} like moe__2.4B, got {c.text('model_name')!r}"
            )
        gpu_type = c.text("gpu_type").lower()
        rows.append(
            (job_id, submit, deadline, c.integer("num_iteration"), *parts,
             c.integer("batch_size"), c.integer("num_gpu"), gpu_type)
        )  # fmt: skip
    if not rows:
        raise TraceError(f"{source}: no jobs after the header")
    t0 = min(r[1] for r in rows)
    jobs: list[TraceJob] = []
    dropped: list[tuple[str, str]] = []
    estimated = 0
    for job_id, submit, deadline, iterations, family, size, batch, gpus, gpu_type in rows:
        found = iteration_time(table, family, size, batch, gpu_type, gpus)
        model = f"{family}_{size}"
        if found is None:
            dropped.append((job_id, f"{model} at batch {batch} on {gpus} x {gpu_type}: no measured time"))
            continue
        estimated += found.size_steps > 0
        jobs.append(
            TraceJob(
                job_id=job_id,
                submit_time_s=round(submit - t0, 3),
                num_gpus=gpus,
                duration_s=round(iterations * found.time_s, 3),
                model=model,
                batch_size=batch,
                iterations=iterations,
                gpu_type=gpu_type,
                deadline_s=round(deadline - t0, 3),
            )
        )
    jobs.sort(key=lambda j: j.submit_time_s)  # stable: file order among equal times
    return Conversion(tuple(jobs), tuple(dropped), estimated)


def _pick(rng: random.Random, cumulative: Sequence[int], limit: int | None = None) -> int:
    """Index ``i`` with probability (cumulative[i] - cumulative[i-1]) / total, as the
    artifact draws: ``randint(0, total - 1)`` against the cumulative thresholds."""
    total = cumulative[-1] if limit is None else cumulative[limit]
    draw = rng.randint(0, total - 1)
    return next(i for i, threshold in enumerate(cumulative) if draw < threshold)


def draw_shape(rng: random.Random, table: CriusTable) -> tuple[str, str, int, int, str, IterationTime]:
    """One feasible (family, size, batch, GPUs, GPU type, iteration time), drawn as the
    artifact draws (model, batch, size, count, type; again until the shape has a time)."""
    families = list(FAMILIES)
    for _ in range(MAX_DRAWS):
        family = families[_pick(rng, MODEL_WEIGHTS)]
        sizes, batches = FAMILIES[family]
        batch = batches[_pick(rng, BATCH_WEIGHTS)]
        size_index = _pick(rng, PARAMS_WEIGHTS)
        gpus = GPU_COUNTS[_pick(rng, COUNT_WEIGHTS, min(len(COUNT_WEIGHTS) - 1, size_index + 2))]
        gpu_type = GPU_TYPES[_pick(rng, TYPE_WEIGHTS)]
        found = iteration_time(table, family, sizes[size_index], batch, gpu_type, gpus)
        if found is not None:
            return family, sizes[size_index], batch, gpus, gpu_type, found
    raise TraceError(f"no feasible Crius job shape in {MAX_DRAWS} draws: is the Crius table empty?")


def random_types(jobs: Iterable[TraceJob], seed: int = 0, table: CriusTable | None = None) -> list[TraceJob]:
    """Give each job a random Crius model, batch, GPU count and type (module docstring);
    its submission time and run time stay. Deterministic for a ``seed``."""
    table = builtin_crius() if table is None else table
    rng = random.Random(seed)
    out = []
    for job in jobs:
        family, size, batch, gpus, gpu_type, found = draw_shape(rng, table)
        iterations = max(1, round(job.duration_s / found.time_s))
        duration = round(iterations * found.time_s, 3)
        out.append(
            TraceJob(
                job_id=job.job_id,
                submit_time_s=job.submit_time_s,
                num_gpus=gpus,
                duration_s=duration,
                model=f"{family}_{size}",
                batch_size=batch,
                iterations=iterations,
                gpu_type=gpu_type,
                deadline_s=round(job.submit_time_s + DEADLINE_RATIO * duration, 3),
            )
        )
    return out


def elastic(jobs: Iterable[TraceJob], max_gpus: int = GPU_COUNTS[-1]) -> list[TraceJob]:
    """Every job may run on half to twice its GPU count (within 1..``max_gpus``) on any of
    Crius's four GPU types (the range of its Cells, §4); ``num_gpus``, ``gpu_type`` and the
    duration stay the request's."""
    return [
        replace(
            j,
            min_gpus=max(1, j.num_gpus // 2),
            max_gpus=max(j.num_gpus, min(max_gpus, 2 * j.num_gpus)),
            gpu_types=GPU_TYPES
            if j.gpu_type is None or j.gpu_type in GPU_TYPES
            else (*GPU_TYPES, j.gpu_type),
        )
        for j in jobs
    ]


def divide_iterations(jobs: Iterable[TraceJob], divisor: int) -> list[TraceJob]:
    """Each job runs ``iterations // divisor`` iterations (at least 1) and its duration
    shrinks alike; deadlines stay. Crius's simulator runs ``num_iteration // 5`` of its
    traces' iterations (``ITER_NUM_SCALE_FACTOR_SIM``): ``divisor=5`` reproduces that load."""
    if divisor < 1:
        raise TraceError(f"the iteration divisor must be >= 1, got {divisor}")
    out = []
    for j in jobs:
        if j.iterations is None:
            raise TraceError(f"job {j.job_id!r} has no iteration count to divide")
        iterations = max(1, j.iterations // divisor)
        out.append(
            replace(j, iterations=iterations, duration_s=round(j.duration_s * iterations / j.iterations, 3))
        )
    return out
