"""Crius's depth-bounded greedy search over Cells (Crius §6.1, Algorithm 1), pure and deterministic.

One *decision* places one waiting job (``CellBasedSched(job)``): its candidate Cells (GPU
type x count) are tried on the idle GPUs; when none fits, running jobs are *scaled*, one at
a time, breadth first, to make room: a job is shrunk to its next smaller count in place
(one branch per GPU type: the job of that type whose step loses the least throughput,
among the largest jobs of the type) or moved to another GPU type at its count (one branch:
the move that gains the most). The *search depth* bounds how many running jobs one
decision may rescale or move (§6.1; the paper's default, and the artifact's, is 3; depth 0
touches no running job). Every state where the job fits is a *scheduling choice*; the one
with the largest throughput change wins (``BestPerf``): the job's own throughput in its
Cell plus the change of every job it rescaled, moved or suspended. A state where the job
fits is not expanded further (the artifact's ``_job_downgrade_search`` expands only the
infeasible ones).

Throughputs are *normalised*: a job's speed in a Cell is its reference iteration time (the
Cell of the GPU type and count it asked for) over the Cell's, so jobs of different models
add up (the artifact sums raw samples/s across models). A running job that is changed pays
its restart: its speed counts as ``rem / (rem / s + restart_s)``, the average rate over
what is left of it (``rem``: remaining reference seconds), so a change must gain more than
the restart loses.

:class:`World` is the cluster while a round is planned: free GPUs per node, each priced
job's shape. It changes only through :meth:`World.apply`: :func:`best_choice` only reads
it, :func:`upgrade` applies its steps.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from planner.core.model import GpuSlot, Job, Node
from planner.policies.crius.cell import Cell, CellModel
from planner.slots import consolidated_counts, free_gpus

PerNode = tuple[tuple[str, int], ...]
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Shape:
    """Where a job runs: ``per_node`` GPU counts on nodes of ``gpu_type``."""

    gpu_type: str
    per_node: PerNode
    count: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "count", sum(c for _, c in self.per_node))


@dataclass(frozen=True, slots=True)
class Change:
    """One step of a scheduling choice: ``job`` to ``shape`` (``None``: suspended).

    ``kind`` is ``shrink``, ``move``, ``grow``, ``place`` or ``suspend``; ``delta`` the
    normalised throughput it adds (negative for a loss).
    """

    job: str
    kind: str
    shape: Shape | None
    delta: float


@dataclass(frozen=True, slots=True)
class Choice:
    """A scheduling choice for one decision: its changes in order (the placed job last)."""

    changes: tuple[Change, ...]

    @property
    def gain(self) -> float:
        return sum(c.delta for c in self.changes)

    @property
    def touched(self) -> int:
        """Running jobs it rescales or moves (what the search depth bounds)."""
        return sum(1 for c in self.changes if c.kind in ("shrink", "move"))


class Pricing:
    """Normalised speeds of jobs in Cells, for one round (memoised per job and Cell).

    ``counts(job)`` and ``types(job)`` are the candidate Cells the scheduler allows;
    ``allowed(job, cell, restart)`` may veto a Cell (the deadline rule of ``crius-ddl``).
    """

    def __init__(
        self,
        model: CellModel,
        restart_s: float,
        counts: Callable[[Job], Sequence[int]],
        types: Callable[[Job], Sequence[str]],
        allowed: Callable[[Job, float, bool], bool] | None = None,
        memo: dict[tuple[str, int | None, str, int], Cell | None] | None = None,
    ) -> None:
        self.model = model
        self.restart_s = restart_s
        self.counts = counts
        self.types = types
        self.allowed = allowed
        # Cells depend on the model, the global batch, the type and the count only, so the
        # memo may outlive a round (``memo``: the stage's).
        self._cells: dict[tuple[str, int | None, str, int], Cell | None] = {} if memo is None else memo
        self._ref: dict[str, float | None] = {}
        self._counts: dict[str, Sequence[int]] = {}
        self._types: dict[str, Sequence[str]] = {}
        self._values: dict[tuple[str, str, int, bool], float | None] = {}

    def counts_of(self, job: Job) -> Sequence[int]:
        """``counts(job)``, memoised for the round."""
        found = self._counts.get(job.id)
        if found is None:
            found = self._counts[job.id] = tuple(self.counts(job))
        return found

    def types_of(self, job: Job) -> Sequence[str]:
        """``types(job)``, memoised for the round."""
        found = self._types.get(job.id)
        if found is None:
            found = self._types[job.id] = tuple(self.types(job))
        return found

    def cell(self, job: Job, gpu_type: str, gpus: int) -> Cell | None:
        key = (job.model, job.batch_size, gpu_type, gpus)
        try:
            return self._cells[key]
        except KeyError:
            cell = self.model.best_cell(job, gpu_type, gpus)
            self._cells[key] = cell
            return cell

    def reference_s(self, job: Job, gpu_type: str) -> float | None:
        """The job's iteration time at the GPU type and count it asked for (the trace's
        reference: ``duration_s`` was measured there); without a requested type, each type
        is its own reference (so only the count changes the speed), as in the simulator."""
        ref_type = job.gpu_type or gpu_type
        key = f"{ref_type}\0{job.id}"
        if key not in self._ref:
            cell = self.cell(job, ref_type, job.num_gpus)
            self._ref[key] = cell.iteration_time_s if cell is not None and cell.fits else None
        return self._ref[key]

    def speed(self, job: Job, gpu_type: str, gpus: int) -> float | None:
        """Reference time over the Cell's time; ``None`` when the Cell does not fit."""
        cell = self.cell(job, gpu_type, gpus)
        if cell is None or not cell.fits:
            return None
        ref = self.reference_s(job, gpu_type)
        assert cell.iteration_time_s is not None
        return (ref if ref is not None else cell.iteration_time_s) / cell.iteration_time_s

    def value(self, job: Job, gpu_type: str, gpus: int, restart: bool) -> float | None:
        """The speed, net of a restart when ``restart``; ``None`` when not allowed (memoised
        for the round)."""
        key = (job.id, gpu_type, gpus, restart)
        if key in self._values:
            return self._values[key]
        value = self._value(job, gpu_type, gpus, restart)
        self._values[key] = value
        return value

    def _value(self, job: Job, gpu_type: str, gpus: int, restart: bool) -> float | None:
        s = self.speed(job, gpu_type, gpus)
        if s is None:
            return None
        if self.allowed is not None and not self.allowed(job, s, restart):
            return None
        return charged(s, job.remaining_s, self.restart_s) if restart else s

    def priced(self, job: Job) -> bool:
        """True when some candidate Cell of the job fits (the scheduler can price it)."""
        return any(self.speed(job, t, n) is not None for t in self.types_of(job) for n in self.counts_of(job))


def charged(speed: float, remaining_s: float | None, restart_s: float) -> float:
    """``speed`` net of one restart: the average rate over the job's remaining work."""
    if remaining_s is None or not math.isfinite(remaining_s) or restart_s <= 0:
        return speed
    rem = max(remaining_s, _EPS)
    return rem / (rem / speed + restart_s)


@dataclass
class _Held:
    """A priced job placed in the world: its shape and current (normalised) value."""

    job: Job
    shape: Shape
    value: float
    restart: bool  # a change of it is a restart (it ran before this round's change)


@dataclass
class World:
    """The cluster while one round is planned (local, mutable; changed only by :meth:`apply`).

    ``free`` counts idle GPUs per node and ``slots`` lists them; ``held`` are the priced jobs
    placed so far (their GPUs are not free).
    """

    nodes: Mapping[str, Node]
    by_type: Mapping[str, tuple[str, ...]]
    free: dict[str, int]
    slots: dict[str, list[int]]
    held: dict[str, _Held] = field(default_factory=dict)
    gpus_of: dict[str, tuple[GpuSlot, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, nodes: Sequence[Node], taken: Iterable[GpuSlot]) -> World:
        slots = free_gpus(nodes, taken)
        by_type: dict[str, list[str]] = {}
        for n in nodes:
            by_type.setdefault(n.gpu_type, []).append(n.name)
        return cls(
            {n.name: n for n in nodes},
            {t: tuple(sorted(names)) for t, names in sorted(by_type.items())},
            {name: len(s) for name, s in slots.items()},
            slots,
        )

    def hold(self, job: Job, gpus: tuple[GpuSlot, ...], shape: Shape, value: float, restart: bool) -> None:
        """Record a job that already holds ``gpus`` (not free in the world)."""
        self.held[job.id] = _Held(job, shape, value, restart)
        self.gpus_of[job.id] = gpus

    def apply(self, choice: Choice, jobs: Mapping[str, Job], pricing: Pricing) -> None:
        """Carry out ``choice``'s changes on real GPUs, in order."""
        for c in choice.changes:
            old = self.gpus_of.get(c.job, ())
            if c.shape is None:  # suspended: every GPU back
                self._give(old)
                self.held.pop(c.job, None)
                self.gpus_of.pop(c.job, None)
                continue
            keep: list[GpuSlot] = []
            by_node = dict(c.shape.per_node)
            counts: dict[str, int] = {}
            for slot in old:  # a job keeps the GPUs it had on its new nodes, lowest first
                want = by_node.get(slot[0], 0)
                if counts.get(slot[0], 0) < want:
                    keep.append(slot)
                    counts[slot[0]] = counts.get(slot[0], 0) + 1
            kept = set(keep)
            self._give([s for s in old if s not in kept])
            added: list[GpuSlot] = []
            for name, want in c.shape.per_node:
                extra = want - counts.get(name, 0)
                if extra > 0:
                    take = self.slots[name][:extra]
                    assert len(take) == extra, f"crius search: node {name} lacks {extra} free GPUs"
                    added.extend((name, k) for k in take)
            self._take(added)
            job = jobs[c.job]
            held = self.held.get(c.job)
            restart = held.restart if held is not None else job.attained_gpu_s > 0
            value = pricing.value(job, c.shape.gpu_type, c.shape.count, restart)
            self.held[c.job] = _Held(job, c.shape, 0.0 if value is None else value, restart)
            self.gpus_of[c.job] = tuple(sorted(keep + added))

    def take(self, slots: Iterable[GpuSlot]) -> None:
        """Take idle GPUs for a job this world does not price."""
        self._take(slots)

    def _give(self, slots: Iterable[GpuSlot]) -> None:
        for name, k in slots:
            self.slots[name].append(k)
            self.slots[name].sort()
            self.free[name] += 1

    def _take(self, slots: Iterable[GpuSlot]) -> None:
        taken = set(slots)
        for name in {name for name, _ in taken}:
            self.slots[name] = [k for k in self.slots[name] if (name, k) not in taken]
            self.free[name] = len(self.slots[name])


def fit(
    names: Sequence[str], free: Mapping[str, int], count: int, extra: Mapping[str, int] | None = None
) -> PerNode | None:
    """``count`` GPUs on the nodes ``names`` (one type), consolidated; ``None`` if impossible.

    One node when one has room (best fit: the fewest free GPUs that suffice, then name),
    else the fewest nodes with the same count on each (best fit again): the rule of
    :func:`planner.slots.consolidated_slots`. ``extra`` adds GPUs per node that
    may be taken too (an opportunistic job's, Crius §6.1).
    """
    if extra:
        return consolidated_counts([(free[n] + extra.get(n, 0), n) for n in names], count)
    return consolidated_counts([(free[n], n) for n in names], count)


def shrink_in_place(shape: Shape, count: int) -> Shape | None:
    """``shape`` cut to ``count`` GPUs on its own nodes (same count each), else ``None``."""
    k = len(shape.per_node)
    if count % k == 0:
        return Shape(shape.gpu_type, tuple((n, count // k) for n, _ in shape.per_node))
    per = shape.per_node[0][1]
    if all(c == per for _, c in shape.per_node) and count % per == 0:
        return Shape(shape.gpu_type, shape.per_node[: count // per])
    return None


@dataclass(frozen=True)
class Limits:
    """What a decision may change: ``depth`` (running jobs rescaled or moved, §6.1),
    ``counts`` / ``types`` (the two kinds of scaling, off for the §8.6 ablations)."""

    depth: int = 3
    counts: bool = True
    types: bool = True


@dataclass
class _State:
    free: dict[str, int]
    changes: tuple[Change, ...]
    touched: frozenset[str]
    shapes: dict[str, Shape]


def best_choice(
    world: World,
    target: Job,
    pricing: Pricing,
    limits: Limits,
    movable: Sequence[str],
    opportunistic: Mapping[str, Shape] | None = None,
) -> Choice | None:
    """The best scheduling choice placing ``target``, or ``None`` when none is found.

    ``movable``: the held jobs the search may rescale or move (in a fixed order);
    ``opportunistic``: held jobs whose GPUs ``target`` may take by suspending them (Crius
    §6.1: jobs started on idle GPUs while ``target`` waited). Idle GPUs are tried first; a
    job is suspended only when no choice fits without it. Depth-0 choices never touch a
    running job.
    """
    cells = _target_cells(target, pricing)
    if not cells:
        return None
    root = _State(dict(world.free), (), frozenset(), {})
    level = [root]
    found: list[tuple[float, int, int, Choice]] = []
    seen: set[frozenset[tuple[str, Shape]]] = {frozenset()}
    steps: list[
        tuple[dict[str, list[_Step]], list[tuple[float, str, str, int]]]
    ] = []  # computed once, if needed
    for depth in range(limits.depth + 1):
        following: list[_State] = []
        for state in level:
            placed = _place(world, state, target, cells, None)
            if placed is not None:
                choice = Choice((*state.changes, placed))
                found.append((choice.gain, -choice.touched, -len(found), choice))
                continue
            if depth == limits.depth:
                continue
            if not steps:
                steps.append(
                    (
                        _shrink_steps(world, movable, pricing) if limits.counts else {},
                        _move_steps(world, movable, pricing) if limits.types else [],
                    )
                )
            for child in _children(world, state, *steps[0]):
                key = frozenset(child.shapes.items())
                if key not in seen:
                    seen.add(key)
                    following.append(child)
        level = following
        if not level:
            break
    if not found and opportunistic:
        extra: dict[str, int] = {}
        for shape in opportunistic.values():
            for name, c in shape.per_node:
                extra[name] = extra.get(name, 0) + c
        placed = _place(world, root, target, cells, extra)
        if placed is not None:
            suspended = _suspended(world, placed, opportunistic)
            changes = [Change(j, "suspend", None, -world.held[j].value) for j in suspended]
            found.append((0.0, 0, 0, Choice((*changes, placed))))
    if not found:
        return None
    return max(found, key=lambda f: f[:3])[3]


def _target_cells(target: Job, pricing: Pricing) -> list[tuple[float, str, int]]:
    """The target's fitting Cells, best value first (then fewer GPUs, then type name)."""
    restart = target.attained_gpu_s > 0
    out = []
    for t in pricing.types_of(target):
        for n in pricing.counts_of(target):
            v = pricing.value(target, t, n, restart)
            if v is not None:
                out.append((v, t, n))
    out.sort(key=lambda c: (-c[0], c[2], c[1]))
    return out


def _place(
    world: World,
    state: _State,
    target: Job,
    cells: Sequence[tuple[float, str, int]],
    extra: Mapping[str, int] | None,
) -> Change | None:
    for value, gpu_type, count in cells:
        names = world.by_type.get(gpu_type, ())
        per_node = fit(names, state.free, count, extra)
        if per_node is not None:
            return Change(target.id, "place", Shape(gpu_type, per_node), value)
    return None


def _suspended(world: World, placed: Change, opportunistic: Mapping[str, Shape]) -> list[str]:
    """The opportunistic jobs ``placed`` needs gone: on each of its nodes, beyond the idle
    GPUs, the latest-started first (the order of ``opportunistic`` is their priority)."""
    assert placed.shape is not None
    out: list[str] = []
    freed = dict(world.free)
    for name, need in placed.shape.per_node:
        for job_id in reversed(list(opportunistic)):
            if freed[name] >= need:
                break
            if job_id in out:
                continue
            here = dict(opportunistic[job_id].per_node).get(name, 0)
            if here:
                out.append(job_id)
                for n, c in opportunistic[job_id].per_node:
                    freed[n] += c
    return out


_Step = tuple[float, int, str, Shape, str]  # (delta, -count, job, new shape, kind)


def _shrink_steps(world: World, movable: Sequence[str], pricing: Pricing) -> dict[str, list[_Step]]:
    """Per GPU type, each movable job's one-step shrink in place, best first: among the
    jobs holding at least half the largest count of that type (the artifact's rule, so a
    shrink frees many GPUs), the smallest throughput loss."""
    per_type: dict[str, list[_Step]] = {}
    for job_id in movable:
        held = world.held[job_id]
        smaller = [n for n in pricing.counts_of(held.job) if n < held.shape.count]
        if not smaller:
            continue
        new = shrink_in_place(held.shape, max(smaller))
        if new is None:
            continue
        v = pricing.value(held.job, new.gpu_type, new.count, True)
        if v is None:
            continue
        per_type.setdefault(new.gpu_type, []).append(
            (v - held.value, -held.shape.count, job_id, new, "shrink")
        )
    out: dict[str, list[_Step]] = {}
    for gpu_type, steps in per_type.items():
        largest = max(-s[1] for s in steps)
        kept = [s for s in steps if -s[1] >= largest / 2]
        out[gpu_type] = sorted(kept, key=lambda s: (-s[0], s[1], s[2]))
    return out


def _move_steps(world: World, movable: Sequence[str], pricing: Pricing) -> list[tuple[float, str, str, int]]:
    """Every movable job's move to another GPU type at its count, best gain first."""
    out = []
    for job_id in movable:
        held = world.held[job_id]
        for t in pricing.types_of(held.job):
            if t == held.shape.gpu_type or t not in world.by_type:
                continue
            v = pricing.value(held.job, t, held.shape.count, True)
            if v is not None:
                out.append((v - held.value, job_id, t, held.shape.count))
    out.sort(key=lambda s: (-s[0], s[1], s[2]))
    return out


_MOVE_SCAN = 64  # move candidates tried per state before giving up (the best ones first)


def _children(
    world: World,
    state: _State,
    shrinkers: Mapping[str, list[_Step]],
    movers: Sequence[tuple[float, str, str, int]],
) -> list[_State]:
    """One shrink per GPU type, and the best move that fits (each touches a new job)."""
    children = []
    for gpu_type in sorted(shrinkers):
        for delta, _, job_id, new, kind in shrinkers[gpu_type]:
            if job_id in state.touched:
                continue
            old = world.held[job_id].shape
            free = dict(state.free)
            kept = dict(new.per_node)
            for name, c in old.per_node:
                free[name] += c - kept.get(name, 0)
            change = Change(job_id, kind, new, delta)
            children.append(
                _State(
                    free, (*state.changes, change), state.touched | {job_id}, {**state.shapes, job_id: new}
                )
            )
            break
    scanned = 0
    for delta, job_id, gpu_type, count in movers:
        if job_id in state.touched:
            continue
        scanned += 1
        if scanned > _MOVE_SCAN:
            break
        old = world.held[job_id].shape
        free = dict(state.free)
        for name, c in old.per_node:
            free[name] += c
        per_node = fit(world.by_type[gpu_type], free, count)
        if per_node is None:
            continue
        for name, c in per_node:
            free[name] -= c
        new = Shape(gpu_type, per_node)
        change = Change(job_id, "move", new, delta)
        children.append(
            _State(free, (*state.changes, change), state.touched | {job_id}, {**state.shapes, job_id: new})
        )
        break
    return children


def _upgrade_options(
    world: World, job_id: str, pricing: Pricing, limits: Limits
) -> list[tuple[float, str, int]]:
    """A held job's one-step upgrades that gain: ``(gain, GPU type, count)``."""
    held = world.held[job_id]
    shapes: list[tuple[str, int]] = []
    if limits.counts:
        larger = [n for n in pricing.counts_of(held.job) if n > held.shape.count]
        if larger:
            shapes.append((held.shape.gpu_type, min(larger)))
    if limits.types:
        shapes.extend(
            (t, held.shape.count)
            for t in pricing.types_of(held.job)
            if t != held.shape.gpu_type and t in world.by_type
        )
    out = []
    for gpu_type, count in shapes:
        v = pricing.value(held.job, gpu_type, count, held.restart)
        if v is not None and v - held.value > _EPS:
            out.append((v - held.value, gpu_type, count))
    return out


def upgrade(
    world: World, movable: Sequence[str], pricing: Pricing, limits: Limits, max_steps: int
) -> list[Change]:
    """Upgrade held jobs onto idle GPUs, one step at a time, the largest gain first, while a
    step gains (the artifact's ``_running_jobs_upgrade_trial``): a job grown to its next
    larger count (on its own nodes when they have room, else consolidated elsewhere on its
    type) or moved to another type at its count. Applies the steps to ``world`` and returns
    them.

    A step's gain depends only on the job and its new Cell, so the candidates sit in one
    heap; one that does not fit waits until GPUs of its type are given back (a job moved away
    from that type, or regrown elsewhere on it), the only way idle GPUs of a type increase
    here. The result is the plain greedy loop's, without rescanning every job per step.
    """
    heap: list[tuple[float, str, str, int, int]] = []
    version = dict.fromkeys(movable, 0)

    def push(job_id: str) -> None:
        for gain, gpu_type, count in _upgrade_options(world, job_id, pricing, limits):
            heapq.heappush(heap, (-gain, job_id, gpu_type, count, version[job_id]))

    for job_id in movable:
        push(job_id)
    waiting: dict[str, list[tuple[float, str, str, int, int]]] = {}
    steps: list[Change] = []
    while heap and len(steps) < max_steps:
        entry = heapq.heappop(heap)
        neg_gain, job_id, gpu_type, count, ver = entry
        if ver != version[job_id]:
            continue
        held = world.held[job_id]
        shape = _grown(world, held.shape, gpu_type, count)
        if shape is None:
            waiting.setdefault(gpu_type, []).append(entry)
            continue
        kind = "grow" if gpu_type == held.shape.gpu_type else "move"
        step = Change(job_id, kind, shape, -neg_gain)
        relocated = {n for n, _ in shape.per_node} != {n for n, _ in held.shape.per_node}
        freed = held.shape.gpu_type if kind == "move" or relocated else None
        world.apply(Choice((step,)), {job_id: held.job}, pricing)
        steps.append(step)
        version[job_id] += 1
        push(job_id)
        if freed is not None:
            for again in waiting.pop(freed, []):
                heapq.heappush(heap, again)
    return steps


def _grown(world: World, shape: Shape, gpu_type: str, count: int) -> Shape | None:
    free = dict(world.free)
    if gpu_type == shape.gpu_type:
        k = len(shape.per_node)
        if count % k == 0:
            per = count // k
            if all(free[n] >= per - c for n, c in shape.per_node):
                return Shape(gpu_type, tuple((n, per) for n, _ in shape.per_node))
        for name, c in shape.per_node:
            free[name] += c
    per_node = fit(world.by_type[gpu_type], free, count)
    return None if per_node is None else Shape(gpu_type, per_node)
