"""Trace jobs no node set of a cluster can ever hold (pure).

Slurm refuses such a job at submission (``sbatch``: "Requested node configuration is not
available"); the simulator would only find out once nothing else was left to run. A job
can never start when the cluster has no GPU of a type it accepts (its ``gpu_types``, else
its ``gpu_type``, else any), or fewer GPUs of those types than the least it accepts (its
``min_gpus``, else ``num_gpus``). The check is a necessary condition only: a job it lets
through may still wait on a scheduler's own rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from planner.core.model import Node
from planner.traces.records import TraceJob

SHOWN = 10
"""Jobs named in :func:`describe`; the rest are counted."""


def never_startable(nodes: Sequence[Node], jobs: Iterable[TraceJob]) -> list[tuple[str, str]]:
    """``(job id, why)`` of every job in ``jobs`` no allocation on ``nodes`` can hold, in trace order."""
    by_type: dict[str, int] = {}
    for node in nodes:
        by_type[node.gpu_type] = by_type.get(node.gpu_type, 0) + node.gpus
    total = sum(by_type.values())
    cluster_types = ", ".join(sorted(by_type)) or "none"
    out: list[tuple[str, str]] = []
    for job in jobs:
        need = job.min_gpus or job.num_gpus
        accepted = job.gpu_types or ((job.gpu_type,) if job.gpu_type is not None else ())
        if accepted:
            have = sum(by_type.get(t, 0) for t in accepted)
            what = "GPU type " + " or ".join(repr(t) for t in accepted)
            if not have:
                out.append((job.job_id, f"asks for {what}; the cluster has {cluster_types}"))
            elif have < need:
                out.append((job.job_id, f"asks for {need} GPUs of {what}; the cluster has {have}"))
        elif total < need:
            out.append((job.job_id, f"asks for {need} GPUs; the cluster has {total}"))
    return out


def describe(problems: Sequence[tuple[str, str]], source: str) -> str:
    """One message naming the jobs (the first :data:`SHOWN`) and why each can never start."""
    shown = "; ".join(f"job {job_id} {why}" for job_id, why in problems[:SHOWN])
    more = f"; and {len(problems) - SHOWN} more" if len(problems) > SHOWN else ""
    return (
        f"{source}: {len(problems)} job(s) can never start on this cluster (Slurm would refuse them): "
        f"{shown}{more}"
    )
