"""SJF-BSBF and SJF-FFS as pipeline stages: who shares, where, with which micro-batch."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner import plan_round
from planner.config import build_scheduler, preset
from planner.core.errors import ConfigError
from planner.core.execplan import plan_from_mapping, resolve
from planner.core.model import Assignment, JobState, Outcome
from planner.policies.common import remaining_estimate_s
from planner.sharing import best_setting
from planner.validate import plan_violations
from profiles.iteration import accumulation_of
from tests.builders import make_job, make_nodes, make_snapshot, profiles, running

STORE = profiles()


def sharing(name="sjf-bsbf", interference=None):
    config = preset(name)
    if interference is not None:
        config = replace(config, options={**config.options, "packing": {"interference": interference}})
    return build_scheduler(config, STORE)


def busy_node(remaining, model="resnet18", batch=128, node="n1"):
    """Running 1-GPU jobs filling a 4-GPU node, with the given remaining times."""
    return [
        running(make_job(f"h{k}", 1, model=model, batch_size=batch, duration_s=r, remaining_s=r), [(node, k)])
        for k, r in enumerate(remaining)
    ]


def test_presets_compose_sjf_non_preemptive_with_sharing():
    s = sharing()
    assert s.name == "sjf-bsbf" and not s.preemptive and s.max_jobs_per_gpu == 2 and s.migration is None
    assert sharing("sjf-ffs").max_jobs_per_gpu == 2


def test_a_short_job_shares_with_the_host_that_gives_the_best_pair_jct():
    # ξ = 1.5 everywhere. New job N = 600 s. Host R = 1200 s: concurrent avg 1200 s
    # (new ends at 900, host at 1500); R = 3600 s: avg 2400 s. The first is chosen.
    nodes = make_nodes(1)
    jobs = [*busy_node([3600, 36000, 1200, 7200]), make_job("new", 1, submit=5, model="resnet18",
            batch_size=128, duration_s=600)]  # fmt: skip
    plan = plan_round(make_snapshot(nodes, jobs), sharing(interference=1.5))
    new = plan.assignments["new"]
    assert new.shares_with == ("h2",) and new.gpus == (("n1", 2),)
    assert plan.assignments["h2"].shares_with == ("new",)
    assert plan.reasons["new"] is Outcome.PLACED and not plan.preempted and not plan.migrated
    assert plan_violations(make_snapshot(nodes, jobs), plan, 2) == []


def test_bsbf_lets_a_job_wait_when_sharing_would_hurt_but_ffs_shares_anyway():
    # ξ = 3: the new 2-hour job would triple the 10-minute hosts' time; waiting is better.
    nodes = make_nodes(1)
    jobs = [*busy_node([600, 600, 600, 600]), make_job("new", 1, submit=5, model="resnet18",
            batch_size=128, duration_s=7200)]  # fmt: skip
    snap = make_snapshot(nodes, jobs)
    assert "new" not in plan_round(snap, sharing(interference=3.0)).assignments
    ffs = plan_round(snap, sharing("sjf-ffs", interference=3.0))
    assert ffs.assignments["new"].shares_with == ("h0",)  # first fit: the first GPU holding one job


def test_free_gpus_come_first_and_are_not_shared():
    nodes = make_nodes(2)
    jobs = [
        *busy_node([3600] * 4),
        make_job("new", 1, submit=5, model="resnet18", batch_size=128, duration_s=60),
    ]
    plan = plan_round(make_snapshot(nodes, jobs), sharing(interference=1.0))
    assert plan.assignments["new"].gpus[0][0] == "n2" and not plan.assignments["new"].shares_with


def test_a_job_that_does_not_fit_beside_the_host_at_full_batch_runs_with_accumulation():
    # Gavel measured resnet50(128) + lm(20) as (0, 0) on V100; resnet50(64) fits.
    nodes = make_nodes(1, gpus=1)
    host = running(
        make_job("lm", 1, model="lm", batch_size=20, duration_s=36000, remaining_s=36000), [("n1", 0)]
    )
    new = make_job("r50", 1, submit=5, model="resnet50", batch_size=128, duration_s=3600)
    plan = plan_round(make_snapshot(nodes, [host, new]), sharing())
    a = plan.assignments["r50"]
    micro, steps = accumulation_of(a.plan)
    assert micro * steps == 128 and micro <= 64 and a.shares_with == ("lm",)
    assert plan.assignments["lm"].plan is None  # the running job's batch is never changed
    # The plan is one mosaic-run renders: valid, and the global batch is unchanged.
    resolved = resolve(plan_from_mapping(a.plan), workers=1, global_batch=128)
    assert (resolved.micro_batch, resolved.grad_accum) == (micro, steps)


def test_a_job_that_fits_a_node_never_shares_across_nodes():
    # n1 holds a and c, n2 holds b and d (one 1-GPU job per GPU): the 2-GPU job shares
    # both GPUs of n1 or both of n2, never one GPU of each.
    nodes = make_nodes(2, gpus=2)
    slots = {"a": ("n1", 0), "b": ("n2", 0), "c": ("n1", 1), "d": ("n2", 1)}
    jobs = [
        running(make_job(k, 1, model="resnet18", batch_size=128, duration_s=9e4, remaining_s=9e4), [slot])
        for k, slot in slots.items()
    ]
    jobs.append(make_job("new", 2, submit=5, model="resnet18", batch_size=128, duration_s=60))
    plan = plan_round(make_snapshot(nodes, jobs), sharing(interference=1.0))
    new = plan.assignments["new"]
    assert len({n for n, _ in new.gpus}) == 1 and len(new.shares_with) == 2


def test_a_wide_job_may_share_several_hosts():
    nodes = make_nodes(2, gpus=2)
    hosts = [
        running(
            make_job(f"h{k}", 1, model="resnet18", batch_size=128, duration_s=9e4, remaining_s=9e4), [slot]
        )
        for k, slot in enumerate([("n1", 0), ("n1", 1), ("n2", 0), ("n2", 1)])
    ]
    wide = make_job("wide", 4, submit=5, model="resnet18", batch_size=128, duration_s=60)
    plan = plan_round(make_snapshot(nodes, [*hosts, wide]), sharing(interference=1.0))
    assert plan.assignments["wide"].shares_with == ("h0", "h1", "h2", "h3")
    assert all(plan.assignments[h.id].shares_with == ("wide",) for h in hosts)


def test_guaranteed_and_deadline_jobs_never_share():
    nodes = make_nodes(1, gpus=1)
    host = running(
        make_job("h", 1, model="resnet18", batch_size=128, duration_s=9e4, remaining_s=9e4), [("n1", 0)]
    )
    for protected in (dict(guaranteed=True), dict(deadline_s=1e5)):
        new = make_job("new", 1, submit=5, model="resnet18", batch_size=128, duration_s=60, **protected)
        assert (
            "new" not in plan_round(make_snapshot(nodes, [host, new]), sharing(interference=1.0)).assignments
        )
        shielded = replace(host, **protected)
        new = make_job("new", 1, submit=5, model="resnet18", batch_size=128, duration_s=60)
        assert (
            "new"
            not in plan_round(make_snapshot(nodes, [shielded, new]), sharing(interference=1.0)).assignments
        )


def test_a_sharing_pair_stays_together_in_the_next_round():
    nodes = make_nodes(1, gpus=2)
    jobs = [*busy_node([36000, 36000]), make_job("new", 1, submit=5, model="resnet18", batch_size=128,
            duration_s=600)]  # fmt: skip
    first = plan_round(make_snapshot(nodes, jobs), sharing(interference=1.2))
    assert first.assignments["new"].shares_with
    later = [replace(j, state=JobState.RUNNING, assignment=first.assignments[j.id]) for j in jobs]
    second = plan_round(make_snapshot(nodes, later, time_s=60), sharing(interference=1.2))
    assert not second.preempted and not second.migrated and not second.started
    assert {k: (a.gpus, a.shares_with, a.plan) for k, a in second.assignments.items()} == {
        k: (a.gpus, a.shares_with, a.plan) for k, a in first.assignments.items()
    }


def test_interference_option_is_validated():
    config = replace(preset("sjf-bsbf"), options={"packing": {"interference": -1}})
    with pytest.raises(ConfigError, match="interference"):
        build_scheduler(config, STORE)
    config = replace(preset("sjf-bsbf"), options={"packing": {"bogus": 1}})
    with pytest.raises(ConfigError, match="valid keys: interference"):
        build_scheduler(config, STORE)


# -- properties ----------------------------------------------------------------------------

MODELS = [("resnet18", 128), ("resnet50", 64), ("lm", 20), ("recommendation", 2048), ("transformer", 64)]


@st.composite
def busy_snapshots(draw):
    nodes = make_nodes(draw(st.integers(1, 3)), gpus=4)
    free = [(n.name, k) for n in nodes for k in range(4)]
    jobs = []
    for k in range(draw(st.integers(0, 10))):
        g = draw(st.sampled_from([1, 1, 2, 4]))
        node = draw(st.sampled_from(nodes)).name
        slots = [s for s in free if s[0] == node][:g]
        model, batch = draw(st.sampled_from(MODELS))
        left = draw(st.floats(60, 1e5))
        job = make_job(f"r{k}", g, model=model, batch_size=batch, duration_s=left * 2, remaining_s=left)
        if len(slots) == g:
            for s in slots:
                free.remove(s)
            job = running(job, slots)
        jobs.append(job)
    for k in range(draw(st.integers(1, 10))):
        model, batch = draw(st.sampled_from(MODELS))
        jobs.append(make_job(f"p{k}", draw(st.sampled_from([1, 1, 2, 4, 8])), submit=float(k), model=model,
                             batch_size=batch, duration_s=draw(st.floats(60, 1e5))))  # fmt: skip
    return make_snapshot(nodes, jobs, time_s=100.0)


@settings(max_examples=60)
@given(busy_snapshots(), st.sampled_from(["sjf-bsbf", "sjf-ffs"]), st.sampled_from([None, 1.0, 1.6, 2.5]))
def test_sharing_plans_are_valid_and_never_preempt_or_move(snapshot, name, xi):
    scheduler = sharing(name, xi)
    plan = plan_round(snapshot, scheduler)
    assert plan_violations(snapshot, plan, 2) == []
    assert not plan.preempted and not plan.migrated
    jobs = {j.id: j for j in snapshot.jobs}
    for job_id, a in plan.assignments.items():
        for partner in a.shares_with:
            assert job_id in plan.assignments[partner].shares_with
            assert set(a.gpus) & set(plan.assignments[partner].gpus)
        ga = accumulation_of(a.plan)
        if ga is not None:
            assert ga[0] * ga[1] == jobs[job_id].batch_size
        if jobs[job_id].is_running:
            assert a.gpus == jobs[job_id].assignment.gpus and a.plan == jobs[job_id].assignment.plan


@settings(max_examples=60)
@given(busy_snapshots(), st.sampled_from([None, 1.3, 2.5]))
def test_bsbf_never_starts_a_pair_the_rule_says_hurts(snapshot, xi):
    scheduler = sharing("sjf-bsbf", xi)
    stage = scheduler.packing
    plan = plan_round(snapshot, scheduler)
    jobs = {j.id: j for j in snapshot.jobs}
    # The guests: jobs the sharing stage added (placement alone did not place them).
    ordered = [j for j in scheduler.ordering.order(snapshot) if j.is_running]
    ordered += [j for j in scheduler.ordering.order(snapshot) if not j.is_running]
    placed = scheduler.placement.place(snapshot, ordered).assignments
    for job_id in set(plan.assignments) - set(placed):
        a = plan.assignments[job_id]
        job = jobs[job_id]
        for host_id in a.shares_with:
            host, ha = jobs[host_id], plan.assignments[host_id]
            gpu_type = snapshot.node(ha.gpus[0][0]).gpu_type
            nodes = 1 if job.num_gpus <= 4 else -(-job.num_gpus // 4)  # as the stage estimates
            options = stage.model.options(host, ha.plan, job, gpu_type, nodes).fitting
            ga = accumulation_of(a.plan)
            micro = ga[0] if ga else (job.batch_size if options and options[0].micro_batch else None)
            chosen = [o for o in options if o.micro_batch == micro]
            remaining = remaining_estimate_s(host) * stage.model.solo_slowdown(host, ha.plan, gpu_type, 1)
            assert best_setting(remaining, remaining_estimate_s(job), chosen).concurrent


@pytest.mark.slow  # a long property/simulation check: CI, not --fast
@settings(max_examples=40)
@given(
    busy_snapshots(), st.sampled_from(["sjf-bsbf", "sjf-ffs"]), st.sampled_from([None, 1.0, 2.0]), st.data()
)
def test_over_rounds_with_finishing_jobs_nothing_running_is_ever_stopped_or_moved(snapshot, name, xi, data):
    # Plan, start what the plan starts, let some running jobs finish (a host may leave
    # its guest behind), add arrivals, plan again: the sharing groups must survive.
    scheduler = sharing(name, xi)
    for step in range(5):
        plan = plan_round(snapshot, scheduler)
        assert plan_violations(snapshot, plan, 2) == []
        assert not plan.preempted and not plan.migrated
        for job in snapshot.jobs:
            if job.is_running:
                assert plan.assignments[job.id].gpus == job.assignment.gpus
        jobs = []
        for job in snapshot.jobs:
            a = plan.assignments.get(job.id)
            if a is None:
                jobs.append(job)
            elif not (job.is_running and data.draw(st.booleans())):  # else: it finished
                jobs.append(replace(job, state=JobState.RUNNING, assignment=a))
        for k in range(data.draw(st.integers(0, 3))):
            model, batch = data.draw(st.sampled_from(MODELS))
            g = data.draw(st.sampled_from([1, 2, 4]))
            duration = data.draw(st.floats(60, 1e5))
            jobs.append(
                make_job(f"s{step}-{k}", g, 100.0 + step, model=model, batch_size=batch, duration_s=duration)
            )
        snapshot = make_snapshot(snapshot.nodes, jobs, time_s=100.0 + step + 1)


def test_a_guest_whose_host_finished_keeps_its_gpus_and_nobody_takes_them():
    # "g" (2 GPUs) shared n1/0 with host "a" and n1/1 with host "b"; "a" has finished.
    # The next round must keep g on both GPUs (n1/0 now its own), keep b with it, and
    # start the pending job elsewhere, not on n1/0.
    nodes = make_nodes(1, gpus=4)
    slot_b = [("n1", 1), ("n1", 2)]
    b = make_job("b", 2, model="resnet18", batch_size=128, duration_s=9e4, remaining_s=9e4)
    g = make_job("g", 2, model="resnet18", batch_size=128, duration_s=600, remaining_s=300)
    b = replace(running(b, slot_b), assignment=Assignment(tuple(slot_b), 0, 0.0, None, ("g",)))
    g_gpus = (("n1", 0), ("n1", 1))
    g = replace(running(g, list(g_gpus)), assignment=Assignment(g_gpus, 0, 0.0, None, ("b",)))
    new = make_job("new", 1, submit=5, model="resnet18", batch_size=128, duration_s=60)
    plan = plan_round(make_snapshot(nodes, [b, g, new]), sharing())
    assert not plan.preempted and not plan.migrated
    assert plan.assignments["g"].gpus == g_gpus and plan.assignments["g"].shares_with == ("b",)
    assert plan.assignments["b"].shares_with == ("g",)
    assert plan.assignments["new"].gpus == (("n1", 3),)


def _pair_on_n1_0_with_n1_1_idle(nodes):
    """Host "h" and guest "g" share n1/0 of a 2-GPU node; n1/1 is idle."""
    h = make_job("h", 1, model="resnet18", batch_size=128)
    g = make_job("g", 1, submit=5, model="resnet18", batch_size=128)
    slot = (("n1", 0),)
    h = replace(running(h, list(slot)), assignment=Assignment(slot, 2, 8.0, None, ("g",)))
    g = replace(running(g, list(slot)), assignment=Assignment(slot, 2, 8.0, None, ("h",)))
    return [h, g]


def shared_consolidated(**options):
    from planner.policies.sharing import SharedConsolidatedPlacement
    from planner.registry import StageContext

    return SharedConsolidatedPlacement.from_options(options, StageContext(STORE))


def test_a_guest_moves_to_an_idle_gpu_of_its_own_only_when_told_to_dissolve():
    nodes = make_nodes(1, gpus=2)
    jobs = _pair_on_n1_0_with_n1_1_idle(nodes)
    snapshot = make_snapshot(nodes, jobs)
    kept = shared_consolidated().place(snapshot, jobs)
    assert kept.assignments["g"].shares_with == ("h",) and kept.assignments["h"].shares_with == ("g",)
    apart = shared_consolidated(dissolve=True).place(snapshot, jobs)
    assert apart.assignments["g"].gpus == (("n1", 1),) and apart.assignments["g"].shares_with == ()
    assert apart.outcomes["g"] is Outcome.MOVED
    assert apart.assignments["h"].gpus == (("n1", 0),) and apart.assignments["h"].shares_with == ()
    # No idle GPU (a third job holds n1/1): the pair stays together.
    other = running(make_job("o", 1, model="resnet50", batch_size=64), [("n1", 1)])
    busy = [*jobs, other]
    full = shared_consolidated(dissolve=True).place(make_snapshot(nodes, busy), busy)
    assert full.assignments["g"].shares_with == ("h",) and full.assignments["h"].shares_with == ("g",)


def test_a_waiting_job_takes_the_idle_gpu_before_a_guest_moves_there():
    nodes = make_nodes(1, gpus=2)
    jobs = [*_pair_on_n1_0_with_n1_1_idle(nodes), make_job("w", 1, submit=9, model="resnet50", batch_size=64)]
    draft = shared_consolidated(dissolve=True).place(make_snapshot(nodes, jobs), jobs)
    assert draft.assignments["w"].gpus == (("n1", 1),)
    assert draft.assignments["g"].shares_with == ("h",)


def test_dissolve_must_be_a_flag():
    with pytest.raises(ConfigError, match="dissolve"):
        shared_consolidated(dissolve="yes")
    with pytest.raises(ConfigError, match="bogus"):
        shared_consolidated(bogus=1)
