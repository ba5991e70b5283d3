"""Inside a real Slurm job, the emulated job runs at the simulator's speed for what Slurm gave it."""

from __future__ import annotations

import json
import sys

from planner.config import preset
from planner.core.model import Node
from planner.sim.progress import SpeedModel
from planner.traces.records import TraceJob
from profiles.store import ProfileStore
from slurm_plugin.demo import run_demo
from slurm_plugin.emulate_speed import IDENTITY_FILE, assignment_from_env
from slurm_plugin.testcluster.shapes import shape_named


def test_demo_jobs_report_the_simulators_speed_for_their_slurm_resources(slurm_cluster, tmp_path):
    trace = [TraceJob("a", 0.0, 2, 60.0, "resnet18"), TraceJob("b", 0.0, 1, 30.0, "transformer")]
    result = run_demo(
        tmp_path, preset("fifo"), python=sys.executable, trace=trace, time_scale=30.0, round_s=1.0
    )
    assert result.live["finished"] == 2
    shape = shape_named("homogeneous")
    nodes = {n: Node(n, g.gpus, g.gpu_type, g.cpus, float(g.mem_gb)) for n, g in shape.nodes()}
    for job in trace:
        path = tmp_path / "spool" / "status" / result.slurm_ids[job.job_id] / "heartbeat.jsonl"
        start = json.loads(path.read_text().splitlines()[0])
        env = {k: v for k, v in start["env"].items() if v is not None}
        assignment = assignment_from_env(env, None)  # the plan file is gone once the job finished
        assert assignment.num_gpus == job.num_gpus and all(n in nodes for n, _ in assignment.gpus)
        expected = SpeedModel(ProfileStore.builtin(), nodes).speed(job, assignment)
        assert start["speed"] == expected
        assert (path.parent / IDENTITY_FILE).exists()  # it ran on the speed model, not the GPU-count rule
