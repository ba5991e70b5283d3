"""A mixed workload: the trace sources Mosaic has, composed, on a cluster of several GPU types.

What the ``mosaic`` scheduler is for is a cluster where every paper's kind of job runs at once.
Each job of the mix is drawn from one source, by the class proportions:

* ``elastic``: Crius's jobs (:func:`planner.traces.crius.random_types` on Synergy's run
  times), accepting half to twice their GPUs on Crius's types (:func:`planner.traces.crius.elastic`)
  that the mixed cluster has: a job drawn on Crius's A10, which the cluster lacks, is the same
  job (model, batch, GPUs, iterations) on an A40, the same generation with twice the memory,
  its run time the iterations at Crius's measured A40 iteration time;
* ``cpu``: Synergy's CPU-sensitive single-GPU jobs (:func:`.generators.synergy_trace`);
* ``small``: small rigid jobs of Gavel's job types on 1 or 2 GPUs, the jobs GPU sharing and
  packing are for (:func:`.generators.shockwave_trace` with Gavel's models, at most 4 h);
* ``plan``: Rubick's jobs with execution plans, elastic in count on A800s (rows of the bundled
  Rubick workloads, given by the caller: the planner reads no files).

Arrivals are one Poisson process over the whole mix; run times above ``max_duration_s`` are
capped (iterations scaled with them). Every job gets a tenant: ``prod`` (with ``guaranteed``
jobs, ``guaranteed_fraction`` of its jobs), ``research`` and ``dev``, whose quotas
:func:`mix_tenants` gives. With ``time_limits``, every job declares a Slurm time limit of 1.2
to 3 times its run time rounded up to the minute (users ask for more than they need).
Deterministic for a seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import numpy as np

from planner.core.errors import ConfigError, TraceError
from planner.traces.crius import elastic, iteration_time, random_types, split_model
from planner.traces.generators import shockwave_trace, synergy_trace
from planner.traces.records import TraceJob
from profiles.perfmodel.crius import CriusTable, builtin_crius

CLASSES = ("elastic", "cpu", "small", "plan")
DEFAULT_MIX: Mapping[str, float] = MappingProxyType({"elastic": 30, "cpu": 30, "small": 20, "plan": 20})
TENANTS = ("prod", "research", "dev")
RUBICK_TYPE = "a800"
# GPUs per 32: (type, GPUs per server, servers, CPUs per server, memory GB per server)
_UNIT = (
    (RUBICK_TYPE, 8, 1, 96, 1024.0),
    ("a100", 4, 2, 48, 512.0),
    ("v100", 8, 1, 48, 512.0),
    ("a40", 2, 4, 24, 256.0),
)
CLUSTER_TYPES = tuple(gpu_type for gpu_type, *_ in _UNIT)
# A Crius type the cluster lacks runs on the first of these with a measured time (A10 -> A40).
STAND_INS = ("a40", "a100", "v100")


@dataclass(frozen=True)
class MixOptions:
    jobs: int = 200
    jobs_per_hour: float = 20.0
    mix: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    max_duration_s: float | None = 8 * 3600.0
    guaranteed_fraction: float = 0.3
    time_limits: bool = True
    gpus: int = 64
    seed: int = 0

    def check(self) -> None:
        if self.jobs < 1:
            raise ConfigError(f"jobs must be >= 1, got {self.jobs}")
        if self.jobs_per_hour <= 0:
            raise ConfigError(f"rate must be > 0 jobs per hour, got {self.jobs_per_hour}")
        unknown = set(self.mix) - set(CLASSES)
        if unknown:
            raise ConfigError(f"mix: unknown class {sorted(unknown)[0]!r}; classes: {', '.join(CLASSES)}")
        if any(v < 0 for v in self.mix.values()) or sum(self.mix.values()) <= 0:
            raise ConfigError(f"mix: proportions must be >= 0 and not all 0, got {dict(self.mix)}")
        if self.max_duration_s is not None and self.max_duration_s <= 0:
            raise ConfigError(f"max duration must be > 0 s, got {self.max_duration_s}")
        if not 0 <= self.guaranteed_fraction <= 1:
            raise ConfigError(f"guaranteed fraction must be in [0, 1], got {self.guaranteed_fraction}")
        if self.gpus < 32 or self.gpus % 32:
            raise ConfigError(f"gpus must be a multiple of 32 (the mixed cluster's unit), got {self.gpus}")


def parse_mix(text: str) -> dict[str, float]:
    """``elastic=30,cpu=30,small=20,plan=20`` (classes left out get 0)."""
    out: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in CLASSES:
            raise ConfigError(
                f"mix: expected CLASS=WEIGHT with a class of {', '.join(CLASSES)}, got {part!r}"
            )
        try:
            out[name] = float(value)
        except ValueError:
            raise ConfigError(f"mix: {name}'s weight must be a number, got {value!r}") from None
    return out


def mix_trace(options: MixOptions, plan_jobs: Sequence[TraceJob]) -> list[TraceJob]:
    """The mixed trace (module docstring); ``plan_jobs`` are the Rubick rows to draw from."""
    options.check()
    rng = np.random.default_rng(options.seed)
    names = [c for c in CLASSES if options.mix.get(c, 0) > 0]
    weights = np.array([options.mix[c] for c in names], dtype=float)
    picks = rng.choice(len(names), size=options.jobs, p=weights / weights.sum())
    gaps = rng.exponential(3600.0 / options.jobs_per_hour, size=options.jobs)
    gaps[0] = 0.0
    arrivals = np.cumsum(gaps)
    counts = {c: int((picks == k).sum()) for k, c in enumerate(names)}
    pools = {c: _source(c, counts[c], options.seed, plan_jobs, rng) for c in names if counts[c]}
    taken = dict.fromkeys(names, 0)
    fractions = rng.random(options.jobs)
    tenant_pick = rng.choice(len(TENANTS), size=options.jobs, p=[0.4, 0.4, 0.2])
    slack = rng.uniform(1.2, 3.0, size=options.jobs)
    jobs = []
    for i in range(options.jobs):
        cls = names[picks[i]]
        base = pools[cls][taken[cls]]
        taken[cls] += 1
        job = _capped(base, options.max_duration_s)
        tenant = TENANTS[tenant_pick[i]]
        limit = math.ceil(job.duration_s * slack[i] / 60.0) * 60.0 if options.time_limits else None
        jobs.append(
            replace(
                job,
                job_id=f"{cls}-{i}",
                submit_time_s=round(float(arrivals[i]), 3),
                tenant=tenant,
                guaranteed=tenant == "prod" and fractions[i] < options.guaranteed_fraction,
                deadline_s=None,
                time_limit_s=limit,
            )
        )
    return jobs


def _source(
    cls: str, n: int, seed: int, plan_jobs: Sequence[TraceJob], rng: np.random.Generator
) -> list[TraceJob]:
    if cls == "elastic":
        base = synergy_trace(n, jobs_per_hour=1.0, seed=seed + 1, multi_gpu=False)
        table = builtin_crius()
        return [
            _in_cluster(j, table) for j in elastic(random_types(base, seed=seed + 2, table=table), max_gpus=8)
        ]
    if cls == "cpu":
        return synergy_trace(n, jobs_per_hour=1.0, seed=seed + 3, multi_gpu=False)
    if cls == "small":
        jobs = shockwave_trace(n, seed=seed + 4, models="gavel", gpu_mix={1: 0.7, 2: 0.3})
        return [replace(j, duration_s=round(min(j.duration_s, 4 * 3600.0), 3)) for j in jobs]
    if not plan_jobs:
        raise ConfigError("mix: the 'plan' class needs Rubick's jobs to draw from")
    small = [j for j in plan_jobs if j.num_gpus <= 8 and (j.min_gpus or j.num_gpus) <= 8]
    rows = small or list(plan_jobs)
    picks = rng.integers(0, len(rows), size=n)
    return [_within_eight(rows[int(k)]) for k in picks]


def _in_cluster(job: TraceJob, table: CriusTable) -> TraceJob:
    """A Crius job on the mixed cluster's types only (module docstring)."""
    accepted = tuple(t for t in job.gpu_types if t in CLUSTER_TYPES)
    if job.gpu_type in CLUSTER_TYPES:
        return replace(job, gpu_types=accepted)
    shape = split_model(job.model)
    if shape is not None and job.batch_size is not None and job.iterations is not None:
        for gpu_type in STAND_INS:
            found = iteration_time(table, *shape, job.batch_size, gpu_type, job.num_gpus)
            if found is not None:
                duration = round(job.iterations * found.time_s, 3)
                return replace(job, gpu_type=gpu_type, gpu_types=accepted, duration_s=duration)
    # Never with the built-in table: every shape measured on an A10 was measured on an A40.
    raise TraceError(f"mix: job {job.job_id!r} ({job.model}) has no measured time on {', '.join(STAND_INS)}")


def _within_eight(job: TraceJob) -> TraceJob:
    """A Rubick job kept to one 8-GPU A800 server at most (the mixed cluster's)."""
    if job.max_gpus is not None and job.max_gpus > 8:
        return replace(job, max_gpus=max(8, job.num_gpus))
    return job


def _capped(job: TraceJob, cap: float | None) -> TraceJob:
    if cap is None or job.duration_s <= cap:
        return job
    iterations = job.iterations
    if iterations is not None:
        iterations = max(1, int(iterations * cap / job.duration_s))
    return replace(job, duration_s=round(cap, 3), iterations=iterations)


def mix_cluster(gpus: int) -> str:
    """The matching cluster TOML: per 32 GPUs one 8-GPU A800 server (Rubick's jobs), two 4-GPU
    A100s, one 8-GPU V100 and four 2-GPU A40s (Crius's types but the A10; every job of the mix fits)."""
    if gpus < 32 or gpus % 32:
        raise ConfigError(f"gpus must be a multiple of 32, got {gpus}")
    units = gpus // 32
    lines = [f"# Mosaic's mixed-workload cluster, {gpus} GPUs (`mosaic trace mix --cluster-out`).", ""]
    for gpu_type, per, servers, cpus, mem in _UNIT:
        lines += [
            "[[nodes]]",
            f"count = {servers * units}",
            f"gpus = {per}",
            f'gpu_type = "{gpu_type}"',
            f"cpus = {cpus}",
            f"mem_gb = {mem:g}",
            f'name_prefix = "{gpu_type}-"',
            "",
        ]
    return "\n".join(lines)


def mix_tenants(gpus: int) -> str:
    """The tenants' quotas for the mix (a config file's ``[[tenants]]``): ``prod`` a quarter of
    the GPUs for its guaranteed jobs; ``research`` and ``dev`` run best-effort."""
    quotas = {"prod": gpus // 4, "research": 0, "dev": 0}
    out = ["# Tenants of the mixed workload (`mosaic trace mix --config-out`).", ""]
    for name, quota in quotas.items():
        out += ["[[tenants]]", f'name = "{name}"', f"gpu_quota = {quota}", ""]
    return "\n".join(out)
