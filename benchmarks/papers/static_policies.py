"""Ordering policies on static traces: every job at t=0, heavy-tailed durations.

Queueing theory for one server says: with all jobs present at once, shortest-first
minimises mean completion time (SRTF = SJF there), least-attained-service beats FIFO
when job sizes are heavy-tailed, and finish-time fairness should give the lowest
worst-case rho. This benchmark checks those expectations on GPU clusters, where jobs
are wide (1-8 GPUs) and must be consolidated, averaged over several seeds.

    .venv/bin/python benchmarks/papers/static_policies.py [--jobs 200] [--seeds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.common import write_result
from planner.cluster import cluster_from_toml
from planner.config import build_scheduler, preset
from planner.sim import SimConfig, simulate
from planner.traces.generators import gavel_trace
from profiles.store import ProfileStore

CLUSTER = """
[[nodes]]
count = 8
gpus = 8
gpu_type = "v100"
cpus = 24
mem_gb = 500
"""

# (label, preset, overrides): the six policies, SJF in its three size variants and SRTF
# in two (remaining time; remaining GPU-time = Tiresias' "shortest remaining service").
VARIANTS = [
    ("fifo", "fifo", {}),
    ("sjf (duration)", "sjf", {}),
    ("sjf (gpu-time)", "sjf", {"options": {"policy": {"size": "gpu_time"}}}),
    ("sjf (gpus)", "sjf", {"options": {"policy": {"size": "gpus"}}}),
    ("srtf (time)", "srtf", {}),
    ("srtf (gpu-time)", "srtf", {"options": {"policy": {"size": "gpu_time"}}}),
    ("las", "las", {}),
    ("tiresias", "tiresias", {}),
    ("ftf", "ftf", {}),
]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    nodes = cluster_from_toml(CLUSTER)
    profiles = ProfileStore.builtin()
    rows: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in VARIANTS}
    started = time.perf_counter()
    for seed in range(args.seeds):
        trace = gavel_trace(args.jobs, jobs_per_hour=0, seed=seed, static=True)
        for label, name, overrides in VARIANTS:
            scheduler = build_scheduler(preset(name).with_overrides(**overrides), profiles)
            s = simulate(nodes, trace, scheduler, SimConfig(), profiles=profiles).summary
            rows[label].append(
                {k: s[k] for k in ("avg_jct_s", "makespan_s", "max_ftf", "avg_ftf", "restarts")}
            )
    table = {
        label: {
            "avg_jct_h": statistics.mean(r["avg_jct_s"] for r in runs) / 3600,
            "makespan_h": statistics.mean(r["makespan_s"] for r in runs) / 3600,
            "max_ftf": statistics.mean(r["max_ftf"] for r in runs),
            "avg_ftf": statistics.mean(r["avg_ftf"] for r in runs),
            "restarts": statistics.mean(r["restarts"] for r in runs),
            "per_seed_avg_jct_h": [r["avg_jct_s"] / 3600 for r in runs],
            "per_seed_max_ftf": [r["max_ftf"] for r in runs],
        }
        for label, runs in rows.items()
    }
    print(f"{'policy':<16}{'avg JCT h':>11}{'makespan h':>12}{'max rho':>9}{'avg rho':>9}{'restarts':>10}")
    for label, t in table.items():
        print(
            f"{label:<16}{t['avg_jct_h']:>11.2f}{t['makespan_h']:>12.1f}{t['max_ftf']:>9.2f}"
            f"{t['avg_ftf']:>9.2f}{t['restarts']:>10.0f}"
        )
    write_result(
        "static_policies",
        {
            "command": f"benchmarks/papers/static_policies.py --jobs {args.jobs} --seeds {args.seeds}",
            "cluster": "8 x 8 V100, 24 CPUs, 500 GB",
            "trace": f"gavel_trace({args.jobs}, static=True, seed=0..{args.seeds - 1})",
            "sim": "round 360 s, restart 30 s",
            "wall_s": time.perf_counter() - started,
            "table": table,
        },
    )


if __name__ == "__main__":
    main()
