"""GPU-proportional CPU and memory: the allocation every DL scheduler used before Synergy.

A job with g of a node's G GPUs gets floor(C * g / G) of its C CPUs and M * g / G of its
M GB of memory (Synergy §2, "GPU-proportional allocation", its baseline). On a node,
the shares of the jobs there never add up to more than the node has. A job spanning
nodes gets, on each, the per-GPU share of the *least* generous of its nodes, so its
totals split back per node by GPU count (``Assignment.node_shares``) without a remainder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from planner.core.model import Assignment, GpuSlot, Node, Snapshot
from planner.policies.common import options_reader
from planner.registry import StageContext
from planner.stages import SHAPINGS, Draft


def proportional_share(
    nodes: Mapping[str, Node], assignment: Assignment, sharers: int = 1
) -> tuple[int, float]:
    """(CPUs, memory GB) proportional to the assignment's GPUs.

    ``sharers`` is the most jobs on any one of its GPUs: jobs sharing GPUs split the
    GPUs' share evenly, so a node's total never exceeds what it has.
    """
    per_node = assignment.per_node
    if len(per_node) == 1:
        ((name, g),) = per_node
        node = nodes[name]
        return node.cpus * g // (node.gpus * sharers), node.mem_gb * g / (node.gpus * sharers)
    spanned = [nodes[name] for name, _ in per_node]
    cpus_per_gpu = min(n.cpus // (n.gpus * sharers) for n in spanned)
    mem_per_gpu = min(n.mem_gb / (n.gpus * sharers) for n in spanned)
    g = assignment.num_gpus
    return cpus_per_gpu * g, mem_per_gpu * g


def gpu_occupancy(assignments: Mapping[str, Assignment]) -> dict[GpuSlot, int]:
    """How many jobs of ``assignments`` hold each GPU."""
    occupancy: dict[GpuSlot, int] = {}
    for a in assignments.values():
        for slot in a.gpus:
            occupancy[slot] = occupancy.get(slot, 0) + 1
    return occupancy


@SHAPINGS.register("proportional")
@dataclass(frozen=True)
class ProportionalShaping:
    """Every job gets CPUs and memory in proportion to its GPUs (Synergy's baseline).

    A running job keeps its assignment object from round to round, so when no GPU is
    shared (the share then depends on the assignment and the nodes alone), the
    assignments found already holding their share are remembered per job, with the node
    tuple they were checked on, and that very object on those very nodes is kept as it
    is without a new look.
    """

    # job id -> the assignment found already shaped last round, valid for the node tuple in
    # _memo_nodes: the same object needs no new look.
    _memo: dict[str, Assignment] = field(default_factory=dict, init=False, repr=False, compare=False)
    _memo_nodes: list[tuple[Node, ...]] = field(default_factory=list, init=False, repr=False, compare=False)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], context: StageContext) -> Self:
        options_reader(options, "proportional shaping", [])
        return cls()

    def shape(self, snapshot: Snapshot, draft: Draft) -> Draft:
        shaped = {}
        sharing = any(a.shares_with for a in draft.assignments.values())
        occupancy = gpu_occupancy(draft.assignments) if sharing else {}
        memo = self._memo
        if sharing or not self._memo_nodes or self._memo_nodes[0] is not snapshot.nodes:
            memo.clear()
            self._memo_nodes[:] = [snapshot.nodes]
        seen: dict[str, Assignment] = {}
        for job_id, a in draft.assignments.items():
            if not sharing:
                if memo.get(job_id) is not a:
                    cpus, mem_gb = proportional_share(snapshot.nodes_by_name, a)
                    if cpus != a.cpus or mem_gb != a.mem_gb:
                        shaped[job_id] = Assignment(a.gpus, cpus, mem_gb, a.plan)
                        continue
                seen[job_id] = a  # its share already: kept as it is
                shaped[job_id] = a
                continue
            sharers = max(occupancy[slot] for slot in a.gpus) if a.shares_with else 1
            cpus, mem_gb = proportional_share(snapshot.nodes_by_name, a, sharers)
            if cpus == a.cpus and mem_gb == a.mem_gb:
                shaped[job_id] = a
            else:
                shaped[job_id] = Assignment(a.gpus, cpus, mem_gb, a.plan, a.shares_with)
        memo.clear()
        memo.update(seen)
        return Draft(assignments=shaped, outcomes=draft.outcomes)
