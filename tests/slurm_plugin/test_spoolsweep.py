"""What ended jobs left in the spool is removed a while after Slurm stops listing them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from planner.config import build_scheduler, preset
from planner.core.errors import ConfigError
from planner.core.model import Assignment
from slurm_plugin import planfile
from slurm_plugin.controller import spoolsweep
from slurm_plugin.controller.config import ControllerConfig, controller_config
from slurm_plugin.controller.loop import Controller
from slurm_plugin.controller.spoolsweep import SpoolSweeper, sweep_spool
from slurm_plugin.store import Store
from tests.slurm_plugin.test_controller_loop import FakeSlurm, no_wait
from wrapper import status

DAY = 86400.0
NOW = time.time()


def aged(path: Path, seconds: float) -> Path:
    os.utime(path, (NOW - seconds, NOW - seconds), follow_symlinks=False)
    return path


def job_files(spool: Path, job_id: str, age_s: float) -> list[Path]:
    """A planned job under mosaic-run: its plan file (and lock), its status directory with
    heartbeats and checkpoint marker, all last changed ``age_s`` ago."""
    planfile.write_plan(spool, job_id, None, Assignment((("n1", 0),), 4, 8.0))
    directory = status.status_dir(spool, job_id)
    directory.mkdir()
    files = [directory / status.HEARTBEATS, directory / status.CHECKPOINT_MARKER]
    for f in files:
        f.write_text("{}\n")
    plan = planfile.plan_path(spool, job_id)
    lock = plan.with_name(f".{plan.name}.lock")
    lock.touch()
    return [aged(p, age_s) for p in (plan, lock, *files, directory)]


def listing(spool: Path) -> set[str]:
    return {p.name for p in (spool / "plans").iterdir()} | {p.name for p in (spool / "status").iterdir()}


def test_only_entries_of_jobs_slurm_no_longer_lists_and_older_than_the_keep_time_go(tmp_path):
    planfile.ensure_spool(tmp_path)
    job_files(tmp_path, "1", 3 * DAY)  # still listed (a long pending job): kept whatever its age
    gone = job_files(tmp_path, "7", 2 * DAY)
    job_files(tmp_path, "8", 3600.0)  # ended an hour ago: kept for the day
    old = job_files(tmp_path, "9", 2 * DAY)
    aged(old[2], 60.0)  # ... but its heartbeat log was appended to a minute ago: the job still lives
    temp = tmp_path / "plans" / ".7.json.x1y2z3"  # a crash mid-write
    temp.touch()
    aged(temp, 2 * DAY)

    result = sweep_spool(tmp_path, {"1", "2"}, NOW, DAY)

    assert (result.jobs_removed, result.kept_listed, result.kept_recent, result.errors) == (1, 1, 2, 0)
    assert result.entries_removed == 4  # plan, lock, temporary file, status directory
    assert not any(os.path.lexists(p) for p in (*gone, temp))
    assert listing(tmp_path) == {
        "1.json",
        ".1.json.lock",
        "1",
        "8.json",
        ".8.json.lock",
        "8",
        "9.json",
        ".9.json.lock",
        "9",
    }
    assert sweep_spool(tmp_path, {"1"}, NOW + 2 * DAY, DAY).jobs_removed == 2  # a day later: 8 and 9


def test_an_entry_made_after_the_listing_is_never_stale(tmp_path):
    # A job that started after squeue was read is not in the listing; its status directory,
    # made since, is newer than the listing itself whatever the keep time.
    planfile.ensure_spool(tmp_path)
    listed_at = time.time()
    status.status_dir(tmp_path, "5").mkdir()
    assert sweep_spool(tmp_path, set(), listed_at - 1.0, 0.0).kept_recent == 1
    assert status.status_dir(tmp_path, "5").is_dir()


def test_odd_entries_are_left_alone_and_a_link_is_removed_without_following_it(tmp_path):
    planfile.ensure_spool(tmp_path)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "precious").write_text("x")
    link = status.status_dir(tmp_path, "12")
    link.symlink_to(target)
    aged(link, 2 * DAY)
    (tmp_path / "plans" / "notes.txt").touch()  # not a plan file's name
    (tmp_path / "status" / "bad name!").mkdir()  # status/ is world-writable: not a job id
    for odd in (tmp_path / "plans" / "notes.txt", tmp_path / "status" / "bad name!"):
        aged(odd, 2 * DAY)

    result = sweep_spool(tmp_path, set(), NOW, DAY)

    assert result.jobs_removed == 1 and result.errors == 0
    assert not os.path.lexists(link) and (target / "precious").read_text() == "x"
    assert (tmp_path / "plans" / "notes.txt").exists() and (tmp_path / "status" / "bad name!").is_dir()


def test_a_directory_that_cannot_be_emptied_is_counted_and_tried_again(tmp_path, monkeypatch, caplog):
    # A controller that is not root cannot empty another user's status directory: it is
    # renamed away (no longer read), stays, and is named in one warning.
    planfile.ensure_spool(tmp_path)
    job_files(tmp_path, "7", 2 * DAY)
    monkeypatch.setattr(planfile.shutil, "rmtree", lambda path, ignore_errors=False: None)
    monkeypatch.setattr(spoolsweep.shutil, "rmtree", lambda path, ignore_errors=False: None)
    ticks = iter([0.0, 1.0, 700.0])
    sweeper = SpoolSweeper(tmp_path, DAY, monotonic=lambda: next(ticks))
    first = sweeper.maybe_sweep(set(), NOW)
    assert first is not None and (first.jobs_removed, first.leftovers) == (1, 1)
    assert [p.name.startswith(".retired-7-") for p in (tmp_path / "status").iterdir()] == [True]
    assert sweeper.maybe_sweep(set(), NOW) is None  # a second later: not yet
    again = sweeper.maybe_sweep(set(), NOW)
    assert again is not None and again.leftovers == 1
    assert sum("cannot be emptied" in r.getMessage() for r in caplog.records) == 1


def test_the_controller_sweeps_after_a_tick_and_not_on_a_dry_run(tmp_path):
    config = ControllerConfig(spool_dir=tmp_path, checkpoint_grace_s=0.0, stop_timeout_s=0.1)
    slurm, store = FakeSlurm(), Store(config.store_path)
    planfile.ensure_spool(tmp_path)
    listed = {j.id for j in slurm.jobs()}
    assert "70" not in listed and "2" in listed
    ended = job_files(tmp_path, "70", 2 * DAY)
    running = job_files(tmp_path, "2", 2 * DAY)

    def controller() -> Controller:
        return Controller(slurm, store, config, build_scheduler(preset("fifo")), sleep=no_wait)

    assert controller().tick(dry_run=True).ok and all(p.exists() for p in ended)
    assert controller().tick().ok
    assert not any(os.path.lexists(p) for p in ended)
    assert planfile.plan_path(tmp_path, "2").exists() and running[-1].is_dir()


def test_the_keep_time_is_a_controller_setting():
    assert ControllerConfig().spool_keep_s == DAY
    assert controller_config({"spool_keep_s": 3600}).spool_keep_s == 3600.0
    with pytest.raises(ConfigError, match="spool_keep_s: expected a non-negative number"):
        controller_config({"spool_keep_s": -1})
