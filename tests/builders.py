"""Builders that keep tests short: sensible defaults, override what the test is about."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from planner.config import build_scheduler, preset
from planner.core.model import Assignment, Job, JobState, Node, Snapshot
from planner.pipeline import Scheduler
from planner.traces.records import TraceJob
from profiles.store import ProfileStore
from slurm_plugin.slurm.parse import SlurmJob

_PROFILES = ProfileStore.builtin()

SMALL_CLUSTER_TOML = """
[[nodes]]
count = 2
gpus = 4
gpu_type = "v100"
cpus = 16
mem_gb = 128
"""
"""A cluster file for CLI tests: two nodes of 4 V100s, 16 CPUs and 128 GB each."""


def make_node(
    name: str = "n1", gpus: int = 4, gpu_type: str = "v100", cpus: int = 16, mem_gb: float = 64.0
) -> Node:
    return Node(name=name, gpus=gpus, gpu_type=gpu_type, cpus=cpus, mem_gb=mem_gb)


def make_nodes(
    count: int,
    gpus: int = 4,
    gpu_type: str = "v100",
    cpus: int | None = None,
    mem_gb: float | None = None,
    prefix: str = "n",
) -> tuple[Node, ...]:
    return tuple(
        make_node(
            f"{prefix}{i}",
            gpus,
            gpu_type,
            cpus if cpus is not None else 4 * gpus,
            mem_gb if mem_gb is not None else 16.0 * gpus,
        )
        for i in range(1, count + 1)
    )


def make_job(job_id: str | int = "1", num_gpus: int = 1, submit: float = 0.0, **fields: Any) -> Job:
    fields.setdefault("model", "resnet50")
    return Job(id=str(job_id), num_gpus=num_gpus, submit_time_s=submit, **fields)


def make_slurm_job(**fields: Any) -> SlurmJob:
    """A held 1-node job as squeue shows it (job 7 in partition ``gpu``), ``fields`` replaced."""
    base: dict[str, Any] = {
        "id": "7", "name": "j", "partition": "gpu", "state": "PENDING", "reason": "JobHeldUser",
        "priority": 0, "gpus_per_node": 1, "shards_per_node": 0, "cpus": 2, "mem_mb_per_node": 4096,
        "mem_mb_per_cpu": None, "num_nodes": 1, "nodes": (), "gpu_indices": (), "required_nodes": (),
        "features": "", "submit_time": 1.0, "start_time": None, "requeues": 0, "comment": "",
        "admin_comment": "",
    }  # fmt: skip
    return SlurmJob(**{**base, **fields})


def running(job: Job, gpus: Sequence[tuple[str, int]], cpus: int = 0, mem_gb: float = 0.0) -> Job:
    """The job, running on ``gpus``."""
    from dataclasses import replace

    return replace(job, state=JobState.RUNNING, assignment=Assignment(tuple(gpus), cpus, mem_gb))


def make_snapshot(nodes: Iterable[Node], jobs: Iterable[Job], time_s: float = 0.0) -> Snapshot:
    return Snapshot(time_s=time_s, nodes=tuple(nodes), jobs=tuple(jobs))


def scheduler(name: str = "fifo", **overrides: Any) -> Scheduler:
    return build_scheduler(preset(name).with_overrides(**overrides), _PROFILES)


def trace_job(
    job_id: str | int,
    submit: float = 0.0,
    gpus: int = 1,
    duration: float = 3600.0,
    model: str = "resnet50",
    **fields: Any,
) -> TraceJob:
    return TraceJob(str(job_id), submit, gpus, duration, model, **fields)


def profiles() -> ProfileStore:
    return _PROFILES
