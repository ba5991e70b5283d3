"""Which stage of the ``mosaic`` scheduler owns which decision of a job: the conflict rules.

Each decision of a job in a round has exactly one owner. The round runs the stages in the
pipeline's order (:mod:`planner.stages`); a later stage may override an earlier one only where
this table says so.

============================  ==============================================================
decision                      owner (and what it may override)
============================  ==============================================================
what is known of a job        the ordering's lens (:mod:`.view`): declared time limits, never
                              ``duration_s``/``remaining_s``; restarts bounded per job
order                         the ``mosaic`` ordering (:mod:`.ordering`): privileged guaranteed
                              jobs, then 2D-LAS, then the declared bound; guaranteed jobs
                              beyond their quota wait ahead of other best-effort ones
GPUs of a rigid job           the placement (consolidated, sharing pairs kept together);
                              Synergy-Tune moves a new one only where its wished CPUs and
                              memory fit another node and not its own (``placement_first``);
                              Rubick may evict a lower-ranked best-effort one for a privileged
                              job (never one that shares GPUs); where a later stage leaves
                              GPUs idle, Synergy-Tune starts a waiting rigid best-effort job
                              there (its own rule for GPUs it frees), as the next round's
                              placement would
sharing partner               the packing when configured (``bsbf-rigid``: SJF-BSBF's Theorem
                              1 on the declared estimates), rigid best-effort guests onto rigid
                              best-effort hosts only (:func:`shares_gpus`); nothing later moves
                              or shrinks a shared job. Not in the default preset yet
GPU types a waiting           the ordering (:mod:`.fastest`): those of its accepted types
privileged job accepts        within 10 % of its fastest, where they hold its GPUs beside
                              the other privileged jobs'; the placement places it there
GPU count, plan, CPUs of a    Rubick's joint allocation (:func:`rubick_decides`): it overrides
job Rubick decides            the placement's GPUs and the shaping's CPUs for these jobs only,
                              and keeps every privileged job at its performance guarantee;
                              where Crius frees GPUs Rubick saw held, Rubick decides again with
                              Crius's jobs fixed where Crius put them
GPU type and count of a job   Crius's Cell search (:func:`crius_decides`), its jobs decided
Crius decides                 in the order's sequence: overrides the placement for these jobs
                              only, on GPUs no other job holds;
                              CPUs and memory GPU-proportional
CPUs and memory of every      Synergy-Tune (the shaping stage), on the node the job got; where
other job                     a later stage's job took CPUs or memory Tune had given a
                              neighbour beyond its proportional share, that neighbour is
                              switched back toward its share (Tune's own rule 2, §4.2). These
                              are rigid jobs without candidate plans, guaranteed or not (the
                              proportional share Rubick gives one it starts or moves is no
                              decision of its own). Where a later stage changed a job's
                              resources, these jobs and Crius's take Tune's share on the round
                              as it ends (a running one left on its own GPUs from the share it
                              runs with), as the next round's Tune gives them
which job holds which set     the end of the reconfiguration stage (:mod:`planner.policies.keep`):
(running jobs, last)          a running job stopped for want of GPUs resumes where its GPUs are
                              idle or went only to lower-ranked arrivals (they wait), a
                              sharing pair together, and rigid best-effort jobs of one GPU
                              count get their own sets back;
                              counts, types, plans and the GPU sets in use stay the round's
physical GPU labels           the placement's (sticky: a running job keeps its GPUs where it
                              can) and keep-in-place's; Tesserae's relabelling, last, when
                              configured (``--migration tesserae``: it moves labels, never
                              shapes). Not in the default preset
============================  ==============================================================

A guarantee is never broken by a later stage: guaranteed jobs never share (the packing skips
them), Crius never decides a guaranteed job nor touches GPUs another job holds, and Rubick
shrinks or evicts only best-effort jobs for one.
"""

from __future__ import annotations

from planner.core.model import Job, Snapshot
from planner.policies.mosaic.ordering import is_settled


def cluster_types(snapshot: Snapshot) -> frozenset[str]:
    return frozenset(n.gpu_type for n in snapshot.nodes)


def crius_decides(job: Job, types: frozenset[str]) -> bool:
    """Crius owns a best-effort job that accepts more than one of the cluster's GPU types
    (its Cells span types, Crius §4), while it may still be restarted."""
    if job.guaranteed or (job.is_running and (not job.preemptible or is_settled(job))):
        return False
    return len(types.intersection(job.gpu_types)) > 1


def rubick_decides(job: Job, types: frozenset[str]) -> bool:
    """Rubick owns every other job whose count, type or plan may change: elastic jobs of one
    type, guaranteed jobs, jobs listing candidate plans (rigid jobs without any keep their
    shape; Rubick's stage leaves them as they are)."""
    return not crius_decides(job, types)


def shares_gpus(job: Job) -> bool:
    """A job the packing may pair (as guest or host): rigid, best-effort, with no deadline."""
    return not job.elastic and not job.guaranteed and job.deadline_s is None and not job.candidate_plans
