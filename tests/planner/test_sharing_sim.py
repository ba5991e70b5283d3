"""The simulator honours sharing decisions: accumulation slowdown, ξ, gang pace, no preemption."""

from __future__ import annotations

import pytest

from planner.core.model import Assignment
from planner.pipeline import Scheduler
from planner.sim import SimConfig, simulate
from planner.sim.progress import SpeedModel
from planner.stages import Draft
from profiles.interference import PairInterference, Sharer
from profiles.iteration import IterationModels, accumulation_plan
from tests.builders import make_nodes, profiles, scheduler, trace_job

STORE = profiles()


def record(result, job_id):
    return next(r for r in result.records if r.job_id == job_id)


def test_an_accumulating_job_runs_slower_by_the_fitted_model():
    nodes = make_nodes(1, gpus=1, gpu_type="v100")
    speed = SpeedModel(STORE, {n.name: n for n in nodes})
    job = trace_job("a", model="resnet50", batch_size=128)
    plain = speed.speed(job, Assignment((("n1", 0),), 4, 16.0))
    ga = speed.speed(job, Assignment((("n1", 0),), 4, 16.0, accumulation_plan(128, 32)))
    slowdown = IterationModels().accumulation_slowdown(STORE.resolve("resnet50"), "v100", 128, 1, 1, 4)
    assert slowdown > 1 and ga == pytest.approx(plain / slowdown)


def test_a_job_sharing_with_two_partners_runs_at_the_slower_pace():
    nodes = make_nodes(1, gpus=2, gpu_type="v100")
    speed = SpeedModel(STORE, {n.name: n for n in nodes})
    wide = trace_job("w", gpus=2, model="resnet18", batch_size=128)
    a = trace_job("a", model="recommendation", batch_size=2048)
    b = trace_job("b", model="lm", batch_size=20)
    slots = (("n1", 0), ("n1", 1))
    both = speed.speed(
        wide,
        Assignment(slots, 8, 32.0, None, ("a", "b")),
        [(a, Assignment(slots[:1], 4, 16.0)), (b, Assignment(slots[1:], 4, 16.0))],
    )
    model = PairInterference(STORE)
    me = Sharer("resnet18", 128, 2)
    worst = min(
        model.speed_of(me, Sharer("recommendation", 2048, 1), "v100"),
        model.speed_of(me, Sharer("lm", 20, 1), "v100"),
    )
    alone = speed.speed(wide, Assignment(slots, 8, 32.0))
    assert both == pytest.approx(alone * worst)


def test_bsbf_shares_with_accumulation_and_the_simulated_times_follow_the_model():
    # One V100. lm(20) runs 10 h; resnet50(128) arrives for 1 h. Gavel measured the
    # pair at batch 128 as out of memory, so it shares at micro-batch 64 (2 steps);
    # it finishes first, after N x slowdown x ξ; lm then runs alone again.
    nodes = make_nodes(1, gpus=1, gpu_type="v100", cpus=4, mem_gb=64.0)
    host = trace_job("lm", 0, 1, 36000, model="lm", batch_size=20)
    new = trace_job("r50", 10, 1, 3600, model="resnet50", batch_size=128)
    result = simulate(nodes, [host, new], scheduler("sjf-bsbf"), SimConfig(trigger="event"), profiles=STORE)
    xi_lm, xi_r50 = PairInterference(STORE).ratios(
        Sharer("lm", 20, 1), Sharer("resnet50", 128, 1, accumulation_plan(128, 64)), "v100"
    )
    slowdown = IterationModels().accumulation_slowdown(STORE.resolve("resnet50"), "v100", 128, 1, 1, 2)
    restart = SimConfig().restart_cost_s  # lm relaunches with half the GPU's CPUs and memory
    r50_done = 10 + 3600 * slowdown * xi_r50
    assert record(result, "r50").start_time_s == 10
    assert record(result, "r50").finish_time_s == pytest.approx(r50_done)
    lm_work_shared = (r50_done - 10 - restart) / xi_lm
    lm_work_before = 10
    assert record(result, "lm").preemptions == 0 and record(result, "lm").migrations == 0
    assert record(result, "lm").finish_time_s > r50_done
    assert record(result, "lm").finish_time_s == pytest.approx(
        r50_done + (36000 - lm_work_before - lm_work_shared), abs=restart + 1
    )


@pytest.mark.parametrize("name", ["sjf-bsbf", "sjf-ffs"])
def test_sharing_presets_simulate_a_trace_without_preempting_or_moving(name):
    from planner.traces.generators import gavel_trace

    trace = gavel_trace(80, jobs_per_hour=30, seed=3)
    nodes = make_nodes(4, gpus=4, cpus=32, mem_gb=256.0)
    result = simulate(nodes, trace, scheduler(name), SimConfig(trigger="event"), profiles=STORE)
    assert result.summary["finished"] == 80
    assert result.summary["preemptions"] == 0 and result.summary["migrations"] == 0


def test_injected_interference_changes_true_speeds():
    nodes = make_nodes(1, gpus=1, gpu_type="v100")
    a, b = trace_job("a", model="resnet18", batch_size=128), trace_job("b", model="lm", batch_size=20)
    slot = (("n1", 0),)
    shared = SpeedModel(STORE, {n.name: n for n in nodes}, interference=2.0)
    alone = shared.speed(a, Assignment(slot, 2, 8.0, None, ()))
    assert shared.speed(a, Assignment(slot, 2, 8.0, None, ("b",)), [(b, Assignment(slot, 2, 8.0))]) == (
        pytest.approx(alone / 2.0)
    )
    with pytest.raises(Exception, match="interference"):
        SimConfig(interference=0)


class _PairsOnSecondRound:
    """A placement that runs ``small`` and ``big`` alone on GPUs 0 and 1 in the first round,
    then ``big`` onto ``small``'s GPU 0 at micro-batch 128 (the one plan with which the pair
    fits a V100), ``small`` first in the plan; ``big`` stays there alone once ``small`` is done."""

    def place(self, snapshot, ordered):
        ids = {j.id for j in ordered}
        if snapshot.time_s == 0:
            return Draft(
                {"small": Assignment((("n1", 0),), 2, 16.0), "big": Assignment((("n1", 1),), 2, 16.0)}, {}
            )
        gpu, plan = (("n1", 0),), accumulation_plan(256, 128)
        if "small" not in ids:
            return Draft({"big": Assignment(gpu, 2, 16.0, plan)}, {})
        return Draft(
            {
                "small": Assignment(gpu, 1, 8.0, None, ("big",)),
                "big": Assignment(gpu, 1, 8.0, plan, ("small",)),
            },
            {},
        )


def test_a_sharer_is_priced_beside_its_partners_new_assignment_not_its_last():
    # transformer(256) fits a V100 beside transformer(32) only with accumulation: priced
    # beside big's last assignment (alone on GPU 1, no accumulation) small would get speed 0
    # and stop the simulation for a pair the plan never formed.
    nodes = make_nodes(1, gpus=2, gpu_type="v100", cpus=4, mem_gb=64.0)
    small = trace_job("small", 0, 1, 3600, model="transformer", batch_size=32)
    big = trace_job("big", 0, 1, 36000, model="transformer", batch_size=256)
    model = PairInterference(STORE)
    assert model.speed_of(Sharer("transformer", 32, 1), Sharer("transformer", 256, 1), "v100") == 0
    fifo = scheduler("fifo")
    pairs = Scheduler("pairs", fifo.ordering, True, _PairsOnSecondRound(), fifo.shaping, max_jobs_per_gpu=2)
    result = simulate(nodes, [small, big], pairs, SimConfig(round_s=360), profiles=STORE)
    assert result.summary["finished"] == 2
    xi = model.speed_of(
        Sharer("transformer", 32, 1), Sharer("transformer", 256, 1, accumulation_plan(256, 128)), "v100"
    )
    assert xi > 0
    # small ran alone for the first round, then beside big.
    alone = 360 - SimConfig().launch_s
    restart = SimConfig().restart_cost_s
    assert record(result, "small").finish_time_s == pytest.approx(360 + restart + (3600 - alone) / xi)
