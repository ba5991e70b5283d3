"""Migration minimisation: relabel a round's placement onto physical GPUs (Tesserae §4.1).

A placement only says which jobs share a node and a GPU; which *physical* node and GPU
index play each part is free, as long as nodes are interchangeable. Tesserae turns
"which renaming moves the fewest jobs" into two nested assignment problems:

* Algorithm 3 - the cost of playing new (logical) node q on old (physical) node p: for
  GPUs g of p and g' of q, moving GPU g' onto g costs 0.5 for every job that must move
  out of g or into it, divided by the job's GPU count (a k-GPU job moving wholesale
  costs 1 in total); the Hungarian algorithm picks the cheapest GPU bijection.
* Algorithm 2 - drop jobs not running in both rounds, price every node pair with
  Algorithm 3, and match nodes with the Hungarian algorithm again.

Matching whole nodes keeps a job's processes together: they stay on their node or move
to another one together (§4.3 "Consolidated placement"). Nodes are only matched with
nodes of the same shape (GPU type and count, CPUs, memory), which is the paper's rule
for heterogeneous clusters (same GPU type) made safe for CPU and memory shaping.

Algorithm 5 (Appendix B) matches GPUs across the whole node group in one step; it is
cheaper but may split a job over nodes, and is kept as the baseline that shows why.
Gavel's rule (a job keeps its GPU ids or migrates) is no relabelling at all: the
``gavel-las`` preset runs without a migration stage.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np

from planner.core.model import Assignment, GpuSlot, Node, Snapshot
from planner.matching import assign
from planner.policies.common import options_reader
from planner.registry import StageContext
from planner.stages import MIGRATIONS, Draft

# Among equally cheap relabellings, prefer keeping names (a node or GPU maps to itself):
# far below the smallest real cost difference (0.5 / 64 GPUs).
_TIE = 1e-6

Placement = Mapping[str, Sequence[GpuSlot]]
"""job id -> the GPUs it runs on (several jobs may share a GPU)."""


def _shape(node: Node) -> tuple[object, ...]:
    return (node.gpu_type, node.gpus, node.cpus, node.mem_gb)


def shape_groups(nodes: Sequence[Node]) -> list[list[Node]]:
    """Nodes that may stand in for one another, in snapshot order."""
    groups: dict[tuple[object, ...], list[Node]] = {}
    for node in nodes:
        groups.setdefault(_shape(node), []).append(node)
    return list(groups.values())


def _on_gpus(placement: Placement, common: set[str], nodes: Sequence[Node]) -> dict[str, list[set[str]]]:
    """For each node of ``nodes``: the common jobs on each of its GPUs."""
    on = {n.name: [set[str]() for _ in range(n.gpus)] for n in nodes}
    for job_id in common:
        for node, index in placement[job_id]:
            if node in on:
                on[node][index].add(job_id)
    return on


def gpu_cost(old: set[str], new: set[str], weight: Mapping[str, float]) -> float:
    """Algorithm 3, line 7: 0.5 per job moving out of or into the GPU, per GPU of the job."""
    return 0.5 * sum(weight[j] for j in old ^ new)


def node_pair_cost(
    old: Sequence[set[str]], new: Sequence[set[str]], weight: Mapping[str, float]
) -> tuple[float, list[tuple[int, int]]]:
    """Algorithm 3: the cheapest GPU bijection (old GPU, new GPU) between two nodes."""
    size = len(old)
    costs = np.array([[gpu_cost(old[g], new[h], weight) for h in range(size)] for g in range(size)])
    pairs = assign(costs + _TIE * (1 - np.eye(size)))
    return float(sum(costs[g, h] for g, h in pairs)), pairs


@dataclass(frozen=True)
class Relabelling:
    """Where each new-plan GPU lands, and what it costs in Tesserae's measure."""

    slot_map: dict[GpuSlot, GpuSlot]
    cost: float

    def apply(self, slots: Iterable[GpuSlot]) -> tuple[GpuSlot, ...]:
        return tuple(sorted(self.slot_map.get(s, s) for s in slots))


def tesserae_relabelling(old: Placement, new: Placement, nodes: Sequence[Node]) -> Relabelling:
    """Algorithm 2: the node-then-GPU relabelling of ``new`` that moves the fewest jobs.

    ``old`` is the previous round's placement on physical GPUs, ``new`` this round's
    placement; only jobs in both count. Returns the slot map new -> physical.
    """
    common = set(old) & set(new)
    weight = {j: 1.0 / len(new[j]) for j in common}
    slot_map: dict[GpuSlot, GpuSlot] = {}
    total = 0.0
    for group in shape_groups(nodes):
        old_on = _on_gpus(old, common, group)
        new_on = _on_gpus(new, common, group)
        out_cost = np.array([sum(gpu_cost(s, set(), weight) for s in old_on[n.name]) for n in group])
        in_cost = np.array([sum(gpu_cost(set(), s, weight) for s in new_on[n.name]) for n in group])
        # Nodes that share no job: every old job moves out, every new one moves in.
        costs = out_cost[:, None] + in_cost[None, :]
        jobs_old = {n.name: set().union(*old_on[n.name]) for n in group}
        jobs_new = {n.name: set().union(*new_on[n.name]) for n in group}
        index = {n.name: i for i, n in enumerate(group)}
        exact: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for j in common:
            for p_name in {s[0] for s in old[j]} & set(index):
                for q_name in {s[0] for s in new[j]} & set(index):
                    p, q = index[p_name], index[q_name]
                    if (p, q) not in exact and jobs_old[p_name] & jobs_new[q_name]:
                        costs[p, q], exact[(p, q)] = node_pair_cost(old_on[p_name], new_on[q_name], weight)
        size = len(group)
        node_pairs = assign(costs + _TIE * (1 - np.eye(size)))
        for p, q in node_pairs:
            total += float(costs[p, q])
            gpu_pairs = exact.get((p, q)) or [(g, g) for g in range(group[p].gpus)]
            for g, h in gpu_pairs:
                slot_map[(group[q].name, h)] = (group[p].name, g)
    return Relabelling(slot_map, total)


def gpu_level_relabelling(old: Placement, new: Placement, nodes: Sequence[Node]) -> Relabelling:
    """Algorithm 5 (Appendix B): one GPU-level assignment over each node group.

    Cheaper than Algorithm 2 but blind to nodes: GPUs of one job may land on different
    nodes. Kept as a baseline.
    """
    common = set(old) & set(new)
    weight = {j: 1.0 / len(new[j]) for j in common}
    slot_map: dict[GpuSlot, GpuSlot] = {}
    total = 0.0
    for group in shape_groups(nodes):
        old_on = _on_gpus(old, common, group)
        new_on = _on_gpus(new, common, group)
        slots = [(n.name, g) for n in group for g in range(n.gpus)]
        costs = np.array([[gpu_cost(old_on[a][i], new_on[b][k], weight) for b, k in slots] for a, i in slots])
        for r, c in assign(costs + _TIE * (1 - np.eye(len(slots)))):
            total += float(costs[r, c])
            slot_map[slots[c]] = slots[r]
    return Relabelling(slot_map, total)


def _placements(snapshot: Snapshot, draft: Draft) -> tuple[dict[str, tuple[GpuSlot, ...]], ...]:
    old = {j.id: j.assignment.gpus for j in snapshot.jobs if j.is_running and j.assignment is not None}
    new = {job_id: a.gpus for job_id, a in draft.assignments.items()}
    return old, new


def _already_in_place(old: Placement, new: Placement) -> bool:
    return all(tuple(old[j]) == tuple(new[j]) for j in set(old) & set(new))


def _relabelled(draft: Draft, relabelling: Relabelling) -> Draft:
    moved = {}
    for job_id, a in draft.assignments.items():
        gpus = relabelling.apply(a.gpus)
        moved[job_id] = a if gpus == a.gpus else Assignment(gpus, a.cpus, a.mem_gb, a.plan, a.shares_with)
    return Draft(assignments=moved, outcomes=draft.outcomes)


@dataclass(frozen=True)
class _RelabellingStage(ABC):
    component: ClassVar[str]

    @abstractmethod
    def rule(self, old: Placement, new: Placement, nodes: Sequence[Node]) -> Relabelling:
        """The relabelling of ``new`` onto the physical GPUs of ``old``."""

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        options_reader(options, cls.component, [])
        return cls()

    def relabel(self, snapshot: Snapshot, draft: Draft) -> Draft:
        old, new = _placements(snapshot, draft)
        if _already_in_place(old, new):  # the identity costs 0: nothing can do better
            return draft
        return _relabelled(draft, self.rule(old, new, snapshot.nodes))


@MIGRATIONS.register("tesserae")
@dataclass(frozen=True)
class TesseraeMigration(_RelabellingStage):
    """Tesserae's Algorithms 2 and 3: node matching over GPU matching (consolidation-safe)."""

    component = "tesserae migration"

    def rule(self, old: Placement, new: Placement, nodes: Sequence[Node]) -> Relabelling:
        return tesserae_relabelling(old, new, nodes)


@MIGRATIONS.register("gpu-level")
@dataclass(frozen=True)
class GpuLevelMigration(_RelabellingStage):
    """Tesserae's Algorithm 5: one GPU-level matching; may split jobs across nodes."""

    component = "gpu-level migration"

    def rule(self, old: Placement, new: Placement, nodes: Sequence[Node]) -> Relabelling:
        return gpu_level_relabelling(old, new, nodes)
