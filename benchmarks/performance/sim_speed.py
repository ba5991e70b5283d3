"""Simulator speed: a 10,000-job Gavel-style trace on 512 GPUs with the tiresias preset.

Target (issue: foundation): <= 30 s on the project's 2-core CI-class machine, both at
capacity and at twice it. The arrival rate defaults to 16 jobs/hour, which offers about
the cluster's capacity (mean job: ~16.8 h x 1.9 GPUs ~= 32 GPU-hours; 512 GPUs / 32
GPU-h = 16 jobs/h), so queues build up and every round has hundreds of active jobs;
``--rate 30`` offers about twice it, so the queue grows to thousands of pending jobs.

Wall time is what the target is about; CPU time (``time.process_time``) is recorded
too, since on a shared machine it moves much less with the load of other processes.
``--baseline TREE`` also times another Mosaic tree (e.g. a ``git worktree`` of an
earlier commit) on the same trace, alternating runs with this tree's, and records both.

    .venv/bin/python benchmarks/performance/sim_speed.py [--jobs 10000] [--rate 16] [--preset tiresias]
        [--repeat 3] [--baseline TREE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[2]
CLUSTER = Path("etc") / "clusters" / "gavel-512.toml"


def measure(jobs: int, rate: float, preset_name: str) -> dict[str, Any]:
    """One timed simulation with the planner on sys.path (this tree's, or --tree's)."""
    from planner.cluster import cluster_from_toml
    from planner.config import build_scheduler, preset
    from planner.sim import SimConfig, Simulator
    from planner.traces.generators import gavel_trace
    from profiles.store import ProfileStore

    nodes = cluster_from_toml((HERE / CLUSTER).read_text())
    trace = gavel_trace(jobs, jobs_per_hour=rate, seed=0)
    profiles = ProfileStore.builtin()
    scheduler = build_scheduler(preset(preset_name), profiles)
    sim = Simulator(nodes, trace, scheduler, SimConfig(), profiles=profiles, clock=time.perf_counter)
    wall, cpu = time.perf_counter(), time.process_time()
    result = sim.run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    summary = result.summary
    active = [p.running + p.pending for p in result.timeline]
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "gpus": sum(n.gpus for n in nodes),
        "rounds": summary["rounds"],
        "planner_s": summary["decision_time_s_mean"] * summary["rounds"],
        "mean_active_jobs": statistics.mean(active),
        "max_active_jobs": max(active),
        "finished": summary["finished"],
        "avg_jct_h": summary["avg_jct_s"] / 3600,
        "gpu_util": summary["gpu_util"],
    }


def measure_tree(tree: Path, jobs: int, rate: float, preset_name: str) -> dict[str, Any]:
    """:func:`measure` in a subprocess importing the planner from ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    args = ["--measure-one", "--tree", str(tree), "--jobs", str(jobs), "--rate", str(rate)]
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args, "--preset", preset_name],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: timing run failed:\n{done.stderr}")
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    walls, cpus = [r["wall_s"] for r in runs], [r["cpu_s"] for r in runs]
    first = runs[0]
    return {
        "wall_s": walls,
        "wall_s_min": min(walls),
        "wall_s_median": statistics.median(walls),
        "cpu_s": cpus,
        "cpu_s_min": min(cpus),
        "cpu_s_median": statistics.median(cpus),
        **{k: first[k] for k in first if k not in ("wall_s", "cpu_s")},
    }


def describe(label: str, row: dict[str, Any], jobs: int, preset_name: str) -> str:
    return (
        f"{label}: {jobs} jobs, {row['gpus']} GPUs, {preset_name}: wall {row['wall_s_min']:.1f} s "
        f"(median {row['wall_s_median']:.1f}), cpu {row['cpu_s_min']:.1f} s, {row['rounds']} rounds, "
        f"planner {row['planner_s']:.1f} s, mean active jobs {row['mean_active_jobs']:.0f} "
        f"(max {row['max_active_jobs']})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=16.0, help="arrivals per hour (30: ~2x capacity)")
    parser.add_argument("--preset", default="tiresias")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="also time this Mosaic tree (e.g. a git worktree)")
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)  # set by --baseline's runs
    parser.add_argument("--measure-one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.jobs < 1 or not args.rate > 0 or args.repeat < 1:
        parser.error("--jobs and --repeat must be >= 1 and --rate > 0")
    if args.baseline is not None and not (args.baseline / "planner").is_dir():
        parser.error(f"--baseline {args.baseline}: not a Mosaic tree (no planner/ directory)")
    sys.path.insert(0, str((args.tree or HERE).resolve()))
    if args.measure_one:
        print(json.dumps(measure(args.jobs, args.rate, args.preset)))
        return
    new_runs, base_runs = [], []
    for _ in range(args.repeat):  # alternate, so both see the same machine load
        new_runs.append(measure_tree(HERE, args.jobs, args.rate, args.preset))
        if args.baseline is not None:
            base_runs.append(measure_tree(args.baseline.resolve(), args.jobs, args.rate, args.preset))
    new = aggregate(new_runs)
    print(describe("this tree", new, args.jobs, args.preset))
    payload: dict[str, Any] = {
        "command": (
            f"benchmarks/performance/sim_speed.py --jobs {args.jobs} --rate {args.rate} "
            f"--preset {args.preset} "
            f"--repeat {args.repeat}" + (" --baseline TREE" if args.baseline is not None else "")
        ),
        "target_s": 30.0,
        **new,
    }
    if base_runs:
        base = aggregate(base_runs)
        print(describe("baseline ", base, args.jobs, args.preset))
        payload["baseline"] = {"commit": _commit(args.baseline), **base}
    from benchmarks.common import write_result

    name = "sim_speed" if args.rate == 16.0 else f"sim_speed_rate{args.rate:g}"
    write_result(name, payload)


def _commit(tree: Path) -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True, check=False
    )
    return done.stdout.strip()


if __name__ == "__main__":
    main()
