"""The simulator on small traces whose outcome can be computed by hand."""

import math

import pytest

from planner.core.errors import ConfigError, SimulationError
from planner.core.model import Assignment
from planner.pipeline import Scheduler
from planner.sim import SimConfig, simulate
from planner.sim.progress import SpeedModel
from planner.stages import Draft
from tests.builders import make_nodes, profiles, scheduler, trace_job

ONE_NODE = make_nodes(1, gpus=4, cpus=16, mem_gb=64.0)


def run(trace, preset="fifo", nodes=ONE_NODE, **config):
    return simulate(nodes, trace, scheduler(preset), SimConfig(**config), profiles=profiles())


def record(result, job_id):
    return next(r for r in result.records if r.job_id == job_id)


def test_a_lone_job_finishes_after_its_duration_inside_a_round():
    result = run([trace_job("a", submit=0, gpus=2, duration=1000)])
    a = record(result, "a")
    assert (a.start_time_s, a.finish_time_s, a.jct_s, a.queue_s) == (0, 1000, 1000, 0)
    s = result.summary
    assert s["finished"] == 1 and s["makespan_s"] == 1000
    # 2 of 4 GPUs for the whole makespan; 8 of 16 CPUs (GPU-proportional).
    assert s["gpu_util"] == pytest.approx(0.5) and s["cpu_util"] == pytest.approx(0.5)
    assert s["avg_ftf"] == pytest.approx(1.0)


def test_a_first_start_costs_launch_s_and_is_no_restart():
    # Rubick's artifact simulator charges its restart cost at a job's first placement too.
    result = run([trace_job("a", submit=0, gpus=2, duration=1000)], launch_s=260)
    a = record(result, "a")
    assert (a.start_time_s, a.finish_time_s, a.restarts) == (0, 1260, 0)
    with pytest.raises(ConfigError):
        SimConfig(launch_s=-1)


def test_arrivals_wait_for_the_next_round_unless_planning_is_event_driven():
    trace = [trace_job("a", 0, 4, 100), trace_job("b", 50, 1, 100)]
    rounds = run(trace, round_s=360)
    # b arrives at 50 s; a finishes at 100 s; b starts at the next round, 360 s.
    assert record(rounds, "b").start_time_s == 360 and record(rounds, "b").finish_time_s == 460
    events = run(trace, round_s=360, trigger="event")
    assert record(events, "b").start_time_s == 100 and record(events, "b").finish_time_s == 200


def test_an_idle_cluster_jumps_to_the_round_of_the_next_arrival():
    result = run([trace_job("a", 0, 1, 10), trace_job("b", 10_000, 1, 10)], round_s=360)
    # 10,000 s is inside round 27 (9,720-10,080): b starts at 10,080.
    assert record(result, "b").start_time_s == 10_080
    assert result.summary["rounds"] == 2


def test_preemption_charges_the_restart_cost_on_resume():
    # LAS with 1 GPU: a (300 s of work) runs round 1; b arrives, has less service, runs
    # round 2; then a resumes at 720 s, pays 30 s of restart, and needs 0 more (it had
    # 300 s of work and got 360 s... so use longer jobs).
    nodes = make_nodes(1, gpus=1, cpus=4, mem_gb=16.0)
    trace = [trace_job("a", 0, 1, 500), trace_job("b", 10, 1, 100)]
    result = simulate(
        nodes,
        trace,
        scheduler("las"),
        SimConfig(round_s=360, checkpoint_s=10, relaunch_s=20),
        profiles=profiles(),
    )
    a, b = record(result, "a"), record(result, "b")
    # Round 1 [0, 360): a runs 360 s (140 s left). At 360 s b (0 service) preempts a.
    # Round 2: b runs 100 s, done at 460. At 720 s a resumes: 30 s restart, 140 s -> 890.
    assert (b.start_time_s, b.finish_time_s) == (360, 460)
    assert a.finish_time_s == pytest.approx(890)
    assert (a.preemptions, a.restarts, a.migrations) == (1, 1, 0)
    assert result.summary["restarts"] == 1


def test_every_trace_row_is_accounted_for_even_when_a_job_never_fits():
    trace = [trace_job("ok", 0, 1, 100), trace_job("huge", 0, 8, 100)]
    result = run(trace)
    states = {r.job_id: r.state for r in result.records}
    assert states == {"ok": "finished", "huge": "pending"}
    assert result.summary["jobs"] == 2 and result.summary["finished"] == 1
    assert result.summary["avg_jct_s"] == 100


def test_horizon_stops_with_running_jobs_reported():
    result = run([trace_job("long", 0, 1, 10_000), trace_job("late", 9_000, 1, 10)], horizon_s=3600)
    states = {r.job_id: r.state for r in result.records}
    assert states == {"long": "running", "late": "not-arrived"}
    assert result.end_time_s == 3600
    assert result.summary["makespan_s"] == 3600


def test_speed_model_scales_by_gpu_type_and_keeps_proportional_shares_neutral():
    # resnet50 batch 64 is measured on k80 and v100 (Gavel): a job whose duration was
    # measured on a v100 runs on a k80 at the ratio of the two measurements.
    k80 = {n.name: n for n in make_nodes(1, gpus=4, gpu_type="k80", cpus=12, mem_gb=250.0)}
    model = SpeedModel(profiles(), k80)
    job = trace_job("a", 0, 1, 1000, model="resnet50", gpu_type="v100", batch_size=64)
    p = profiles().resolve("resnet50")
    ratio = p.steps_per_s("k80", 1, 64) / p.steps_per_s("v100", 1, 64)
    proportional = Assignment((("n1", 0),), 3, 62.5)
    assert 0 < ratio < 1
    assert model.speed(job, proportional) == pytest.approx(ratio)
    untyped = trace_job("b", 0, 1, 1000, model="resnet50", batch_size=64)
    assert model.speed(untyped, proportional) == 1.0
    # resnet18 is CPU-sensitive (Synergy's matrix): 1 CPU instead of 3 runs at 0.37x.
    starved = Assignment((("n1", 0),), 1, 62.5)
    assert model.speed(trace_job("c", model="resnet18"), starved) == pytest.approx(0.37)


def test_decision_times_are_recorded_with_an_injected_clock():
    ticks = iter(range(10_000))
    result = simulate(
        ONE_NODE,
        [trace_job("a", 0, 1, 100)],
        scheduler("fifo"),
        SimConfig(),
        profiles=profiles(),
        clock=lambda: float(next(ticks)),
    )
    assert result.decision_times_s and all(t > 0 for t in result.decision_times_s)
    assert result.summary["decision_time_s_mean"] > 0


def test_a_plan_that_overallocates_stops_the_simulation():
    class Greedy:
        """A broken placement that gives every job GPU 0."""

        def place(self, snapshot, ordered):
            return Draft({j.id: Assignment((("n1", 0),) * 0 + (("n1", 0),), 0, 0.0) for j in ordered}, {})

    broken = Scheduler("broken", scheduler("fifo").ordering, True, Greedy(), scheduler("fifo").shaping)
    with pytest.raises(SimulationError, match="GPU 0 of 'n1' holds 2 jobs"):
        simulate(ONE_NODE, [trace_job("a"), trace_job("b")], broken, SimConfig(), profiles=profiles())


def test_config_is_validated():
    with pytest.raises(ConfigError, match="round_s"):
        SimConfig(round_s=0)
    with pytest.raises(ConfigError, match="trigger"):
        SimConfig(trigger="sometimes")


def test_an_empty_trace_gives_an_empty_summary():
    result = run([])
    assert result.summary["jobs"] == 0 and result.summary["avg_jct_s"] is None


def test_same_inputs_same_results():
    trace = [trace_job(i, submit=i * 97.0, gpus=1 + i % 4, duration=500.0 + 37 * i) for i in range(40)]
    nodes = make_nodes(2)
    first = simulate(nodes, trace, scheduler("tiresias"), SimConfig(), profiles=profiles())
    second = simulate(nodes, trace, scheduler("tiresias"), SimConfig(), profiles=profiles())
    assert first.records == second.records
    assert not math.isnan(first.summary["avg_jct_s"])


def test_horizon_is_respected_while_the_cluster_is_idle():
    result = run([trace_job("a", 0, 1, 10), trace_job("b", 100_000, 1, 10)], horizon_s=3600)
    assert result.end_time_s == 3600
    assert {r.job_id: r.state for r in result.records} == {"a": "finished", "b": "not-arrived"}


def test_duplicate_trace_ids_are_rejected():
    with pytest.raises(ConfigError, match="job id 'a' twice"):
        run([trace_job("a"), trace_job("a", submit=5)])


def test_packed_jobs_run_at_their_packed_speed_and_speed_up_when_the_partner_ends():
    # One 1-GPU V100 node; lm(20) and recommendation(2048) share it (tesserae packing).
    # Neither has a CPU-sensitivity profile, so only the sharing changes their speed.
    nodes = make_nodes(1, gpus=1, gpu_type="v100", cpus=4, mem_gb=64.0)
    a = trace_job("a", 0, 1, 1000, model="lm", batch_size=20)
    b = trace_job("b", 0, 1, 100, model="recommendation", batch_size=2048)
    result = simulate(
        nodes, [a, b], scheduler("fifo", packing="tesserae"), SimConfig(round_s=3600), profiles=profiles()
    )
    model = SpeedModel(profiles(), {n.name: n for n in nodes}).colocation
    from profiles.colocation import Side

    est = model.estimate(Side("lm", 20, 1), Side("recommendation", 2048, 1), "v100")
    b_done = 100 / est.b
    assert record(result, "b").finish_time_s == pytest.approx(b_done)
    # a ran packed until b finished, then alone at full speed.
    a_done = b_done + (1000 - b_done * est.a)
    assert record(result, "a").finish_time_s == pytest.approx(a_done)
    assert record(result, "a").start_time_s == record(result, "b").start_time_s == 0


@pytest.mark.slow  # a long property/simulation check: CI, not --fast
def test_packing_presets_simulate_without_breaking_invariants():
    from planner.traces.generators import gavel_trace

    trace = gavel_trace(60, jobs_per_hour=20, seed=2)
    nodes = make_nodes(2, gpus=8, cpus=24, mem_gb=500.0)
    for name in ("tesserae-t", "tesserae-ftf", "tiresias-single", "gavel-las"):
        result = simulate(nodes, trace, scheduler(name), SimConfig(), profiles=profiles())
        assert result.summary["finished"] == 60, name


class _Wandering:
    """A placement that puts the one job on other GPUs every round (``slots(round)``)."""

    def __init__(self, slots):
        self.slots = slots

    def place(self, snapshot, ordered):
        k = round(snapshot.time_s / 360)
        return Draft({j.id: Assignment(self.slots(k), 0, 0.0) for j in ordered}, {})


@pytest.mark.parametrize(
    ("slots", "restarts", "migrations"),
    [
        # GPUs 0-1 of n1, then 2-3 of n1, ...: Slurm would not even notice (planner/relaunch.py).
        (lambda k: (("n1", 2 * (k % 2)), ("n1", 2 * (k % 2) + 1)), 0, 0),
        # n1, then n2, then n1: two moves, each a migration that costs the 30 s restart.
        (lambda k: ((f"n{1 + k % 2}", 0), (f"n{1 + k % 2}", 1)), 2, 2),
    ],
)
def test_renumbering_gpus_on_the_same_node_costs_nothing_and_a_move_costs_a_restart(
    slots, restarts, migrations
):
    fifo = scheduler("fifo")
    wandering = Scheduler("wandering", fifo.ordering, True, _Wandering(slots), fifo.shaping)
    result = simulate(
        make_nodes(2, gpus=4, cpus=16, mem_gb=64.0),
        [trace_job("a", 0, 2, 1000)],
        wandering,
        SimConfig(round_s=360, checkpoint_s=10, relaunch_s=20),
        profiles=profiles(),
    )
    a = record(result, "a")
    # Rounds at 0, 360, 720 s: the job is placed anew at 360 and 720 s.
    assert (a.restarts, a.migrations, a.preemptions) == (restarts, migrations, 0)
    assert a.finish_time_s == pytest.approx(1000 + 30 * restarts)


def test_snapshot_entries_rebuilt_slot_by_slot_equal_the_constructors():
    # Running jobs' entries are rebuilt every round without Job's constructor: each must
    # equal, field for field, the Job the constructor builds from the same state.
    from planner.core.model import Job, JobState
    from planner.sim import Simulator

    trace = [
        trace_job(
            k,
            submit=60.0 * k,
            gpus=1 + k % 2,
            duration=3000.0 + 500 * k,
            time_limit_s=None if k % 3 == 0 else 4000.0 + 600 * k,
        )
        for k in range(8)
    ]
    sim = Simulator(
        make_nodes(1), trace, scheduler("tiresias"), SimConfig(horizon_s=4000.0), profiles=profiles()
    )
    sim.run()
    # The last round's snapshot carried each job's declared time limit.
    limits = {t.job_id: t.time_limit_s for t in trace}
    assert {job_id: view.time_limit_s for job_id, view in sim._views.items()} == {
        job_id: limits[job_id] for job_id in sim._views
    }
    assert {view.time_limit_s for view in sim._views.values()} - {None}
    rebuilt = 0
    for job in sim.active.values():
        job.view = None
        view = job.snapshot_view()
        t, running = job.trace, job.assignment is not None
        want = Job(
            id=t.job_id,
            num_gpus=t.num_gpus,
            model=t.model,
            submit_time_s=t.submit_time_s,
            state=JobState.RUNNING if running else JobState.PENDING,
            attained_gpu_s=job.attained_gpu_s,
            progress=1.0 - job.work_left_s / t.duration_s,
            remaining_s=job.work_left_s,
            duration_s=t.duration_s,
            batch_size=t.batch_size,
            tenant=t.tenant,
            guaranteed=t.guaranteed,
            deadline_s=t.deadline_s,
            time_limit_s=t.time_limit_s,
            gpu_type=t.gpu_type,
            plan=t.plan,
            candidate_plans=t.plans,
            restarts=job.restarts,
            pending_since_s=None if running else job.pending_since_s,
            assignment=job.assignment,
            policy_state=job.policy_state,
            min_gpus=t.min_gpus,
            max_gpus=t.max_gpus,
            gpu_types=t.gpu_types,
        )
        assert view == want
        assert [getattr(view, f) for f in Job.__slots__] == [getattr(want, f) for f in Job.__slots__]
        rebuilt += job.validated
    assert rebuilt >= 2 and any(j.assignment is not None for j in sim.active.values())


def test_a_backfill_interval_backfills_at_its_times_only_and_the_simulator_plans_then():
    # Slurm's two passes: an event-driven FIFO that stops at the first job that does not fit,
    # and a backfill pass every 30 s. a holds 3 of 4 GPUs until 100 s; b (2 GPUs) waits for it;
    # c (1 GPU) fits from its arrival on, but only a backfill pass may start it past b: at
    # 30 s, not at its arrival (2 s) or d's (10 s), where the main pass plans.
    trace = [
        trace_job("a", 0, 3, 100),
        trace_job("b", 1, 2, 10),
        trace_job("c", 2, 1, 10),
        trace_job("d", 10, 4, 10),
    ]
    backfill_30 = scheduler("fifo", options={"placement": {"backfill_interval_s": 30}})
    result = simulate(ONE_NODE, trace, backfill_30, SimConfig(trigger="event"), profiles=profiles())
    assert record(result, "c").start_time_s == 30 and record(result, "c").finish_time_s == 40
    assert record(result, "b").start_time_s == 100 and record(result, "d").start_time_s == 110
    always = run(trace, trigger="event")  # backfill at every planning point: c at once
    assert record(always, "c").start_time_s == 2
    # 6-minute rounds plan at the backfill times too; an offset moves them.
    rounds = simulate(ONE_NODE, trace, backfill_30, SimConfig(round_s=360), profiles=profiles())
    assert record(rounds, "c").start_time_s == 30
    shifted = scheduler("fifo", options={"placement": {"backfill_interval_s": 30, "backfill_offset_s": 28}})
    result = simulate(ONE_NODE, trace, shifted, SimConfig(trigger="event"), profiles=profiles())
    assert record(result, "c").start_time_s == 28


def test_an_idle_cluster_wakes_for_a_backfill_pass_once():
    # x asks for a GPU type the cluster lacks: it waits forever, and without backfill y waits
    # behind it with every GPU free, until the backfill pass at 30 s; then nothing is left
    # that a pass could start, and the simulation stops.
    trace = [trace_job("x", 0, 1, 10, gpu_type="h100"), trace_job("y", 1, 1, 10)]
    backfill_30 = scheduler("fifo", options={"placement": {"backfill_interval_s": 30}})
    result = simulate(ONE_NODE, trace, backfill_30, SimConfig(trigger="event"), profiles=profiles())
    assert record(result, "y").start_time_s == 30 and record(result, "x").state == "pending"
    trace = [trace_job("x", 0, 1, 10, gpu_type="h100")]
    result = simulate(ONE_NODE, trace, backfill_30, SimConfig(trigger="event"), profiles=profiles())
    assert result.summary["rounds"] == 2  # at 0 s and at the backfill pass at 30 s
