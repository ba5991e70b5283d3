"""Time from ``mosaic resize`` to the job's first step on the new shape, on the test cluster.

The README's job (``contrib/examples/job.sh``: torch DDP on gloo under ``mosaic-run``) runs
on the local Slurm test cluster, started by a controller tick; each repetition resizes it
(2 -> 4 -> 2 ... GPUs) with the same code as ``mosaic resize`` and splits the time, from the
job's own records (``slurm_plugin.controller.resize.relaunch_timeline``), into

* ``checkpoint_s``: the resize asked -> every rank saved and stopped (``checkpoint.json``);
* ``relaunch_s``: -> Slurm requeued, updated, released and ran the job, and ``mosaic-run``
  started again (its ``start`` record): the credential-safe wait is in here;
* ``startup_s``: -> the first training step on the new shape was reported (Python and torch
  import, gloo rendezvous, the checkpoint load, one step).

    .venv/bin/python -m benchmarks.performance.live_resize --repeat 4     # as root
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks.common import local_cluster, wait_until, write_result
from planner.config import build_scheduler, preset
from slurm_plugin import planfile
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.resize import apply_resize, relaunch_timeline
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.slurm.runner import run
from slurm_plugin.store import Store
from slurm_plugin.submit import submit
from slurm_plugin.testcluster import lifecycle

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=4)
    args = parser.parse_args()
    with local_cluster() as (cluster, root):
        result = bench(cluster, root, args.repeat)
    write_result("live_resize", result)


def bench(cluster: lifecycle.Cluster, root: Path, repeat: int) -> dict:
    config = ControllerConfig(
        spool_dir=root / "spool",
        slurm_conf=str(cluster.layout.conf),
        checkpoint_grace_s=30,
        stop_timeout_s=30,
    )
    work = root / "work"
    work.mkdir()
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ.update({"STEPS": "100000", "STEP_SLEEP": "0.2"})
    os.chdir(ROOT)
    client = CliSlurm(config.slurm_env)
    job_id = submit(
        client,
        ROOT / "contrib/examples/job.sh",
        ["-D", str(work), "-o", str(work / "job.out")],
        config.spool_dir,
    )
    store = Store(config.store_path)
    Controller(client, store, config, build_scheduler(preset("fifo"))).tick()
    wait_until(
        lambda: any(
            r.get("event") == "heartbeat" for r in planfile.read_heartbeats(config.spool_dir, job_id)
        ),
        "the first step",
        180.0,
    )
    runs = []
    try:
        for k in range(repeat):
            time.sleep(3.0)  # a few steps on the current shape
            gpus = 4 if k % 2 == 0 else 2
            asked = time.time()
            t0 = time.perf_counter()
            report = apply_resize(client, store, config, job_id, gpus)
            command_s = time.perf_counter() - t0
            assert report["ok"], report

            def timeline(asked: float = asked):  # type: ignore[no-untyped-def]
                return relaunch_timeline(
                    asked,
                    planfile.read_checkpoint_marker(config.spool_dir, job_id),
                    planfile.read_heartbeats(config.spool_dir, job_id),
                )

            t = wait_until(timeline, f"the first step on {gpus} GPUs", 180.0)
            assert t.world_size == gpus, t
            runs.append(
                {
                    "to_gpus": gpus,
                    "command_s": round(command_s, 2),
                    "checkpoint_s": round(t.checkpoint_s, 2),
                    "relaunch_s": round(t.relaunch_s, 2),
                    "startup_s": round(t.startup_s, 2),
                    "total_s": round(t.total_s, 2),
                }
            )
            print(runs[-1], flush=True)
    finally:
        run(["scancel", job_id], env=config.slurm_env, check=False)
    med = {
        key: statistics.median(r[key] for r in runs)
        for key in ("checkpoint_s", "relaunch_s", "startup_s", "total_s")
    }
    return {
        "runs": runs,
        "median": med,
        "job": "contrib/examples/job.sh (torch DDP, gloo, CPU), resized 2 <-> 4 GPUs by mosaic resize",
        "note": "startup_s includes importing torch and the gloo rendezvous of every rank on 2 shared cores",
    }


if __name__ == "__main__":
    main()
