"""The CPU step model: the profiler's runs of ranks of CPU threads."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from planner.core.errors import InputError, ProfileError
from planner.core.execplan import ExecPlan
from profiles.perfmodel import cpu_step
from profiles.perfmodel.cpu_step import CpuStepParams, fit_cpu_step
from profiles.perfmodel.document import read_any
from profiles.perfmodel.fit import Measurement
from profiles.perfmodel.query import ModelShape, make_query
from profiles.profiler.runs import default_plan_samples

SHAPE = ModelShape(name="text-transformer", params=0.43776e6, seq_len=64, hidden=128, layers=2)
# Close to what benchmarks/tools/profiler_fit.py fits on 2 cores (seconds).
TRUTH = CpuStepParams(c_micro=1.8e-3, c_sample=2.1e-3, theta=0.47, c_sync=6.2e-3, c_share=2.7)


def query(ranks: int, threads: int, accum: int, batch: int = 16):
    plan = ExecPlan(grad_accum=accum) if accum > 1 else None
    return make_query(SHAPE, ranks, batch, plan, cpus_per_gpu=threads)


def truth(q) -> float:
    model = cpu_step.CpuStepModel({"texttransformer": cpu_step.CpuStepFit(SHAPE, TRUTH, 0)})
    return model.predict_many([q])[0]


def test_one_configuration_by_hand():
    # Two ranks of one thread on one node, accumulation 4, batch 16: micro-batch 2.
    q = query(2, 1, 4)
    expected = 4 * (1.8e-3 * (1 + 2.7) + 2.1e-3 * 2 / 1**0.47) + 6.2e-3
    assert truth(q) == pytest.approx(expected)
    # One rank of two threads: no sync, no sharing, the samples at 2^0.47 the speed.
    assert truth(query(1, 2, 1)) == pytest.approx(1.8e-3 + 2.1e-3 * 16 / 2**0.47)


def test_the_profilers_seven_default_samples_give_the_parameters_back():
    samples = default_plan_samples(2, offload=False)
    assert {s.threads for s in samples} == {1, 2} and {s.ranks for s in samples} == {1, 2}
    assert len({s.plan.grad_accum or 1 for s in samples}) >= 3  # what the five parameters need
    measured = [
        Measurement(q, truth(q), f"sample {s.label}")
        for s in samples
        for q in [query(s.ranks, s.threads, s.plan.grad_accum or 1)]
    ]
    model = fit_cpu_step(measured)
    assert model.rmsle is not None and model.rmsle < 1e-4
    others = [query(1, 2, 16), query(2, 1, 8), query(1, 1, 1, 32), query(2, 1, 16, 32)]
    for q, predicted in zip(others, model.predict_many(others), strict=True):
        assert predicted == pytest.approx(truth(q), rel=1e-3)


def test_the_document_round_trips_through_the_shared_reader():
    measured = [Measurement(q, truth(q)) for q in (query(r, t, a) for r, t, a in [(1, 1, 1), (2, 1, 1),
                (1, 2, 1), (1, 1, 4), (2, 1, 4), (1, 2, 4), (1, 1, 8)])]  # fmt: skip
    model = fit_cpu_step(measured)
    document = cpu_step.to_document(model, samples=7)
    back = read_any(json.dumps(document), "cs.json")
    assert isinstance(back, cpu_step.CpuStepModel)
    q = query(2, 1, 2)
    assert back.predict_many([q]) == pytest.approx(model.predict_many([q]))
    bad = json.loads(json.dumps(document))
    bad["models"]["texttransformer"]["theta"] = -1
    with pytest.raises(ProfileError, match=r"cs\.json.*theta"):
        read_any(bad, "cs.json")
    with pytest.raises(ProfileError, match="expected 'rubick' or 'cpu-step'"):
        read_any({**document, "model": "other"}, "cs.json")


def test_too_few_runs_another_model_and_tensor_parallelism_are_errors_naming_them():
    few = [Measurement(q, truth(q)) for q in (query(1, 1, 1), query(2, 1, 1))]
    with pytest.raises(InputError, match="'text-transformer' has 2 measured run"):
        fit_cpu_step(few)
    model = cpu_step.CpuStepModel({"texttransformer": cpu_step.CpuStepFit(SHAPE, TRUTH, 7)})
    other = make_query(ModelShape("bert", 340e6, 128, 1024, 24), 1, 16)
    with pytest.raises(InputError, match="'bert': not in this cpu-step fit"):
        model.predict_many([other])
    tp = make_query(SHAPE, 2, 16, ExecPlan(tp=2))
    with pytest.raises(InputError, match="data parallelism only"):
        model.predict_many([tp])
    assert np.isfinite(model.predict_many([query(1, 1, 1)])[0])


def test_a_zero_engines_cost_is_fitted_from_the_deepspeed_defaults_and_only_there():
    zero_truth = replace(TRUTH, c_zero=4.5e-3)
    model = cpu_step.CpuStepModel({"texttransformer": cpu_step.CpuStepFit(SHAPE, zero_truth, 0)})

    def ds_query(ranks, threads, plan, batch=16):
        return make_query(SHAPE, ranks, batch, plan, cpus_per_gpu=threads)

    # By hand, 2 ranks, accumulation 4, batch 16 (micro-batch 2): ZeRO-2 pays its engine cost at
    # every micro-step (partitioned gradients); ZeRO-1 once per iteration (whole gradients).
    t = zero_truth
    micro = t.c_micro * (1 + t.c_share) + t.c_sample * 2
    zero2 = model.predict_many([ds_query(2, 1, ExecPlan(zero_stage=2, grad_accum=4))])[0]
    assert zero2 == pytest.approx(4 * (micro + t.c_zero) + t.c_sync)
    zero1 = model.predict_many([ds_query(2, 1, ExecPlan(zero_stage=1, grad_accum=4))])[0]
    assert zero1 == pytest.approx(4 * micro + t.c_zero + t.c_sync)

    samples = default_plan_samples(2, offload=True)
    assert sum(s.plan.offload_optimizer for s in samples) == 3 and {s.plan.grad_accum for s in samples} > {4}
    measured = [
        Measurement(q, model.predict_many([q])[0], s.label)
        for s in samples
        for q in [ds_query(s.ranks, s.threads, s.plan)]
    ]
    fitted = fit_cpu_step(measured)
    assert fitted.models["texttransformer"].params.c_zero == pytest.approx(4.5e-3, rel=1e-2)
    others = [
        ds_query(2, 1, ExecPlan(zero_stage=1, grad_accum=2)),
        ds_query(1, 2, ExecPlan(zero_stage=2, offload_optimizer=True, grad_accum=8)),
        ds_query(2, 1, ExecPlan(zero_stage=2), batch=32),
        ds_query(1, 1, ExecPlan(grad_accum=2), batch=32),
    ]
    for q, predicted in zip(others, fitted.predict_many(others), strict=True):
        assert predicted == pytest.approx(model.predict_many([q])[0], rel=1e-2)
    # The document carries c_zero where it was fitted and reads back; a torch fit's has none.
    back = read_any(json.dumps(cpu_step.to_document(fitted)), "ds.json")
    assert back.predict_many(others) == pytest.approx(fitted.predict_many(others))
    torch_runs = [Measurement(q, truth(q)) for q in (query(r, t, a) for r, t, a in [(1, 1, 1), (2, 1, 1),
                  (1, 2, 1), (1, 1, 4), (2, 1, 4), (1, 2, 4), (1, 1, 8)])]  # fmt: skip
    entry = cpu_step.to_document(fit_cpu_step(torch_runs))["models"]["texttransformer"]
    assert "c_zero" not in entry and set(entry) >= {"c_micro", "c_sample", "theta", "c_sync", "c_share"}
