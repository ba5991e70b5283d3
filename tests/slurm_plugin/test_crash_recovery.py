"""Completing a round a killed controller left half-applied, against a fake Slurm; and the
crash-point registry (``slurm_plugin/controller/faults.py``).

The regressions come from the crash campaign on the real test cluster
(``test_live_crash_points.py``): a job that exits once its checkpoint is saved (as
``mosaic-run`` does) was lost when the controller died between the checkpoint signal and
the requeuehold; and actions the dead controller had applied stayed 'planned' in the store
for ever.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from planner.config import build_scheduler, preset
from planner.core.codec import assignment_to_json
from planner.core.errors import InputError
from slurm_plugin import planfile
from slurm_plugin.controller import faults
from slurm_plugin.controller.actuate import START_SETTLE_S, Actuator
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.faults import CRASH_ENV, CRASH_POINTS, LOG_ENV, crash_point, parse_spec
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.observe import build_observation
from slurm_plugin.store import Store
from tests.slurm_plugin.test_controller_loop import (  # noqa: F401 (setup: a fixture)
    FakeSlurm,
    SteppedClock,
    _controller,
    setup,
)
from wrapper import status

ROOT = Path(__file__).resolve().parents[2]


def _dead_round(store, plan, actions, began):
    """What a controller killed mid-round leaves: the round 'applying', its actions 'planned'."""
    round_id = store.begin_round(began, {"assignments": plan})
    for request_id, job_id, kind, reason in actions:
        store.log_action(request_id, round_id, job_id, kind, "planned", reason, began)
    return round_id


def _mine(slurm):
    """The fixture's jobs as this test's user's (whose status directories are trusted)."""
    slurm._jobs = [replace(j, user_id=os.getuid()) for j in slurm._jobs]


def _ended(slurm, job_id):
    slurm._jobs = [replace(j, state="COMPLETED", nodes=()) if j.id == job_id else j for j in slurm._jobs]


def _checkpointed(config, job_id, at):
    directory = planfile.status_dir(config.spool_dir, job_id)
    directory.mkdir(parents=True, exist_ok=True)
    status.write_marker(directory / status.CHECKPOINT_MARKER, {"time": at, "progress": 0.5})


def test_a_job_that_exited_after_its_checkpoint_before_the_requeuehold_is_requeued(setup):  # noqa: F811
    config, slurm, store = setup
    _mine(slurm)
    began = time.time() - 5
    round_id = _dead_round(store, {}, [("r1-stop-1", "1", "stop", "preempted")], began)
    # The dead controller's checkpoint signal reached job 1: it saved and exited, COMPLETED.
    _checkpointed(config, "1", began + 1)
    _ended(slurm, "1")
    comments = []
    update = slurm.update
    slurm.update = lambda ids, fields: (
        comments.append((ids, fields.get("AdminComment"))),
        update(ids, fields),
    )
    report = _controller(config, slurm, store, "fifo").tick()
    assert report.ok and report.completed_round == round_id
    assert slurm.calls[0] == ("requeuehold", ("1",)), slurm.calls
    assert store.action_status("r1-stop-1") == "done"
    # Its AdminComment names the stop, as an uninterrupted round writes it.
    assert comments[0] == (["1"], "mosaic r1-stop-1 preempted: stopped")


def test_a_job_that_ended_without_a_checkpoint_for_the_round_is_left_ended(setup):  # noqa: F811
    config, slurm, store = setup
    _mine(slurm)
    began = time.time() - 5
    round_id = _dead_round(store, {}, [("r1-stop-1", "1", "stop", "preempted")], began)
    _checkpointed(config, "1", began - 600)  # a marker, but from an earlier stop
    _ended(slurm, "1")  # it finished on its own
    report = _controller(config, slurm, store, "fifo").tick()
    assert report.ok and report.completed_round == round_id
    assert ("requeuehold", ("1",)) not in slurm.calls
    assert store.action_status("r1-stop-1") == "skipped"
    assert store.unfinished_round() is None


def test_actions_the_dead_controller_applied_are_recorded_done(setup):  # noqa: F811
    config, slurm, store = setup
    _mine(slurm)
    obs = build_observation(time.time(), slurm.jobs(), slurm.nodes(), {}, config)
    running = {j.id: assignment_to_json(j.assignment) for j in obs.snapshot.jobs if j.id in {"1", "7"}}
    began = time.time() - 5
    round_id = _dead_round(
        store,
        running,
        [
            ("r1-start-1", "1", "start", "placed"),  # released, running as planned: done
            ("r1-hold-2", "2", "hold", "waits"),  # held: done
            ("r1-start-6", "6", "start", "placed"),  # ended since: skipped
        ],
        began,
    )
    _ended(slurm, "6")
    report = _controller(config, slurm, store, "fifo").tick()
    assert report.ok and report.completed_round == round_id
    statuses = {a[0]: (a[4], a[5]) for a in store.actions(round_id)}
    assert statuses["r1-start-1"] == ("done", "placed (applied before a controller restart)")
    assert statuses["r1-hold-2"][0] == "done"
    assert statuses["r1-start-6"] == ("skipped", "placed (the job ended before the round was completed)")
    assert set(statuses) == {"r1-start-1", "r1-hold-2", "r1-start-6"}  # nothing left to re-apply
    assert store.rounds(5)[-1].actions == 2  # the round's count includes what the dead one applied


# -- the registry ----------------------------------------------------------------------


def test_crash_points_are_unset_by_default_and_a_spec_is_checked(monkeypatch):
    monkeypatch.delenv(CRASH_ENV, raising=False)
    crash_point("stop.signalled")  # no variable: nothing happens
    assert parse_spec("start.updated:2") == ("start.updated", 2)
    assert parse_spec("none") == ("none", 1)
    with pytest.raises(InputError, match=r"MOSAIC_CRASH_AT='start.update'.*registered: tick.observed"):
        parse_spec("start.update")
    with pytest.raises(InputError, match="whole number >= 1"):
        parse_spec("start.updated:0")
    monkeypatch.setenv(CRASH_ENV, "none")
    with pytest.raises(InputError, match="not registered"):
        crash_point("no.such.point")


def test_every_crash_point_is_called_once_in_the_sources_and_every_call_is_registered():
    sources = [
        ROOT / "slurm_plugin" / "controller" / "loop.py",
        ROOT / "slurm_plugin" / "controller" / "actuate.py",
        ROOT / "slurm_plugin" / "store.py",
        ROOT / "slurm_plugin" / "planfile.py",
    ]
    called = [name for path in sources for name in re.findall(r'crash_point\("([^"]+)"\)', path.read_text())]
    assert set(called) == set(CRASH_POINTS)
    assert len(CRASH_POINTS) == len(set(CRASH_POINTS))


def test_a_named_point_kills_its_process_at_the_nth_time_and_logs_the_points_reached(tmp_path):
    log = tmp_path / "points"
    code = (
        "from slurm_plugin.controller.faults import crash_point\n"
        "for _ in range(3):\n"
        "    crash_point('stop.signalled')\n"
        "    crash_point('stop.done')\n"
        "print('survived')\n"
    )
    env = {**os.environ, CRASH_ENV: "stop.done:2", LOG_ENV: str(log)}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == -9 and "survived" not in done.stdout
    assert log.read_text().split() == ["stop.signalled", "stop.done", "stop.signalled", "stop.done"]
    env[CRASH_ENV] = "none"
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and "survived" in done.stdout
    assert faults._reached == {}  # this process armed nothing


class StartsLater(FakeSlurm):
    """Slurm that runs a released job ``delay`` seconds (on ``clock``) after its release."""

    def __init__(self, clock, delay):
        super().__init__()
        self.clock, self.delay, self.starting = clock, delay, {}

    def release(self, job_ids):
        self.calls.append(("release", tuple(job_ids)))
        self.starting.update({j: self.clock() + self.delay for j in job_ids})
        self._jobs = [replace(j, priority=1) if j.id in job_ids else j for j in self._jobs]

    def jobs(self):
        for job_id, at in list(self.starting.items()):
            if self.clock() >= at:
                nodes = tuple(self.fields[job_id]["ReqNodeList"].split(","))
                self._jobs = [
                    replace(j, state="RUNNING", nodes=nodes, gpu_indices=()) if j.id == job_id else j
                    for j in self._jobs
                ]
                del self.starting[job_id]
        return super().jobs()


def test_jobs_released_by_a_completed_round_are_not_planned_as_pending_again(tmp_path):
    # Slurm runs a released job at its next scheduling pass: after the start's verification
    # gave up (START_SETTLE_S), before the next observation. The tick that completed a dead
    # controller's round must wait for it, as every tick does, or the fresh round plans the
    # job as pending once more.
    config = ControllerConfig(spool_dir=tmp_path, checkpoint_grace_s=0.0, stop_timeout_s=0.1)
    clock = SteppedClock(time.time())
    slurm = StartsLater(clock, START_SETTLE_S + 0.5)
    store = Store(config.store_path)
    _mine(slurm)
    plan = {"2": {"gpus": [["n2", 3]], "cpus": 2, "mem_gb": 4.0}}
    round_id = _dead_round(store, plan, [("r1-start-2", "2", "start", "placed")], clock() - 5)
    actuator = Actuator(slurm, store, config, clock=clock, sleep=clock.sleep)
    ctl = Controller(slurm, store, config, build_scheduler(preset("fifo")), clock=clock, actuator=actuator)
    report = ctl.tick()
    assert report.ok and report.completed_round == round_id
    assert store.action_status("r1-start-2") == "done"
    again = [a for a in store.actions(report.round_id) if a[2] == "2" and a[3] == "start"]
    assert not [a for a in again if a[5].startswith("placed")], again  # not started twice


def test_a_plan_file_write_removes_the_temporary_file_a_killed_writer_left(tmp_path):
    from planner.core.model import Assignment

    path = planfile.write_plan(tmp_path, "7", 1, Assignment((("n1", 0),), 2, 4.0))
    stale = path.with_name(f".{path.name}.k1ll3d00.tmp")  # write_atomic's temporary, never renamed
    stale.write_text("{")
    other = path.with_name(".70.json.k1ll3d00.tmp")  # another job's writer: not this one's to remove
    other.write_text("{")
    planfile.write_plan(tmp_path, "7", 2, Assignment((("n1", 1),), 2, 4.0))
    assert not stale.exists() and other.exists()
    assert planfile.read_plan(tmp_path, "7")["version"] == 2
