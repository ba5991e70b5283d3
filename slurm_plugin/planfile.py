"""The controller's side of the plan-file protocol: write, replace and remove a job's plan file.

``<spool>/plans/<job id>.json`` holds the job's current assignment and execution plan
(:mod:`planner.core.plandoc` for the document). Writes are

* serialised by a :class:`filelock.FileLock` (``<spool>/plans/.<job id>.lock``), so two
  controller processes never interleave versions;
* atomic (:func:`wrapper.atomic.write_atomic`): a temporary file in the same directory,
  fsynced, then ``os.replace`` — a job reading at any moment sees the old whole file or the
  new whole file, so readers take no lock (and need no write access to the spool);
* versioned: ``version`` is one more than the file it replaces;
* mode 0644 in a 0755 directory owned by the controller's user: the job can read its plan
  but neither change it nor replace it.

``<spool>/status/`` (mode 1777, like ``/tmp``) is where jobs answer (:mod:`wrapper.status`):
heartbeats (``heartbeat.jsonl``, one JSON object per line, ``progress`` in 0..1 when the job
knows it) and the checkpoint marker (``checkpoint.json`` with ``time``), written after a
checkpoint signal. :func:`read_checkpoint_marker`, :func:`read_heartbeats`,
:func:`checkpoint_time` and :func:`last_progress` are the controller's readers. Given the
job's uid (``owner_uid``: ``squeue``'s ``UserId``, :attr:`SlurmJob.user_id
<slurm_plugin.slurm.parse.SlurmJob.user_id>`) each insists that the job's user owns the
directory: ``status/`` is world-writable, so anyone could create the directory of a job id
not yet used and fake that job's progress or checkpoint marker. The first two raise on a
directory they cannot trust; the last two, which the controller's tick calls, read it as
empty and log why once per job.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import stat
import time
from pathlib import Path
from typing import Any

from filelock import FileLock

from planner.core import plandoc
from planner.core.errors import InputError, MosaicError
from planner.core.fields import loads_json
from planner.core.model import Assignment
from planner.core.plandoc import PlanFileError, parse_plan_document, plan_document
from slurm_plugin.controller.faults import crash_point
from wrapper import status
from wrapper.atomic import write_atomic

FORMAT = plandoc.FORMAT
HEARTBEATS = status.HEARTBEATS
CHECKPOINT_MARKER = status.CHECKPOINT_MARKER
log = logging.getLogger(__name__)

PLAN_MODE = 0o644
PLANS_DIR_MODE = 0o755
STATUS_DIR_MODE = 0o1777
LOCK_TIMEOUT_S = 30.0
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
RETIRED_PREFIX = ".retired-"  # a status directory renamed away before it is removed


class PlanWriteError(MosaicError):
    """A plan file could not be written (a full or read-only spool): names the file."""


def _job_name(job_id: str) -> str:
    if not _JOB_ID.fullmatch(str(job_id)):
        raise InputError(f"job id {job_id!r} cannot name a plan file (letters, digits, '_', '.', '+', '-')")
    return str(job_id)


def plan_path(spool: str | Path, job_id: str) -> Path:
    return plandoc.plan_file_path(spool, _job_name(job_id))


def ensure_spool(spool: str | Path) -> None:
    """Create ``plans/`` (0755) and ``status/`` (1777) under the spool; fix their modes."""
    base = Path(spool)
    for name, mode in (("plans", PLANS_DIR_MODE), ("status", STATUS_DIR_MODE)):
        path = base / name
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, mode)


def _current_version(path: Path) -> int:
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return 0
    try:
        return parse_plan_document(loads_json(text), str(path)).version
    except (ValueError, InputError):
        return 0  # a damaged file is replaced; versions restart above nothing readable


def status_dir(spool: str | Path, job_id: str) -> Path:
    return status.status_dir(spool, _job_name(job_id))


def write_plan(spool: str | Path, job_id: str, version: int | None, assignment: Assignment) -> Path:
    """Write (or replace) the job's plan file with ``version`` (``None``: one more than the file's).

    The plan is checked first (an impossible plan raises :class:`planner.core.execplan.PlanError`
    and nothing is written); the file is created 0644 before it is renamed into place, so
    the job can read every version it may see. A file system that refuses the write (full,
    read-only) raises :class:`PlanWriteError` naming the file, and leaves the file as it was.
    """
    path = plan_path(spool, job_id)
    try:
        return _write_plan(spool, path, job_id, version, assignment)
    except OSError as e:
        raise PlanWriteError(f"{path}: cannot write the plan file: {e.strerror or e}") from e


def _write_plan(
    spool: str | Path, path: Path, job_id: str, version: int | None, assignment: Assignment
) -> Path:
    import json

    ensure_spool(spool)
    lock = path.with_name(f".{path.name}.lock")
    with FileLock(str(lock), timeout=LOCK_TIMEOUT_S):
        for stale in path.parent.glob(f".{path.name}.*"):  # a writer killed before its rename
            if stale != lock:
                stale.unlink(missing_ok=True)
        if version is None:
            version = _current_version(path) + 1
        document = plan_document(job_id, version, assignment)
        write_atomic(
            path,
            json.dumps(document, indent=2) + "\n",
            mode=PLAN_MODE,
            parents=False,  # ensure_spool made the directory, with its mode
            before_replace=lambda: crash_point("planfile.written"),
        )
    return path


def read_plan(spool: str | Path, job_id: str) -> dict[str, Any] | None:
    """The plan document last written for the job, or ``None`` (absent or unreadable)."""
    try:
        document = loads_json(plan_path(spool, job_id).read_bytes())
    except (OSError, ValueError):  # absent, unreadable, not JSON (or not UTF-8)
        return None
    return document if isinstance(document, dict) else None


def current_exec_plan(spool: str | Path, job_id: str) -> dict[str, Any] | None:
    """The execution plan of the job's plan file (``None``: no file, or it runs as submitted)."""
    document = read_plan(spool, job_id)
    assignment = document.get("assignment") if document is not None else None
    plan = assignment.get("plan") if isinstance(assignment, dict) else None
    return plan if isinstance(plan, dict) else None


def remove_plan(spool: str | Path, job_id: str) -> None:
    """Forget a job's plan (it finished or left Mosaic's control): it then runs as submitted."""
    path = plan_path(spool, job_id)
    with FileLock(str(path.with_name(f".{path.name}.lock")), timeout=LOCK_TIMEOUT_S):
        path.unlink(missing_ok=True)
    path.with_name(f".{path.name}.lock").unlink(missing_ok=True)


def retire_job_files(spool: str | Path, job_id: str) -> None:
    """Remove what an earlier job with this id left in the spool (its plan file; its status
    directory, renamed out of the way first: the controller owns ``status/``, so it may rename
    an entry of another user's, and a directory it cannot empty is at least no longer read).
    A Slurm controller started on fresh state numbers its jobs from 1 again; the new job must
    not be read through the old one's progress, checkpoint marker or plan."""
    remove_plan(spool, job_id)
    directory = status.status_dir(spool, _job_name(job_id))
    if directory.is_symlink():
        directory.unlink()
        return
    if not directory.exists():
        return
    retired = directory.with_name(f"{RETIRED_PREFIX}{directory.name}-{os.getpid()}-{time.time_ns()}")
    os.rename(directory, retired)
    shutil.rmtree(retired, ignore_errors=True)


def _trusted_status_dir(spool: str | Path, job_id: str, owner_uid: int | None) -> Path | None:
    directory = status.status_dir(spool, _job_name(job_id))
    try:
        info = directory.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(info.st_mode):
        raise PlanFileError(f"{directory}: not a directory")
    if owner_uid is not None and info.st_uid != owner_uid:
        raise PlanFileError(f"{directory}: owned by uid {info.st_uid}, not the job's user {owner_uid}")
    return directory


def read_checkpoint_marker(
    spool: str | Path, job_id: str, owner_uid: int | None = None
) -> dict[str, Any] | None:
    """The job's checkpoint marker (written after a signalled stop), or ``None``."""
    directory = _trusted_status_dir(spool, job_id, owner_uid)
    return None if directory is None else status.read_marker(directory / status.CHECKPOINT_MARKER)


def read_heartbeats(spool: str | Path, job_id: str, owner_uid: int | None = None) -> list[dict[str, Any]]:
    """The job's heartbeat records, oldest first (empty when it has written none)."""
    directory = _trusted_status_dir(spool, job_id, owner_uid)
    return [] if directory is None else list(status.read_records(directory / status.HEARTBEATS))


IGNORED_LOGGED_MAX = 4096
"""How many (job, reason) pairs :func:`_quiet_status_dir` remembers having logged."""
_ignored_logged: dict[tuple[str, str], None] = {}


def _quiet_status_dir(spool: str | Path, job_id: str, owner_uid: int | None) -> Path | None:
    """The job's status directory if it can be trusted, else ``None``: the controller's tick
    reads it and must not fail on what a job (or another user) put there.

    Why a directory is ignored is logged once per job and reason, not on every read: the
    tick reads every running job's progress and the actuator polls a stopping job's marker
    several times a second, and a directory planted by another user stays there. The memory
    of what was logged is bounded (the oldest is forgotten first)."""
    try:
        return _trusted_status_dir(spool, job_id, owner_uid)
    except (PlanFileError, OSError) as e:
        log_status_ignored(spool, job_id, e)
        return None


def log_status_ignored(spool: str | Path, job_id: str, why: object) -> None:
    """Log that the job's status directory is ignored, and ``why``, unless that was logged
    already for this job and reason (the controller's readers share this memory)."""
    key = (str(Path(spool)), f"{job_id}: {why}")
    if key in _ignored_logged:
        return
    if len(_ignored_logged) >= IGNORED_LOGGED_MAX:
        del _ignored_logged[next(iter(_ignored_logged))]
    _ignored_logged[key] = None
    log.warning("job %s: status ignored: %s", job_id, why)


def checkpoint_time(spool: str | Path, job_id: str, owner_uid: int | None = None) -> float | None:
    """When the job last reported a finished checkpoint (its marker's ``time``); ``None``
    also when the status directory is a link or (``owner_uid``) another user's."""
    directory = _quiet_status_dir(spool, job_id, owner_uid)
    marker = status.read_marker(directory / CHECKPOINT_MARKER) if directory is not None else None
    value = marker.get("time") if marker is not None else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        when = float(value)
    except OverflowError:  # an integer beyond a float's range
        return None
    return when if math.isfinite(when) else None


def last_progress(spool: str | Path, job_id: str, owner_uid: int | None = None) -> float | None:
    """The ``progress`` of the job's newest heartbeat that has one (torn lines skipped);
    ``None`` also when the status directory is a link or (``owner_uid``) another user's.
    The log is read from its end only as far as that heartbeat (the tick asks it of every
    running job, and a job's log grows for as long as it runs)."""
    directory = _quiet_status_dir(spool, job_id, owner_uid)
    if directory is None:
        return None
    for record in status.newest_records(directory / HEARTBEATS):
        value = record.get("progress")
        if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1:
            return float(value)
    return None
