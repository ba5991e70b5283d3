"""Rubick's A800 measurements (profiles/perfmodel/rubick_measured.py) and the simulator's speed on them."""

import csv
from importlib import resources

import pytest

from planner.core.errors import InputError
from planner.core.execplan import ExecPlan, resolve
from planner.core.model import Assignment
from planner.sim.progress import SpeedModel
from profiles.perfmodel.query import Query
from profiles.perfmodel.rubick_measured import (
    GPU_TYPE,
    OFFLOAD_WITH_CHECKPOINTING,
    RubickMeasured,
    builtin_rubick_fit,
    builtin_rubick_measured,
    normal_placement,
    packed,
    parse_placements,
    plan_family,
)
from profiles.speed import measured_factor
from tests.builders import make_nodes, profiles, trace_job

M = builtin_rubick_measured()


def _rows():
    text = resources.files("profiles").joinpath("builtin/data/rubick/placements_decoded.csv").read_text()
    return list(csv.DictReader(text.splitlines()))


def _plan(gpus: int, batch: int, **fields) -> ExecPlan:
    return resolve(ExecPlan(**fields), gpus, batch)


def test_every_row_of_the_seven_models_is_read_and_answered_exactly():
    rows = [r for r in _rows() if r["model"] in ("vit", "roberta", "bert", "t5", "gpt2", "llama7", "llama30")]
    assert len(rows) == 512
    for r in rows:
        placement = tuple(int(c) for c in r["placement_code"])
        plan = ExecPlan(
            dp=int(r["dp"]),
            tp=int(r["tp"]),
            pp=int(r["pp"]),
            zero_stage=int(r["zero_stage"]),
            offload_optimizer=r["offload_optimizer"] == "1",
            activation_checkpointing=r["activation_checkpointing"] == "1",
        )
        found = M.time_s(r["model"], plan, placement)
        assert found is not None and found.how == "measured", r
        same = [
            float(o["iter_time_s"])
            for o in rows
            if (o["model"], o["exec_plan_code"], normal_placement(int(c) for c in o["placement_code"]))
            == (r["model"], r["exec_plan_code"], normal_placement(placement))
        ]
        assert found.time_s == pytest.approx(sum(same) / len(same))  # repeated rows: their mean


def test_bert_measured_values_and_placement_order_do_not_matter():
    # placements_decoded.csv: bert ga 8 GPUs on one node 0.157684 s, on 4+4 0.210016 s.
    assert M.time_s("bert", None, (8,)).time_s == pytest.approx(0.157684210526)
    assert M.time_s("bert", None, (4, 4)).time_s == pytest.approx(0.210015789474)
    assert M.time_s("bert", None, (2, 3, 3)) == M.time_s("bert", None, (3, 3, 2))


def test_an_unmeasured_placement_takes_the_nearest_one_with_the_same_plan_and_gpus():
    # bert ga on 8 GPUs was measured on 4 nodes only as 2+2+2+2: 3+3+1+1 is 4 GPUs away
    # from it with the same node count, so it answers (not 4+2+2, one node fewer).
    found = M.time_s("bert", None, (3, 3, 1, 1))
    assert found is not None and found.how == "nearest" and found.placement == (2, 2, 2, 2)
    assert found.time_s == M.time_s("bert", None, (2, 2, 2, 2)).time_s


def _fit(model: str, plan: ExecPlan, nodes: int = 1) -> float:
    query = Query(model=M.shapes[model], plan=plan, nodes=nodes, gpu_type=GPU_TYPE)
    t = builtin_rubick_fit().iteration_time_s(query)
    assert t is not None
    return t


@pytest.mark.slow  # a long property/simulation check: CI, not --fast
def test_an_unmeasured_plan_is_the_fit_scaled_by_its_error_at_the_nearest_measured_one():
    plan = _plan(2, 32, zero_stage=2, activation_checkpointing=True)  # ZeRO-DP + GC: never measured
    found = M.lookup("bert", plan, (2,))
    # Nearest: same 2 GPUs and 2 x 1 x 1 shape; gc and zero-dp each differ in one feature
    # (sharding, checkpointing), and gc comes first by name. Its 2-GPU run was on one node.
    assert found is not None and found.how == "scaled" and found.placement == (2,)
    gc = _plan(2, 32, activation_checkpointing=True)
    measured = M.lookup("bert", gc, (2,))
    assert measured is not None and measured.how == "measured"
    assert found.time_s == pytest.approx(_fit("bert", plan) * measured.time_s / _fit("bert", gc))
    # Without a fallback the same question has no answer.
    bare = RubickMeasured(M.times, M.batches, M.shapes)
    assert bare.lookup("bert", plan, (2,)) is None


@pytest.mark.slow  # a long property/simulation check: CI, not --fast
def test_a_zero_variant_of_a_measured_3d_plan_stays_near_its_measurement_not_the_fit():
    # LLaMA-30B 4 x 4 x 3 on 48 GPUs: measured 2.23 s, fitted 1.07 s. ZeRO-1 on the same
    # shape was never measured; its time follows the measurement, not the fit's 2x error.
    plain = M.lookup("llama30", _plan(48, 4, tp=4, pp=3), packed(48))
    zero1 = M.lookup("llama30", _plan(48, 4, tp=4, pp=3, zero_stage=1), packed(48))
    assert plain is not None and plain.how == "measured"
    assert zero1 is not None and zero1.how == "scaled" and zero1.placement == plain.placement
    assert _fit("llama30", _plan(48, 4, tp=4, pp=3), 6) < 0.6 * plain.time_s
    assert zero1.time_s == pytest.approx(plain.time_s, rel=0.05)


def test_the_offload_runs_checkpointing_is_what_the_anchor_plans_assume():
    offload = [r for r in _rows() if r["model"] in M.batches and r["offload_optimizer"] == "1"]
    seen = {(r["model"], r["activation_checkpointing"] == "1") for r in offload}
    assert seen == {(m, m in OFFLOAD_WITH_CHECKPOINTING) for m, _ in seen}
    assert {m for m, _ in seen} == set(M.batches) - {"llama30"}  # LLaMA-30B ran 3D plans only


def test_another_global_batch_is_not_read_from_the_measurements():
    assert M.time_s("bert", None, (8,), batch_size=64).how == "fitted"


def test_plan_families():
    assert plan_family(_plan(8, 32)) == ("ga", 8, 1, 1)
    assert plan_family(_plan(8, 32, grad_accum=2)) == ("ga", 8, 1, 1)  # accumulation is not compared
    assert plan_family(_plan(8, 32, activation_checkpointing=True)) == ("gc", 8, 1, 1)
    assert plan_family(_plan(8, 32, zero_stage=2)) == ("zero-dp", 8, 1, 1)
    off = plan_family(_plan(8, 32, zero_stage=2, offload_optimizer=True))
    assert off == plan_family(
        _plan(8, 32, zero_stage=2, offload_optimizer=True, activation_checkpointing=True)
    )
    assert plan_family(_plan(48, 4, tp=4, pp=3)) == ("ga", 4, 4, 3)
    assert plan_family(_plan(8, 32, zero_stage=1)) is None
    assert plan_family(_plan(8, 32, zero_stage=3)) is None
    assert plan_family(_plan(8, 8, tp=2, activation_checkpointing=True)) is None


def test_packed_reference_and_the_interface():
    assert packed(12) == (8, 4) and packed(8) == (8,) and packed(3) == (3,)
    plan = _plan(8, 32)
    a800 = Query(model=M.shapes["bert"], plan=plan, nodes=2, gpu_type="a800")
    assert M.iteration_time_s(a800) == M.time_s("bert", None, (4, 4)).time_s
    v100 = Query(model=M.shapes["bert"], plan=plan, nodes=2, gpu_type="v100")
    assert M.iteration_time_s(v100) is None
    assert M.knows("BERT") and not M.knows("resnet50") and not M.knows("bert", "v100")


def test_lookup_needs_a_plan_for_the_placements_gpus():
    with pytest.raises(InputError, match="resolved for the placement's 4 GPUs"):
        M.lookup("bert", _plan(8, 32), (4,))


def test_bad_measurement_files_name_line_and_column():
    header = "model,placement_code,gpus,dp,tp,pp,zero_stage,offload_optimizer,"
    header += "activation_checkpointing,iter_time_s\n"
    with pytest.raises(InputError, match=r"p.csv:3: column 'gpus': 6, but placement 44 has 8 GPUs"):
        parse_placements(header + "bert,8,8,8,1,1,0,0,0,0.1\nbert,44,6,6,1,1,0,0,0,0.1\n", "p.csv")
    with pytest.raises(InputError, match=r"p.csv:2: column 'placement_code': expected digits"):
        parse_placements(header + "bert,4+4,8,8,1,1,0,0,0,0.1\n", "p.csv")
    with pytest.raises(InputError, match=r"p.csv:2: column 'iter_time_s': expected a number"):
        parse_placements(header + "bert,8,8,8,1,1,0,0,0,fast\n", "p.csv")
    with pytest.raises(InputError, match=r"p.csv:1: missing column\(s\) iter_time_s"):
        parse_placements(header.replace(",iter_time_s", ""), "p.csv")


# -- the simulator's speed ------------------------------------------------------------------


def test_measured_factor_is_the_ratio_of_reference_to_current_time():
    t = lambda p, plan=None: M.time_s("bert", plan, p).time_s  # noqa: E731
    same = measured_factor(M, model="bert", batch_size=32, reference_gpus=8, reference_plan=None,
                           placement=(8,), plan=None)  # fmt: skip
    assert same == 1.0
    squeezed = measured_factor(M, model="bert", batch_size=32, reference_gpus=8, reference_plan=None,
                               placement=(2,), plan=None)  # fmt: skip
    assert squeezed == pytest.approx(t((8,)) / t((2,))) and squeezed < 1
    # A job submitted with ZeRO-Offload on 4 GPUs, reconfigured to plain DP there: faster.
    offload = {"zero_stage": 2, "offload_optimizer": True}
    faster = measured_factor(M, model="bert", batch_size=32, reference_gpus=4, reference_plan=offload,
                             placement=(4,), plan=None)  # fmt: skip
    assert faster == pytest.approx(t((4,), ExecPlan(zero_stage=2, offload_optimizer=True)) / t((4,)))
    assert faster > 1  # bert ZeRO-Offload on 4 GPUs 0.376 s, DP 0.226 s
    # Reference: requested GPUs packed 8 per node (16 GPUs = 8 + 8).
    llama = {"pp": 1, "tp": 8, "dp": 2}
    spread = measured_factor(M, model="llama7", batch_size=8, reference_gpus=16, reference_plan=llama,
                             placement=(4, 4, 4, 4), plan=llama)  # fmt: skip
    p = ExecPlan(tp=8, dp=2)
    assert spread == pytest.approx(t_llama(p, (8, 8)) / t_llama(p, (4, 4, 4, 4)))
    assert measured_factor(M, model="resnet50", batch_size=32, reference_gpus=1, reference_plan=None,
                           placement=(1,), plan=None) is None  # fmt: skip


def t_llama(plan, placement):
    return M.time_s("llama7", plan, placement).time_s


def _assignment(per_node, plan=None):
    return Assignment(tuple((f"n{i + 1}", k) for i, n in enumerate(per_node) for k in range(n)), 0, 0.0, plan)


def test_the_simulator_runs_a800_jobs_at_the_measured_ratio_and_others_as_before():
    a800 = {n.name: n for n in make_nodes(4, gpus=8, gpu_type="a800", cpus=96, mem_gb=1600)}
    v100 = {n.name: n for n in make_nodes(4, gpus=8, gpu_type="v100", cpus=96, mem_gb=1600)}
    job = trace_job("b", gpus=8, model="bert", batch_size=32, gpu_type="a800")
    spread = _assignment((4, 4))
    for bare in (spread, _assignment((2,)), _assignment((8,), {"zero_stage": 2})):
        a = Assignment(bare.gpus, 12 * bare.num_gpus, 200.0 * bare.num_gpus, bare.plan)
        expected = measured_factor(M, model="bert", batch_size=32, reference_gpus=8, reference_plan=None,
                                   placement=[c for _, c in a.per_node], plan=a.plan)  # fmt: skip
        assert SpeedModel(profiles(), a800).speed(job, a) == pytest.approx(expected)
    # The same job on V100s (its trace row names no type): the measurements are not used.
    other = trace_job("b", gpus=8, model="bert", batch_size=32)
    a = Assignment(spread.gpus, 96, 1600.0)
    empty = RubickMeasured({}, {}, {})
    assert SpeedModel(profiles(), v100).speed(other, a) == SpeedModel(profiles(), v100, measured=empty).speed(
        other, a
    )
