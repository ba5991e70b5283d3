"""gandiva, gavel-het, elasticflow on random heterogeneous snapshots of Crius-table jobs
(hypothesis), and end to end in the simulator."""

from __future__ import annotations

import collections
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from planner import plan_round
from planner.core.model import Assignment, Job, JobState, Node, Snapshot
from planner.sim.engine import SimConfig, simulate
from planner.validate import plan_violations
from tests.builders import profiles, scheduler, trace_job

BASELINES = ["gandiva", "gavel-het", "elasticflow"]
SHAPES = {"a100": 4, "v100": 16, "a40": 2, "a10": 2}  # GPUs per server, as in Crius's cluster
MODELS = [
    ("bert_760M", 128),
    ("moe_1.3B", 256),
    ("wide_resnet_2B", 512),
    ("bert_2.6B", 128),
    ("resnet50", None),
]


@st.composite
def hetero_snapshots(draw: st.DrawFn) -> Snapshot:
    """Up to 8 servers of Crius's four types and up to 14 jobs of its models, each rigid or
    elastic (1/2 to 2x its GPUs, some of the types), some running on free GPUs of one server or
    of whole servers of one type, some with deadlines."""
    nodes = []
    for i in range(draw(st.integers(1, 8))):
        t = draw(st.sampled_from(sorted(SHAPES)))
        nodes.append(Node(f"{t}-{i}", SHAPES[t], t, 8 * SHAPES[t], 64.0 * SHAPES[t]))
    free = {n.name: list(range(n.gpus)) for n in nodes}
    jobs = []
    for j in range(draw(st.integers(0, 14))):
        g = draw(st.sampled_from([1, 2, 4, 8]))
        model, batch = draw(st.sampled_from(MODELS))
        t = draw(st.sampled_from(sorted(SHAPES)))
        job = Job(
            id=str(j),
            num_gpus=g,
            model=model,
            batch_size=batch,
            submit_time_s=float(draw(st.integers(0, 900))),
            gpu_type=t,
            remaining_s=float(draw(st.integers(60, 20000))),
            deadline_s=draw(st.one_of(st.none(), st.floats(1000, 40000))),
        )
        if draw(st.booleans()):
            types = tuple(sorted({t, *draw(st.sets(st.sampled_from(sorted(SHAPES)), max_size=3))}))
            job = replace(job, min_gpus=max(1, g // 2), max_gpus=2 * g, gpu_types=types)
        if draw(st.booleans()):
            slots = _take(nodes, free, g, job)
            if slots is not None:
                job = replace(job, state=JobState.RUNNING, assignment=Assignment(slots, 1, 1.0))
        jobs.append(job)
    return Snapshot(time_s=1000.0, nodes=tuple(nodes), jobs=tuple(jobs))


def _take(nodes, free, g, job):
    for n in nodes:
        if job.accepts_type(n.gpu_type) and len(free[n.name]) >= g:
            slots, free[n.name] = tuple((n.name, k) for k in free[n.name][:g]), free[n.name][g:]
            return slots
    return None


@given(hetero_snapshots(), st.sampled_from(BASELINES))
def test_no_type_is_oversubscribed_and_every_shape_is_accepted(snapshot, name):
    sched = scheduler(name)
    plan = plan_round(snapshot, sched)
    assert plan_violations(snapshot, plan, 1) == []
    per_type: collections.Counter[str] = collections.Counter()
    for job_id, a in plan.assignments.items():
        job = next(j for j in snapshot.jobs if j.id == job_id)
        assert job.accepts_gpus(a.num_gpus), (job_id, a.num_gpus)
        for node_name, count in a.per_node:
            node = snapshot.node(node_name)
            assert job.accepts_type(node.gpu_type)
            per_type[node.gpu_type] += count
    for t, used in per_type.items():
        assert used <= sum(n.gpus for n in snapshot.nodes if n.gpu_type == t)
    assert set(plan.reasons) == {j.id for j in snapshot.jobs}


@given(hetero_snapshots(), st.sampled_from(BASELINES))
def test_replanning_an_applied_plan_changes_nothing(snapshot, name):
    sched = scheduler(name)
    first = plan_round(snapshot, sched)
    jobs = []
    for job in snapshot.jobs:
        a = first.assignments.get(job.id)
        state = first.policy_state.get(job.id, job.policy_state)
        jobs.append(
            replace(job, state=JobState.RUNNING, assignment=a, policy_state=state)
            if a is not None
            else replace(job, state=JobState.PENDING, assignment=None, policy_state=state)
        )
    second = plan_round(replace(snapshot, jobs=tuple(jobs)), sched)
    assert second.assignments == first.assignments
    assert second.preempted == second.migrated == second.started == second.reshaped == ()


def test_each_baseline_runs_a_small_heterogeneous_trace_to_the_end():
    # Two servers per type; eight elastic Crius jobs. The simulator checks every plan (GPUs,
    # accepted counts and types); jobs the data-parallel view finds feasible all finish.
    nodes = [Node(f"{t}-{i}", g, t, 8 * g, 64.0 * g) for t, g in SHAPES.items() for i in range(2)]
    trace = [
        trace_job(k, 300.0 * k, g, 1800.0 + 600 * k, m, batch_size=b, gpu_type=t, min_gpus=max(1, g // 2),
                  max_gpus=2 * g, gpu_types=tuple(SHAPES), deadline_s=300.0 * k + 7200)
        for k, (g, m, b, t) in enumerate([
            (2, "bert_760M", 128, "a100"), (4, "moe_1.3B", 256, "a40"), (1, "bert_760M", 128, "v100"),
            (2, "moe_1.3B", 256, "a10"), (4, "bert_760M", 128, "v100"), (2, "moe_1.3B", 256, "a100"),
            (8, "bert_760M", 256, "v100"), (2, "bert_760M", 128, "a40"),
        ])
    ]  # fmt: skip
    for name in BASELINES:
        result = simulate(nodes, trace, scheduler(name), SimConfig(), profiles=profiles())
        assert result.summary["finished"] == len(trace), name
