"""Checkpoint directories: their layout, the complete-marker, and finding the latest one to resume.

Layout under the job's checkpoint directory (``MOSAIC_CHECKPOINT_DIR``)::

    step-00000120/          one checkpoint: the framework's files (torch.distributed.checkpoint
        .metadata           shards, or a DeepSpeed tag directory) ...
        __0_0.distcp
        MOSAIC-COMPLETE     ... and, written last and atomically by rank 0 once every rank has
                            finished writing, a JSON record: step, world size, plan, framework.

A directory without ``MOSAIC-COMPLETE`` is a checkpoint that was interrupted (a rank killed
after the grace period, a node lost): it is never loaded, and the job resumes from the
newest *complete* one instead. The marker, not the framework's own "latest" pointer, is the
source of truth, because DeepSpeed and torch both write their pointer before every rank's
data is known to be durable.

A job id names a job only while the cluster keeps counting: a Slurm controller started on
fresh state (the test cluster after ``down``/``up``, a site that wiped ``StateSaveLocation``)
numbers its jobs from 1 again, and a new job 1 must not resume an old job 1's weights. So
``mosaic submit`` gives each submission a token (``MOSAIC_SUBMISSION``, in the job's
environment, which a requeue keeps), the root records it in ``.mosaic/owner.json`` when the
job first uses it, and the default root of a submission that finds another's there is
``<base>/<job id>-<token>`` instead (:func:`job_root`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.core.errors import InputError
from planner.core.fields import loads_json
from planner.core.plandoc import job_file_name
from wrapper.atomic import write_atomic
from wrapper.status import read_job_file, write_marker

COMPLETE_MARKER = "MOSAIC-COMPLETE"
DEFAULT_BASE = "mosaic-ckpt"
OWNER_FILE = Path(".mosaic") / "owner.json"
_STEP_DIR = re.compile(r"^step-(\d{8,})$")
_SUBMISSION = re.compile(r"^[0-9a-f]{8,64}$")


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """A complete checkpoint: where it is and what its marker says."""

    path: Path
    step: int
    record: dict[str, Any]

    @property
    def world_size(self) -> int | None:
        value = self.record.get("world_size")
        return value if isinstance(value, int) else None

    @property
    def dp(self) -> int | None:
        """The data-parallel size it was saved with (what DeepSpeed's ZeRO partitioning depends on)."""
        plan = self.record.get("plan")
        value = plan.get("dp") if isinstance(plan, dict) else None
        return value if isinstance(value, int) else self.world_size


def step_dir(root: str | Path, step: int) -> Path:
    """The directory of the checkpoint taken after ``step`` optimizer steps."""
    if step < 0:
        raise ValueError(f"a checkpoint step must be >= 0, got {step}")
    return Path(root) / f"step-{step:08d}"


def step_tag(step: int) -> str:
    """The directory name, also used as DeepSpeed's checkpoint tag."""
    return step_dir(".", step).name


def write_complete_marker(path: str | Path, record: dict[str, Any]) -> None:
    """Mark a checkpoint complete: call once every rank's data is written (after a barrier)."""
    # The checkpoint's directory must exist already (no parents: a marker never creates the
    # checkpoint it marks), and the marker's name must survive a power loss (sync_dir).
    write_atomic(
        Path(path) / COMPLETE_MARKER, json.dumps(record, sort_keys=True) + "\n", parents=False, sync_dir=True
    )


def default_root(job_id: str, base: str | Path = DEFAULT_BASE) -> Path:
    """``<base>/<job id>``: the job's checkpoint directory when none is given; a job id
    that is not one plain file name (``..``, a ``/``) is refused, so it stays under ``base``."""
    return Path(base) / job_file_name(job_id, "a checkpoint directory")


def submission_token(env: Mapping[str, str]) -> str | None:
    """The job's ``MOSAIC_SUBMISSION`` (set by ``mosaic submit``), or ``None`` (plain sbatch,
    a local run); anything but 8-64 lowercase hex digits is an error naming the variable."""
    raw = env.get("MOSAIC_SUBMISSION", "").strip()
    if not raw:
        return None
    if not _SUBMISSION.match(raw):
        raise InputError(f"MOSAIC_SUBMISSION: expected 8-64 lowercase hex digits, got {raw!r}")
    return raw


def read_owner(root: str | Path) -> dict[str, Any] | None:
    """``root``'s owner record (job id and submission token), or ``None`` if it has none."""
    return _read_object(Path(root) / OWNER_FILE)


def foreign_owner(root: str | Path, submission: str | None) -> dict[str, Any] | None:
    """The owner record of ``root`` when it belongs to another submission than ``submission``;
    ``None`` when it is ours, unclaimed, or ``submission`` is ``None`` (nothing to compare).
    A root with checkpoints but no owner record was written before submissions had tokens:
    another submission's as far as a token-bearing job can tell."""
    if submission is None:
        return None
    owner = read_owner(root)
    if owner is None:
        return {} if list_checkpoints(root) else None
    return None if owner.get("submission") == submission else owner


def job_root(job_id: str, submission: str | None, base: str | Path = DEFAULT_BASE) -> Path:
    """The job's checkpoint directory when none is given: ``<base>/<job id>``, unless another
    submission of the same job id owns it (the ids started again), then ``<base>/<job id>-<token>``.
    The same answer on every launch of one submission, so a requeued job finds its own."""
    root = default_root(job_id, base)
    if foreign_owner(root, submission) is None:
        return root
    return default_root(f"{job_id}-{submission}", base)


def claim(root: str | Path, job_id: str, submission: str | None) -> None:
    """Record the submission that owns ``root`` (once: an existing record is kept)."""
    if submission is None or read_owner(root) is not None:
        return
    write_marker(Path(root) / OWNER_FILE, {"job_id": job_id, "submission": submission})


def read_complete_marker(path: str | Path) -> dict[str, Any] | None:
    """The marker's record, or ``None`` when the checkpoint is incomplete (no marker, or a
    marker that is a symbolic link or not a regular file: never followed)."""
    return _read_object(Path(path) / COMPLETE_MARKER)


def _read_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path`` (``None``: absent, a link, not a regular file); anything
    but a JSON object is an error naming the file."""
    data = read_job_file(path)
    if data is None:
        return None
    try:
        record = loads_json(data)
    except ValueError as e:
        raise InputError(f"{path}: not valid JSON: {getattr(e, 'msg', e)}") from e
    if not isinstance(record, dict):
        raise InputError(f"{path}: expected a JSON object")
    return record


def list_checkpoints(root: str | Path) -> list[tuple[int, Path, bool]]:
    """Every ``step-*`` directory as (step, path, complete), oldest first."""
    base = Path(root)
    if not base.is_dir():
        return []
    found = []
    for entry in base.iterdir():
        match = _STEP_DIR.match(entry.name)
        # A symbolic link is never a checkpoint: what is loaded stays inside the root.
        if match and entry.is_dir() and not entry.is_symlink():
            found.append((int(match.group(1)), entry, (entry / COMPLETE_MARKER).is_file()))
    return sorted(found)


def latest_complete(root: str | Path) -> CheckpointInfo | None:
    """The newest complete checkpoint under ``root``; incomplete ones are skipped, never loaded."""
    for step, path, complete in reversed(list_checkpoints(root)):
        if complete:
            record = read_complete_marker(path)
            if record is not None:
                return CheckpointInfo(path, step, record)
    return None
