"""Free GPU slots: the one bookkeeping of which GPUs of a snapshot's nodes are free.

A slot is a :data:`~planner.core.model.GpuSlot` (node name, GPU index). :func:`free_gpus` gives
the free indices per node once ``taken`` slots are removed (sorted, no duplicates);
:class:`FreeSlots` keeps them while a stage builds a round (take / give); :func:`free_by_type`
counts them per GPU type; :func:`consolidated_slots` is the consolidation rule every
joint-allocation stage and ``mosaic resize`` use: a job that fits one node goes on one node
(best fit: the fewest free GPUs that hold it, then the node name), a larger job spans the
fewest nodes of **one** GPU type, the same count on each. Its parts on nodes of one type
(:func:`best_fit_node`, :func:`equal_spread`, :func:`consolidated_counts`) are also Crius's
Cell fit and the baselines' per-type search.

Stages whose bookkeeping differs keep the difference local on top of this core (the
placement board's reservations and holder ranks, Synergy's CPU and memory pool, Crius's
held Cells); see their modules.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable, Mapping, Sequence

from planner.core.model import GpuSlot, Job, Node, Snapshot


def free_gpus(nodes: Iterable[Node], taken: Iterable[GpuSlot] = ()) -> dict[str, list[int]]:
    """Free GPU indices per node (every node, in order; indices ascending) once ``taken`` are removed."""
    held = set(taken)
    return {n.name: [k for k in range(n.gpus) if (n.name, k) not in held] for n in nodes}


def free_by_type(nodes: Iterable[Node], free: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """Free GPUs per GPU type (types with none free included, as 0)."""
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n.gpu_type] = counts.get(n.gpu_type, 0) + len(free.get(n.name, ()))
    return counts


class FreeSlots:
    """Free GPU indices per node while a stage builds a round (local, mutable).

    ``gpus`` maps node name -> free indices, ascending; ``version`` counts the gives (a
    stage caching a search over the free GPUs knows when one may have become possible).
    """

    def __init__(self, nodes: Iterable[Node], taken: Iterable[GpuSlot] = ()) -> None:
        self.gpus: dict[str, list[int]] = free_gpus(nodes, taken)
        self.version = 0

    def has(self, slots: Iterable[GpuSlot]) -> bool:
        return all(k in self.gpus.get(name, ()) for name, k in slots)

    def take(self, slots: Sequence[GpuSlot]) -> None:
        taken = set(slots)
        for name in {name for name, _ in slots}:
            self.gpus[name] = [k for k in self.gpus[name] if (name, k) not in taken]

    def give(self, slots: Iterable[GpuSlot]) -> None:
        """Free ``slots`` again (a slot already free stays listed once)."""
        self.version += 1
        for name, k in slots:
            free = self.gpus[name]
            if k not in free:
                insort(free, k)


PerNode = tuple[tuple[str, int], ...]
"""GPUs per node, in node-name order."""


def best_fit_node(avail: Sequence[tuple[int, str]], count: int) -> PerNode | None:
    """``count`` GPUs on one node of ``avail`` ((free GPUs, name) per node, sorted): the one
    with the fewest free GPUs that hold them (then by name); ``None`` if none does."""
    for free, name in avail:
        if free >= count:
            return ((name, count),)
    return None


def equal_spread(avail: Sequence[tuple[int, str]], count: int, spread: int) -> PerNode | None:
    """``count`` GPUs as ``spread`` equal shares on nodes of ``avail`` ((free GPUs, name) per
    node, sorted): the first ``spread`` that hold a share (best fit); ``None`` if ``spread``
    does not divide ``count`` or too few nodes hold a share."""
    if count % spread:
        return None
    per = count // spread
    group = []
    for free, name in avail:
        if free >= per:
            group.append(name)
            if len(group) == spread:
                return tuple((n, per) for n in sorted(group))
    return None


def consolidated_counts(avail: Sequence[tuple[int, str]], count: int) -> PerNode | None:
    """The consolidation rule on nodes of one type: one node (:func:`best_fit_node`), else the
    fewest nodes with an equal share each (:func:`equal_spread`)."""
    avail = sorted(avail)
    one = best_fit_node(avail, count)
    if one is not None:
        return one
    for spread in range(2, min(count, len(avail)) + 1):
        found = equal_spread(avail, count, spread)
        if found is not None:
            return found
    return None


def first_free(counts: PerNode, free: Mapping[str, Sequence[int]]) -> tuple[GpuSlot, ...]:
    """The lowest ``free`` indices of each node, as many as ``counts`` asks there."""
    return tuple((name, k) for name, per in counts for k in free[name][:per])


def consolidated_slots(
    snapshot: Snapshot, job: Job, count: int, free: Mapping[str, Sequence[int]]
) -> tuple[GpuSlot, ...] | None:
    """``count`` of the ``free`` GPUs (per node) for ``job``: on one node (best fit), else on the
    fewest nodes of one type accepted by the job, the same count on each; ``None`` if neither.

    The joint-allocation stages' consolidation rule (Tesserae §4.1's: a job that fits a node
    never spans nodes, and a spread job has an equal share on each of its nodes). ``free``
    needs an entry for every node of a type the job accepts. Among types that can hold a
    spread job, the first by name is taken; within it the nodes with the fewest free GPUs
    that hold their share (best fit), then by name.
    """
    nodes = [n for n in snapshot.nodes if job.accepts_type(n.gpu_type)]
    one = best_fit_node(sorted((len(free[n.name]), n.name) for n in nodes), count)
    if one is not None:
        return first_free(one, free)
    by_type: dict[str, list[tuple[int, str]]] = {}
    for n in nodes:
        by_type.setdefault(n.gpu_type, []).append((len(free[n.name]), n.name))
    ranked = [sorted(by_type[t]) for t in sorted(by_type)]
    for spread in range(2, len(nodes) + 1):
        for avail in ranked:
            found = equal_spread(avail, count, spread)
            if found is not None:
                return first_free(found, free)
    return None
