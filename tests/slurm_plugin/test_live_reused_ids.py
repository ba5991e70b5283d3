"""On a real test cluster brought down and up again: Slurm numbers jobs from 1 again, and the
new job 1 is not the old one to the controller.

The first cluster's job 1 asks for 2 GPUs, is started by a controller tick and resized to 4
with ``mosaic resize`` (the store then records a 4-GPU request, its attained service and
plan versions), and is cancelled. ``down``, ``up`` in the same directory: slurmctld starts on
fresh state. A job asking for 1 GPU is submitted with the same spool, gets id 1 again, and the
controller's next tick must start it on the 1 GPU it asked for, at plan version 1, with no
service or progress of the earlier job and none of its files.
"""

from __future__ import annotations

import pytest

from slurm_plugin import planfile
from slurm_plugin.controller.resize import apply_resize
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.store import Store
from tests.slurm_plugin.live_helpers import (
    cluster_in,
    config_for,
    controller,
    submit_job,
    wait_state,
    write_script,
)
from wrapper import status


@pytest.mark.live
def test_a_job_id_given_again_after_a_fresh_start_is_a_new_job(tmp_path):
    root, spool = tmp_path / "cluster", tmp_path / "spool"
    with cluster_in(root) as cluster:
        config = config_for(cluster, spool, checkpoint_grace_s=0.0)
        first = submit_job(config, write_script(tmp_path, "first", 2, exit_on_checkpoint=True))
        assert first == "1"
        controller(config).tick()
        wait_state(config, first, "RUNNING")
        report = apply_resize(CliSlurm(config.slurm_env), Store(config.store_path), config, first, 4)
        assert report["ok"], report
        assert wait_state(config, first, "RUNNING").gpus_per_node == 4
        earlier = Store(config.store_path).job(first)
        assert earlier is not None and earlier.num_gpus == 4 and earlier.plan_version >= 2
        status_dir = status.status_dir(spool, first)
        status_dir.mkdir(parents=True, exist_ok=True)
        with (status_dir / status.HEARTBEATS).open("a") as f:
            f.write('{"event": "heartbeat", "progress": 0.9, "earlier_job": true}\n')

    with cluster_in(root) as cluster:
        config = config_for(cluster, spool, checkpoint_grace_s=0.0)
        second = submit_job(config, write_script(tmp_path, "second", 1))
        assert second == "1"  # Slurm numbers from 1 again
        report = controller(config).tick()
        assert report.ok, report.error
        assert wait_state(config, second, "RUNNING").gpus_per_node == 1
        record = Store(config.store_path).job(second)
        assert record is not None and record.num_gpus == 1 and record.plan_version == 1
        assert record.progress is None and record.meta.get("model") == "resnet50"
        assert planfile.read_plan(spool, second)["version"] == 1  # type: ignore[index]
        assert not any(r.get("earlier_job") for r in planfile.read_heartbeats(spool, second))
