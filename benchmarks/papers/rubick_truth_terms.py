"""Where Mosaic's simulator truth and Rubick's artifact simulator part, per configuration (issue 41).

For one of Rubick's seven models on A800s, Mosaic's simulator prices a job at a GPU count,
per-node spread and plan by :mod:`profiles.perfmodel.rubick_measured` (measured placement,
else the nearest measured placement of the same plan and count, else the fitted model
scaled at the nearest measured configuration) through :func:`profiles.speed.measured_factor`
(:mod:`planner.sim.progress`). The artifact of the Rubick paper
(``AlibabaPAI/reconfigurable-dl-scheduler``, commit 80e85248) prices it by
``Application.get_throughput`` in ``sched/applications.py`` over
``simulator/traces/<model>/placements.csv``; :mod:`profiles.perfmodel.rubick_artifact`
re-states that rule (own code, written from reading theirs).

This benchmark compares the two per configuration (``ratio``: Mosaic's lookup time over
the artifact's; they "differ" beyond 0.5 %): every submitted plan of the Base
workload's jobs at 1-32 GPUs packed 8 to a node, and every measured (plan, placement) of
the table; then runs Mosaic's simulator with the ``rubick`` preset on Base at the
artifact's settings (``benchmarks/papers/rubick_truth.py``'s: 60 s rounds, ``launch_s`` and
``relaunch_s`` 260) and weights each configuration by the GPU time the running jobs spend
in it; and reruns the same simulations with the artifact's rule as the truth
(``SimConfig(truth="rubick-artifact")``, ``mosaic sim --truth rubick-artifact``), which gives
the effect of this term on the average JCT directly.

Usage: ``.venv/bin/python -m benchmarks.papers.rubick_truth_terms [--artifact-git DIR]``; with
``--artifact-git`` (the bare git directory the ``fetch`` tool gives for the artifact) the
artifact's own ``placements.csv`` files are read with ``git show``, else the bundled
``profiles/builtin/data/rubick/placements_decoded.csv`` (the same rows, plan and placement
codes as the artifact writes them for the seven models).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "planner").is_dir())
sys.path.insert(0, str(ROOT))

from benchmarks.common import write_result  # noqa: E402
from planner.cluster import cluster_from_toml  # noqa: E402
from planner.config import PRESETS, build_scheduler  # noqa: E402
from planner.core.execplan import ExecPlan, PlanError, plan_from_mapping, resolve  # noqa: E402
from planner.sim import SimConfig  # noqa: E402
from planner.sim.engine import Simulator, _SimJob  # noqa: E402
from planner.sim.progress import SpeedModel  # noqa: E402
from planner.traces.csvio import parse_trace  # noqa: E402
from planner.traces.records import TraceJob  # noqa: E402
from profiles.perfmodel.rubick_artifact import (  # noqa: E402
    ArtifactTable,
    artifact_label,
    artifact_time,
    builtin_artifact_tables,
    parse_artifact_placements,
)
from profiles.perfmodel.rubick_measured import (  # noqa: E402
    MODELS,
    RubickMeasured,
    builtin_rubick_measured,
    packed,
)
from profiles.schema import plan_key  # noqa: E402
from profiles.speed import measured_factor  # noqa: E402
from profiles.store import ProfileStore  # noqa: E402

CLUSTER = ROOT / "etc" / "clusters" / "rubick-64.toml"
TRACE = ROOT / "planner" / "sim" / "bundled" / "rubick_base.csv"
COUNTS = (1, 2, 4, 8, 16, 32)
DIFFER = 0.005  # |Mosaic / artifact - 1| above this: the two truths differ there
ARTIFACT_JCT_H = 1.01  # the artifact's Morphling on workload-base.csv (benchmarks/papers/rubick_truth.py)


# -- the artifact's rule (profiles.perfmodel.rubick_artifact) ---------------------------------


def load_git(git_dir: str) -> dict[str, ArtifactTable]:
    """The artifact's own ``simulator/traces/<model>/placements.csv`` of the seven models."""
    tables = {}
    for model in MODELS:
        path = f"simulator/traces/{model}/placements.csv"
        text = subprocess.run(
            ["git", "--git-dir", git_dir, "show", f"HEAD:{path}"], check=True, capture_output=True, text=True
        ).stdout
        tables[model] = parse_artifact_placements(text, path)
    return tables


# -- Mosaic's truth ----------------------------------------------------------------------------


def resolved(job: TraceJob, plan: Mapping[str, Any] | None, gpus: int) -> ExecPlan | None:
    try:
        return resolve(plan_from_mapping(plan), gpus, job.batch_size)
    except PlanError:
        return None


def mosaic_time(
    measured: RubickMeasured,
    job: TraceJob,
    plan: Mapping[str, Any] | None,
    placement: Sequence[int],
    cpus_per_gpu: float | None,
) -> tuple[float, float, str] | None:
    """Mosaic's seconds per iteration of ``job`` there: the truth's lookup
    (:meth:`RubickMeasured.time_s`), the simulator's (the job's duration over its
    iterations, divided by the speed :func:`measured_factor` gives), and how the lookup
    found the time (``measured``, ``nearest``, ``scaled``, ``fitted``)."""
    found = measured.time_s(job.model, plan_from_mapping(plan), placement, job.batch_size, cpus_per_gpu)
    speed = measured_factor(
        measured,
        model=job.model,
        batch_size=job.batch_size,
        reference_gpus=job.num_gpus,
        reference_plan=job.plan,
        placement=placement,
        plan=plan,
        cpus_per_gpu=cpus_per_gpu,
    )
    if found is None or speed is None or not job.iterations:
        return None
    return found.time_s, job.duration_s / job.iterations / speed, found.how


# -- one configuration -------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    model: str
    placement: tuple[int, ...]  # GPUs per node, in node order
    plan: str | None  # plan_key of the plan mapping
    cpus_per_gpu: float | None


def compare(
    config: Config, job: TraceJob, measured: RubickMeasured, tables: Mapping[str, ArtifactTable]
) -> dict[str, Any]:
    mapping = None if config.plan is None else json.loads(config.plan)
    gpus = sum(config.placement)
    plan = resolved(job, mapping if mapping is not None else job.plan, gpus)
    row: dict[str, Any] = {
        "model": config.model,
        "gpus": gpus,
        "placement": "".join(map(str, config.placement)),
        "plan": mapping if mapping is not None else job.plan,
    }
    if plan is None:
        return {**row, "mosaic": None}
    label = artifact_label(plan)
    mine = mosaic_time(measured, job, mapping if mapping is not None else job.plan, config.placement,
                       config.cpus_per_gpu)  # fmt: skip
    theirs, how = artifact_time(tables[config.model], config.placement, label)
    row.update(label=label, artifact_s=theirs if math.isfinite(theirs) else None, artifact_how=how)
    if mine is None:
        return {**row, "mosaic": None}
    row.update(mosaic_s=mine[0], mosaic_sim_s=mine[1], mosaic_how=mine[2], mosaic="ok")
    row["ratio"] = mine[0] / theirs if math.isfinite(theirs) else None
    return row


def label_plan(model: str, label: str) -> dict[str, Any] | None:
    """A Mosaic plan mapping for one of the artifact's plan labels (``None``: not a label
    of the seven models); ZeRO-Offload with or without checkpointing as Mosaic's
    measurements decode it."""
    if label.isdigit() and len(label) == 3:
        return {"pp": int(label[0]), "tp": int(label[1])}
    if label not in ("ga", "gc", "zero-dp", "zero-offload"):
        return None
    zero, offload, checkpointing = RubickMeasured._features(model, label)
    mapping: dict[str, Any] = {}
    if zero:
        mapping["zero_stage"] = 2
    if offload:
        mapping["offload_optimizer"] = True
    if checkpointing:
        mapping["activation_checkpointing"] = True
    return mapping


def enumerate_configs(
    trace: Sequence[TraceJob], tables: Mapping[str, ArtifactTable]
) -> list[tuple[Config, TraceJob]]:
    """Each job's submitted plan at 1-32 GPUs packed 8 to a node; every measured row (its
    plan at its placement, in the artifact's node order); and every measured plan at 1-32
    GPUs packed; once per (model, placement, plan)."""
    out: dict[Config, TraceJob] = {}
    first: dict[str, TraceJob] = {}
    for job in trace:
        first.setdefault(job.model, job)
        for g in COUNTS:
            out.setdefault(Config(job.model, packed(g), plan_key(job.plan), None), job)
    for model, table in tables.items():
        if model not in first:
            continue
        plans = {}
        for row in table.rows:
            mapping = label_plan(model, row.plan)
            if mapping is not None:
                plans[plan_key(mapping)] = mapping
                out.setdefault(
                    Config(model, tuple(map(int, row.placement)), plan_key(mapping), None), first[model]
                )
        for key in plans:
            for g in COUNTS:
                out.setdefault(Config(model, packed(g), key, None), first[model])
    return list(out.items())


# -- the simulations ---------------------------------------------------------------------------


class Recorder(Simulator):
    """Mosaic's simulator that adds up, per configuration, the GPU time running jobs hold
    (``held``) and the part of it spent computing, after any launch or restart (``work``)."""

    def __init__(self, *args: Any, tables: Mapping[str, ArtifactTable] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spent: dict[Config, list[float]] = {}
        self.job_of: dict[Config, TraceJob] = {}
        if tables is not None and tables is not builtin_artifact_tables():  # the artifact's own files
            self.speed_model = SpeedModel(
                self.profiles,
                {n.name: n for n in self.nodes},
                interference=self.config.interference,
                reference_share=self.config.reference_share,
                truth=self.config.truth,
                artifact=tables,
            )

    def _run(self, running: list[_SimJob], t0: float, t1: float) -> list[_SimJob]:
        before = [(job, job.assignment, job.overhead_left_s) for job in running]
        done = super()._run(running, t0, t1)
        finished = {id(j) for j in done}
        dt = t1 - t0
        for job, a, overhead in before:
            assert a is not None
            held = (job.finish_time_s or t1) - t0 if id(job) in finished else dt
            work = max(0.0, held - min(overhead, dt))
            key = Config(job.trace.model, tuple(c for _, c in a.per_node), plan_key(a.plan or job.trace.plan),
                         round(a.cpus / a.num_gpus, 3))  # fmt: skip
            acc = self.spent.setdefault(key, [0.0, 0.0])
            acc[0] += a.num_gpus * held
            acc[1] += a.num_gpus * work
            self.job_of.setdefault(key, job.trace)
        return done


def simulate_rubick(
    trace: Sequence[TraceJob],
    launch_s: float,
    preemptive: bool | None,
    tables: Mapping[str, ArtifactTable] | None,
    restart_cost_s: float | None = None,
) -> tuple[Recorder, dict[str, Any]]:
    nodes = tuple(cluster_from_toml(CLUSTER.read_text()))
    profiles = ProfileStore.builtin()
    config = SimConfig(
        round_s=60.0,
        checkpoint_s=0.0,
        relaunch_s=260.0,
        launch_s=launch_s,
        truth="measured" if tables is None else "rubick-artifact",
    )
    scheduler = PRESETS["rubick"]
    if preemptive is not None:
        scheduler = replace(scheduler, preemptive=preemptive)
    if restart_cost_s is not None:  # Rubick's δ: what a restart costs in the simulation
        scheduler = replace(scheduler, restart_cost_s=restart_cost_s)
    started = time.perf_counter()
    sim = Recorder(
        nodes, trace, build_scheduler(scheduler, profiles), config, profiles=profiles, tables=tables
    )
    result = sim.run()
    s = result.summary
    jct: dict[str, list[float]] = {}
    for r in result.records:
        if r.finish_time_s is not None:
            jct.setdefault(r.model, []).append(r.finish_time_s - r.submit_time_s)
    return sim, {
        "launch_s": launch_s,
        "preemptive": preemptive,
        "restart_cost_s": restart_cost_s,
        "truth": "mosaic" if tables is None else "artifact",
        "avg_jct_h": s["avg_jct_s"] / 3600.0,
        "restarts": s["restarts"],
        "finished": s["finished"],
        "gpu_h": sum(held for held, _ in sim.spent.values()) / 3600.0,
        "work_gpu_h": sum(work for _, work in sim.spent.values()) / 3600.0,
        "avg_jct_h_by_model": {m: sum(v) / len(v) / 3600.0 for m, v in sorted(jct.items())},
        "wall_s": round(time.perf_counter() - started, 1),
    }


# -- summaries ---------------------------------------------------------------------------------


def ratio_stats(ratios: Iterable[float]) -> dict[str, Any]:
    r = sorted(ratios)
    if not r:
        return {"n": 0}
    return {"n": len(r), "median": statistics.median(r), "min": r[0], "max": r[-1]}


def per_model(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for model in MODELS:
        mine = [r for r in rows if r["model"] == model]
        if not mine:
            continue
        ok = [r for r in mine if r.get("mosaic") == "ok"]
        both = [r for r in ok if r["mosaic_how"] == "measured" and r["artifact_how"] == "measured"]
        kinds: dict[str, int] = {}
        for r in ok:
            k = f"{r['mosaic_how']}/{r['artifact_how']}"
            kinds[k] = kinds.get(k, 0) + 1
        differ = [r for r in ok if r["ratio"] is not None and abs(r["ratio"] - 1) > DIFFER]
        out[model] = {
            "configs": len(mine),
            "no_plan_or_no_time": len(mine) - len(ok),
            "mosaic_how/artifact_how": dict(sorted(kinds.items())),
            "both_measured": len(both),
            "both_measured_equal": sum(abs(r["mosaic_s"] - r["artifact_s"]) <= 1e-9 for r in both),
            "both_measured_max_rel_diff": max((abs(r["ratio"] - 1) for r in both), default=None),
            "ratio_mosaic_over_artifact": ratio_stats(r["ratio"] for r in ok if r["ratio"] is not None),
            "ratio_where_differ": ratio_stats(r["ratio"] for r in differ),
            "artifact_nan": sum(r["artifact_how"] == "outside" for r in ok),
        }
    return out


def weighted(sim: Recorder, measured: RubickMeasured, tables: Mapping[str, ArtifactTable]) -> dict[str, Any]:
    """GPU time per configuration the run spent, and the two truths there."""
    configs = []
    for key, (held, work) in sorted(sim.spent.items(), key=lambda kv: -kv[1][0]):
        row = compare(key, sim.job_of[key], measured, tables)
        configs.append({**row, "gpu_h": held / 3600.0, "work_gpu_h": work / 3600.0})
    ok = [c for c in configs if c.get("ratio") is not None]
    total = sum(c["gpu_h"] for c in configs)
    work = sum(c["work_gpu_h"] for c in configs)
    differ = [c for c in ok if abs(c["ratio"] - 1) > DIFFER]
    by_model: dict[str, Any] = {}
    for model in MODELS:
        m_ok = [c for c in ok if c["model"] == model]
        w = sum(c["work_gpu_h"] for c in m_ok)
        if not m_ok:
            continue
        by_model[model] = {
            "gpu_h": sum(c["gpu_h"] for c in configs if c["model"] == model),
            "work_gpu_h": sum(c["work_gpu_h"] for c in configs if c["model"] == model),
            "nan_work_gpu_h": sum(
                c["work_gpu_h"] for c in configs if c["model"] == model and c.get("artifact_how") == "outside"
            ),
            "differ_work_gpu_h": sum(c["work_gpu_h"] for c in differ if c["model"] == model),
            "ratio_where_differ": ratio_stats(c["ratio"] for c in differ if c["model"] == model),
            "work_weighted_ratio": sum(c["ratio"] * c["work_gpu_h"] for c in m_ok) / w if w else None,
        }
    w_ok = sum(c["work_gpu_h"] for c in ok)
    w_differ = sum(c["work_gpu_h"] for c in differ)
    return {
        "gpu_h": total,
        "work_gpu_h": work,
        "work_gpu_h_artifact_nan": sum(
            c["work_gpu_h"] for c in configs if c.get("artifact_how") == "outside"
        ),
        "work_gpu_h_differ": w_differ,
        "differ_share_of_work": w_differ / work if work else None,
        "work_weighted_ratio": sum(c["ratio"] * c["work_gpu_h"] for c in ok) / w_ok if w_ok else None,
        "work_weighted_ratio_where_differ": (
            sum(c["ratio"] * c["work_gpu_h"] for c in differ) / w_differ if w_differ else None
        ),
        "by_model": by_model,
        "configs": configs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact-git", help="the artifact's bare git directory (else the bundled file)")
    args = parser.parse_args()
    tables = load_git(args.artifact_git) if args.artifact_git else builtin_artifact_tables()
    trace = parse_trace(TRACE.read_text(), TRACE.name)
    measured = builtin_rubick_measured()

    # Mosaic's reference: a job's duration over its iterations is its submitted configuration's time.
    refs = []
    for job in trace:
        found = measured.time_s(job.model, plan_from_mapping(job.plan), packed(job.num_gpus), job.batch_size)
        if found is not None and job.iterations:
            refs.append(job.duration_s / job.iterations / found.time_s)
    reference = {"jobs": len(trace), "priced": len(refs), **ratio_stats(refs)}
    print("duration / iterations over Mosaic's time at the submitted configuration:", reference, flush=True)
    # A job alone at its submitted GPU count (packed) and plan: the artifact's time per
    # iteration over the trace's (duration / iterations), per model.
    alone: dict[str, list[float]] = {}
    for job in trace:
        plan = resolved(job, job.plan, job.num_gpus)
        if plan is None or not job.iterations:
            continue
        theirs, _ = artifact_time(tables[job.model], packed(job.num_gpus), artifact_label(plan))
        alone.setdefault(job.model, []).append(theirs / (job.duration_s / job.iterations))
    isolated = {
        m: {**ratio_stats(x for x in v if math.isfinite(x)), "nan": sum(not math.isfinite(x) for x in v)}
        for m, v in sorted(alone.items())
    }
    print("artifact's time alone over the trace's:", isolated, flush=True)

    rows = [compare(c, job, measured, tables) for c, job in enumerate_configs(trace, tables)]
    models = per_model(rows)
    for model, summary in models.items():
        print(model, {k: v for k, v in summary.items()}, flush=True)

    runs = []
    for launch_s, preemptive, cost in (
        (260.0, None, 260.0),
        (260.0, None, None),
        (260.0, False, None),
        (0.0, None, None),
    ):
        sim, mosaic_row = simulate_rubick(trace, launch_s, preemptive, None, cost)
        w = weighted(sim, measured, tables)
        _, artifact_row = simulate_rubick(trace, launch_s, preemptive, tables, cost)
        summary = {k: v for k, v in w.items() if k != "configs"}
        print(mosaic_row, artifact_row, summary, flush=True)
        runs.append({"mosaic_truth": mosaic_row, "artifact_truth": artifact_row, "weighted": w})

    write_result(
        "rubick_truth_terms",
        {
            "command": "python -m benchmarks.papers.rubick_truth_terms"
            + (f" --artifact-git {args.artifact_git}" if args.artifact_git else ""),
            "artifact_table": "git" if args.artifact_git else "bundled placements_decoded.csv",
            "artifact_avg_jct_h": ARTIFACT_JCT_H,
            "reference": reference,
            "isolated_artifact_over_trace": isolated,
            "per_model": models,
            "runs": runs,
            "configs": rows,
        },
    )


if __name__ == "__main__":
    main()
