"""The controller's tick and loop against a fake Slurm (failures, safety, rate limits, config)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from planner.config import build_scheduler, preset
from planner.core.errors import ConfigError
from planner.core.model import Assignment
from slurm_plugin import planfile
from slurm_plugin.controller.actuate import CREDENTIAL_MARGIN_S, START_SETTLE_S, Actuator
from slurm_plugin.controller.config import ControllerConfig, controller_config
from slurm_plugin.controller.loop import Controller, Observer
from slurm_plugin.controller.observe import build_observation
from slurm_plugin.controller.rounddiff import Action, Kind
from slurm_plugin.directives import encode_comment
from slurm_plugin.slurm.parse import parse_sinfo_json, parse_squeue_json
from slurm_plugin.slurm.runner import SlurmCommandError
from slurm_plugin.store import Store
from wrapper import status as wrapper_status

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


class FakeSlurm:
    """Serves the captured squeue/sinfo output and records every change asked of it."""

    def __init__(self) -> None:
        self._jobs = parse_squeue_json((DATA / "squeue.json").read_text())
        self._nodes = parse_sinfo_json((DATA / "sinfo.json").read_text())
        self.down = False
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.fields: dict[str, dict[str, str]] = {}
        self.starts_on_release = True

    def _check(self, name: str) -> None:
        if self.down:
            raise SlurmCommandError([name], 1, "slurm_load_jobs error: Unable to contact slurm controller")

    def jobs(self):
        self._check("squeue")
        return list(self._jobs)

    def nodes(self):
        self._check("sinfo")
        return list(self._nodes)

    def update(self, job_ids, fields):
        self.calls.append(("update", tuple(job_ids)))
        for job_id in job_ids:
            self.fields.setdefault(job_id, {}).update(fields)

    def requeue_hold(self, job_ids):
        self.calls.append(("requeuehold", tuple(job_ids)))
        self._jobs = [replace(j, state="PENDING", priority=0) if j.id in job_ids else j for j in self._jobs]

    def hold(self, job_ids):
        self.calls.append(("hold", tuple(job_ids)))

    def release(self, job_ids):
        """Slurm starts a released job on the nodes its last update asked for."""
        self.calls.append(("release", tuple(job_ids)))
        if not self.starts_on_release:  # released, waiting for Slurm's next scheduling pass
            self._jobs = [replace(j, priority=1) if j.id in job_ids else j for j in self._jobs]
            return
        for job_id in job_ids:
            nodes = tuple(self.fields.get(job_id, {}).get("ReqNodeList", "n1").split(","))
            self._jobs = [
                replace(j, state="RUNNING", priority=1, nodes=nodes, gpu_indices=()) if j.id == job_id else j
                for j in self._jobs
            ]

    def signal(self, job_id, name):
        self.calls.append(("signal", (job_id,)))

    def submit(self, script, extra, comment, env):
        raise AssertionError("not used")

    def sacct_runs(self, since, until):
        return []


@pytest.fixture
def setup(tmp_path):
    config = ControllerConfig(spool_dir=tmp_path, checkpoint_grace_s=0.0, stop_timeout_s=0.1)
    slurm = FakeSlurm()
    store = Store(config.store_path)
    return config, slurm, store


def no_wait(seconds: float) -> None:
    """The actuator's waits (the credential's second, its polls) take a unit test no wall time;
    the tests of those waits step a :class:`SteppedClock` instead."""


def _controller(config, slurm, store, name="las"):
    return Controller(slurm, store, config, build_scheduler(preset(name)), sleep=no_wait)


def test_slurm_unreachable_means_no_action_and_no_round(setup):
    config, slurm, store = setup
    slurm.down = True
    report = _controller(config, slurm, store).tick()
    assert not report.ok and "Unable to contact" in (report.error or "") and report.round_id is None
    assert slurm.calls == [] and store.rounds() == [] and store.tick_counts() == (1, 1)
    assert "mosaic_tick_failures_total 1" in (config.spool_dir / "metrics.prom").read_text()


def test_no_usable_node_never_turns_into_a_mass_requeue(setup):
    config, slurm, store = setup
    slurm._nodes = [replace(n, state="down") for n in slurm._nodes]
    report = _controller(config, slurm, store).tick()
    # Jobs running on nodes Slurm calls down are left to Slurm: none is stopped or started.
    assert report.actions == [] and slurm.calls == []
    slurm._nodes = []  # sinfo answering with nothing is no different
    assert _controller(config, slurm, store).tick().actions == [] and slurm.calls == []


def test_dry_run_plans_but_changes_nothing(setup):
    config, slurm, store = setup
    report = _controller(config, slurm, store).tick(dry_run=True)
    assert report.ok and report.actions and slurm.calls == []
    assert store.unfinished_round() is None and store.rounds()[0].status == "dry-run"


def test_a_tick_plans_and_applies(setup):
    config, slurm, store = setup
    report = _controller(config, slurm, store, "fifo").tick()
    assert report.ok and report.round_id is not None
    released = {ids for kind, ids in slurm.calls if kind == "release"}
    assert released and all(len(ids) == 1 for ids in released)
    assert store.unfinished_round() is None
    # New jobs were recorded with their original GPU request.
    assert store.job("2").num_gpus == 1  # type: ignore[union-attr]


def test_the_loop_survives_a_failing_tick(setup, monkeypatch):
    config, slurm, store = setup
    controller = _controller(config, slurm, store)
    calls = []

    def boom(dry_run=False):
        calls.append(1)
        raise RuntimeError("a bug in one tick")

    monkeypatch.setattr(controller, "tick", boom)
    controller.run_forever(sleep=lambda s: None, ticks=3)
    assert len(calls) == 3 and store.tick_counts() == (3, 3)


class SteppedClock:
    """Wall time that only moves when the code under test sleeps."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_a_job_stopped_and_started_in_one_round_is_released_in_a_later_second(setup):
    # slurmd refuses a job credential made in the second the job's previous run ended in
    # (the relaunch would end FAILED: "Job credential revoked"); a fresh start never waits.
    config, slurm, store = setup
    clock = SteppedClock(1e9 + 0.7)
    released_at = {}
    release = slurm.release
    slurm.release = lambda ids: (released_at.update({j: clock() for j in ids}), release(ids))
    obs = build_observation(clock(), slurm.jobs(), slurm.nodes(), {}, config)
    resized = Assignment((("n1", 1), ("n1", 2)), 6, 8.0)
    actions = [
        Action(Kind.STOP, "1", "r1-stop-1", "resized"),
        Action(Kind.START, "2", "r1-start-2", "started", Assignment((("n1", 0),), 4, 8.0)),
        Action(Kind.START, "1", "r1-start-1", "resized", resized),
    ]
    result = Actuator(slurm, store, config, clock=clock, sleep=clock.sleep).apply(obs, actions, 1)
    assert sorted(result.done) == ["r1-start-1", "r1-start-2", "r1-stop-1"], result
    assert released_at["2"] == 1e9 + 0.7  # no wait for a job that did not just stop
    assert released_at["1"] >= 1e9 + 1 + CREDENTIAL_MARGIN_S and len(clock.sleeps) == 1


def test_a_job_requeued_by_another_actuator_waits_a_second_from_when_this_one_saw_it(setup):
    # Job 3 of the fixture is requeued and held: Slurm reset its SubmitTime to the requeue, on
    # slurmctld's clock, which this host's may be seconds off. So the wait is measured on this
    # host's clock alone, from when this actuator first saw the requeue.
    config, slurm, store = setup
    requeued = next(j for j in slurm.jobs() if j.id == "3")
    assert requeued.requeues == 1
    start = Action(Kind.START, "3", "r1-start-3", "started", Assignment((("n1", 0),), 1, 2.0))
    for skew in (-3.6, 0.4, 3.6):  # this host's clock behind, nearly with, ahead of slurmctld's
        slurm._jobs = [replace(j, state="PENDING", priority=0) if j.id == "3" else j for j in slurm._jobs]
        clock = SteppedClock(requeued.submit_time + skew)
        obs = build_observation(clock(), slurm.jobs(), slurm.nodes(), {}, config)
        actuator = Actuator(slurm, store, config, clock=clock, sleep=clock.sleep)
        assert actuator.apply(obs, [start], 1).done == ["r1-start-3"]
        assert clock.sleeps == [pytest.approx(1 + CREDENTIAL_MARGIN_S)], skew
        # Seen a round earlier, long enough ago: released at once.
        clock.now += 5.0
        slurm._jobs = [replace(j, state="PENDING", priority=0) if j.id == "3" else j for j in slurm._jobs]
        assert actuator.apply(obs, [start], 2).done
        assert len(clock.sleeps) == 1


def test_a_start_waits_for_slurm_to_run_the_job_and_the_next_tick_for_what_it_did_not(setup):
    # A released job reads as pending (not held) until Slurm's next scheduling pass; planned
    # then, it would be started a second time and its GPUs handed to another job.
    config, slurm, store = setup
    slurm.starts_on_release = False
    clock = SteppedClock(2e9)  # long after the fixture's requeue: no credential wait
    actuator = Actuator(slurm, store, config, clock=clock, sleep=clock.sleep)
    obs = build_observation(clock(), slurm.jobs(), slurm.nodes(), {}, config)
    start = Action(Kind.START, "2", "r1-start-2", "started", Assignment((("n1", 0),), 4, 8.0))
    starts_at = clock() + 0.3
    served = slurm.jobs
    slurm.jobs = lambda: [
        replace(j, state="RUNNING") if j.id == "2" and clock() >= starts_at else j for j in served()
    ]
    assert actuator.apply(obs, [start], 1).done == ["r1-start-2"]
    assert starts_at <= clock() < starts_at + 0.2  # verified running before the apply returned
    assert [a[5] for a in store.actions(1) if a[4] == "done"] == ["started (running)"]
    before = clock()
    assert actuator.settle() == [] and clock() == before  # nothing left waiting: no wait
    # One Slurm does not start within START_SETTLE_S stays released (its nodes may still be
    # in use by a job stopped this round); the next tick waits for it once more, then plans.
    assert actuator.apply(obs, [replace(start, job_id="3", request_id="r2-start-3")], 2).done
    done = [a for a in store.actions(2) if a[4] == "done"]
    assert done[0][5].startswith("started (released; Slurm: pending")
    before = clock()
    assert actuator.settle() == ["3"] and START_SETTLE_S <= clock() - before < START_SETTLE_S + 0.2
    assert actuator.settle() == []


def test_a_start_slurm_will_never_run_is_held_again_reported_and_not_retried(setup):
    # The --ntasks bug: an update Slurm accepts but never runs (BadConstraints) was reported
    # done, and started again every tick while the job sat pending.
    config, slurm, store = setup
    slurm.starts_on_release = False
    served = slurm.jobs
    slurm.jobs = lambda: [
        replace(j, priority=1, reason="BadConstraints") if j.id == "2" and ("release", ("2",)) in slurm.calls
        else j for j in served()
    ]  # fmt: skip
    clock = SteppedClock(2e9)
    actuator = Actuator(slurm, store, config, clock=clock, sleep=clock.sleep)
    obs = build_observation(clock(), slurm.jobs(), slurm.nodes(), {}, config)
    start = Action(Kind.START, "2", "r1-start-2", "placed", Assignment((("n1", 0),), 4, 8.0))
    result = actuator.apply(obs, [start], 1)
    assert result.done == [] and "Reason=BadConstraints" in result.failed[0][1]
    assert ("hold", ("2",)) in slurm.calls
    assert "refused: Slurm will not run the job" in slurm.fields["2"]["AdminComment"]
    calls = len(slurm.calls)
    again = actuator.apply(obs, [replace(start, request_id="r2-start-2")], 2)
    assert again.failed[0][1].startswith("Slurm refused this start before") and len(slurm.calls) == calls
    # Once the job has left Slurm (cancelled by its user) the refusal is forgotten: a daemon
    # that runs for months keeps nothing per job it no longer sees.
    gone = build_observation(clock(), [j for j in slurm.jobs() if j.id != "2"], slurm.nodes(), {}, config)
    actuator.apply(gone, [], 3)
    assert "2" not in actuator._refused


def test_restart_rate_limit_keeps_a_job_running(setup):
    config, slurm, store = setup
    config = replace(config, max_restarts_per_hour=2)
    for k in range(2):
        store.log_action(f"r{k}-stop-1", k, "1", "stop", "done", "preempted", 1e12 - 10)
    obs = build_observation(1e12, slurm.jobs(), slurm.nodes(), {}, config)
    actuator = Actuator(slurm, store, config, clock=lambda: 1e12)
    result = actuator.apply(obs, [Action(Kind.STOP, "1", "r9-stop-1", "preempted")], 9)
    assert result.done == [] and result.skipped[0][1].startswith("rate limit: 2 restarts")
    assert slurm.calls == []


def test_controller_config_rejects_unknown_keys_and_bad_values():
    with pytest.raises(ConfigError, match=r"unknown key 'round'; valid keys: partitions, spool_dir, round_s"):
        controller_config({"round": 60})
    with pytest.raises(ConfigError, match="round_s: expected a positive number"):
        controller_config({"round_s": 0})
    with pytest.raises(ConfigError, match="partitions: expected a non-empty list"):
        controller_config({"partitions": []})
    with pytest.raises(ConfigError, match="not a signal name"):
        controller_config({"checkpoint_signal": "USR1;rm"})
    config = controller_config({"spool_dir": "/srv/m", "max_restarts_per_hour": 3}, round_s=30)
    assert config.spool_dir == Path("/srv/m") and config.round_s == 30.0 and config.max_restarts_per_hour == 3


def test_a_start_slurm_ran_before_the_actuator_looked_is_done_and_named_in_the_admin_comment(setup):
    # A job released earlier (e.g. by a controller that died before it saw the job start) that
    # Slurm started after this round saw it pending: the store records the start as done, so
    # the AdminComment must name it too (the audit trail names the store's last action).
    config, slurm, store = setup
    sj = next(j for j in slurm.jobs() if j.state == "RUNNING")
    g = sj.gpus_held_per_node
    mem_gb = (sj.memory_mb_per_node() or 0) * len(sj.nodes) / 1024
    planned = Assignment(tuple((n, k) for n in sj.nodes for k in range(g)), sj.cpus, mem_gb)
    obs = build_observation(2e9, slurm.jobs(), slurm.nodes(), {}, config)
    start = Action(Kind.START, sj.id, f"r2-start-{sj.id}", "started", planned)
    clock = SteppedClock(2e9)
    result = Actuator(slurm, store, config, clock=clock, sleep=clock.sleep).apply(obs, [start], 2)
    assert result.done == [f"r2-start-{sj.id}"], result
    assert f"r2-start-{sj.id}" in slurm.fields[sj.id]["AdminComment"]
    assert ("release", (sj.id,)) not in slurm.calls  # nothing was started again


def test_a_start_slurm_runs_before_the_update_lands_is_done_and_named_in_the_admin_comment(setup):
    # The job was pending when the actuator looked and Slurm started it (released earlier)
    # before the update: scontrol refuses it ("no longer pending"); as planned, it is done.
    config, slurm, store = setup
    sj = next(j for j in slurm.jobs() if j.state == "PENDING")
    planned = Assignment((("n1", 0),), 4, 8.0)
    running = replace(
        sj, state="RUNNING", priority=1, nodes=("n1",), num_nodes=1, gpus_per_node=1, shards_per_node=0,
        cpus=4, mem_mb_per_node=8192, mem_mb_per_cpu=None,
    )  # fmt: skip
    update = slurm.update

    def started_meanwhile(job_ids, fields):
        if "StartTime" in fields:
            slurm._jobs = [running if j.id == sj.id else j for j in slurm._jobs]
            raise SlurmCommandError(["scontrol"], 1, "Job is no longer pending execution for job")
        update(job_ids, fields)

    slurm.update = started_meanwhile
    obs = build_observation(2e9, slurm.jobs(), slurm.nodes(), {}, config)
    start = Action(Kind.START, sj.id, f"r2-start-{sj.id}", "placed", planned)
    clock = SteppedClock(2e9)
    result = Actuator(slurm, store, config, clock=clock, sleep=clock.sleep).apply(obs, [start], 2)
    assert result.done == [f"r2-start-{sj.id}"] and result.failed == [], result
    assert f"r2-start-{sj.id}" in slurm.fields[sj.id]["AdminComment"]


def _with_comment(slurm, job_id, **changes):
    slurm._jobs = [replace(j, **changes) if j.id == job_id else j for j in slurm._jobs]


def _earlier_job(config, store, job_id, token):
    """What an earlier job with this id left: a finished record with service and progress,
    a plan file and a status directory with its heartbeats."""
    store.add_job(job_id, 4, {"model": "resnet50", **({"submission": token} if token else {})}, 100.0)
    store.account({job_id: (97.3, 0.875, 150.0, None)})
    store.mark_finished([job_id], 160.0)
    planfile.ensure_spool(config.spool_dir)
    planfile.plan_path(config.spool_dir, job_id).write_text('{"format": "old"}\n')
    status_dir = wrapper_status.status_dir(config.spool_dir, job_id)
    status_dir.mkdir()
    (status_dir / wrapper_status.HEARTBEATS).write_text('{"event": "heartbeat", "progress": 0.875}\n')
    return status_dir


def test_a_new_submission_with_an_earlier_jobs_id_starts_from_nothing(setup):
    """A Slurm controller started on fresh state numbers jobs from 1 again: the store's record
    of the earlier job 2 (4 GPUs after a resize, 97 GPU-s attained, 87.5 % done) must not
    become the new job 2's, nor its plan file or heartbeats."""
    config, slurm, store = setup
    status_dir = _earlier_job(config, store, "2", "a" * 16)
    _with_comment(slurm, "2", comment=encode_comment({"model": "bert", "submission": "b" * 16}))
    Observer(slurm, store, config).observe()
    record = store.job("2")
    assert record is not None and record.finished_s is None and record.plan_version == 0
    assert (record.num_gpus, record.attained_gpu_s, record.progress) == (1, 0.0, None)
    assert record.meta["submission"] == "b" * 16 and record.meta["model"] == "bert"
    assert not planfile.plan_path(config.spool_dir, "2").exists() and not status_dir.exists()
    assert not list((config.spool_dir / "status").iterdir())  # the renamed directory removed too


@pytest.mark.parametrize(
    ("token", "changes"),
    [
        ("a" * 16, {"comment": encode_comment({"submission": "a" * 16})}),  # the same submission
        ("a" * 16, {"comment": ""}),  # no token to compare (plain sbatch, or submitted before tokens)
        ("a" * 16, {"comment": encode_comment({"submission": "b" * 16}), "requeues": 1}),  # it ran
        ("a" * 16, {"comment": encode_comment({"submission": "b" * 16}), "state": "RUNNING"}),
    ],
)
def test_a_job_keeps_its_record_unless_it_is_a_new_submission_that_never_ran(setup, token, changes):
    """A user who rewrites the comment of a job that has run does not reset its attained service."""
    config, slurm, store = setup
    status_dir = _earlier_job(config, store, "2", token)
    _with_comment(slurm, "2", **changes)
    Observer(slurm, store, config).observe()
    record = store.job("2")
    assert record is not None and record.num_gpus == 4 and record.attained_gpu_s >= 97.3
    assert planfile.plan_path(config.spool_dir, "2").exists() and status_dir.exists()


def test_the_restart_rate_limit_counts_only_this_jobs_stops(setup):
    _, _, store = setup
    store.log_action("r1-stop-2", 1, "2", "stop", "done", "", 50.0)  # an earlier job 2's
    store.add_job("2", 1, {}, 100.0)
    store.log_action("r2-stop-2", 2, "2", "stop", "done", "", 120.0)
    assert store.stops_since("2", 0.0) == 1


def test_the_first_tick_and_then_one_an_hour_forget_what_ended_history_days_ago(setup):
    config, slurm, store = setup
    config = replace(config, history_days=1.0)
    clock = SteppedClock(1e9)
    controller = Controller(slurm, store, config, build_scheduler(preset("las")), clock=clock, sleep=no_wait)
    day = 86400.0
    store.add_job("old", 1, {}, now=1e9 - 3 * day)
    store.mark_finished(["old"], 1e9 - 2 * day)
    assert controller.tick().ok and store.job("old") is None  # the first tick of a process prunes
    store.add_job("older", 1, {}, now=1e9 - 3 * day)
    store.mark_finished(["older"], 1e9 - 2 * day)
    clock.now += 600.0
    assert controller.tick().ok and store.job("older") is not None  # not again within the hour
    clock.now += 3000.0
    assert controller.tick().ok and store.job("older") is None
    kept = Controller(slurm, store, replace(config, history_days=0.0), controller.scheduler, clock=clock)
    store.add_job("kept", 1, {}, now=1.0)
    store.mark_finished(["kept"], 2.0)
    assert kept.tick().ok and store.job("kept") is not None  # 0: history is never pruned
    with pytest.raises(ConfigError, match="history_days"):
        controller_config({"history_days": -1})


def test_a_tick_compacts_the_plans_of_all_but_the_newest_rounds(setup):
    config, slurm, store = setup
    config = replace(config, round_plans_kept=2)
    controller = _controller(config, slurm, store)
    for _ in range(4):
        assert controller.tick().ok
    whole = [r.round_id for r in store.rounds(10) if not r.plan.get("compacted")]
    assert len(store.rounds(10)) == 4 and len(whole) == 2 and whole == [r.round_id for r in store.rounds(2)]
    assert len(store.decision_times()) == 4
    with pytest.raises(ConfigError, match="round_plans_kept"):
        controller_config({"round_plans_kept": 0})
