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

On the live path a shared GPU is a Slurm GRES ``shard`` (docs/user-guide.md "Sharing GPUs"):
``shares_with`` in both jobs' assignments says which GPUs are shared.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Self

import numpy as np

from planner.core.errors import ConfigError
from planner.core.fields import Fields
from planner.core.model import Assignment, GpuSlot, Job, JobState, Outcome, Snapshot
from planner.policies.common import id_key, options_reader, remaining_estimate_s
from planner.policies.placement import ConsolidatedPlacement
from planner.registry import StageContext
from planner.sharing.pair import PairDecision, SubBatchOption, best_setting, concurrent_completion_s
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
        self._sides: dict[tuple[object, ...], list[tuple[int | None, int, Sharer]]] = {}
        self._slowdowns: dict[tuple[object, ...], float] = {}

    def _new_sides(self, new: Job) -> list[tuple[int | None, int, Sharer]]:
        """The new job's side of a pair at each micro-batch, largest first: (micro, steps, side)."""
        key = (new.model, new.batch_size, new.num_gpus, plan_key(new.plan))
        cached = self._sides.get(key)
        if cached is None:
            self.profiles.resolve(new.model)  # an unknown model fails here, whether or not it fits
            cached = []
            for micro in micro_batches(new.batch_size) if new.batch_size is not None else [None]:
                batch = new.batch_size
                if micro is None or batch is None:
                    plan, steps = new.plan, 1
                else:
                    plan, steps = accumulation_plan(batch, micro, new.plan), batch // micro
                cached.append((micro, steps, Sharer(new.model, new.batch_size, new.num_gpus, plan or None)))
            self._sides[key] = cached
        return cached

    def _slowdown(self, new: Job, gpu_type: str, nodes: int, micro: int | None, steps: int) -> float:
        """The new job's accumulation slowdown at ``micro`` (memoised: it does not depend on the host)."""
        key = (new.model, new.batch_size, new.num_gpus, gpu_type, nodes, micro, steps)
        cached = self._slowdowns.get(key)
        if cached is None:
            profile = self.profiles.resolve(new.model)
            cached = self.iteration.accumulation_slowdown(
                profile, gpu_type, new.batch_size, new.num_gpus, nodes, steps
            )
            self._slowdowns[key] = cached
        return cached

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
        found = []
        for micro, steps, sharer in self._new_sides(new):
            ratios = self.interference.ratios(host_side, sharer, gpu_type)
            if ratios is None:
                continue  # out of GPU memory at this micro-batch
            slowdown = self._slowdown(new, gpu_type, nodes, micro, steps)
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
    index: _HostIndex | None = None
    largest: dict[tuple[str, ...] | None, int] = field(default_factory=dict)

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
        state.index = _HostIndex.build(state)
        return state

    def gpu_type(self, a: Assignment) -> str:
        return self.snapshot.node(a.gpus[0][0]).gpu_type

    def largest_node(self, job: Job) -> int:
        """GPUs of the largest node ``job`` may use (one of a type it accepts)."""
        key = job.accepted_types
        cached = self.largest.get(key)
        if cached is None:
            cached = max((n.gpus for n in self.snapshot.nodes if job.accepts_type(n.gpu_type)), default=0)
            self.largest[key] = cached
        return cached

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
            if self.index is not None:
                self.index.retire(host)


@dataclass(frozen=True)
class _Group:
    """The hosts one kind of new job may join (kind-level checks passed), flattened.

    ``hosts``: host numbers; ``fitting``: per host, the micro-batches that fit beside it;
    ``slowdown``/``xi_running``/``xi_new`` (hosts x options, ``valid`` where an option
    exists): each host's contenders (Algorithm 2); ``slots``/``slot_pos``: the hosts'
    GPUs (global numbers) and which host each belongs to (position in ``hosts``).
    """

    hosts: np.ndarray
    fitting: list[tuple[SubBatchOption, ...]]
    slowdown: np.ndarray
    xi_running: np.ndarray
    xi_new: np.ndarray
    valid: np.ndarray
    slots: np.ndarray
    slot_pos: np.ndarray

    def only(self, keep: np.ndarray) -> _Group:
        """The group of the hosts where ``keep`` holds."""
        kept = np.flatnonzero(keep)
        position = np.full(len(self.hosts), -1)
        position[kept] = np.arange(len(kept))
        slot_kept = keep[self.slot_pos]
        return _Group(
            hosts=self.hosts[kept],
            fitting=[self.fitting[k] for k in kept],
            slowdown=self.slowdown[kept],
            xi_running=self.xi_running[kept],
            xi_new=self.xi_new[kept],
            valid=self.valid[kept],
            slots=self.slots[slot_kept],
            slot_pos=position[self.slot_pos[slot_kept]],
        )


@dataclass
class _HostIndex:
    """The round's hosts by kind, and their GPUs in cluster order, as arrays.

    Whether a job may join a host, and its options there, depend only on the host's
    kind (model, batch, GPUs, plan, GPU type, the GPU types of its nodes) and the job's
    kind; so the stage asks once per pair of kinds and ranks the hosts with numpy.
    """

    hosts: list[str]
    position: dict[str, int]
    alive: np.ndarray  # per host
    kinds: list[tuple[int, list[int]]]  # (representative host, member hosts) per kind
    slot_start: np.ndarray  # per host: the global number of its first GPU (a host's GPUs are consecutive)
    slot_count: np.ndarray  # per host: its GPUs
    slot_host: np.ndarray  # per GPU of a host: the host, ...
    slot_order: np.ndarray  # ... its rank in cluster order (node, then GPU), ...
    slot_node: np.ndarray  # ... and its node's rank
    slots: list[GpuSlot]
    remaining: np.ndarray  # per host: solo time left (NaN until needed)
    groups: dict[tuple[object, ...], _Group | None] = field(default_factory=dict)

    @classmethod
    def build(cls, state: _Round) -> _HostIndex:
        hosts = list(state.hosts)
        node_rank = {n.name: i for i, n in enumerate(state.snapshot.nodes)}
        by_kind: dict[tuple[object, ...], list[int]] = {}
        slot_start, slot_count = [], []
        slot_host: list[int] = []
        slot_node: list[int] = []
        slots: list[GpuSlot] = []
        for h, host in enumerate(hosts):
            job, a = state.jobs[host], state.assignments[host]
            types = tuple(sorted({state.snapshot.node(n).gpu_type for n in a.nodes}))
            kind = (job.model, job.batch_size, job.num_gpus, plan_key(a.plan), state.gpu_type(a), types)
            by_kind.setdefault(kind, []).append(h)
            slot_start.append(len(slots))
            slot_count.append(len(a.gpus))
            for slot in a.gpus:
                slot_host.append(h)
                slot_node.append(node_rank[slot[0]])
                slots.append(slot)
        order = sorted(range(len(slots)), key=lambda k: (slot_node[k], slots[k]))
        slot_order = np.empty(len(slots), dtype=int)
        slot_order[order] = np.arange(len(slots))
        return cls(
            hosts=hosts,
            position={h: k for k, h in enumerate(hosts)},
            alive=np.ones(len(hosts), dtype=bool),
            kinds=[(members[0], members) for members in by_kind.values()],
            slot_start=np.array(slot_start, dtype=int),
            slot_count=np.array(slot_count, dtype=int),
            slot_host=np.array(slot_host, dtype=int),
            slot_order=slot_order,
            slot_node=np.array(slot_node, dtype=int),
            slots=slots,
            remaining=np.full(len(hosts), np.nan),
        )

    def retire(self, host: str) -> None:
        self.alive[self.position[host]] = False

    def group(self, state: _Round, model: PairModel, job: Job, nodes: int) -> _Group | None:
        """The hosts ``job`` fits beside (GPU types it accepts, GPU memory), memoised per job kind."""
        key = (job.model, job.batch_size, job.num_gpus, plan_key(job.plan), job.accepted_types, nodes)
        if key in self.groups:
            group = self.groups[key]
            if group is not None:
                alive = self.alive[group.hosts]
                if 2 * int(alive.sum()) < len(alive):  # most have been taken: drop them
                    group = self.groups[key] = group.only(alive)
            return group
        members: list[int] = []
        per_kind: list[tuple[int, PairOptions]] = []
        for rep, hosts in self.kinds:
            a = state.assignments[self.hosts[rep]]
            if not all(job.accepts_type(state.snapshot.node(n).gpu_type) for n in a.nodes):
                continue
            options = model.options(state.jobs[self.hosts[rep]], a.plan, job, state.gpu_type(a), nodes)
            if not options.fitting:
                continue  # does not fit in GPU memory beside this host at any micro-batch
            members.extend(hosts)
            per_kind.append((len(hosts), options))
        if not members:
            self.groups[key] = None
            return None
        width = max(1, *(len(o.contenders) for _, o in per_kind))
        pad = (1.0, 1.0, 1.0, False)  # no option: never concurrent
        table = [
            [(o.slowdown, o.xi_running, o.xi_new, True) for o in options.contenders]
            + [pad] * (width - len(options.contenders))
            for _, options in per_kind
        ]
        counts_per_kind = [count for count, _ in per_kind]
        values = np.repeat(np.array([[v[:3] for v in row] for row in table]), counts_per_kind, axis=0)
        flags = np.array([[v[3] for v in row] for row in table], dtype=bool)
        valid = np.repeat(flags, counts_per_kind, axis=0)
        slowdown, xi_running, xi_new = values[:, :, 0], values[:, :, 1], values[:, :, 2]
        fitting: list[tuple[SubBatchOption, ...]] = []
        for count, options in per_kind:
            fitting.extend([options.fitting] * count)
        numbers = np.array(members, dtype=int)
        counts = self.slot_count[numbers]
        slot_pos = np.repeat(np.arange(len(numbers)), counts)
        offset = np.arange(len(slot_pos)) - np.repeat(np.cumsum(counts) - counts, counts)
        group = _Group(
            hosts=numbers,
            fitting=fitting,
            slowdown=slowdown,
            xi_running=xi_running,
            xi_new=xi_new,
            valid=valid,
            slots=self.slot_start[numbers][slot_pos] + offset,
            slot_pos=slot_pos,
        )
        self.groups[key] = group
        return group

    def remaining_s(self, state: _Round, model: PairModel, hosts: np.ndarray) -> np.ndarray:
        """Solo time left of each of ``hosts`` (memoised, like :meth:`_Round.host_remaining_s`)."""
        values: np.ndarray = self.remaining[hosts]
        for k in np.flatnonzero(np.isnan(values)):
            h = int(hosts[k])
            values[k] = self.remaining[h] = state.host_remaining_s(model, self.hosts[h])
        return values


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
        index = state.index
        assert index is not None
        group = index.group(state, self.model, job, nodes)
        if group is None:
            return None
        alive = index.alive[group.hosts]
        if not alive.any():
            return None
        ok, keys = self.candidates(state, group, alive, job)
        ok &= alive
        if not ok.any():
            return None
        picked = self._pick_slots(index, group, ok, keys, g, one_node)
        if picked is None:
            return None
        slots = [index.slots[group.slots[k]] for k in picked]
        positions = list(dict.fromkeys(int(group.slot_pos[k]) for k in picked))
        partners = [index.hosts[int(group.hosts[pos])] for pos in positions]
        chosen = [_Candidate(h, (), group.fitting[pos]) for h, pos in zip(partners, positions, strict=True)]
        setting = self.settle(state, job, chosen)
        if setting is None:
            return None
        plan: Mapping[str, Any] | None = job.plan
        if setting.micro_batch is not None and job.batch_size is not None:
            plan = accumulation_plan(job.batch_size, setting.micro_batch, job.plan) or None
        return slots, partners, plan

    @staticmethod
    def _pick_slots(
        index: _HostIndex, group: _Group, ok: np.ndarray, keys: np.ndarray, g: int, one_node: bool
    ) -> list[int] | None:
        """g GPUs of the candidates (positions in ``group.slots``): lowest key first, then
        cluster order; on one server when the job fits one, the server whose g-th GPU
        ranks best (then the first server)."""
        candidate = np.flatnonzero(ok[group.slot_pos])
        order = index.slot_order[group.slots[candidate]]
        key = keys[group.slot_pos[candidate]]
        if g == 1:  # on one server or not: the best GPU (lowest key, then cluster order)
            if not candidate.size:
                return None
            tied = np.flatnonzero(key == key.min())
            return [int(candidate[tied[np.argmin(order[tied])]])]
        ranked = candidate[np.lexsort((order, key))]
        if not one_node:
            return [int(k) for k in ranked[:g]] if len(ranked) >= g else None
        node = index.slot_node[group.slots[ranked]]
        by_node = np.argsort(node, kind="stable")  # by server, ranked within each
        grouped, node_sorted = ranked[by_node], node[by_node]
        starts = np.flatnonzero(np.r_[True, node_sorted[1:] != node_sorted[:-1]])
        ends = np.r_[starts[1:], len(grouped)]
        full = starts[ends - starts >= g]
        if not full.size:
            return None
        last = full + g - 1  # each full server's g-th best GPU
        best = full[np.lexsort((node_sorted[last], keys[group.slot_pos[grouped[last]]]))[0]]
        return [int(k) for k in grouped[best : best + g]]

    @abstractmethod
    def candidates(
        self, state: _Round, group: _Group, alive: np.ndarray, job: Job
    ) -> tuple[np.ndarray, np.ndarray]:
        """For each host of ``group`` (``alive``: still a host): whether ``job`` may join it,
        and how good that is (a key, lower first)."""

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

    def candidates(
        self, state: _Round, group: _Group, alive: np.ndarray, job: Job
    ) -> tuple[np.ndarray, np.ndarray]:
        # Theorem 1 per host (sharing that would hurt the pair's average JCT: not a
        # candidate); the key is the pair's average completion time.
        assert state.index is not None
        live = np.flatnonzero(alive)
        ok = np.zeros(len(group.hosts), dtype=bool)
        keys = np.full(len(group.hosts), np.inf)
        ok[live], keys[live] = concurrent_completion_s(
            state.index.remaining_s(state, self.model, group.hosts[live]),
            remaining_estimate_s(job),
            group.slowdown[live],
            group.xi_running[live],
            group.xi_new[live],
            group.valid[live],
        )
        return ok, keys

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

    def candidates(
        self, state: _Round, group: _Group, alive: np.ndarray, job: Job
    ) -> tuple[np.ndarray, np.ndarray]:
        # Every host where the job fits; equal keys: slots go in cluster order.
        return np.ones(len(group.hosts), dtype=bool), np.zeros(len(group.hosts))

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
    gets there). Options: those of ``consolidated``, and ``dissolve`` (false): a guest that
    shares all its GPUs moves to GPUs of its own where, the round placed, enough are idle
    for it (the consolidated placement's best fit), and its hosts run alone again.
    """

    inner: ConsolidatedPlacement
    dissolve: bool = False

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        dissolve = Fields(options, "options of shared-consolidated placement", ConfigError).flag(
            "dissolve", False
        )
        inner = {k: v for k, v in options.items() if k != "dissolve"}
        return cls(ConsolidatedPlacement.from_options(inner, context), dissolve)

    def next_wakeup_s(self, time_s: float) -> float | None:
        return self.inner.next_wakeup_s(time_s)

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
        if self.dissolve:
            _dissolve(snapshot, ordered, guests, assignments, outcomes)
        ordered_assignments = {j.id: assignments[j.id] for j in ordered if j.id in assignments}
        return Draft(assignments=ordered_assignments, outcomes=outcomes)


def _dissolve(
    snapshot: Snapshot,
    ordered: Sequence[Job],
    guests: Mapping[str, tuple[Job, tuple[GpuSlot, ...]]],
    assignments: dict[str, Assignment],
    outcomes: dict[str, Outcome],
) -> None:
    """Moves each kept guest that shares all its GPUs onto idle GPUs of its own, where the
    consolidated placement (fresh, not sticky to anything) finds them once every other job
    of the round holds what it was given; its hosts drop it from ``shares_with``."""
    lone = [
        replace(job, state=JobState.PENDING, assignment=None)
        for job, own in guests.values()
        if not own and job.id in assignments and outcomes.get(job.id) is Outcome.KEPT
    ]
    if not lone:
        return
    lone_ids = {j.id for j in lone}
    held = [
        replace(j, state=JobState.RUNNING, assignment=assignments[j.id])
        for j in ordered
        if j.id in assignments and j.id not in lone_ids
    ]
    # Holders first, sticky on what they hold; the guests after them take only what is idle.
    fresh = ConsolidatedPlacement(backfill=True)
    moved = fresh.place(replace(snapshot, jobs=tuple(held + lone)), held + lone).assignments
    for job in lone:
        new = moved.get(job.id)
        if new is None:
            continue
        old = assignments[job.id]
        for p in old.shares_with:
            pa = assignments[p]
            assignments[p] = _with_partners(pa, tuple(o for o in pa.shares_with if o != job.id))
        assignments[job.id] = Assignment(new.gpus, old.cpus, old.mem_gb, old.plan)
        outcomes[job.id] = Outcome.MOVED


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
