"""What a finished profile writes (pure): the profile document and the plan samples.

* the ``mosaic-profiles/1`` document (``profiles/README.md``) with one model: its
  ``optimistic`` block (the measured CPU curve ``cpu_samples_per_s`` and the cache model,
  Synergy §3.1), its ``colocation`` pairs, and ``"source": "profiled"``;
* the plan samples as rows of ``mosaic perfmodel``'s measurement CSV
  (``profiles/perfmodel/csvio.py``: ``gpus`` = ranks, ``cpus_per_gpu`` = threads per rank,
  ``iter_time_s`` = seconds per optimizer step), and Rubick's model fitted on them
  (``profiles/perfmodel/fit.py``), a ``mosaic-perfmodel/1`` document.

CPU runs measure per job, not per GPU: a CPU-only job counts as one GPU's worth, so the
curve's keys are the job's CPUs (``gpus`` 1 in the cache model).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner.core.errors import ProfileError
from profiles.document import FORMAT as PROFILES_FORMAT
from profiles.document import profiles_from_document
from profiles.perfmodel import cpu_step
from profiles.perfmodel.cpu_step import CpuStepModel, fit_cpu_step
from profiles.perfmodel.csvio import COLUMNS, format_table, parse_table
from profiles.perfmodel.document import to_document
from profiles.perfmodel.fit import PerfModel, fit_perfmodel
from profiles.perfmodel.query import ModelShape
from profiles.profiler.runs import PlanSample, Request, cpu_key, sample_key
from profiles.profiler.search import search_points
from profiles.profiler.state import RunResult

SOURCE = "profiled"
PLATEAU = 0.05  # ``ideal_cpus_per_gpu``: the fewest CPUs within 5 % of the best measured


@dataclass(frozen=True, slots=True)
class CacheSpec:
    """The job's data set and storage, for the analytic memory axis (Synergy §3.1)."""

    dataset_gb: float
    sample_kb: float
    storage_mb_per_s: float
    working_set_gb: float = 0.0
    reference: tuple[float, float] | None = None


def cpu_curve_points(request: Request, runs: Mapping[str, RunResult]) -> dict[int, float]:
    """Samples/s by CPU count at the points the search measured (every measured count for a sweep)."""
    measured = {c: runs[cpu_key(c)].samples_per_s for c in request.cpus if cpu_key(c) in runs}
    if request.sweep:
        return dict(sorted(measured.items()))
    return search_points(request.cpus, measured, request.threshold)


def profile_document(
    model: str,
    request: Request,
    runs: Mapping[str, RunResult],
    cache: CacheSpec,
    *,
    task: str | None = None,
    gpu_type: str = "cpu",
    partner_models: Mapping[str, str] | None = None,
    source: str | None = SOURCE,
) -> dict[str, Any]:
    """The ``mosaic-profiles/1`` document of the profile; checked by the reader before it is returned.

    ``source`` is the model's provenance: ``"profiled"``, optionally with a note after a
    colon (``profiles/README.md``).
    """
    points = cpu_curve_points(request, runs)
    if not points:
        raise ProfileError("the profile has no CPU measurement yet (the budget ran out before the first run)")
    optimistic: dict[str, Any] = {
        "cpu_samples_per_s": {str(c): round(v, 4) for c, v in sorted(points.items())},
        "dataset_gb": cache.dataset_gb,
        "sample_kb": cache.sample_kb,
        "storage_mb_per_s_per_gpu": cache.storage_mb_per_s,
        "gpus": 1,
    }
    if cache.working_set_gb:
        optimistic["working_set_gb_per_gpu"] = cache.working_set_gb
    if cache.reference is not None:
        optimistic["reference"] = list(cache.reference)
    best = max(points.values())
    entry: dict[str, Any] = {}
    if task:
        entry["task"] = task
    if source:
        entry["source"] = source
    batch = _samples_per_step(runs.values())
    if batch is not None:
        entry["batch_size"] = batch
    entry["optimistic"] = optimistic
    entry["ideal_cpus_per_gpu"] = min(c for c, v in points.items() if v >= (1 - PLATEAU) * best)
    pairs = []
    for partner in request.pairs:
        key = f"pair-{partner}-{request.pair_cpus}"
        if key in runs:
            r = runs[key]
            assert r.partner_steps_per_s is not None
            pairs.append(
                {
                    "with": (partner_models or {}).get(partner, partner),
                    "gpu_type": gpu_type,
                    "num_gpus": 1,
                    "steps_per_s": round(r.steps_per_s, 6),
                    "with_steps_per_s": round(r.partner_steps_per_s, 6),
                }
            )
    if pairs:
        entry["colocation"] = pairs
    document = {"format": PROFILES_FORMAT, "models": {model: entry}}
    profiles_from_document(document, f"profile of {model}")  # what we write, the reader accepts
    return document


def _samples_per_step(runs: Iterable[RunResult]) -> int | None:
    """The job's batch (samples per optimizer step) as its CPU runs measured it, when they agree."""
    ratios = {round(r.samples_per_s / r.steps_per_s) for r in runs if r.kind == "cpu" and r.steps_per_s > 0}
    return ratios.pop() if len(ratios) == 1 and min(ratios) >= 1 else None


def slowdowns(request: Request, runs: Mapping[str, RunResult]) -> dict[str, dict[str, float]]:
    """Per partner: each job's throughput together over alone (1.0 = no interference)."""
    out = {}
    cpus = request.pair_cpus
    for partner in request.pairs:
        pair = runs.get(f"pair-{partner}-{cpus}")
        own = runs.get(cpu_key(cpus or 0))
        solo = runs.get(f"solo-{partner}-{cpus}")
        if pair is None or own is None or solo is None or pair.partner_samples_per_s is None:
            continue
        out[partner] = {
            "self": pair.samples_per_s / own.samples_per_s,
            "partner": pair.partner_samples_per_s / solo.samples_per_s,
        }
    return out


def sample_times(sample: PlanSample, runs: Mapping[str, RunResult], repeat: int = 1) -> list[float]:
    """The seconds per optimizer step of each measurement of ``sample`` made so far."""
    found = (runs.get(sample_key(sample, k)) for k in range(1, repeat + 1))
    return [1.0 / r.steps_per_s for r in found if r is not None and r.steps_per_s > 0]


def repeat_spread(
    samples: Sequence[PlanSample], runs: Mapping[str, RunResult], repeat: int
) -> dict[str, float]:
    """Per sample measured more than once: (slowest - fastest) / median of its step times,
    how much one configuration's measurements disagree on this machine."""
    out = {}
    for s in samples:
        times = sample_times(s, runs, repeat)
        if len(times) > 1:
            out[s.label] = (max(times) - min(times)) / statistics.median(times)
    return out


def sample_rows(
    shape: ModelShape,
    samples: Sequence[PlanSample],
    runs: Mapping[str, RunResult],
    global_batch: int,
    repeat: int = 1,
) -> list[dict[str, str]]:
    """The measured plan samples as rows of the perfmodel CSV (columns of ``csvio.COLUMNS``),
    each at the median of its measurements (``repeat`` of them when all were made)."""
    rows = []
    for s in samples:
        times = sample_times(s, runs, repeat)
        if not times:
            continue
        plan = s.plan
        source = f"mosaic profile: plan-{s.label}"
        if len(times) > 1:
            source += f" (median of {len(times)} runs)"
        rows.append(
            {
                "model": shape.name,
                "params_m": f"{shape.params / 1e6:g}",
                "global_batch": str(global_batch),
                "seq_len": str(shape.seq_len),
                "hidden": str(shape.hidden),
                "layers": str(shape.layers),
                "nodes": "1",
                "gpus": str(s.ranks),
                "cpus_per_gpu": str(s.threads),
                "dp": str(s.ranks),
                "tp": "1",
                "pp": "1",
                "zero_stage": str(plan.zero_stage),
                "offload_optimizer": "1" if plan.offload_optimizer else "0",
                "grad_accum": str(plan.grad_accum or 1),
                "activation_checkpointing": "1" if plan.activation_checkpointing else "0",
                "iter_time_s": f"{statistics.median(times):.6g}",
                "source": source,
            }
        )
    return rows


def samples_csv(rows: Sequence[Mapping[str, str]]) -> str:
    return format_table(COLUMNS, rows)


def fit_samples(csv_text: str, source: str) -> tuple[PerfModel, dict[str, Any]]:
    """Rubick's model fitted on the profile's sample rows (read back through the CSV reader,
    so what is fitted is what the file says), and its ``mosaic-perfmodel/1`` document."""
    table = parse_table(csv_text, source, require_time=True)
    measurements = [row.measurement() for row in table.rows]
    model = fit_perfmodel(measurements)
    return model, to_document(model, samples=len(measurements))


def fit_cpu_samples(csv_text: str, source: str) -> tuple[CpuStepModel, dict[str, Any]]:
    """The CPU step model (:mod:`profiles.perfmodel.cpu_step`) fitted on the same rows: the
    profiler's runs are ranks of CPU threads, whose steps Rubick's GPU terms do not describe."""
    table = parse_table(csv_text, source, require_time=True)
    measurements = [row.measurement() for row in table.rows]
    model = fit_cpu_step(measurements)
    return model, cpu_step.to_document(model, samples=len(measurements))
