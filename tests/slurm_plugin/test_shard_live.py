"""Shared GPUs on the real test cluster's ``shard`` shape (2 nodes x 4 GPUs, 2 shards per GPU).

Outside jobs (partition ``other``) hold all GPUs but one, so the packing preset must put two
managed jobs on that GPU: the controller starts both on ``gres/shard`` and each job sees,
from inside, the same node and the same ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurm_plugin import planfile
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.slurm.runner import run
from slurm_plugin.testcluster import lifecycle
from tests.slurm_plugin.live_helpers import (
    config_for,
    controller,
    jobs,
    submit_job,
    wait_for,
    wait_started,
)


@pytest.fixture
def shard_cluster(slurm_cluster_of: Callable[[str], lifecycle.Cluster]) -> Iterator[lifecycle.Cluster]:
    """The run's shard cluster, emptied of jobs after the test."""
    cluster = slurm_cluster_of("shard")
    yield cluster
    run(["scancel", "--user=root"], env=cluster.env, check=False)
    lifecycle.wait_jobs_gone(cluster, 20.0)


def _shard_script(directory: Path, name: str, directives: str = "", gres: str = "shard:2") -> Path:
    path = directory / f"{name}.sh"
    path.write_text(
        "#!/bin/bash\n"
        f"#SBATCH -J {name} --gres={gres} -c 2 --mem=4G -o /dev/null\n"
        f"#MOSAIC --model resnet50 --duration-s 600 {directives}\n"
        "trap '' USR1\n"
        f"exec {sys.executable} -m slurm_plugin.emulate --duration-s 600 --time-scale 10\n"
    )
    return path


def _occupy_all_but_one_gpu(cluster: lifecycle.Cluster) -> None:
    """Outside jobs on n1's GPUs 0-2 and all of n2's: one free GPU (n1) is left."""
    for node, gpus in (("n1", 3), ("n2", 4)):
        run(
            ["sbatch", "-p", "other", "-w", node, f"--gres=gpu:{gpus}", "-c", "2", "--mem=2G",
             "-o", "/dev/null", "--wrap", "sleep 300"],
            env=cluster.env,
        )  # fmt: skip


def _ticks_until(ctl, config: ControllerConfig, ids: list[str], timeout_s: float = 60.0) -> None:
    def all_running() -> bool:
        ctl.tick()
        current = jobs(config)
        return all(current.get(j) is not None and current[j].state == "RUNNING" for j in ids)

    wait_for(f"jobs {ids} running", all_running, timeout_s)


def test_two_jobs_planned_onto_one_gpu_share_it_on_shards(shard_cluster, tmp_path):
    config = config_for(shard_cluster, tmp_path / "spool")
    _occupy_all_but_one_gpu(shard_cluster)
    wait_for(
        "outside jobs running",
        lambda: sum(j.state == "RUNNING" for j in jobs(config).values()) == 2,
    )
    first = submit_job(config, _shard_script(tmp_path, "first"))
    second = submit_job(config, _shard_script(tmp_path, "second", "--global-batch-size 256"))
    ctl = controller(config, "sjf-ffs")
    try:
        _ticks_until(ctl, config, [first, second])
        envs = [wait_started(config, j)["env"] for j in (first, second)]
        assert envs[0]["SLURMD_NODENAME"] == envs[1]["SLURMD_NODENAME"] == "n1"
        assert envs[0]["CUDA_VISIBLE_DEVICES"] == envs[1]["CUDA_VISIBLE_DEVICES"] == "3"
        current = jobs(config)
        assert (current[first].shards_per_node, current[second].shards_per_node) == (1, 1)
        # The next round sees the pair from Slurm's allocation and leaves it alone.
        snapshot = {j.id: j for j in ctl.observe().snapshot.jobs}
        assert snapshot[first].assignment.shares_with == (second,)
        assert snapshot[second].assignment.shares_with == (first,)
        report = ctl.tick()
        assert [a for a in report.actions if a["kind"] != "hold"] == []
        # The plan file carries the assignment the planner made, partners and plan included.
        document = planfile.read_plan(config.spool_dir, second)
        assert document is not None
        assignment = document["assignment"]
        assert assignment["shares_with"] == [first]
        # It shares with accumulation: the same global batch in smaller steps (SJF-BSBF §IV).
        plan = assignment["plan"]
        assert plan["grad_accum"] > 1 and plan["micro_batch"] * plan["grad_accum"] == 256
    finally:
        run(["scancel", "--user=root"], env=shard_cluster.env, check=False)
        lifecycle.wait_jobs_gone(shard_cluster, 20.0)


def test_a_gpu_job_planned_onto_a_shared_gpu_is_refused_with_the_reason(shard_cluster, tmp_path):
    config = config_for(shard_cluster, tmp_path / "spool")
    _occupy_all_but_one_gpu(shard_cluster)
    wait_for(
        "outside jobs running",
        lambda: sum(j.state == "RUNNING" for j in jobs(config).values()) == 2,
    )
    host = submit_job(config, _shard_script(tmp_path, "host"))
    guest = submit_job(config, _shard_script(tmp_path, "guest", gres="gpu:1"))
    ctl = controller(config, "sjf-ffs")
    try:
        _ticks_until(ctl, config, [host])
        wait_for("a refused start", lambda: _refusal(ctl, guest))
        assert jobs(config)[guest].state == "PENDING"
    finally:
        run(["scancel", "--user=root"], env=shard_cluster.env, check=False)
        lifecycle.wait_jobs_gone(shard_cluster, 20.0)


def _refusal(ctl, job_id: str) -> str | None:
    report = ctl.tick()
    for request_id, why in report.result.skipped if report.result else []:
        if request_id.endswith(f"-start-{job_id}") and "--gres=gpu" in why:
            return why
    return None
