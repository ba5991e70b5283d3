"""Throughput against GPU count at a fixed global batch (profiles/scaling.py)."""

from profiles.scaling import ScalingModel
from tests.builders import profiles

MODEL = ScalingModel(profiles())


def test_a_measured_model_scales_sublinearly_and_worse_across_servers():
    one, two, four = (MODEL.throughput("resnet50", "v100", 256, g) for g in (1, 2, 4))
    assert one < two < four < 4 * one
    assert MODEL.throughput("resnet50", "v100", 256, 4, nodes=2) < four


def test_a_small_global_batch_can_make_more_gpus_slower():
    # 16 examples over 4 GPUs: each all-reduce costs more than the compute it splits.
    assert MODEL.throughput("resnet50", "v100", 16, 4) < MODEL.throughput("resnet50", "v100", 16, 2)


def test_without_measurements_or_batch_every_gpu_adds_the_same():
    assert MODEL.throughput("resnet50", "v100", None, 3) == 3.0
    assert MODEL.speedup("no-such-model", "a100", 64, 4, 1, 2) == 2.0
    assert MODEL.throughput("resnet50", "v100", 64, 0) == 0.0
