"""A job's status directory counts only when the job's user owns it (issue 15).

``<spool>/status/`` is world-writable (sticky, like ``/tmp``): any user can create the
directory of a job id not used yet and plant heartbeats or a checkpoint marker there. The
controller knows each job's user from squeue (``SlurmJob.user_id``) and ignores a directory
somebody else owns, in every reader of its tick: progress (the observer), heartbeat rates
(online refinement) and the checkpoint marker (the actuator's stop). Each case is checked
both ways: the same directory chowned to the job's user is read.

The directories are chowned to made-up uids, which needs root (as the live tests do).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from pathlib import Path

import pytest

from planner.core.plandoc import PlanFileError
from slurm_plugin import planfile
from slurm_plugin.controller.actuate import Actuator
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.observe import build_observation
from slurm_plugin.controller.rounddiff import Action, Kind
from slurm_plugin.store import Store
from tests.slurm_plugin.test_controller_loop import FakeSlurm, SteppedClock
from tests.slurm_plugin.test_refine import T0, Cluster, _beats, _controller, _job, _known
from wrapper import status

JOB_UID = 4242  # the job's user
OTHER_UID = 4343  # a user who created the job's status directory before it ran
LOGGERS = ("slurm_plugin.planfile", "slurm_plugin.controller.refine")

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def _plant(spool: Path, job_id: str, owner: int, *, progress: float = 0.9, marker_time: float = 5.0) -> Path:
    """The job's status directory: a heartbeat (``progress``), a checkpoint marker; owned by ``owner``."""
    directory = status.status_dir(spool, job_id)
    directory.mkdir(parents=True)
    status.append_record(directory / status.HEARTBEATS, {"event": "heartbeat", "progress": progress})
    status.write_marker(directory / status.CHECKPOINT_MARKER, {"job_id": job_id, "time": marker_time})
    os.chown(directory, owner, -1)
    return directory


def _ignored(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name in LOGGERS]


@as_root
def test_the_readers_ignore_a_directory_another_user_owns(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    directory = _plant(spool, "42", OTHER_UID)
    assert planfile.last_progress(spool, "42", JOB_UID) is None
    assert planfile.checkpoint_time(spool, "42", JOB_UID) is None
    with pytest.raises(PlanFileError, match=f"owned by uid {OTHER_UID}, not the job's user {JOB_UID}"):
        planfile.read_heartbeats(spool, "42", JOB_UID)
    with pytest.raises(PlanFileError, match="not the job's user"):
        planfile.read_checkpoint_marker(spool, "42", JOB_UID)
    # A job whose user is not known (None) is read as before.
    assert planfile.last_progress(spool, "42", None) == 0.9
    assert planfile.checkpoint_time(spool, "42", None) == 5.0
    # The job's own directory is read.
    os.chown(directory, JOB_UID, -1)
    assert planfile.last_progress(spool, "42", JOB_UID) == 0.9
    assert planfile.checkpoint_time(spool, "42", JOB_UID) == 5.0
    assert len(planfile.read_heartbeats(spool, "42", JOB_UID)) == 1


def test_an_ignored_directory_is_logged_once_per_job_and_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="slurm_plugin.planfile")
    spool = tmp_path / "spool"
    mine = os.getuid()
    for job_id in ("42", "43"):
        _plant(spool, job_id, mine)
    stranger = mine + 1  # the directories are not this job user's
    for _ in range(5):  # ticks, and the actuator's polling of a stopping job's marker
        assert planfile.last_progress(spool, "42", stranger) is None
        assert planfile.checkpoint_time(spool, "42", stranger) is None
    assert planfile.last_progress(spool, "43", stranger) is None
    messages = _ignored(caplog)
    assert len(messages) == 2, messages
    assert messages[0] == (
        f"job 42: status ignored: {spool}/status/42: owned by uid {mine}, not the job's user {stranger}"
    )
    assert messages[1].startswith("job 43: status ignored:")
    # Another reason for the same job is news.
    assert planfile.last_progress(spool, "42", stranger + 1) is None
    assert len(_ignored(caplog)) == 3


def test_what_is_remembered_as_logged_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planfile, "IGNORED_LOGGED_MAX", 3)
    monkeypatch.setattr(planfile, "_ignored_logged", {})
    spool = tmp_path / "spool"
    for k in range(10):
        _plant(spool, str(k), os.getuid())
        planfile.last_progress(spool, str(k), os.getuid() + 1)
    assert len(planfile._ignored_logged) == 3
    assert [key[1].split(":")[0] for key in planfile._ignored_logged] == ["7", "8", "9"]


@as_root
@pytest.mark.parametrize("owner", [JOB_UID, OTHER_UID])
def test_the_tick_takes_progress_and_rates_only_from_the_jobs_own_directory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, owner: int
) -> None:
    for name in LOGGERS:
        caplog.set_level(logging.WARNING, logger=name)
    config = ControllerConfig(spool_dir=tmp_path, checkpoint_grace_s=0.0, stop_timeout_s=0.1)
    running = replace(_job("11", "RUNNING", 9, gpu=0), user_id=JOB_UID)
    slurm = Cluster([running])
    store = Store(config.store_path)
    _known(store, running)
    _beats(tmp_path, "11", 1, [None, 100.0, 100.0, 100.0])
    with open(tmp_path / "status" / "11" / status.HEARTBEATS, "a") as f:
        f.write(
            json.dumps({"event": "heartbeat", "time": T0 + 60, "plan_version": 1, "progress": 0.9}) + "\n"
        )
    os.chown(tmp_path / "status" / "11", owner, -1)
    controller = _controller(config, slurm, store, refine=True)
    for _ in range(3):
        assert controller.tick().ok
    record = store.job("11")
    assert record is not None
    if owner == JOB_UID:
        assert record.progress == 0.9 and [p.job_id for p in store.observations()] == ["11"]
        assert _ignored(caplog) == []
    else:
        assert record.progress is None and store.observations() == []
        # Three ticks, two readers (progress, heartbeat rates): one line.
        (message,) = _ignored(caplog)
        assert message.startswith("job 11: status ignored:") and f"owned by uid {OTHER_UID}" in message


@as_root
@pytest.mark.parametrize("owner", [JOB_UID, OTHER_UID])
def test_a_stop_waits_for_the_jobs_own_checkpoint_marker(tmp_path: Path, owner: int) -> None:
    """A marker planted for a job before it ran (here dated far in the future, so that it
    looks newer than any signal) would end the wait for the job's checkpoint at once: the job
    would be requeued before it saved its work."""
    config = ControllerConfig(spool_dir=tmp_path, checkpoint_grace_s=5.0, stop_timeout_s=0.1)
    slurm = FakeSlurm()
    slurm._jobs = [replace(j, user_id=JOB_UID) if j.id == "1" else j for j in slurm._jobs]
    clock = SteppedClock(1e9)
    _plant(tmp_path, "1", owner, marker_time=2e9)
    store = Store(config.store_path)
    obs = build_observation(clock(), slurm.jobs(), slurm.nodes(), {}, config)
    result = Actuator(slurm, store, config, clock=clock, sleep=clock.sleep).apply(
        obs, [Action(Kind.STOP, "1", "r1-stop-1", "preempted")], 1
    )
    assert result.done == ["r1-stop-1"] and ("requeuehold", ("1",)) in slurm.calls
    waited = clock() - 1e9
    if owner == JOB_UID:
        assert waited < 1.0  # its marker is newer than the signal: no wait
    else:
        assert waited >= config.checkpoint_grace_s  # the planted marker does not count
