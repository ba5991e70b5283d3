"""elasticflow: minimum satisfactory shares, admission, marginal-gain scaling."""

from __future__ import annotations

import pytest

from planner import plan_round
from planner.core.errors import ConfigError
from tests.builders import make_job, make_node, make_snapshot, scheduler


def _job(job_id, deadline=None, submit=0.0, work=3600.0):
    # resnet50 without a batch scales linearly in the view: time(c) = work x 4 / c.
    return make_job(
        job_id, 4, submit, gpu_type="v100", min_gpus=1, max_gpus=8, remaining_s=work, deadline_s=deadline
    )


def test_deadline_jobs_get_their_minimum_share_and_the_rest_is_scaled():
    # One 8-GPU v100 node, slack 390 s. "a": 3600 s of work at 4 GPUs, due at 390 + 7200 s:
    # 14400/c <= 7200 needs c >= 2 (share 2). "b" (36000 s of work, due later, at 390 + 20000 s)
    # needs 144000/c <= 20000, c >= 8, more than the 6 left: it is not admitted. "c" has no
    # deadline: its share is 1 GPU. The 5 GPUs left go by marginal gain per GPU, (c+1)/c - 1 =
    # 1/c under linear scaling: c (1 -> 2), then a (2 -> 3) and c (2 -> 3) on a tie by arrival,
    # then a, c again: 4 and 4.
    jobs = [
        _job("a", 390.0 + 7200.0),
        _job("b", 390.0 + 20000.0, submit=1.0, work=36000.0),
        _job("c", submit=2.0),
    ]
    plan = plan_round(make_snapshot([make_node("n1", gpus=8)], jobs), scheduler("elasticflow"))
    assert set(plan.assignments) == {"a", "c"}
    assert plan.reasons["b"] == "no-capacity"
    assert plan.assignments["a"].num_gpus >= 2
    assert sum(a.num_gpus for a in plan.assignments.values()) == 8
    assert {k: a.num_gpus for k, a in plan.assignments.items()} == {"a": 4, "c": 4}


def test_an_earlier_deadline_is_admitted_first_and_a_hopeless_job_runs_best_effort():
    # "late" cannot meet its deadline (already past): it runs on what the others leave.
    node = make_node("n1", gpus=8)
    urgent = _job("urgent", 390.0 + 1800.0, submit=5.0)  # needs all 8 GPUs
    late = _job("late", 10.0)
    plan = plan_round(make_snapshot([node], [late, urgent]), scheduler("elasticflow"))
    assert set(plan.assignments) == {"urgent"} and plan.assignments["urgent"].num_gpus == 8
    relaxed = _job("urgent", 390.0 + 7200.0, submit=5.0)  # share 2: the late job gets room
    plan = plan_round(make_snapshot([node], [late, relaxed]), scheduler("elasticflow"))
    assert set(plan.assignments) == {"urgent", "late"}


def test_jobs_stay_on_the_type_they_asked_for():
    nodes = [make_node("a10-1", gpus=2, gpu_type="a10"), make_node("v100-1", gpus=8, gpu_type="v100")]
    job = make_job("j", 2, gpu_type="a10", gpu_types=("a10", "v100"), min_gpus=1, max_gpus=4)
    plan = plan_round(make_snapshot(nodes, [job]), scheduler("elasticflow"))
    assert plan.gpu_type_of["j"] == "a10" and plan.assignments["j"].num_gpus == 2


def test_options_are_checked():
    with pytest.raises(ConfigError, match="slack_s"):
        scheduler("elasticflow", options={"placement": {"slack_s": -1}})
