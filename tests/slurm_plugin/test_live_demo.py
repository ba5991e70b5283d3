"""``mosaic demo`` end to end on a tiny trace: live summary from sacct next to the simulator's."""

from __future__ import annotations

import sys

from planner.config import preset
from planner.metrics import SUMMARY_KEYS
from planner.traces.records import TraceJob
from slurm_plugin.demo import run_demo
from slurm_plugin.testcluster import lifecycle


def test_demo_runs_a_trace_live_and_in_the_simulator(slurm_cluster, tmp_path):
    trace = [
        TraceJob("a", 0.0, 4, 120.0, "resnet50"),
        TraceJob("b", 0.0, 2, 60.0, "resnet18"),
        TraceJob("c", 30.0, 1, 60.0, "lstm"),
    ]
    result = run_demo(
        tmp_path, preset("fifo"), python=sys.executable, trace=trace, time_scale=30.0, round_s=1.0
    )
    assert set(SUMMARY_KEYS) <= set(result.live) and set(SUMMARY_KEYS) <= set(result.sim)
    assert result.live["finished"] == result.sim["finished"] == 3
    # FIFO on an empty cluster never stops a job
    assert result.live["restarts"] == result.live["migrations"] == result.sim["migrations"] == 0
    # Each job ran its emulated duration / 30 in real seconds, plus queueing and launch.
    for record in result.report.records:
        assert record.jct_s is not None and record.jct_s >= record.duration_s - 1.0  # type: ignore[operator]
    assert set(result.slurm_ids) == {"a", "b", "c"}
    # The demo's cluster is gone; the session's is untouched.
    assert all(p is None for p in lifecycle.daemon_pids(lifecycle.load(tmp_path / "cluster")).values())
    assert lifecycle.status(slurm_cluster.layout.root)["running"]


def test_demo_live_and_sim_count_the_same_restarts_and_migrations(slurm_cluster, tmp_path):
    # Four 4-GPU jobs fill the 16 GPUs; b arrives at 60 s with less work left than a4, so
    # SRTF preempts a4 for it. a1 ends at 120 s and a4 resumes on a1's node: another node
    # than before, yet a preemption and a restart, not a migration (planner/relaunch.py),
    # in the simulator and in sacct alike.
    trace = [
        TraceJob("a1", 0.0, 4, 120.0, "resnet50"),
        TraceJob("a2", 0.0, 4, 240.0, "resnet50"),
        TraceJob("a3", 0.0, 4, 240.0, "resnet50"),
        TraceJob("a4", 0.0, 4, 480.0, "resnet50"),
        TraceJob("b", 60.0, 4, 120.0, "resnet18"),
    ]
    result = run_demo(
        tmp_path, preset("srtf"), python=sys.executable, trace=trace, time_scale=30.0, round_s=1.0
    )
    keys = ("finished", "restarts", "migrations", "preemptions")
    assert {k: result.live[k] for k in keys} == {k: result.sim[k] for k in keys}
    assert (result.sim["restarts"], result.sim["migrations"], result.sim["preemptions"]) == (1, 0, 1)
    a4 = result.report.runs[result.slurm_ids["a4"]]
    assert len(a4) == 2 and a4[0].nodes != a4[1].nodes  # it did resume elsewhere
