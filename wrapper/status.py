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
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

DEFAULT_SPOOL = "/var/spool/mosaic"
HEARTBEATS = "heartbeat.jsonl"
CHECKPOINT_MARKER = "checkpoint.json"


def spool_dir(env: Mapping[str, str]) -> Path:
    """The spool shared by the controller and the jobs (``MOSAIC_SPOOL``)."""
    return Path(env.get("MOSAIC_SPOOL") or DEFAULT_SPOOL)


def status_dir(spool: str | Path, job_id: str) -> Path:
    return Path(spool) / "status" / job_id


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


def read_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """The records of a JSON-lines file; a torn last line (a writer killed mid-write) is skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            yield record


def write_marker(path: str | Path, record: Mapping[str, Any]) -> None:
    """Write the checkpoint marker atomically (readers see the old one or the new one)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(dict(record), sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)


def read_marker(path: str | Path) -> dict[str, Any] | None:
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def done_marker_name(rank: int) -> str:
    """The file a rank writes in ``$MOSAIC_DONE_DIR`` once its work is done and flushed
    (:meth:`wrapper.runtime.Runtime.done`); ``mosaic-run`` counts a rank that dies after it
    as a success."""
    return f"rank-{rank}.done"
