import collections
import gzip
from importlib import resources
from itertools import pairwise

import numpy as np
import pytest

from planner.core.errors import TraceError
from planner.traces import format_trace, parse_trace
from planner.traces.generators import (
    GAVEL_GPU_MIX,
    PHILLY_GPU_COUNTS,
    SHOCKWAVE_GPU_MIX,
    SYNERGY_MODELS_BY_TASK,
    gavel_trace,
    shockwave_trace,
    synergy_trace,
)
from planner.traces.philly import parse_philly, philly_trace, virtual_clusters


def bundled_philly() -> str:
    data = resources.files("planner").joinpath("sim", "bundled", "philly_derived_gavel_msr_all.csv.gz")
    return gzip.decompress(data.read_bytes()).decode()


def test_csv_round_trip_with_optional_columns():
    text = (
        "job_id,submit_time_s,num_gpus,duration_s,model,batch_size,tenant,guaranteed,plan,extra\n"
        '1,0,2,3600,resnet50,64,vision,true,"{""zero_stage"": 2}",ignored\n'
        "2,12.5,1,60.25,bert,,,,,\n"
    )
    jobs = parse_trace(text)
    assert jobs[0].batch_size == 64 and jobs[0].guaranteed and jobs[0].plan == {"zero_stage": 2}
    assert jobs[1].submit_time_s == 12.5 and jobs[1].tenant is None
    assert parse_trace(format_trace(jobs)) == jobs


def test_time_limit_column_parses_and_round_trips():
    text = (
        "job_id,submit_time_s,num_gpus,duration_s,model,deadline_s,time_limit_s\n"
        "1,0,2,3600,resnet50,,7200\n"
        "2,5,1,60,bert,900,90.5\n"
        "3,6,1,60,bert,,\n"
    )
    jobs = parse_trace(text)
    assert [j.time_limit_s for j in jobs] == [7200.0, 90.5, None]
    formatted = format_trace(jobs)
    assert formatted.splitlines()[0].endswith(",model,deadline_s,time_limit_s")
    assert formatted.splitlines()[1:] == [
        "1,0,2,3600,resnet50,,7200",
        "2,5,1,60,bert,900,90.5",
        "3,6,1,60,bert,,",
    ]
    assert parse_trace(formatted) == jobs
    # A trace without the column writes none back.
    assert "time_limit_s" not in format_trace(jobs[2:])


def test_elastic_columns_parse_and_round_trip():
    text = (
        "job_id,submit_time_s,num_gpus,duration_s,model,gpu_type,min_gpus,max_gpus,gpu_types\n"
        "1,0,4,3600,gpt2,a100,2,8,A100; v100\n"
        "2,5,1,60,bert,,,,\n"
        "3,6,2,60,bert,,,4,\n"
    )
    jobs = parse_trace(text)
    assert (jobs[0].min_gpus, jobs[0].max_gpus, jobs[0].gpu_types) == (2, 8, ("a100", "v100"))
    assert (jobs[1].min_gpus, jobs[1].max_gpus, jobs[1].gpu_types) == (None, None, ())
    assert (jobs[2].min_gpus, jobs[2].max_gpus) == (None, 4)
    formatted = format_trace(jobs)
    assert formatted.splitlines()[0].endswith(",gpu_type,min_gpus,max_gpus,gpu_types")
    assert formatted.splitlines()[1].endswith(",a100,2,8,a100;v100")
    assert parse_trace(formatted) == jobs
    # A trace without the columns writes none of them back.
    assert format_trace(jobs[1:2]).splitlines()[0] == "job_id,submit_time_s,num_gpus,duration_s,model"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("job_id,num_gpus\n1,2\n", r"t.csv:1: missing required column\(s\) submit_time_s, duration_s, model"),
        (
            "job_id,submit_time_s,num_gpus,duration_s,model\n1,0,two,5,m\n",
            r"t.csv:2: column 'num_gpus': expected a number, got 'two'",
        ),
        (
            "job_id,submit_time_s,num_gpus,duration_s,model\n1,0,1.5,5,m\n",
            r"t.csv:2: column 'num_gpus': expected an integer >= 1",
        ),
        (
            "job_id,submit_time_s,num_gpus,duration_s,model\n1,0,1,0,m\n",
            r"t.csv:2: column 'duration_s': expected a positive duration",
        ),
        (
            "job_id,submit_time_s,num_gpus,duration_s,model\n1,0,1,5,m\n1,1,1,5,m\n",
            r"t.csv:3: column 'job_id': duplicate job id '1' \(first on line 2\)",
        ),
        ("job_id,submit_time_s,num_gpus,duration_s,model\n1,-3,1,5,m\n", r"column 'submit_time_s': expected"),
        ("job_id,submit_time_s,num_gpus,duration_s,model\n1,0,1,nan,m\n", r"expected a finite number"),
        ("job_id,submit_time_s,num_gpus,duration_s,model\n1,0,1,5,\n", r"column 'model': is empty"),
        (
            "job_id,submit_time_s,num_gpus,duration_s,model,plan\n1,0,1,5,m,[1]\n",
            r"column 'plan': expected a JSON",
        ),
        (  # ZeRO stages are 0-3: a plan no framework can run was accepted
            'job_id,submit_time_s,num_gpus,duration_s,model,plan\n1,0,1,5,m,"{""zero_stage"": 9}"\n',
            r"t.csv:2: column 'plan': key 'zero_stage': expected 0, 1, 2 or 3, got 9",
        ),
        (
            'job_id,submit_time_s,num_gpus,duration_s,model,plans\n1,0,1,5,m,"[{}, {""zero"": 2}]"\n',
            r"t.csv:2: column 'plans': plan 2: unknown key 'zero'",
        ),
        ("job_id,submit_time_s,num_gpus,duration_s,model\n1,0,1,5,m,extra\n", r"t.csv:2: more cells than"),
        (
            "job_id,submit_time_s,num_gpus,duration_s,model,min_gpus\n1,0,2,5,m,3\n",
            r"t.csv:2: column 'min_gpus': expected an integer in \[1, num_gpus 2\], got 3",
        ),
        (
            "job_id,submit_time_s,num_gpus,duration_s,model,max_gpus\n1,0,2,5,m,1\n",
            r"t.csv:2: column 'max_gpus': expected an integer >= num_gpus 2, got 1",
        ),
        (
            "job_id,submit_time_s,num_gpus,duration_s,model,max_gpus\n1,0,2,5,m,many\n",
            r"t.csv:2: column 'max_gpus': expected a number, got 'many'",
        ),
        (
            "job_id,submit_time_s,num_gpus,duration_s,model,gpu_types\n1,0,2,5,m,a100;;v100\n",
            r"t.csv:2: column 'gpu_types': expected GPU type names separated by ';'",
        ),
        (
            "job_id,submit_time_s,num_gpus,duration_s,model,gpu_types\n1,0,2,5,m,a100;A100\n",
            r"t.csv:2: column 'gpu_types': lists 'a100' twice",
        ),
        (
            "job_id,submit_time_s,num_gpus,duration_s,model,gpu_type,gpu_types\n1,0,2,5,m,t4,a100\n",
            r"t.csv:2: column 'gpu_types': gpu_type 't4' is not among the accepted types a100",
        ),
        (
            "job_id,submit_time_s,num_gpus,duration_s,model,time_limit_s\n1,0,1,5,m,1:00:00\n",
            r"t.csv:2: column 'time_limit_s': expected a number, got '1:00:00'",
        ),
        (
            "job_id,submit_time_s,num_gpus,duration_s,model,time_limit_s\n1,0,1,5,m,60\n2,0,1,5,m,0\n",
            r"t.csv:3: column 'time_limit_s': expected a positive number of seconds, got '0'",
        ),
        (
            "job_id,submit_time_s,num_gpus,duration_s,model,time_limit_s\n1,0,1,5,m,-60\n",
            r"t.csv:2: column 'time_limit_s': expected a positive number of seconds, got '-60'",
        ),
        ("job_id,submit_time_s,num_gpus,duration_s,model,time_limit_s\n1,0,1,5,m,inf\n", r"'time_limit_s'"),
        ("", "empty file"),
    ],
)
def test_trace_errors_name_file_line_and_column(text, message):
    with pytest.raises(TraceError, match=message):
        parse_trace(text, source="t.csv")


@pytest.mark.parametrize(
    "generate",
    [
        lambda seed: synergy_trace(50, jobs_per_hour=5, seed=seed),
        lambda seed: shockwave_trace(50, seed=seed),
        lambda seed: gavel_trace(50, jobs_per_hour=5, seed=seed),
    ],
)
def test_generators_are_seeded_and_survive_csv(generate):
    a, b, c = generate(1), generate(1), generate(2)
    assert a == b and a != c
    assert parse_trace(format_trace(a)) == tuple(a)
    assert a[0].submit_time_s == 0 and all(x.submit_time_s <= y.submit_time_s for x, y in pairwise(a))


def test_static_traces_arrive_at_zero():
    assert {j.submit_time_s for j in gavel_trace(20, jobs_per_hour=0, seed=0, static=True)} == {0.0}


def test_gavel_trace_matches_its_description():
    jobs = gavel_trace(20_000, jobs_per_hour=10, seed=3)
    mix = collections.Counter(j.num_gpus for j in jobs)
    for g, p in GAVEL_GPU_MIX.items():
        assert mix[g] / len(jobs) == pytest.approx(p, abs=0.01)
    minutes = np.log10(np.array([j.duration_s for j in jobs]) / 60)
    assert minutes.min() >= 1.5 - 1e-6 and minutes.max() <= 4 + 1e-6
    assert np.mean(minutes < 3) == pytest.approx(0.8, abs=0.01)
    gaps = np.diff([j.submit_time_s for j in jobs])
    assert gaps.mean() == pytest.approx(360, rel=0.03)  # 10 jobs/hour


def test_shockwave_trace_matches_its_description():
    jobs = shockwave_trace(20_000, seed=4)
    mix = collections.Counter(j.num_gpus for j in jobs)
    for g, p in SHOCKWAVE_GPU_MIX.items():
        assert mix[g] / len(jobs) == pytest.approx(p, abs=0.01)
    gpu_hours = np.array([j.duration_s * j.num_gpus / 3600 for j in jobs])
    assert np.mean(gpu_hours < 1) == pytest.approx(0.72, abs=0.01)
    assert np.mean(gpu_hours >= 100) == pytest.approx(0.03, abs=0.005)
    assert np.mean(np.diff([j.submit_time_s for j in jobs])) == pytest.approx(45, rel=0.03)  # 80/h


def test_synergy_trace_split_and_gpu_demand():
    jobs = synergy_trace(20_000, jobs_per_hour=9, seed=5, split=(50, 0, 50), max_gpus=16)
    task = {m: t for t, models in SYNERGY_MODELS_BY_TASK.items() for m in models}
    tasks = collections.Counter(task[j.model] for j in jobs)
    assert tasks["language"] == 0 and tasks["image"] / len(jobs) == pytest.approx(0.5, abs=0.015)
    counts = {g: c for g, c in PHILLY_GPU_COUNTS.items() if g <= 16}
    mix = collections.Counter(j.num_gpus for j in jobs)
    assert mix[1] / len(jobs) == pytest.approx(counts[1] / sum(counts.values()), abs=0.01)
    assert max(mix) <= 16
    single = synergy_trace(100, jobs_per_hour=9, seed=5, multi_gpu=False)
    assert {j.num_gpus for j in single} == {1}


def test_philly_gpu_table_is_the_bundled_files():
    rows = parse_philly(bundled_philly())
    assert dict(collections.Counter(r.num_gpus for r in rows)) == PHILLY_GPU_COUNTS


def test_philly_window_is_one_vc_rebased_to_zero():
    rows = parse_philly(bundled_philly())
    assert len(rows) == 15_264 and next(iter(virtual_clusters(rows))) in {
        "11cb48",
        "6214e9",
        "6c71a0",
        "b436b2",
        "ee9e8c",
    }
    jobs = philly_trace(rows, vc="6214e9", first=100, count=240, max_gpus=16)
    assert len(jobs) == 240 and jobs[0].submit_time_s == 0
    assert max(j.num_gpus for j in jobs) <= 16
    assert all(j.model for j in jobs) and any(j.batch_size for j in jobs)
    with pytest.raises(TraceError, match="known VCs"):
        philly_trace(rows, vc="nope")
