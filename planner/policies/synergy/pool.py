"""Servers' free GPUs, CPUs and memory while one round is being packed (local, mutable).

Every Synergy mechanism (greedy, tune, opt's rounding, DRF, Tetris) places jobs by the
same rules, kept here once:

* a job whose GPUs fit one server goes on one server; a larger job spans the fewest
  servers (full ones first), as Synergy-Tune does for multi-GPU jobs (§4.2);
* a job's CPUs and memory are the same *per GPU* on every server it spans, so each
  server holds its GPU-proportional part of the job (§4.2, "Allocation Requirements");
* GPUs of a job placed on a server are its previous ones there when they are free
  (a lease renewal, §4.3), else the lowest-numbered free ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from planner.core.model import Assignment, GpuSlot, Job, Node
from planner.policies.synergy.demand import PerGpu
from planner.slots import free_gpus

_EPS = 1e-9
Counts = tuple[tuple[str, int], ...]  # GPUs per node, in node order


@dataclass(frozen=True, slots=True)
class Held:
    """What one job holds in the pool."""

    gpus: tuple[GpuSlot, ...]
    counts: Counts
    share: PerGpu


class Pool:
    """Free capacity per node and what each placed job holds."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = list(nodes)
        self.by_name = {n.name: n for n in self.nodes}
        self.order = {n.name: i for i, n in enumerate(self.nodes)}
        self.gpu_types = frozenset(n.gpu_type for n in self.nodes)
        # Free GPUs from the shared core (planner.slots), kept as sets here: the pool's own
        # rules differ from planner.slots.consolidated_slots (a spread job takes full servers
        # first, uneven counts allowed, with CPUs and memory per GPU checked on each), so its
        # choice (node_sets) and its reservations stay local.
        self.free_gpus: dict[str, set[int]] = {name: set(ks) for name, ks in free_gpus(self.nodes).items()}
        self.free_cpus: dict[str, int] = {n.name: n.cpus for n in self.nodes}
        self.free_mem: dict[str, float] = {n.name: n.mem_gb for n in self.nodes}
        self.held: dict[str, Held] = {}
        self.reserved: dict[str, tuple[GpuSlot, ...]] = {}

    # -- GPUs ----------------------------------------------------------------------------
    def reserve(self, job_id: str, gpus: Iterable[GpuSlot]) -> bool:
        """Set these GPUs aside for ``job_id`` (placed later with :meth:`commit`)."""
        slots = tuple(gpus)
        if any(k not in self.free_gpus.get(node, ()) for node, k in slots):
            return False
        for node, k in slots:
            self.free_gpus[node].discard(k)
        self.reserved[job_id] = slots
        return True

    def unreserve(self, job_id: str) -> None:
        for node, k in self.reserved.pop(job_id, ()):
            self.free_gpus[node].add(k)

    def set_aside(self, a: Assignment) -> None:
        """Take ``a``'s GPUs, CPUs and memory out of the pool for good (a job no mechanism
        shapes, such as one sharing its GPUs); its GPUs may be set aside already by a partner."""
        for node, k in a.gpus:
            self.free_gpus[node].discard(k)
        for node, cpus, mem_gb in a.node_shares():
            self.free_cpus[node] -= cpus
            self.free_mem[node] -= mem_gb

    def free_gpu_count(self) -> int:
        return sum(len(free) for free in self.free_gpus.values())

    def has_gpus(self, job_id: str, counts: Counts) -> bool:
        """Whether ``counts`` can be taken by ``job_id`` (its own kept GPUs count as free)."""
        if self.reserved_counts(job_id) == counts:
            return True
        return all(len(self.free_gpus[node]) >= g for node, g in counts)

    def reserved_counts(self, job_id: str) -> Counts | None:
        slots = self.reserved.get(job_id)
        if slots is None:
            return None
        return counts_of(slots, self.order)

    def node_sets(self, job: Job, gpu_type: str | None = None) -> list[Counts]:
        """Where ``job``'s GPUs could go: one server if they fit one, else the fewest servers
        (of ``gpu_type`` only, when given)."""

        def accepts(t: str) -> bool:
            return job.accepts_type(t) and (gpu_type is None or t == gpu_type)

        eligible = [n for n in self.nodes if accepts(n.gpu_type) and self.free_gpus[n.name]]
        g = job.num_gpus
        largest = max((n.gpus for n in self.by_name.values() if accepts(n.gpu_type)), default=0)
        if g <= largest:
            return [((n.name, g),) for n in eligible if len(self.free_gpus[n.name]) >= g]
        by_free = sorted(eligible, key=lambda n: (-len(self.free_gpus[n.name]), self.order[n.name]))
        chosen: list[tuple[str, int]] = []
        need = g
        for k, n in enumerate(by_free):
            free = len(self.free_gpus[n.name])
            if free >= need:
                # best fit for the remainder: the node with the fewest free GPUs that holds it
                rest = [m for m in by_free[k:] if len(self.free_gpus[m.name]) >= need]
                last = min(rest, key=lambda m: (len(self.free_gpus[m.name]), self.order[m.name]))
                chosen.append((last.name, need))
                need = 0
                break
            chosen.append((n.name, free))
            need -= free
        if need > 0:
            return []
        return [tuple(sorted(chosen, key=lambda c: self.order[c[0]]))]

    # -- CPUs and memory -----------------------------------------------------------------
    def fits(self, counts: Counts, share: PerGpu) -> bool:
        return all(
            self.free_cpus[node] >= share.cpus * g and self.free_mem[node] >= share.mem_gb * g - _EPS
            for node, g in counts
        )

    def leftover(self, counts: Counts, share: PerGpu) -> float:
        """Normalised free resources left on these nodes after placing: best fit minimises it."""
        total = 0.0
        for node, g in counts:
            n = self.by_name[node]
            total += (len(self.free_gpus[node]) - g) / n.gpus
            total += (self.free_cpus[node] - share.cpus * g) / max(n.cpus, 1)
            total += (self.free_mem[node] - share.mem_gb * g) / max(n.mem_gb, _EPS)
        return total

    def commit(self, job_id: str, counts: Counts, share: PerGpu, previous: Iterable[GpuSlot] = ()) -> Held:
        """Give ``job_id`` GPUs on ``counts``'s nodes and ``share`` per GPU there."""
        reserved = self.reserved.pop(job_id, None)
        if reserved is not None and counts_of(reserved, self.order) == counts:
            gpus = list(reserved)
        else:
            if reserved is not None:  # placed elsewhere after all: give the reservation back
                for node, k in reserved:
                    self.free_gpus[node].add(k)
            gpus = self._take(counts, previous)
        for node, g in counts:
            self.free_cpus[node] -= share.cpus * g
            self.free_mem[node] -= share.mem_gb * g
        held = Held(tuple(sorted(gpus)), counts, share)
        self.held[job_id] = held
        return held

    def reshare(self, job_id: str, share: PerGpu) -> None:
        """Change a placed job's per-GPU share (on every node it spans)."""
        old = self.held[job_id]
        for node, g in old.counts:
            self.free_cpus[node] += (old.share.cpus - share.cpus) * g
            self.free_mem[node] += (old.share.mem_gb - share.mem_gb) * g
        self.held[job_id] = Held(old.gpus, old.counts, share)

    def jobs_on(self, node: str) -> list[str]:
        return [j for j, h in self.held.items() if any(n == node for n, _ in h.counts)]

    def _take(self, counts: Counts, previous: Iterable[GpuSlot]) -> list[GpuSlot]:
        before: dict[str, list[int]] = {}
        for node, k in previous:
            before.setdefault(node, []).append(k)
        gpus: list[GpuSlot] = []
        for node, g in counts:
            free = self.free_gpus[node]
            mine = [k for k in sorted(before.get(node, ())) if k in free][:g]
            rest = [k for k in sorted(free) if k not in mine][: g - len(mine)]
            for k in mine + rest:
                free.discard(k)
                gpus.append((node, k))
        return gpus


def counts_of(gpus: Iterable[GpuSlot], order: Mapping[str, int]) -> Counts:
    """How many of ``gpus`` each node holds, the nodes in ``order``."""
    per: dict[str, int] = {}
    for node, _ in gpus:
        per[node] = per.get(node, 0) + 1
    return tuple(sorted(per.items(), key=lambda c: order[c[0]]))


def to_assignment(held: Held, base: Assignment, previous: Assignment | None) -> Assignment:
    """The assignment a job gets; the job's previous one when nothing changed."""
    g = len(held.gpus)
    assignment = Assignment(held.gpus, held.share.cpus * g, held.share.mem_gb * g, base.plan)
    if previous is not None and previous == assignment:
        return previous
    return assignment
