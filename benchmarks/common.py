"""Shared helpers for the benchmark scripts: machine description and result files."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slurm_plugin.testcluster.lifecycle import Cluster

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gb = float("nan")
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            cwd=RESULTS.parent,
        ).stdout.strip()
    except OSError:
        commit = ""
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "mem_gb": round(mem_gb, 1),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "commit": commit,
        "date": time.strftime("%Y-%m-%d"),
    }


def write_result(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    document = {"benchmark": name, "machine": machine(), **payload}
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {path.relative_to(RESULTS.parent.parent)}")
    return path


def busy_snapshot(nodes: Any, n_jobs: int, first_round: str = "fifo") -> Any:
    """A mid-trace round: Gavel-style jobs, one ``first_round`` plan applied, an hour later.

    Running jobs are those the first round placed; every job has 0-50 GPU-hours of
    attained service and its remaining time shortened to match (deterministic, seed 0).
    """
    import random
    from dataclasses import replace

    from planner import Job, JobState, Snapshot, build_scheduler, plan_round, preset
    from planner.traces.generators import gavel_trace

    rng = random.Random(0)
    jobs = tuple(
        Job(
            id=t.job_id,
            num_gpus=t.num_gpus,
            model=t.model,
            submit_time_s=rng.uniform(0, 3600),
            duration_s=t.duration_s,
            remaining_s=t.duration_s,
            batch_size=t.batch_size,
        )
        for t in gavel_trace(n_jobs, jobs_per_hour=1, seed=0)
    )
    first = plan_round(Snapshot(3600.0, tuple(nodes), jobs), build_scheduler(preset(first_round)))
    later = []
    for job in jobs:
        attained = rng.uniform(0, 50 * 3600)
        a = first.assignments.get(job.id)
        later.append(
            replace(
                job,
                state=JobState.RUNNING if a is not None else JobState.PENDING,
                assignment=a,
                attained_gpu_s=attained,
                remaining_s=max(60.0, (job.duration_s or 0) - attained / job.num_gpus),
                policy_state=first.policy_state.get(job.id),
            )
        )
    return Snapshot(7200.0, tuple(nodes), tuple(later))


@contextmanager
def local_cluster(shape: str = "homogeneous") -> Iterator[tuple[Cluster, Path]]:
    """A private local Slurm test cluster (root) in a temporary directory, and that directory."""
    from slurm_plugin.testcluster import lifecycle
    from slurm_plugin.testcluster.shapes import shape_named

    with tempfile.TemporaryDirectory(prefix="mosaic-bench-") as tmp:
        root = Path(tmp)
        cluster = lifecycle.up(shape_named(shape), root / "cluster")
        try:
            yield cluster, root
        finally:
            lifecycle.down(root / "cluster")


def wait_until(predicate: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    """Poll ``predicate`` every 0.05 s until it returns something true; return it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f"benchmark step did not finish: {what}")
