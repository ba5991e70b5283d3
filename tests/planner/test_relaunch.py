"""The one definition of a restart, a migration and a preemption (planner/relaunch.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.core.model import Assignment
from planner.relaunch import Change, GpuSetChange, classify, gpu_set_change, mem_mb_per_node, slurm_shape


def _a(gpus, cpus=8, mem_gb=32.0, plan=None, shares_with=()):
    return Assignment(gpus=tuple(gpus), cpus=cpus, mem_gb=mem_gb, plan=plan, shares_with=shares_with)


ON_N1 = _a([("n1", 0), ("n1", 1)])


@pytest.mark.parametrize(
    ("before", "after", "ran_before", "change"),
    [
        # Slurm picks GPU indices inside a node: renumbering them changes nothing.
        (ON_N1, _a([("n1", 2), ("n1", 3)]), True, Change.NONE),
        (ON_N1, _a([("n1", 1), ("n1", 0)]), True, Change.NONE),
        (ON_N1, _a([("n2", 0), ("n2", 1)]), True, Change.MOVED),
        (ON_N1, _a([("n1", 0), ("n2", 0)]), True, Change.MOVED),  # half of it moved
        (ON_N1, _a([("n1", 0), ("n1", 1), ("n2", 0), ("n2", 1)]), True, Change.MOVED),  # grew onto n2
        (ON_N1, _a([("n1", 0)]), True, Change.RESIZED),
        (ON_N1, _a([("n1", 0), ("n1", 1), ("n1", 2), ("n1", 3)]), True, Change.RESIZED),
        (ON_N1, _a([("n1", 0), ("n1", 1)], cpus=4), True, Change.RESHAPED),
        (ON_N1, _a([("n1", 0), ("n1", 1)], mem_gb=16.0), True, Change.RESHAPED),
        (ON_N1, _a([("n1", 0), ("n1", 1)], plan={"zero_stage": 2}), True, Change.RESHAPED),
        (ON_N1, _a([("n1", 0), ("n1", 1)], cpus=4, mem_gb=16.0, shares_with=("b",)), True, Change.SHARED),
        # Sharing that changes nothing Slurm can express is not a relaunch by itself.
        (ON_N1, _a([("n1", 0), ("n1", 1)], shares_with=("b",)), True, Change.NONE),
        (ON_N1, None, True, Change.PREEMPTED),
        (None, ON_N1, False, Change.START),
        (None, ON_N1, True, Change.RESUMED),
        (None, None, True, Change.NONE),
    ],
)
def test_what_each_transition_is(before, after, ran_before, change):
    assert classify(before, after, ran_before=ran_before) is change


@pytest.mark.parametrize(
    ("change", "restart", "migration", "relaunch"),
    [
        (Change.NONE, False, False, False),
        (Change.START, False, False, False),
        (Change.RESUMED, True, False, False),  # a preempted job resuming, wherever: not a migration
        (Change.MOVED, True, True, True),
        (Change.RESIZED, True, False, True),
        (Change.SHARED, True, False, True),
        (Change.RESHAPED, True, False, True),
        (Change.PREEMPTED, False, False, False),
    ],
)
def test_what_each_change_counts_as(change, restart, migration, relaunch):
    assert (change.restart, change.migration, change.relaunch) == (restart, migration, relaunch)


def test_the_live_reasons_are_the_relaunch_values():
    # The controller's stop/start reasons and the audit lines `mosaic report` reads.
    assert sorted(c.value for c in Change if c.relaunch) == ["moved", "reshaped", "resized", "shared"]
    assert Change.PREEMPTED.value == "preempted"


def test_memory_is_compared_in_whole_mb_per_node_as_slurm_is_asked():
    # 32 GB over 2 nodes = 16,384 MB each; 0.0005 GB more rounds up to one MB more per node.
    two_nodes = _a([("n1", 0), ("n2", 0)], mem_gb=32.0)
    assert mem_mb_per_node(two_nodes) == 16_384
    assert classify(two_nodes, _a([("n1", 1), ("n2", 3)], mem_gb=32.0 + 1e-9)) is Change.NONE
    assert classify(two_nodes, _a([("n1", 0), ("n2", 0)], mem_gb=32.0005)) is Change.RESHAPED
    assert slurm_shape(two_nodes) == ((("n1", 1), ("n2", 1)), 8, 16_384)


NODES = ("n1", "n2", "n3")


@st.composite
def assignments(draw):
    per_node = draw(st.dictionaries(st.sampled_from(NODES), st.integers(1, 4), min_size=1))
    gpus = []
    for node, count in per_node.items():
        gpus += [(node, k) for k in draw(st.permutations(range(8)))[:count]]
    cpus = draw(st.integers(1, 16))
    mem = draw(st.sampled_from([4.0, 8.0, 16.0]))
    plan = draw(st.sampled_from([None, {}, {"zero_stage": 2}]))
    return _a(gpus, cpus=cpus, mem_gb=mem, plan=plan)


@given(assignments(), assignments())
def test_nothing_happens_exactly_when_slurm_sees_the_same_shape(before, after):
    same = slurm_shape(before) == slurm_shape(after) and (before.plan or None) == (after.plan or None)
    change = classify(before, after)
    assert (change is Change.NONE) == same
    assert change.relaunch != same
    # A migration needs some of its GPUs on another node; a resize needs another count.
    if change is Change.MOVED:
        assert before.per_node != after.per_node
    if change is Change.RESIZED:
        assert before.nodes == after.nodes and before.num_gpus != after.num_gpus


@given(assignments(), st.randoms(use_true_random=False))
def test_renumbering_gpus_inside_their_nodes_is_never_a_change(a, rng):
    renumbered = []
    for node, count in a.per_node:
        renumbered += [(node, k) for k in rng.sample(range(8), count)]
    assert classify(a, _a(renumbered, cpus=a.cpus, mem_gb=a.mem_gb, plan=a.plan)) is Change.NONE


@pytest.mark.parametrize(
    ("before", "after", "change", "costs"),
    [
        # The plan's GPU-level view: a renumbering is another GPU set, yet no relaunch.
        (ON_N1, _a([("n1", 2), ("n1", 3)]), GpuSetChange.MOVED, Change.NONE),
        (ON_N1, _a([("n2", 0), ("n2", 1)]), GpuSetChange.MOVED, Change.MOVED),
        (ON_N1, _a([("n1", 0)]), GpuSetChange.MOVED, Change.RESIZED),
        (ON_N1, _a([("n1", 0), ("n1", 1)], cpus=4), GpuSetChange.RESHAPED, Change.RESHAPED),
        (ON_N1, _a([("n1", 0), ("n1", 1)], shares_with=("b",)), GpuSetChange.KEPT, Change.NONE),
        (ON_N1, ON_N1, GpuSetChange.KEPT, Change.NONE),
        (ON_N1, None, GpuSetChange.STOPPED, Change.PREEMPTED),
        (None, ON_N1, GpuSetChange.STARTED, Change.START),
        (None, None, GpuSetChange.KEPT, Change.NONE),
    ],
)
def test_the_plans_gpu_set_change_is_finer_than_what_a_round_costs(before, after, change, costs):
    assert gpu_set_change(before, after) is change
    assert classify(before, after) is costs


def test_the_plans_gpu_set_change_ignores_float_noise_in_memory():
    assert gpu_set_change(ON_N1, _a([("n1", 0), ("n1", 1)], mem_gb=32.0 + 1e-9)) is GpuSetChange.KEPT


def test_the_examples_in_the_docstrings_hold():
    import doctest

    import planner.relaunch

    assert doctest.testmod(planner.relaunch).failed == 0
