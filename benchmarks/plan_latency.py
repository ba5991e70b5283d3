"""Planner time of one round: 2,048 active jobs on 256 GPUs (32 nodes x 8 GPUs).

Target (issue: foundation): <= 0.3 s of planner time with the baseline stages. The
snapshot is a busy mid-trace round: Gavel-style jobs, the first round's plan applied
(about 256 GPUs' worth running), attained service spread over 0-50 GPU-hours, and an
hour later. The script also writes that snapshot and times `mosaic plan` on it as a
whole process (Python start-up and JSON included).

    .venv/bin/python benchmarks/plan_latency.py [--jobs 2048] [--repeat 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import busy_snapshot, write_result  # noqa: E402
from planner import PRESETS, build_scheduler, plan_round, preset  # noqa: E402
from planner.cluster import cluster_from_toml  # noqa: E402
from planner.codec import snapshot_to_json  # noqa: E402
from profiles.store import ProfileStore  # noqa: E402

CLUSTER = '[[nodes]]\ncount = 32\ngpus = 8\ngpu_type = "v100"\ncpus = 24\nmem_gb = 500\n'


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    snapshot = busy_snapshot(cluster_from_toml(CLUSTER), args.jobs)
    running = sum(j.is_running for j in snapshot.jobs)
    profiles = ProfileStore.builtin()
    per_preset = {}
    for name in PRESETS:
        scheduler = build_scheduler(preset(name), profiles)
        times, stages = [], []
        for _ in range(args.repeat):
            plan = plan_round(snapshot, scheduler, clock=time.perf_counter)
            times.append(plan.decision_time_s)
            stages.append(plan.stage_times_s)
        per_preset[name] = {
            "median_s": statistics.median(times),
            "max_s": max(times),
            "stages_median_s": {k: statistics.median(s[k] for s in stages) for k in stages[0]},
        }
        print(
            f"{name:<10} median {per_preset[name]['median_s'] * 1000:7.1f} ms"
            f"   max {max(times) * 1000:7.1f} ms"
        )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "snapshot.json"
        path.write_text(json.dumps(snapshot_to_json(snapshot)))
        walls, planner = [], []
        for _ in range(5):
            started = time.perf_counter()
            out = subprocess.run(
                [
                    str(Path(sys.executable).parent / "mosaic"),
                    "plan",
                    str(path),
                    "--scheduler",
                    "tiresias",
                    "--compact",
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            walls.append(time.perf_counter() - started)
            planner.append(json.loads(out)["decision_time_s"])
    print(
        f"mosaic plan (whole process): median {statistics.median(walls):.2f} s, "
        f"planner {statistics.median(planner) * 1000:.1f} ms"
    )
    write_result(
        "plan_latency",
        {
            "command": f"benchmarks/plan_latency.py --jobs {args.jobs} --repeat {args.repeat}",
            "target_s": 0.3,
            "jobs": args.jobs,
            "running": running,
            "gpus": 256,
            "presets": per_preset,
            "mosaic_plan_process_s_median": statistics.median(walls),
            "mosaic_plan_planner_s_median": statistics.median(planner),
        },
    )


if __name__ == "__main__":
    main()
