"""The planner's scaling model learns from running jobs' measurements (elastic, the baselines' view)."""

from __future__ import annotations

import pytest

from planner import plan_round
from planner.config import build_scheduler, preset
from planner.policies.baselines.view import DpView
from profiles.observed import ObservedPoint, Shape
from profiles.scaling import ScalingModel
from profiles.speed import gpu_type_factor
from tests.builders import make_job, make_nodes, make_snapshot, profiles

NODES = make_nodes(1, gpus=4, cpus=16, mem_gb=64.0)
# resnet50 at a global batch of 256: the fitted model says 2 -> 4 GPUs gains ~38 %.
ELASTIC = make_job("a", 2, min_gpus=1, max_gpus=4, batch_size=256, plan={"micro_batch": 32})
MODEL = ScalingModel(profiles())


def measured(samples_per_s: float, gpus: int) -> ObservedPoint:
    """resnet50 at a global batch of 256 on ``gpus`` v100 of one server, ``samples_per_s`` in all."""
    return ObservedPoint("resnet50", Shape("v100", gpus, 256, None, 1), 4.0, 16.0, samples_per_s / gpus, 0.0)


def test_the_elastic_preset_does_not_grow_a_job_that_measured_it_scales_worse_than_modelled():
    two = MODEL.throughput("resnet50", "v100", 256, 2)
    assert (
        plan_round(make_snapshot(NODES, [ELASTIC]), build_scheduler(preset("elastic"), profiles()))
        .assignments["a"]
        .num_gpus
        == 4
    )
    # Running jobs of the model measured 2 GPUs as modelled and 4 GPUs only 5 % faster than 2.
    store = profiles().with_observations([measured(two, 2), measured(1.05 * two, 4)])
    plan = plan_round(make_snapshot(NODES, [ELASTIC]), build_scheduler(preset("elastic"), store))
    assert plan.assignments["a"].num_gpus == 2


def test_the_baselines_view_answers_what_a_running_job_measured():
    job = make_job("a", 4, batch_size=256, gpu_type="v100")
    plain = DpView(profiles())
    observed = DpView(profiles().with_observations([measured(300.0, 4)]))
    assert plain.throughput(job, "v100", 4) == pytest.approx(MODEL.throughput("resnet50", "v100", 256, 4))
    assert observed.throughput(job, "v100", 4) == pytest.approx(300.0)
    factor = gpu_type_factor(
        profiles().resolve("resnet50"), gpu_type="p100", reference_type="v100", num_gpus=4, batch_size=None
    )
    # Another type, one step away: moved toward the measured ratio, with the same type factor.
    here = observed.throughput(job, "p100", 4) / factor
    there = MODEL.throughput("resnet50", "p100", 256, 4)
    assert 300.0 / MODEL.throughput("resnet50", "v100", 256, 4) < here / there < 1.0
