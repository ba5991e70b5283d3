"""Keep in place: a round's same-sized GPU sets handed back to the running jobs that held them."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.core.model import Assignment, Job, JobState, Outcome, RoundPlan
from planner.policies.keep import keep_in_place
from planner.stages import Draft
from planner.validate import plan_violations
from tests.builders import make_job, make_node, make_snapshot, running

NODES = (
    make_node("a1", 4, "a100", cpus=16, mem_gb=64.0),
    make_node("v1", 4, "v100", cpus=16, mem_gb=64.0),
    make_node("t1", 2, "a40", cpus=8, mem_gb=32.0),
)


def _keep(jobs, draft):
    """keep_in_place with the jobs in the order given as the round's priority order."""
    return keep_in_place(make_snapshot(NODES, jobs), jobs, draft)


def _draft(**gpus: tuple[tuple[str, int], ...]) -> Draft:
    return Draft({j: Assignment(tuple(g), 2, 8.0) for j, g in gpus.items()}, {})


def test_a_displacement_chain_becomes_one_move():
    # x lost its GPU; the round moved it onto y's, y onto z's, and z onto a free GPU.
    x = running(make_job("x"), [("a1", 0)], 2, 8.0)
    y = running(make_job("y"), [("v1", 0)], 2, 8.0)
    z = running(make_job("z"), [("t1", 0)], 2, 8.0)
    big = make_job("big", 4)
    draft = _draft(
        big=(("a1", 0), ("a1", 1), ("a1", 2), ("a1", 3)), x=(("v1", 0),), y=(("t1", 0),), z=(("v1", 3),)
    )
    out = _keep([x, y, z, big], draft)
    assert out.assignments["y"] is y.assignment and out.assignments["z"] is z.assignment
    assert out.assignments["x"].gpus == (("v1", 3),)
    assert out.assignments["big"] is draft.assignments["big"]


def test_a_job_gets_only_a_type_it_accepts():
    x = running(make_job("x", gpu_types=("a100",)), [("a1", 0)], 2, 8.0)
    y = running(make_job("y"), [("v1", 0)], 2, 8.0)
    # y was moved onto x's GPU and x onto y's, which x does not accept: only y may go back
    # if x has an a100 to go to.
    draft = _draft(x=(("a1", 1),), y=(("a1", 0),))
    out = _keep([x, y], draft)
    assert out.assignments["x"] is x.assignment
    assert out.assignments["y"].gpus == (("a1", 1),)


def test_jobs_whose_sets_are_their_allocations_are_left_alone():
    elastic = running(make_job("e", min_gpus=1, max_gpus=2), [("a1", 0)], 2, 8.0)
    guaranteed = running(make_job("g", guaranteed=True), [("v1", 0)], 2, 8.0)
    draft = _draft(e=(("v1", 0),), g=(("a1", 0),))
    out = _keep([elastic, guaranteed], draft)
    assert out is draft


def test_running_cpus_that_no_longer_fit_give_way_to_the_rounds():
    # x ran with 7 of t1's 8 CPUs; the round gave t1's other GPU to w with 4 CPUs. x back on t1
    # with its 7 does not fit: it goes back with the CPUs the round gave the set.
    x = running(make_job("x"), [("t1", 0)], 7, 8.0)
    y = running(make_job("y"), [("v1", 0)], 2, 8.0)
    w = make_job("w")
    draft = Draft(
        {
            "x": Assignment((("v1", 0),), 3, 8.0),
            "y": Assignment((("t1", 0),), 2, 8.0),
            "w": Assignment((("t1", 1),), 4, 8.0),
        },
        {},
    )
    snapshot = make_snapshot(NODES, [x, y, w])
    out = keep_in_place(snapshot, snapshot.jobs, draft)
    assert [out.assignments[j].gpus for j in ("x", "y")] == [(("t1", 0),), (("v1", 0),)]
    assert out.assignments["x"].cpus + out.assignments["w"].cpus <= 8
    assert plan_violations(snapshot, RoundPlan(assignments=out.assignments)) == []


@st.composite
def _rounds(draw):
    """Running one-GPU jobs on distinct GPUs, some waiting ones, and a round that gives a random
    choice of the jobs a random choice of the cluster's GPUs (the others stopped or waiting)."""
    slots = [(n.name, g) for n in NODES for g in range(n.gpus)]
    held = draw(st.lists(st.sampled_from(slots), unique=True, max_size=len(slots)))
    by_type = {n.name: n.gpu_type for n in NODES}
    jobs = []
    for k, slot in enumerate(held):
        kinds = [(), ("a100",), ("v100", "a40")]
        types = draw(st.sampled_from([t for t in kinds if not t or by_type[slot[0]] in t]))
        job = running(make_job(f"r{k}", gpu_types=types), [slot], draw(st.integers(1, 3)), 4.0)
        jobs.append(job)
    jobs += [make_job(f"w{k}") for k in range(draw(st.integers(0, 3)))]
    chosen = draw(st.lists(st.sampled_from(slots), unique=True, min_size=0, max_size=len(jobs)))
    runs = draw(st.permutations(jobs))[: len(chosen)]
    assignments = {}
    for job, slot in zip(runs, chosen, strict=True):
        if job.gpu_types and by_type[slot[0]] not in job.gpu_types:
            continue
        assignments[job.id] = Assignment((slot,), draw(st.integers(1, 3)), 4.0)
    outcomes = {j.id: Outcome.NO_CAPACITY for j in jobs if j.id not in assignments}
    order = draw(st.permutations(jobs))
    in_order = {j.id: assignments[j.id] for j in order if j.id in assignments}  # as a draft is
    return make_snapshot(NODES, jobs), order, Draft(in_order, outcomes)


@settings(max_examples=400, deadline=None)
@given(_rounds())
def test_a_valid_round_with_the_same_shapes_and_never_more_restarts(case):
    snapshot, order, draft = case
    out = keep_in_place(snapshot, order, draft)
    jobs = {j.id: j for j in snapshot.jobs}
    rank = {j.id: k for k, j in enumerate(order)}

    def restarts(assignments):
        return sum(1 for j in jobs.values() if j.is_running and assignments.get(j.id) != j.assignment)

    assert restarts(out.assignments) <= restarts(draft.assignments)
    assert plan_violations(snapshot, RoundPlan(assignments=out.assignments)) == []
    for job_id, a in out.assignments.items():
        job = jobs[job_id]
        assert job_id in draft.assignments or a is job.assignment  # only stopped jobs resume
        types = job.gpu_types
        assert not types or all({n.name: n.gpu_type for n in NODES}[node] in types for node, _ in a.gpus)
    for job_id in set(draft.assignments) - set(out.assignments):
        # Only an arrival waits instead, for a running job ranked above it.
        assert not jobs[job_id].is_running
        assert any(rank[r] < rank[job_id] for r in set(out.assignments) - set(draft.assignments))
    assert list(out.assignments) == [j.id for j in order if j.id in out.assignments]
    assert keep_in_place(snapshot, order, draft) == out  # deterministic
    # A round that moves and stops nobody is left as it is.
    kept = Draft({j.id: j.assignment for j in snapshot.jobs if j.is_running}, {})
    assert keep_in_place(snapshot, order, kept) is kept


def test_a_round_with_nothing_to_give_back_is_the_same_object():
    x = running(make_job("x"), [("a1", 0)], 2, 8.0)
    draft = _draft(x=(("v1", 1),))
    assert _keep([x], draft) is draft
    assert _keep([replace(x)], Draft({}, {})).assignments == {}


def test_a_running_job_is_not_stopped_for_a_lower_ranked_arrival():
    # The round stopped x for want of GPUs, and a lower-ranked arrival w got x's GPU.
    x = running(make_job("x"), [("v1", 0)], 2, 8.0)
    w = make_job("w")
    draft = Draft({"w": Assignment((("v1", 0),), 2, 8.0)}, {"x": Outcome.NO_CAPACITY, "w": Outcome.PLACED})
    out = _keep([x, w], draft)
    assert out.assignments == {"x": x.assignment}
    assert out.outcomes["x"] is Outcome.KEPT and out.outcomes["w"] is Outcome.NO_CAPACITY
    # Ranked above x, the arrival keeps the GPU; so does a job that was running already.
    assert _keep([w, x], draft) is draft
    moved = running(make_job("w"), [("v1", 1)], 2, 8.0)
    assert _keep([x, moved], draft) is draft
    # Stopped for another reason (held back), x stays stopped.
    held = Draft(draft.assignments, {"x": Outcome.NO_RESOURCES, "w": Outcome.PLACED})
    assert _keep([x, w], held) is held


def test_a_stopped_job_whose_gpus_are_idle_resumes_as_it_ran():
    x = running(make_job("x"), [("t1", 0), ("t1", 1)], 8, 32.0)
    draft = Draft({}, {"x": Outcome.NO_CONSOLIDATED_SLOT})
    assert _keep([x], draft).assignments == {"x": x.assignment}
    # Unless its CPUs are no longer there: another job took t1's CPUs on no GPU of x's.
    nodes = (*NODES[:2], replace(NODES[2], gpus=3))
    y = make_job("y")
    cpu_hog = Draft({"y": Assignment((("t1", 2),), 4, 8.0)}, {"x": Outcome.NO_CAPACITY})
    assert keep_in_place(make_snapshot(nodes, [x, y]), [x, y], cpu_hog) is cpu_hog


def _pair(host_cpus: int = 2, guest_cpus: int = 2) -> tuple[Job, Job]:
    """Host h and guest g sharing a1's GPU 0, as the sharing stage runs them."""
    slot = (("a1", 0),)
    h = replace(
        make_job("h"), state=JobState.RUNNING, assignment=Assignment(slot, host_cpus, 8.0, None, ("g",))
    )
    g = replace(
        make_job("g"), state=JobState.RUNNING, assignment=Assignment(slot, guest_cpus, 8.0, None, ("h",))
    )
    return h, g


def test_a_stopped_sharing_pair_resumes_together_as_it_ran() -> None:
    # The round stopped the pair, and a later stage gave the host its GPU back alone (as a
    # waiting job starts): both resume as they ran, the guest too.
    h, g = _pair()
    alone = Draft({"h": Assignment((("a1", 0),), 4, 16.0)}, {"h": Outcome.PLACED, "g": Outcome.NO_CAPACITY})
    out = _keep([h, g], alone)
    assert out.assignments == {"h": h.assignment, "g": g.assignment}
    assert out.outcomes["h"] is out.outcomes["g"] is Outcome.KEPT
    # Both stopped, their GPU given to an arrival ranked below both: the arrival waits.
    w = make_job("w")
    taken = Draft(
        {"w": Assignment((("a1", 0),), 2, 8.0)},
        {"h": Outcome.NO_CAPACITY, "g": Outcome.NO_CAPACITY, "w": Outcome.PLACED},
    )
    out = _keep([h, g, w], taken)
    assert out.assignments == {"h": h.assignment, "g": g.assignment}
    assert out.outcomes["w"] is Outcome.NO_CAPACITY
    # Ranked above one of them, the arrival keeps the GPU.
    assert _keep([h, w, g], taken) is taken


def test_a_sharing_pair_one_of_which_the_round_moved_does_not_resume() -> None:
    h, g = _pair()
    moved = Draft({"h": Assignment((("a1", 1),), 2, 8.0)}, {"h": Outcome.PLACED, "g": Outcome.NO_CAPACITY})
    assert _keep([h, g], moved) is moved
