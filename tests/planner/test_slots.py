"""planner.slots: the shared free-GPU bookkeeping and the consolidated-slot rule."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from planner.core.model import Job, Node, Snapshot
from planner.slots import FreeSlots, consolidated_slots, free_by_type, free_gpus


def _nodes(*spec: tuple[str, int, str]) -> tuple[Node, ...]:
    return tuple(Node(name, gpus, gpu_type, cpus=32, mem_gb=128.0) for name, gpus, gpu_type in spec)


def _snapshot(nodes: tuple[Node, ...]) -> Snapshot:
    return Snapshot(0.0, nodes, ())


def _job(num_gpus: int, gpu_types: tuple[str, ...] = ()) -> Job:
    return Job(id="j", num_gpus=num_gpus, model="resnet18", submit_time_s=0.0, gpu_types=gpu_types)


def test_free_gpus_lists_every_node_without_the_taken_slots():
    nodes = _nodes(("a", 4, "v100"), ("b", 2, "k80"))
    assert free_gpus(nodes, [("a", 1), ("b", 0), ("b", 1)]) == {"a": [0, 2, 3], "b": []}
    assert free_by_type(nodes, free_gpus(nodes, [("a", 1)])) == {"v100": 3, "k80": 2}


def test_taking_and_giving_keeps_the_indices_sorted_and_once_each():
    free = FreeSlots(_nodes(("a", 4, "v100")))
    free.take([("a", 0), ("a", 2)])
    assert free.gpus == {"a": [1, 3]} and free.has([("a", 1)]) and not free.has([("a", 0)])
    free.give([("a", 2), ("a", 0), ("a", 3)])  # ("a", 3) was free already: listed once
    assert free.gpus == {"a": [0, 1, 2, 3]} and free.version == 1


def test_a_job_that_fits_one_node_takes_the_best_fit():
    snap = _snapshot(_nodes(("a", 8, "v100"), ("b", 4, "v100"), ("c", 2, "v100")))
    free = free_gpus(snap.nodes, [("a", 0)])
    assert consolidated_slots(snap, _job(3), 3, free) == (("b", 0), ("b", 1), ("b", 2))


def test_a_larger_job_spans_the_fewest_nodes_of_one_type():
    snap = _snapshot(_nodes(("a", 4, "v100"), ("b", 4, "k80"), ("c", 4, "k80"), ("d", 4, "v100")))
    free = free_gpus(snap.nodes, [("d", 0), ("d", 1)])  # v100: 4 + 2 free, k80: 4 + 4
    slots = consolidated_slots(snap, _job(8), 8, free)
    assert slots is not None and {n for n, _ in slots} == {"b", "c"}
    assert consolidated_slots(snap, _job(6, ("v100",)), 6, free) is None  # 4 + 2: not an equal share


@given(st.integers(0, 2**32 - 1), st.integers(1, 16))
def test_consolidated_slots_are_free_distinct_of_one_type_and_equal_per_node(seed, count):
    rng = random.Random(seed)
    nodes = _nodes(*((f"n{i}", rng.choice([2, 4, 8]), rng.choice(["v100", "k80"])) for i in range(6)))
    taken = [(n.name, k) for n in nodes for k in range(n.gpus) if rng.random() < 0.4]
    free = free_gpus(nodes, taken)
    slots = consolidated_slots(_snapshot(nodes), _job(count), count, free)
    if slots is None:
        assert all(len(ks) < count for ks in free.values())
        return
    assert len(slots) == len(set(slots)) == count and not set(slots) & set(taken)
    by_node = {n: sum(1 for m, _ in slots if m == n) for n, _ in slots}
    assert len({next(x.gpu_type for x in nodes if x.name == n) for n in by_node}) == 1
    assert len(set(by_node.values())) == 1
    if any(len(ks) >= count for ks in free.values()):
        assert len(by_node) == 1 and len(free[next(iter(by_node))]) == min(
            len(ks) for ks in free.values() if len(ks) >= count
        )
