"""Execution plans: the JSON codec, the rules that reject impossible plans, the global-batch invariant."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.core.execplan import (
    ExecPlan,
    PlanError,
    check_transition,
    plan_from_mapping,
    plan_to_mapping,
    rescale,
    resolve,
)


@pytest.mark.parametrize("mapping", [{"tp": 2}, {"pp": 2}, {"zero_stage": 2}, {}, None])
def test_the_partial_plans_traces_and_profiles_carry_stay_valid_and_round_trip(mapping):
    plan = plan_from_mapping(mapping)
    assert plan_to_mapping(plan) == (mapping or {})


def test_a_full_plan_round_trips_key_for_key():
    mapping = {
        "dp": 2,
        "tp": 2,
        "zero_stage": 3,
        "offload_optimizer": True,
        "offload_param": True,
        "micro_batch": 4,
        "grad_accum": 8,
        "activation_checkpointing": True,
        "global_batch": 64,
    }
    assert plan_to_mapping(plan_from_mapping(mapping)) == mapping


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"zero": 2}, "unknown key 'zero'; valid keys: activation_checkpointing, dp"),
        ({"zero_stage": 4}, "key 'zero_stage': expected 0, 1, 2 or 3, got 4"),
        ({"zero_stage": -1}, "key 'zero_stage': expected an integer >= 0"),
        ({"dp": 0}, "key 'dp': expected an integer >= 1, got 0"),
        ({"tp": "2"}, "key 'tp': expected an integer >= 1"),
        ({"offload_param": True, "zero_stage": 2}, "offload_param needs zero_stage 3"),
        ({"offload_optimizer": True}, "offload_optimizer needs zero_stage >= 1"),
        ({"pp": 2, "zero_stage": 2}, "pipeline parallelism (pp 2) works with zero_stage 0 or 1 only"),
        ({"dp": 2, "micro_batch": 4, "grad_accum": 2, "global_batch": 32}, "= 16, not the global batch 32"),
        ({"activation_checkpointing": "yes"}, "key 'activation_checkpointing': expected true or false"),
    ],
)
def test_impossible_plans_are_rejected_naming_the_rule(mapping, message):
    with pytest.raises(PlanError, match=r"^job 7 plan: ") as error:
        plan_from_mapping(mapping, "job 7 plan")
    assert message in str(error.value)


def test_resolve_derives_dp_and_the_batch_split_from_the_gpus_and_global_batch():
    plan = resolve(plan_from_mapping({"tp": 2, "micro_batch": 2}), workers=8, global_batch=32)
    # dp = 8 / (tp 2 x pp 1) = 4; 32 examples / 4 replicas = 8 each = micro 2 x accum 4
    assert (plan.dp, plan.micro_batch, plan.grad_accum, plan.global_batch) == (4, 2, 4, 32)
    assert plan.world_size == 8 and plan.is_resolved


def test_resolve_without_a_micro_batch_runs_the_whole_share_in_one_pass():
    plan = resolve(ExecPlan(), workers=4, global_batch=64)
    assert (plan.micro_batch, plan.grad_accum) == (16, 1)


def test_resolve_keeps_an_unknown_global_batch_unknown():
    plan = resolve(plan_from_mapping({"zero_stage": 1}), workers=2)
    assert plan.dp == 2 and plan.global_batch is None and not plan.is_resolved


@pytest.mark.parametrize(
    ("mapping", "workers", "global_batch", "message"),
    [
        ({"tp": 2}, 3, 8, "3 workers cannot be split into tp 2 x pp 1"),
        ({"dp": 4}, 2, 8, "dp 4 x tp 1 x pp 1 is not the 2 workers given"),
        ({}, 3, 8, "global batch 8 does not split over dp 3 workers"),
        ({"global_batch": 16}, 2, 8, "global_batch 16 is not the job's global batch 8"),
        ({"micro_batch": 3}, 2, 8, "4 examples per worker do not split into micro_batch 3"),
    ],
)
def test_resolve_rejects_a_plan_that_does_not_fit(mapping, workers, global_batch, message):
    with pytest.raises(PlanError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve(plan_from_mapping(mapping), workers, global_batch)


def test_rescale_keeps_the_global_batch_with_sub_batch_and_accumulation():
    two = resolve(plan_from_mapping({"micro_batch": 8, "zero_stage": 1}), workers=2, global_batch=16)
    one = rescale(two, workers=1)
    four = rescale(two, workers=4)
    # 16 on 1 worker: micro 8 x accum 2; on 4 workers: 4 each, micro shrinks to 4, accum 1
    assert (one.dp, one.micro_batch, one.grad_accum) == (1, 8, 2)
    assert (four.dp, four.micro_batch, four.grad_accum) == (4, 4, 1)
    assert one.zero_stage == four.zero_stage == 1


def test_a_plan_change_that_changes_the_global_batch_is_refused():
    old = resolve(ExecPlan(), 2, 16)
    with pytest.raises(PlanError, match=r"global batch must not change between plans \(16 -> 32\)"):
        check_transition(old, resolve(ExecPlan(), 2, 32))
    check_transition(old, rescale(old, 4))


@st.composite
def resolved_plans(draw):
    tp = draw(st.sampled_from([1, 2]))
    pp = draw(st.sampled_from([1, 2]))
    dp = draw(st.integers(1, 8))
    micro = draw(st.integers(1, 8))
    accum = draw(st.integers(1, 4))
    stage = draw(st.integers(0, 1 if pp > 1 else 3))
    plan = ExecPlan(tp=tp, pp=pp, zero_stage=stage, micro_batch=micro, grad_accum=accum)
    return resolve(plan, dp * tp * pp, dp * micro * accum)


@given(resolved_plans(), st.integers(1, 16))
def test_rescaling_never_changes_the_global_batch(plan, dp):
    workers = dp * plan.model_parallel
    try:
        new = rescale(plan, workers)
    except PlanError as e:  # only when the global batch cannot be split evenly over dp replicas
        assert plan.global_batch % dp != 0, e
        return
    assert new.global_batch == plan.global_batch
    assert new.dp * new.micro_batch * new.grad_accum == plan.global_batch
    assert new.micro_batch <= plan.micro_batch and new.world_size == workers


@given(resolved_plans())
def test_every_resolved_plan_round_trips_through_json(plan):
    assert plan_from_mapping(plan_to_mapping(plan)) == plan


def test_replan_keeps_the_global_batch_on_another_worker_count():
    from planner.core.execplan import replan

    resolved = resolve(plan_from_mapping({"micro_batch": 4}), 2, 16)
    assert plan_to_mapping(replan(resolved, 4)) == {
        "dp": 4,
        "micro_batch": 4,
        "grad_accum": 1,
        "global_batch": 16,
    }
    # Unresolved, with a micro-batch that no longer divides the share: derived again.
    assert replan(plan_from_mapping({"micro_batch": 8}), 4, 16).micro_batch == 4
    with pytest.raises(PlanError, match="tp 2"):
        replan(plan_from_mapping({"tp": 2}), 3, 16)
