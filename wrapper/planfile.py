"""Finding and reading the job's plan file (the job side of the plan-file protocol).

The controller writes ``<spool>/plans/<job id>.json`` atomically (:mod:`slurm_plugin.planfile`),
so a reader sees a whole old file or a whole new one and needs no lock. No file means the
job is not managed (or not yet): it runs as submitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from planner.core.fields import json_document
from planner.core.plandoc import JobPlan, PlanFileError, parse_plan_document, plan_file_path
from wrapper.status import spool_dir


def find_plan_file(env: Mapping[str, str], explicit: str | None = None) -> Path | None:
    """The job's plan file if it exists: ``explicit``, ``MOSAIC_PLAN_FILE``, or the spool's one."""
    if explicit or env.get("MOSAIC_PLAN_FILE"):
        path = Path(explicit or env["MOSAIC_PLAN_FILE"])
    elif env.get("SLURM_JOB_ID"):
        path = plan_file_path(spool_dir(env), env["SLURM_JOB_ID"])
    else:
        return None
    return path if path.exists() else None


def read_plan_file(path: str | Path) -> JobPlan:
    """Parse the plan file; every error names the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise PlanFileError(f"{path}: cannot read: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise PlanFileError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    document = json_document(text, str(path), PlanFileError)
    return parse_plan_document(document, str(path))
