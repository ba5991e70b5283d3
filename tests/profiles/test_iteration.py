"""The iteration-time model (SJF-BSBF Eq. 3, 4, 7), gradient accumulation plans and ξ."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profiles.interference import PairInterference, Sharer
from profiles.iteration import (
    IterationModel,
    IterationModels,
    Sample,
    accumulation_of,
    accumulation_plan,
    fit_iteration_model,
    micro_batches,
    samples_of,
    without_accumulation,
)
from tests.builders import profiles

STORE = profiles()
KNOWN = IterationModel(c0=0.02, c1=0.001, a_intra=0.005, m_intra=0.03, a_inter=0.02, m_inter=0.2, delta=2.0)


@given(st.integers(min_value=1, max_value=1 << 14))
def test_every_candidate_micro_batch_keeps_the_users_batch(batch):
    for micro in micro_batches(batch):
        plan = accumulation_plan(batch, micro, {"zero_stage": 1})
        ga = accumulation_of(plan)
        steps = 1 if ga is None else ga[1]
        assert (micro if ga is None else ga[0]) * steps == batch
        assert plan["zero_stage"] == 1 and without_accumulation(plan) == {"zero_stage": 1}


def test_micro_batches_of_a_power_of_two_are_all_powers_of_two_down_to_one():
    assert micro_batches(128) == [128, 64, 32, 16, 8, 4, 2, 1]
    assert micro_batches(20) == [20, 10, 5]  # accumulation steps stay powers of two
    with pytest.raises(ValueError):
        micro_batches(0)


def test_a_micro_batch_that_does_not_divide_the_batch_is_refused():
    with pytest.raises(ValueError, match="does not divide"):
        accumulation_plan(20, 8)


def test_the_full_batch_needs_no_accumulation_keys():
    assert accumulation_plan(64, 64) == {}
    assert accumulation_of(accumulation_plan(64, 16)) == (16, 4)


def test_eq_7_by_hand():
    # b = 64 in 2 steps of 32: compute 0.02 + 0.032 = 0.052 s per step; 4 GPUs on one
    # server: all-reduce 0.005 + 0.03 * 1.5 = 0.05 s; δ = 2 on the last step.
    last = (0.052**2 + 0.05**2) ** 0.5
    assert KNOWN.iteration_s(64, 4, nodes=1, steps=2) == pytest.approx(0.052 + last)
    assert KNOWN.iteration_s(64, 1) == pytest.approx(0.02 + 0.064)  # one GPU: no all-reduce
    assert KNOWN.allreduce_s(4, nodes=2) == pytest.approx(0.02 + 0.2 * 1.5)


def test_the_fit_recovers_a_known_model():
    samples = [
        Sample(b, g, consolidated, KNOWN.iteration_s(b, g, 1 if consolidated else 2))
        for b in (16, 32, 64, 128, 256)
        for g in (1, 2, 4, 8)
        for consolidated in (True, False)
    ]
    fitted = fit_iteration_model(samples)
    for s in samples:
        assert fitted.iteration_s(s.batch, s.num_gpus, 1 if s.consolidated else 2) == pytest.approx(
            s.iteration_s, rel=0.02
        )
    assert fitted.accumulation_slowdown(128, 4, 1, 4) == pytest.approx(
        KNOWN.accumulation_slowdown(128, 4, 1, 4), rel=0.05
    )


def test_fit_needs_three_samples():
    with pytest.raises(ValueError, match="at least 3"):
        fit_iteration_model([Sample(32, 1, True, 0.1)])


@pytest.mark.parametrize("model", ["resnet18", "resnet50", "transformer", "recommendation"])
def test_gavel_throughputs_are_fitted_within_a_quarter(model):
    profile = STORE.resolve(model)
    fitted = IterationModels().model(profile, "v100")
    assert fitted is not None
    errors = [
        abs(fitted.iteration_s(s.batch, s.num_gpus, 1 if s.consolidated else 2) / s.iteration_s - 1)
        for s in samples_of(profile, "v100")
    ]
    # Gavel's data is noisy (e.g. some 2-GPU runs faster per worker than 1 GPU): the
    # median error is what the model is held to.
    assert statistics.median(errors) < 0.25  # measured: 0.06 (resnet50) to 0.21 (transformer)


@pytest.mark.parametrize("model", ["resnet18", "resnet50", "lm"])
def test_accumulation_costs_time_and_more_steps_cost_more(model):
    models, profile = IterationModels(), STORE.resolve(model)
    batch = profile.batch_size
    slow = [models.accumulation_slowdown(profile, "v100", batch, 1, 1, s) for s in (1, 2, 4)]
    assert slow[0] == 1.0 < slow[1] < slow[2]


def test_a_gpu_type_without_measurements_borrows_another_types_slowdown():
    models, profile = IterationModels(), STORE.resolve("resnet50")
    assert models.model(profile, "a100") is None
    v100 = models.accumulation_slowdown(profile, "v100", 64, 1, 1, 4)
    assert models.accumulation_slowdown(profile, "a100", 64, 1, 1, 4) == v100 > 1


def test_without_measurements_accumulation_is_free():
    models = IterationModels()
    assert models.accumulation_slowdown(STORE.resolve("gpt2"), "v100", 512, 8, 1, 4) == 1.0
    assert models.accumulation_slowdown(STORE.resolve("cyclegan"), "v100", 1, 1, 1, 2) == 1.0


# -- ξ ----------------------------------------------------------------------------------


def measured_normalised(model_a, batch_a, model_b, batch_b):
    table = STORE.colocation_table()
    key = next(
        k for k in table
        if (k.gpu_type, k.model_a, k.batch_a, k.gpus_a, k.model_b, k.batch_b, k.gpus_b)
        == ("v100", model_a, batch_a, 1, model_b, batch_b, 1)
    )  # fmt: skip
    packed = table[key]
    iso_a = STORE.resolve(model_a).steps_per_s("v100", 1, batch_a)
    iso_b = STORE.resolve(model_b).steps_per_s("v100", 1, batch_b)
    return packed[0] / iso_a, packed[1] / iso_b


def test_xi_is_the_inverse_of_the_measured_normalised_throughput():
    a, b = measured_normalised("resnet18", 128, "recommendation", 2048)
    xi = PairInterference(STORE).ratios(Sharer("resnet18", 128, 1), Sharer("recommendation", 2048, 1), "v100")
    assert xi == pytest.approx((1 / a, 1 / b))


def test_an_accumulating_job_is_looked_up_at_its_micro_batch():
    # resnet50 at batch 128 does not fit beside lm(20) (Gavel measured 0, 0); at 64 it does.
    model = PairInterference(STORE)
    lm = Sharer("lm", 20, 1)
    assert model.ratios(lm, Sharer("resnet50", 128, 1), "v100") is None
    micro = Sharer("resnet50", 128, 1, accumulation_plan(128, 64))
    a, b = measured_normalised("lm", 20, "resnet50", 64)
    assert model.ratios(lm, micro, "v100") == pytest.approx((1 / a, 1 / b))


def test_jobs_of_different_sizes_share_gpu_by_gpu():
    model = PairInterference(STORE)
    one = model.ratios(Sharer("resnet18", 128, 1), Sharer("recommendation", 2048, 1), "v100")
    mixed = model.ratios(Sharer("resnet18", 128, 4), Sharer("recommendation", 2048, 1), "v100")
    assert mixed == one


def test_an_injected_ratio_applies_to_every_pair_that_fits():
    model = PairInterference(STORE, fixed=1.7)
    assert model.ratios(Sharer("resnet18", 128, 1), Sharer("lm", 20, 1), "v100") == (1.7, 1.7)
    assert model.ratios(Sharer("lm", 20, 1), Sharer("resnet50", 128, 1), "v100") is None  # memory still binds
    with pytest.raises(ValueError, match="> 0"):
        PairInterference(STORE, fixed=0.0)
