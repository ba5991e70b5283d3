"""Synergy's evaluation (§5.3-5.6) on Mosaic's simulator: Figures 9, 11, 12, decision time.

Measured as the paper does: the average JCT of a *window* of jobs in steady state (jobs
``--window`` of a longer trace, e.g. 1000-2000 of 2,400), not of a short trace that never
queues. Cluster: 16 servers x 8 GPUs, 24 CPUs (CPU:GPU 3, or 4-6 for Figure 12) and
500 GB (§5.1). Traces: Synergy's Philly-derived generator (``mosaic trace gen --kind
synergy``), seeded; round 360 s; a job whose CPUs or memory change restarts (30 s).

    python -m benchmarks.papers.synergy fig9        # FIFO, single-GPU, split (20,70,10), load sweep
    python -m benchmarks.papers.synergy fig11       # FIFO, multi-GPU, three workload splits
    python -m benchmarks.papers.synergy fig12       # FIFO, single-GPU, CPU:GPU ratio 3..6
    python -m benchmarks.papers.synergy fig13       # DRF and Tetris with best-case demands vs Tune
    python -m benchmarks.papers.synergy multigpu    # LAS and SRTF, multi-GPU trace
    python -m benchmarks.papers.synergy decision    # decision time per round, 128 and 512 GPUs
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.common import write_result
from planner.cluster import cluster_from_toml
from planner.config import build_scheduler, preset
from planner.core.model import Node
from planner.metrics import JobRecord
from planner.sim import SimConfig, simulate
from planner.traces.generators import synergy_trace
from profiles.store import ProfileStore

PROFILES = ProfileStore.builtin()
MECHANISMS = ("synergy-proportional", "synergy-greedy", "synergy-tune", "synergy-opt")


def cluster(servers: int = 16, cpus_per_gpu: int = 3) -> tuple[Node, ...]:
    cpus = 8 * cpus_per_gpu
    toml = f"[[nodes]]\ncount = {servers}\ngpus = 8\ngpu_type = 'v100'\ncpus = {cpus}\nmem_gb = 500\n"
    return tuple(cluster_from_toml(toml))


def window_stats(records: Sequence[JobRecord], first: int, last: int) -> dict[str, Any]:
    chosen = [r for r in records if first <= int(r.job_id) < last]
    done = [r.jct_s for r in chosen if r.jct_s is not None]
    return {
        "avg_jct_h": statistics.mean(done) / 3600 if done else float("nan"),
        "p99_jct_h": sorted(done)[int(0.99 * (len(done) - 1))] / 3600 if done else float("nan"),
        "finished": len(done),
        "monitored": len(chosen),
    }


def run(
    nodes: Sequence[Node],
    *,
    mechanism: str,
    policy: str,
    rate: float,
    jobs: int,
    window: tuple[int, int],
    split: tuple[float, float, float],
    single_gpu: bool,
    seed: int,
) -> dict[str, Any]:
    trace = synergy_trace(jobs, jobs_per_hour=rate, seed=seed, split=split, multi_gpu=not single_gpu)
    scheduler = build_scheduler(preset(mechanism).with_overrides(policy=policy), PROFILES)
    started = time.perf_counter()
    # Trace durations are run times at Synergy's reference share, 3 CPUs and 62.5 GB per GPU
    # (its CPU:GPU-3 servers), so servers with more CPUs per GPU speed up the baseline too.
    config = SimConfig(reference_share=(3.0, 62.5))
    result = simulate(nodes, trace, scheduler, config, profiles=PROFILES, clock=time.perf_counter)
    s = result.summary
    row = {
        "mechanism": mechanism,
        "policy": policy,
        "rate": rate,
        **window_stats(result.records, *window),
        "all_avg_jct_h": s["avg_jct_s"] / 3600,
        "restarts": s["restarts"],
        "gpu_util": s["gpu_util"],
        "cpu_util": s["cpu_util"],
        "decision_ms_mean": 1000 * s["decision_time_s_mean"],
        "decision_ms_max": 1000 * s["decision_time_s_max"],
        "wall_s": time.perf_counter() - started,
    }
    print(
        f"  {mechanism:<22}{policy:<6}{rate:>6.1f}/h  window avg JCT {row['avg_jct_h']:7.2f} h"
        f"  (all {row['all_avg_jct_h']:6.2f} h, restarts {row['restarts']:>5}, "
        f"decide {row['decision_ms_mean']:6.1f} ms, {row['wall_s']:5.0f} s)",
        flush=True,
    )
    return row


def sweep(
    name: str, args: argparse.Namespace, cases: list[dict[str, Any]], described: dict[str, Any]
) -> None:
    started = time.perf_counter()
    rows = []
    for case in cases:
        ratio = case.get("cpus_per_gpu", 3)
        sim_case = {k: v for k, v in case.items() if k != "cpus_per_gpu"}
        row = run(
            cluster(cpus_per_gpu=ratio),
            jobs=args.jobs,
            window=(args.window_start, args.window_end),
            seed=args.seed,
            **sim_case,
        )
        rows.append({**case, "cpus_per_gpu": ratio, **row})
    write_result(
        f"synergy_{name}{args.suffix}",
        {
            "command": f"python -m benchmarks.papers.synergy {name} --jobs {args.jobs} "
            f"--window {args.window_start}:{args.window_end} --seed {args.seed} "
            f"--mechanisms {args.mechanisms}" + (f" --rates {args.rates}" if args.rates else ""),
            "cluster": "16 x 8 V100, 500 GB, CPU:GPU 3 unless noted",
            "sim": "round 360 s, restart 30 s; durations at 3 CPUs, 62.5 GB per GPU",
            **described,
            "wall_s": time.perf_counter() - started,
            "rows": rows,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("figure", choices=["fig9", "fig11", "fig12", "fig13", "multigpu", "decision"])
    parser.add_argument("--jobs", type=int, default=2400)
    parser.add_argument("--window", default="1000:2000")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rates", default=None, help="comma-separated jobs/hour")
    parser.add_argument("--mechanisms", default=",".join(MECHANISMS))
    parser.add_argument("--suffix", default="", help="appended to the result file's name")
    args = parser.parse_args()
    args.window_start, args.window_end = (int(x) for x in args.window.split(":"))
    mechanisms = args.mechanisms.split(",")

    def rates(default: str) -> list[float]:
        return [float(r) for r in (args.rates or default).split(",")]

    if args.figure == "fig9":
        cases = [
            {"mechanism": m, "policy": "fifo", "rate": r, "split": (20, 70, 10), "single_gpu": True}
            for r in rates("4,6,7,8,8.5")
            for m in mechanisms
        ]
        sweep("fig9", args, cases, {"trace": "single-GPU, split (20,70,10)", "policy": "fifo"})
    elif args.figure == "fig11":
        cases = [
            {"mechanism": m, "policy": "fifo", "rate": r, "split": split, "single_gpu": False}
            for split in ((20, 70, 10), (33, 33, 34), (50, 0, 50))
            for r in rates("2,2.5,3")
            for m in mechanisms
        ]
        sweep("fig11", args, cases, {"trace": "multi-GPU (<= 16), three splits", "policy": "fifo"})
    elif args.figure == "fig12":
        cases = [
            {
                "mechanism": m,
                "policy": "fifo",
                "rate": r,
                "split": (20, 70, 10),
                "single_gpu": True,
                "cpus_per_gpu": ratio,
            }
            for ratio in (3, 4, 5, 6)
            for r in rates("8.5")
            for m in mechanisms
        ]
        sweep("fig12", args, cases, {"trace": "single-GPU, split (20,70,10)", "policy": "fifo"})
    elif args.figure == "fig13":
        cases = [
            {"mechanism": m, "policy": "fifo", "rate": r, "split": split, "single_gpu": False}
            for split in ((20, 70, 10), (50, 0, 50))
            for r in rates("2.5")
            for m in ("synergy-proportional", "drf", "tetris", "synergy-tune")
        ]
        sweep("fig13", args, cases, {"trace": "multi-GPU (<= 16), W1 and W2 splits", "policy": "fifo"})
    elif args.figure == "multigpu":
        cases = [
            {"mechanism": m, "policy": policy, "rate": r, "split": (20, 70, 10), "single_gpu": False}
            for policy in ("las", "srtf")
            for r in rates("2.5,3")
            for m in mechanisms
        ]
        sweep("multigpu", args, cases, {"trace": "multi-GPU (<= 16), split (20,70,10)"})
    else:
        decision(mechanisms)


def decision(mechanisms: list[str]) -> None:
    """One busy round (every GPU wanted twice over) per mechanism, at 128 and 512 GPUs."""
    from planner import Job, Snapshot, plan_round

    rows = []
    for servers in (16, 64):
        nodes = cluster(servers)
        trace = synergy_trace(2 * 8 * servers, jobs_per_hour=0, seed=1, static=True, multi_gpu=False)
        jobs = tuple(Job(t.job_id, t.num_gpus, t.model, 0.0, duration_s=t.duration_s) for t in trace)
        snapshot = Snapshot(time_s=0.0, nodes=nodes, jobs=jobs)
        for m in mechanisms:
            scheduler = build_scheduler(preset(m), PROFILES)
            times = []
            for _ in range(5):
                plan = plan_round(snapshot, scheduler, clock=time.perf_counter)
                times.append(plan.stage_times_s.get("shaping", 0.0))
            rows.append({"gpus": 8 * servers, "jobs": len(jobs), "mechanism": m, "shaping_s": min(times)})
            print(f"  {8 * servers:>4} GPUs {len(jobs):>5} jobs  {m:<22} shaping {min(times) * 1000:8.1f} ms")
    write_result(
        "synergy_decision",
        {
            "command": "python -m benchmarks.papers.synergy decision",
            "what": "shaping-stage time of one round, best of 5, 2 single-GPU jobs per GPU queued",
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
