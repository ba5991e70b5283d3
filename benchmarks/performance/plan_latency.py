"""Planner time of one round: 2,048 active jobs on 256 GPUs (32 nodes x 8 GPUs).

Target (issue: foundation): <= 0.3 s of planner time with the baseline stages. The
snapshot is a busy mid-trace round: Gavel-style jobs, the first round's plan applied
(about the cluster's worth running), attained service spread over 0-50 GPU-hours, and an
hour later. The script also writes that snapshot and times `mosaic plan` on it as a
whole process (Python start-up and JSON included).

Each preset gets a fresh scheduler; ``first_s`` is its first plan (memo tables of the
stages empty), the median is over all ``--repeat`` plans. Other sizes (``--gpus``,
``--jobs``) write ``results/plan_latency_<gpus>x<jobs>.json``; ``--presets packing``
times every preset with a packing stage (target there: <= 3 s at 4,096 GPUs x 10,000 jobs).

    .venv/bin/python benchmarks/performance/plan_latency.py [--jobs 2048] [--repeat 15]
    .venv/bin/python benchmarks/performance/plan_latency.py --gpus 4096 --jobs 10000 --presets packing \
        --repeat 3 --process-runs 0
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
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import busy_snapshot, write_result  # noqa: E402
from planner import PRESETS, build_scheduler, plan_round, preset  # noqa: E402
from planner.cluster import cluster_from_toml  # noqa: E402
from planner.core.codec import snapshot_to_json  # noqa: E402
from profiles.store import ProfileStore  # noqa: E402

DEFAULT_GPUS, DEFAULT_JOBS = 256, 2048


def cluster_toml(gpus: int) -> str:
    return f'[[nodes]]\ncount = {gpus // 8}\ngpus = 8\ngpu_type = "v100"\ncpus = 24\nmem_gb = 500\n'


def preset_names(arg: str) -> list[str]:
    """``all``, ``packing`` (presets with a packing stage) or a comma-separated list."""
    if arg == "all":
        return list(PRESETS)
    if arg == "packing":
        return [name for name, config in PRESETS.items() if config.packing is not None]
    names = [n.strip() for n in arg.split(",") if n.strip()]
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        raise SystemExit(f"--presets: unknown preset(s) {', '.join(unknown)}; known: {', '.join(PRESETS)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=DEFAULT_GPUS, help="GPUs (8 per node)")
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--presets", default="all", help="all, packing, or a comma-separated list")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: perf_counter; cpu: this process's CPU time (steadier on a loaded machine)",
    )
    parser.add_argument("--process-runs", type=int, default=5, help="`mosaic plan` runs (0: none)")
    args = parser.parse_args()
    if args.gpus <= 0 or args.gpus % 8:
        parser.error(f"--gpus must be a positive multiple of 8, got {args.gpus}")
    if args.jobs <= 0 or args.repeat <= 0 or args.process_runs < 0:
        parser.error("--jobs and --repeat must be positive, --process-runs >= 0")
    names = preset_names(args.presets)
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    snapshot = busy_snapshot(cluster_from_toml(cluster_toml(args.gpus)), args.jobs)
    running = sum(j.is_running for j in snapshot.jobs)
    profiles = ProfileStore.builtin()
    per_preset: dict[str, dict[str, Any]] = {}
    for name in names:
        scheduler = build_scheduler(preset(name), profiles)
        times, stages = [], []
        for _ in range(args.repeat):
            plan = plan_round(snapshot, scheduler, clock=clock)
            times.append(plan.decision_time_s)
            stages.append(plan.stage_times_s)
        per_preset[name] = {
            "median_s": statistics.median(times),
            "max_s": max(times),
            "first_s": times[0],
            "stages_median_s": {k: statistics.median(s[k] for s in stages) for k in stages[0]},
            "stages_first_s": dict(stages[0]),
        }
        medians = per_preset[name]["stages_median_s"]
        stage_text = "  ".join(f"{k} {v * 1000:.0f}" for k, v in medians.items())
        print(
            f"{name:<16} median {statistics.median(times) * 1000:8.1f} ms"
            f"   first {times[0] * 1000:8.1f} ms   max {max(times) * 1000:8.1f} ms   ({stage_text} ms)",
            flush=True,
        )
    result: dict[str, Any] = {
        "command": f"benchmarks/performance/plan_latency.py --gpus {args.gpus} --jobs {args.jobs} "
        f"--repeat {args.repeat}"
        f" --presets {args.presets} --clock {args.clock} --process-runs {args.process_runs}",
        "clock": args.clock,
        "target_s": {(DEFAULT_GPUS, DEFAULT_JOBS): 0.3, (4096, 10_000): 3.0}.get((args.gpus, args.jobs)),
        "jobs": args.jobs,
        "running": running,
        "gpus": args.gpus,
        "presets": per_preset,
    }
    if args.process_runs:
        result.update(process_times(snapshot, args.process_runs))
    default = (args.gpus, args.jobs) == (DEFAULT_GPUS, DEFAULT_JOBS)
    name = "plan_latency" if default else f"plan_latency_{args.gpus}x{args.jobs}"
    write_result(name if args.clock == "wall" else f"{name}_cpu", result)


def process_times(snapshot: Any, runs: int) -> dict[str, float]:
    """`mosaic plan` on the snapshot as a whole process, ``runs`` times (medians)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "snapshot.json"
        path.write_text(json.dumps(snapshot_to_json(snapshot)))
        walls, planner = [], []
        for _ in range(runs):
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
    return {
        "mosaic_plan_process_s_median": statistics.median(walls),
        "mosaic_plan_planner_s_median": statistics.median(planner),
    }


if __name__ == "__main__":
    main()
