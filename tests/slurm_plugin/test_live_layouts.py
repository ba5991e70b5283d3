"""Every way a user asks Slurm for tasks starts with exactly the planned resources (real Slurm).

Regression for a job submitted with ``#SBATCH --ntasks=2``: the controller's start set
``NumCPUs=8 MinCPUsNode=8`` on a job of 2 tasks of 1 CPU, Slurm left it ``PENDING
(BadConstraints)`` forever while the tick reported the start as done. Each job below is
started by one controller tick and must then run, inside Slurm, on the planned node with
the planned GPUs and CPUs (``SLURM_CPUS_ON_NODE`` seen by the job itself).
"""

from __future__ import annotations

import pytest

from planner.core.codec import assignment_from_json
from slurm_plugin import planfile
from tests.slurm_plugin.live_helpers import config_for, controller, jobs, submit_job, wait_for

LAYOUTS = {
    "ntasks": "--ntasks=2 --gres=gpu:2",
    "ntasks-per-node": "-N1 --ntasks-per-node=2 --gres=gpu:2",
    "cpus-per-task": "--gres=gpu:2 -c 3",
    "ntasks-cpus-per-task": "--ntasks=2 -c 2 --gres=gpu:2",
    "gpus-per-task": "--ntasks=2 --gpus-per-task=1",
    "nodes": "-N1 --gres=gpu:2",
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_a_job_starts_with_the_planned_resources_whatever_its_task_layout(live, tmp_path, name):
    spool = tmp_path / "spool"
    config = config_for(live, spool)
    seen = tmp_path / "seen.txt"
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"#SBATCH -J {name} {LAYOUTS[name]} --mem=4G -o /dev/null\n"
        "#MOSAIC --model resnet50 --duration-s 600\n"
        "trap '' USR1\n"
        f'echo "$SLURMD_NODENAME $SLURM_CPUS_ON_NODE $SLURM_JOB_GPUS" > {seen}\n'
        "sleep 120\n"
    )
    job_id = submit_job(config, script)
    report = controller(config, "fifo").tick()
    assert report.ok and report.result is not None
    assert not report.result.failed and not report.result.skipped, report.to_json()
    assert report.result.done == [f"r{report.round_id}-start-{job_id}"], report.to_json()
    sj = wait_for(
        f"job {job_id} running", lambda: (j := jobs(config).get(job_id)) and j.state == "RUNNING" and j
    )
    planned = planfile.read_plan(spool, job_id)
    assert planned is not None
    a = assignment_from_json(planned["assignment"], "plan file")
    ((node, gpus),) = a.per_node
    line = wait_for("the job's own view", lambda: seen.exists() and seen.read_text().split())
    assert line[0] == node and int(line[1]) == a.cpus == sj.cpus, (line, a, sj)
    assert len(line[2].split(",")) == gpus == 2
