"""Crius's traces -> Mosaic traces (planner/traces/crius.py), the bundled files, the Philly
random types, the clusters, and Crius model names in the profiles."""

from __future__ import annotations

import csv
import io
import random
from collections import Counter
from importlib import resources
from pathlib import Path

import pytest

from planner.cluster import cluster_from_toml
from planner.core.errors import TraceError
from planner.traces import format_trace, parse_trace
from planner.traces.crius import (
    FAMILIES,
    GPU_TYPES,
    SIZE_STEP_SPEEDUP,
    divide_iterations,
    draw_shape,
    elastic,
    iteration_time,
    parse_crius_trace,
    random_types,
    split_model,
)
from planner.traces.records import TraceJob
from profiles.perfmodel.crius import CriusTable, builtin_crius, parse_records
from profiles.store import ProfileStore

ROOT = Path(__file__).resolve().parents[2]
HEADER = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,gpu_type\n"
T = builtin_crius()


def _bundled(name: str) -> str:
    return resources.files("planner").joinpath("sim", "bundled", name).read_text()


def test_a_row_becomes_a_trace_job():
    text = (
        HEADER
        + "j2,1000200,300,bert__1.3B,1000900,128,4,v100\nj1,1000000,5722,moe__2.4B,1030000,512,16,v100\n"
    )
    conversion = parse_crius_trace(text, "t.csv")
    first, second = conversion.jobs  # sorted by submission, re-based to the earliest
    assert (first.job_id, first.submit_time_s, first.num_gpus, first.gpu_type) == ("j1", 0.0, 16, "v100")
    assert (first.model, first.batch_size, first.iterations) == ("moe_2.4B", 512, 5722)
    # The work: iterations x the measured best-plan time on one 16-GPU V100 server.
    assert first.duration_s == pytest.approx(5722 * T.best_time_s("moe_2.4B", 512, "v100", 16, 1), abs=1e-3)
    assert first.deadline_s == 30000.0  # a time on the submit_time_s clock
    assert (second.submit_time_s, second.deadline_s) == (200.0, 900.0)
    assert second.duration_s == pytest.approx(300 * T.best_time_s("bert_1.3B", 128, "v100", 4), abs=1e-3)
    assert conversion.dropped == () and conversion.estimated == 0


def test_an_unmeasured_shape_takes_the_next_larger_size_as_the_artifact_does():
    # bert_1.3B at batch 128 was not measured on 8 A100s (2 servers of 4); bert_2.6B was:
    # the artifact scales its throughput by 1.8 for the one size step.
    assert T.record("bert_1.3B", 128, "a100", 8, 2) is None
    larger = T.best_time_s("bert_2.6B", 128, "a100", 8, 2)
    assert larger is not None
    found = iteration_time(T, "bert", "1.3B", 128, "a100", 8)
    assert found is not None and (found.measured_as, found.size_steps) == ("bert_2.6B", 1)
    assert found.time_s == pytest.approx(larger / SIZE_STEP_SPEEDUP)
    conversion = parse_crius_trace(HEADER + "x,0,100,bert__1.3B,9999,128,8,a100\n", "t.csv")
    assert conversion.estimated == 1 and conversion.jobs[0].duration_s == pytest.approx(
        100 * found.time_s, abs=1e-3
    )


def test_the_first_size_found_decides_and_out_of_memory_has_no_time():
    table = CriusTable.of(
        parse_records(
            {"optimal": {"bert_2.6B_128": {"1_a10_1_n_2_d": -1}, "bert_6.7B_128": {"1_a10_1_n_2_d": 4.0}}}
        )
    )
    assert iteration_time(table, "bert", "1.3B", 128, "a10", 2) is None  # 2.6B is out of memory there
    assert iteration_time(table, "bert", "2.6B", 128, "a10", 2) is None
    assert iteration_time(table, "bert", "6.7B", 128, "a10", 2).time_s == 4.0
    # A shape measured only spread over more servers than the fewest is not the consolidated one.
    spread = CriusTable.of(parse_records({"optimal": {"moe_1.3B_256": {"2_a100_2_n_1_d": 1.0}}}))
    assert iteration_time(spread, "moe", "1.3B", 256, "a100", 2) is None
    slow = CriusTable.of(parse_records({"optimal": {"moe_1.3B_256": {"1_a100_1_n_2_d": 301.0}}}))
    assert iteration_time(slow, "moe", "1.3B", 256, "a100", 2) is None  # longer than a 300 s round


def test_a_row_without_any_time_is_dropped_and_counted():
    conversion = parse_crius_trace(
        HEADER + "a,0,10,bert__760M,50,128,1,v100\nb,5,10,gpt__1B,50,128,1,v100\n", "t"
    )
    assert [j.job_id for j in conversion.jobs] == ["a"]
    assert conversion.dropped == (("b", "gpt_1B at batch 128 on 1 x v100: no measured time"),)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            "a,0,10,bert__760M,0,128,1,v100",
            "t.csv:2: column 'deadline': 0 is not after the submission time 0",
        ),
        ("a,0,10,bert760M,50,128,1,v100", "t.csv:2: column 'model_name': expected {family}__{params}"),
        ("a,0,0,bert__760M,50,128,1,v100", "t.csv:2: column 'num_iteration': expected a whole number >= 1"),
        ("a,x,10,bert__760M,50,128,1,v100", "t.csv:2: column 'submission_time': expected a number, got 'x'"),
        ("a,0,10,bert__760M,50,128,,v100", "t.csv:2: column 'num_gpu': is empty"),
        ("a,0,10,bert__760M,50,128,1,v100,extra", "t.csv:2: more cells than the header has columns"),
    ],
)
def test_bad_rows_are_errors_naming_line_and_column(row, message):
    with pytest.raises(TraceError, match="^" + message.replace("{", r"\{").replace("}", r"\}")):
        parse_crius_trace(HEADER + row + "\n", "t.csv")


def test_bad_files():
    with pytest.raises(TraceError, match=r"t.csv:1: missing column\(s\) deadline"):
        parse_crius_trace(HEADER.replace(",deadline", ""), "t.csv")
    with pytest.raises(TraceError, match=r"t\.csv: no jobs after the header"):
        parse_crius_trace(HEADER, "t.csv")
    with pytest.raises(
        TraceError, match=r"t\.csv:3: column 'job_id': duplicate job id 'a' \(first on line 2\)"
    ):
        parse_crius_trace(HEADER + "a,0,10,bert__760M,50,128,1,v100\n" * 2, "t.csv")


def test_a_file_the_csv_module_cannot_split_is_a_trace_error():
    with pytest.raises(TraceError, match=r"t\.csv:2: not valid CSV"):
        parse_crius_trace(HEADER + "a,0,10," + "x" * 200_000 + ",50,128,1,v100\n", "t.csv")  # > field limit


def test_split_model():
    assert split_model("wide_resnet__6.8B") == ("wide_resnet", "6.8B")
    assert split_model("moe_690M") == ("moe", "690M")
    assert split_model("bert") is None and split_model("bert__x") is None and split_model("bert__1.3") is None


@pytest.mark.parametrize(("name", "jobs", "estimated"), [("venus", 438, 24), ("pai", 233, 9)])
def test_the_bundled_conversions_are_the_converter_output(name, jobs, estimated):
    raw = _bundled(f"crius_simulate_trace_{name}.csv")
    conversion = parse_crius_trace(raw, name)
    assert len(conversion.jobs) == jobs and conversion.dropped == () and conversion.estimated == estimated
    assert _bundled(f"crius_{name}.csv") == format_trace(conversion.jobs)
    parsed = parse_trace(_bundled(f"crius_{name}.csv"), name)
    assert min(j.submit_time_s for j in parsed) == 0.0
    # The artifact's deadline: submission + 1.5 x duration, within its rounding of the time.
    by_id = {r["job_id"]: r for r in csv.DictReader(io.StringIO(raw))}
    for j in parsed:
        assert j.deadline_s is not None and j.deadline_s > j.submit_time_s
        assert (j.deadline_s - j.submit_time_s) / j.duration_s == pytest.approx(1.5, rel=0.06)
        assert j.iterations == int(by_id[j.job_id]["num_iteration"])
        assert j.model in ProfileStore.builtin()  # every trace model resolves


def test_divide_iterations_and_elastic():
    job = TraceJob(
        "a", 0.0, 8, 1000.0, "bert_760M", batch_size=128, iterations=100, gpu_type="a40", deadline_s=1500
    )
    (short,) = divide_iterations([job], 5)
    assert (short.iterations, short.duration_s, short.deadline_s) == (20, 200.0, 1500)
    assert divide_iterations([job], 1000)[0].iterations == 1
    with pytest.raises(TraceError, match="divisor must be >= 1"):
        divide_iterations([job], 0)
    flexible, big, one = elastic(
        [job, TraceJob("b", 0, 16, 1, "m", gpu_type="v100"), TraceJob("c", 0, 1, 1, "m")]
    )
    assert (flexible.min_gpus, flexible.max_gpus, flexible.gpu_types) == (4, 16, GPU_TYPES)
    assert (big.min_gpus, big.max_gpus) == (8, 16)  # 16 is the largest count measured
    assert (one.min_gpus, one.max_gpus) == (1, 2)
    # The elastic trace is a valid trace (min <= num <= max, gpu_type among gpu_types).
    assert parse_trace(format_trace([flexible, big, one]), "e.csv")[0].gpu_types == GPU_TYPES


def test_random_types_draw_crius_shapes_and_keep_the_run_time():
    philly = [TraceJob(str(i), 60.0 * i, 1 + i % 8, 3600.0 * (1 + i % 5), "resnet50") for i in range(400)]
    jobs = random_types(philly, seed=7)
    assert random_types(philly, seed=7) == jobs and random_types(philly, seed=8) != jobs
    for before, after in zip(philly, jobs, strict=True):
        assert (after.job_id, after.submit_time_s) == (before.job_id, before.submit_time_s)
        family, size = split_model(after.model)
        assert size in FAMILIES[family][0] and after.batch_size in FAMILIES[family][1]
        found = iteration_time(T, family, size, after.batch_size, after.gpu_type, after.num_gpus)
        assert found is not None and after.duration_s == pytest.approx(
            after.iterations * found.time_s, abs=1e-3
        )
        # The run time stays Philly's, to within half an iteration.
        assert abs(after.duration_s - before.duration_s) <= found.time_s / 2 + 1e-3
        assert after.deadline_s == pytest.approx(after.submit_time_s + 1.5 * after.duration_s, abs=1e-3)
    assert Counter(j.model.rpartition("_")[0] for j in jobs).most_common(1)[0][0] == "moe"  # 60 % of draws


def test_the_draw_follows_the_artifact_weights():
    # Without the feasibility filter the families would be 15/25/60 % and types 15/15/30/30 %;
    # feasible draws shift that towards what fits, but moe stays the most drawn family and
    # every type and GPU count appears.
    rng = random.Random(1)
    draws = [draw_shape(rng, T) for _ in range(3000)]
    families = Counter(d[0] for d in draws)
    assert families["moe"] > families["bert"] > 0 and families["wide_resnet"] > 0
    assert set(Counter(d[4] for d in draws)) == set(GPU_TYPES)
    assert set(Counter(d[3] for d in draws)) == {1, 2, 4, 8, 16}
    assert all(d[5].time_s > 0 for d in draws)


def test_crius_model_names_resolve_and_unknown_ones_stay_neutral():
    store = ProfileStore.builtin()
    for label in ("bert_760M", "BERT-760m", "bert__760M", "wide_resnet_2B", "moe_2.4B"):
        assert store.canonical_name(label) is not None, label
    assert store.canonical_name("wide_resnet__2B") == "wide_resnet_2B"
    assert store.resolve("moe_2.4B").task == "language" and not store.resolve("moe_2.4B").throughput
    assert store.canonical_name("bert") == "bert"  # the catalog's model is unchanged
    assert "bert_100B" not in store
    store.resolve("bert_100B")
    store.resolve("bert_100B")
    assert store.unknown_models == frozenset({"bert_100B"})


@pytest.mark.parametrize(("name", "per_type"), [("crius-1280", 320), ("crius-256", 64)])
def test_the_crius_clusters(name, per_type):
    nodes = cluster_from_toml((ROOT / "etc" / "clusters" / f"{name}.toml").read_text(), name)
    gpus = Counter()
    shapes = {}
    for n in nodes:
        gpus[n.gpu_type] += n.gpus
        shapes[n.gpu_type] = n.gpus
    assert dict(gpus) == {t: per_type for t in GPU_TYPES}
    assert shapes == {"a100": 4, "v100": 16, "a40": 2, "a10": 2}  # Crius Table 1's servers
