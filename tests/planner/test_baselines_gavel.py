"""gavel-het: the LP (hand-checked), its invariants, and the round mechanism over time."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner import plan_round
from planner.core.model import JobState
from planner.policies.baselines.gavel_het import gavel_allocation
from tests.builders import make_job, make_node, make_snapshot, running, scheduler


def _values(x, thr, scale, cap):
    """Each job's s_j * sum_t T[j][t] X[j][t], T normalised by the proportional share."""
    share = cap / cap.sum()
    norm = thr @ share
    return scale * (x * thr).sum(axis=1) / np.where(norm > 0, norm, 1.0)


def test_max_min_on_two_types_three_jobs_hand_checked():
    # Types A and B, one GPU each; three 1-GPU jobs with throughputs (A, B):
    # j0 (2, 1), j1 (1, 1), j2 (1, 2). The proportional share is (1/2, 1/2), so the
    # normalisers are 1.5, 1, 1.5 and the normalised throughputs (4/3, 2/3), (1, 1), (2/3, 4/3).
    # j0 on A and j2 on B for a fraction p each, j1 on both for 1 - p: values 4p/3, 2(1 - p),
    # 4p/3, equal at p = 0.6, z = 0.8. With j1 at 0.8 (0.8 time units), the 1.2 units left are
    # worth at most 4/3 each, only as j0 on A and j2 on B, both >= 0.8: p = 0.6 exactly.
    thr = np.array([[2.0, 1.0], [1.0, 1.0], [1.0, 2.0]])
    scale, cap = np.ones(3), np.array([1.0, 1.0])
    x = gavel_allocation(thr, scale, cap)
    assert x == pytest.approx(np.array([[0.6, 0.0], [0.4, 0.4], [0.0, 0.6]]), abs=1e-6)
    assert _values(x, thr, scale, cap) == pytest.approx([0.8, 0.8, 0.8], abs=1e-6)


def test_max_throughput_gives_each_type_to_the_job_fastest_there():
    # Same case, sum of normalised throughputs: j0 on A (4/3) and j2 on B (4/3), j1 nothing.
    thr = np.array([[2.0, 1.0], [1.0, 1.0], [1.0, 2.0]])
    x = gavel_allocation(thr, np.ones(3), np.array([1.0, 1.0]), "max-throughput")
    assert x == pytest.approx(np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]), abs=1e-6)


def test_scale_factors_and_types_a_job_cannot_use():
    # A 2-GPU job and a 1-GPU job on one type of 2 GPUs: max-min of s_j x_j (equal normalised
    # speed) gives 2 x0 = x1 with 2 x0 + x1 <= 2: x0 = 1/2, x1 = 1; then nothing is left.
    x = gavel_allocation(np.array([[1.0], [1.0]]), np.array([2.0, 1.0]), np.array([2.0]))
    assert x == pytest.approx(np.array([[0.5], [1.0]]), abs=1e-6)
    # A job that can run nowhere (zero throughput, or more GPUs than the type has) gets nothing.
    x = gavel_allocation(np.array([[0.0, 0.0], [1.0, 1.0]]), np.array([1.0, 4.0]), np.array([2.0, 2.0]))
    assert x == pytest.approx(np.zeros((2, 2)))


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="objective"):
        gavel_allocation(np.ones((1, 1)), np.ones(1), np.ones(1), "fastest")
    with pytest.raises(ValueError, match="shapes"):
        gavel_allocation(np.ones((2, 1)), np.ones(1), np.ones(1))


@given(
    st.integers(1, 6).flatmap(
        lambda m: st.tuples(
            st.lists(
                st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]), min_size=3, max_size=3),
                min_size=m,
                max_size=m,
            ),
            st.lists(st.sampled_from([1, 2, 4]), min_size=m, max_size=m),
            st.lists(st.integers(0, 8), min_size=3, max_size=3),
            st.lists(st.floats(0, 1), min_size=m * 3, max_size=m * 3),
        )
    ),
    st.sampled_from(["max-min", "max-throughput"]),
)
def test_the_allocation_is_feasible_and_no_worse_than_a_random_feasible_one(case, objective):
    rows, scales, caps, noise = case
    thr, scale, cap = np.array(rows), np.array(scales, dtype=float), np.array(caps, dtype=float)
    if cap.sum() == 0:
        cap[0] = 1.0
    x = gavel_allocation(thr, scale, cap, objective)
    usable = (thr > 0) & (scale[:, None] <= cap[None, :])
    assert np.all(x >= -1e-9) and np.all(x.sum(axis=1) <= 1 + 1e-6)
    assert np.all((x * scale[:, None]).sum(axis=0) <= cap + 1e-6)  # no type oversubscribed
    assert np.all(x[~usable] <= 1e-9)
    # A random feasible allocation over the same usable pairs does no better than the LP.
    y = np.array(noise).reshape(x.shape) * usable
    y = y / np.maximum(1.0, y.sum(axis=1, keepdims=True))
    per_type = (y * scale[:, None]).sum(axis=0)
    y = y / np.maximum(1.0, np.max(np.where(cap > 0, per_type / np.where(cap > 0, cap, 1), 0)))
    live = (thr * usable).sum(axis=1) > 0
    if not live.any():
        return
    vx, vy = _values(x, thr * usable, scale, cap)[live], _values(y, thr * usable, scale, cap)[live]
    if objective == "max-min":
        assert vx.min() >= vy.min() - 1e-6
    else:
        assert vx.sum() >= vy.sum() - 1e-6


def _applied(snapshot, plan, dt):
    """The snapshot ``dt`` seconds after applying ``plan`` (nothing finishes)."""
    jobs = []
    for job in snapshot.jobs:
        a = plan.assignments.get(job.id)
        state = plan.policy_state.get(job.id, job.policy_state)
        if a is not None:
            jobs.append(replace(job, state=JobState.RUNNING, assignment=a, policy_state=state))
        else:
            jobs.append(replace(job, state=JobState.PENDING, assignment=None, policy_state=state))
    return replace(snapshot, time_s=snapshot.time_s + dt, jobs=tuple(jobs))


def test_rounds_time_slice_by_priority_allocation_over_time_received():
    # One GPU, two equal jobs: X = 1/2 each. Round 1: neither received anything, the earlier
    # job runs. Round 2 (360 s later): the first has received its share, the other nothing
    # (infinite priority): it takes the GPU. Round 3: both got 360 s of 720 s, equal
    # priorities, the allocation breaks the tie, then arrival: the first again.
    sched = scheduler("gavel-het")
    snap = make_snapshot([make_node("n1", gpus=1)], [make_job("a"), make_job("b", submit=1.0)], time_s=10.0)
    first = plan_round(snap, sched)
    assert set(first.assignments) == {"a"}
    assert first.policy_state["a"]["gavel"]["x"] == pytest.approx({"v100": 0.5}, abs=1e-6)
    snap2 = _applied(snap, first, 360.0)
    second = plan_round(snap2, sched)
    assert set(second.assignments) == {"b"} and second.preempted == ("a",)
    third = plan_round(_applied(snap2, second, 360.0), sched)
    assert set(third.assignments) == {"a"}


def test_a_job_is_given_the_type_its_allocation_favours():
    # A 2-GPU job elastic over two types, measured (Crius table, bert_760M at batch 128 on 2
    # GPUs) at 9.05 s per iteration on a10 and 3.44 s on a100, its data-parallel replica fitting
    # both: alone, max-min then max-throughput puts it on the a100.
    nodes = [make_node("a10-1", gpus=2, gpu_type="a10"), make_node("a100-1", gpus=4, gpu_type="a100")]
    job = make_job("j", 2, model="bert_760M", batch_size=128, gpu_type="a10", gpu_types=("a10", "a100"))
    plan = plan_round(make_snapshot(nodes, [job]), scheduler("gavel-het"))
    assert plan.gpu_type_of["j"] == "a100"
    # Running on the a10 it is moved (it is elastic over types); a rigid one would stay.
    moved = plan_round(
        make_snapshot(nodes, [running(job, [("a10-1", 0), ("a10-1", 1)])], 360.0), scheduler("gavel-het")
    )
    assert moved.gpu_type_of["j"] == "a100" and moved.migrated == ("j",)
    rigid = replace(job, gpu_types=(), gpu_type=None)
    kept = plan_round(
        make_snapshot(nodes, [running(rigid, [("a10-1", 0), ("a10-1", 1)])], 360.0), scheduler("gavel-het")
    )
    assert kept.gpu_type_of["j"] == "a10" and kept.migrated == ()


def test_a_job_whose_data_parallel_replica_fits_nowhere_never_runs():
    # wide_resnet_4B: no data-parallel run fits at any count (dp_mem all -1), although its best
    # plan runs (Crius §8.3: the baselines over-state large models' memory).
    nodes = [make_node("a100-1", gpus=4, gpu_type="a100")]
    job = make_job("w", 4, model="wide_resnet_4B", batch_size=256, gpu_type="a100")
    plan = plan_round(make_snapshot(nodes, [job]), scheduler("gavel-het"))
    assert plan.assignments == {} and plan.reasons["w"] == "infeasible"
    with_opt = scheduler(
        "gavel-het", options={"policy": {"dp_check": False}, "placement": {"dp_check": False}}
    )
    assert set(plan_round(make_snapshot(nodes, [job]), with_opt).assignments) == {"w"}
