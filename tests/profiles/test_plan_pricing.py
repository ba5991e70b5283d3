"""The plan pricer: Rubick's fitted model and memory check behind every candidate plan."""

from __future__ import annotations

import pytest

from planner.core.errors import InputError
from planner.core.execplan import ExecPlan, resolve
from profiles.plan_pricing import builtin_models, builtin_pricer, read_models


def _plan(gpus: int, batch: int, **kw) -> ExecPlan:
    return resolve(ExecPlan(**kw), gpus, batch)


def test_the_artifact_models_and_their_aliases_are_known():
    pricer = builtin_pricer()
    assert set(builtin_models()) == {"bert", "gpt2", "llama30", "llama7", "roberta", "t5", "vit"}
    assert pricer.model("LLaMA-2-7B").shape.name == "llama7"
    assert pricer.model("gpt2-xl").shape.name == "gpt2"
    assert pricer.model("resnet50") is None
    assert pricer.iteration_time_s("resnet50", _plan(1, 32)) is None


def test_a_plan_that_does_not_fit_gpu_memory_is_infeasible_and_zero_offload_makes_it_fit():
    pricer = builtin_pricer()
    # LLaMA-2-7B: 16 bytes per parameter of model states alone is ~100 GiB on one GPU.
    assert pricer.iteration_time_s("llama7", _plan(1, 8)) is None
    offload = _plan(1, 8, zero_stage=2, offload_optimizer=True, activation_checkpointing=True)
    assert pricer.iteration_time_s("llama7", offload, 1, 12.0) is not None
    # Without the memory check every plan has a time.
    assert builtin_pricer(gpu_mem_gb=None).iteration_time_s("llama7", _plan(1, 8)) is not None


def test_prices_follow_the_model_and_are_memoised():
    pricer = builtin_pricer()
    one = pricer.iteration_time_s("bert", _plan(1, 32))
    eight = pricer.iteration_time_s("bert", _plan(8, 32))
    assert one is not None and eight is not None and eight < one
    assert pricer.iteration_times("bert", [(_plan(8, 32), 1, None)]) == [eight]
    assert len(pricer._times) == 2
    # CPUs matter to ZeRO-Offload only: more CPU threads, a faster optimizer step.
    off = _plan(4, 32, zero_stage=2, offload_optimizer=True)
    slow, fast = pricer.iteration_times("bert", [(off, 1, 1.0), (off, 1, 8.0)])
    assert slow is not None and fast is not None and fast < slow
    assert pricer.iteration_time_s("bert", _plan(4, 32), 1, 1.0) == pricer.iteration_time_s(
        "bert", _plan(4, 32), 1, 8.0
    )


def test_a_bad_models_table_names_the_line():
    with pytest.raises(InputError, match=r"m\.csv:2: bad model row"):
        read_models("model,params_m,seq_len,hidden,layers,global_batch\nx,abc,1,1,1,1\n", "m.csv")
    with pytest.raises(InputError, match="no model rows"):
        read_models("model,params_m,seq_len,hidden,layers,global_batch\n", "m.csv")
