"""Rubick's workloads -> Mosaic traces (planner/traces/rubick.py), the bundled conversions and the cluster."""

from __future__ import annotations

import csv
import io
from importlib import resources
from pathlib import Path

import pytest

from planner.cluster import cluster_from_toml
from planner.core.errors import TraceError
from planner.core.execplan import plan_from_mapping
from planner.traces import format_trace, parse_trace
from planner.traces.rubick import parse_workload, plan_of
from profiles.perfmodel.rubick_measured import builtin_rubick_measured, packed

ROOT = Path(__file__).resolve().parents[2]
HEADER = "name,submission_time,duration,application,num_gpus,num_cpus,bandwidth,exec_plan,steps,is_sla\n"
M = builtin_rubick_measured()


def _bundled(name: str) -> str:
    return resources.files("planner").joinpath("sim", "bundled", name).read_text()


def test_a_row_becomes_a_trace_job():
    text = (
        HEADER
        + "bert-7,120,600,bert,4,32,0,zero-offload,1000,1\nllama7-8,130,60,llama7,16,128,1.25,182,50,0\n"
    )
    bert, llama = parse_workload(text, "w.csv")
    assert (bert.job_id, bert.submit_time_s, bert.num_gpus, bert.model, bert.gpu_type) == (
        "bert-7", 120.0, 4, "bert", "a800")  # fmt: skip
    assert bert.plan == {"zero_stage": 2, "offload_optimizer": True}  # no checkpointing for bert
    assert (bert.batch_size, bert.iterations, bert.guaranteed) == (32, 1000, True)
    # The work: steps x the measured time at the requested plan on 4 GPUs of one node (0.3758 s).
    offload = M.time_s("bert", plan_from_mapping(plan_of("bert", "zero-offload")), (4,))
    assert offload.how == "measured" and bert.duration_s == round(1000 * offload.time_s, 3)
    assert (bert.min_gpus, bert.max_gpus) == (1, 8)  # data parallel: resized within one server
    assert llama.plan == {"pp": 1, "tp": 8, "dp": 2} and llama.batch_size == 8
    assert llama.duration_s == round(  # to the millisecond, as the trace is written
        50 * M.time_s("llama7", plan_from_mapping(plan_of("llama7", "182")), packed(16)).time_s, 3
    )
    assert (llama.min_gpus, llama.max_gpus) == (16, 64)  # llama7's measured 3D GPU counts
    # A workload with guaranteed jobs has Rubick's two tenants (§6.1): A guaranteed, B best effort.
    assert (bert.tenant, llama.tenant) == ("tenant-a", "tenant-b")
    assert parse_workload(text.replace(",1\n", ",0\n"), "w.csv")[0].tenant is None


def test_plan_codes():
    assert plan_of("vit", "ga") == {}
    assert plan_of("vit", "gc") == {"activation_checkpointing": True}
    assert plan_of("t5", "zero-dp") == {"zero_stage": 2}
    assert plan_of("gpt2", "zero-offload") == {
        "zero_stage": 2,
        "offload_optimizer": True,
        "activation_checkpointing": True,
    }
    assert plan_of("llama30", "524") == {"pp": 5, "tp": 2, "dp": 4}
    for bad in ("zero", "52", "504", "ga+gc"):
        with pytest.raises(ValueError, match="expected one of"):
            plan_of("bert", bad)


@pytest.mark.parametrize(
    ("row", "where"),
    [
        ("a,0,1,resnet50,1,8,0,ga,1,0", "line 2: column 'application': unknown model 'resnet50'"),
        ("a,0,1,bert,3,8,0,ga,1,0", "line 2: column 'exec_plan': .*global batch 32"),  # 32 / 3 GPUs
        ("a,0,1,gpt2,8,8,0,151,1,0", "line 2: column 'exec_plan'"),  # pp1 tp5 dp1 is 5 GPUs
        ("a,0,1,bert,1,8,0,ga,0,0", "line 2: column 'steps': expected a whole number >= 1"),
        ("a,0,1,bert,1,8,0,ga,1,yes", "line 2: column 'is_sla': expected 0 or 1"),
        ("a,soon,1,bert,1,8,0,ga,1,0", "line 2: column 'submission_time': expected a number"),
        ("a,0,1,bert,1,8,,ga,1,0", "line 2: column 'bandwidth': is empty"),
    ],
)
def test_bad_rows_name_line_and_column(row, where):
    with pytest.raises(TraceError, match=f"w.csv:{where.replace('line ', '')}"):
        parse_workload(HEADER + row + "\n", "w.csv")


def test_bad_files():
    with pytest.raises(TraceError, match=r"w.csv:1: missing column\(s\) is_sla"):
        parse_workload(HEADER.replace(",is_sla", ""), "w.csv")
    with pytest.raises(TraceError, match=r"w.csv: no jobs"):
        parse_workload(HEADER, "w.csv")
    with pytest.raises(
        TraceError, match=r"w.csv:3: column 'name': duplicate job name 'a' \(first on line 2\)"
    ):
        parse_workload(HEADER + "a,0,1,bert,1,8,0,ga,1,0\na,0,1,bert,1,8,0,ga,1,0\n", "w.csv")
    # A name the measurements know only after normalising (found by fuzzing: a KeyError).
    (job,) = parse_workload(HEADER + "a,0,1,BERT-,1,8,0,ga,1,0\n", "w.csv")
    assert job.model == "bert"
    # The csv module's own failures (a field over its size limit) name the line too.
    with pytest.raises(TraceError, match=r"w.csv:3: not valid CSV: field larger than field limit"):
        parse_workload(HEADER + "a,0,1,bert,1,8,0,ga,1,0\n" + '"' + "x" * 200_000 + "\n", "w.csv")
    with pytest.raises(TraceError, match=r"w.csv:2: more cells than the header has columns"):
        parse_workload(HEADER + "a,0,1,bert,1,8,0,ga,1,0,extra\n", "w.csv")


@pytest.mark.parametrize("kind", ["base", "bp", "mt"])
def test_the_bundled_traces_are_the_conversion_of_the_bundled_workloads(kind):
    raw = _bundled(f"rubick_workload_{kind}.csv")
    converted = _bundled(f"rubick_{kind}.csv")
    assert format_trace(parse_workload(raw, kind)) == converted
    jobs = parse_trace(converted, f"rubick_{kind}.csv")
    rows = list(csv.DictReader(io.StringIO(raw)))
    assert len(jobs) == len(rows) == 406
    assert [j.iterations for j in jobs] == [int(r["steps"]) for r in rows]
    assert all(j.min_gpus <= j.num_gpus <= j.max_gpus for j in jobs)
    guaranteed = sum(j.guaranteed for j in jobs)
    assert guaranteed == (194 if kind == "mt" else 0)
    assert {j.tenant for j in jobs} == ({"tenant-a", "tenant-b"} if kind == "mt" else {None})


def test_base_and_bp_differ_only_in_plans():
    base = parse_trace(_bundled("rubick_base.csv"), "base")
    bp = parse_trace(_bundled("rubick_bp.csv"), "bp")
    assert [(j.job_id, j.num_gpus, j.iterations) for j in base] == [
        (j.job_id, j.num_gpus, j.iterations) for j in bp
    ]
    assert sum(a.plan != b.plan for a, b in zip(base, bp, strict=True)) > 200


def test_the_paper_cluster():
    nodes = cluster_from_toml((ROOT / "etc" / "clusters" / "rubick-64.toml").read_text(), "rubick-64.toml")
    assert len(nodes) == 8 and sum(n.gpus for n in nodes) == 64
    assert {(n.gpu_type, n.cpus, n.mem_gb, n.intra_gbps, n.inter_gbps) for n in nodes} == {
        ("a800", 96, 1600.0, 400.0, 100.0)
    }
