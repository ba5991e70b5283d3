"""On a real test cluster: an ended job's plan file and status directory stay while Slurm
lists the job, and the controller removes them once Slurm no longer does.

A 1-GPU emulated job is started by a controller tick (its plan file), writes heartbeats
(its status directory) and is cancelled: squeue still lists it (``MinJobAge``), so a tick,
even with ``spool_keep_s = 0``, keeps its files. ``down`` and ``up`` in the same directory:
slurmctld starts on fresh state and lists nothing; the next tick removes them.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from slurm_plugin import planfile
from tests.slurm_plugin.live_helpers import (
    cluster_in,
    config_for,
    controller,
    submit_job,
    wait_for,
    wait_state,
    write_script,
)
from wrapper import status


@pytest.mark.live
def test_an_ended_jobs_files_stay_while_slurm_lists_it_and_go_once_it_does_not(tmp_path):
    root, spool = tmp_path / "cluster", tmp_path / "spool"
    with cluster_in(root) as cluster:
        config = config_for(cluster, spool, checkpoint_grace_s=0.0, spool_keep_s=0.0)
        job = submit_job(config, write_script(tmp_path, "ended", 1))
        assert controller(config).tick().ok
        wait_state(config, job, "RUNNING")
        plan, beats = planfile.plan_path(spool, job), status.status_dir(spool, job) / status.HEARTBEATS
        wait_for("the job's heartbeats", beats.exists)
        subprocess.run(["scancel", job], env={**os.environ, **cluster.env}, check=True)
        wait_state(config, job, "CANCELLED")
        assert controller(config).tick().ok  # a new controller sweeps on its first tick
        assert plan.exists() and beats.exists()  # squeue lists the ended job for MinJobAge

    with cluster_in(root) as cluster:
        config = config_for(cluster, spool, spool_keep_s=0.0)
        assert controller(config).tick().ok
        assert not plan.exists() and not os.path.lexists(beats.parent)
        assert sorted(p.name for p in (spool / "plans").iterdir()) == []
        assert sorted(p.name for p in (spool / "status").iterdir()) == []
