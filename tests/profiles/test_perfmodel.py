"""Rubick's performance model (§4): its terms, its fit, the memory check and the table model."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.core.errors import InputError, ProfileError
from planner.core.execplan import ExecPlan
from profiles.perfmodel import (
    Environment,
    FitOptions,
    MeasuredTable,
    Measurement,
    ModelShape,
    PerfParams,
    fit_perfmodel,
    fits,
    iteration_breakdown,
    make_query,
    memory_estimate,
    overlap,
    plan_label,
)
from profiles.perfmodel.csvio import parse_table
from profiles.perfmodel.document import FORMAT, from_document, to_document
from profiles.perfmodel.fit import family, leave_one_out

DATA = Path(__file__).resolve().parents[2] / "profiles" / "builtin" / "data" / "rubick"
ENV = Environment()
BERT = ModelShape("bert", params=336e6, seq_len=512, hidden=1024, layers=24)
GPT2 = ModelShape("gpt2", params=1558e6, seq_len=1024, hidden=1600, layers=48)
LLAMA30 = ModelShape("llama30", params=33.2e9, seq_len=2048, hidden=6656, layers=60)
# Roughly what the bundled samples give (seconds, parameters, threads).
PARAMS = PerfParams(k_bwd=2.0, k_sync=1.5, k_opt=3e-11, k_opt_off=3e-9, k_off=1.2, k_swap=1.3, k_const=0.05)
RATE = 60e12

DP = ExecPlan()
ZERO2 = ExecPlan(zero_stage=2)
OFFLOAD = ExecPlan(zero_stage=2, offload_optimizer=True)
GC = ExecPlan(activation_checkpointing=True)


def predict(shape, gpus, plan=DP, batch=32, nodes=1, cpus=None, params=PARAMS, rate=RATE):
    query = make_query(shape, gpus, batch, plan, nodes=nodes, cpus_per_gpu=cpus)
    return iteration_breakdown(query, params, rate, ENV)


# -- the overlap function (§4.3) --------------------------------------------------------

times = st.floats(min_value=0.0, max_value=100.0)


@given(times, times, st.floats(min_value=1.0, max_value=200.0))
def test_overlap_lies_between_max_and_sum_and_is_symmetric(x, y, k):
    f = float(overlap(np.array(x), np.array(y), np.array(k)))
    assert max(x, y) - 1e-9 <= f <= x + y + 1e-9
    assert f == pytest.approx(float(overlap(np.array(y), np.array(x), np.array(k))))


def test_overlap_is_the_sum_at_k_1_and_tends_to_the_max():
    x, y = np.array(3.0), np.array(4.0)
    assert float(overlap(x, y, np.array(1.0))) == pytest.approx(7.0)
    assert float(overlap(x, y, np.array(2.0))) == pytest.approx(5.0)  # (9 + 16)^(1/2)
    assert float(overlap(x, y, np.array(500.0))) == pytest.approx(4.0, rel=1e-3)
    assert float(overlap(np.array(0.0), np.array(0.0), np.array(3.0))) == 0.0


# -- the terms (§4.1, §4.2) ---------------------------------------------------------------


@given(st.sampled_from([1, 2, 4, 8, 16, 32]), st.sampled_from([BERT, GPT2]), st.booleans())
def test_more_gpus_never_increase_compute_per_iteration_at_a_fixed_global_batch(gpus, shape, gc):
    plan = replace(DP, activation_checkpointing=gc)
    batch = 64
    fewer = predict(shape, gpus, plan, batch)
    more = predict(shape, 2 * gpus, plan, batch, nodes=1 if 2 * gpus <= 8 else 2 * gpus // 8)
    assert more.t_fwd + more.t_bwd <= fewer.t_fwd + fewer.t_bwd
    # Data parallelism halves the per-GPU batch: compute halves exactly (§4.1, linear scaling).
    assert more.t_fwd == pytest.approx(fewer.t_fwd / 2)


def test_the_forward_time_is_flops_over_the_rate_scaled_to_the_micro_batch():
    b = predict(BERT, 4, DP, batch=32)
    assert b.t_fwd == pytest.approx(8 * BERT.forward_flops_per_sample() / RATE)
    assert b.t_bwd == pytest.approx(PARAMS.k_bwd * b.t_fwd)


def test_gradient_accumulation_runs_every_micro_batch_and_overlaps_only_the_last():
    one = predict(GPT2, 2, ZERO2, batch=16)
    four = predict(GPT2, 2, replace(ZERO2, grad_accum=4), batch=16)
    # Same samples per GPU, so the same compute; less of the backward hides the sync.
    assert four.t_fwd == pytest.approx(one.t_fwd)
    assert four.t_cc >= one.t_cc


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_activation_checkpointing_adds_one_forward_of_recompute(gpus):
    plain, gc = predict(BERT, gpus, DP), predict(BERT, gpus, GC)
    assert gc.t_fwd == pytest.approx(plain.t_fwd)
    assert gc.t_bwd - plain.t_bwd == pytest.approx(plain.t_fwd)
    assert gc.total > plain.total


def test_one_gpu_has_no_gradient_sync_and_more_gpus_do():
    assert predict(BERT, 1).t_comm_dp == 0.0
    two, eight = predict(BERT, 2), predict(BERT, 8)
    assert 0 < two.t_comm_dp < eight.t_comm_dp  # ring all-reduce: 2(d-1)/d of the gradients
    assert eight.t_comm_dp == pytest.approx(BERT.params * 2 * 2 * 7 / 8 / (ENV.intra_gb_s * 1e9))


def test_a_data_parallel_group_across_nodes_syncs_over_the_slower_network():
    inside, across = predict(BERT, 8, nodes=1), predict(BERT, 8, nodes=2)
    assert across.t_comm_dp > inside.t_comm_dp


@given(st.sampled_from([1, 2, 4, 8]), st.integers(min_value=1, max_value=15))
def test_offload_adds_cpu_bound_time_that_shrinks_with_more_cpus(gpus, cpus):
    zero = predict(BERT, gpus, ZERO2)
    fewer = predict(BERT, gpus, OFFLOAD, cpus=cpus)
    more = predict(BERT, gpus, OFFLOAD, cpus=cpus + 1)
    assert fewer.total > zero.total  # the optimizer step on the CPU, and the copies
    assert more.t_opt < fewer.t_opt and more.total < fewer.total
    # k_opt_off·P/(d·c) (§4.2)
    assert fewer.t_opt == pytest.approx(PARAMS.k_opt_off * BERT.params / (gpus * cpus))
    assert fewer.t_off > 0 and zero.t_off == 0


def test_zero_partitions_the_optimizer_step_over_the_data_parallel_ranks():
    assert predict(GPT2, 8, ZERO2).t_opt == pytest.approx(predict(GPT2, 8, DP).t_opt / 8)


def test_tensor_and_pipeline_parallelism_split_the_model_and_pay_traffic():
    tp = predict(GPT2, 4, ExecPlan(tp=4), batch=16)
    dp1 = predict(GPT2, 1, DP, batch=16)
    assert tp.t_fwd == pytest.approx(dp1.t_fwd / 4) and tp.t_comm_tp > 0 and tp.t_comm_dp == 0
    # One micro-batch through 4 stages: a quarter of the layers each, run one after another.
    pp = predict(GPT2, 4, ExecPlan(pp=4), batch=16, nodes=4)
    assert pp.t_fwd == pytest.approx(dp1.t_fwd) and pp.t_comm_pp > 0
    # More micro-batches fill the pipeline: (m + p - 1)/p of one pass per micro-batch.
    filled = predict(GPT2, 4, ExecPlan(pp=4, grad_accum=16), batch=16, nodes=4)
    assert filled.t_fwd == pytest.approx(dp1.t_fwd * (16 + 3) / (4 * 16))


def test_query_rules_name_the_model():
    with pytest.raises(InputError, match=r"'bert'.*cpus_per_gpu"):
        make_query(BERT, 2, 32, OFFLOAD)
    with pytest.raises(InputError, match="spread evenly"):
        make_query(BERT, 6, 36, DP, nodes=4)
    with pytest.raises(InputError, match="seq_len"):
        ModelShape("m", params=1e6, seq_len=0, hidden=8, layers=1)


@pytest.mark.parametrize(
    ("plan", "label"),
    [
        (DP, "DP"),
        (GC, "DP+GC"),
        (replace(ZERO2, grad_accum=2), "ZeRO-DP+GA"),
        (replace(OFFLOAD, activation_checkpointing=True), "ZeRO-Offload+GC"),
        (ExecPlan(tp=4, pp=2), "TP+PP"),
        (ExecPlan(tp=2, pp=2), "DP+TP+PP"),
    ],
)
def test_plan_labels_follow_rubicks_table_2(plan, label):
    assert plan_label(make_query(GPT2, 8, 16, plan, cpus_per_gpu=4).plan) == label


# -- memory --------------------------------------------------------------------------------


def test_a_plan_that_cannot_fit_the_gpu_is_infeasible():
    # 33 B parameters: 16 bytes each of weights, gradients and Adam states on one GPU.
    alone = make_query(LLAMA30, 1, 4, DP)
    assert memory_estimate(alone).total_gb > 400
    assert not fits(alone, 80.0)
    sharded = make_query(LLAMA30, 64, 4, ExecPlan(tp=8, pp=8), nodes=8)
    assert fits(sharded, 80.0)


def test_zero_offload_and_checkpointing_each_lower_the_memory():
    def total(plan, gpus=8):
        return memory_estimate(make_query(GPT2, gpus, 16, plan, cpus_per_gpu=4)).total_gb

    assert total(ExecPlan(zero_stage=3)) < total(ExecPlan(zero_stage=2)) < total(ExecPlan(zero_stage=1))
    assert total(ExecPlan(zero_stage=1)) < total(DP)
    assert total(OFFLOAD) < total(ZERO2)
    assert total(GC, gpus=2) < total(DP, gpus=2)


def test_stored_attention_scores_are_counted_only_when_asked():
    q = make_query(GPT2, 2, 16, DP)
    assert memory_estimate(q, attention_scores=True).activations_gb > memory_estimate(q).activations_gb


@pytest.mark.parametrize("name", ["samples.csv", "validation.csv"])
def test_every_measured_configuration_fits_an_80_gb_gpu(name):
    table = parse_table((DATA / name).read_text(), name, require_time=True)
    assert [r.source for r in table.rows if not fits(r.query, 80.0)] == []


# -- the fit (§4.3) ------------------------------------------------------------------------

TRUE_RATES = {"bert": 50e12, "gpt2": 80e12}
TRUE_PARAMS = {
    "bert": replace(PARAMS, k_bwd=2.5, k_opt_off=3e-9, k_const=0.04),
    "gpt2": replace(PARAMS, k_bwd=2.5, k_opt_off=5e-9, k_const=0.09),
}
SYNTHETIC_PLANS = [(DP, None), (GC, None), (ZERO2, None), (OFFLOAD, 4), (OFFLOAD, 8)]


def synthetic(shape, gpus_list=(1, 2, 4, 8)):
    out = []
    for gpus in gpus_list:
        for plan, cpus in SYNTHETIC_PLANS:
            q = make_query(shape, gpus, 16, plan, cpus_per_gpu=cpus)
            t = iteration_breakdown(q, TRUE_PARAMS[shape.name], TRUE_RATES[shape.name], ENV).total
            out.append(Measurement(q, t, f"{shape.name}/{gpus}/{plan_label(q.plan)}"))
    return out


def test_the_fit_recovers_the_parameters_that_generated_the_samples():
    samples = synthetic(BERT) + synthetic(GPT2)
    model = fit_perfmodel(samples, FitOptions(k_bwd_prior_weight=0.0, pooling=1e-4, rate_pooling=1e-4))
    assert model.rmsle is not None and model.rmsle < 1e-3
    for name, shape in (("bert", BERT), ("gpt2", GPT2)):
        fitted = model.model_fit(name)
        assert fitted is not None and fitted.samples == 4 * len(SYNTHETIC_PLANS)
        assert fitted.rate == pytest.approx(TRUE_RATES[name], rel=0.02)
        assert fitted.params.k_bwd == pytest.approx(2.5, rel=0.02)
        assert fitted.params.k_opt_off == pytest.approx(TRUE_PARAMS[name].k_opt_off, rel=0.05)
        assert fitted.params.k_const == pytest.approx(TRUE_PARAMS[name].k_const, rel=0.05)
        # Configurations the fit never saw: 16 GPUs on two nodes, 3 CPUs per GPU.
        for plan, cpus in ((DP, None), (OFFLOAD, 3)):
            q = make_query(shape, 16, 16, plan, nodes=2, cpus_per_gpu=cpus)
            truth = iteration_breakdown(q, TRUE_PARAMS[name], TRUE_RATES[name], ENV).total
            assert model.iteration_time_s(q) == pytest.approx(truth, rel=0.01)


def test_the_fit_is_deterministic():
    samples = synthetic(BERT)
    assert fit_perfmodel(samples) == fit_perfmodel(samples)


def test_a_model_without_samples_gets_the_shared_parameters():
    model = fit_perfmodel(synthetic(BERT) + synthetic(GPT2))
    q = make_query(LLAMA30, 64, 4, ExecPlan(tp=8, pp=8), nodes=8)
    assert model.model_fit("llama30") is None
    assert model.parameters_for("llama30") == (model.shared, model.shared_rate)
    t = model.iteration_time_s(q)
    assert t is not None and t > 0


def test_family_is_the_name_without_its_trailing_size():
    assert family("llama7") == family("LLaMA-30B") == family("llama30") == "llama"
    assert family("gpt2") == "gpt" and family("bert") == "bert" != family("roberta")
    assert family("7b") == "7b"  # all size: its own family


def test_a_model_without_samples_gets_its_fitted_family_members_parameters():
    llama7 = replace(LLAMA30, name="llama7", params=6.7e9, hidden=4096, layers=32)
    model = fit_perfmodel(
        synthetic(BERT) + [replace(m, query=replace(m.query, model=llama7)) for m in synthetic(GPT2)]
    )
    sibling = model.model_fit("llama7")
    assert sibling is not None and model.model_fit("llama30") is None
    assert model.family_fit("llama30") is sibling
    assert model.parameters_for("llama30") == (sibling.params, sibling.rate)
    assert (sibling.params, sibling.rate) != (model.shared, model.shared_rate)
    q = make_query(LLAMA30, 64, 4, ExecPlan(tp=8, pp=8), nodes=8)
    assert model.iteration_time_s(q, fwd_time_s=0.5) == pytest.approx(
        iteration_breakdown(q, sibling.params, sibling.rate, ENV, 0.5).total
    )
    assert model.predict_many([q], [0.5])[0] == pytest.approx(model.iteration_time_s(q, 0.5))
    # Without a profiled forward time (the plan pricer's queries) the shared parameters: the
    # samples' evidence for the sibling holds only with forward times given.
    assert model.parameters_for("llama30", forward_given=False) == (model.shared, model.shared_rate)
    assert model.iteration_time_s(q) == pytest.approx(
        iteration_breakdown(q, model.shared, model.shared_rate, ENV).total
    )
    assert model.predict_many([q])[0] == pytest.approx(model.iteration_time_s(q))
    # Switched off, or for a model of another family, the shared parameters as before.
    unshared = replace(model, family_sharing=False)
    assert unshared.parameters_for("llama30") == (model.shared, model.shared_rate)
    assert model.parameters_for("t5") == (model.shared, model.shared_rate)


def test_the_fit_needs_seven_samples_and_one_shape_per_model():
    with pytest.raises(InputError, match="at least 7"):
        fit_perfmodel(synthetic(BERT)[:6])
    other = replace(BERT, layers=12)
    odd = Measurement(make_query(other, 2, 16, DP), 0.2, "file.csv:9")
    with pytest.raises(InputError, match=r"file.csv:9: model 'bert' has layers 12, but 24 in bert/1/DP"):
        fit_perfmodel([*synthetic(BERT), odd])


def test_a_model_with_gpu_memory_calls_an_oversized_plan_infeasible():
    model = fit_perfmodel(synthetic(BERT)).with_gpu_memory(80.0)
    assert model.iteration_time_s(make_query(LLAMA30, 1, 4, DP)) is None
    assert model.iteration_time_s(make_query(BERT, 8, 32, DP)) is not None


# -- the document ---------------------------------------------------------------------------


def test_the_document_round_trips_and_predicts_the_same():
    model = fit_perfmodel(synthetic(BERT) + synthetic(GPT2))
    document = to_document(model, samples=40)
    assert document["format"] == FORMAT and document["fit"]["samples"] == 40
    again = from_document(document)
    q = make_query(GPT2, 4, 16, OFFLOAD, cpus_per_gpu=4)
    assert again.iteration_time_s(q) == pytest.approx(model.iteration_time_s(q), rel=1e-12)
    assert set(again.models) == {"bert", "gpt2"}


def test_the_document_names_what_is_wrong():
    document = to_document(fit_perfmodel(synthetic(BERT)))
    with pytest.raises(ProfileError, match="key 'format'"):
        from_document({**document, "format": "mosaic-perfmodel/2"})
    broken = {**document, "shared": {**document["shared"], "k_sync": 0.5}}
    with pytest.raises(ProfileError, match="shared: key 'k_sync'"):
        from_document(broken, "params.json")
    with pytest.raises(ProfileError, match="unknown key 'extra'"):
        from_document({**document, "extra": 1})


# -- the table model -------------------------------------------------------------------------


def test_the_table_answers_exactly_what_was_measured():
    a = make_query(BERT, 2, 32, DP)
    b = make_query(BERT, 4, 32, DP)
    table = MeasuredTable.of([Measurement(a, 0.36), Measurement(a, 0.38), Measurement(b, 0.22)])
    assert len(table) == 2
    assert table.iteration_time_s(a) == pytest.approx(0.37)
    assert table.iteration_time_s(b) == 0.22
    assert table.iteration_time_s(make_query(BERT, 8, 32, DP)) is None
    assert table.iteration_time_s(make_query(BERT, 2, 32, GC)) is None
    assert table.iteration_time_s(make_query(GPT2, 2, 32, DP)) is None


def test_the_bundled_samples_fit_to_a_few_per_cent():
    table = parse_table((DATA / "samples.csv").read_text(), "samples.csv", require_time=True)
    model = fit_perfmodel([r.measurement() for r in table.rows])
    # The samples' own forward times are inputs, so a sample whose forward time disagrees
    # with its model's others cannot be bent into place: T5's data-parallel rows (2 GPUs:
    # forward 0.08 s, its ZeRO-Offload row 0.176 s) are off by 15-26 %, hence the RMSLE.
    assert len(table.rows) == 34 and model.rmsle is not None and model.rmsle < 0.08
    assert all(math.isfinite(f.rate) for f in model.models.values())
    rows = [r for r in table.rows if r.query.model.name in ("bert", "llama7", "roberta", "vit")]
    predicted = model.predict_many([r.query for r in rows], [r.fwd_time_s for r in rows])
    assert len(rows) == 23
    assert all(abs(p / r.iter_time_s - 1) < 0.07 for r, p in zip(rows, predicted, strict=True))


# -- profiled forward times ------------------------------------------------------------


def test_a_profiled_forward_time_replaces_the_rate_based_estimate():
    q = make_query(GPT2, 16, 16, ExecPlan(tp=8, pp=2), nodes=2)
    estimated = iteration_breakdown(q, PARAMS, RATE, ENV)
    given = iteration_breakdown(q, PARAMS, RATE, ENV, fwd_time_s=0.3)
    assert given.t_fwd == 0.3 and given.t_bwd == pytest.approx(PARAMS.k_bwd * 0.3)
    # Communication and the optimizer step do not depend on the forward time.
    assert (given.t_comm_tp, given.t_comm_pp, given.t_opt) == (
        estimated.t_comm_tp,
        estimated.t_comm_pp,
        estimated.t_opt,
    )
    assert given.total != estimated.total
    with pytest.raises(InputError, match="forward time"):
        iteration_breakdown(q, PARAMS, RATE, ENV, fwd_time_s=-1.0)


def test_the_fit_calibrates_the_rate_on_measured_forward_times():
    # The iteration times say nothing about the rate here (every sample gives its forward
    # time as input); the forward times alone pin it down.
    samples = []
    for m in synthetic(BERT):
        truth = iteration_breakdown(m.query, TRUE_PARAMS["bert"], TRUE_RATES["bert"], ENV)
        samples.append(replace(m, fwd_time_s=truth.t_fwd))
    options = FitOptions(
        k_bwd_prior_weight=0.0, pooling=1e-4, rate_pooling=1e-4, fwd_weight=1.0, fwd_as_input=True
    )
    model = fit_perfmodel(samples, options)
    fitted = model.model_fit("bert")
    assert fitted is not None and fitted.rate == pytest.approx(TRUE_RATES["bert"], rel=0.02)
    assert fitted.params.k_bwd == pytest.approx(2.5, rel=0.02)


def test_a_forward_time_must_be_below_the_iteration_time():
    q = make_query(BERT, 2, 32, DP)
    with pytest.raises(InputError, match="fwd_time_s"):
        Measurement(q, 0.3, "file.csv:2", fwd_time_s=0.4)
    header = "model,params_m,global_batch,seq_len,hidden,layers,gpus,iter_time_s,fwd_time_s\n"
    with pytest.raises(InputError, match=r"x\.csv:2: column 'fwd_time_s'"):
        parse_table(header + "bert,336,32,512,1024,24,2,0.3,0.5\n", "x.csv", require_time=True)
    row = parse_table(header + "bert,336,32,512,1024,24,2,0.3,0.1\n", "x.csv", require_time=True).rows[0]
    assert row.fwd_time_s == 0.1 and row.measurement().fwd_time_s == 0.1


def test_the_bundled_files_carry_profiled_forward_times():
    samples = parse_table((DATA / "samples.csv").read_text(), "samples.csv", require_time=True).rows
    validation = parse_table((DATA / "validation.csv").read_text(), "validation.csv", require_time=True).rows
    # Every sample but t5's row 2 (a 4 ms forward, left out as implausible).
    assert sum(r.fwd_time_s is None for r in samples) == 1
    # Validation: every point carries the forward time the artifact's validate scripts
    # feed the model for it (31 profiled 3D configurations, 68 data-parallel points).
    assert all(r.fwd_time_s is not None and r.fwd_time_s > 0 for r in validation)
    assert sum(r.query.plan.tp * r.query.plan.pp > 1 for r in validation) == 31
    by_source = {
        r.cells["source"].split("#")[1]: r.fwd_time_s for r in validation if r.query.model.name == "gpt2"
    }
    # GPT-2 ZeRO-DP+GA: the per-micro-batch forward times the accumulation steps.
    assert by_source["ZeRO-DP+GA[result_1]"] == pytest.approx(1.1)
    assert by_source["ZeRO-DP+GA[result_2]"] == pytest.approx(0.55)


# -- the physical floor of a forward time, warm starts, leave-one-out ---------------------


def test_a_forward_time_below_the_physical_floor_is_not_used():
    llama7 = ModelShape("llama7", params=6738e6, seq_len=2048, hidden=4096, layers=32)
    q = make_query(llama7, 1, 8, OFFLOAD, cpus_per_gpu=4)
    # 8 samples x 24·s·l·h²·(1 + s/6h) FLOPs at 312 TFLOP/s: about 0.73 s at the least.
    floor = 8 * llama7.forward_flops_per_sample() / 312e12
    assert 0.7 < floor < 0.76
    estimated = iteration_breakdown(q, PARAMS, RATE, ENV)
    assert iteration_breakdown(q, PARAMS, RATE, ENV, fwd_time_s=0.003) == estimated
    assert iteration_breakdown(q, PARAMS, RATE, ENV, fwd_time_s=1.01 * floor).t_fwd == 1.01 * floor
    model = fit_perfmodel(synthetic(BERT))
    assert model.unusable_forwards([q, q, q], [0.003, None, 3.0]) == [0]


def test_a_warm_started_fit_lands_where_the_cold_one_did():
    samples = synthetic(BERT) + synthetic(GPT2)
    cold = fit_perfmodel(samples)
    warm = fit_perfmodel(samples, start=cold)
    assert warm.rmsle == pytest.approx(cold.rmsle, abs=1e-6)
    for name in ("bert", "gpt2"):
        a, b = cold.model_fit(name), warm.model_fit(name)
        assert a is not None and b is not None
        assert b.params.k_bwd == pytest.approx(a.params.k_bwd, rel=1e-3)
        assert b.rate == pytest.approx(a.rate, rel=1e-3)


def test_leave_one_out_predicts_each_noiseless_sample_from_the_others():
    samples = synthetic(BERT, gpus_list=(1, 2, 4))
    errors = leave_one_out(samples, FitOptions(pooling=1e-4, rate_pooling=1e-4, k_bwd_prior_weight=0.0))
    assert len(errors) == len(samples)
    assert max(errors) < 0.01
    # A sample whose time disagrees with the rest is badly predicted from them.
    odd = [*samples[:-1], replace(samples[-1], iter_time_s=2 * samples[-1].iter_time_s)]
    assert leave_one_out(odd)[-1] > 0.3


def test_pooling_weights_name_known_parameters():
    with pytest.raises(InputError, match="unknown parameter"):
        FitOptions(pooling_by=(("k_fwd", 1.0),))
    with pytest.raises(InputError, match="pooling weight of k_bwd"):
        FitOptions(pooling_by=(("k_bwd", -1.0),))
