"""What ``mosaic profile`` runs, in which order, and what it skips (pure decisions).

A profile is three kinds of short real runs of one job:

``cpu``
    The job as submitted on ``C`` CPUs, memory at the most the profile allows (the dataset
    fully cached), for Synergy's CPU curve; which ``C`` next is the §3.1 search
    (:mod:`profiles.profiler.search`).
``plan``
    The job under one execution plan on ``ranks`` processes with ``threads`` CPU threads
    each: Rubick's sampled runs (§4.3, at least seven, three of them ZeRO-Offload where the
    job can run DeepSpeed), fitted into the performance model.
``solo`` / ``pair``
    A partner job alone, then both jobs at once on the same CPUs: the co-location slowdown
    of the two (each one's throughput together over alone).

:func:`next_run` is the whole schedule: given the request and the results so far, the
next run or ``None``. The runner (``slurm_plugin/profiler.py``) executes it and asks
again, so a resumed profile continues exactly where it stopped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.core.errors import ProfileError
from planner.core.execplan import ExecPlan, PlanError, plan_from_mapping, plan_to_mapping
from profiles.optimistic import DEFAULT_THRESHOLD
from profiles.profiler.search import check_cpu_counts, next_cpu_count

MIN_PLAN_SAMPLES = 7  # Rubick §4.3: seven parameters need at least seven sampled runs
OFFLOAD_SAMPLES = 3  # Rubick §4.3: three of the parameters involve ZeRO-Offload


@dataclass(frozen=True, slots=True)
class PlanSample:
    """One sampled configuration: ``ranks`` processes of ``threads`` CPU threads, one plan."""

    ranks: int
    threads: int
    plan: ExecPlan = field(default_factory=ExecPlan)

    @property
    def cpus(self) -> int:
        return self.ranks * self.threads

    @property
    def label(self) -> str:
        mapping = plan_to_mapping(self.plan)
        parts = [f"{k}={_short(v)}" for k, v in sorted(mapping.items())]
        return f"r{self.ranks}t{self.threads}" + (f"[{','.join(parts)}]" if parts else "[dp]")

    def to_json(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "threads": self.threads, "plan": plan_to_mapping(self.plan)}


def _short(value: object) -> str:
    return str(int(value)) if isinstance(value, bool) else str(value)


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run to make: its key (unique in the profile), kind and resources."""

    key: str
    kind: str  # "cpu" | "plan" | "solo" | "pair"
    cpus: int
    sample: PlanSample | None = None
    partner: str | None = None
    repeat: int = 1  # which measurement of the plan sample (``Request.repeat``)

    def describe(self) -> str:
        if self.kind == "cpu":
            return f"CPU search: {self.cpus} CPU(s)"
        if self.kind == "plan":
            assert self.sample is not None
            again = f" (measurement {self.repeat})" if self.repeat > 1 else ""
            return f"plan sample {self.sample.label}{again}"
        if self.kind == "solo":
            return f"partner {self.partner} alone on {self.cpus} CPU(s)"
        return f"together with {self.partner} on {self.cpus} CPU(s)"


@dataclass(frozen=True, slots=True)
class Request:
    """What the user asked to profile (everything a resumed profile must agree on)."""

    cpus: tuple[int, ...]
    threshold: float = DEFAULT_THRESHOLD
    plans: tuple[PlanSample, ...] = ()
    pairs: tuple[str, ...] = ()
    pair_cpus: int | None = None
    sweep: bool = False  # also every other count of ``cpus``, after the search (to check it)
    repeat: int = 1  # measurements of each plan sample (their median is fitted)

    def __post_init__(self) -> None:
        check_cpu_counts(self.cpus, "--cpus")
        if self.repeat < 1:
            raise ProfileError(f"--repeat must be at least 1, got {self.repeat}")
        if not 0 <= self.threshold < 1:
            raise ProfileError(f"--threshold must be in [0, 1), got {self.threshold}")
        if self.plans and len(self.plans) < MIN_PLAN_SAMPLES:
            raise ProfileError(
                f"--plans: {len(self.plans)} plan samples; Rubick's model has seven parameters and "
                f"needs at least {MIN_PLAN_SAMPLES} sampled runs (§4.3)"
            )
        labels = [s.label for s in self.plans]
        if len(set(labels)) != len(labels):
            raise ProfileError(f"--plans: a plan sample is repeated ({', '.join(labels)})")
        if len(set(self.pairs)) != len(self.pairs):
            raise ProfileError(f"--pairs: a partner is repeated ({', '.join(self.pairs)})")
        if self.pairs and (self.pair_cpus is None or self.pair_cpus < 1):
            raise ProfileError("--pairs needs the CPUs the pair runs on (a positive count)")

    def to_json(self) -> dict[str, Any]:
        doc = {
            "cpus": list(self.cpus),
            "threshold": self.threshold,
            "plans": [s.to_json() for s in self.plans],
            "pairs": list(self.pairs),
            "pair_cpus": self.pair_cpus,
            "sweep": self.sweep,
        }
        if self.repeat > 1:  # absent at 1: a state saved before the option resumes as it was
            doc["repeat"] = self.repeat
        return doc


def cpu_key(cpus: int) -> str:
    return f"cpu-{cpus}"


def sample_key(sample: PlanSample, repeat: int = 1) -> str:
    """The run key of a plan sample's ``repeat``-th measurement (the first keeps the plain key)."""
    return f"plan-{sample.label}" + (f"/{repeat}" if repeat > 1 else "")


def next_run(request: Request, done: Mapping[str, float]) -> RunSpec | None:
    """The next run of the profile, or ``None`` when every run is done.

    ``done`` maps the keys of finished runs to their throughput (samples/s). Order: the CPU
    search first (each point depends on the ones before), then the plan samples, then per
    partner its solo run and the pair.
    """
    cpu_measured = {c: done[cpu_key(c)] for c in request.cpus if cpu_key(c) in done}
    c = next_cpu_count(request.cpus, cpu_measured, request.threshold)
    if c is not None:
        return RunSpec(cpu_key(c), "cpu", c)
    for run in fixed_runs(request):
        if run.key not in done:
            return run
    return None


def fixed_runs(request: Request) -> list[RunSpec]:
    """The runs after the CPU search, which do not depend on any result: the rest of a sweep,
    plans, then pairs."""
    runs = [RunSpec(cpu_key(c), "cpu", c) for c in request.cpus] if request.sweep else []
    # Repeats go round the samples (all once, then all again), so a slow spell of a shared
    # machine falls on one measurement of several samples rather than on every measurement
    # of one; the fit takes each sample's median.
    runs += [
        RunSpec(sample_key(s, k), "plan", s.cpus, sample=s, repeat=k)
        for k in range(1, request.repeat + 1)
        for s in request.plans
    ]
    for partner in request.pairs:
        assert request.pair_cpus is not None
        cpus = request.pair_cpus
        if cpus not in request.cpus:  # the job's own throughput alone at the pair's CPUs
            runs.append(RunSpec(cpu_key(cpus), "cpu", cpus))
        runs.append(RunSpec(f"solo-{partner}-{cpus}", "solo", cpus, partner=partner))
        runs.append(RunSpec(f"pair-{partner}-{cpus}", "pair", cpus, partner=partner))
    unique: dict[str, RunSpec] = {}
    for run in runs:
        unique.setdefault(run.key, run)
    return list(unique.values())


def remaining(request: Request, done: Mapping[str, float]) -> list[str]:
    """What is still to run, described (the skipped list when a budget runs out)."""
    out = []
    cpu_measured = {c: done[cpu_key(c)] for c in request.cpus if cpu_key(c) in done}
    searching = next_cpu_count(request.cpus, cpu_measured, request.threshold)
    if searching is not None:
        unmeasured = [c for c in request.cpus if cpu_key(c) not in done]
        out.append(
            f"CPU search: {searching} CPU(s) next, then wherever throughput still changes "
            f"(unmeasured: {', '.join(map(str, unmeasured))})"
        )
    for run in fixed_runs(request):
        if run.key in done or (searching is not None and run.kind == "cpu" and run.cpus in request.cpus):
            continue  # a count of the search's list is in the line above
        out.append(f"{run.key}: {run.describe()}")
    return out


# -- plan samples ----------------------------------------------------------------------


def default_plan_samples(max_cpus: int, offload: bool) -> tuple[PlanSample, ...]:
    """Seven sampled configurations within ``max_cpus`` CPUs (Rubick §4.3).

    With ``offload`` (a DeepSpeed job): plain data parallelism, ZeRO-2 and three
    ZeRO-Offload runs (Rubick's three offload parameters need them), over 1 and 2 ranks and
    1 and 2 threads (the threads matter to the offloaded optimizer step), two of them with
    gradient accumulation 4 (the CPU step model's per-micro-step cost is told from its
    per-sample cost only by accumulation). Without (a torch job): data parallelism on 1 and
    2 ranks of one thread and 1 rank of two, with gradient accumulation of 1, 4 and 8 steps.
    Activation checkpointing is not among the defaults: a script that does not implement it
    would run plain data parallelism under that label, and the model would be fitted to a
    recompute that never happened; ``--plans JSON`` samples it where the job does it.
    """
    if max_cpus < 1:
        raise ProfileError(f"plan samples need at least one CPU, got {max_cpus}")
    dp = ExecPlan()
    if offload:
        zero2 = ExecPlan(zero_stage=2)
        off = ExecPlan(zero_stage=2, offload_optimizer=True)
        wanted = [
            (1, 1, dp),
            (2, 1, ExecPlan(grad_accum=4)),
            (1, 1, zero2),
            (2, 1, zero2),
            (1, 1, ExecPlan(zero_stage=2, offload_optimizer=True, grad_accum=4)),
            (1, 2, off),
            (2, 1, off),
            (4, 1, off),
            (1, 4, off),
            (1, 2, zero2),
        ]
    else:
        # Ranks, threads and accumulation each vary: the CPU step model's five parameters
        # (profiles.perfmodel.cpu_step) need all three (its thread width only from runs of
        # two threads, its per-micro-step cost only from accumulation).
        ga = {k: ExecPlan(grad_accum=k) for k in (2, 4, 8)}
        wanted = [
            (1, 1, dp),
            (2, 1, dp),
            (1, 2, dp),
            (1, 1, ga[4]),
            (2, 1, ga[4]),
            (1, 2, ga[4]),
            (1, 1, ga[8]),
            (2, 1, ga[8]),
            (1, 1, ga[2]),
            (4, 1, dp),
        ]
    samples = [PlanSample(r, t, p) for r, t, p in wanted if r * t <= max_cpus][:MIN_PLAN_SAMPLES]
    if len(samples) < MIN_PLAN_SAMPLES:
        raise ProfileError(
            f"only {len(samples)} default plan samples fit in {max_cpus} CPU(s); Rubick's fit needs "
            f"{MIN_PLAN_SAMPLES}: give more CPUs (--cpus) or the samples (--plans JSON)"
        )
    return tuple(samples)


def parse_plan_samples(text: str, where: str = "--plans") -> tuple[PlanSample, ...]:
    """``[{"ranks": 2, "threads": 1, "plan": {"zero_stage": 2}}, ...]`` (JSON) into samples."""
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ProfileError(f"{where}: not JSON: {e}") from None
    if not isinstance(raw, list):
        raise ProfileError(f"{where}: expected a JSON list of plan samples, got {type(raw).__name__}")
    return tuple(plan_sample(item, f"{where}[{i}]") for i, item in enumerate(raw))


def plan_sample(raw: Any, where: str) -> PlanSample:
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: expected an object with ranks, threads and plan, got {raw!r}")
    unknown = sorted(set(raw) - {"ranks", "threads", "plan"})
    if unknown:
        raise ProfileError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: ranks, threads, plan")
    values = []
    for key in ("ranks", "threads"):
        value = raw.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProfileError(f"{where}: {key} must be an integer >= 1, got {value!r}")
        values.append(value)
    plan = raw.get("plan") or {}
    if not isinstance(plan, dict):
        raise ProfileError(f"{where}: plan must be an execution-plan object, got {plan!r}")
    try:
        parsed = plan_from_mapping(plan, f"{where}.plan")
    except PlanError as e:  # names the rule
        raise ProfileError(str(e)) from None
    if parsed.tp != 1 or parsed.pp != 1:
        raise ProfileError(f"{where}.plan: the profiler samples data-parallel plans only (tp = pp = 1)")
    return PlanSample(values[0], values[1], parsed)


def check_samples_fit(samples: Sequence[PlanSample], global_batch: int | None) -> None:
    """Each sample's batch split must multiply out (dp x micro-batch x accumulation)."""
    if global_batch is None:
        raise ProfileError(
            "plan samples need the job's global batch (#MOSAIC --global-batch-size, or --global-batch)"
        )
    for s in samples:
        accum = s.plan.grad_accum or 1
        if global_batch % (s.ranks * accum):
            raise ProfileError(
                f"plan sample {s.label}: global batch {global_batch} does not split over "
                f"{s.ranks} rank(s) x {accum} accumulation step(s)"
            )
