"""Consolidated placement: best fit, fewest nodes, stickiness, displacement order."""

import re

import pytest

from planner.core.errors import ConfigError
from planner.core.model import Outcome
from planner.policies.placement import ConsolidatedPlacement
from planner.registry import StageContext
from tests.builders import make_job, make_node, make_nodes, make_snapshot, profiles, running


def place(nodes, jobs, **options):
    snap = make_snapshot(nodes, jobs)
    return ConsolidatedPlacement(**options).place(snap, list(jobs))


def gpus(draft, job_id):
    return draft.assignments[job_id].gpus


def test_best_fit_picks_the_fullest_node_that_fits():
    nodes = make_nodes(3)  # 4 GPUs each
    busy = [
        running(make_job("x", 3), [("n1", 0), ("n1", 1), ("n1", 2)]),
        running(make_job("y", 1), [("n3", 0)]),
    ]
    draft = place(nodes, [*busy, make_job("new", 1, submit=1)])
    # n1 has 1 free GPU, n3 has 3, n2 has 4: the 1-GPU job goes to n1.
    assert gpus(draft, "new") == (("n1", 3),)


def test_a_job_that_fits_a_node_is_never_split():
    nodes = make_nodes(2)
    busy = [
        running(make_job("x", 2), [("n1", 0), ("n1", 1)]),
        running(make_job("y", 2), [("n2", 0), ("n2", 1)]),
    ]
    draft = place(nodes, [*busy, make_job("big", 4, submit=1)])
    assert "big" not in draft.assignments  # 4 GPUs free, but 2 + 2
    assert draft.outcomes["big"] is Outcome.NO_CONSOLIDATED_SLOT


def test_a_job_larger_than_a_node_spans_the_fewest_nodes():
    nodes = make_nodes(4)
    busy = [running(make_job("x", 1), [("n2", 0)])]
    draft = place(nodes, [*busy, make_job("wide", 7, submit=1)])
    # Two nodes suffice: a whole node (n1) and the best fit for the other 3 (n2, 3 free).
    assert draft.assignments["wide"].per_node == (("n1", 4), ("n2", 3))


def test_infeasible_and_missing_gpu_type():
    nodes = make_nodes(2)
    draft = place(nodes, [make_job("huge", 9), make_job("typed", 1, submit=1, gpu_type="h100")])
    assert draft.outcomes["huge"] is Outcome.INFEASIBLE
    assert draft.outcomes["typed"] is Outcome.NO_GPU_TYPE


def test_gpu_type_request_is_honoured():
    nodes = [make_node("a1", gpu_type="a100"), make_node("v1", gpu_type="v100")]
    draft = place(nodes, [make_job("j", 2, gpu_type="v100")])
    assert {n for n, _ in gpus(draft, "j")} == {"v1"}


def test_running_job_keeps_its_gpus():
    nodes = make_nodes(2)
    job = running(make_job("r", 2), [("n2", 1), ("n2", 3)], cpus=8, mem_gb=32.0)
    draft = place(nodes, [job])
    assert draft.assignments["r"] is job.assignment
    assert draft.outcomes["r"] is Outcome.KEPT


def test_higher_priority_job_prefers_unreserved_gpus():
    nodes = make_nodes(2)
    low = running(make_job("low", 2, submit=5), [("n1", 0), ("n1", 1)])
    high = make_job("high", 2, submit=0)
    draft = place(nodes, [high, low])  # high first in priority order
    # n1 has 2 free unreserved GPUs: high takes those (best fit) instead of low's.
    assert gpus(draft, "high") == (("n1", 2), ("n1", 3))
    assert draft.outcomes["low"] is Outcome.KEPT


def test_displacement_takes_the_lowest_priority_jobs_gpus():
    nodes = make_nodes(2)
    mid = running(make_job("mid", 4, submit=1), [("n1", k) for k in range(4)])
    low = running(make_job("low", 4, submit=2), [("n2", k) for k in range(4)])
    draft = place(nodes, [make_job("top", 4), mid, low])
    assert {n for n, _ in gpus(draft, "top")} == {"n2"}
    assert draft.outcomes["mid"] is Outcome.KEPT
    assert "low" not in draft.assignments


def test_displaced_job_moves_when_there_is_room():
    nodes = make_nodes(2)
    low = running(make_job("low", 4, submit=2), [("n1", k) for k in range(4)])
    other = running(make_job("other", 2, submit=1), [("n2", 0), ("n2", 1)])
    draft = place(nodes, [make_job("top", 4), other, low])
    assert {n for n, _ in gpus(draft, "top")} == {"n1"}
    assert "low" not in draft.assignments  # n2 has only 2 free GPUs
    assert draft.outcomes["other"] is Outcome.KEPT


def test_backfill_off_blocks_everything_behind_a_waiting_job():
    nodes = make_nodes(1)
    jobs = [make_job("a", 3), make_job("b", 2, submit=1), make_job("c", 1, submit=2)]
    assert set(place(nodes, jobs).assignments) == {"a", "c"}
    strict = place(nodes, jobs, backfill=False)
    assert set(strict.assignments) == {"a"}
    assert strict.outcomes["c"] is Outcome.BLOCKED


def test_vanished_gpus_are_not_kept():
    nodes = make_nodes(1)  # n1 has GPUs 0..3 only
    ghost = running(make_job("g", 1), [("n9", 0)])
    draft = place(nodes, [ghost])
    assert draft.assignments["g"].gpus == (("n1", 0),)


def test_untyped_job_waits_for_a_node_that_holds_it_rather_than_spanning_smaller_ones():
    nodes = [make_node("a1", gpus=2, gpu_type="a100"), make_node("v1", gpus=1), make_node("v2", gpus=1)]
    draft = place(nodes, [make_job("first", 2), make_job("second", 2, submit=1)])
    assert draft.assignments["first"].per_node == (("a1", 2),)
    assert draft.outcomes["second"] is Outcome.NO_CONSOLIDATED_SLOT


def test_a_backfill_interval_backfills_only_at_its_times():
    nodes = make_nodes(1)
    jobs = [make_job("a", 3), make_job("b", 2, submit=1), make_job("c", 1, submit=2)]
    placement = ConsolidatedPlacement(backfill_interval_s=30.0, backfill_offset_s=5.0)
    for t, backfills in ((0.0, False), (5.0, True), (20.0, False), (35.0, True), (65.0 - 1e-9, True)):
        draft = placement.place(make_snapshot(nodes, jobs, time_s=t), jobs)
        assert placement.backfills_at(t) is backfills
        assert set(draft.assignments) == ({"a", "c"} if backfills else {"a"}), t
        if not backfills:
            assert draft.outcomes["c"] is Outcome.BLOCKED
    assert [placement.next_wakeup_s(t) for t in (0.0, 5.0, 34.9, 35.0)] == [5.0, 35.0, 35.0, 65.0]
    assert ConsolidatedPlacement().next_wakeup_s(0.0) is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"backfill_interval_s": 0}, "'backfill_interval_s': expected a number of seconds > 0, got 0"),
        ({"backfill_interval_s": -30}, "'backfill_interval_s': expected a number of seconds > 0, got -30"),
        ({"backfill_interval_s": "30"}, "'backfill_interval_s': expected a number"),
        ({"backfill_interval_s": 30, "backfill": False}, "but backfill is false"),
        ({"backfill_offset_s": 5}, "'backfill_offset_s': needs backfill_interval_s"),
        ({"backfill_interval_s": 30, "backfill_offset_s": 30}, "below backfill_interval_s (30)"),
    ],
)
def test_backfill_interval_options_are_validated(options, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        ConsolidatedPlacement.from_options(options, StageContext(profiles()))
