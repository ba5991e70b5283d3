"""The plan file's JSON document and path: what the controller tells one job (pure, no I/O).

One document per job, written by the controller (:mod:`slurm_plugin.planfile`) and read by
``mosaic-run`` (:mod:`wrapper.planfile`)::

    {"format": "mosaic-plan/1", "job_id": "42", "version": 3,
     "assignment": {"gpus": [["n1", 0], ["n1", 1]], "cpus": 8, "mem_gb": 32.0,
                    "plan": {"zero_stage": 2, "global_batch": 64}, "shares_with": []}}

``version`` grows by one with every write for the job, so a job can tell a new plan from
the one it started with; ``assignment`` is the RoundPlan assignment (docs/reference.md,
"Snapshot and RoundPlan JSON") and its ``plan`` an execution plan (:mod:`planner.core.execplan`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.core.codec import assignment_from_json, assignment_to_json
from planner.core.errors import InputError, SnapshotError
from planner.core.execplan import ExecPlan, plan_from_mapping
from planner.core.fields import Fields
from planner.core.model import Assignment

FORMAT = "mosaic-plan/1"
PLANS_DIR = "plans"
_JOB_ID = re.compile(r"[A-Za-z0-9_.+-]+")


def job_file_name(job_id: str, what: str = "a plan file") -> str:
    """``job_id`` as one file name component (never ``..``, a ``/`` or a new line): the check
    every path built from a job id goes through, so that none leaves its directory."""
    text = str(job_id)
    if not _JOB_ID.fullmatch(text) or text in {".", ".."}:
        raise InputError(f"job id {job_id!r} cannot name {what} (letters, digits, '_', '.', '+', '-')")
    return text


def plan_file_path(spool: str | Path, job_id: str) -> Path:
    """``<spool>/plans/<job id>.json``: where the controller writes a job's plan and the job
    reads it (the one definition both sides use); a job id that cannot name a file is refused."""
    return Path(spool) / PLANS_DIR / f"{job_file_name(job_id)}.json"


class PlanFileError(InputError):
    """A plan file is malformed (names the file and the key)."""


@dataclass(frozen=True, slots=True)
class JobPlan:
    """What the controller decided for one job: where it runs and with which plan."""

    job_id: str
    version: int
    assignment: Assignment
    exec_plan: ExecPlan

    @property
    def workers(self) -> int:
        """Workers (ranks) to launch: one per assigned GPU."""
        return self.assignment.num_gpus


def plan_document(job_id: str, version: int, assignment: Assignment) -> dict[str, Any]:
    """The document for ``assignment``; its plan is checked first so no bad plan is ever written."""
    plan_from_mapping(assignment.plan, f"job {job_id}: plan")
    return {
        "format": FORMAT,
        "job_id": str(job_id),
        "version": version,
        "assignment": assignment_to_json(assignment),
    }


def parse_plan_document(document: Any, source: str) -> JobPlan:
    """Read a plan document; every error names ``source`` (the file) and the key."""
    f = Fields(document, source, PlanFileError)
    fmt = f.req_str("format")
    if fmt != FORMAT:
        f.fail_key("format", f"expected '{FORMAT}', got '{fmt}' (written by a newer or older Mosaic?)")
    if not f.has("assignment"):
        f.fail("missing required key 'assignment'")
    try:
        assignment = assignment_from_json(f.data["assignment"], f"{source}: assignment")
    except SnapshotError as e:
        raise PlanFileError(str(e)) from e
    return JobPlan(
        job_id=f.req_str("job_id"),
        version=f.req_int("version", minimum=1),
        assignment=assignment,
        exec_plan=plan_from_mapping(assignment.plan, f"{source}: assignment.plan"),
    )
