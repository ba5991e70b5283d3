"""The ``mosaic`` packing and reconfiguration stages: the papers' mechanisms on the jobs they fit.

Who owns which decision is :mod:`.rules`; this module carries it out.

* :class:`MosaicPacking` is SJF-BSBF's wise sharing (Theorem 1, §IV) restricted to rigid
  best-effort jobs, as guests and as hosts: an elastic job's GPUs are decided later in the
  round (by Rubick or Crius), and a pair on them would not survive that.
* :class:`MosaicReconfiguration` runs Rubick's joint allocation (§5) on the jobs Rubick
  decides, with the jobs Crius decides shown to it as they are (running ones rigid on their
  GPUs, waiting ones not at all), then Crius's Cell search (§6.1) on its jobs with every other
  job's GPUs fixed (and Rubick's again where Crius freed GPUs), then gives back CPUs and memory
  where the two took them from jobs the shaping stage (Synergy-Tune) had given more than their
  proportional share; it ends with keep-in-place, and Tune's CPUs and memory for the running
  jobs the round's later stages left on their own GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Self

from planner.core.model import Assignment, Job, JobState, Outcome, Snapshot
from planner.policies.common import options_reader
from planner.policies.crius.policy import CriusAllocation
from planner.policies.keep import keep_in_place, movable
from planner.policies.mosaic.rules import cluster_types, crius_decides, shares_gpus
from planner.policies.packing import TesseraePacking
from planner.policies.rubick.allocation import RubickAllocation
from planner.policies.shaping import proportional_share
from planner.policies.sharing import BestSharingBenefitFirst
from planner.registry import StageContext
from planner.stages import PACKINGS, RECONFIGURATIONS, SHAPINGS, Draft, Shaping
from planner.validate import node_usage, over_committed


@dataclass(frozen=True)
class RigidOnlyPacking:
    """A packing shown only the jobs :func:`shares_gpus` allows to pair (rigid best-effort
    jobs, as guests and as hosts); every other job keeps the placement's GPUs."""

    inner: BestSharingBenefitFirst | TesseraePacking
    max_jobs_per_gpu: ClassVar[int] = 2
    # Whether a running job the placement stopped is shown to the packing as a waiting one.
    stopped_as_waiting: ClassVar[bool]

    def pack(self, snapshot: Snapshot, ordered: Sequence[Job], draft: Draft) -> Draft:
        others = {j.id for j in ordered if not shares_gpus(j)}
        if len(others) == len(ordered):
            return draft
        stopped = (
            {j.id: _waiting(j) for j in ordered if j.is_running and j.id not in draft.assignments}
            if self.stopped_as_waiting
            else {}
        )
        mine = [stopped.get(j.id, j) for j in ordered if j.id not in others]
        if stopped:
            snapshot = replace(snapshot, jobs=tuple(stopped.get(j.id, j) for j in snapshot.jobs))
        shown = Draft({i: a for i, a in draft.assignments.items() if i not in others}, draft.outcomes)
        packed = self.inner.pack(snapshot, mine, shown)
        if packed is shown:
            return draft
        merged = {**draft.assignments, **packed.assignments}
        return Draft({j.id: merged[j.id] for j in ordered if j.id in merged}, packed.outcomes)


@PACKINGS.register("bsbf-rigid")
@dataclass(frozen=True)
class MosaicPacking(RigidOnlyPacking):
    """SJF-BSBF's wise sharing (Theorem 1, §IV) over rigid best-effort jobs (options: ``bsbf``'s)."""

    # A stopped job would be a waiting one in the next round, which must find nothing new to
    # do (re-planning changes nothing).
    stopped_as_waiting: ClassVar[bool] = True

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        return cls(BestSharingBenefitFirst.from_options(options, context))


@PACKINGS.register("tesserae-rigid")
@dataclass(frozen=True)
class TesseraeRigidPacking(RigidOnlyPacking):
    """Tesserae's packing (maximum-weight matching of pending onto placed jobs by measured
    co-location throughput, Tesserae Algorithm 4) over rigid best-effort jobs (options:
    ``tesserae``'s)."""

    # Tesserae's matching weighs a stopped job's own GPUs (its keep bonus); shown waiting, a
    # stopped job is packed elsewhere and restarts (2,683 restarts on Tesserae's trace, 885).
    stopped_as_waiting: ClassVar[bool] = False

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        return cls(TesseraePacking.from_options(options, context))


@RECONFIGURATIONS.register("mosaic")
@dataclass(frozen=True)
class MosaicReconfiguration:
    """Options: ``rubick`` (a table of the ``rubick`` stage's options), ``crius`` (of the
    ``crius`` stage's; ``scale`` is not allowed: ``mosaic`` widens no job's demand;
    ``queue`` is ``ordered`` unless set),
    ``restart_cost_s`` (the scheduler's, 30 unless set; given to both unless their tables set
    it), ``keep`` (true: the
    round ends with :func:`planner.policies.keep.keep_in_place`)."""

    rubick: RubickAllocation
    crius: CriusAllocation
    shaping: Shaping
    keep: bool = True

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        f = options_reader(options, "mosaic reconfiguration", ["rubick", "crius", "restart_cost_s", "keep"])
        cost = f.opt_float("restart_cost_s", minimum=0.0)
        rubick_options = dict(f.opt_object("rubick") or {})
        crius_options = dict(f.opt_object("crius") or {})
        if "scale" in crius_options:
            f.fail_key("crius", "'scale' widens jobs' demands; mosaic schedules jobs as they declare them")
        if cost is not None:
            rubick_options.setdefault("restart_cost_s", cost)
            crius_options.setdefault("restart_cost_s", cost)
        # Crius decides its jobs in the round's priority order, which the mosaic ordering
        # owns (rules.py), not in its own submission order.
        crius_options.setdefault("queue", "ordered")
        return cls(
            RubickAllocation.from_options(rubick_options, context),
            CriusAllocation.from_options(crius_options, context),
            SHAPINGS.create("tune", {}, context),
            f.flag("keep", True),
        )

    def hold_back(self, snapshot: Snapshot, ordered: Sequence[Job]) -> Mapping[str, Outcome]:
        """Rubick's hold-back (no plan fits GPU memory at the shape asked), for its jobs."""
        types = cluster_types(snapshot)
        return self.rubick.hold_back(snapshot, [j for j in ordered if not crius_decides(j, types)])

    def reconfigure(self, snapshot: Snapshot, ordered: Sequence[Job], draft: Draft) -> Draft:
        types = cluster_types(snapshot)
        crius_ids = {j.id for j in ordered if crius_decides(j, types)}
        shaped = draft
        if crius_ids:
            draft = self._rubick(snapshot, ordered, draft, crius_ids)
            draft = self._rubick_on_freed(
                snapshot, ordered, draft, self._crius(snapshot, ordered, draft, crius_ids), crius_ids
            )
        else:
            draft = self.rubick.reconfigure(snapshot, ordered, draft)
        draft = _within_nodes(snapshot, ordered, self._reshape(snapshot, shaped, draft, crius_ids))
        if not self.keep:
            return draft
        return self._tuned_in_place(
            snapshot, ordered, shaped, keep_in_place(snapshot, ordered, draft), crius_ids
        )

    def _tuned_in_place(
        self, snapshot: Snapshot, ordered: Sequence[Job], shaped: Draft, draft: Draft, crius_ids: set[str]
    ) -> Draft:
        """Synergy-Tune's CPUs and memory on the round as it ends, for the jobs whose CPUs and
        memory Tune owns (:func:`_tune_shapes`), where a later stage
        changed a job's GPUs, CPUs or memory after the shaping stage.

        The next round's Tune sees the round applied: it keeps a running job's share where
        that is all the job wants or fair and fits, reshapes any other, and gives a job below
        its wish the wish where it now fits. The round's own may differ: a job the placement
        stopped and Rubick started again on its GPUs has Rubick's proportional share, one
        keep-in-place gave its set back its running share whatever it is, one whose share
        the shaping stage cut for a job that a later stage then moved away keeps the cut
        share, and a job switched back for a later stage's job may have room for more again.
        So Tune plans the round applied, a running job left on its own GPUs shown with the
        share it runs with, and these jobs take Tune's share (a running job its very
        assignment where that is it). A rigid best-effort job left waiting for GPUs that Tune
        starts where the round left GPUs idle (a later stage moved a job off GPUs the
        placement gave it) starts: the next round's placement would start it there. Where
        that over-commits a node, the jobs there keep the round's (and none starts)."""
        changed = len(shaped.assignments) != len(draft.assignments) or any(
            (s := shaped.assignments.get(i)) is None or not s.same_resources(a)
            for i, a in draft.assignments.items()
        )
        if not changed:
            return draft
        running = {j.id: j.assignment for j in snapshot.jobs if j.is_running and j.assignment is not None}
        jobs = {j.id: j for j in snapshot.jobs}
        mine = [
            i for i, a in draft.assignments.items() if not a.shares_with and _tune_shapes(jobs[i], crius_ids)
        ]
        if not mine:
            return draft
        back = {
            i: own
            for i in mine
            if (own := running.get(i)) is not None
            and own.gpus == draft.assignments[i].gpus
            and not own.shares_with
        }
        shown = {**draft.assignments, **back}
        tuned = self.shaping.shape(_applied(snapshot, shown), Draft(shown, draft.outcomes)).assignments
        out = dict(draft.assignments)
        for job_id in mine:
            a, t = shown[job_id], tuned.get(job_id)
            if t is None or t.gpus != a.gpus:
                continue
            same = t.cpus == a.cpus and abs(t.mem_gb - a.mem_gb) <= 1e-9 and out[job_id].plan == a.plan
            out[job_id] = a if same else Assignment(a.gpus, t.cpus, t.mem_gb, out[job_id].plan)
        started = [i for i in tuned if i not in draft.assignments and i not in crius_ids and movable(jobs[i])]
        out.update((i, tuned[i]) for i in started)
        for name in over_committed(snapshot.nodes_by_name, out.values()):
            for job_id in mine:
                if name in draft.assignments[job_id].nodes:
                    out[job_id] = draft.assignments[job_id]
            for job_id in started:
                if name in tuned[job_id].nodes:
                    out.pop(job_id, None)
        started = [i for i in started if i in out]
        if not started and all(out[i] is a for i, a in draft.assignments.items()):
            return draft
        outcomes = {**draft.outcomes, **dict.fromkeys(started, Outcome.PLACED)}
        return Draft({j.id: out[j.id] for j in ordered if j.id in out}, outcomes)

    def _reshape(self, snapshot: Snapshot, shaped: Draft, draft: Draft, crius_ids: set[str]) -> Draft:
        """Synergy-Tune's CPUs and memory again, where Rubick or Crius moved GPUs: Tune shaped
        the placement's draft, and a job they moved away (or placed) changes what its node's
        neighbours can have. Tune runs on the round applied (every job placed running where it
        now is, so Tune keeps every GPU), as the next round's Tune will; a job Rubick decides
        keeps what it got where Rubick set its CPUs or memory (it owns those with its plan);
        Crius's jobs take Tune's (Crius gives the proportional share, as Tune's floor), and so
        do rigid jobs without candidate plans that Rubick started or moved (it gives them the
        proportional share too, but their CPUs and memory are Tune's: the next round's Tune
        would give them its own)."""
        moved = any(
            (a := shaped.assignments.get(i)) is None or a.gpus != b.gpus for i, b in draft.assignments.items()
        )
        if not moved:
            return draft
        applied = _applied(snapshot, draft.assignments)
        tuned = self.shaping.shape(applied, Draft(draft.assignments, draft.outcomes)).assignments
        jobs = {j.id: j for j in snapshot.jobs}
        out: dict[str, Assignment] = {}
        for job_id, b in draft.assignments.items():
            a = shaped.assignments.get(job_id)
            t = tuned.get(job_id)
            set_by_rubick = not _tune_shapes(jobs[job_id], crius_ids) and (
                a is None or a.cpus != b.cpus or abs(a.mem_gb - b.mem_gb) > 1e-9
            )
            if (
                not set_by_rubick
                and t is not None
                and t.gpus == b.gpus
                and (t.cpus, t.mem_gb) != (b.cpus, b.mem_gb)
            ):
                out[job_id] = Assignment(b.gpus, t.cpus, t.mem_gb, b.plan, b.shares_with)
            else:
                out[job_id] = b
        # Tune's shares on the applied round hold together per node; taken for some jobs only
        # (Rubick's stay), a node may be over-committed: there every job keeps the round's own.
        for name in over_committed(snapshot.nodes_by_name, out.values()):
            for job_id, b in draft.assignments.items():
                if name in b.nodes:
                    out[job_id] = b
        return Draft(out, draft.outcomes)

    def _rubick(self, snapshot: Snapshot, ordered: Sequence[Job], draft: Draft, crius_ids: set[str]) -> Draft:
        """Rubick's round with Crius's running jobs rigid on their GPUs and its waiting ones out."""
        waiting = {j.id for j in ordered if j.id in crius_ids and not j.is_running}
        shown = [_rigid(j) if j.id in crius_ids else j for j in ordered if j.id not in waiting]
        by_id = {j.id: j for j in shown}
        view = replace(snapshot, jobs=tuple(by_id.get(j.id, j) for j in snapshot.jobs if j.id not in waiting))
        kept = Draft(
            {i: a for i, a in draft.assignments.items() if i not in waiting},
            {i: o for i, o in draft.outcomes.items() if i not in waiting},
        )
        done = self.rubick.reconfigure(view, shown, kept)
        outcomes = {**{i: o for i, o in draft.outcomes.items() if i in waiting}, **done.outcomes}
        return Draft(done.assignments, outcomes)

    def _rubick_on_freed(
        self, snapshot: Snapshot, ordered: Sequence[Job], before: Draft, draft: Draft, crius_ids: set[str]
    ) -> Draft:
        """Rubick's round again where Crius freed GPUs that Rubick's round saw held: Rubick
        decided its jobs' counts before Crius moved or shrank its jobs, and the next round's
        Rubick, seeing those GPUs idle, would grow or admit its jobs there. Crius's jobs are
        shown rigid on the GPUs Crius gave them (those it left waiting not at all); where
        Rubick would change one of them, its round is not taken (Crius owns them)."""
        held = {slot for a in draft.assignments.values() for slot in a.gpus}
        freed = any(
            slot not in held for i, a in before.assignments.items() if i in crius_ids for slot in a.gpus
        )
        if not freed:
            return draft
        placed = draft.assignments
        shown = [
            _fixed(j, placed[j.id]) if j.id in crius_ids else j
            for j in ordered
            if j.id not in crius_ids or j.id in placed
        ]
        by_id = {j.id: j for j in shown}
        view = replace(snapshot, jobs=tuple(by_id[j.id] for j in snapshot.jobs if j.id in by_id))
        hidden = {i for i in crius_ids if i not in placed}
        done = self.rubick.reconfigure(
            view, shown, Draft(placed, {i: o for i, o in draft.outcomes.items() if i not in hidden})
        )
        if any(done.assignments.get(i) != a for i, a in placed.items() if i in crius_ids):
            return draft
        return Draft(
            {j.id: done.assignments[j.id] for j in ordered if j.id in done.assignments},
            {**draft.outcomes, **done.outcomes},
        )

    def _crius(self, snapshot: Snapshot, ordered: Sequence[Job], draft: Draft, crius_ids: set[str]) -> Draft:
        """Crius's round on its jobs; every other job is rigid (so not decided) and waiting
        ones it does not own are not shown (its backfill would place them)."""
        shown = [
            j if j.id in crius_ids else _rigid(j)
            for j in ordered
            if j.id in crius_ids or j.id in draft.assignments
        ]
        by_id = {j.id: j for j in shown}
        view = replace(snapshot, jobs=tuple(by_id[j.id] for j in snapshot.jobs if j.id in by_id))
        done = self.crius.reconfigure(view, shown, draft)
        return Draft(
            {j.id: done.assignments[j.id] for j in ordered if j.id in done.assignments},
            {**draft.outcomes, **done.outcomes},
        )


def _applied(snapshot: Snapshot, assignments: Mapping[str, Assignment]) -> Snapshot:
    """``snapshot`` as the next round sees it: the jobs assigned run there, the others wait."""
    jobs = tuple(
        replace(j, state=JobState.RUNNING, assignment=assignments[j.id])
        if j.id in assignments
        else _waiting(j)
        if j.is_running
        else j
        for j in snapshot.jobs
    )
    return replace(snapshot, jobs=jobs)


def _waiting(job: Job) -> Job:
    return replace(job, state=JobState.PENDING, assignment=None)


def _rigid(job: Job) -> Job:
    """``job`` as a stage that must not change its shape sees it: rigid, on what it holds."""
    if not job.elastic and not job.candidate_plans:
        return job
    a = job.assignment
    count = a.num_gpus if job.is_running and a is not None else job.num_gpus
    return replace(job, num_gpus=count, min_gpus=None, max_gpus=None, gpu_types=(), candidate_plans=())


def _tune_shapes(job: Job, crius_ids: set[str]) -> bool:
    """Whether Synergy-Tune owns ``job``'s CPUs and memory (rules.py): Crius's jobs, and rigid
    jobs without candidate plans (Rubick leaves their shape as it is: where it starts or moves
    one, it gives it the proportional share, which is no decision of its own)."""
    return job.id in crius_ids or (not job.elastic and not job.candidate_plans)


def _fixed(job: Job, a: Assignment) -> Job:
    """``job`` running rigid on ``a``: as a stage that must not change it sees a job that
    another stage of the round decided."""
    return _rigid(replace(job, state=JobState.RUNNING, assignment=a))


def _within_nodes(snapshot: Snapshot, ordered: Sequence[Job], draft: Draft) -> Draft:
    """Where a node's CPUs or memory are over-committed (a job Rubick or Crius placed took what
    Synergy-Tune had given a neighbour beyond its proportional share), switch the most generous
    neighbours back to their proportional share (Tune's rule 2, Synergy §4.2) until it fits.
    Every job at most at its proportional share always fits."""
    nodes = snapshot.nodes_by_name
    over = over_committed(nodes, draft.assignments.values())
    if not over:
        return draft
    used_cpus, used_mem = node_usage(draft.assignments.values())
    assignments = dict(draft.assignments)
    for name in over:
        extras = []
        for job_id, a in assignments.items():
            if name not in a.nodes:
                continue
            sharers = 2 if a.shares_with else 1
            cpus, mem = proportional_share(nodes, a, sharers)
            if a.cpus > cpus or a.mem_gb > mem + 1e-6:
                extras.append((-(a.cpus - cpus), -(a.mem_gb - mem), job_id, cpus, mem))
        for _, _, job_id, cpus, mem in sorted(extras):
            if used_cpus[name] <= nodes[name].cpus and used_mem[name] <= nodes[name].mem_gb + 1e-6:
                break
            a = assignments[job_id]
            new = Assignment(a.gpus, min(a.cpus, max(1, cpus)), min(a.mem_gb, mem), a.plan, a.shares_with)
            for node, c, m in a.node_shares():
                used_cpus[node] -= c
                used_mem[node] -= m
            for node, c, m in new.node_shares():
                used_cpus[node] += c
                used_mem[node] += m
            assignments[job_id] = new
    return Draft({j.id: assignments[j.id] for j in ordered if j.id in assignments}, draft.outcomes)
