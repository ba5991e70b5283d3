"""Crius's agile Cell estimate (profiles/perfmodel/agile.py): hand-computed cases and properties."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.core.errors import InputError
from profiles.perfmodel.agile import (
    GPU_SPECS,
    AgileEstimator,
    GpuSpec,
    allreduce_s,
    assemble,
    model_spec,
    partition,
    peak_bound_s,
    stage_counts,
)
from profiles.perfmodel.agile_model import dp_memory_points, fit_memory, memory_points
from profiles.perfmodel.crius import CriusTable, builtin_crius
from profiles.perfmodel.dp_memory import builtin_dp_memory, parse_dp_memory


@pytest.fixture(scope="module")
def estimator() -> AgileEstimator:
    return AgileEstimator()


# -- hand-computed -----------------------------------------------------------------------


def test_bert_760m_flops_per_sample_by_hand():
    # s=1024, h=1536, l=24, V=51200. Per layer 3*s*(8h^2 + 16h^2 + 4sh)
    # = 3*1024*(56,623,104 + 6,291,456) = 193,273,528,320; x24 = 4,638,564,679,680;
    # output projection 3*2*s*h*V = 483,183,820,800. Total 5,121,748,500,480.
    spec = model_spec("bert_760M")
    assert spec is not None and len(spec.layers) == 24
    assert spec.flops_per_sample == pytest.approx(5_121_748_500_480, rel=1e-12)
    assert sum(layer.params for layer in spec.layers) == pytest.approx(760e6)


def test_model_names_match_loosely_and_unknown_models_have_no_shape():
    assert model_spec("BERT__760M") == model_spec("bert-760m") == model_spec("bert_760M")
    assert model_spec("resnet50") is None
    with pytest.raises(InputError, match="unknown model"):
        partition("resnet50", 2)


def test_allreduce_is_latency_plus_ring_traffic_over_the_link():
    a100 = GPU_SPECS["a100"]  # 4 per node, 20 GB/s inside, 12.5 GB/s per node outside
    # 4 GPUs in one node, 1 GB: 2*3*10us + 2*3/4 * 1e9 / 20e9 = 60us + 75 ms
    assert allreduce_s(a100, 4, 0, 1e9) == pytest.approx(60e-6 + 0.075)
    # GPUs 2..5 span two nodes: 2*3*20us + 2*3/4 * 1e9 / (12.5e9 / 4) = 120us + 0.48 s
    assert allreduce_s(a100, 4, 2, 1e9) == pytest.approx(120e-6 + 0.48)
    assert allreduce_s(a100, 1, 0, 1e9) == 0.0


def test_assemble_picks_the_best_of_the_four_plans_by_hand():
    # Two stages, options (DP, TP); B = 3 micro-batches; cost = sum + 2*max + max(sync).
    time_s = np.array([[1.0, 2.0], [3.0, 1.0]])
    sync_s = np.array([[0.5, 0.0], [0.5, 0.0]])
    fits = np.ones((2, 2), dtype=bool)
    # (DP,DP) 4+6+.5=10.5; (DP,TP) 2+2+.5=4.5; (TP,DP) 5+6+.5=11.5; (TP,TP) 3+4+0=7
    assert assemble(time_s, sync_s, fits, 0.0, 3) == (pytest.approx(4.5), (0, 1))
    # Stage 0's DP does not fit: (TP,TP) 7 beats (TP,DP) 11.5
    fits[0, 0] = False
    assert assemble(time_s, sync_s, fits, 0.0, 3) == (pytest.approx(7.0), (1, 1))
    fits[1, :] = False
    assert assemble(time_s, sync_s, fits, 0.0, 3) is None


def test_one_gpu_cell_is_the_compute_at_the_effective_rate(estimator: AgileEstimator):
    # No communication on one GPU: T = FLOPs x batch / (peak x eta) = 5.1217e12 x 128 / (312e12 x 0.5)
    plan = estimator.plan_at("bert_760M", 128, "a100", 1, 1, eta=0.5)
    assert plan is not None
    assert plan.time_s == pytest.approx(5_121_748_500_480 * 128 / (312e12 * 0.5))
    assert plan.micro_batches == 1  # W + A x 128 fits 40 GB without accumulation


def test_two_gpu_cell_takes_dp_and_its_gradient_all_reduce(estimator: AgileEstimator):
    # DP on 2 A100s of one node: half the compute, plus the fp16 gradient all-reduce
    # 2*1*10us + 2*1/2 * 760e6*2 / 20e9 = 20us + 76 ms. TP would all-reduce 38.7 GB of
    # activations (1.9 s), so DP wins.
    plan = estimator.plan_at("bert_760M", 128, "a100", 2, 1, eta=0.5)
    assert plan is not None and plan.tp == (1,)
    compute = 5_121_748_500_480 * 128 / 2 / (312e12 * 0.5)
    assert plan.time_s == pytest.approx(compute + 20e-6 + 0.076)


def test_memory_fit_recovers_states_and_activations():
    # GB = W + A x batch / n with W = 5, A = 0.1: three loads recover both.
    points = [(256, 2, 5 + 0.1 * 128), (256, 4, 5 + 0.1 * 64), (512, 16, 5 + 0.1 * 32)]
    w, a = fit_memory(points)  # type: ignore[misc]
    assert (w, a) == (pytest.approx(5.0), pytest.approx(0.1))
    assert fit_memory([(256, 2, 10.0)]) is None  # one load: not identifiable


def test_dp_memory_points_come_from_the_one_strict_parse():
    parsed = memory_points(parse_dp_memory([{"bert_760M_128": [24.1, -1, 9.1, 6.9, -1]}]))
    assert parsed["bert760m"] == ((128, 1, 24.1), (128, 4, 9.1), (128, 8, 6.9))
    with pytest.raises(InputError, match="is not <model>_<global batch>"):
        parse_dp_memory({"bert": [1.0] * 5})
    with pytest.raises(InputError, match="expected 5 numbers"):
        parse_dp_memory({"bert_760M_128": ["x"] * 5})
    bundled = dp_memory_points()
    assert bundled == memory_points(builtin_dp_memory().needs)
    assert all(gb > 0 for points in bundled.values() for _, _, gb in points)


def test_partition_balances_flops_by_hand():
    # moe_1.3B: 16 layers of 3*s*(40h^2 + 4sh) = 3*1024*(23,592,960 + 3,145,728) = 82,141,249,536
    # FLOPs per sample; the last adds the output projection 6*s*h*V = 150,994,944,000 (1.84
    # layers). 17.84 layers in 4 stages: the largest stage holds 5 plain layers and the last
    # stage 3 layers + the projection (4.84).
    layer = 3 * 1024 * (40 * 768**2 + 4 * 1024 * 768)
    spec = model_spec("moe_1.3B")
    assert spec is not None and spec.layers[1].flops == pytest.approx(layer)
    assert spec.layers[-1].flops == pytest.approx(layer + 6 * 1024 * 768 * 32000)
    assert partition("moe_1.3B", 1) == ((0, 16),)
    bounds = partition("moe_1.3B", 4)
    assert bounds[0][0] == 0 and bounds[-1][1] == 16
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    assert bounds[-1] == (13, 16)
    largest = max(sum(x.flops for x in spec.layers[lo:hi]) for lo, hi in bounds)
    assert largest == pytest.approx(5 * layer)


@pytest.mark.parametrize("model", ["bert_760M", "moe_2.4B", "wide_resnet_2B"])
@pytest.mark.parametrize("stages", [2, 3])
def test_partition_minimises_the_largest_stage_as_brute_force_does(model: str, stages: int):
    spec = model_spec(model)
    assert spec is not None
    flops = [layer.flops for layer in spec.layers]
    n = len(flops)
    best = min(
        max(sum(flops[a:b]) for a, b in itertools.pairwise((0, *cuts, n)))
        for cuts in itertools.combinations(range(1, n), stages - 1)
    )
    got = max(sum(flops[lo:hi]) for lo, hi in partition(model, stages))
    assert got == pytest.approx(best)


# -- properties ---------------------------------------------------------------------------


@given(
    st.integers(1, 4).flatmap(
        lambda s: st.tuples(
            st.lists(st.floats(0.01, 10), min_size=2 * s, max_size=2 * s),
            st.lists(st.floats(0, 5), min_size=2 * s, max_size=2 * s),
            st.lists(st.booleans(), min_size=2 * s, max_size=2 * s),
            st.just(s),
        )
    ),
    st.integers(1, 16),
    st.floats(0, 3),
)
def test_assemble_equals_brute_force_over_the_2_to_the_s_plans(arrays, micro, fixed):
    times, syncs, fit, stages = arrays
    time_s = np.array(times).reshape(stages, 2)
    sync_s = np.array(syncs).reshape(stages, 2)
    fits = np.array(fit).reshape(stages, 2)
    brute = math.inf
    for plan in itertools.product(range(2), repeat=stages):
        if not all(fits[s, o] for s, o in enumerate(plan)):
            continue
        t = [time_s[s, o] for s, o in enumerate(plan)]
        y = [sync_s[s, o] for s, o in enumerate(plan)]
        brute = min(brute, sum(t) + fixed + (micro - 1) * max(t) + max(y))
    got = assemble(time_s, sync_s, fits, fixed, micro)
    if math.isinf(brute):
        assert got is None
    else:
        assert got is not None and got[0] == pytest.approx(brute)


MODELS = ["bert_760M", "bert_2.6B", "moe_690M", "moe_10B", "wide_resnet_1B", "wide_resnet_6.8B"]


@given(
    st.sampled_from(MODELS),
    st.sampled_from([128, 256, 512, 1024]),
    st.sampled_from(sorted(GPU_SPECS)),
    st.sampled_from([1, 2, 4, 8, 16, 32]),
)
def test_no_estimate_beats_the_peak_flops_bound(model, batch, gpu_type, gpus):
    est = _shared().best(model, batch, gpu_type, gpus)
    if est is not None:
        assert est[1].time_s >= peak_bound_s(model, batch, gpu_type, gpus) * (1 - 1e-9)


def test_more_stages_never_help_without_communication_where_one_stage_fits():
    # With free communication a pipeline only adds its fill and drain (§5.1's first
    # micro-batch term), so where the one-stage Cell fits, no deeper pipeline is faster.
    # (With real links it can be: a pipeline all-reduces fewer gradients per GPU.)
    free = {
        t: replace(g, intra_gb_s=1e12, inter_gb_s=1e12, intra_latency_s=0, inter_latency_s=0)
        for t, g in GPU_SPECS.items()
    }
    est = AgileEstimator(gpus=free)
    checked = 0
    for model, batch, gpu_type, gpus in [
        ("bert_760M", 256, "a100", 4),
        ("bert_1.3B", 256, "a40", 8),
        ("moe_2.4B", 512, "v100", 16),
        ("wide_resnet_500M", 256, "a10", 8),
    ]:
        one = est.estimate(model, batch, gpu_type, gpus, 1)
        assert one is not None
        for s in stage_counts(gpus)[1:]:
            deeper = est.estimate(model, batch, gpu_type, gpus, s)
            if deeper is not None:
                checked += 1
                assert deeper.time_s >= one.time_s * (1 - 1e-9)
    assert checked >= 8


def test_a_pipeline_can_help_when_gradients_dominate(estimator: AgileEstimator):
    # ... and with the real links it sometimes does (the property above is only true without them).
    helped = [
        key
        for key in [
            ("wide_resnet_6.8B", 512, "a40", 16),
            ("moe_10B", 1024, "a40", 16),
            ("bert_2.6B", 512, "a10", 8),
        ]
        if (best := estimator.best(*key)) is not None and best[0] > 1
    ]
    assert helped


def test_cells_that_do_not_fit_in_memory_are_reported_as_such():
    tiny = {t: replace(g, mem_gb=2.0) for t, g in GPU_SPECS.items()}
    assert AgileEstimator(gpus=tiny).estimate("bert_760M", 256, "a100", 4, 1) is None
    # bert_6.7B's model states alone (about 48 GB) do not fit one 24 GB A10 under any plan.
    est = AgileEstimator()
    assert est.estimate("bert_6.7B", 128, "a10", 1, 1) is None
    plan = est.estimate("bert_760M", 128, "a100", 4, 2)
    assert plan is not None
    assert all(1.2 * gb <= 0.8 * 40 for gb in plan.memory_gb)


def test_the_estimate_never_reads_the_key_it_estimates():
    table = builtin_crius()
    key = ("bert_1.3B", 256, "a100", 4)
    changed = CriusTable.of(
        replace(r, iter_time_s=(r.iter_time_s or 1.0) * 7)
        if (r.model, r.batch_size, r.gpu_type, r.gpus) == key
        else r
        for r in table.records
    )
    before = AgileEstimator(table).estimate(*key, 1)
    after = AgileEstimator(changed).estimate(*key, 1)
    assert before is not None and after is not None and before.time_s == after.time_s
    # ... while the same change moves a neighbour's estimate (the data is used).
    near = ("bert_1.3B", 256, "a100", 2)
    assert AgileEstimator(table).estimate(*near, 1) != AgileEstimator(changed).estimate(*near, 1)


def test_tuned_plan_lies_in_the_favoured_half(estimator: AgileEstimator):
    checked = 0
    for model, batch, gpu_type, gpus, stages in [
        ("bert_760M", 256, "a100", 4, 1),
        ("wide_resnet_6.8B", 512, "a40", 16, 2),
        ("moe_10B", 512, "v100", 16, 1),
        ("bert_2.6B", 512, "a40", 8, 2),
    ]:
        est = estimator.estimate(model, batch, gpu_type, gpus, stages)
        tuned = estimator.tuned(model, batch, gpu_type, gpus, stages)
        if est is None or tuned is None:
            continue
        k = gpus // stages
        tp_favoured = 2 * sum(t > 1 for t in est.tp) > len(est.tp)
        t = tuned[0]
        # the favoured half reaches the degree next to sqrt(k) on the other side
        assert (t >= math.sqrt(k) / 2) if tp_favoured else (t <= 2 * math.sqrt(k))
        assert all(1.2 * gb <= 0.8 * GPU_SPECS[gpu_type].mem_gb for gb in tuned[1].memory_gb)
        checked += 1
    assert checked >= 3


def test_unknown_gpu_type_or_model_gives_no_estimate(estimator: AgileEstimator):
    assert estimator.estimate("bert_760M", 128, "h100", 2, 1) is None
    assert estimator.estimate("resnet50", 128, "a100", 2, 1) is None
    assert estimator.best("bert_760M", 128, "a100", 0) is None
    assert not estimator.knows("resnet50") and estimator.knows("bert__760M")


def test_gpu_spec_memory_table():
    assert {t: g.mem_gb for t, g in GPU_SPECS.items()} == {"a100": 40, "v100": 32, "a40": 48, "a10": 24}
    assert isinstance(GPU_SPECS["a40"], GpuSpec)


_SHARED: list[AgileEstimator] = []


def _shared() -> AgileEstimator:
    if not _SHARED:
        _SHARED.append(AgileEstimator())
    return _SHARED[0]
