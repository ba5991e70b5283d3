"""The state store and the spool failing under the controller: a damaged or foreign store file,
a store of a newer schema, and a full disk (ENOSPC) while writing a plan file or the store.

The full disk is real: a tiny tmpfs mounted over the spool (root only; elsewhere the write is
made to fail with ENOSPC by a patched ``os.write``). Slurm is the fake of
``test_controller_loop``, which records every change asked of it.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from planner.config import build_scheduler, preset
from slurm_plugin import planfile
from slurm_plugin.cli.main import main
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.loop import Controller
from slurm_plugin.store import SCHEMA_VERSION, Store, StoreError
from tests.slurm_plugin.test_controller_loop import FakeSlurm, no_wait

CHANGES = {"update", "requeuehold", "hold", "release", "signal"}


def _controller(config: ControllerConfig, slurm: FakeSlurm, store: Store) -> Controller:
    return Controller(slurm, store, config, build_scheduler(preset("fifo")), sleep=no_wait)


def _changes(slurm: FakeSlurm) -> list[tuple[str, tuple[str, ...]]]:
    return [c for c in slurm.calls if c[0] in CHANGES]


def _store_with_a_round(path: Path) -> None:
    config = ControllerConfig(spool_dir=path.parent, checkpoint_grace_s=0.0, stop_timeout_s=0.1)
    store = Store(path)
    assert _controller(config, FakeSlurm(), store).tick().ok
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()


# -- a damaged, foreign or newer store ---------------------------------------------------


def _garbage(path: Path) -> None:
    path.write_bytes(os.urandom(8192))


def _truncated(path: Path) -> None:
    _store_with_a_round(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _zeroed_pages(path: Path) -> None:
    _store_with_a_round(path)
    data = bytearray(path.read_bytes())
    data[4096:] = bytes(len(data) - 4096)  # every page but the header page (the schema) zeroed
    path.write_bytes(bytes(data))


def _foreign(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, name TEXT)")
    db.execute("INSERT INTO jobs (name) VALUES ('not ours')")
    db.commit()
    db.close()


def _future(path: Path) -> None:
    _store_with_a_round(path)
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()


BAD_STORES = {
    "garbage": (_garbage, "not a Mosaic state store"),
    "truncated": (_truncated, "damaged"),
    "zeroed-pages": (_zeroed_pages, "damaged"),
    "foreign": (_foreign, "not a Mosaic state store"),
    "newer-schema": (_future, f"schema version {SCHEMA_VERSION + 1}, written by a newer Mosaic"),
}


@pytest.mark.parametrize("kind", sorted(BAD_STORES))
def test_a_bad_store_is_refused_naming_the_file_and_what_to_do(tmp_path, kind):
    spool = tmp_path / "spool"
    spool.mkdir()
    path = spool / "mosaic.db"
    make, expected = BAD_STORES[kind]
    make(path)
    before = path.read_bytes()
    config = ControllerConfig(spool_dir=spool, checkpoint_grace_s=0.0, stop_timeout_s=0.1)
    slurm = FakeSlurm()
    try:
        store = Store(path)
    except StoreError as e:
        message = str(e)
    else:
        # Opened (the damage is past the pages read at open): the tick must fail, act on nothing.
        report = _controller(config, slurm, store).tick()
        assert not report.ok
        message = report.error or ""
        store.close()
    assert str(path) in message and expected in message, message
    assert "\n" not in message  # one line, as every CLI error
    assert "move it away" in message or "newer Mosaic" in message
    assert _changes(slurm) == []
    if kind in {"garbage", "foreign", "newer-schema"}:
        assert path.read_bytes() == before  # refused before anything was written to it


def test_the_controller_command_on_a_bad_store_is_one_line_and_no_traceback(tmp_path, capsys):
    spool = tmp_path / "spool"
    spool.mkdir()
    _garbage(spool / "mosaic.db")
    # No Slurm is reachable at all: an action would fail loudly, and none is tried.
    code = main(["controller", "--once", "--spool", str(spool), "--slurm-conf", str(tmp_path / "none.conf")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("mosaic: error: ") and str(spool / "mosaic.db") in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_store_written_before_versions_were_recorded_opens_as_version_1(tmp_path):
    path = tmp_path / "mosaic.db"
    _store_with_a_round(path)
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 0")
    db.close()
    store = Store(path)
    assert store.last_round() is not None
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


# -- a full disk ---------------------------------------------------------------------------


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=False)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(directory: Path) -> Path:
    """Fill ``directory``'s file system to the last byte; returns the filler file."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as f:
        for size in (65536, 4096, 1):  # to the last byte
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * size)
    with pytest.raises(OSError) as full:
        (directory / "probe").write_bytes(b"x")
    assert full.value.errno == errno.ENOSPC
    (directory / "probe").unlink()
    return filler


def _plan_files(spool: Path) -> set[str]:
    plans = spool / "plans"
    return {p.name for p in plans.iterdir()} if plans.exists() else set()


def test_a_full_plans_directory_fails_the_starts_naming_the_file_and_releases_nothing(tmp_path):
    spool = tmp_path / "spool"
    with _tmpfs(spool / "plans", "64k") as plans:
        config = ControllerConfig(spool_dir=spool, checkpoint_grace_s=0.0, stop_timeout_s=0.1)
        store = Store(config.store_path)  # on the roomy disk: only the plan files cannot be written
        slurm = FakeSlurm()
        filler = _fill(plans)
        report = _controller(config, slurm, store).tick()
        assert report.result is not None
        starts = [x["request_id"] for x in report.actions if x["kind"] == "start"]
        assert starts and sorted(r for r, _ in report.result.failed) == sorted(starts)
        for _, why in report.result.failed:
            assert "cannot write the plan file" in why and str(plans) in why and "No space left" in why
        # No update, no release without its plan file. (The fixture's running job 1 is to be
        # relaunched with other CPUs: its stop went through, its start waits for the next tick.)
        assert [c for c in slurm.calls if c[0] == "release"] == []
        assert all(set(fields) <= {"AdminComment"} for fields in slurm.fields.values()), slurm.fields
        assert _plan_files(spool) == {"filler"} | {p for p in _plan_files(spool) if p.endswith(".lock")}
        # Space again: the next tick starts every job, each with its whole plan file.
        filler.unlink()
        again = _controller(config, slurm, store).tick()
        assert again.ok and again.result is not None and not again.result.failed and again.result.done
        released = [ids[0] for kind, ids in slurm.calls if kind == "release"]
        assert sorted(released) == sorted(x["job"] for x in report.actions if x["kind"] == "start")
        for job_id in released:
            assert planfile.read_plan(spool, job_id) is not None


def test_a_full_spool_fails_the_tick_cleanly_and_the_next_tick_with_space_works(tmp_path):
    with _tmpfs(tmp_path / "spool", "512k") as spool:
        config = ControllerConfig(spool_dir=spool, checkpoint_grace_s=0.0, stop_timeout_s=0.1)
        store = Store(config.store_path)
        store.log_tick(0.0, True, None, None, 0.0)  # the store exists, with its WAL
        slurm = FakeSlurm()
        filler = _fill(spool)
        report = _controller(config, slurm, store).tick()
        assert not report.ok and str(config.store_path) in (report.error or ""), report.error
        assert "free space" in (report.error or "")
        released = {ids[0] for kind, ids in slurm.calls if kind == "release"}
        assert all(planfile.read_plan(spool, j) is not None for j in released)  # none without its file
        for name in _plan_files(spool):
            if name.endswith(".json"):  # every plan file there is whole
                assert planfile.read_plan(spool, name.removesuffix(".json")) is not None
        assert not [p for p in (spool / "plans").glob(".*.json.*")] if (spool / "plans").exists() else True
        filler.unlink()
        # The store is not corrupted, and the next tick (space again) completes or plans afresh.
        assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        again = _controller(config, slurm, store).tick()
        assert again.ok, again.error
        assert store.unfinished_round() is None
        store.close()
        reopened = Store(config.store_path)
        assert reopened.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert reopened.last_round() is not None
        for job_id in {ids[0] for kind, ids in slurm.calls if kind == "release"}:
            assert planfile.read_plan(spool, job_id) is not None


def test_enospc_on_a_plan_write_leaves_the_old_plan_file_as_it_was(tmp_path, monkeypatch):
    """Without root (no tmpfs): the write itself fails with ENOSPC."""
    from planner.core.model import Assignment

    a = Assignment((("n1", 0),), 4, 8.0)
    path = planfile.write_plan(tmp_path, "7", None, a)
    before = path.read_bytes()
    real_write = os.write

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    class FullFile(io.FileIO):
        def write(self, data):
            return full(self.fileno(), bytes(data))

    real_fdopen = os.fdopen
    monkeypatch.setattr(
        os,
        "fdopen",
        lambda fd, mode="r", *a, **k: FullFile(fd, "wb") if "w" in mode else real_fdopen(fd, mode, *a, **k),
    )
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(planfile.PlanWriteError, match=r"7\.json: cannot write the plan file: No space left"):
        planfile.write_plan(tmp_path, "7", None, Assignment((("n1", 0), ("n1", 1)), 4, 8.0))
    monkeypatch.setattr(os, "write", real_write)
    assert path.read_bytes() == before
    assert [
        p.name for p in path.parent.iterdir() if p.name.startswith(".7.json.") and "lock" not in p.name
    ] == []
