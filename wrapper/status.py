"""The files a job writes for the controller: heartbeats and the checkpoint marker.

Both live in the job's status directory, ``<spool>/status/<job id>/`` (the spool's
``status`` directory is world-writable with the sticky bit, like ``/tmp``: each job creates
and owns its own directory, and the controller trusts a directory only when its owner is
the job's user):

``heartbeat.jsonl``
    One JSON object per line, appended by rank 0: ``{"event": "start" | "heartbeat" |
    "checkpoint", "time": unix seconds, "job_id", "plan_version", "step", "samples",
    "samples_per_s", ...}``; heartbeats add the resource telemetry of
    :mod:`wrapper.telemetry`. Lines are written whole with one ``write`` in append mode.
``checkpoint.json``
    Written by ``mosaic-run`` once every rank has stopped after a checkpoint signal:
    ``{"job_id", "time", "signal", "plan_version", "step", "path", "killed_ranks"}``
    (``step``/``path`` of the newest complete checkpoint, ``null`` when there is none).
    The controller waits for it (newer than its signal) before it requeues the job.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from planner.core.fields import loads_json
from wrapper.atomic import write_atomic

DEFAULT_SPOOL = "/var/spool/mosaic"
HEARTBEATS = "heartbeat.jsonl"
CHECKPOINT_MARKER = "checkpoint.json"


def spool_dir(env: Mapping[str, str]) -> Path:
    """The spool shared by the controller and the jobs (``MOSAIC_SPOOL``)."""
    return Path(env.get("MOSAIC_SPOOL") or DEFAULT_SPOOL)


def status_dir(spool: str | Path, job_id: str) -> Path:
    """``<spool>/status/<job id>``; a job id that cannot name a directory is refused."""
    from planner.core.plandoc import job_file_name

    return Path(spool) / "status" / job_file_name(job_id, "a status directory")


def foreign_owner(directory: str | Path, uid: int | None = None) -> int | None:
    """The owner of ``directory`` when it exists and belongs to someone other than ``uid``
    (this process's user by default), else ``None``.

    The controller trusts a status directory only when the job's user owns it; one that
    someone else created first (``status/`` is world-writable) silences the job: its
    heartbeats and checkpoint markers would be ignored.
    """
    try:
        info = os.lstat(directory)
    except OSError:
        return None
    me = os.getuid() if uid is None else uid
    return info.st_uid if info.st_uid != me else None


def append_record(path: str | Path, record: Mapping[str, Any]) -> None:
    """Append one JSON line; a single ``write`` on an ``O_APPEND`` descriptor keeps lines whole."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(dict(record), sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


MAX_READ_BYTES = 4 << 20
"""The most a reader takes of a file a job wrote: the newest part of a longer heartbeat log."""


def _open_job_file(path: str | Path) -> tuple[int, int] | None:
    """(descriptor, size) of a regular file a job wrote, opened for reading; ``None`` when
    there is none (see :func:`read_job_file`). The caller closes the descriptor."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # absent, a symbolic link (ELOOP), unreadable
        return None
    try:
        info = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return None
    return fd, info.st_size


def read_job_file(path: str | Path, max_bytes: int = MAX_READ_BYTES) -> bytes | None:
    """The bytes of a file a job wrote, or ``None`` when there is no such regular file.

    The controller reads these files with its own rights, and a job owns the directory
    they are in: so a symbolic link (to a file the job could not read itself), a FIFO
    (which would block the controller) or a device is never opened or followed, and only
    the last ``max_bytes`` of a file are read.
    """
    opened = _open_job_file(path)
    if opened is None:
        return None
    fd, size = opened
    try:
        if size > max_bytes:
            os.lseek(fd, size - max_bytes, os.SEEK_SET)
        chunks = []
        left = max_bytes
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


NEWEST_FIRST_CHUNK = 64 << 10
""":func:`newest_records` reads this much of the end first, then four times more each time."""


def newest_records(
    path: str | Path, max_bytes: int = MAX_READ_BYTES, chunk_bytes: int = NEWEST_FIRST_CHUNK
) -> Iterator[dict[str, Any]]:
    """The records of a JSON-lines file a job wrote, newest first, read from the end only as
    far as the caller takes them (at most the last ``max_bytes``, as :func:`read_job_file`).

    A reader that wants the newest record of some kind (the tick reads every running job's
    progress) then reads a few KiB of a log that grows for as long as the job runs, not its
    whole tail. Lines that are not JSON objects are skipped, as :func:`read_records` does;
    so is a line cut by the ``max_bytes`` limit. Lines appended while reading are not seen.
    """
    opened = _open_job_file(path)
    if opened is None:
        return
    fd, end = opened
    try:
        carry = b""  # the start of the oldest line read so far, maybe cut
        budget = max_bytes
        chunk = max(1, chunk_bytes)
        while end > 0 and budget > 0:
            n = min(chunk, end, budget)
            start = end - n
            try:
                block = os.pread(fd, n, start)
            except OSError:
                return
            if len(block) < n:  # truncated under us: what was read is all there is
                return
            lines = (block + carry).splitlines()  # as read_records splits them
            carry = lines[0] if start > 0 else b""
            for raw in reversed(lines[1:] if start > 0 else lines):
                record = _record(raw)
                if record is not None:
                    yield record
            end, budget, chunk = start, budget - n, chunk * 4
    finally:
        os.close(fd)


def read_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of a JSON-lines file; a line that is not a JSON object (a torn last line,
    a writer killed mid-write, bytes that are not UTF-8) is skipped."""
    data = read_job_file(path)
    if data is None:
        return
    for raw in data.splitlines():
        record = _record(raw)
        if record is not None:
            yield record


def _record(raw: bytes) -> dict[str, Any] | None:
    """One line of a JSON-lines file as a record; ``None`` when it is not a JSON object."""
    try:
        record = loads_json(raw)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def write_marker(path: str | Path, record: Mapping[str, Any]) -> None:
    """Write the checkpoint marker atomically (readers see the old one or the new one)."""
    write_atomic(path, json.dumps(dict(record), sort_keys=True) + "\n")


def read_marker(path: str | Path) -> dict[str, Any] | None:
    """The checkpoint marker's record; ``None`` when absent or not a JSON object (as
    :func:`read_job_file` reads it)."""
    data = read_job_file(path)
    if data is None:
        return None
    try:
        record = loads_json(data)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def done_marker_name(rank: int) -> str:
    """The file a rank writes in ``$MOSAIC_DONE_DIR`` once its work is done and flushed
    (:meth:`wrapper.runtime.Runtime.done`); ``mosaic-run`` counts a rank that dies after it
    as a success."""
    return f"rank-{rank}.done"
