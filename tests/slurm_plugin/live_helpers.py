"""Helpers for the tests that drive the real test cluster."""

from __future__ import annotations

import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from planner.config import build_scheduler, preset
from slurm_plugin import planfile
from slurm_plugin.controller.config import ControllerConfig
from slurm_plugin.controller.loop import Controller
from slurm_plugin.slurm.backend import CliSlurm
from slurm_plugin.slurm.parse import SlurmJob
from slurm_plugin.store import Store
from slurm_plugin.submit import submit
from slurm_plugin.testcluster import lifecycle
from slurm_plugin.testcluster.lifecycle import Cluster
from slurm_plugin.testcluster.shapes import shape_named
from tests.conftest import why_no_slurm


@contextmanager
def cluster_in(root: Path, shape: str = "homogeneous") -> Iterator[Cluster]:
    """A test cluster brought up in ``root`` and down again on exit. Brought up a second time
    in the same ``root``, slurmctld starts on fresh state (job ids from 1, no job listed).
    Skips the test where this machine cannot run Slurm."""
    why = why_no_slurm()
    if why:
        pytest.skip(why)
    cluster = lifecycle.up(shape_named(shape), root)
    try:
        yield cluster
    finally:
        lifecycle.down(root)


def config_for(cluster: Cluster, spool: Path, **changes: Any) -> ControllerConfig:
    values: dict[str, Any] = {
        "spool_dir": spool,
        "slurm_conf": str(cluster.layout.conf),
        "checkpoint_grace_s": 10.0,
        "stop_timeout_s": 30.0,
        "metrics_file": "metrics.prom",
    }
    values.update(changes)
    return ControllerConfig(**values)


def controller(config: ControllerConfig, preset_name: str = "fifo", **kwargs: Any) -> Controller:
    client = CliSlurm(config.slurm_env, timeout_s=config.command_timeout_s)
    return Controller(
        client, Store(config.store_path), config, build_scheduler(preset(preset_name)), **kwargs
    )


def write_script(
    directory: Path,
    name: str,
    gpus: int,
    *,
    duration_s: float = 600.0,
    time_scale: float = 10.0,
    directives: str = "",
    partition: str | None = None,
    exit_on_checkpoint: bool = False,
) -> Path:
    path = directory / f"{name}.sh"
    sbatch = f"#SBATCH -J {name} --gres=gpu:{gpus} -c {2 * gpus} --mem={4 * gpus}G -o /dev/null"
    if partition:
        sbatch += f" -p {partition}"
    path.write_text(
        "#!/bin/bash\n"
        f"{sbatch}\n"
        f"#MOSAIC --model resnet50 --duration-s {duration_s:g} {directives}\n"
        "trap '' USR1\n"  # a checkpoint signal before the emulator's handler is up must not kill it
        f"exec {sys.executable} -m slurm_plugin.emulate --duration-s {duration_s:g} "
        f"--time-scale {time_scale:g}" + (" --exit-on-checkpoint\n" if exit_on_checkpoint else "\n")
    )
    return path


def submit_job(config: ControllerConfig, script: Path, *extra: str) -> str:
    return submit(CliSlurm(config.slurm_env), script, list(extra), config.spool_dir)


def jobs(config: ControllerConfig) -> dict[str, SlurmJob]:
    return {j.id: j for j in CliSlurm(config.slurm_env).jobs()}


def wait_for(what: str, predicate: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def wait_state(config: ControllerConfig, job_id: str, state: str, timeout_s: float = 30.0) -> SlurmJob:
    def check() -> SlurmJob | None:
        j = jobs(config).get(job_id)
        return j if j is not None and j.state == state else None

    result: SlurmJob = wait_for(f"job {job_id} {state}", check, timeout_s)
    return result


def starts(config: ControllerConfig, job_id: str) -> list[dict[str, Any]]:
    """The job's 'start' heartbeats: one per run, each with the environment Slurm gave it."""
    return [r for r in planfile.read_heartbeats(config.spool_dir, job_id) if r.get("event") == "start"]


def wait_started(config: ControllerConfig, job_id: str, runs: int = 1) -> dict[str, Any]:
    records = wait_for(f"job {job_id} run {runs} started", lambda: len(starts(config, job_id)) >= runs)
    assert records
    return starts(config, job_id)[runs - 1]


def system_user(name: str, own_group: bool = False) -> pwd.struct_passwd:
    """A non-root system account the live tests act as (created when absent; needs root);
    ``own_group``: with a group of its own name."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    if shutil.which("useradd") is None:
        pytest.skip(f"no useradd to create the account {name}")
    group = ["--user-group"] if own_group else []
    subprocess.run(
        ["useradd", "--system", "--no-create-home", *group, "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
    )
    return pwd.getpwnam(name)
