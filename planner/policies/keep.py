"""Keep in place: a round's GPUs handed back to the running jobs that held them.

The stages of a round decide one job at a time, and each decision is final for the stages
before it, so a round may restart running jobs that its own end result did not need to:

* the placement displaces the lowest-ranked holder for a job that lost its GPUs, the displaced
  job takes the next one's, and a later stage frees GPUs that would have done for the first;
* the placement stops a running job for a higher-ranked one that Crius or Rubick then moves
  elsewhere, and the GPUs go to a lower-ranked arrival.

On the mixed workload of ``benchmarks/papers/mosaic.py`` these were a third of ``mosaic``'s restarts.
This pass ends the round and undoes them, in two steps:

1. **Resume.** In priority order, a running job the round stopped for want of GPUs resumes as
   it ran where its GPUs are idle or were given only to jobs that start this round and rank
   below it (those wait), and its CPUs and memory fit: a running job is stopped only for a
   job ranked above it, which is what the ordering says. A job that shared GPUs resumes with
   the jobs it shared them with (a sharing pair runs only together), where each of them is
   stopped or holds its very GPUs again, and the GPUs taken went to arrivals ranked below
   all of them; or where a later stage started a member alone on other GPUs, and a resumed
   job holds those again in the end.
2. **Give sets back.** For the rigid best-effort jobs the round moved or started, grouped by
   GPU count, the group's GPU sets are reassigned to its jobs with the Hungarian algorithm so
   that as many running jobs as possible get their own set back, each on a GPU type it
   accepts. A job back on its own set keeps its running CPUs and memory where the nodes have
   room, else it takes the round's. The GPU sets in use and every job's GPU count stay the
   round's. This is Tesserae's migration minimisation (§4.1, Algorithm 2) at the level of jobs
   rather than node labels: a job may move between nodes of different shape or type, which a
   relabelling cannot do, because the job accepts any set of its size and type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from planner.core.model import Assignment, GpuSlot, Job, Node, Outcome, Snapshot
from planner.matching import assign
from planner.stages import Draft
from planner.validate import over_committed

# Among equally good reassignments, prefer the round's own (a job stays on the set the
# stages chose): far below one restart.
_TIE = 1e-6


def movable(job: Job) -> bool:
    """A job whose GPU set the placement chose and any same-sized set would do: rigid, on its
    own GPUs, without candidate plans (elastic and plan jobs' sets are their allocation's)."""
    return not job.elastic and not job.candidate_plans and not job.guaranteed


def keep_in_place(snapshot: Snapshot, ordered: Sequence[Job], draft: Draft) -> Draft:
    """``draft`` with stopped jobs resumed and moved rigid jobs given back their own GPU sets
    where the round allows it (module docstring); ``ordered`` is the round's priority order."""
    old: dict[str, Assignment] = {
        j.id: j.assignment for j in snapshot.jobs if j.is_running and j.assignment is not None
    }
    if not old:
        return draft
    nodes = {n.name: n for n in snapshot.nodes}
    out, outcomes = _resumed(ordered, draft, old, nodes)
    jobs = {j.id: j for j in snapshot.jobs}
    groups: dict[int, list[str]] = {}
    for job_id, a in out.items():
        job = jobs.get(job_id)
        if job is None or a.shares_with or not movable(job):
            continue
        before = old.get(job_id)
        if before is not None and (before.gpus == a.gpus or before.shares_with):
            continue
        groups.setdefault(len(a.gpus), []).append(job_id)
    for ids in groups.values():
        placed = {i: out[i] for i in ids}
        sets = [placed[i].gpus for i in ids]
        own = {i: old[i].gpus for i in ids if i in old}
        if not set(own.values()) & set(sets):  # no job's own set is another one's now
            continue
        trial = _reassigned(ids, sets, own, jobs, nodes)
        if trial is not None:
            out = _shaped(trial, placed, old, out, nodes)
    if outcomes is draft.outcomes and all(out[i] is a for i, a in draft.assignments.items()):
        return draft
    return Draft(out, outcomes)


_DISPLACED = frozenset({Outcome.NO_CAPACITY, Outcome.NO_CONSOLIDATED_SLOT})


def _resumed(
    ordered: Sequence[Job],
    draft: Draft,
    old: Mapping[str, Assignment],
    nodes: Mapping[str, Node],
) -> tuple[dict[str, Assignment], Mapping[str, Outcome]]:
    """The round's assignments with each running job it stopped for want of GPUs resumed as it
    ran, in priority order, where its GPUs are idle or taken only by jobs that start this round
    and rank below it (those wait instead): a running job is stopped only for a job that
    ranks above it. The stages decide one job at a time, so the placement may displace a job
    for a higher-ranked one that a later stage then moves elsewhere, leaving the GPUs to a
    lower-ranked arrival. A job that shared GPUs resumes with its sharing group
    (:func:`_sharing_group`) or not at all.

    A later stage may also have started a stopped sharing job again alone on other GPUs (Rubick
    admits the placement's stopped jobs one by one, a pair's members on separate GPUs): its
    group resumes as it ran too, where every GPU that frees holds a resumed job again in the
    end (the round's GPU sets in use stay; an idle one the next round's placement would fill),
    else none of these groups does."""
    apart = _resume(ordered, draft, old, nodes, apart=True)
    if apart is not None:
        return apart
    resumed = _resume(ordered, draft, old, nodes, apart=False)
    assert resumed is not None
    return resumed


def _resume(
    ordered: Sequence[Job],
    draft: Draft,
    old: Mapping[str, Assignment],
    nodes: Mapping[str, Node],
    apart: bool,
) -> tuple[dict[str, Assignment], Mapping[str, Outcome]] | None:
    """:func:`_resumed`, with sharing groups a later stage restarted apart where ``apart``
    (None where that leaves a GPU they held this round idle)."""
    out = dict(draft.assignments)
    outcomes: Mapping[str, Outcome] = draft.outcomes
    stopped = [
        j
        for j in ordered
        if j.id in old
        and (
            (j.id not in out and outcomes.get(j.id) in _DISPLACED)
            or (apart and _restarted_apart(j.id, old, out))
        )
    ]
    if not stopped:
        return out, outcomes
    rank = {j.id: k for k, j in enumerate(ordered)}
    holders: dict[GpuSlot, set[str]] = {}
    for job_id, a in out.items():
        for slot in a.gpus:
            holders.setdefault(slot, set()).add(job_id)
    done: set[str] = set()
    freed: set[GpuSlot] = set()
    for job in stopped:
        if job.id in done:  # resumed with its sharing group
            continue
        group = _sharing_group(job.id, old, out, apart)
        if group is None or any(m not in out and outcomes.get(m) not in _DISPLACED for m in group):
            continue
        slots = {slot for member in group for slot in old[member].gpus}
        takers = set().union(*(holders.get(slot, set()) for slot in slots)) - set(group)
        lowest = max(rank.get(member, len(rank)) for member in group)
        if any(t in old or rank.get(t, -1) < lowest for t in takers):
            continue
        candidate = {i: a for i, a in out.items() if i not in takers}
        candidate.update((member, old[member]) for member in group)
        if over_committed(nodes, candidate.values()):
            continue
        for t in takers:
            for slot in draft.assignments[t].gpus:
                holders[slot].discard(t)
        for member in group:
            if (now := out.get(member)) is not None and now.gpus != old[member].gpus:
                for slot in now.gpus:  # restarted apart: back where it ran
                    holders[slot].discard(member)
                    freed.add(slot)
            for slot in old[member].gpus:
                holders.setdefault(slot, set()).add(member)
        out = candidate
        done.update(group)
        outcomes = {
            **outcomes,
            **dict.fromkeys(group, Outcome.KEPT),
            **dict.fromkeys(takers, Outcome.NO_CAPACITY),
        }
    if any(not holders.get(slot) for slot in freed):
        return None
    # Priority order, as a draft's assignments are.
    return {j.id: out[j.id] for j in ordered if j.id in out}, outcomes


def _restarted_apart(job_id: str, old: Mapping[str, Assignment], out: Mapping[str, Assignment]) -> bool:
    """Whether ``job_id`` shared GPUs and the round starts it alone on other GPUs."""
    a = out.get(job_id)
    moved = a is not None and a.gpus != old[job_id].gpus and not a.shares_with
    return bool(old[job_id].shares_with) and moved


def _sharing_group(
    job_id: str, old: Mapping[str, Assignment], out: Mapping[str, Assignment], apart: bool = False
) -> list[str] | None:
    """The running jobs that resume together with ``job_id``: itself, and the jobs it shared
    GPUs with, transitively (the sharing stage's pairs run only together). None where one of
    them no longer runs, or holds GPUs this round other than its own (a later stage moved it;
    where ``apart``, unless it holds them alone: :func:`_restarted_apart`): the group does not
    resume as it ran. A member the round gave back its very GPUs (alone, say) is in the group:
    it resumes as it ran, sharing again."""
    group, todo = [job_id], [job_id]
    while todo:
        for partner in old[todo.pop()].shares_with:
            if partner in group:
                continue
            if partner not in old:
                return None
            group.append(partner)
            todo.append(partner)
    if any(
        (a := out.get(member)) is not None
        and a.gpus != old[member].gpus
        and not (apart and _restarted_apart(member, old, out))
        for member in group
    ):
        return None
    return group


def _shaped(
    trial: Mapping[str, tuple[GpuSlot, ...]],
    draft: Mapping[str, Assignment],
    old: Mapping[str, Assignment],
    out: dict[str, Assignment],
    nodes: Mapping[str, Node],
) -> dict[str, Assignment]:
    """``out`` with ``trial``'s sets, CPUs and memory as close to the jobs' own as fits.

    First each job back on its own set keeps its running assignment and each other job its
    CPUs and memory of the round; where that overfills a node, the others take the CPUs and
    memory the round gave the set they got; then every job does, which fills each node
    exactly as the round did."""
    holder = {draft[i].gpus: i for i in trial}

    def shaped(job_id: str, gpus: tuple[GpuSlot, ...], own_shape: bool) -> Assignment:
        a = draft[job_id]
        if gpus == a.gpus:
            return a
        shape = a if own_shape else draft[holder[gpus]]
        return Assignment(gpus, shape.cpus, shape.mem_gb, a.plan)

    def attempt(keep_running: bool, own_shape: bool) -> dict[str, Assignment]:
        candidate = dict(out)
        for job_id, gpus in trial.items():
            before = old.get(job_id)
            if keep_running and before is not None and gpus == before.gpus:
                candidate[job_id] = before
            else:
                candidate[job_id] = shaped(job_id, gpus, own_shape)
        return candidate

    for own_shape in (True, False):
        candidate = attempt(True, own_shape)
        if not over_committed(nodes, candidate.values()):
            return candidate
    return attempt(False, False)  # the round's own CPUs and memory per set: fits as it did


def _reassigned(
    ids: list[str],
    sets: list[tuple[GpuSlot, ...]],
    own: Mapping[str, tuple[GpuSlot, ...]],
    jobs: Mapping[str, Job],
    nodes: Mapping[str, Node],
) -> dict[str, tuple[GpuSlot, ...]] | None:
    """The sets' assignment to the jobs that restarts the fewest running ones (None: the round's)."""
    n = len(ids)
    cost = np.ones((n, n))
    forbidden = np.zeros((n, n), dtype=bool)
    for r, job_id in enumerate(ids):
        accepted = jobs[job_id].accepted_types
        mine = own.get(job_id)
        for c, gpus in enumerate(sets):
            if accepted and any(nodes[node].gpu_type not in accepted for node, _ in gpus):
                forbidden[r, c] = True
            # A running job restarts anywhere but on its own set; a waiting one starts anyway.
            cost[r, c] = (0.0 if mine is None or gpus == mine else 1.0) + (0.0 if r == c else _TIE)
    pairs = assign(cost, forbidden=forbidden)
    if len(pairs) < n:
        return None
    restarts = sum(cost[r, c] >= 1.0 for r, c in pairs)
    if restarts >= sum(1 for r, job_id in enumerate(ids) if job_id in own):
        return None
    return {ids[r]: sets[c] for r, c in pairs}
