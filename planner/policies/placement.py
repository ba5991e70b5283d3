"""Consolidated placement: admission in priority order, as few nodes per job as possible.

Tesserae's placement step (§3, Listing 1 lines 5-12): walk the jobs in priority order
and place each one that fits, without GPU sharing; a job that does not fit waits and
the walk goes on (backfilling), unless ``backfill`` is off (or, with
``backfill_interval_s``, the round is not at one of its backfill times). A job whose GPUs fit on one
node is only ever placed on one node (best fit: the node with the fewest free GPUs
that still fits, to keep large holes for large jobs); a job larger than any node spans
the fewest nodes that can hold it. Gandiva and Tiresias motivate consolidation: a
job's all-reduce across servers is much slower than inside one.

Stickiness (Gavel's rule, the baseline Tesserae §4.1 improves on): a running job whose
GPUs are still free when its turn comes keeps them. To make that likely, GPUs held by
running jobs not yet visited are *reserved*: a higher-priority job takes free,
unreserved GPUs first and displaces running jobs only when nothing else fits, and then
the lowest-priority ones, so a preemption does not cascade into a chain of moves.

Cost: a simulation at twice a cluster's capacity has thousands of pending jobs, few of
which can start in a round. The board keeps, per GPU type, an upper bound on any node's
free GPUs (free counts only fall during a walk), so a job that cannot fit is told why
in constant time, and the answer for a demand (GPU count, accepted types) is reused
until a GPU is taken again. At capacity the cost is the running jobs instead (hundreds,
all kept, every round): their GPUs' board coordinates are remembered per assignment
object from round to round, and, when no two running jobs hold the same GPU, their
reservations are written GPU by GPU only when a search first needs them (before that,
a kept job only lowers its nodes' free counts; no GPU can have been taken from it, since
only a search takes GPUs). Outcomes are exactly those of the full search.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from planner.core.model import Assignment, GpuSlot, Job, JobState, Node, Outcome, Snapshot
from planner.policies.common import options_reader
from planner.registry import StageContext
from planner.stages import PLACEMENTS, Draft

_ON_TIME_S = 1e-6
"""How far from a backfill time (``backfill_interval_s``) a round still counts as on it."""
_OPEN = 1 << 30  # holder rank of a GPU no running job is waiting to keep
_Candidate = tuple[tuple[int, int, int, int], list[tuple[int, int]]]
"""A node's best ``g`` GPUs to displace running jobs from: (sort key, board coordinates)."""
_Cached = tuple[int, tuple[int, int, int, int], list[tuple[int, int]]] | None
"""A node's candidate as found at a stamp: (stamp, sort key, board coordinates)."""


class _Board:
    """GPU occupancy while one round's placement is being built (local, mutable).

    ``holder[i][k]`` is the priority rank (0 = highest) of the best-ranked running job
    not yet visited that holds GPU k of node i, or ``_OPEN``. When a job must displace
    running jobs, it takes the GPUs of the lowest-priority holders first.

    Not built on :class:`planner.slots.FreeSlots` on purpose: the board starts from an empty
    cluster and reserves every running job's GPUs (holder ranks, deferred reservations,
    per-node stamps for cached searches), and it is indexed by node position with flat
    per-GPU arrays, which the round's latency budget at thousands of GPUs needs
    (benchmarks/performance/plan_latency.py); a dict of free-index lists per node would cost that.
    Its rule also differs from :func:`planner.slots.consolidated_slots`: the single-node best
    fit is the same, but a job larger than a node spans the fewest nodes of one type taking
    the fullest first (uneven counts; :func:`_fewest_nodes`), and it may displace running jobs.
    """

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = nodes
        self.index = {n.name: i for i, n in enumerate(nodes)}
        self.taken = [[False] * n.gpus for n in nodes]
        self.reserved = [[0] * n.gpus for n in nodes]  # unvisited running jobs holding the GPU
        self.holder = [[_OPEN] * n.gpus for n in nodes]
        self.n_free = [n.gpus for n in nodes]
        self.n_open = [n.gpus for n in nodes]  # free and not reserved
        self.groups: dict[str, list[int]] = {}
        for i, n in enumerate(nodes):
            self.groups.setdefault(n.gpu_type, []).append(i)
        self.free_by_type = {t: sum(nodes[i].gpus for i in idx) for t, idx in self.groups.items()}
        self.capacity_by_type = dict(self.free_by_type)
        self.largest_by_type = {t: max(nodes[i].gpus for i in idx) for t, idx in self.groups.items()}
        # An upper bound on n_free over each type's nodes: n_free only falls, so the bound
        # stays one; it is made exact when a job's count would pass it (see fits_one_node).
        self.max_free_bound = dict(self.largest_by_type)
        self.version = 0  # bumped whenever a GPU is taken: a failed search's answer holds until then
        # Failed searches by the job's own demand fields (count, gpu_types, gpu_type: no
        # property call in the walk; two spellings of one demand only search twice), valid at
        # failed_version.
        self.failed: dict[tuple[int, tuple[str, ...], str | None], Outcome] = {}
        self.failed_version = 0
        self.demands: dict[tuple[int, tuple[str, ...]], _Demand] = {}
        # Deferred reservations (see ConsolidatedPlacement.place): the running jobs not yet
        # visited, job id -> (coordinates, rank), and the GPUs of those kept so far; None
        # once written to the per-GPU arrays (or when reservations are written up front).
        self.unvisited: dict[str, tuple[list[tuple[int, int]], int]] | None = None
        self.kept_early: list[list[tuple[int, int]]] = []
        self.type_of = [n.gpu_type for n in nodes]
        # Per node, a count bumped whenever one of its GPUs is taken or changes holder, and
        # per GPU count g, each node's displacement candidate found at a count, (count, key,
        # coords) (see single_node): between two searches only the nodes a visit touched are
        # searched again.
        self.stamp = [0] * len(nodes)
        self.candidates: dict[int, list[_Cached]] = {}

    def materialize(self) -> None:
        """Write the deferred reservations: the per-GPU state a search reads becomes what
        reserving every running job up front and keeping the visited ones would give."""
        unvisited = self.unvisited
        if unvisited is None:
            return
        self.unvisited = None
        taken, n_open, stamp = self.taken, self.n_open, self.stamp
        for coords in self.kept_early:  # reserved then kept: taken, not open
            for i, k in coords:
                taken[i][k] = True
                n_open[i] -= 1
                stamp[i] += 1
        self.kept_early = []
        reserved, holder = self.reserved, self.holder
        for coords, rank in unvisited.values():  # reserve(), inline: every running job, every round
            for i, k in coords:
                stamp[i] += 1
                if reserved[i][k] == 0:
                    n_open[i] -= 1
                reserved[i][k] += 1
                if rank < holder[i][k]:  # noqa: PLR1730 - no builtin call in this loop
                    holder[i][k] = rank

    def keep_early(self, coords: list[tuple[int, int]]) -> None:
        """:meth:`keep` while reservations are deferred: the free counts now, the GPUs later."""
        self.version += 1
        n_free, by_type, type_of, stamp = self.n_free, self.free_by_type, self.type_of, self.stamp
        for i, _ in coords:
            n_free[i] -= 1
            stamp[i] += 1
            by_type[type_of[i]] -= 1
        self.kept_early.append(coords)

    # -- bookkeeping -------------------------------------------------------------------
    def slots_of(self, assignment: Assignment) -> list[tuple[int, int]] | None:
        """Board coordinates of an assignment's GPUs; None if any GPU no longer exists."""
        coords = []
        for name, k in assignment.gpus:
            i = self.index.get(name)
            if i is None or not 0 <= k < self.nodes[i].gpus:
                return None
            coords.append((i, k))
        return coords

    def reserve(self, coords: list[tuple[int, int]], rank: int) -> None:
        stamp = self.stamp
        for i, k in coords:
            stamp[i] += 1
            if self.reserved[i][k] == 0:
                self.n_open[i] -= 1
            self.reserved[i][k] += 1
            self.holder[i][k] = min(self.holder[i][k], rank)

    def release(self, coords: list[tuple[int, int]]) -> None:
        stamp = self.stamp
        for i, k in coords:
            stamp[i] += 1
            self.reserved[i][k] -= 1
            if self.reserved[i][k] == 0:
                self.holder[i][k] = _OPEN
                if not self.taken[i][k]:
                    self.n_open[i] += 1

    def claim(self, coords: list[tuple[int, int]]) -> tuple[GpuSlot, ...]:
        self.version += 1
        stamp = self.stamp
        for i, k in coords:
            stamp[i] += 1
            self.taken[i][k] = True
            self.n_free[i] -= 1
            self.free_by_type[self.nodes[i].gpu_type] -= 1
            if self.reserved[i][k] == 0:
                self.n_open[i] -= 1
        return tuple((self.nodes[i].name, k) for i, k in coords)

    def keep(self, coords: list[tuple[int, int]]) -> None:
        """A visited running job takes back the GPUs it reserved (release + claim in one)."""
        self.version += 1
        by_type, stamp = self.free_by_type, self.stamp
        for i, k in coords:
            stamp[i] += 1
            self.reserved[i][k] -= 1
            if self.reserved[i][k] == 0:
                self.holder[i][k] = _OPEN
            self.taken[i][k] = True
            self.n_free[i] -= 1
            by_type[self.nodes[i].gpu_type] -= 1

    def all_free(self, coords: list[tuple[int, int]]) -> bool:
        taken = self.taken
        for i, k in coords:  # noqa: SIM110 - a loop, not all(): called for every running job every round
            if taken[i][k]:
                return False
        return True

    def pick(self, i: int, count: int) -> list[tuple[int, int]]:
        """``count`` free GPUs of node i: unreserved first, then the lowest-priority holders'."""
        taken, holder = self.taken[i], self.holder[i]
        free = [(-holder[k], k) for k in range(len(taken)) if not taken[k]]
        free.sort()
        return [(i, k) for _, k in free[:count]]

    def victims(self, coords: list[tuple[int, int]]) -> list[int]:
        """Ranks of the running jobs that ``coords`` would displace."""
        return sorted({self.holder[i][k] for i, k in coords if self.holder[i][k] != _OPEN})

    def fits_one_node(self, gpu_type: str, g: int) -> bool:
        """True when some node of ``gpu_type`` has ``g`` free GPUs (reserved ones count)."""
        if self.max_free_bound[gpu_type] < g:
            return False
        most = max(map(self.n_free.__getitem__, self.groups[gpu_type]))
        self.max_free_bound[gpu_type] = most
        return most >= g

    # -- search ------------------------------------------------------------------------
    def single_node(self, group: list[int], g: int) -> list[tuple[int, int]] | None:
        self.materialize()
        n_open = self.n_open
        best, fewest = -1, 0
        for i in group:  # best fit among free, unreserved GPUs (the first of the fewest)
            o = n_open[i]
            if o >= g and (best < 0 or o < fewest):
                best, fewest = i, o
        if best >= 0:
            return self.pick(best, g)
        # Displace running jobs: the lowest-priority ones, as few as possible, best fit. A
        # node's candidate depends only on its GPUs' taken flags and holders (and g): it is
        # reused until one of them changes.
        best_key, best_coords = None, None
        n_free, stamp = self.n_free, self.stamp
        cache = self.candidates.get(g)
        if cache is None:
            cache = self.candidates[g] = [None] * len(self.nodes)
        for i in group:
            if n_free[i] >= g:
                entry = cache[i]
                if entry is None or entry[0] != stamp[i]:
                    key, coords = self._displacement(i, g)
                    entry = cache[i] = (stamp[i], key, coords)
                if best_key is None or entry[1] < best_key:
                    best_key, best_coords = entry[1], entry[2]
        return best_coords

    def _displacement(self, i: int, g: int) -> _Candidate:
        """Node i's ``g`` GPUs to take by displacing running jobs (:meth:`pick`'s), keyed
        (-best victim rank, victims, free GPUs, i) as :meth:`victims` would rank them: the
        chosen holders come in falling rank, so the last is the best one displaced and the
        victims are the distinct ranks among them."""
        taken, holder = self.taken[i], self.holder[i]
        if g == 1:  # most jobs: the free GPU of the lowest-priority holder, the first of ties
            best, slot = -1, -1
            for k, t in enumerate(taken):
                if not t and holder[k] > best:
                    best, slot = holder[k], k
            return (-best, 0 if best == _OPEN else 1, self.n_free[i], i), [(i, slot)]
        # pick()'s order, (-holder, k), without building the pairs: a stable sort by holder,
        # falling, keeps equal holders in GPU order.
        free = [k for k, t in enumerate(taken) if not t]
        free.sort(key=holder.__getitem__, reverse=True)
        del free[g:]
        victims, last = 0, -1  # holder ranks are >= 0
        for k in free:
            h = holder[k]
            if h != _OPEN and h != last:  # noqa: PLR1714 - two ints, no tuple built
                victims += 1
                last = h
        return (-holder[free[-1]] if victims else -_OPEN, victims, self.n_free[i], i), [(i, k) for k in free]

    def spanning(self, group: list[int], g: int) -> tuple[tuple[int, int, int], list[tuple[int, int]]] | None:
        """Fewest nodes of ``group`` holding ``g`` GPUs, displacing as little as possible.

        Returns ((nodes, -best victim rank, victims), coords) so candidates compare.
        """
        self.materialize()
        best: tuple[tuple[int, int, int], list[tuple[int, int]]] | None = None
        for counts in (self.n_open, self.n_free):
            chosen = _fewest_nodes(group, counts, g)
            if chosen is None:
                continue
            coords: list[tuple[int, int]] = []
            for i, take in chosen:
                coords.extend(self.pick(i, take))
            ranks = self.victims(coords)
            key = (len(chosen), -ranks[0] if ranks else -_OPEN, len(ranks))
            if best is None or key < best[0]:
                best = (key, coords)
        return best


def _fewest_nodes(group: list[int], counts: list[int], g: int) -> list[tuple[int, int]] | None:
    """Minimum-count node set with ``sum(counts) >= g``; the last node is a best fit.

    Taking nodes by decreasing count gives the minimum number of nodes k; the k-th node
    is then replaced by the smallest node that still covers the remainder.
    """
    ranked = sorted((i for i in group if counts[i] > 0), key=lambda i: (-counts[i], i))
    total, k = 0, 0
    while k < len(ranked) and total < g:
        total += counts[ranked[k]]
        k += 1
    if total < g:
        return None
    head = ranked[: k - 1]
    remainder = g - sum(counts[i] for i in head)
    last = min((i for i in ranked[k - 1 :] if counts[i] >= remainder), key=lambda i: (counts[i], i))
    return [(i, counts[i]) for i in head] + [(last, remainder)]


@PLACEMENTS.register("consolidated")
@dataclass(frozen=True)
class ConsolidatedPlacement:
    """Best-fit consolidated placement with sticky running jobs (see module docstring).

    Options: ``backfill`` (default true) lets a later job start when an earlier one
    cannot fit; ``sticky`` (default true) keeps running jobs on their GPUs when they
    are still free at their turn; ``reserve`` (default true) keeps higher-priority jobs
    off those GPUs while others are free (false: Gavel's plain rule).

    ``backfill_interval_s`` (default none: at every planning point) backfills only at the
    planning points whose time (the snapshot's ``time_s``) is ``backfill_offset_s`` (default
    0) plus a multiple of it; the others walk the queue without backfill, stopping at the
    first job that does not fit. That is Slurm's ``sched/backfill``: an event-driven main
    scheduler that does not backfill, and a backfill pass every ``bf_interval`` (30 s by
    default). The simulator plans at those times too (:meth:`next_wakeup_s`); the live
    controller does not, so there its rounds backfill only when one falls on such a time.
    """

    backfill: bool = True
    sticky: bool = True
    reserve: bool = True
    backfill_interval_s: float | None = None
    backfill_offset_s: float = 0.0
    # job id -> (assignment, board coordinates of its GPUs) for the last round's running
    # jobs, valid for the node tuple in _memo_nodes: reused while a job holds the very
    # same assignment object on the very same nodes.
    _memo: dict[str, tuple[Assignment, list[tuple[int, int]] | None]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _memo_nodes: list[tuple[Node, ...]] = field(default_factory=list, init=False, repr=False, compare=False)
    _defer: ClassVar[bool] = True  # defer reservations when no GPU is held twice (tests: False)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        f = options_reader(
            options,
            "consolidated placement",
            ["backfill", "sticky", "reserve", "backfill_interval_s", "backfill_offset_s"],
        )
        backfill = f.flag("backfill", True)
        interval = f.opt_float("backfill_interval_s")
        if interval is not None and not interval > 0:
            f.fail_key("backfill_interval_s", f"expected a number of seconds > 0, got {interval:g}")
        if interval is not None and not backfill:
            f.fail_key("backfill_interval_s", "backfills every so many seconds, but backfill is false")
        offset = f.opt_float("backfill_offset_s", minimum=0.0)
        if offset is not None and interval is None:
            f.fail_key("backfill_offset_s", "needs backfill_interval_s")
        if offset is not None and interval is not None and offset >= interval:
            f.fail_key(
                "backfill_offset_s",
                f"expected a number below backfill_interval_s ({interval:g}), got {offset:g}",
            )
        return cls(
            backfill=backfill,
            sticky=f.flag("sticky", True),
            reserve=f.flag("reserve", True),
            backfill_interval_s=interval,
            backfill_offset_s=offset or 0.0,
        )

    def backfills_at(self, time_s: float) -> bool:
        """Whether a round planned at ``time_s`` backfills (see the class docstring)."""
        interval = self.backfill_interval_s
        if not self.backfill or interval is None:
            return self.backfill
        phase = (time_s - self.backfill_offset_s) % interval
        return phase <= _ON_TIME_S or interval - phase <= _ON_TIME_S

    def next_wakeup_s(self, time_s: float) -> float | None:
        """The first time after ``time_s`` at which a round backfills where one at ``time_s``
        would not: the next backfill time (None without ``backfill_interval_s``)."""
        interval = self.backfill_interval_s
        if interval is None:
            return None
        k = math.floor((time_s - self.backfill_offset_s + _ON_TIME_S) / interval) + 1
        return self.backfill_offset_s + k * interval

    def place(self, snapshot: Snapshot, ordered: Sequence[Job]) -> Draft:
        board = _Board(snapshot.nodes)
        held: dict[str, tuple[list[tuple[int, int]], int]] = {}
        if self.sticky:
            held = self._held(snapshot, ordered, board)
        # Reservations are deferred (see the module docstring) unless two running jobs
        # hold the same GPU: then a GPU's holder rank depends on the order of visits.
        lazy = (
            self._defer
            and self.reserve
            and len({c for coords, _ in held.values() for c in coords})
            == sum(len(coords) for coords, _ in held.values())
        )
        if lazy:
            board.unvisited = held
        elif self.reserve:
            for coords, rank in held.values():
                board.reserve(coords, rank)
        # In priority order (the walk's). A kept job keeps its assignment as it is; a placed
        # one gets CPUs and memory from shaping, and the plan it runs with (its submitted one
        # if new).
        assignments: dict[str, Assignment] = {}
        outcomes: dict[str, Outcome] = {}
        blocked = False
        backfill = self.backfills_at(snapshot.time_s)
        failed = board.failed  # cleared in place
        kept, infeasible = Outcome.KEPT, Outcome.INFEASIBLE
        for job in ordered:
            if held and job.assignment is not None:  # only running jobs are held
                entry = held.pop(job.id, None)
                if entry is not None:
                    coords = entry[0]
                    early = board.unvisited is not None
                    # Before the first search no GPU is taken but by the running jobs kept,
                    # which hold other GPUs: this job's are all free. A job that names no
                    # GPU type accepts its GPUs' type.
                    if (early or board.all_free(coords)) and (
                        (not job.gpu_types and job.gpu_type is None) or self._type_ok(job, board, coords)
                    ):
                        if early:
                            board.keep_early(coords)
                        elif self.reserve:
                            board.keep(coords)
                        else:
                            board.claim(coords)
                        a = job.assignment
                        assert a is not None
                        # Placement is exclusive: a job that shared its GPUs keeps them alone
                        # here, and the packing stage decides whether it shares them again.
                        assignments[job.id] = (
                            a if not a.shares_with else Assignment(a.gpus, a.cpus, a.mem_gb, a.plan)
                        )
                        outcomes[job.id] = kept
                        continue
                    if self.reserve and not early:
                        board.release(coords)
            if blocked:
                outcomes[job.id] = Outcome.BLOCKED
                continue
            if board.failed_version == board.version:
                # _find's first answer, inline: at twice a cluster's capacity most of the
                # walk is pending jobs whose demand already failed since a GPU was last taken.
                known = failed.get((job.num_gpus, job.gpu_types, job.gpu_type))
                if known is not None:
                    outcomes[job.id] = known
                    if known is not infeasible and not backfill:
                        blocked = True
                    continue
            outcome, slots = self._find(board, job)
            outcomes[job.id] = outcome
            if slots is not None:
                plan = job.assignment.plan if job.assignment is not None else job.plan
                assignments[job.id] = Assignment(gpus=slots, cpus=0, mem_gb=0.0, plan=plan)
            elif not backfill and outcome is not Outcome.INFEASIBLE:
                blocked = True
        return Draft(assignments=assignments, outcomes=outcomes)

    def _held(
        self, snapshot: Snapshot, ordered: Sequence[Job], board: _Board
    ) -> dict[str, tuple[list[tuple[int, int]], int]]:
        """Running jobs whose GPUs still exist: job id -> (board coordinates, priority rank)."""
        memo = self._memo
        if not self._memo_nodes or self._memo_nodes[0] is not snapshot.nodes:
            memo.clear()
            self._memo_nodes[:] = [snapshot.nodes]
        seen: dict[str, tuple[Assignment, list[tuple[int, int]] | None]] = {}
        held: dict[str, tuple[list[tuple[int, int]], int]] = {}
        running = JobState.RUNNING
        # The running jobs picked out in a comprehension (at twice a cluster's capacity most
        # of the order is waiting jobs).
        for rank, job, a in [
            (r, j, a) for r, j in enumerate(ordered) if (a := j.assignment) is not None and j.state is running
        ]:
            entry = memo.get(job.id)
            if entry is None or entry[0] is not a:
                entry = (a, board.slots_of(a))
            seen[job.id] = entry
            if entry[1] is not None:
                held[job.id] = (entry[1], rank)
        memo.clear()
        memo.update(seen)
        return held

    @staticmethod
    def _type_ok(job: Job, board: _Board, coords: list[tuple[int, int]]) -> bool:
        accepted = job.accepted_types
        return not accepted or all(board.nodes[i].gpu_type in accepted for i, _ in coords)

    @staticmethod
    def _find(board: _Board, job: Job) -> tuple[Outcome, tuple[GpuSlot, ...] | None]:
        g = job.num_gpus
        asked = (g, job.gpu_types, job.gpu_type)
        # A failed search fails the same way for the same demand until a GPU is taken.
        if board.failed_version != board.version:
            board.failed.clear()
            board.failed_version = board.version
        else:
            known = board.failed.get(asked)
            if known is not None:
                return known, None
        key = (g, job.accepted_types)
        demand = board.demands.get(key)
        if demand is None:
            demand = board.demands[key] = _Demand.of(board, g, key[1])
        if demand.outcome is not None:
            return demand.outcome, None
        outcome, slots = ConsolidatedPlacement._search(board, g, demand)
        if slots is None:
            board.failed[asked] = outcome
        return outcome, slots

    @staticmethod
    def _search(board: _Board, g: int, demand: _Demand) -> tuple[Outcome, tuple[GpuSlot, ...] | None]:
        fits_one = demand.fits_one
        candidates = [t for t in (fits_one or demand.types) if board.free_by_type[t] >= g]
        if not candidates:
            free = sum(board.free_by_type[t] for t in demand.types)
            return (Outcome.NO_CONSOLIDATED_SLOT if fits_one and free >= g else Outcome.NO_CAPACITY), None
        if fits_one:
            # Consolidation: a job that some eligible node could hold is only ever placed on
            # one node, even when the nodes that could hold it are busy right now; the full
            # search below finds nothing exactly when no such node has g free GPUs.
            for t in candidates:
                if board.fits_one_node(t, g):
                    break
            else:
                return Outcome.NO_CONSOLIDATED_SLOT, None
            group = [i for t in candidates for i in board.groups[t]]
            coords = board.single_node(group, g)
            if coords is None:
                return Outcome.NO_CONSOLIDATED_SLOT, None
            return Outcome.PLACED, board.claim(coords)
        best: tuple[tuple[int, int, int], str, list[tuple[int, int]]] | None = None
        for t in candidates:
            found = board.spanning(board.groups[t], g)
            if found is not None and (best is None or (found[0], t) < best[:2]):
                best = (found[0], t, found[1])
        if best is None:
            return Outcome.NO_CAPACITY, None
        return Outcome.PLACED, board.claim(best[2])


@dataclass(frozen=True, slots=True)
class _Demand:
    """What a (GPU count, accepted types) demand can use on this cluster, found once a round."""

    types: tuple[str, ...]  # the cluster's types it accepts, sorted
    fits_one: tuple[str, ...]  # those with a node large enough to hold it alone
    outcome: Outcome | None  # NO_GPU_TYPE or INFEASIBLE whatever is free; None: it depends

    @staticmethod
    def of(board: _Board, g: int, accepted: tuple[str, ...]) -> _Demand:
        if accepted:
            types = tuple(sorted(t for t in accepted if t in board.groups))
            if not types:
                return _Demand((), (), Outcome.NO_GPU_TYPE)
        else:
            types = tuple(sorted(board.groups))
        if all(g > board.capacity_by_type[t] for t in types):
            return _Demand(types, (), Outcome.INFEASIBLE)
        fits_one = tuple(t for t in types if g <= board.largest_by_type[t])
        return _Demand(types, fits_one, None)
