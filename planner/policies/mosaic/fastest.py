"""A privileged job that accepts several GPU types starts on the type that runs it fastest.

Crius decides the GPU type of best-effort jobs that accept several (its Cells, Crius §4), but
never a guaranteed job's (:func:`.rules.crius_decides`): the guarantee is Rubick's. Rubick keeps
such a job at the throughput its request guarantees, on whatever type the placement gave it,
and the placement's best fit knows no speeds. So a guaranteed job arriving while best-effort
jobs held the fast GPUs started on the slow ones that were free: on the mixed workloads a
guaranteed MoE job on four V100s where A100s would have run it 2.6 times as fast, and the
guaranteed jobs' average JCT was above ``rubick``'s on several draws.

Before the placement, a waiting privileged job that accepts several of the cluster's types is
shown accepting only its fastest ones: those within :data:`FASTEST_TOLERANCE` of the best
throughput at its requested count (Crius's measured best-plan speed per type where its table
has the model, else the profile's per-type factor: :class:`DpView`). Best-effort jobs there
yield to it as they do to any privileged job (they are ranked below it). Whether a job is
narrowed depends on the job and the cluster alone (its fastest types must hold its GPUs), not
on what other jobs hold: a rule that counted the other privileged jobs' GPUs gave a job that
one round left waiting other types the next, once a job narrowed before it ran, and planning
an applied round again started it. So a privileged job may wait for its fastest types while
slower ones are idle, behind the privileged jobs ahead of it (their GPUs are bounded by the
tenant's quota). A running job keeps the type it runs on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from planner.core.model import Job, Snapshot
from planner.policies.baselines.view import DpView

# Types whose throughput is at least this share of the best count as fastest.
FASTEST_TOLERANCE = 0.9


def on_fastest_types(
    snapshot: Snapshot, ordered: Sequence[Job], privileged: set[str], speeds: DpView
) -> list[Job]:
    """``ordered`` with each waiting privileged job that accepts several of the cluster's GPU
    types narrowed to its fastest ones (module docstring); every other job as it is."""
    capacity: dict[str, int] = {}
    for node in snapshot.nodes:
        capacity[node.gpu_type] = capacity.get(node.gpu_type, 0) + node.gpus
    out = []
    for job in ordered:
        fastest: tuple[str, ...] = ()
        if job.id in privileged and not job.is_running:
            fastest = _fastest(job, [t for t in capacity if job.accepts_type(t)], speeds)
        if not fastest or sum(capacity[t] for t in fastest) < job.num_gpus:
            out.append(job)
            continue
        reference = job.gpu_type if job.gpu_type in fastest else None
        out.append(replace(job, gpu_types=fastest, gpu_type=reference))
    return out


def _fastest(job: Job, types: list[str], speeds: DpView) -> tuple[str, ...]:
    """``job``'s fastest ``types`` at its requested count, sorted; empty where there is no
    choice to make (one type, or no speed known)."""
    if len(types) < 2:
        return ()
    speed = {t: speeds.throughput(job, t, job.num_gpus, dp_check=False) for t in types}
    best = max(speed.values())
    if best <= 0:
        return ()
    fastest = tuple(sorted(t for t in types if speed[t] >= FASTEST_TOLERANCE * best))
    return fastest if len(fastest) < len(types) else ()
