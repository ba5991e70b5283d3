"""Invariants of the Rubick presets (rubick, rubick-e/-r/-n, sia, antman) on random snapshots.

The snapshots use the models the plan pricer knows (Rubick's artifact), global batches,
submitted and candidate plans, elastic demands, tenants with quotas and guaranteed jobs, on
a homogeneous A800 cluster (the guarantee is stated for the resources the job asked for on
this cluster's nodes).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from planner import plan_round
from planner.config import PRESETS, Tenant, build_scheduler
from planner.core.execplan import plan_from_mapping, plan_to_mapping, replan
from planner.core.model import Assignment, Job, JobState, Node, Outcome, Snapshot
from planner.policies.rubick.curves import even_nodes, job_curve
from planner.policies.rubick.policy import may_reconfigure, privileged, rubick_usage, shared_book
from planner.validate import plan_violations
from tests.planner.test_pipeline_properties import _next_round

RUBICK = ("rubick", "rubick-e", "rubick-r", "rubick-n", "sia", "antman")
GUARANTEEING = ("rubick", "rubick-e", "rubick-r", "rubick-n")
TENANTS = (Tenant("a", 8), Tenant("b", 4))
WIDE_TENANTS = (Tenant("a", 24), Tenant("b", 16))
BATCH = {"bert": 32, "gpt2": 16, "t5": 16, "roberta": 64, "vit": 64, "llama7": 8, "mystery": 32}
PLANS = [
    None,
    {"zero_stage": 2},
    {"zero_stage": 2, "offload_optimizer": True},
    {"activation_checkpointing": True},
]
RESTART_S = 30.0  # the rubick stage's default restart cost
# An elastic BERT job (global batch 32) shrunk to n0's GPU 0 by earlier rounds.
SHRUNK = Assignment(
    (("n0", 0),), 12, 200.0, {"dp": 1, "micro_batch": 32, "grad_accum": 1, "global_batch": 32}
)


def schedulers(name: str):
    return build_scheduler(replace(PRESETS[name], tenants=TENANTS))


@st.composite
def snapshots(draw: st.DrawFn, resized: bool = True, wide: bool = False) -> Snapshot:
    count = draw(st.integers(3, 6) if wide else st.integers(1, 3))
    nodes = tuple(Node(f"n{i}", 8, "a800", 96, 1600.0) for i in range(count))
    free = {n.name: list(range(8)) for n in nodes}
    jobs = []
    for j in range(draw(st.integers(1, 3)) if wide else 0):
        # Jobs spanning nodes (2 x 8 GPUs asked, 8-32 accepted), some running on whole nodes,
        # some of a tenant: what a privileged admission over several nodes works with.
        model = draw(st.sampled_from(["gpt2", "t5", "llama7"]))
        guaranteed = draw(st.booleans())
        job = Job(
            id=f"w{j}",
            num_gpus=16,
            model=model,
            submit_time_s=float(draw(st.integers(0, 500))),
            batch_size=BATCH[model],
            plan={"tp": 8},
            tenant=draw(st.sampled_from(["a", "b"])) if guaranteed else None,
            guaranteed=guaranteed,
            min_gpus=8,
            max_gpus=32,
            attained_gpu_s=float(draw(st.sampled_from([0, 5000, 200000]))),
        )
        spans = draw(st.sampled_from([0, 2, 4]))  # 4: grown beyond its ask, above its minimum
        whole = [n.name for n in nodes if len(free[n.name]) == 8][:spans]
        if spans and len(whole) == spans:
            slots = tuple((n, k) for n in whole for k in range(8))
            for n in whole:
                free[n] = []
            plan = plan_to_mapping(replan(plan_from_mapping(job.plan), 8 * spans, job.batch_size))
            job = replace(
                job, state=JobState.RUNNING, assignment=Assignment(slots, 96 * spans, 1600.0 * spans, plan)
            )
        jobs.append(job)
    for j in range(draw(st.integers(0, 10))):
        model = draw(st.sampled_from(sorted(BATCH)))
        g = draw(st.sampled_from([1, 2, 4, 8]))
        elastic = draw(st.booleans())
        # With jobs spanning nodes only those are guaranteed: single-node privileged jobs can pin
        # the nodes a spanning one needs, and moving them for it is not attempted (open).
        guaranteed = draw(st.booleans()) and not wide
        job = Job(
            id=str(j),
            num_gpus=g,
            model=model,
            submit_time_s=float(draw(st.integers(0, 500))),
            batch_size=BATCH[model],
            plan=draw(st.sampled_from(PLANS)),
            candidate_plans=tuple(draw(st.lists(st.sampled_from(PLANS[1:]), max_size=2, unique_by=str))),
            tenant=draw(st.sampled_from([None, "a", "b", "c"])) if guaranteed else None,
            guaranteed=guaranteed,
            min_gpus=draw(st.integers(1, g)) if elastic else None,
            max_gpus=draw(st.sampled_from([g, 2 * g, 8])) if elastic and g <= 8 else None,
            attained_gpu_s=float(draw(st.sampled_from([0, 100, 5000, 200000]))),
            restarts=draw(st.integers(0, 3)),
        )
        if job.max_gpus is not None and job.max_gpus < g:
            job = replace(job, max_gpus=g)
        if draw(st.booleans()):
            # An elastic job may run on another count than it asked for, its plan made for it
            # (what a reconfiguration stage leaves; without one, as under antman, it does not
            # happen: the placement re-places a moved job at num_gpus with the plan it had).
            held = g
            if job.elastic and resized:
                low, high = job.gpu_range
                held = draw(st.sampled_from([c for c in (1, 2, 4, 8) if low <= c <= high] or [g]))
            plan = job.plan
            if held != g:
                plan = plan_to_mapping(replan(plan_from_mapping(job.plan), held, job.batch_size))
            node = next((n for n in nodes if len(free[n.name]) >= held), None)
            if node is not None:
                slots = tuple((node.name, k) for k in free[node.name][:held])
                free[node.name] = free[node.name][held:]
                job = replace(
                    job, state=JobState.RUNNING, assignment=Assignment(slots, 12 * held, 200.0 * held, plan)
                )
        jobs.append(job)
    return Snapshot(time_s=1000.0, nodes=nodes, jobs=tuple(jobs))


def _throughput(snapshot: Snapshot, job: Job, a: Assignment) -> float | None:
    curve = job_curve(shared_book(), job, snapshot, True)
    assert curve is not None
    plan = replan(plan_from_mapping(a.plan), a.num_gpus, curve.batch)
    nodes = even_nodes(a.num_gpus, len(a.nodes))
    t = shared_book().pricer.iteration_time_s(job.model, plan, nodes, a.cpus / a.num_gpus)
    return None if t is None else curve.batch / t


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(RUBICK).flatmap(lambda n: st.tuples(snapshots(n != "antman"), st.just(n))))
def test_plans_are_valid_within_bounds_and_keep_the_global_batch(case):
    snapshot, name = case
    sched = schedulers(name)
    plan = plan_round(snapshot, sched)
    assert plan_violations(snapshot, plan, sched.max_jobs_per_gpu) == []
    jobs = {j.id: j for j in snapshot.jobs}
    for job_id, a in plan.assignments.items():
        job = jobs[job_id]
        assert job.accepts_gpus(a.num_gpus), (job_id, a.num_gpus, job.gpu_range)
        if not job.elastic:
            assert a.num_gpus == job.num_gpus
        if a.plan is not None and "dp" in a.plan:
            p = plan_from_mapping(a.plan)
            assert p.world_size == a.num_gpus
            assert p.global_batch == job.batch_size


@settings(max_examples=40, deadline=None)
@given(
    st.one_of(
        st.tuples(snapshots(False), st.sampled_from(GUARANTEEING)),
        # Jobs running resized (below their guarantee, as earlier rounds may leave them): the
        # variants that change resources restore the guarantee (rubick-e and rubick-n do not
        # resize, so only the first case applies to them).
        st.tuples(snapshots(True), st.sampled_from(("rubick", "rubick-r"))),
    )
)
def test_a_guaranteed_job_within_quota_never_runs_below_its_submitted_plan(case):
    snapshot, name = case
    plan = plan_round(snapshot, schedulers(name))
    book = shared_book()
    curves = {j.id: job_curve(book, j, snapshot, name in ("rubick", "rubick-e")) for j in snapshot.jobs}
    quotas = {t.name: t.gpu_quota for t in TENANTS}
    usage = rubick_usage(curves)
    chosen = privileged(snapshot.jobs, quotas, usage)
    # Rubick's guarantee presumes quotas the cluster can honour (§5.1): on one 8-GPU node the
    # tenants' 8 + 4 GPUs oversubscribe it, and guaranteed jobs within their quotas may ask
    # for more GPUs than there are. Then not all of them can have their submitted plan.
    assume(sum(usage(j) for j in snapshot.jobs if j.id in chosen) <= sum(n.gpus for n in snapshot.nodes))
    for job in snapshot.jobs:
        a = plan.assignments.get(job.id)
        curve = curves[job.id]
        if job.id not in chosen or a is None or curve is None or curve.target is None:
            continue
        got = _throughput(snapshot, job, a)
        assert got is not None and got >= curve.target * (1 - 1e-6), (job.id, got, curve.target, a)


@settings(max_examples=40, deadline=None)
@given(snapshots(False), st.sampled_from((*GUARANTEEING, "antman")))
def test_quotas_hold(snapshot, name):
    book = shared_book()
    # Quota usage is minRes priced as the variant's ordering prices it (rubick-r and rubick-n
    # search no plans: their minRes is that of the job's own plan).
    plans = PRESETS[name].options.get("policy", {}).get("plans", True)
    curves = {j.id: job_curve(book, j, snapshot, plans) for j in snapshot.jobs}
    quotas = {t.name: t.gpu_quota for t in TENANTS}
    usage = rubick_usage(curves) if name != "antman" else (lambda j: j.num_gpus)
    chosen = privileged(snapshot.jobs, quotas, usage)
    for tenant, quota in quotas.items():
        assert sum(usage(j) for j in snapshot.jobs if j.id in chosen and j.tenant == tenant) <= quota
    assert all(j.guaranteed and j.tenant in quotas for j in snapshot.jobs if j.id in chosen)
    # Privileged jobs rank above every other job, so the placement preempts best-effort ones first.
    order = list(plan_round(snapshot, schedulers(name)).order)
    ranks = [order.index(j) for j in chosen]
    others = [order.index(j.id) for j in snapshot.jobs if j.id not in chosen]
    assert max(ranks, default=-1) < min(others, default=len(order))


@settings(max_examples=40, deadline=None)
@given(snapshots(), st.sampled_from(("rubick", "rubick-e", "rubick-r", "sia")))
def test_no_running_job_is_reconfigured_for_a_gain_its_restart_eats(snapshot, name):
    plan = plan_round(snapshot, schedulers(name))
    for job in snapshot.jobs:
        new = plan.assignments.get(job.id)
        old = job.assignment
        if not job.is_running or new is None or old is None or not set(old.gpus) <= set(new.gpus):
            continue  # stopped, moved or shrunk (the placement's or a guarantee's doing)
        grown = new.num_gpus > old.num_gpus
        if job.guaranteed and old.num_gpus < job.num_gpus:
            # Back toward what a guaranteed job asked for: a guarantee holds throughout the
            # job's execution (§5.1), the restart rule (§5.3) is for best-effort gains. The
            # restart that pays for it also pays for growing further, as for a moved job
            # (found by --hypothesis-seed=12: a job back from 1 GPU to the 2 it asked for
            # grew on to 4 in the same relaunch).
            continue
        if grown or new.plan != old.plan or new.cpus > old.cpus:
            assert may_reconfigure(job, RESTART_S), (job.id, old, new)


@settings(max_examples=60, deadline=None)
@given(snapshots(), st.sampled_from(("rubick", "rubick-e", "rubick-r", "rubick-n", "sia")))
def test_no_running_job_is_stopped_for_a_best_effort_one_before_its_restart_pays(snapshot, name):
    # A preemption is a reconfiguration to nothing (§5.2), so §5.3's rule holds for it: a
    # running job that fails the rule keeps its GPUs unless a privileged job needs them.
    plans = PRESETS[name].options.get("policy", {}).get("plans", True)
    guarantees = PRESETS[name].options.get("policy", {}).get("guarantees", True)
    curves = {j.id: job_curve(shared_book(), j, snapshot, plans) for j in snapshot.jobs}
    quotas = {t.name: t.gpu_quota for t in TENANTS}
    if guarantees and privileged(snapshot.jobs, quotas, rubick_usage(curves)):
        return
    plan = plan_round(snapshot, schedulers(name))
    for job in snapshot.jobs:
        if not job.is_running or not job.preemptible or may_reconfigure(job, RESTART_S):
            continue
        assert job.assignment is not None
        new = plan.assignments.get(job.id)
        assert job.id not in plan.preempted and new is not None, job.id
        assert set(job.assignment.gpus) <= set(new.gpus), (job.id, job.assignment, new)


def test_a_best_effort_job_is_stopped_for_a_higher_slope_one_once_its_restart_pays():
    # Job 0 (1 GPU, rigid) holds the only GPU; job 1 (1 GPU, waiting) ranks above it (the
    # same slope, an earlier arrival). At 600 s of training a 30 s restart is 5 % of it: job 0
    # keeps its GPU; at 2,000 s (1.5 %) it is preempted for job 1.
    nodes = (Node("n0", 1, "a800", 12, 200.0),)
    gpu = Assignment((("n0", 0),), 12, 200.0, None)

    def snapshot(trained_s: float) -> Snapshot:
        jobs = (
            Job("0", 1, "bert", 1.0, state=JobState.RUNNING, attained_gpu_s=trained_s, batch_size=32,
                assignment=gpu),
            Job("1", 1, "bert", 0.0, batch_size=32),
        )  # fmt: skip
        return Snapshot(trained_s + 1.0, nodes, jobs)

    order = [j.id for j in schedulers("rubick").ordering.order(snapshot(2000.0))]
    assert order == ["1", "0"]
    assert plan_round(snapshot(600.0), schedulers("rubick")).preempted == ()
    assert plan_round(snapshot(2000.0), schedulers("rubick")).preempted == ("0",)
    # The scheduler's restart cost is the rule's δ: at 100 s per restart, 2,000 s is too soon.
    costly = build_scheduler(replace(PRESETS["rubick"], tenants=TENANTS, restart_cost_s=100.0))
    assert plan_round(snapshot(2000.0), costly).preempted == ()


@settings(max_examples=30, deadline=None)
@pytest.mark.slow  # a long property/simulation check: CI, not --fast
@given(st.sampled_from(RUBICK).flatmap(lambda n: st.tuples(snapshots(), st.just(n))))
def test_deterministic_and_replanning_an_applied_plan_changes_nothing(case):
    snapshot, name = case
    first = plan_round(snapshot, schedulers(name))
    assert plan_round(snapshot, schedulers(name)).assignments == first.assignments
    second = plan_round(_next_round(snapshot, first), schedulers(name))
    assert second.assignments == first.assignments
    assert second.preempted == second.migrated == second.started == second.reshaped == ()


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(RUBICK).flatmap(lambda n: st.tuples(snapshots(), st.just(n))))
def test_held_back_jobs_wait_or_run_at_a_count_a_plan_fits(case):
    # The HoldBack contract (planner/stages.py): only waiting jobs; an infeasible one never
    # runs; one that runs was admitted by the stage, on a count other than the one no plan fits.
    snapshot, name = case
    scheduler = schedulers(name)
    view = scheduler.view(snapshot)
    held = scheduler.hold_back(view, scheduler.ordering.order(view))
    plan = plan_round(snapshot, scheduler)
    jobs = {j.id: j for j in view.jobs}
    for job_id, outcome in held.items():
        job = jobs[job_id]
        assert not job.is_running
        assert outcome in (Outcome.INFEASIBLE, Outcome.NO_CAPACITY)
        if job_id in plan.assignments:
            assert outcome is Outcome.NO_CAPACITY and plan.reasons[job_id] == Outcome.PLACED
            assert job.elastic and plan.assignments[job_id].num_gpus != job.num_gpus
        elif outcome is Outcome.INFEASIBLE:
            assert plan.reasons[job_id] == Outcome.INFEASIBLE


def test_an_applied_round_over_a_tenants_quota_is_stable():
    # Found by hypothesis outside the ``ci`` profile's derandomized examples. Tenant a (quota
    # 8) has job 0 running on 8 GPUs and job 2 (1 GPU) waiting, both guaranteed; best-effort
    # job 1 (8 GPUs) waits too. Round 1 keeps 0 (privileged) and starts 2 beyond the quota on
    # free GPUs. Round 2 used to count the earlier-submitted job 2 into the quota first, so
    # job 0 lost its privilege and was preempted for job 1: the plan oscillated. A running
    # job keeps the privilege it was planned with (``policy_state``).
    nodes = (Node("n0", 8, "a800", 96, 1600.0), Node("n1", 8, "a800", 96, 1600.0))
    running = Assignment(tuple(("n0", k) for k in range(8)), 96, 1600.0)
    jobs = (
        Job("0", 8, "bert", 1.0, state=JobState.RUNNING, batch_size=32, tenant="a", guaranteed=True,
            assignment=running),
        Job("1", 8, "bert", 0.0, batch_size=32),
        Job("2", 1, "bert", 0.0, batch_size=32, tenant="a", guaranteed=True),
    )  # fmt: skip
    snapshot = Snapshot(1000.0, nodes, jobs)
    first = plan_round(snapshot, schedulers("rubick"))
    second = plan_round(_next_round(snapshot, first), schedulers("rubick"))
    assert second.assignments == first.assignments and second.preempted == ()


def test_a_privileged_job_shrunk_below_its_guarantee_takes_back_gpus_from_best_effort_jobs():
    # Found by hypothesis: job 3 (guaranteed, within quota, elastic up to 8) runs on 1 GPU; the
    # placement gives the free GPUs to three best-effort jobs first. Rubick restores job 3's
    # target throughput (8 GPUs) and leaves the best-effort jobs waiting.
    nodes = (Node("n0", 8, "a800", 96, 1600.0),)
    jobs = (
        *(Job(str(k), 1, "bert", 0.0, batch_size=32) for k in range(3)),
        Job("3", 8, "bert", 0.0, state=JobState.RUNNING, batch_size=32, tenant="a", guaranteed=True,
            assignment=SHRUNK, min_gpus=1, max_gpus=8),
    )  # fmt: skip
    plan = plan_round(Snapshot(1000.0, nodes, jobs), schedulers("rubick"))
    assert plan.assignments["3"].num_gpus == 8
    assert set(plan.assignments) == {"3"}


def test_a_privileged_job_below_its_target_switches_plan_whatever_the_restart_costs():
    # Found by hypothesis outside the ``ci`` profile: job 5 (guaranteed, within quota, elastic
    # 3-8) runs on 4 GPUs with ZeRO-2 + optimizer offload, below its target (its submitted plan
    # on 8 GPUs); five 1-GPU best-effort jobs wait. Its best plan on the 4 GPUs (no offload)
    # meets the target, so the stage counted it as restored, but the restart rule (§5.3: it has
    # trained for nothing yet) kept the offload plan. The guarantee (§5.1) overrides the rule.
    nodes = (Node("n0", 8, "a800", 96, 1600.0),)
    offload = {"zero_stage": 2, "offload_optimizer": True}
    held = Assignment(
        tuple(("n0", k) for k in range(4)), 48, 800.0,
        {"dp": 4, **offload, "micro_batch": 8, "grad_accum": 1, "global_batch": 32},
    )  # fmt: skip
    jobs = (
        *(Job(str(k), 1, "bert", 0.0, batch_size=32) for k in range(5)),
        Job("5", 8, "bert", 0.0, state=JobState.RUNNING, batch_size=32, tenant="a", guaranteed=True,
            plan=offload, assignment=held, min_gpus=3, max_gpus=8),
    )  # fmt: skip
    snapshot = Snapshot(1000.0, nodes, jobs)
    plan = plan_round(snapshot, schedulers("rubick"))
    curve = job_curve(shared_book(), jobs[5], snapshot, True)
    got = _throughput(snapshot, jobs[5], plan.assignments["5"])
    assert curve is not None and curve.target is not None
    assert got is not None and got >= curve.target * (1 - 1e-6)


def test_a_privileged_job_that_cannot_regrow_where_it_runs_moves_to_a_node_where_it_can():
    # Found by hypothesis outside the ``ci`` profile: job 4 (guaranteed, within quota, elastic
    # up to its 8 GPUs) runs shrunk on n0's GPU 0; the placement puts four 1-GPU jobs on n0,
    # one of them guaranteed (job 2). Evicting every best-effort job on n0 still leaves job 2
    # there, so job 4 cannot get 8 GPUs on n0: it moves to n1, which is free.
    nodes = (Node("n0", 8, "a800", 96, 1600.0), Node("n1", 8, "a800", 96, 1600.0))
    jobs = (
        Job("0", 1, "bert", 0.0, batch_size=32),
        Job("1", 1, "bert", 0.0, batch_size=32),
        Job("2", 1, "bert", 0.0, batch_size=32, tenant="b", guaranteed=True, min_gpus=1, max_gpus=1),
        Job("3", 1, "bert", 0.0, batch_size=32),
        Job("4", 8, "bert", 0.0, state=JobState.RUNNING, batch_size=32, tenant="a", guaranteed=True,
            assignment=SHRUNK, min_gpus=1, max_gpus=8),
    )  # fmt: skip
    snapshot = Snapshot(1000.0, nodes, jobs)
    plan = plan_round(snapshot, schedulers("rubick"))
    assert plan.assignments["4"].gpus == tuple(("n1", k) for k in range(8))
    assert plan.migrated == ("4",)
    assert plan_round(_next_round(snapshot, plan), schedulers("rubick")).assignments == plan.assignments


def test_a_job_no_plan_fits_is_not_started_by_the_placement_either():
    # Found by hypothesis outside the ``ci`` profile (replanning an applied plan changes it).
    # Round 1: the placement drafts job 6 (2 GPUs) on the last two GPUs, Rubick evicts it to
    # restore job 5's guarantee and leaves the GPU it does not need free: job 7 (LLaMA-7B on
    # one GPU) has no plan that fits an A800's memory, so Rubick's admission does not start it.
    # Round 2 (before the stage held such jobs back from the placement): the placement drafted
    # job 7 on that free GPU and the stage kept it as drafted.
    nodes = (Node("n0", 8, "a800", 96, 1600.0),)
    jobs = (
        *(Job(str(k), 1, "bert", 0.0, batch_size=32) for k in range(5)),
        Job("5", 2, "bert", 0.0, state=JobState.RUNNING, batch_size=32, tenant="a", guaranteed=True,
            assignment=SHRUNK, min_gpus=1, max_gpus=2),
        Job("6", 2, "bert", 0.0, batch_size=32),
        Job("7", 1, "llama7", 0.0, batch_size=8),
    )  # fmt: skip
    snapshot = Snapshot(1000.0, nodes, jobs)
    first = plan_round(snapshot, schedulers("rubick"))
    second = plan_round(_next_round(snapshot, first), schedulers("rubick"))
    assert second.assignments == first.assignments
    assert "7" not in second.assignments and second.reasons["7"] == Outcome.INFEASIBLE


def test_a_job_evicted_for_a_guarantee_displaces_lower_ranked_jobs_as_the_placement_would():
    # Found by hypothesis outside the ``ci`` profile (--hypothesis-seed=54). The placement drafts
    # job 6 (2 GPUs) on n0's last two GPUs and the 4-GPU jobs 7 and 8 on n1; restoring job 5's
    # guarantee evicts job 6 from n0. Left waiting, job 6 (ranked above 7 and 8) displaced job 8
    # in the next round's placement: the applied plan was not a fixpoint. It now takes job 8's
    # GPUs in the same round, as the placement would have had it known of the guarantee.
    nodes = (Node("n0", 8, "a800", 96, 1600.0), Node("n1", 8, "a800", 96, 1600.0))
    jobs = (
        *(Job(str(k), 1, "bert", 0.0, batch_size=32) for k in range(5)),
        Job("5", 2, "bert", 0.0, state=JobState.RUNNING, batch_size=32, tenant="a", guaranteed=True,
            assignment=SHRUNK, min_gpus=1, max_gpus=2),
        Job("6", 2, "bert", 0.0, batch_size=32),
        Job("7", 4, "bert", 0.0, batch_size=32),
        Job("8", 4, "bert", 0.0, batch_size=32),
    )  # fmt: skip
    snapshot = Snapshot(1000.0, nodes, jobs)
    first = plan_round(snapshot, schedulers("rubick"))
    assert first.assignments["5"].num_gpus == 2
    assert first.assignments["6"].gpus == (("n1", 4), ("n1", 5)) and "8" not in first.assignments
    second = plan_round(_next_round(snapshot, first), schedulers("rubick"))
    assert second.assignments == first.assignments and second.preempted == ()


def test_a_privileged_job_no_plan_fits_displaces_nobody():
    # Job 1 is privileged (tenant a's quota) and asks for one GPU, on which no LLaMA-7B plan
    # fits an A800's memory; the cluster is full of job 0. Drafted by the placement, it would
    # displace job 0 for GPUs this stage could not use.
    nodes = (Node("n0", 1, "a800", 12, 200.0),)
    one = Assignment(
        (("n0", 0),), 12, 200.0, {"dp": 1, "micro_batch": 32, "grad_accum": 1, "global_batch": 32}
    )
    jobs = (
        Job("0", 1, "bert", 0.0, state=JobState.RUNNING, attained_gpu_s=500.0, batch_size=32, assignment=one),
        Job("1", 1, "llama7", 1.0, batch_size=8, tenant="a", guaranteed=True),
    )
    plan = plan_round(Snapshot(1000.0, nodes, jobs), schedulers("rubick"))
    assert plan.preempted == () and "0" in plan.assignments
    assert plan.reasons["1"] == Outcome.INFEASIBLE


def test_an_elastic_job_whose_count_no_plan_fits_is_admitted_at_one_that_fits():
    # No LLaMA-30B plan (global batch 8) fits A800s' memory below 8 GPUs. Asking for 4 of the
    # 1-8 it accepts, the job is held back from the placement and admitted on 8.
    nodes = (Node("n0", 8, "a800", 96, 1600.0),)
    job = Job("0", 4, "llama30", 0.0, batch_size=8, min_gpus=1, max_gpus=8)
    plan = plan_round(Snapshot(1000.0, nodes, (job,)), schedulers("rubick"))
    assert plan.reasons["0"] == Outcome.PLACED
    assert plan.assignments["0"].num_gpus == 8 and plan.assignments["0"].plan["dp"] == 8
    rigid = replace(job, min_gpus=None, max_gpus=None)
    plan = plan_round(Snapshot(1000.0, nodes, (rigid,)), schedulers("rubick"))
    assert plan.assignments == {} and plan.reasons["0"] == Outcome.INFEASIBLE


def test_a_moved_elastic_job_grows_without_waiting_for_the_restart_rule():
    # Job 0 (elastic 1-8) runs on all 8 GPUs; job 1 (1 GPU) outranks it. The placement moves
    # job 0 (it restarts anyway), so growing it into the 7 free GPUs costs no extra restart:
    # it gets 4 (the batch of 32 splits over 4, not 7), and the next round keeps it there.
    nodes = (Node("n0", 8, "a800", 96, 1600.0),)
    everything = Assignment(
        tuple(("n0", k) for k in range(8)),
        96,
        1600.0,
        {"dp": 8, "micro_batch": 4, "grad_accum": 1, "global_batch": 32},
    )
    # Job 1 is privileged (tenant a's quota): job 0, whose restart would not pay yet, is
    # stopped only for a guarantee.
    jobs = (
        Job("0", 1, "bert", 1.0, state=JobState.RUNNING, attained_gpu_s=5000.0, batch_size=32,
            assignment=everything, min_gpus=1, max_gpus=8),
        Job("1", 1, "bert", 0.0, batch_size=32, tenant="a", guaranteed=True),
    )  # fmt: skip
    assert not may_reconfigure(jobs[0], RESTART_S)
    snapshot = Snapshot(1000.0, nodes, jobs)
    first = plan_round(snapshot, schedulers("rubick"))
    assert first.assignments["0"].num_gpus == 4
    second = plan_round(_next_round(snapshot, first), schedulers("rubick"))
    assert second.assignments == first.assignments and second.preempted == ()


@settings(max_examples=40, deadline=None)
@pytest.mark.slow  # a long property/simulation check: CI, not --fast
@given(snapshots(wide=True), st.sampled_from(("rubick", "rubick-r")))
def test_privileged_admission_over_several_nodes_keeps_every_invariant(snapshot, name):
    # Jobs spanning nodes, tenants whose quotas fit the cluster: a privileged job that needs
    # several nodes takes them from best-effort jobs and from privileged ones above their own
    # minimum (Algorithm 1 case (2)); every plan stays valid, every privileged job meets its
    # target, no best-effort gain pays a restart it cannot afford, and the plan is a fixpoint.
    sched = build_scheduler(replace(PRESETS[name], tenants=WIDE_TENANTS))
    plan = plan_round(snapshot, sched)
    assert plan_violations(snapshot, plan, sched.max_jobs_per_gpu) == []
    jobs = {j.id: j for j in snapshot.jobs}
    for job_id, a in plan.assignments.items():
        assert jobs[job_id].accepts_gpus(a.num_gpus)
    book = shared_book()
    curves = {j.id: job_curve(book, j, snapshot, name == "rubick") for j in snapshot.jobs}
    chosen = privileged(snapshot.jobs, {t.name: t.gpu_quota for t in WIDE_TENANTS}, rubick_usage(curves))
    for job_id in chosen:
        a, curve = plan.assignments.get(job_id), curves[job_id]
        if a is None or curve is None or curve.target is None:
            continue
        got = _throughput(snapshot, jobs[job_id], a)
        assert got is not None and got >= curve.target * (1 - 1e-6), (job_id, got, curve.target, a)
    for job in snapshot.jobs:
        new, old = plan.assignments.get(job.id), job.assignment
        if job.id in chosen or not job.is_running or new is None or old is None:
            continue
        if set(old.gpus) <= set(new.gpus) and (new.num_gpus > old.num_gpus or new.plan != old.plan):
            assert may_reconfigure(job, RESTART_S), (job.id, old, new)
    sched = build_scheduler(replace(PRESETS[name], tenants=WIDE_TENANTS))
    assert plan_round(_next_round(snapshot, plan), sched).assignments == plan.assignments
