"""The live test cluster: one real Slurm cluster per test session (``slurm_cluster``).

Tests that need it are skipped, with the reason, where Slurm cannot run: not root, or
Debian's Slurm packages missing (``contrib/setup.sh`` installs them as root).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_plugin.slurm.runner import run
from slurm_plugin.testcluster import install, lifecycle
from slurm_plugin.testcluster.shapes import shape_named


def _why_no_slurm() -> str | None:
    if os.geteuid() != 0:
        return "the live Slurm test cluster needs root (private munged, slurmd as root)"
    missing = install.missing_programs(accounting=True)
    if missing:
        return f"Slurm is not installed (missing {', '.join(missing)}; run contrib/setup.sh as root)"
    return None


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[lifecycle.Cluster]:
    why = _why_no_slurm()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("slurm") / "cluster"
    # With accounting (MariaDB + slurmdbd, ~4 s more) so that sacct and `mosaic report` work.
    cluster = lifecycle.up(shape_named("homogeneous", accounting=True), root)
    try:
        yield cluster
    finally:
        lifecycle.down(root)


@pytest.fixture
def live(slurm_cluster: lifecycle.Cluster, tmp_path: Path) -> Iterator[lifecycle.Cluster]:
    """The session's cluster, emptied of jobs after the test."""
    yield slurm_cluster
    run(["scancel", "--user=root"], env=slurm_cluster.env, check=False)
    lifecycle.wait_jobs_gone(slurm_cluster, 20.0)
    run(["squeue", "-h", "-o", "%i"], env=slurm_cluster.env)
