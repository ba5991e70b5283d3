"""Mosaic's simulator at the settings of Rubick's artifact simulator (issue 41).

Runs `rubick` and `synergy-tune` on the Rubick Base workload with 60 s rounds, a 260 s
restart and no checkpoint cost, first as Mosaic charges restarts (a first start free),
then with the artifact's rule that every placement, the first included, costs 260 s
(``SimConfig.launch_s``); ``rubick`` also with the artifact's policy's δ and non-preemptive
(its Morphling keeps running jobs); and both on the artifact's own throughput rule as the
truth (``SimConfig.truth = "rubick-artifact"``, δ = 260). The artifact's own numbers (run
separately, outside the repo, with its ``simulator/simulator.py workload-base.csv --policy
morphling --interval 60``) are recorded beside them.

``synergy_tune_terms``: where ``synergy-tune``'s 1.97 h on Mosaic's truth becomes 2.23 h on
the artifact's, the same run with the artifact's rule applied only where a predicate holds
(Mosaic's truth elsewhere): every model but LLaMA-30B, LLaMA-30B only, only LLaMA-30B's
placements spread over more nodes than its GPUs need, single jobs; and, for the LLaMA-30B
jobs a spread placement changes, their start, placement and seconds per iteration by both
truths in the two full runs.
``same_gpus_other_shapings``: the presets that order and place GPUs as ``synergy-tune`` does
(first come, first served with backfilling, consolidated placement) with another CPU/memory
shaping, or none (``fifo``), on both truths, δ = 260, ``launch_s`` 260: the artifact's
simulator has no CPU or memory in a job's speed, so there Synergy's rules are its GPU rules
(``benchmarks/papers/rubick_artifact_synergy.py`` runs the artifact's own).
Usage: ``.venv/bin/python benchmarks/papers/rubick_truth.py``.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import write_result
from benchmarks.papers.rubick import CLUSTER, TRACES
from planner.cluster import cluster_from_toml
from planner.config import PRESETS, build_scheduler
from planner.core.model import Assignment, RoundPlan
from planner.sim import SimConfig, simulate
from planner.sim.engine import Simulator
from planner.sim.progress import Partner, SpeedModel
from planner.traces.csvio import parse_trace
from planner.traces.records import TraceJob
from profiles.store import ProfileStore

# Average JCT (h) of the artifact's simulator on workload-base.csv, 8x8 GPUs, 60 s interval,
# 260 s per placement (measured with its simulator.py; Synergy as given in issue 41).
ARTIFACT = {"rubick": 1.01, "synergy-tune": 1.90}
# Same GPU ordering and placement as synergy-tune, other (or no) CPU/memory shaping.
SAME_GPUS = ("fifo", "synergy-proportional", "synergy-greedy", "synergy-opt", "synergy-tune")


def run(
    preset: str,
    launch_s: float,
    policy_restart_s: float | None = None,
    preemptive: bool | None = None,
    truth: str = "measured",
) -> dict[str, Any]:
    nodes = tuple(cluster_from_toml(CLUSTER.read_text()))
    trace = parse_trace((TRACES / "rubick_base.csv").read_text(), "rubick_base.csv")
    profiles = ProfileStore.builtin()
    config = SimConfig(round_s=60.0, checkpoint_s=0.0, relaunch_s=260.0, launch_s=launch_s, truth=truth)
    started = time.perf_counter()
    scheduler = PRESETS[preset]
    if policy_restart_s is not None:  # Rubick's δ (ordering and allocation) = the simulator's restart
        scheduler = replace(scheduler, restart_cost_s=policy_restart_s)
    if preemptive is not None:  # the artifact's Morphling keeps running jobs where they are
        scheduler = replace(scheduler, preemptive=preemptive)
    result = simulate(nodes, trace, build_scheduler(scheduler, profiles), config, profiles=profiles)
    s = result.summary
    by_model: dict[str, list[tuple[float, float]]] = {}
    runs = []  # from the first start to the end
    for r in result.records:
        if r.finish_time_s is not None and r.start_time_s is not None:
            jct = r.finish_time_s - r.submit_time_s
            by_model.setdefault(r.model, []).append((jct, r.start_time_s - r.submit_time_s))
            runs.append(r.finish_time_s - r.start_time_s)
    row = {
        "preset": preset,
        "launch_s": launch_s,
        "policy_restart_s": policy_restart_s,
        "preemptive": preemptive,
        "truth": truth,
        "avg_jct_h": s["avg_jct_s"] / 3600.0,
        "avg_first_wait_h": s["avg_queue_s"] / 3600.0,
        "avg_run_h": sum(runs) / len(runs) / 3600.0,
        "makespan_h": s["makespan_s"] / 3600.0,
        "restarts": s["restarts"],
        "finished": s["finished"],
        "artifact_avg_jct_h": ARTIFACT.get(preset),
        # per model: average JCT and the wait before the first start, hours
        "by_model_h": {
            m: {
                "jct": sum(j for j, _ in v) / len(v) / 3600.0,
                "first_wait": sum(q for _, q in v) / len(v) / 3600.0,
            }
            for m, v in sorted(by_model.items())
        },
        "wall_s": time.perf_counter() - started,
    }
    print(row, flush=True)
    return row


# -- synergy-tune: which prices make the artifact's truth 0.25 h slower ----------------------

Where = Callable[[TraceJob, Sequence[int]], bool]  # (job, GPUs per node) -> the artifact prices it


class _ArtifactWhere(SpeedModel):
    """The ``rubick-artifact`` truth only where ``where`` holds; Mosaic's truth elsewhere."""

    def __init__(self, *args: Any, where: Where, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.where = where

    def speed(self, job: TraceJob, assignment: Assignment, partners: Sequence[Partner] = ()) -> float:
        self._memo.clear()  # its key has no job id, and ``where`` may name jobs
        return super().speed(job, assignment, partners)

    def artifact_time_s(self, job: TraceJob, assignment: Assignment) -> float | None:
        if not self.where(job, [count for _, count in assignment.per_node]):
            return None
        return super().artifact_time_s(job, assignment)


def spread(placement: Sequence[int]) -> bool:
    """Over more nodes than its GPUs need (8 GPUs a node, as on rubick-64)."""
    return len(placement) > math.ceil(sum(placement) / 8)


# (label, where the artifact's rule prices a job; None: everywhere)
TERMS: tuple[tuple[str, Where | None], ...] = (
    ("everywhere", None),
    ("every model but llama30", lambda j, p: j.model != "llama30"),
    ("llama30 only", lambda j, p: j.model == "llama30"),
    ("everywhere but llama30's spread placements", lambda j, p: not (j.model == "llama30" and spread(p))),
    ("llama30's spread placements only", lambda j, p: j.model == "llama30" and spread(p)),
    ("llama30-85 only", lambda j, p: j.job_id == "llama30-85"),
    ("llama30-85 and llama30-87 only", lambda j, p: j.job_id in ("llama30-85", "llama30-87")),
    ("everywhere but llama30-87", lambda j, p: j.job_id != "llama30-87"),
)
WATCH = ("llama30-85", "llama30-86", "llama30-87", "llama30-91")


def synergy_term(label: str, where: Where | None, truth: str = "rubick-artifact") -> dict[str, Any]:
    """``synergy-tune`` (δ = 260, ``launch_s`` 260) on the artifact's truth where ``where``
    holds (``None``: everywhere; with ``truth="measured"``, nowhere)."""
    nodes = tuple(cluster_from_toml(CLUSTER.read_text()))
    trace = parse_trace((TRACES / "rubick_base.csv").read_text(), "rubick_base.csv")
    profiles = ProfileStore.builtin()
    config = SimConfig(round_s=60.0, checkpoint_s=0.0, relaunch_s=260.0, launch_s=260.0, truth=truth)
    scheduler = build_scheduler(replace(PRESETS["synergy-tune"], restart_cost_s=260.0), profiles)
    starts: dict[str, tuple[float, Assignment]] = {}

    def on_round(t: float, plan: RoundPlan) -> None:
        for job_id in plan.started:
            if job_id in WATCH and job_id not in starts:
                starts[job_id] = (t, plan.assignments[job_id])

    sim = Simulator(nodes, trace, scheduler, config, profiles=profiles, on_round=on_round)
    if where is not None:
        sim.speed_model = _ArtifactWhere(
            profiles,
            {n.name: n for n in nodes},
            interference=config.interference,
            reference_share=config.reference_share,
            truth=truth,
            where=where,
        )
    result = sim.run()
    s = result.summary
    records = {r.job_id: r for r in result.records}
    by_id = {j.job_id: j for j in trace}
    mine = SpeedModel(profiles, {n.name: n for n in nodes}, truth="measured")
    theirs = SpeedModel(profiles, {n.name: n for n in nodes}, truth="rubick-artifact")
    jobs = {}
    for job_id, (t, a) in sorted(starts.items()):
        job, r = by_id[job_id], records[job_id]
        per_iteration = job.duration_s / job.iterations if job.iterations else math.nan
        artifact = theirs.artifact_time_s(job, a)
        jobs[job_id] = {
            "gpus": a.num_gpus,
            "placement": [count for _, count in a.per_node],
            "start_h": t / 3600.0,
            "run_s": (r.finish_time_s or math.nan) - t - config.launch_s,
            "trace_s": job.duration_s,
            "mosaic_s_per_iteration": per_iteration / mine.speed(job, a),
            "artifact_s_per_iteration": artifact,
        }
    row = {
        "term": label,
        "truth": truth,
        "avg_jct_h": s["avg_jct_s"] / 3600.0,
        "avg_first_wait_h": s["avg_queue_s"] / 3600.0,
        "makespan_h": s["makespan_s"] / 3600.0,
        "finished": s["finished"],
        "jobs": jobs,
    }
    print(row, flush=True)
    return row


def synergy_tune_terms() -> list[dict[str, Any]]:
    return [synergy_term("nowhere (Mosaic's truth)", None, truth="measured")] + [
        synergy_term(label, where) for label, where in TERMS
    ]


def main() -> None:
    presets = sys.argv[1].split(",") if len(sys.argv) > 1 else ["rubick", "synergy-tune"]
    rows = [run(p, launch) for p in presets for launch in (0.0, 260.0)]
    if "rubick" in presets:
        rows += [run("rubick", launch, 260.0) for launch in (0.0, 260.0)]
        rows += [run("rubick", launch, preemptive=False) for launch in (0.0, 260.0)]
    # On one truth, the artifact's rule (``mosaic sim --truth rubick-artifact``), δ = 260.
    rows += [run(p, 260.0, 260.0, truth="rubick-artifact") for p in presets]
    payload: dict[str, Any] = {
        "command": "benchmarks/papers/rubick_truth.py " + ",".join(presets),
        "rows": rows,
    }
    if "synergy-tune" in presets:
        payload["synergy_tune_terms"] = synergy_tune_terms()
        payload["same_gpus_other_shapings"] = [
            run(p, 260.0, 260.0, truth=t) for p in SAME_GPUS for t in ("measured", "rubick-artifact")
        ]
    write_result("rubick_truth", payload)


if __name__ == "__main__":
    main()
