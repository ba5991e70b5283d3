"""One round at a time per spool: a tick and ``mosaic resize`` (or two controllers) exclude each other."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from planner.config import build_scheduler, preset
from slurm_plugin.controller import loop, resize
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.resize import ResizeError, apply_resize
from slurm_plugin.controller.roundlock import LOCK_NAME, RoundBusy, round_lock
from slurm_plugin.store import Store
from tests.slurm_plugin.test_controller_loop import FakeSlurm, no_wait

HOLDER = """
import sys, time
from pathlib import Path
from slurm_plugin.controller.roundlock import round_lock
with round_lock(Path(sys.argv[1]), 5.0):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def world(tmp_path):
    config = ControllerConfig(spool_dir=tmp_path, checkpoint_grace_s=0.0, stop_timeout_s=0.1)
    return config, FakeSlurm(), Store(config.store_path)


@pytest.fixture
def other_process_holds_the_lock(tmp_path):
    """A separate process (another controller, a resize) holding the spool's lock."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=os.environ
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    yield holder
    holder.kill()
    holder.wait()


def test_a_second_holder_waits_then_gives_up_naming_the_lock(tmp_path):
    now = [0.0]
    with round_lock(tmp_path, 1.0):
        with (
            pytest.raises(RoundBusy, match=LOCK_NAME),
            round_lock(tmp_path, 1.0, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s)),
        ):
            pass  # pragma: no cover - never entered
        assert now[0] >= 1.0  # it polled for the whole wait before giving up
    with round_lock(tmp_path, 0.0):  # released on leaving the block
        pass


def test_a_killed_holder_never_leaves_the_spool_locked(tmp_path, other_process_holds_the_lock):
    with pytest.raises(RoundBusy), round_lock(tmp_path, 0.1):
        pass  # pragma: no cover
    other_process_holds_the_lock.send_signal(signal.SIGKILL)
    other_process_holds_the_lock.wait()
    with round_lock(tmp_path, 2.0):
        assert (tmp_path / LOCK_NAME).read_text().strip() == str(os.getpid())


def test_a_tick_during_another_round_acts_on_nothing_and_says_why(
    world, other_process_holds_the_lock, monkeypatch
):
    config, slurm, store = world
    monkeypatch.setattr(loop, "TICK_LOCK_WAIT_S", 0.2)
    report = Controller(slurm, store, config, build_scheduler(preset("fifo")), sleep=no_wait).tick()
    assert not report.ok and "mosaic resize" in (report.error or "")
    assert slurm.calls == [] and store.rounds() == [] and store.tick_counts() == (1, 1)
    other_process_holds_the_lock.kill()
    other_process_holds_the_lock.wait()
    assert Controller(slurm, store, config, build_scheduler(preset("fifo")), sleep=no_wait).tick().ok


def test_a_resize_during_a_tick_touches_no_job(world, other_process_holds_the_lock, monkeypatch):
    config, slurm, store = world
    monkeypatch.setattr(resize, "RESIZE_LOCK_WAIT_S", 0.2)
    started = time.monotonic()
    with pytest.raises(ResizeError, match=r"job '1': not resized: .*round\.lock"):
        apply_resize(slurm, store, config, "1", 1)
    assert time.monotonic() - started >= 0.2
    assert slurm.calls == [] and store.rounds() == [] and store.job("1") is None


def test_a_dry_run_resize_needs_no_lock(world, other_process_holds_the_lock):
    config, slurm, store = world
    report = apply_resize(slurm, store, config, "1", 1, dry_run=True)
    assert report["ok"] and report["actions"] and slurm.calls == []


def test_the_store_is_usable_by_both_sides(tmp_path):
    # The lock file lives next to the store and never gets in its way.
    store = Store(tmp_path / "mosaic.db")
    with round_lock(tmp_path, 0.0):
        store.log_tick(1.0, True, None, None, 0.1)
    assert store.tick_counts() == (1, 0)
