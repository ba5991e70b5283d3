"""What online refinement adds to a controller tick: read every running job's heartbeats,
store one point per run, refine the profile store and rebuild the scheduler.

    .venv/bin/python -m benchmarks.performance.refine_tick --jobs 512 --lines 100 [--repeat 5] [--out FILE]

A fake Slurm (no commands) with ``--jobs`` running 1-GPU jobs of four Synergy models on
8-GPU nodes, half at 4 and half at 9 CPUs per GPU, each with a heartbeat log of
``--lines`` heartbeats of its current run (with telemetry, as the runtime API writes
them). Times :meth:`Refiner.scheduler` (the refinement's whole cost per tick) and, for
scale, the observation the tick makes anyway (``Observer.observe``), in the same process.
Writes ``benchmarks/results/refine_tick.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from planner.config import build_scheduler, preset
from profiles.store import ProfileStore
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.loop import Observer
from slurm_plugin.controller.observe import first_sight_meta
from slurm_plugin.controller.refine import Refiner
from slurm_plugin.directives import encode_comment
from slurm_plugin.slurm.parse import SlurmJob, SlurmNode, parse_sinfo_json, parse_squeue_json
from slurm_plugin.store import Store

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "slurm"
RESULTS = ROOT / "benchmarks" / "results" / "refine_tick.json"
T0 = 1_795_300_000.0
MODELS = ("resnet18", "resnet50", "alexnet", "mobilenet")


class StaticSlurm:
    """Answers squeue/sinfo with fixed lists (refinement changes nothing in Slurm)."""

    def __init__(self, jobs: list[SlurmJob], nodes: list[SlurmNode]) -> None:
        self._jobs, self._nodes = jobs, nodes

    def jobs(self) -> list[SlurmJob]:
        return list(self._jobs)

    def nodes(self) -> list[SlurmNode]:
        return list(self._nodes)


def setup(spool: Path, count: int, lines: int) -> tuple[Observer, Refiner]:
    template = parse_squeue_json((DATA / "squeue.json").read_text())[0]
    node = parse_sinfo_json((DATA / "sinfo.json").read_text())[0]
    nodes = [
        replace(node, name=f"n{k}", cpus=32, mem_mb=512_000, gpus=8, features=("v100",), partitions=("gpu",))
        for k in range(1, count // 8 + 2)
    ]
    jobs = []
    for k in range(count):
        name = f"n{k // 8 + 1}"
        jobs.append(
            replace(
                template,
                id=str(1000 + k),
                gpus_per_node=1,
                cpus=4 if k % 2 else 9,
                mem_mb_per_node=64_000,
                nodes=(name,),
                gpu_indices=((name, (k % 8,)),),
                start_time=T0,
                comment=encode_comment({"model": MODELS[(k // 2) % len(MODELS)]}),
                user_id=os.getuid(),  # who writes the heartbeat logs: the controller trusts them
            )
        )
    config = ControllerConfig(spool_dir=spool)
    store = Store(config.store_path)
    store.add_jobs([(j.id, 1, first_sight_meta(j)) for j in jobs], T0)
    for j in jobs:
        store.next_plan_version(j.id)
        directory = spool / "status" / j.id
        directory.mkdir(parents=True)
        with open(directory / "heartbeat.jsonl", "w", encoding="utf-8") as f:
            for i in range(lines):
                record = {"event": "heartbeat", "time": T0 + 10 * (i + 1), "job_id": j.id, "plan_version": 1,
                          "step": i, "samples": 64 * i, "samples_per_s": 100.0 + i % 3, "world_size": 1,
                          "cpu_percent": 99.0, "rss_gb": 1.2, "node_cpu_percent": 50.0,
                          "node_mem_used_gb": 10.0, "node_mem_total_gb": 500.0}  # fmt: skip
                f.write(json.dumps(record, sort_keys=True) + "\n")
    observer = Observer(StaticSlurm(jobs, nodes), store, config, clock=lambda: T0 + 10 * lines + 5)  # type: ignore[arg-type]
    base = ProfileStore.builtin()
    refiner = Refiner(store, base, lambda p: build_scheduler(preset("synergy-tune"), p), spool)
    return observer, refiner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=512)
    parser.add_argument("--lines", type=int, default=100, help="heartbeats in each job's log")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mosaic-refine-") as tmp:
        observer, refiner = setup(Path(tmp), args.jobs, args.lines)
        observe_s, refine_s = [], []
        for _ in range(args.repeat):
            started = time.perf_counter()
            obs = observer.observe()
            observe_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            refiner.scheduler(obs)
            refine_s.append(time.perf_counter() - started)
        points = len(refiner.store.observations())
        refined = [
            m for m in MODELS if refiner.profiles.provenance(m).get("sensitivity", "").endswith("observed")
        ]
    result: dict[str, Any] = {
        "command": "python -m benchmarks.performance.refine_tick "
        f"--jobs {args.jobs} --lines {args.lines} --repeat {args.repeat}",
        "running_jobs": args.jobs,
        "heartbeats_per_log": args.lines,
        "stored_points": points,
        "refined_models": refined,
        "observe_s_median": round(statistics.median(observe_s), 4),
        "refine_s_median": round(statistics.median(refine_s), 4),
        "refine_s_all": [round(s, 4) for s in refine_s],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
