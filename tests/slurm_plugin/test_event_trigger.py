"""Event-driven presets on the live controller (``trigger = "event"``: crius, crius-ddl,
sjf-bsbf, sjf-ffs): the daemon plans at each arrival and completion as well as every round."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from planner.config import PRESETS, build_scheduler, preset
from planner.core.errors import ConfigError
from slurm_plugin.cli import controller_cmd
from slurm_plugin.cli.main import main
from slurm_plugin.controller.config import ControllerConfig, controller_config
from slurm_plugin.controller.loop import Controller, TickReport, plan_events
from slurm_plugin.store import Store
from tests.slurm_plugin.test_controller_loop import FakeSlurm, SteppedClock

EVENT_PRESETS = sorted(name for name, c in PRESETS.items() if c.trigger == "event")


def test_the_event_driven_presets_are_the_published_ones():
    assert EVENT_PRESETS == ["crius", "crius-ddl", "sjf-bsbf", "sjf-ffs"]


def test_plan_events_are_arrivals_and_completions_in_the_managed_partitions():
    jobs = FakeSlurm().jobs()  # 1 runs, 2-4 pending, 5 runs in "other", 6 completing, 7 runs
    by_id = {j.id: j for j in jobs}
    assert plan_events(jobs, jobs, ["gpu"]) == []
    arrived = replace(by_id["2"], id="8")
    other = replace(by_id["2"], id="9", partition="other")
    assert plan_events(jobs, [*jobs, arrived, other], ["gpu"]) == ["job 8 arrived"]
    # A running job that ended, or that Slurm no longer lists, is a completion; one still
    # completing is not yet (its GPUs are not free); one the round stopped is pending again.
    ended = [replace(j, state="COMPLETED") if j.id == "1" else j for j in jobs]
    assert plan_events(jobs, ended, ["gpu"]) == ["job 1 ended (completed)"]
    assert plan_events(jobs, [j for j in jobs if j.id != "7"], ["gpu"]) == ["job 7 ended"]
    completing = [replace(j, state="COMPLETING") if j.id == "1" else j for j in jobs]
    requeued = [replace(j, state="PENDING", priority=0) if j.id == "1" else j for j in jobs]
    assert plan_events(jobs, completing, ["gpu"]) == plan_events(jobs, requeued, ["gpu"]) == []
    # A pending job cancelled frees nothing; a job of another partition is not ours.
    assert plan_events(jobs, [j for j in jobs if j.id not in {"2", "5"}], ["gpu"]) == []


def _run(tmp_path, name, trigger, arrive_after_polls=None, ticks=2):
    """Run the loop for ``ticks`` ticks on a stepped clock; a job arrives after the
    ``arrive_after_polls``-th wait. Returns the ticks' times, the waits and the squeue calls."""
    config = ControllerConfig(spool_dir=tmp_path, checkpoint_grace_s=0.0, stop_timeout_s=0.1, round_s=300)
    slurm = FakeSlurm()
    clock = SteppedClock(1e9)
    store = Store(config.store_path)
    controller = Controller(
        slurm,
        store,
        config,
        build_scheduler(preset(name)),
        clock=clock,
        sleep=clock.sleep,
        trigger=trigger,
    )
    polls = []
    jobs = slurm.jobs

    def listing():
        polls.append(clock())
        return jobs()

    slurm.jobs = listing
    waits = []

    def sleep(seconds):
        waits.append(seconds)
        clock.sleep(seconds)
        if arrive_after_polls is not None and len(waits) == arrive_after_polls:
            new = replace(next(j for j in slurm._jobs if j.id == "2"), id="8", priority=0)
            slurm._jobs = [*slurm._jobs, new]

    ticked = []
    try:
        controller.run_forever(sleep=sleep, ticks=ticks, before_tick=ticked.append)
    finally:
        store.close()
    return ticked, waits, polls


def test_crius_on_the_live_controller_plans_when_a_job_arrives(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="slurm_plugin.controller.loop")
    ticked, waits, _ = _run(tmp_path, "crius", "event", arrive_after_polls=2)
    # The arrival lands during the second 5 s wait and is seen at that poll: the next round
    # is planned then, not 300 s after the first.
    assert waits == [5.0, 5.0] and ticked[1] - ticked[0] < 300
    assert "planning now (event-driven): job 8 arrived" in caplog.text


def test_an_event_driven_controller_without_events_waits_the_round_and_polls(tmp_path):
    ticked, waits, polls = _run(tmp_path, "crius", "event")
    assert ticked[1] - ticked[0] == pytest.approx(300, abs=1e-6)
    assert len(waits) >= 300 / 5 - 1 and max(waits) <= 5.0 and len(polls) > 300 / 5


def test_a_round_based_controller_ignores_arrivals_until_its_round(tmp_path):
    ticked, waits, _ = _run(tmp_path, "las", "round", arrive_after_polls=1)
    assert len(waits) == 1 and ticked[1] - ticked[0] == pytest.approx(300, abs=1e-6)


def test_mosaic_controller_runs_an_event_driven_preset_event_driven(tmp_path, monkeypatch, capsys):
    built = {}

    class Recording:
        def __init__(self, *args, **kwargs):
            built.update(kwargs, scheduler=args[3].name)

        def tick(self, dry_run=False):
            return TickReport(0.0, ok=True)

    monkeypatch.setattr(controller_cmd, "Controller", Recording)
    assert main(["controller", "--scheduler", "crius", "--once", "--spool", str(tmp_path)]) == 0
    assert built["scheduler"] == "crius" and built["trigger"] == "event"
    err = capsys.readouterr().err
    assert "crius is event-driven" in err and "this single tick plans once" in err
    assert main(["controller", "--scheduler", "las", "--once", "--spool", str(tmp_path)]) == 0
    assert built["trigger"] == "round" and "event-driven" not in capsys.readouterr().err
    with pytest.raises(ValueError, match="trigger"):
        Controller(
            FakeSlurm(), Store(tmp_path / "x.db"), ControllerConfig(spool_dir=tmp_path), None, trigger="x"
        )  # type: ignore[arg-type]


def test_the_event_poll_is_a_controller_setting():
    assert controller_config({"event_poll_s": 2}).event_poll_s == 2.0
    assert ControllerConfig().event_poll_s == 5.0
    with pytest.raises(ConfigError, match="event_poll_s"):
        controller_config({"event_poll_s": 0})
