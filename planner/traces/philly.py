"""Import the real Philly-derived trace (Gavel's per-virtual-cluster MSR traces).

The bundled file has columns ``job_id, submit_time_s, num_gpus, duration_s, vc,
vc_job_index, gavel_model_seed0, gavel_total_steps_seed0``. ``submit_time_s`` restarts
at 0 in every virtual cluster (VC), so a usable trace is one VC (or a window of one):
never several VCs merged onto one timeline.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from planner.core.errors import TraceError
from planner.traces.records import TraceJob
from profiles.names import split_batch_suffix

PHILLY_COLUMNS = ("job_id", "submit_time_s", "num_gpus", "duration_s", "vc", "gavel_model_seed0")


@dataclass(frozen=True)
class PhillyRow:
    job_id: str
    submit_time_s: float
    num_gpus: int
    duration_s: float
    vc: str
    gavel_label: str


def parse_philly(text: str, source: str = "philly trace") -> list[PhillyRow]:
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in PHILLY_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise TraceError(f"{source}:1: missing column(s) {', '.join(missing)} of the Philly-derived format")
    rows = []
    for row in reader:
        try:
            rows.append(
                PhillyRow(
                    job_id=row["job_id"],
                    submit_time_s=float(row["submit_time_s"]),
                    num_gpus=int(row["num_gpus"]),
                    duration_s=float(row["duration_s"]),
                    vc=row["vc"],
                    gavel_label=row["gavel_model_seed0"],
                )
            )
        except (TypeError, ValueError) as e:
            raise TraceError(f"{source}:{reader.line_num}: {e}") from e
    return rows


def virtual_clusters(rows: list[PhillyRow]) -> dict[str, int]:
    """Job count per VC, largest first."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.vc] = counts.get(r.vc, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def philly_trace(
    rows: list[PhillyRow],
    *,
    vc: str,
    first: int = 0,
    count: int | None = None,
    max_gpus: int | None = None,
) -> list[TraceJob]:
    """Jobs ``first .. first+count`` (submission order) of one VC, re-based to t=0.

    ``max_gpus`` drops jobs asking for more GPUs (a smaller cluster cannot run them).
    Gavel's labels become model + batch size (``"ResNet-18 (batch size 32)"`` ->
    ``resnet-18``, 32); the model name is resolved against profiles when simulated.
    """
    selected = sorted((r for r in rows if r.vc == vc), key=lambda r: (r.submit_time_s, int(r.job_id)))
    if not selected:
        known = ", ".join(virtual_clusters(rows))
        raise TraceError(f"no jobs for virtual cluster {vc!r}; known VCs: {known}")
    if max_gpus is not None:
        selected = [r for r in selected if r.num_gpus <= max_gpus]
    window = selected[first : None if count is None else first + count]
    if not window:
        raise TraceError(f"VC {vc!r} has {len(selected)} eligible jobs; window starting at {first} is empty")
    t0 = window[0].submit_time_s
    jobs = []
    for r in window:
        model, batch = split_batch_suffix(r.gavel_label)
        jobs.append(
            TraceJob(
                job_id=r.job_id,
                submit_time_s=round(r.submit_time_s - t0, 3),
                num_gpus=r.num_gpus,
                duration_s=r.duration_s,
                model=model,
                batch_size=batch,
            )
        )
    return jobs
