"""Wise GPU sharing: SJF-BSBF and SJF-FFS (SJF-BSBF §V-B, Algorithm 1), as pipeline stages.

Algorithm 1 walks the jobs in shortest-job-first order. A job that fits the free GPUs
takes them, consolidated (lines 3-8: the ``consolidated`` placement before this stage).
Otherwise it looks at GPUs that already hold exactly one job (lines 9-19): each such
running job and the new job form a pair, and

* ``bsbf`` (best sharing benefit first) keeps only the pairs where Theorem 1 says
  sharing now beats waiting, with the new job's best micro-batch (Algorithm 2), and
  takes the candidates' GPUs in ascending order of the pair's average JCT;
* ``ffs`` (first-fit sharing, the paper's baseline) takes the first GPUs holding one
  job, in cluster order, without that evaluation (only GPU memory limits it: it runs
  with the largest micro-batch that fits).

At most two jobs share a GPU; a job takes all its GPUs from sharing candidates (never
free GPUs mixed in: its speed is set by the shared ones anyway, §V-B2); a job that fits
one server stays on one server (Mosaic's consolidation rule). A job that cannot share
well waits. Nothing is preempted or moved: with the non-preemptive ``sjf`` ordering,
running jobs keep their GPUs and plans, and the ``shared-consolidated`` placement below
keeps a sharing pair together from round to round.

The new job's micro-batch and accumulation steps go into its plan
(``micro_batch`` x ``grad_accum`` = its per-GPU batch, so the global batch
is unchanged, §IV-A4); the running job's plan never changes. Jobs that are
``guaranteed`` or have a deadline never share (as in Tesserae's packing).

On the live path a shared GPU is a Slurm GRES ``shard`` (README.md "Sharing GPUs on the live path"):
``shares_with`` in both jobs' assignments says which GPUs are shared.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Self

from planner.model import Assignment, GpuSlot, Job, Outcome, Snapshot
from planner.policies.common import id_key, options_reader, remaining_estimate_s
from planner.policies.placement import ConsolidatedPlacement
from planner.registry import StageContext
from planner.sharing.pair import PairDecision, SubBatchOption, best_setting
from planner.stages import PACKINGS, PLACEMENTS, Draft
from profiles.interference import PairInterference, Sharer
from profiles.iteration import IterationModels, accumulation_of, accumulation_plan, micro_batches
from profiles.schema import plan_key
from profiles.store import ProfileStore

_NEVER_SHARED = (Outcome.INFEASIBLE, Outcome.NO_GPU_TYPE, Outcome.BLOCKED)


def _protected(job: Job) -> bool:
    return job.guaranteed or job.deadline_s is not None


@dataclass(frozen=True)
class SharingOptions:
    interference: float | None = None  # one ξ for every pair that fits (Figure 6(b)); None: profiles

    @classmethod
    def read(cls, options: Mapping[str, Any], component: str) -> SharingOptions:
        f = options_reader(options, component, ["interference"])
        value = f.opt_float("interference", minimum=0.0)
        if value is not None and value <= 0:
            f.fail_key("interference", f"must be > 0, got {value}")
        return cls(interference=value)


@dataclass(frozen=True, slots=True)
class PairOptions:
    """A new job's micro-batches beside one host: all that fit, and those that can be best."""

    fitting: tuple[SubBatchOption, ...]
    contenders: tuple[SubBatchOption, ...]


class PairModel:
    """What the stages know about a pair: ξ, accumulation slowdowns and Algorithm 2's options.

    Options depend only on the two jobs' kinds (model, batch, GPUs, plan), the GPU type
    and the new job's server count, so they are memoised: a busy round evaluates
    hundreds of pending jobs against dozens of running ones.
    """

    def __init__(self, profiles: ProfileStore, interference: PairInterference) -> None:
        self.profiles = profiles
        self.interference = interference
        self.iteration = IterationModels()
        self._options: dict[tuple[object, ...], PairOptions] = {}

    def solo_slowdown(self, job: Job, plan: Mapping[str, Any] | None, gpu_type: str, nodes: int) -> float:
        """The job's time alone with ``plan``'s accumulation over its time without."""
        ga = accumulation_of(plan)
        if ga is None:
            return 1.0
        batch = ga[0] * ga[1]
        profile = self.profiles.resolve(job.model)
        return self.iteration.accumulation_slowdown(profile, gpu_type, batch, job.num_gpus, nodes, ga[1])

    def options(
        self, host: Job, host_plan: Mapping[str, Any] | None, new: Job, gpu_type: str, nodes: int
    ) -> PairOptions:
        """Every micro-batch of ``new`` that fits beside ``host``, largest first (Algorithm 2, line 5)."""
        key = (host.model, host.batch_size, host.num_gpus, plan_key(host_plan),
               new.model, new.batch_size, new.num_gpus, plan_key(new.plan), gpu_type, nodes)  # fmt: skip
        cached = self._options.get(key)
        if cached is not None:
            return cached
        host_side = Sharer(host.model, host.batch_size, host.num_gpus, host_plan)
        profile = self.profiles.resolve(new.model)
        found = []
        for micro in micro_batches(new.batch_size) if new.batch_size is not None else [None]:
            batch = new.batch_size
            plan = new.plan if micro is None or batch is None else accumulation_plan(batch, micro, new.plan)
            ratios = self.interference.ratios(
                host_side, Sharer(new.model, new.batch_size, new.num_gpus, plan or None), gpu_type
            )
            if ratios is None:
                continue  # out of GPU memory at this micro-batch
            steps = 1 if micro is None or batch is None else batch // micro
            slowdown = self.iteration.accumulation_slowdown(
                profile, gpu_type, batch, new.num_gpus, nodes, steps
            )
            found.append(SubBatchOption(micro, steps, slowdown, ratios[0], ratios[1]))
        self._options[key] = result = PairOptions(tuple(found), _undominated(found))
        return result


def _undominated(options: Sequence[SubBatchOption]) -> tuple[SubBatchOption, ...]:
    """Options no other option beats on every count (both ξ and the slowdown), largest first.

    A pair's completion times only grow with either ξ and with the new job's time, so a
    dominated micro-batch is never the best (smaller micro-batches below the smallest
    measured one share its ξ and only add accumulation steps).
    """

    def beats(a: SubBatchOption, b: SubBatchOption) -> bool:
        no_worse = a.xi_running <= b.xi_running and a.xi_new <= b.xi_new and a.slowdown <= b.slowdown
        return no_worse and (a.xi_running, a.xi_new, a.slowdown) != (b.xi_running, b.xi_new, b.slowdown)

    return tuple(o for o in options if not any(beats(other, o) for other in options))


@dataclass
class _Round:
    """This round's GPU occupancy while the stage adds jobs (local, mutable)."""

    snapshot: Snapshot
    jobs: Mapping[str, Job]
    assignments: dict[str, Assignment]
    hosts: dict[str, None] = field(default_factory=dict)  # jobs alone on all their GPUs, in order
    remaining: dict[str, float] = field(default_factory=dict)

    @classmethod
    def start(cls, snapshot: Snapshot, ordered: Sequence[Job], draft: Draft) -> _Round:
        jobs = {j.id: j for j in ordered}
        holders: dict[GpuSlot, int] = {}
        for a in draft.assignments.values():
            for slot in a.gpus:
                holders[slot] = holders.get(slot, 0) + 1
        state = cls(snapshot, jobs, dict(draft.assignments))
        for job in ordered:
            placed = draft.assignments.get(job.id)
            if (
                placed is not None
                and not placed.shares_with
                and not _protected(job)
                and all(holders[s] == 1 for s in placed.gpus)
            ):
                state.hosts[job.id] = None
        return state

    def gpu_type(self, a: Assignment) -> str:
        return self.snapshot.node(a.gpus[0][0]).gpu_type

    def largest_node(self, job: Job) -> int:
        """GPUs of the largest node ``job`` may use (one of a type it accepts)."""
        return max((n.gpus for n in self.snapshot.nodes if job.accepts_type(n.gpu_type)), default=0)

    def host_remaining_s(self, model: PairModel, host_id: str) -> float:
        """The host's solo time left, with the accumulation it runs with (memoised per round)."""
        cached = self.remaining.get(host_id)
        if cached is None:
            job, a = self.jobs[host_id], self.assignments[host_id]
            left = remaining_estimate_s(job)
            cached = left * model.solo_slowdown(job, a.plan, self.gpu_type(a), len(a.per_node))
            self.remaining[host_id] = cached
        return cached

    def share(self, job: Job, slots: Sequence[GpuSlot], partners: Sequence[str], plan: Any) -> None:
        self.assignments[job.id] = Assignment(tuple(slots), 0, 0.0, plan, tuple(sorted(partners, key=id_key)))
        for host in partners:
            a = self.assignments[host]
            self.assignments[host] = Assignment(a.gpus, a.cpus, a.mem_gb, a.plan, (job.id,))
            del self.hosts[host]


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A host the new job may join: sort key (lower first) and its usable options."""

    host: str
    key: tuple[float, ...]
    options: tuple[SubBatchOption, ...]


@dataclass(frozen=True)
class _SharingStage(ABC):
    """Algorithm 1's sharing path; the two stages differ in how they rank and accept hosts."""

    options: SharingOptions
    model: PairModel
    max_jobs_per_gpu: ClassVar[int] = 2
    component: ClassVar[str] = "sharing"

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        opts = SharingOptions.read(options, cls.component)
        interference = PairInterference(
            context.profiles, fixed=opts.interference, noise=context.profile_noise, seed=context.seed
        )
        return cls(opts, PairModel(context.profiles, interference))

    def pack(self, snapshot: Snapshot, ordered: Sequence[Job], draft: Draft) -> Draft:
        state = _Round.start(snapshot, ordered, draft)
        outcomes = dict(draft.outcomes)
        added = False
        for job in ordered:
            if not state.hosts:
                break
            if (
                job.id in state.assignments
                or job.is_running
                or _protected(job)
                or draft.outcomes.get(job.id) in _NEVER_SHARED
            ):
                continue
            choice = self._choose(state, job)
            if choice is not None:
                slots, partners, plan = choice
                state.share(job, slots, partners, plan)
                outcomes[job.id] = Outcome.PLACED
                added = True
        if not added:
            return draft
        assignments = {j.id: state.assignments[j.id] for j in ordered if j.id in state.assignments}
        return Draft(assignments=assignments, outcomes=outcomes)

    def _choose(
        self, state: _Round, job: Job
    ) -> tuple[list[GpuSlot], list[str], Mapping[str, Any] | None] | None:
        g = job.num_gpus
        largest = state.largest_node(job)
        one_node = g <= largest
        if not one_node and largest == 0:
            return None
        nodes = 1 if one_node else math.ceil(g / largest)
        candidates: dict[str, _Candidate] = {}
        for host in state.hosts:
            a = state.assignments[host]
            if not all(job.accepts_type(state.snapshot.node(n).gpu_type) for n in a.nodes):
                continue
            options = self.model.options(state.jobs[host], a.plan, job, state.gpu_type(a), nodes)
            if not options.fitting:
                continue  # does not fit in GPU memory beside this host at any micro-batch
            candidate = self.candidate(state, host, job, options)
            if candidate is not None:
                candidates[host] = candidate
        if not candidates:
            return None
        slots = self._pick_slots(state, candidates, g, one_node)
        if slots is None:
            return None
        partners = list(dict.fromkeys(host for host, _ in slots))
        setting = self.settle(state, job, [candidates[h] for h in partners])
        if setting is None:
            return None
        plan: Mapping[str, Any] | None = job.plan
        if setting.micro_batch is not None and job.batch_size is not None:
            plan = accumulation_plan(job.batch_size, setting.micro_batch, job.plan) or None
        return [s for _, s in slots], partners, plan

    def _pick_slots(
        self, state: _Round, candidates: Mapping[str, _Candidate], g: int, one_node: bool
    ) -> list[tuple[str, GpuSlot]] | None:
        """g GPUs of the candidates, best-ranked first; on one server when the job fits one."""
        node_rank = {n.name: i for i, n in enumerate(state.snapshot.nodes)}
        ranked = sorted(
            ((c.key, node_rank[s[0]], s, c.host) for c in candidates.values()
             for s in state.assignments[c.host].gpus),
            key=lambda x: (x[0], x[1], x[2]),
        )  # fmt: skip
        if not one_node:
            chosen = ranked[:g]
            return [(h, s) for _, _, s, h in chosen] if len(chosen) == g else None
        per_node: dict[str, list[tuple[tuple[float, ...], int, GpuSlot, str]]] = {}
        for entry in ranked:
            per_node.setdefault(entry[2][0], []).append(entry)
        best: tuple[tuple[object, ...], list[tuple[str, GpuSlot]]] | None = None
        for node, entries in per_node.items():
            if len(entries) < g:
                continue
            chosen = entries[:g]
            cost = (chosen[-1][0], node_rank[node])  # the worst pair it joins, then cluster order
            if best is None or cost < best[0]:
                best = (cost, [(h, s) for _, _, s, h in chosen])
        return None if best is None else best[1]

    @abstractmethod
    def candidate(self, state: _Round, host: str, job: Job, options: PairOptions) -> _Candidate | None:
        """Whether ``job`` may join ``host``, and how good that is (lower key first)."""

    @abstractmethod
    def settle(self, state: _Round, job: Job, hosts: Sequence[_Candidate]) -> SubBatchOption | None:
        """The micro-batch the job runs with beside all of ``hosts``; ``None``: it waits."""


def _common_micro_batches(hosts: Sequence[_Candidate]) -> list[int | None]:
    """Micro-batches that fit beside every host, largest first."""
    sets = [{o.micro_batch for o in c.options} for c in hosts]
    common = set.intersection(*sets) if sets else set()
    return sorted(common, key=lambda m: -(m or 0))


@PACKINGS.register("bsbf")
@dataclass(frozen=True)
class BestSharingBenefitFirst(_SharingStage):
    """SJF-BSBF's sharing: only pairs Theorem 1 approves, best pair JCT first (Algorithm 1, 2).

    Option: ``interference`` (inject one ξ for every pair that fits; Figure 6(b)).
    """

    component: ClassVar[str] = "bsbf sharing"

    def candidate(self, state: _Round, host: str, job: Job, options: PairOptions) -> _Candidate | None:
        decision = self._decide(state, host, job, options.contenders)
        if not decision.concurrent:
            return None  # sharing would hurt the pair's average JCT: not a candidate
        return _Candidate(host, (decision.avg_completion_s,), options.fitting)

    def settle(self, state: _Round, job: Job, hosts: Sequence[_Candidate]) -> SubBatchOption | None:
        # One micro-batch for the job on all its GPUs: the one with the lowest total
        # pair JCT among those every pair still approves.
        best: tuple[float, SubBatchOption] | None = None
        for micro in _common_micro_batches(hosts):
            total = 0.0
            chosen: SubBatchOption | None = None
            for c in hosts:
                option = next(o for o in c.options if o.micro_batch == micro)
                decision = self._decide(state, c.host, job, (option,))
                if not decision.concurrent:
                    break
                total += decision.avg_completion_s
                chosen = option
            else:
                if chosen is not None and (best is None or total < best[0]):
                    best = (total, chosen)
        return None if best is None else best[1]

    def _decide(self, state: _Round, host: str, job: Job, options: Sequence[SubBatchOption]) -> PairDecision:
        return best_setting(state.host_remaining_s(self.model, host), remaining_estimate_s(job), options)


@PACKINGS.register("ffs")
@dataclass(frozen=True)
class FirstFitSharing(_SharingStage):
    """SJF-FFS: the first GPUs holding one job, in cluster order, with no evaluation (§VI-A4).

    It still respects GPU memory: the job runs with the largest micro-batch that fits
    beside every host. Option: ``interference`` (as for ``bsbf``).
    """

    component: ClassVar[str] = "ffs sharing"

    def candidate(self, state: _Round, host: str, job: Job, options: PairOptions) -> _Candidate | None:
        return _Candidate(host, (), options.fitting)  # equal keys: slots go in cluster order

    def settle(self, state: _Round, job: Job, hosts: Sequence[_Candidate]) -> SubBatchOption | None:
        common = _common_micro_batches(hosts)
        if not common:
            return None
        return next(o for o in hosts[0].options if o.micro_batch == common[0])


@PLACEMENTS.register("shared-consolidated")
@dataclass(frozen=True)
class SharedConsolidatedPlacement:
    """Consolidated placement that keeps running GPU-sharing jobs together.

    The ``consolidated`` placement is exclusive: of two running jobs sharing GPUs it
    would keep one and move or stop the other. Here the guest of each sharing group
    (:func:`_guests`) is shown to it holding only the GPUs no other running job holds
    (or not at all when there are none), so those stay reserved; afterwards the guest
    gets its full GPU set back, sharing with whoever kept the rest, provided each of its
    shared GPUs holds exactly one kept job; otherwise it waits (only a preemptive policy
    gets there). Options: those of ``consolidated``.
    """

    inner: ConsolidatedPlacement

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        return cls(ConsolidatedPlacement.from_options(options, context))

    def place(self, snapshot: Snapshot, ordered: Sequence[Job]) -> Draft:
        guests = _guests(ordered)
        if not guests:
            return self.inner.place(snapshot, ordered)
        shown: dict[str, Job | None] = {}
        for job, own in guests.values():
            a = job.assignment
            assert a is not None
            shown[job.id] = (
                replace(job, assignment=Assignment(own, a.cpus, a.mem_gb, a.plan)) if own else None
            )
        visible = [shown.get(j.id, j) for j in ordered]
        draft = self.inner.place(snapshot, [j for j in visible if j is not None])
        assignments = dict(draft.assignments)
        outcomes = dict(draft.outcomes)
        previous = {j.id: j.assignment for j in ordered}
        holder: dict[GpuSlot, list[str]] = {}
        for job_id, placed in assignments.items():
            if job_id not in guests:
                for slot in placed.gpus:
                    holder.setdefault(slot, []).append(job_id)
        for job, own in guests.values():
            a = job.assignment
            assert a is not None
            kept_own = not own or outcomes.get(job.id) is Outcome.KEPT
            owners = [holder.get(slot, []) for slot in a.gpus if slot not in own]
            if not kept_own or any(len(o) != 1 or outcomes.get(o[0]) is not Outcome.KEPT for o in owners):
                assignments.pop(job.id, None)
                outcomes[job.id] = Outcome.NO_CAPACITY
                continue
            partners = tuple(sorted({o[0] for o in owners}, key=id_key))
            assignments[job.id] = a if a.shares_with == partners else _with_partners(a, partners)
            outcomes[job.id] = Outcome.KEPT
            for p in partners:
                pa = assignments[p]
                mates = tuple(sorted({*pa.shares_with, job.id}, key=id_key))
                old = previous[p]
                keep_old = old is not None and _same_sharing(old, pa, mates)
                assignments[p] = old if keep_old and old is not None else _with_partners(pa, mates)
        ordered_assignments = {j.id: assignments[j.id] for j in ordered if j.id in assignments}
        return Draft(assignments=ordered_assignments, outcomes=outcomes)


def _guests(ordered: Sequence[Job]) -> dict[str, tuple[Job, tuple[GpuSlot, ...]]]:
    """Running jobs to show to the exclusive placement only on GPUs of their own.

    Returns id -> (job, GPUs no other shown job holds). The sharing stages build stars:
    a guest took all its GPUs from one or more hosts, each alone until then, so a group
    of running jobs sharing GPUs is one guest and its hosts (a host that finished leaves
    the guest GPUs of its own). The guest is the group's job with the most partners
    (then the fewest GPUs, then the lowest priority); when the others still overlap (a
    shape these stages do not build), every job overlapping a higher-priority one is a
    guest.
    """
    running = {
        j.id: j for j in ordered if j.is_running and j.assignment is not None and j.assignment.shares_with
    }
    rank = {job_id: k for k, job_id in enumerate(running)}
    gpus = {job_id: set(j.assignment.gpus) for job_id, j in running.items() if j.assignment is not None}
    partners = {
        job_id: [p for p in j.assignment.shares_with if p in gpus and gpus[p] & gpus[job_id]]
        for job_id, j in running.items()
        if j.assignment is not None
    }
    chosen: list[str] = []
    seen: set[str] = set()
    for root in running:
        if root in seen or not partners[root]:
            continue
        group, todo = [], [root]
        seen.add(root)
        while todo:
            job_id = todo.pop()
            group.append(job_id)
            for p in partners[job_id]:
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
        guest = max(group, key=lambda j: (len(partners[j]), -len(gpus[j]), rank[j]))
        rest = [j for j in group if j != guest]
        if all(not (gpus[a] & gpus[b]) for k, a in enumerate(rest) for b in rest[k + 1 :]):
            chosen.append(guest)
            continue
        used: set[GpuSlot] = set()
        for j in sorted(group, key=rank.__getitem__):
            if gpus[j] & used:
                chosen.append(j)
            else:
                used |= gpus[j]
    shown: set[GpuSlot] = set()
    for job_id in running:
        if job_id not in chosen:
            shown |= gpus[job_id]
    out = {}
    for job_id in sorted(chosen, key=rank.__getitem__):
        a = running[job_id].assignment
        assert a is not None
        out[job_id] = (running[job_id], tuple(s for s in a.gpus if s not in shown))
    return out


def _with_partners(a: Assignment, partners: tuple[str, ...]) -> Assignment:
    return Assignment(a.gpus, a.cpus, a.mem_gb, a.plan, partners)


def _same_sharing(old: Assignment, new: Assignment, partners: tuple[str, ...]) -> bool:
    return old.same_resources(new) and old.shares_with == partners
