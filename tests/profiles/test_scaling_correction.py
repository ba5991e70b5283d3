"""Observed throughput corrects the scaling model near what was measured (profiles/scaling_correction.py)."""

from __future__ import annotations

import pytest

from profiles.observed import ObservedPoint, Shape
from profiles.scaling import ScalingModel
from profiles.scaling_correction import CorrectedScaling, corrected_scaling, scaling_for
from tests.builders import profiles

BASE = ScalingModel(profiles())


def point(
    samples_per_s: float,
    gpus: int,
    model: str = "resnet50",
    gpu_type: str = "v100",
    batch: int | None = 256,
    nodes: int | None = 1,
) -> ObservedPoint:
    """A running job's measurement: ``samples_per_s`` in all (the global rate) on ``gpus`` GPUs."""
    shape = Shape(gpu_type, gpus, batch, None, nodes)
    return ObservedPoint(model, shape, 4.0, 16.0, samples_per_s / gpus, 0.0, job_id="1")


def test_a_measured_configuration_answers_what_was_measured_and_a_nearby_count_moves_toward_it():
    modelled = {g: BASE.throughput("resnet50", "v100", 256, g) for g in (2, 4, 8)}
    scaling = corrected_scaling(BASE, [point(modelled[4] / 2, 4)])  # half the modelled speed on 4
    assert isinstance(scaling, CorrectedScaling)
    assert scaling.throughput("resnet50", "v100", 256, 4) == pytest.approx(modelled[4] / 2)
    # 2 and 8 GPUs are one doubling away: both move toward the measured ratio, not all of it.
    for g in (2, 8):
        ratio = modelled[g] / scaling.throughput("resnet50", "v100", 256, g)
        assert 1.0 < ratio < 2.0
    assert modelled[2] / scaling.throughput("resnet50", "v100", 256, 2) == pytest.approx(
        modelled[8] / scaling.throughput("resnet50", "v100", 256, 8)
    )
    # Farther away (16 GPUs, two servers, another GPU type) moves less.
    near = modelled[8] / scaling.throughput("resnet50", "v100", 256, 8)
    far = BASE.throughput("resnet50", "v100", 256, 16, 2) / scaling.throughput("resnet50", "v100", 256, 16, 2)
    other_type = BASE.throughput("resnet50", "p100", 256, 8) / scaling.throughput("resnet50", "p100", 256, 8)
    assert near > far > 1.0 and near > other_type > 1.0
    # A model nobody measured, and a label of the measured one, are answered as before / alike.
    assert scaling.throughput("resnet18", "v100", 128, 4) == BASE.throughput("resnet18", "v100", 128, 4)
    assert scaling.throughput("ResNet-50 (batch size 64)", "v100", 256, 4) == pytest.approx(modelled[4] / 2)


def test_speedup_is_the_measured_one_between_measured_counts_and_a_common_correction_cancels():
    two, four = (BASE.throughput("resnet50", "v100", 256, g) for g in (2, 4))
    # Measured: 2 GPUs as modelled, 4 GPUs no faster than 2 (the job scales worse than modelled).
    worse = corrected_scaling(BASE, [point(two, 2), point(two, 4)])
    assert BASE.speedup("resnet50", "v100", 256, 4, 1, 2) == pytest.approx(four / two)
    assert worse.speedup("resnet50", "v100", 256, 4, 1, 2) == pytest.approx(1.0)
    # Both counts 30 % slower than modelled: throughputs fall, their ratio does not change.
    slower = corrected_scaling(BASE, [point(two / 1.3, 2), point(four / 1.3, 4)])
    assert slower.throughput("resnet50", "v100", 256, 4) == pytest.approx(four / 1.3)
    assert slower.speedup("resnet50", "v100", 256, 4, 1, 2) == pytest.approx(four / two)


def test_without_usable_observations_the_model_is_the_uncorrected_one():
    assert corrected_scaling(BASE, []) is BASE
    unusable = [
        point(100.0, 4, batch=None),  # no batch size: no modelled time to compare with
        point(100.0, 4, nodes=None),  # recorded before nodes were
        point(100.0, 4, model="no-such-model"),  # the linear rule: no samples/s to compare with
        point(100.0, 512, batch=256),  # fewer examples than GPUs: the linear rule too
    ]
    assert corrected_scaling(BASE, unusable) is BASE
    plain = scaling_for(profiles())
    assert type(plain) is ScalingModel
    for g in (1, 2, 4, 8):
        assert plain.throughput("resnet50", "v100", 256, g) == BASE.throughput("resnet50", "v100", 256, g)
    corrected = scaling_for(profiles().with_observations([point(100.0, 4)]))
    assert corrected.throughput("resnet50", "v100", 256, 4) == pytest.approx(100.0)


def test_answers_by_the_linear_rule_are_not_corrected():
    scaling = corrected_scaling(BASE, [point(100.0, 4)])
    assert scaling.throughput("resnet50", "v100", None, 4) == 4.0
    assert scaling.throughput("resnet50", "v100", 2, 4) == BASE.throughput("resnet50", "v100", 2, 4)
    assert scaling.throughput("resnet50", "v100", 256, 0) == 0.0
