"""Tesserae's migration minimisation: exact against brute force, zero on renamings."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner import plan_round
from planner.core.model import Assignment
from planner.policies.migration import (
    TesseraeMigration,
    gpu_cost,
    gpu_level_relabelling,
    shape_groups,
    tesserae_relabelling,
)
from planner.stages import Draft
from tests.builders import make_job, make_node, make_nodes, make_snapshot, running, scheduler


def relabelling_cost(old, new, mapping, nodes):
    """Tesserae's cost of a complete relabelling (slot map new -> physical)."""
    common = set(old) & set(new)
    weight = {j: 1.0 / len(new[j]) for j in common}
    old_on = {(n.name, g): set() for n in nodes for g in range(n.gpus)}
    new_on = {(n.name, g): set() for n in nodes for g in range(n.gpus)}
    for j in common:
        for s in old[j]:
            old_on[s].add(j)
        for s in new[j]:
            new_on[mapping[s]].add(j)
    return sum(gpu_cost(old_on[s], new_on[s], weight) for s in old_on)


def all_consolidating_relabellings(nodes):
    """Every node bijection within shape groups, with every GPU permutation per node."""
    groups = shape_groups(nodes)
    per_group = []
    for group in groups:
        options = []
        for perm in itertools.permutations(group):
            gpu_perms = [list(itertools.permutations(range(n.gpus))) for n in group]
            for choice in itertools.product(*gpu_perms):
                m = {}
                for logical, physical, gp in zip(group, perm, choice, strict=True):
                    for g in range(logical.gpus):
                        m[(logical.name, g)] = (physical.name, gp[g])
                options.append(m)
        per_group.append(options)
    for combo in itertools.product(*per_group):
        merged = {}
        for m in combo:
            merged.update(m)
        yield merged


@st.composite
def round_pairs(draw):
    """Two consecutive placements on a tiny cluster; GPUs may hold up to two jobs."""
    shapes = draw(st.sampled_from([(2, 2, "v100"), (3, 2, "v100"), (2, 3, "v100"), (4, 1, "v100")]))
    count, gpus, gtype = shapes
    nodes = [make_node(f"n{i}", gpus, gtype) for i in range(count)]
    if draw(st.booleans()):
        nodes.append(make_node("a0", 2, "a100"))
    slots = [(n.name, g) for n in nodes for g in range(n.gpus)]

    def placement(jobs):
        out, load = {}, dict.fromkeys(slots, 0)
        for j in jobs:
            k = draw(st.integers(1, 2))
            free = [s for s in slots if load[s] < 2]
            if len(free) < k:
                continue
            chosen = draw(st.permutations(free))[:k]
            for s in chosen:
                load[s] += 1
            out[j] = tuple(sorted(chosen))
        return out

    jobs = [f"j{i}" for i in range(draw(st.integers(1, 5)))]
    old = placement(jobs)
    new = placement([*draw(st.permutations(jobs))[: draw(st.integers(1, len(jobs)))], "fresh"])
    # A job keeps its GPU count across rounds (plans do not resize here).
    new = {j: s for j, s in new.items() if j not in old or len(old[j]) == len(s)}
    return nodes, old, new


@given(round_pairs())
def test_relabelling_cost_equals_the_brute_force_optimum(case):
    nodes, old, new = case
    result = tesserae_relabelling(old, new, nodes)
    achieved = relabelling_cost(old, new, result.slot_map, nodes)
    assert achieved == pytest.approx(result.cost)
    best = min(relabelling_cost(old, new, m, nodes) for m in all_consolidating_relabellings(nodes))
    assert result.cost == pytest.approx(best)


@given(round_pairs())
def test_relabelling_keeps_each_job_on_as_many_nodes_and_types(case):
    nodes, old, new = case
    result = tesserae_relabelling(old, new, nodes)
    types = {n.name: n.gpu_type for n in nodes}
    mapped = list(result.slot_map.values())
    assert sorted(mapped) == sorted(result.slot_map)  # a bijection of GPUs
    for slots in new.values():
        after = result.apply(slots)
        assert len({n for n, _ in after}) == len({n for n, _ in slots})
        assert sorted(types[n] for n, _ in after) == sorted(types[n] for n, _ in slots)


def test_a_pure_renaming_costs_nothing_figure_1():
    # Tesserae Figure 1: the new plan is the old one with GPUs renamed. Gavel's rule
    # (same GPU ids or migrate) moves 3 jobs; the relabelling moves none.
    nodes = make_nodes(2, gpus=2)
    old = {"1": [("n1", 0)], "2": [("n1", 1)], "3": [("n2", 0), ("n2", 1)]}
    new = {"1": [("n2", 1)], "2": [("n2", 0)], "3": [("n1", 0), ("n1", 1)]}
    gavel_moves = sum(sorted(old[j]) != sorted(new[j]) for j in old)
    assert gavel_moves == 3
    result = tesserae_relabelling(old, new, nodes)
    assert result.cost == 0
    assert all(result.apply(new[j]) == tuple(sorted(old[j])) for j in old)


def test_node_pair_cost_example_figure_6_style():
    # Old node: jobs 1 and 4 (1 GPU each); new node: job 6 and one free GPU. Jobs 1 and
    # 4 move out (0.5 each), job 6 moves in (0.5): 1.5 (Tesserae §4.1 Example).
    nodes = [make_node("n0", 2), make_node("n1", 2)]
    old = {"1": [("n0", 0)], "4": [("n0", 1)], "6": [("n1", 0)]}
    new = {"1": [("n1", 0)], "4": [("n1", 1)], "6": [("n0", 0)]}
    result = tesserae_relabelling(old, new, nodes)
    assert result.cost == 0  # swapping the nodes' names fixes everything
    forced = relabelling_cost(old, new, {s: s for s in result.slot_map}, nodes)
    assert forced == pytest.approx(3.0)  # identity: three 1-GPU migrations


def test_algorithm_5_can_split_a_job_algorithm_2_cannot():
    # Appendix B: GPU-level matching is blind to nodes. Keeping b on its old GPU is free
    # if "new" (2 GPUs, not in the old round) takes one GPU on each node: Algorithm 5
    # does exactly that; Algorithm 2 moves b (cost 1) to keep "new" on one node.
    nodes = make_nodes(2, gpus=2)
    old = {"a": [("n1", 0)], "b": [("n2", 0)]}
    new = {"a": [("n1", 0)], "b": [("n1", 1)], "new": [("n2", 0), ("n2", 1)]}
    split = gpu_level_relabelling(old, new, nodes)
    whole = tesserae_relabelling(old, new, nodes)
    assert len({n for n, _ in split.apply(new["new"])}) == 2
    assert len({n for n, _ in whole.apply(new["new"])}) == 1
    assert split.cost == 0 and whole.cost == pytest.approx(1.0)


def test_stage_relabels_only_when_a_running_job_would_move():
    nodes = make_nodes(2, gpus=2)
    a = running(make_job("a", 2), [("n1", 0), ("n1", 1)], cpus=8, mem_gb=32.0)
    snapshot = make_snapshot(nodes, [a])
    moved = Draft({"a": Assignment((("n2", 0), ("n2", 1)), 8, 32.0)}, {})
    assert TesseraeMigration().relabel(snapshot, moved).assignments["a"].gpus == a.assignment.gpus
    in_place = Draft({"a": a.assignment}, {})
    assert TesseraeMigration().relabel(snapshot, in_place) is in_place


def test_relabelling_only_within_nodes_of_the_same_shape():
    nodes = [make_node("a1", 2, "a100"), make_node("v1", 2, "v100")]
    old = {"x": [("a1", 0)], "y": [("v1", 0)]}
    new = {"x": [("v1", 0)], "y": [("a1", 0)]}  # would need to swap GPU types
    result = tesserae_relabelling(old, new, nodes)
    assert result.apply(new["x"]) == (("v1", 0),) and result.cost == pytest.approx(2.0)


def test_tesserae_preset_never_migrates_more_than_plain_placement():
    nodes = make_nodes(4, gpus=4)
    jobs = [
        running(
            make_job(i, 1 + i % 2, submit=i, attained_gpu_s=100.0 * i),
            [(f"n{1 + i // 2}", 2 * (i % 2)), (f"n{1 + i // 2}", 2 * (i % 2) + 1)][: 1 + i % 2],
        )
        for i in range(8)
    ]
    jobs += [make_job(f"new{i}", 2, submit=50 + i) for i in range(3)]
    snapshot = make_snapshot(nodes, jobs, time_s=5000)
    base = plan_round(snapshot, scheduler("las", packing="tesserae"))
    better = plan_round(snapshot, scheduler("las", packing="tesserae", migration="tesserae"))
    assert len(better.migrated) <= len(base.migrated)
    assert set(better.assignments) == set(base.assignments)
