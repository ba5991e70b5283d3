"""One live controller tick with thousands of queued jobs, on the local Slurm test cluster.

Targets: one tick with 5,000 queued jobs <= 3 s; with 20,000 <= 10 s. Submits N held jobs
(1 GPU each, each with its own Mosaic comment) to a private 16-GPU test cluster, lets one
tick start what fits, then times the following ticks as the controller runs them: the
tick's total, its observe (``squeue``, ``sinfo``, state store; the part of it spent reading
the queue), plan and the actions it took.

    .venv/bin/python -m benchmarks.performance.live_tick --jobs 5000   # results/live_tick.json
    .venv/bin/python -m benchmarks.performance.live_tick --jobs 20000  # results/live_tick_20000.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from benchmarks.common import local_cluster, write_result
from planner.config import build_scheduler, preset
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.loop import Controller
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.slurm.runner import run
from slurm_plugin.store import Store
from slurm_plugin.testcluster import lifecycle

TARGETS_S = {5000: 3.0, 20000: 10.0}
SUBMITTERS = 8  # parallel sbatch processes (slurmctld takes about 100 submissions a second here)

T = TypeVar("T")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--preset", default="tiresias")
    parser.add_argument("--out", default=None, help="result name (default live_tick, or live_tick_N)")
    args = parser.parse_args()
    with local_cluster() as (cluster, root):
        result = bench(cluster, root, args.jobs, args.ticks, args.preset)
    write_result(args.out or ("live_tick" if args.jobs == 5000 else f"live_tick_{args.jobs}"), result)


def submit(cluster: lifecycle.Cluster, k: int) -> None:
    # Every job its own comment (its own duration), as real jobs have: nothing may be
    # decoded once for all of them.
    comment = "mosaic:" + json.dumps({"model": "resnet18", "duration_s": 3600 + k}, separators=(",", ":"))
    run(
        ["sbatch", "--parsable", "--hold", "-o", "/dev/null", "-J", f"q{k}", "--gres=gpu:1", "-c", "1",
         "--mem=1G", f"--comment={comment}", "--wrap", "sleep 3600"],
        env=cluster.env,
        timeout_s=120,
    )  # fmt: skip


def bench(
    cluster: lifecycle.Cluster, root: Path, n_jobs: int, n_ticks: int, preset_name: str
) -> dict[str, Any]:
    started = time.perf_counter()
    with ThreadPoolExecutor(SUBMITTERS) as pool:
        list(pool.map(lambda k: submit(cluster, k), range(n_jobs)))
    submit_s = time.perf_counter() - started
    print(f"submitted {n_jobs} held jobs in {submit_s:.1f} s")
    config = ControllerConfig(spool_dir=root / "spool", slurm_conf=str(cluster.layout.conf), round_s=60)
    client = CliSlurm(config.slurm_env, timeout_s=120)
    controller = Controller(client, Store(config.store_path), config, build_scheduler(preset(preset_name)))
    phases = _Phases()
    observer = controller.observer
    observer.observe = phases.wrap("observe_s", observer.observe)  # type: ignore[method-assign]
    client.jobs = phases.wrap("queue_s", client.jobs)  # type: ignore[method-assign]
    first = _timed_tick(controller, phases)
    print(f"first tick (records {n_jobs} new jobs, starts what fits): {first['total_s']:.2f} s")
    ticks = []
    for _ in range(n_ticks):
        time.sleep(1.0)
        ticks.append(_timed_tick(controller, phases))
        print(f"tick: {ticks[-1]}")
    totals = [t["total_s"] for t in ticks]
    return {
        "command": f"python -m benchmarks.performance.live_tick --jobs {n_jobs} --ticks {n_ticks} "
        f"--preset {preset_name}",
        "jobs": n_jobs,
        "preset": preset_name,
        "cluster": "test cluster homogeneous: 4 nodes x 4 GPUs, 16 CPUs, 64 GB",
        "slurm": run(["squeue", "--version"], env=cluster.env).stdout.strip(),
        "submit_s": round(submit_s, 1),
        "first_tick": first,
        "ticks": ticks,
        "tick_s_median": statistics.median(totals),
        "tick_s_max": max(totals),
        "target_s": TARGETS_S.get(n_jobs),
    }


class _Phases:
    """Seconds spent in wrapped calls since the last :meth:`take`."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def wrap(self, name: str, fn: Callable[[], T]) -> Callable[[], T]:
        def timed() -> T:
            t0 = time.perf_counter()
            try:
                return fn()
            finally:
                self.spent[name] = self.spent.get(name, 0.0) + time.perf_counter() - t0

        return timed

    def take(self) -> dict[str, float]:
        spent, self.spent = self.spent, {}
        return spent


def _timed_tick(controller: Controller, phases: _Phases) -> dict[str, Any]:
    """One real tick; observe and queue times are those of the tick's own calls."""
    phases.take()
    t0 = time.perf_counter()
    report = controller.tick()
    total_s = time.perf_counter() - t0
    spent = phases.take()
    return {
        "total_s": round(total_s, 3),
        "observe_s": round(spent.get("observe_s", 0.0), 3),
        "queue_s": round(spent.get("queue_s", 0.0), 3),
        "plan_s": round(report.decision_time_s or 0.0, 4),
        "actions": len(report.actions),
        "managed_jobs": report.jobs,
        "ok": report.ok,
    }


if __name__ == "__main__":
    main()
