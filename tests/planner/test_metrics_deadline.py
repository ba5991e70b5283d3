"""Deadline keys of planner.metrics.summarize, from the simulator and from sacct alike."""

from __future__ import annotations

import pytest

from planner.metrics import CLASS_KEYS, DEADLINE_KEYS, SUMMARY_KEYS, JobRecord, deadline_summary, summarize
from planner.sim import SimConfig, simulate
from planner.traces.records import TraceJob
from tests.builders import make_nodes, profiles, scheduler


def _job(job_id, submit, finish, deadline):
    return JobRecord(job_id, 1, submit, submit, finish, "finished" if finish is not None else "running",
                     deadline_s=deadline)  # fmt: skip


RECORDS = [
    _job("early", 0.0, 100.0, 150.0),  # met
    _job("on-time", 0.0, 150.0, 150.0),  # met: finish == deadline counts
    _job("late", 10.0, 200.0, 150.0),  # missed
    _job("unfinished", 20.0, None, 1e9),  # missed: not finished by the end
    _job("none", 0.0, 50.0, None),  # no deadline: not counted either way
]


def test_deadline_keys():
    s = summarize(RECORDS, cluster_gpus=4, cluster_cpus=16, allocated_gpu_s=0.0, allocated_cpu_s=0.0,
                  end_time_s=300.0)  # fmt: skip
    assert (s["deadline_jobs"], s["deadline_met"], s["deadline_satisfactory_ratio"]) == (4, 2, 0.5)
    assert [r.met_deadline for r in RECORDS] == [True, True, False, False, None]
    # Only added: every earlier key is still there; the new ones follow the class keys.
    keys = list(s)
    assert set(SUMMARY_KEYS) | set(CLASS_KEYS) | set(DEADLINE_KEYS) <= set(keys)
    assert keys.index(CLASS_KEYS[-1]) + 1 == keys.index(DEADLINE_KEYS[0]) and keys[-1] == "tenants"


def test_no_deadline_means_no_ratio():
    assert deadline_summary([_job("a", 0.0, 1.0, None)]) == {
        "deadline_jobs": 0,
        "deadline_met": 0,
        "deadline_satisfactory_ratio": None,
    }
    assert deadline_summary([]) == deadline_summary([_job("a", 0.0, 1.0, None)])


def test_the_simulator_counts_a_deadline_on_the_trace_clock():
    # One 4-GPU server, FIFO, rounds every 360 s: a (1,000 s) runs first, b (1,000 s) starts at
    # the round after a's finish (1,080 s) and misses its deadline at 1,500 s; a meets its own
    # at 1,000 s exactly; c has none.
    nodes = make_nodes(1, gpus=4, gpu_type="v100", cpus=16, mem_gb=256.0)
    trace = [
        TraceJob("a", 0.0, 4, 1000.0, "resnet50", deadline_s=1000.0),
        TraceJob("b", 0.0, 4, 1000.0, "resnet50", deadline_s=1500.0),
        TraceJob("c", 0.0, 4, 1000.0, "resnet50"),
    ]
    result = simulate(nodes, trace, scheduler("fifo"), SimConfig(), profiles=profiles())
    finish = {r.job_id: r.finish_time_s for r in result.records}
    assert finish["a"] == pytest.approx(1000.0) and finish["b"] == pytest.approx(2080.0)
    assert {r.job_id: r.deadline_s for r in result.records} == {"a": 1000.0, "b": 1500.0, "c": None}
    s = result.summary
    assert (s["deadline_jobs"], s["deadline_met"], s["deadline_satisfactory_ratio"]) == (2, 1, 0.5)
