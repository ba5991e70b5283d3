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
    assert result.live["restarts"] == 0  # FIFO on an empty cluster never stops a job
    # Each job ran its emulated duration / 30 in real seconds, plus queueing and launch.
    for record in result.report.records:
        assert record.jct_s is not None and record.jct_s >= record.duration_s - 1.0  # type: ignore[operator]
    assert set(result.slurm_ids) == {"a", "b", "c"}
    # The demo's cluster is gone; the session's is untouched.
    assert all(p is None for p in lifecycle.daemon_pids(lifecycle.load(tmp_path / "cluster")).values())
    assert lifecycle.status(slurm_cluster.layout.root)["running"]
