"""Decision time of one busy Rubick round: 2,048 jobs on 256 GPUs (32 nodes x 8 A800).

Target (Rubick issue): <= 0.3 s of planner time for the ``rubick`` preset. The snapshot is a
busy mid-trace round of Rubick-style jobs (the seven models of Rubick's artifact with their
global batches, submitted plans among DP / ZeRO-2 / ZeRO-Offload / GC, elastic between half and
twice the requested GPUs, half of them guaranteed jobs of tenant ``a`` with a 128-GPU quota, the
others best-effort): the first ``rubick`` round applied, then an hour later with 0-50 GPU-hours
of attained service per job. Timed:

* **warm**: the resource-sensitivity curves already memoised (Rubick §5.2: "the curves can be
  computed ... prior to the scheduling, and then cached for reuse"), what every round but the
  first of a simulation or a controller costs;
* **cold**: the first round of a process, pricing every curve point it needs (the performance
  model fit itself, about a second once per process, is not part of it).

    .venv/bin/python benchmarks/performance/rubick_latency.py [--jobs 2048] [--repeat 15]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import write_result  # noqa: E402
from planner import Job, JobState, Snapshot, build_scheduler, plan_round  # noqa: E402
from planner.cluster import cluster_from_toml  # noqa: E402
from planner.config import PRESETS, Tenant  # noqa: E402
from planner.policies.rubick import policy  # noqa: E402
from profiles.plan_pricing import builtin_models, builtin_perfmodel  # noqa: E402

CLUSTER = '[[nodes]]\ncount = 32\ngpus = 8\ngpu_type = "a800"\ncpus = 96\nmem_gb = 1600\n'
TENANTS = (Tenant("a", 128),)
PLANS = (
    None,
    {"zero_stage": 2},
    {"zero_stage": 2, "offload_optimizer": True},
    {"activation_checkpointing": True},
)
PRESET_NAMES = ("rubick", "rubick-e", "rubick-r", "rubick-n", "sia", "antman")


def busy_snapshot(n_jobs: int) -> Snapshot:
    rng = random.Random(0)
    models = builtin_models()
    nodes = cluster_from_toml(CLUSTER)
    jobs = []
    for k in range(n_jobs):
        key = rng.choice(sorted(models))
        info = models[key]
        low = 16 if key == "llama30" else 1
        g = max(low, rng.choice([1, 1, 2, 2, 4, 4, 8, 16]))
        guaranteed = rng.random() < 0.5
        jobs.append(
            Job(
                id=str(k),
                num_gpus=g,
                model=key,
                submit_time_s=rng.uniform(0, 3600),
                batch_size=info.global_batch,
                plan=rng.choice(PLANS),
                tenant="a" if guaranteed else "b",
                guaranteed=guaranteed,
                min_gpus=max(1, g // 2),
                max_gpus=min(64, 2 * g),
            )
        )
    config = replace(PRESETS["rubick"], tenants=TENANTS)
    first = plan_round(Snapshot(3600.0, tuple(nodes), tuple(jobs)), build_scheduler(config))
    later = []
    for job in jobs:
        a = first.assignments.get(job.id)
        later.append(
            replace(
                job,
                state=JobState.RUNNING if a is not None else JobState.PENDING,
                assignment=a,
                attained_gpu_s=rng.uniform(0, 50 * 3600),
            )
        )
    return Snapshot(7200.0, tuple(nodes), tuple(later))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    started = time.perf_counter()
    builtin_perfmodel()
    fit_s = time.perf_counter() - started
    snapshot = busy_snapshot(args.jobs)
    running = sum(j.is_running for j in snapshot.jobs)
    held = sum(j.assignment.num_gpus for j in snapshot.jobs if j.assignment is not None)
    per_preset: dict[str, dict[str, object]] = {}
    for name in PRESET_NAMES:
        config = replace(PRESETS[name], tenants=TENANTS)
        policy.shared_book.cache_clear()  # cold: no curve point priced yet in this process
        cold = plan_round(snapshot, build_scheduler(config), clock=time.perf_counter)
        scheduler = build_scheduler(config)
        times, stages = [], []
        for _ in range(args.repeat):
            plan = plan_round(snapshot, scheduler, clock=time.perf_counter)
            times.append(plan.decision_time_s)
            stages.append(plan.stage_times_s)
        warm = statistics.median(times)
        per_preset[name] = {
            "warm_median_s": warm,
            "warm_max_s": max(times),
            "cold_s": cold.decision_time_s,
            "stages_warm_median_s": {k: statistics.median(s[k] for s in stages) for k in stages[0]},
            "stages_cold_s": dict(cold.stage_times_s),
            "running_after": len(plan.assignments),
        }
        print(
            f"{name:<9} warm median {warm * 1000:7.1f} ms"
            f"   max {max(times) * 1000:7.1f} ms   cold {cold.decision_time_s * 1000:7.1f} ms"
        )
    print(f"(performance-model fit, once per process: {fit_s:.2f} s)")
    write_result(
        "rubick_latency",
        {
            "command": f"benchmarks/performance/rubick_latency.py --jobs {args.jobs} --repeat {args.repeat}",
            "target_s": 0.3,
            "jobs": args.jobs,
            "running": running,
            "gpus_held": held,
            "gpus": 256,
            "fit_s": fit_s,
            "presets": per_preset,
        },
    )


if __name__ == "__main__":
    main()
