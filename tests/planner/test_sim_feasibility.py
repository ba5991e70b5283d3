"""Trace jobs a cluster can never hold (``mosaic sim`` refuses them)."""

from __future__ import annotations

from planner.core.model import Node
from planner.sim.feasibility import describe, never_startable
from planner.traces.records import TraceJob

NODES = (Node("a1", 8, "a100", 64, 512.0), Node("v1", 4, "v100", 32, 256.0), Node("v2", 4, "v100", 32, 256.0))


def job(job_id: str, gpus: int, **kw: object) -> TraceJob:
    return TraceJob(job_id, 0.0, gpus, 100.0, "resnet18", **kw)  # type: ignore[arg-type]


def test_a_job_is_refused_only_when_no_allocation_of_accepted_types_can_hold_it():
    jobs = [
        job("any16", 16),  # spans nodes of both types
        job("any17", 17),
        job("v8", 8, gpu_type="v100"),
        job("v9", 9, gpu_type="v100"),
        job("t4", 1, gpu_type="t4"),
        job("elastic", 12, gpu_type="v100", min_gpus=8, max_gpus=16),
        job("either", 12, gpu_types=("v100", "a100")),
        job("neither", 1, gpu_types=("t4", "k80")),
    ]
    assert never_startable(NODES, jobs) == [
        ("any17", "asks for 17 GPUs; the cluster has 16"),
        ("v9", "asks for 9 GPUs of GPU type 'v100'; the cluster has 8"),
        ("t4", "asks for GPU type 't4'; the cluster has a100, v100"),
        ("neither", "asks for GPU type 't4' or 'k80'; the cluster has a100, v100"),
    ]


def test_the_message_names_the_first_jobs_and_counts_the_rest():
    problems = [(str(k), "asks for 99 GPUs; the cluster has 16") for k in range(12)]
    text = describe(problems, "t.csv")
    assert text.startswith("t.csv: 12 job(s) can never start on this cluster")
    assert "job 9 asks for 99 GPUs" in text and "job 10 " not in text and text.endswith("; and 2 more")
