"""``mosaic demo --trace``: which trace runs, without Slurm (``benchmarks.soak.live_fidelity --trace``'s
result names: tests/benchmarks/soak/test_live_fidelity.py)."""

from __future__ import annotations

import pytest

from planner.config import preset
from planner.core.errors import TraceError
from planner.traces.csvio import format_trace
from slurm_plugin.cli.main import build_parser, main
from slurm_plugin.demo import BUNDLED_TRACE, FIDELITY_TRACE, bundled_trace, load_trace, simulate
from slurm_plugin.testcluster.shapes import shape_named
from tests.builders import profiles, trace_job


def test_named_traces_are_the_bundled_tuples():
    assert [j.job_id for j in load_trace("demo")] == [row[0] for row in BUNDLED_TRACE]
    assert [j.job_id for j in load_trace("fidelity24")] == [row[0] for row in FIDELITY_TRACE]
    assert load_trace("demo") == bundled_trace()


def test_fidelity_trace_meets_the_requirement_and_contends_for_the_16_gpus():
    jobs = load_trace("fidelity24")
    assert len(jobs) >= 20
    assert len({j.job_id for j in jobs}) == len(jobs)
    assert all(1 <= j.num_gpus <= 4 and 300 <= j.duration_s <= 1200 for j in jobs)
    assert all(j.model in profiles() for j in jobs)
    # More GPU-seconds than 16 GPUs can serve by the last arrival: jobs must queue.
    last_arrival = max(j.submit_time_s for j in jobs)
    assert sum(j.num_gpus * j.duration_s for j in jobs) > 16 * last_arrival
    shape = shape_named("homogeneous", accounting=True)
    assert sum(g.count * g.gpus for g in shape.groups) == 16
    sim = simulate(jobs, shape, preset("fifo"), time_scale=20.0, round_s=2.0)
    assert sim["finished"] == len(jobs) and sim["avg_queue_s"] > 0


def test_a_trace_csv_is_read_in_the_projects_format(tmp_path):
    jobs = [trace_job("x", 0.0, 2, 600.0, "resnet18"), trace_job("y", 30.0, 1, 300.0, "lstm")]
    path = tmp_path / "t.csv"
    path.write_text(format_trace(jobs))
    assert load_trace(str(path)) == jobs


def test_an_unreadable_or_empty_trace_is_named(tmp_path):
    with pytest.raises(TraceError, match=r"nope\.csv.*neither a bundled trace"):
        load_trace(str(tmp_path / "nope.csv"))
    empty = tmp_path / "empty.csv"
    empty.write_text("job_id,submit_time_s,num_gpus,duration_s,model\n")
    with pytest.raises(TraceError, match=r"empty\.csv"):
        load_trace(str(empty))


def test_demo_cli_takes_a_trace_and_fails_before_the_cluster_on_a_bad_one(tmp_path, capsys):
    assert build_parser().parse_args(["demo"]).trace == "demo"  # the fast default stays
    assert build_parser().parse_args(["demo", "--trace", "fidelity24"]).trace == "fidelity24"
    assert main(["demo", "--trace", str(tmp_path / "missing.csv"), "--dir", str(tmp_path / "c")]) == 2
    assert "missing.csv" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_the_simulation_stops_at_the_live_runs_limit():
    jobs = load_trace("fidelity24")
    shape = shape_named("homogeneous", accounting=True)
    full = simulate(jobs, shape, preset("fifo"), time_scale=20.0, round_s=2.0)
    bound = full["makespan_s"] / 2
    cut = simulate(jobs, shape, preset("fifo"), time_scale=20.0, round_s=2.0, horizon_s=bound)
    assert 0 < cut["finished"] < full["finished"] == len(jobs)
    assert cut["makespan_s"] <= bound
