"""Relaunch time on the local Slurm test cluster: a running job moved and resized by a plan.

Target (issue): relaunch <= 10 s. One emulated job runs; each repetition applies a plan that
moves it to another node with another GPU count (stop: checkpoint signal, marker,
requeuehold; start: update, plan file, StartTime=now, release) and times

* ``apply_s``: the actuator's whole stop + start;
* ``relaunch_s``: from the start of the apply until the job's new run reports from inside
  the job (its first heartbeat, with the new resources).

    .venv/bin/python benchmarks/performance/live_relaunch.py --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from benchmarks.common import local_cluster, wait_until, write_result
from planner.config import build_scheduler, preset
from planner.core.codec import assignment_from_json
from slurm_plugin import planfile
from slurm_plugin.controller.actuate import Actuator
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.rounddiff import diff
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.store import Store
from slurm_plugin.submit import submit
from slurm_plugin.testcluster import lifecycle


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with local_cluster() as (cluster, root):
        result = bench(cluster, root, args.repeat)
    write_result("live_relaunch", result)


def _starts(spool: Path, job_id: str) -> list[dict]:
    return [r for r in planfile.read_heartbeats(spool, job_id) if r.get("event") == "start"]


def bench(cluster: lifecycle.Cluster, root: Path, repeat: int) -> dict:
    config = ControllerConfig(
        spool_dir=root / "spool",
        slurm_conf=str(cluster.layout.conf),
        checkpoint_grace_s=10,
        stop_timeout_s=30,
    )
    script = root / "job.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --gres=gpu:1 -c 2 --mem=4G -o /dev/null\n#MOSAIC --model resnet50\n"
        f"trap '' USR1\nexec {sys.executable} -m slurm_plugin.emulate --duration-s 36000\n"
    )
    client = CliSlurm(config.slurm_env)
    job_id = submit(client, script, [], config.spool_dir)
    store = Store(config.store_path)
    controller = Controller(client, store, config, build_scheduler(preset("fifo")))
    controller.tick()
    wait_until(lambda: len(_starts(config.spool_dir, job_id)) >= 1, "the first start")
    runs = []
    for k in range(repeat):
        time.sleep(2.0)  # the emulator is up and has its handler
        node, gpus = ("n2", 2) if k % 2 == 0 else ("n3", 1)
        target = assignment_from_json(
            {"gpus": [[node, i] for i in range(gpus)], "cpus": 4 * gpus, "mem_gb": 8.0 * gpus}, "bench"
        )
        obs = controller.observe()
        round_id = store.begin_round(time.time(), {"assignments": {}})
        actions = diff(obs, {job_id: target}, round_id)
        before = len(_starts(config.spool_dir, job_id))
        t0 = time.perf_counter()
        result = Actuator(client, store, config).apply(obs, actions, round_id)
        apply_s = time.perf_counter() - t0
        store.finish_round(round_id, len(result.done))
        wait_until(lambda b=before: len(_starts(config.spool_dir, job_id)) > b, "the relaunch")
        relaunch_s = time.perf_counter() - t0
        env = _starts(config.spool_dir, job_id)[-1]["env"]
        assert env["SLURMD_NODENAME"] == node and len(env["CUDA_VISIBLE_DEVICES"].split(",")) == gpus
        runs.append(
            {"to": f"{node}:{gpus}", "apply_s": round(apply_s, 3), "relaunch_s": round(relaunch_s, 3)}
        )
        print(runs[-1])
    relaunch = [r["relaunch_s"] for r in runs]
    return {
        "runs": runs,
        "relaunch_s_median": statistics.median(relaunch),
        "relaunch_s_max": max(relaunch),
        "target_s": 10.0,
        "note": "includes the emulated job's Python start-up before its first heartbeat",
    }


if __name__ == "__main__":
    main()
