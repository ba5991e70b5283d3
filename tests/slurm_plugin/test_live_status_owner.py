"""On the real test cluster: a status directory planted for another user's job tells the
controller nothing (issue 15).

``<spool>/status/`` is world-writable, so anyone can create the directory of a job id that
is not used yet. Here root plants one for a job of a non-root user (created with
``useradd`` when absent) before it runs: heartbeats claiming 99 % progress and a huge rate,
and a checkpoint marker dated a year ahead, newer than any signal. The controller, built as
``mosaic controller`` builds it (with online refinement), starts the job, then on later
ticks records neither the progress nor the rate; a resize's stop waits the whole checkpoint
grace for the job's own marker instead of taking the planted one (which would requeue the
job before it saved its work); and the planted directory is logged once.
"""

from __future__ import annotations

import logging
import os
import pwd
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from planner.config import build_scheduler, preset
from profiles.store import ProfileStore
from slurm_plugin import planfile
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.refine import Refiner
from slurm_plugin.controller.resize import apply_resize
from slurm_plugin.directives import encode_comment
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.store import Store
from slurm_plugin.testcluster.lifecycle import Cluster
from tests.slurm_plugin.live_helpers import config_for, jobs, system_user, wait_state
from wrapper import status

JOB_USER = "mosaic-job"
GRACE_S = 4.0
SCHEDULER = preset("fifo")


def job_user() -> pwd.struct_passwd:
    """The non-root user the live tests submit jobs as."""
    return system_user(JOB_USER)


@pytest.fixture
def runnable_by_others(live: Cluster) -> Iterator[Cluster]:
    """The cluster, its directory reachable by other users while the test runs: slurmd
    executes a batch script from its spool as the job's user, and pytest's temporary
    directories are 0700 (the execve is refused). Adds search (x) permission only, then
    puts every mode back."""
    changed = []
    for directory in [live.layout.root, *live.layout.root.parents]:
        mode = stat.S_IMODE(directory.stat().st_mode)
        if not mode & stat.S_IXOTH:
            os.chmod(directory, mode | stat.S_IXOTH)
            changed.append((directory, mode))
    try:
        yield live
    finally:
        for directory, mode in changed:
            os.chmod(directory, mode)


def _plant(spool: Path, job_id: str) -> Path:
    """The job's status directory as another user (root) leaves it before the job runs."""
    planfile.ensure_spool(spool)
    directory = status.status_dir(spool, job_id)
    directory.mkdir()
    status.write_marker(
        directory / status.CHECKPOINT_MARKER, {"job_id": job_id, "time": time.time() + 365 * 86400}
    )
    return directory


def _fake_heartbeats(directory: Path, plan_version: int) -> None:
    for k in range(8):
        status.append_record(
            directory / status.HEARTBEATS,
            {"event": "heartbeat", "time": time.time() + 60 + k, "plan_version": plan_version,
             "step": k, "progress": 0.99, "samples_per_s": 1e6},
        )  # fmt: skip


def test_a_status_directory_planted_for_another_users_job_is_ignored(
    runnable_by_others: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    live = runnable_by_others
    user = job_user()
    assert user.pw_uid != 0
    caplog.set_level(logging.INFO)
    spool = tmp_path / "spool"
    config = config_for(live, spool, checkpoint_grace_s=GRACE_S, stop_timeout_s=30.0)
    env = {**os.environ, **live.env}
    job_id = subprocess.run(
        ["sbatch", "--parsable", "--hold", f"--uid={user.pw_name}", f"--gid={user.pw_gid}", "-D", "/",
         "-o", "/dev/null", "-J", "victim", "--gres=gpu:1", "-c", "2", "--mem=2G",
         f"--comment={encode_comment({'model': 'resnet50'})}",
         # The job never checkpoints: it ignores the signal and writes no marker.
         "--wrap", "trap '' USR1; sleep 600"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip().split(";")[0]  # fmt: skip
    try:
        directory = _plant(spool, job_id)
        assert directory.stat().st_uid == 0
        store = Store(config.store_path)
        base = ProfileStore.builtin()
        # As `mosaic controller` builds it (cli/controller_cmd.py).
        refiner = Refiner(store, base, lambda p: build_scheduler(SCHEDULER, p), config.spool_dir)
        client = CliSlurm(config.slurm_env, timeout_s=config.command_timeout_s)
        controller = Controller(client, store, config, build_scheduler(SCHEDULER, base), refiner=refiner)

        first = controller.tick()
        assert first.ok and first.result is not None and first.result.done, first.to_json()
        running = wait_state(config, job_id, "RUNNING")
        assert running.user_id == user.pw_uid  # squeue's UserId, as the controller reads it
        record = store.job(job_id)
        assert record is not None and record.plan_version >= 1
        _fake_heartbeats(directory, record.plan_version)
        for _ in range(2):
            assert controller.tick().ok
        record = store.job(job_id)
        assert record is not None and record.progress is None, record
        assert store.observations() == []

        # A resize stops the job: the planted marker does not end the wait for its checkpoint.
        started = time.monotonic()
        report = apply_resize(client, store, config, job_id, 2)
        waited = time.monotonic() - started
        assert report["ok"], report
        assert waited >= GRACE_S, f"the stop took {waited:.1f} s: the planted marker counted"
        assert any(f"['{job_id}'] did not checkpoint within" in r.getMessage() for r in caplog.records)
        # Requeued, the job waits out the cluster's cred_expire (10 s) before Slurm starts it
        # again; on a loaded 2-core machine that has taken over 30 s.
        again = wait_state(config, job_id, "RUNNING", timeout_s=90.0)
        assert len(again.nodes) == 1 and jobs(config)[job_id].gpus_per_node == 2

        ignored = [r.getMessage() for r in caplog.records if "status ignored" in r.getMessage()]
        assert ignored == [
            f"job {job_id}: status ignored: {directory}: owned by uid 0, not the job's user {user.pw_uid}"
        ]
    finally:
        subprocess.run(["scancel", job_id], env=env, capture_output=True)
        wait_gone = time.monotonic() + 20
        while time.monotonic() < wait_gone and job_id in {
            j.id for j in jobs(config).values() if j.state not in {"CANCELLED", "COMPLETED", "FAILED"}
        }:
            time.sleep(0.2)
