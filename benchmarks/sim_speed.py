"""Simulator speed: a 10,000-job Gavel-style trace on 512 GPUs with the tiresias preset.

Target (issue: foundation): <= 30 s on the project's 2-core CI-class machine. The
arrival rate defaults to 16 jobs/hour, which offers about the cluster's capacity
(mean job: ~16.8 h x 1.9 GPUs ~= 32 GPU-hours; 512 GPUs / 32 GPU-h = 16 jobs/h), so
queues build up and every round has hundreds of active jobs.

    .venv/bin/python benchmarks/sim_speed.py [--jobs 10000] [--rate 16] [--preset tiresias] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import write_result
from planner.cluster import cluster_from_toml
from planner.config import build_scheduler, preset
from planner.sim import SimConfig, Simulator
from planner.traces.generators import gavel_trace
from profiles.store import ProfileStore

CLUSTER = Path(__file__).resolve().parent.parent / "etc" / "clusters" / "gavel-512.toml"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=16.0)
    parser.add_argument("--preset", default="tiresias")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    nodes = cluster_from_toml(CLUSTER.read_text())
    trace = gavel_trace(args.jobs, jobs_per_hour=args.rate, seed=0)
    profiles = ProfileStore.builtin()
    walls, summary = [], {}
    for _ in range(args.repeat):
        scheduler = build_scheduler(preset(args.preset), profiles)
        sim = Simulator(nodes, trace, scheduler, SimConfig(), profiles=profiles, clock=time.perf_counter)
        started = time.perf_counter()
        result = sim.run()
        walls.append(time.perf_counter() - started)
        summary = result.summary
        active = [p.running + p.pending for p in result.timeline]
    planner_s = summary["decision_time_s_mean"] * summary["rounds"]
    print(
        f"{args.jobs} jobs, {sum(n.gpus for n in nodes)} GPUs, {args.preset}: wall {min(walls):.1f} s "
        f"(median {statistics.median(walls):.1f}), {summary['rounds']} rounds, "
        f"planner {planner_s:.1f} s, mean active jobs {statistics.mean(active):.0f} (max {max(active)})"
    )
    write_result(
        "sim_speed",
        {
            "command": (
                f"benchmarks/sim_speed.py --jobs {args.jobs} --rate {args.rate} --preset {args.preset}"
            ),
            "target_s": 30.0,
            "wall_s": walls,
            "wall_s_min": min(walls),
            "wall_s_median": statistics.median(walls),
            "rounds": summary["rounds"],
            "planner_s": planner_s,
            "mean_active_jobs": statistics.mean(active),
            "max_active_jobs": max(active),
            "finished": summary["finished"],
            "avg_jct_h": summary["avg_jct_s"] / 3600,
            "gpu_util": summary["gpu_util"],
        },
    )


if __name__ == "__main__":
    main()
