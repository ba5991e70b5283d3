"""Removing what ended jobs left in the spool.

Each job the controller plans gets a plan file (``plans/<id>.json`` and its lock file
``plans/.<id>.json.lock``; a crash mid-write may leave a temporary ``plans/.<id>.json.*``),
and each job under mosaic-run a status directory (``status/<id>/``: heartbeats, the
checkpoint marker, the job's identity). They are read only while Slurm lists the job. Without
a sweep the spool grows by a file and a directory per job for as long as the site runs.

A job's entries are removed when Slurm did not list the job (any partition, any state:
``squeue`` lists an ended job for ``MinJobAge``) and none of them changed in the last
``spool_keep_s`` before the listing was taken (a day by default: a finished job's heartbeats
stay there to be looked at). The age is measured against the listing's time, so an entry
made after the listing (a job that started since) is never taken for a stale one.

A status directory is renamed out of the way, then removed (:func:`planfile.retire_job_files`).
A controller that is not root cannot empty another user's directory: the renamed directory
(``status/.retired-*``) stays, is no longer read, and each sweep tries it again; the sweep
says how many there are.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from planner.core.errors import InputError
from planner.core.plandoc import PLANS_DIR, job_file_name
from slurm_plugin import planfile

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 600.0
"""How often (seconds of wall time) a running controller sweeps the spool; the first tick
of a process always does (``mosaic controller --once`` from cron)."""
RETIRED_PREFIX = planfile.RETIRED_PREFIX


@dataclass(frozen=True)
class SweepResult:
    jobs_removed: int  # jobs whose entries were removed
    entries_removed: int  # files and directories among them
    kept_listed: int  # jobs with entries that Slurm still lists
    kept_recent: int  # jobs not listed whose entries changed within ``keep_s``
    leftovers: int  # renamed status directories that could not be emptied
    errors: int  # entries that could not be removed (logged)


def _plan_entry_job(name: str) -> str | None:
    """The job id a ``plans/`` entry belongs to, or ``None`` for anything else."""
    if name.startswith("."):
        head, sep, _ = name[1:].rpartition(".json.")  # the lock and temporary files
        return head if sep and head else None
    return name[: -len(".json")] if name.endswith(".json") and len(name) > len(".json") else None


def _newest_in(directory: Path) -> float:
    """A status directory changes when a file in it is replaced, not when one is appended
    to (the heartbeat log): the newest of its entries (the directory's own time is read
    with the spool)."""
    newest = float("-inf")
    try:
        with os.scandir(directory) as it:
            for entry in it:
                try:
                    newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
                except OSError:
                    continue
    except OSError:
        pass
    return newest


@dataclass(slots=True)
class _JobEntries:
    """What the spool holds for one job: as little as deciding and removing needs, since a
    sweep walks every entry (a spool holds a day of ended jobs; a path and a ``stat`` result
    kept per entry took ~1 KB each, ~10 MB at peak for 8,000 entries)."""

    newest: float  # the newest change among its plan entries and its status directory itself
    entries: int
    status: bool  # it has a status directory (whose files are read only if the job is unlisted)
    temporary: list[str] | None = None  # names of plans/ temporary files (a crash mid-write)


def _entries(spool: Path) -> dict[str, _JobEntries]:
    """Every plan-file and status entry in the spool, by job id."""
    found: dict[str, _JobEntries] = {}
    for sub, job_of in ((PLANS_DIR, _plan_entry_job), ("status", _status_entry_job)):
        directory = spool / sub
        try:
            with os.scandir(directory) as it:
                for entry in it:
                    job_id = job_of(entry.name)
                    if job_id is None:
                        continue
                    try:
                        mtime = entry.stat(follow_symlinks=False).st_mtime
                        is_dir = sub == "status" and entry.is_dir(follow_symlinks=False)
                    except OSError:
                        continue
                    job = found.get(job_id)
                    if job is None:
                        job = found[job_id] = _JobEntries(mtime, 0, False)
                    job.newest = max(job.newest, mtime)
                    job.entries += 1
                    job.status = job.status or is_dir
                    name = entry.name
                    if sub == PLANS_DIR and name.startswith(".") and not name.endswith(".lock"):
                        if job.temporary is None:
                            job.temporary = []
                        job.temporary.append(name)
        except FileNotFoundError:
            continue
    return found


def _status_entry_job(name: str) -> str | None:
    """``status/`` is world-writable: an entry that cannot be a job's is not the sweep's."""
    if name.startswith("."):
        return None
    try:
        return job_file_name(name)
    except InputError:
        return None


def sweep_spool(spool: str | Path, listed: Iterable[str], listed_at: float, keep_s: float) -> SweepResult:
    """Remove the entries of jobs not in ``listed`` (job ids Slurm showed at ``listed_at``,
    wall-clock seconds) whose newest change is more than ``keep_s`` before ``listed_at``."""
    base = Path(spool)
    listed_ids = set(listed)
    jobs_removed = entries_removed = kept_listed = kept_recent = errors = 0
    found = _entries(base)
    for job_id in sorted(found):
        job = found[job_id]
        if job_id in listed_ids:
            kept_listed += 1
            continue
        newest = max(job.newest, _newest_in(base / "status" / job_id)) if job.status else job.newest
        if newest > listed_at - keep_s:
            kept_recent += 1
            continue
        try:
            planfile.retire_job_files(base, job_id)
            for name in job.temporary or ():  # what retire_job_files does not know
                (base / PLANS_DIR / name).unlink(missing_ok=True)
        except (OSError, InputError, TimeoutError) as e:
            errors += 1
            log.warning("spool: the files of ended job %s were not removed: %s", job_id, e)
            continue
        jobs_removed += 1
        entries_removed += job.entries
    leftovers = _retry_retired(base / "status")
    return SweepResult(jobs_removed, entries_removed, kept_listed, kept_recent, leftovers, errors)


def _retry_retired(status_dir: Path) -> int:
    """Try again to remove status directories renamed away earlier; how many remain."""
    left = 0
    try:
        names = [n for n in os.listdir(status_dir) if n.startswith(RETIRED_PREFIX)]
    except FileNotFoundError:
        return 0
    for name in names:
        path = status_dir / name
        shutil.rmtree(path, ignore_errors=True)
        if os.path.lexists(path):
            left += 1
    return left


class SpoolSweeper:
    """Sweeps the spool at most once per :data:`SWEEP_EVERY_S` of wall time."""

    def __init__(
        self,
        spool: str | Path,
        keep_s: float,
        every_s: float = SWEEP_EVERY_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spool = Path(spool)
        self.keep_s = keep_s
        self.every_s = every_s
        self.monotonic = monotonic
        self._last: float | None = None
        self._warned_leftovers = False

    def maybe_sweep(self, listed: Iterable[str], listed_at: float) -> SweepResult | None:
        now = self.monotonic()
        if self._last is not None and now - self._last < self.every_s:
            return None
        self._last = now
        result = sweep_spool(self.spool, listed, listed_at, self.keep_s)
        if result.jobs_removed:
            log.info(
                "spool: removed the plan files and status of %d ended job(s) (%d entries)",
                result.jobs_removed,
                result.entries_removed,
            )
        if result.leftovers and not self._warned_leftovers:
            self._warned_leftovers = True
            log.warning(
                "spool: %d status directories of ended jobs belong to their users and cannot be "
                "emptied by this account; they are no longer read (%s/%s*)",
                result.leftovers,
                self.spool / "status",
                RETIRED_PREFIX,
            )
        return result
