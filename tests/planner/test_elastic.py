"""Elastic demand (min_gpus, max_gpus, gpu_types): validation, and what the planner gives.

A job without the fields is rigid and must plan exactly as before they existed; an
elastic job must never get a shape it does not accept.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner import PRESETS, plan_round
from planner.core.model import Assignment, Job, RoundPlan, Snapshot
from planner.sim import SimConfig, simulate
from planner.validate import plan_violations
from tests.builders import (
    make_job,
    make_node,
    make_nodes,
    make_snapshot,
    profiles,
    running,
    scheduler,
    trace_job,
)
from tests.planner.test_pipeline_properties import snapshots

PRESET_NAMES = sorted(PRESETS)
TYPES = ("v100", "a100", "t4")  # t4: a type the generated clusters never have


def _plan(snapshot: Snapshot, job_id: str, gpus, plan=None) -> RoundPlan:
    return RoundPlan(assignments={job_id: Assignment(tuple(gpus), 1, 1.0, plan)})


# -- validate ----------------------------------------------------------------------------


def test_a_rigid_job_is_given_exactly_its_count_as_before():
    snapshot = make_snapshot(make_nodes(1), [make_job(1, 2)])
    assert plan_violations(snapshot, _plan(snapshot, "1", [("n1", 0), ("n1", 1)])) == []
    assert plan_violations(snapshot, _plan(snapshot, "1", [("n1", 0)])) == [
        "job '1' asks for 2 GPUs but is given 1"
    ]


def test_an_elastic_job_may_be_given_any_count_in_its_range():
    snapshot = make_snapshot(make_nodes(1, gpus=8), [make_job(1, 2, min_gpus=2, max_gpus=4)])
    for count in (2, 3, 4):
        assert plan_violations(snapshot, _plan(snapshot, "1", [("n1", k) for k in range(count)])) == []
    assert plan_violations(snapshot, _plan(snapshot, "1", [("n1", k) for k in range(5)])) == [
        "job '1' accepts 2 to 4 GPUs but is given 5"
    ]
    assert plan_violations(snapshot, _plan(snapshot, "1", [("n1", 0)])) == [
        "job '1' accepts 2 to 4 GPUs but is given 1"
    ]


def test_gpus_must_be_of_an_accepted_type():
    nodes = [make_node("v", gpu_type="v100"), make_node("a", gpu_type="a100"), make_node("t", gpu_type="t4")]
    rigid = make_snapshot(nodes, [make_job(1, 1, gpu_type="v100")])
    assert plan_violations(rigid, _plan(rigid, "1", [("a", 0)])) == [
        "job '1' wants v100 GPUs but is on a100 'a'"
    ]
    elastic = make_snapshot(nodes, [make_job(1, 1, gpu_types=("v100", "a100"))])
    assert plan_violations(elastic, _plan(elastic, "1", [("a", 0)])) == []
    assert plan_violations(elastic, _plan(elastic, "1", [("v", 0)])) == []
    assert plan_violations(elastic, _plan(elastic, "1", [("t", 0)])) == [
        "job '1' wants v100 or a100 GPUs but is on t4 't'"
    ]


@pytest.mark.parametrize(
    ("plan", "gpus", "problem"),
    [
        (None, 4, None),
        ({"zero_stage": 2}, 4, None),  # no layout key: dp is derived from the count
        ({"dp": 2, "tp": 2}, 4, None),
        ({"tp": 2, "pp": 2}, 4, None),
        ({"tp": 2}, 6, None),
        ({"dp": 2, "tp": 2}, 8, "job '1': plan: dp 2 x tp 2 x pp 1 is not the 8 workers given"),
        ({"tp": 4}, 6, "job '1': plan: 6 workers cannot be split into tp 4 x pp 1 model replicas"),
        ({"tp": "2"}, 4, "job '1': plan: key 'tp': expected an integer >= 1, got '2' (str)"),
    ],
)
def test_a_plans_layout_must_use_exactly_the_gpus_given(plan, gpus, problem):
    snapshot = make_snapshot(make_nodes(1, gpus=8), [make_job(1, gpus, min_gpus=1, max_gpus=8)])
    found = plan_violations(snapshot, _plan(snapshot, "1", [("n1", k) for k in range(gpus)], plan))
    assert found == ([] if problem is None else [problem])


# -- the planner -------------------------------------------------------------------------


def _rigid_but_explicit(job: Job) -> Job:
    """The same demand, stated with the elastic fields."""
    types = () if job.gpu_type is None else (job.gpu_type,)
    return replace(job, min_gpus=job.num_gpus, max_gpus=job.num_gpus, gpu_types=types)


@given(snapshots(), st.sampled_from(PRESET_NAMES))
def test_rigid_jobs_plan_the_same_with_or_without_the_elastic_fields(snapshot, name):
    sched = scheduler(name)
    explicit = replace(snapshot, jobs=tuple(_rigid_but_explicit(j) for j in snapshot.jobs))
    assert plan_round(explicit, sched) == plan_round(snapshot, sched)


@st.composite
def elastic_snapshots(draw: st.DrawFn) -> Snapshot:
    """Random snapshots whose jobs accept random GPU ranges and type sets.

    A running job accepts (at least) the types of the GPUs it holds, as it would have
    been placed on them.
    """
    snapshot = draw(snapshots())
    jobs = []
    for job in snapshot.jobs:
        held = {snapshot.node(n).gpu_type for n in job.assignment.nodes} if job.assignment else set()
        if job.gpu_type is not None:
            held.add(job.gpu_type)
        extra = draw(st.sets(st.sampled_from(TYPES), max_size=2))
        types = tuple(sorted(held | extra)) if draw(st.booleans()) else ()
        jobs.append(
            replace(
                job,
                min_gpus=draw(st.integers(1, job.num_gpus)),
                max_gpus=draw(st.integers(job.num_gpus, job.num_gpus + 8)),
                gpu_types=types,
            )
        )
    return replace(snapshot, jobs=tuple(jobs))


@given(elastic_snapshots(), st.sampled_from(PRESET_NAMES))
def test_an_elastic_job_never_gets_a_shape_it_does_not_accept(snapshot, name):
    sched = scheduler(name)
    plan = plan_round(snapshot, sched)
    assert plan_violations(snapshot, plan, sched.max_jobs_per_gpu) == []
    jobs = {j.id: j for j in snapshot.jobs}
    for job_id, a in plan.assignments.items():
        job = jobs[job_id]
        assert job.accepts_gpus(a.num_gpus)
        assert all(job.accepts_type(snapshot.node(n).gpu_type) for n in a.nodes)


def test_placement_uses_every_accepted_type_and_no_other():
    nodes = [make_node("t1", gpus=4, gpu_type="t4"), make_node("a1", gpus=2, gpu_type="a100")]
    jobs = [
        make_job(1, 2, gpu_types=("a100", "v100")),
        make_job(2, 2, submit=1.0, gpu_types=("a100", "v100")),  # a100 taken, no v100: waits
        make_job(3, 2, submit=2.0),  # any type
    ]
    plan = plan_round(make_snapshot(nodes, jobs), scheduler("fifo"))
    assert plan.assignments["1"].nodes == ("a1",)
    assert "2" not in plan.assignments and plan.reasons["2"].value == "no-capacity"
    assert plan.assignments["3"].nodes == ("t1",)
    nowhere = plan_round(make_snapshot(nodes[:1], [make_job(1, 1, gpu_types=("a100", "v100"))]), scheduler())
    assert nowhere.reasons["1"].value == "no-gpu-type"


def test_a_running_elastic_job_keeps_its_gpus():
    nodes = make_nodes(1, gpus=4, gpu_type="a100")
    job = running(
        make_job(1, 2, min_gpus=1, max_gpus=4, gpu_types=("a100",)), [("n1", 0), ("n1", 1)], 8, 32.0
    )
    plan = plan_round(make_snapshot(nodes, [job]), scheduler("tiresias"))
    assert plan.assignments["1"].gpus == (("n1", 0), ("n1", 1))


def test_the_simulator_runs_an_elastic_trace_on_accepted_types_only():
    # One t4 node and one a100 GPU: two jobs accepting a100 or v100 run one after the other
    # on the a100 (the free t4 GPUs are not theirs); a job accepting anything takes a t4.
    nodes = (
        make_node("t1", gpus=4, gpu_type="t4", cpus=16),
        make_node("a1", gpus=1, gpu_type="a100", cpus=4),
    )
    trace = [
        trace_job("a", 0, 1, 1000, gpu_types=("a100", "v100"), max_gpus=2),
        trace_job("b", 0, 1, 1000, gpu_types=("a100", "v100"), min_gpus=1),
        trace_job("c", 0, 1, 1000),
    ]
    result = simulate(nodes, trace, scheduler("fifo"), SimConfig(trigger="event"), profiles=profiles())
    start = {r.job_id: r.start_time_s for r in result.records}
    assert start == {"a": 0, "b": 1000, "c": 0}
